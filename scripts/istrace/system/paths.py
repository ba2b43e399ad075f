"""Where istrace's own files and built binaries are."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

# scripts/istrace/system/paths.py -> repository root (editable install keeps sources in place).
REPO_ROOT = Path(os.environ.get("ISTRACE_ROOT", Path(__file__).resolve().parents[3]))

# Built binaries sit in the part's folder; an installed copy on PATH is the fallback.
_BINARIES = {
    "istrace-decode": REPO_ROOT / "decoder" / "istrace-decode",
    "istrace-gen": REPO_ROOT / "initiator-gen" / "istrace-gen",
    "istrace-probe": REPO_ROOT / "bpf" / "istrace-probe",
}


class MissingBinary(RuntimeError):
    pass


def binary(name: str) -> Path:
    """Path of a built istrace binary; raises with a build hint when it is absent."""
    local = _BINARIES.get(name)
    if local is not None and local.is_file() and os.access(local, os.X_OK):
        return local
    found = shutil.which(name)
    if found:
        return Path(found)
    raise MissingBinary(f"{name} is not built: run `make` in {REPO_ROOT}")


def exec_binary(name: str, argv: list[str], command: str) -> int:
    """Replace this process with a built istrace binary, so pipes, signals and exit codes
    are the binary's own. Returns 2 (with a build hint) only when the binary is absent."""
    try:
        exe = binary(name)
    except MissingBinary as exc:
        print(f"istrace {command}: {exc}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(str(exe), [str(exe), *argv])
    return 2  # not reached
