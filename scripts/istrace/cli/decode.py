"""`istrace decode ...`: runs the C decoder, istrace-decode, with the same arguments."""

from __future__ import annotations

from istrace.system import paths


def main(argv: list[str]) -> int:
    return paths.exec_binary("istrace-decode", argv, "decode")
