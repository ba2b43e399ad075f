"""The kernel filesystems istrace needs, set up by istrace itself on a fresh machine.

A fresh Debian machine (or a container) may have neither tracefs nor debugfs mounted; the
tracepoint paths of bpftrace and of istrace-probe's fallback need tracefs. Mount it where the
kernel expects it when we may (root), otherwise say in one line what is missing and the fix.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TRACEFS = Path("/sys/kernel/tracing")
TRACEFS_VIA_DEBUGFS = Path("/sys/kernel/debug/tracing")


class MachineSetupError(RuntimeError):
    """Something the machine lacks that istrace could not set up; the message says the fix."""


def tracefs_root() -> Path | None:
    """Where tracefs is mounted now (its events/ folder is there), or None."""
    for root in (TRACEFS, TRACEFS_VIA_DEBUGFS):
        if (root / "events").is_dir():
            return root
    return None


def ensure_tracefs() -> Path:
    """tracefs's mount point, mounting it at /sys/kernel/tracing first when it is absent."""
    root = tracefs_root()
    if root is not None:
        return root
    fix = f"mount -t tracefs nodev {TRACEFS}"
    if os.geteuid() != 0:
        raise MachineSetupError(f"tracefs is not mounted and only root may mount it: {fix}")
    if not TRACEFS.is_dir():
        raise MachineSetupError(f"{TRACEFS} does not exist: this kernel has no tracefs "
                                "(CONFIG_TRACING); tracepoint hooks are unavailable")
    r = subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0 or tracefs_root() is None:
        raise MachineSetupError(f"tracefs is not mounted and mounting it failed "
                                f"({r.stderr.strip() or 'no events/ after mount'}): {fix}")
    print(f"istrace: mounted tracefs at {TRACEFS} (it was not mounted)", file=sys.stderr)
    return TRACEFS
