"""`istrace report DIR` -> DIR/report.html (self-contained, plots embedded) + DIR/trace.json.

Runs what it can: decode (if the decoder is built and pdus.csv is absent), track, every plot;
then writes the diagnosis the study drew by hand, in words and numbers, saying which inputs
were missing and warning loudly about capture drops.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from istrace.capture.load import EmptyCapture
from istrace.cli.analysis_args import capture_dir, parse, ports_of
from istrace.report.html import report


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="istrace report", description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="capture directory")
    ap.add_argument("--out", help="HTML file (default DIR/report.html)")
    args = parse(ap, argv)
    d = capture_dir("istrace report", args.dir)
    if d is None:
        return 2
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
