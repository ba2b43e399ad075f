"""`istrace merge DIR`: both hosts' events, PDUs and segments in one table on one clock."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from pathlib import Path

from istrace.capture import clockfile, layout
from istrace.cli.analysis_args import analyse, parse, ports_of
from istrace.merge.merger import MergeError, MergeResult, merge_dir


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="istrace merge",
        description="Merge DIR/events-{initiator,target}.jsonl, DIR/{initiator,target}.pcap and "
                    "their decodes into DIR/merged.parquet, DIR/clock.json and, up to a million "
                    "rows, DIR/merged.csv.")
    ap.add_argument("dir", type=Path)
    ap.add_argument("--offset-ns", type=int, default=None,
                    help="use this clock offset (target minus initiator) instead of estimating")
    csv = ap.add_mutually_exclusive_group()
    csv.add_argument("--csv", dest="csv", action="store_const", const=True, default=None,
                     help="write merged.csv whatever its size")
    csv.add_argument("--no-csv", dest="csv", action="store_const", const=False,
                     help="write only merged.parquet")
    a = parse(ap, argv)
    return analyse("istrace merge", str(a.dir), lambda work: _merge(work, a))


def _merge(d: Path, a: argparse.Namespace) -> int:
    t0 = time.monotonic()
    try:
        r = merge_dir(d, ports_of(a), a.offset_ns, a.csv)
    except (MergeError, OSError, ValueError) as exc:
        print(f"istrace merge: {exc}", file=sys.stderr)
        return 1
    for line in summary(r, time.monotonic() - t0):
        print(line)
    csv = (d / layout.MERGED_CSV).is_file()
    print(f"wrote {d / layout.MERGED}" + (", merged.csv" if csv else "") + ", clock.json")
    return 0


def summary(r: MergeResult, seconds: float) -> list[str]:
    """What a merge says it did: the clock, its notes, the rows per layer, events lost."""
    out = []
    c = r.clock
    out.append("clock: " + clockfile.describe(asdict(c)))
    if c.note:
        out.append(f"clock: {c.note}")
    out += [f"note: {n}" for n in r.notes]
    layers = ", ".join(f"{k} {v}" for k, v in sorted(r.counts.items()))
    out.append(f"merged {r.rows} rows in {seconds:.1f} s: {layers}")
    out.append(f"lost events: initiator {r.lost.get('initiator', 0)}, "
               f"target {r.lost.get('target', 0)}")
    return out
