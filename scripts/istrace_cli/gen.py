"""`istrace gen ...`: runs the C pseudo-initiator (initiator-gen/istrace-gen) in place."""

from __future__ import annotations

import os
import sys

from istrace_cli import paths


def main(argv: list[str]) -> int:
    try:
        exe = paths.binary("istrace-gen")
    except paths.MissingBinary as exc:
        print(f"istrace gen: {exc}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(str(exe), [str(exe), *argv])
    return 0  # not reached: execv replaces this process
