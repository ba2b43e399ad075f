"""`istrace gen ...`: runs the C pseudo-initiator (initiator-gen/istrace-gen) in place."""

from __future__ import annotations

from istrace.system import paths


def main(argv: list[str]) -> int:
    return paths.exec_binary("istrace-gen", argv, "gen")
