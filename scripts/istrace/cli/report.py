"""`istrace report DIR` -> DIR/report.html (self-contained, plots embedded) + DIR/trace.json.

Runs what it can: merge (`istrace merge`, when merged.parquet is absent and the pcaps or
probe events are there; --no-merge: not), decode (if the decoder is built and pdus.csv is
absent), track, every plot;
then writes the diagnosis the study drew by hand, in words and numbers, saying which inputs
were missing and warning loudly about capture drops.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from istrace.capture import layout
from istrace.capture.load import EmptyCapture
from istrace.cli.analysis_args import capture_dir, parse, ports_of
from istrace.cli.merge import summary
from istrace.merge.merger import MergeError, merge_dir
from istrace.report.html import report


def _merge_first(d: Path, ports: tuple[int, ...] | None) -> None:
    """`istrace merge d` here, when d has no merged.parquet and has what a merge reads (a
    pcap or a probe event stream): one process for both steps, not two interpreters loading
    the same tables (a second of a 4 GB capture's twelve). A merge that fails leaves the
    report to align the layers from the raw tables, as without merge."""
    if (d / layout.MERGED).is_file() or not layout.has_capture_input(d):
        return
    print("report: no merged.parquet: merging first (istrace merge)", file=sys.stderr)
    t0 = time.monotonic()
    try:
        r = merge_dir(d, ports)
    except (MergeError, OSError, ValueError) as exc:
        print(f"report: merge failed, layers aligned from the raw tables: {exc}",
              file=sys.stderr)
        return
    for line in summary(r, time.monotonic() - t0):
        print(f"merge: {line}", file=sys.stderr)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="istrace report", description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="capture directory")
    ap.add_argument("--out", help="HTML file (default DIR/report.html)")
    ap.add_argument("--no-merge", action="store_true",
                    help="do not run istrace merge first when merged.parquet is absent")
    args = parse(ap, argv)
    d = capture_dir("istrace report", args.dir)
    if d is None:
        return 2
    if not args.no_merge:
        _merge_first(d, ports_of(args))
    try:
        path, diag = report(d, Path(args.out) if args.out else None, ports=ports_of(args))
    except EmptyCapture as exc:
        print(f"istrace report: {exc}", file=sys.stderr)
        return 2
    for w in diag["warnings"]:
        print(f"WARNING: {w}", file=sys.stderr)
    for f in diag["findings"]:
        print(f"- {f}")
    for m in diag["missing"]:
        print(f"missing: {m}")
    print(f"wrote {path}")
    return 0
