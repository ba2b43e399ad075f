"""What the analysis commands (report, plot, track, merge, compare) share on their command
line: the --port option, the check that a capture directory exists, and where the derived
files go (the capture directory, or its cache when it cannot be written), under its lock."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from istrace.capture import layout, lock, place


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


def parse(ap: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The command's own options plus --port, parsed."""
    add_port_arg(ap)
    return ap.parse_args(argv)


def ports_of(a: argparse.Namespace) -> tuple[int, ...] | None:
    """The ports given, or None: the capture's own (meta.json) then."""
    return tuple(a.port) if a.port else None


def capture_dir(prog: str, text: str) -> Path | None:
    """`text` as a directory, or None after one line on stderr saying it is not one."""
    d = Path(text)
    if not d.is_dir():
        print(f"{prog}: {d}: not a directory", file=sys.stderr)
        return None
    return d


class NoPlace(Exception):
    """The derived files have nowhere to go (said in one line already)."""


@contextmanager
def working(prog: str, d: Path, into_capture: bool = True) -> Iterator[Path]:
    """The directory to analyse d in (place.analysis_dir, named in one line when it is not
    d), held alone for the block (lock.held). NoPlace when the cache cannot be made. A
    directory with nothing to analyse is given back as it is, for the command to refuse:
    nothing is made in it or for it."""
    if not layout.has_capture_input(d):
        yield d
        return
    try:
        work, note = place.analysis_dir(d, into_capture)
    except OSError as exc:
        print(f"{prog}: {d} is not writable and its cache cannot be made ({exc}): give a "
              "writable XDG_CACHE_HOME", file=sys.stderr)
        raise NoPlace from exc
    if note:
        print(f"{prog}: {note}", file=sys.stderr)
    with lock.held(work, prog):
        yield work


def analyse(prog: str, text: str, run: Callable[[Path], int]) -> int:
    """run(the directory to work in) for the capture directory `text`, under its lock; 2
    after one line when `text` is no directory or the derived files have nowhere to go."""
    d = capture_dir(prog, text)
    if d is None:
        return 2
    try:
        with working(prog, d) as work:
            return run(work)
    except NoPlace:
        return 2
