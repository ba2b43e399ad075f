"""`istrace compare A B [C ...]`: captures side by side (throughput, latency per layer, the
verdict and its shares, the settings that differ) as a plain-text table and one HTML page.

What it derives (decoded tables, the tracker's, a verdict) goes to each capture's cache
directory (istrace.capture.place), never into the captures, unless --write asks for them
there (a directory that cannot be written still gets its cache). A capture without what a
measure needs says so in one line, and its column says "missing"."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from istrace.capture.load import EmptyCapture
from istrace.cli.analysis_args import NoPlace, working
from istrace.report.compare import lacking, summarize, text_table, write_html


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="istrace compare",
                                 description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("dirs", nargs="+", help="capture directories (the first is the baseline)")
    ap.add_argument("--html", help="HTML page to write (default: compare.html in the current "
                                   "directory)", default="compare.html")
    ap.add_argument("--write", action="store_true",
                    help="write what is derived (decoded tables, track.parquet, verdict.json) "
                         "into the capture directories (default: their cache directories)")
    args = ap.parse_args(argv)
    if len(args.dirs) < 2:
        print("istrace compare: give at least two capture directories", file=sys.stderr)
        return 2
    sums = []
    for i, d in enumerate(args.dirs, 1):
        p = Path(d)
        print(f"compare: [{i}/{len(args.dirs)}] {p} ...", file=sys.stderr)
        if not p.is_dir():
            print(f"istrace compare: {p}: not a directory", file=sys.stderr)
            return 2
        try:
            with working("istrace compare", p, into_capture=args.write) as work:
                s = summarize(work)
        except EmptyCapture as exc:
            print(f"istrace compare: {exc}", file=sys.stderr)
            return 2
        except NoPlace:
            return 2
        s["name"], s["dir"] = p.resolve().name or str(p), str(p)
        for line in lacking(s):
            print(f"istrace compare: {p}: {line}", file=sys.stderr)
        sums.append(s)
    names = [s["name"] for s in sums]
    for i, s in enumerate(sums):  # same folder names from different parents stay apart
        if names.count(s["name"]) > 1:
            s["name"] = f"{s['name']}#{i + 1}"
    print(text_table(sums))
    path = write_html(sums, Path(args.html))
    print(f"wrote {path}")
    return 0
