"""`istrace plot DIR --kind ladder|tcpseq|cwnd|timeline|throughput|resptime|outstanding|all`.

Reads a capture directory (whatever it holds, see istrace.capture.load), writes PNG + SVG per
plot into DIR/plots/ (or --out), and prints what it made and what input was missing. The
tracker's tables it plots from are written beside the capture's (DIR/track.parquet and the
rest, as `istrace track` writes them), not held in memory: a sample per packet. A directory it
cannot write is analysed in its cache (istrace.capture.place), named in one line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from istrace.capture import layout
from istrace.capture.load import EmptyCapture
from istrace.cli.analysis_args import analyse, parse, ports_of
from istrace.plot.render import KINDS, make_plots
from istrace.track.of_capture import load_tracked


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="istrace plot", description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="capture directory")
    ap.add_argument("--kind", default="all", help=", ".join(KINDS) + " or all (comma list ok)")
    ap.add_argument("--out", help="output folder (default DIR/plots)")
    ap.add_argument("--window", help="time window START_MS:END_MS from the first record")
    ap.add_argument("--no-svg", action="store_true", help="PNG only")
    args = parse(ap, argv)
    kinds = KINDS if args.kind == "all" else [k.strip() for k in args.kind.split(",")]
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        print(f"istrace plot: unknown kind {bad[0]!r} (choose from {', '.join(KINDS)}, all)",
              file=sys.stderr)
        return 2
    return analyse("istrace plot", args.dir, lambda work: _plot(work, args, kinds))


def _plot(d: Path, args: argparse.Namespace, kinds: list[str]) -> int:
    print(f"loading {d} ...", file=sys.stderr)
    try:
        cap = load_tracked(d, ports=ports_of(args), to_file=True)
    except EmptyCapture as exc:
        print(f"istrace plot: {exc}", file=sys.stderr)
        return 2
    for m in cap.missing:
        print(f"missing: {m}", file=sys.stderr)
    for w in cap.warnings:
        print(f"WARNING: {w}", file=sys.stderr)
    try:
        made = make_plots(cap, Path(args.out) if args.out else d / layout.PLOTS, kinds, args.window,
                          ("png",) if args.no_svg else ("png", "svg"))
    except ValueError as exc:
        print(f"istrace plot: {exc}", file=sys.stderr)
        return 2
    for kind, paths in made.items():
        print(f"{kind}: " + ", ".join(str(p) for p in paths))
    return 0
