"""`istrace probe`: attach the BPF probes and stream events (runs bpf/istrace-probe), or run
one of the bpftrace quick looks: `istrace probe --script cwnd [bpftrace args]`.

The loader's options are its own (`istrace probe --help` prints them). The bpftrace scripts
need tracefs, which this mounts first when the machine has not (istrace.system.kernelfs).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from istrace.system.kernelfs import MachineSetupError, ensure_tracefs
from istrace.system.paths import REPO_ROOT, exec_binary

SCRIPT_DIRS = (REPO_ROOT / "bpf", Path(sys.prefix) / "share/istrace/bpftrace",
               Path("/usr/local/share/istrace/bpftrace"))


def script_path(name: str) -> Path | None:
    """A bpftrace quick look by name (`cwnd` or `cwnd.bt`), from the tree or the install."""
    file = name if name.endswith(".bt") else f"{name}.bt"
    for d in SCRIPT_DIRS:
        if (d / file).is_file():
            return d / file
    return None


def scripts() -> list[str]:
    names = {p.stem for d in SCRIPT_DIRS if d.is_dir() for p in d.glob("*.bt")}
    return sorted(names)


def run_script(name: str, args: list[str]) -> int:
    path = script_path(name)
    if path is None:
        print(f"istrace probe: no bpftrace script {name!r} (have: {', '.join(scripts())})",
              file=sys.stderr)
        return 2
    bpftrace = shutil.which("bpftrace")
    if bpftrace is None:
        print("istrace probe: bpftrace is not installed (`make deps` installs it)",
              file=sys.stderr)
        return 2
    try:
        ensure_tracefs()
    except MachineSetupError as exc:
        print(f"istrace probe: {exc}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(bpftrace, [bpftrace, *args, str(path)])
    return 2  # not reached


def main(argv: list[str]) -> int:
    if argv[:1] == ["--list-scripts"]:
        print("\n".join(scripts()))
        return 0
    if argv[:1] == ["--script"]:
        if len(argv) < 2:
            print(f"istrace probe: --script NAME ({', '.join(scripts())})", file=sys.stderr)
            return 2
        if os.geteuid() != 0:
            print("istrace probe: needs root (BPF)", file=sys.stderr)
            return 2
        return run_script(argv[1], argv[2:])
    if os.geteuid() != 0 and not any(a in ("-h", "--help", "--list-hooks") for a in argv):
        print("istrace probe: needs root (BPF)", file=sys.stderr)
        return 2
    return exec_binary("istrace-probe", argv, "probe")
