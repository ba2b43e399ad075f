"""`istrace decode ...`: runs the C decoder, istrace-decode, with the same arguments."""

from __future__ import annotations

import os
import sys

from istrace_cli import paths


def main(argv: list[str]) -> int:
    try:
        exe = paths.binary("istrace-decode")
    except paths.MissingBinary as exc:
        print(f"istrace decode: {exc}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    # Replace this process so pipes, signals and exit codes are the decoder's own.
    os.execv(str(exe), [str(exe), *argv])
    return 2  # not reached
