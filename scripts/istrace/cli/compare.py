"""`istrace compare A B [C ...]`: captures side by side (throughput, latency per layer, the
verdict and its shares, the settings that differ) as a plain-text table and one HTML page."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from istrace.capture.load import EmptyCapture
from istrace.report.compare import summarize, text_table, write_html


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="istrace compare",
                                 description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("dirs", nargs="+", help="capture directories (the first is the baseline)")
    ap.add_argument("--html", help="HTML page to write (default: compare.html in the current "
                                   "directory)", default="compare.html")
    args = ap.parse_args(argv)
    if len(args.dirs) < 2:
        print("istrace compare: give at least two capture directories", file=sys.stderr)
        return 2
    sums = []
    for i, d in enumerate(args.dirs, 1):
        p = Path(d)
        print(f"compare: [{i}/{len(args.dirs)}] {p} ...", file=sys.stderr)
        try:
            sums.append(summarize(p))
        except EmptyCapture as exc:
            print(f"istrace compare: {exc}", file=sys.stderr)
            return 2
    names = [s["name"] for s in sums]
    for i, s in enumerate(sums):  # same folder names from different parents stay apart
        if names.count(s["name"]) > 1:
            s["name"] = f"{s['name']}#{i + 1}"
    print(text_table(sums))
    path = write_html(sums, Path(args.html))
    print(f"wrote {path}")
    return 0
