"""The --port option of the analysis commands (report, plot, track, merge, compare)."""

from __future__ import annotations

import argparse


def _port(text: str) -> int:
    try:
        p = int(text)
    except ValueError:
        p = 0
    if not 0 < p < 65536:
        raise argparse.ArgumentTypeError(f"{text!r}: a TCP port is 1..65535")
    return p


def add_port_arg(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--port", type=_port, action="append", metavar="N",
                    help="iSCSI target TCP port (repeatable; default: the portal meta.json "
                         "recorded, else 3260)")


def ports_of(a: argparse.Namespace) -> tuple[int, ...] | None:
    """The ports given, or None: the capture's own (meta.json) then."""
    return tuple(a.port) if a.port else None
