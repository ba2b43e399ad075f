"""`istrace report DIR` -> DIR/report.html (self-contained, plots embedded) + DIR/trace.json.

Runs what it can: merge (`istrace merge`, when merged.parquet is absent and the pcaps or
probe events are there; --no-merge: not), decode (if the decoder is built and pdus.csv is
absent), track, every plot;
then writes the diagnosis the study drew by hand, in words and numbers, saying which inputs
were missing and warning loudly about capture drops. A directory it cannot write is analysed
in its cache (istrace.capture.place), named in one line; one report at a time on a directory
(a second waits, istrace.capture.lock).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from istrace.capture import decoderun, layout, stamps
from istrace.capture.meta import capture_ports
from istrace.cli.analysis_args import analyse, parse, ports_of
from istrace.system.paths import MissingBinary


def _merge_first(d: Path, ports: tuple[int, ...] | None, why: str,
                 decoding: dict[str, decoderun.Decoding] | None) -> None:
    """`istrace merge d` first, when d has no merged.parquet and has what a merge reads (a
    pcap or a probe event stream): one interpreter for both steps, not two loading the same
    libraries (a second of a 4 GB capture's twelve). A merge that fails leaves the report to
    align the layers from the raw tables, as without merge.
    The merge itself runs in a forked process (its decoders finished here, where they were
    started): the memory it frees stays resident, fragmented, in the process that ran it,
    and the report's processes, forked from this one, would each start with it (12 MB more
    in every one of them on a full-rate minute)."""
    from istrace.cli.merge import summary
    from istrace.merge.merger import MergeError, finish_decoding, merge_dir
    from istrace.system import forked

    print(f"report: {why}: merging " + ("first" if why.startswith("no ") else "again")
          + " (istrace merge)", file=sys.stderr)
    t0 = time.monotonic()
    try:
        decoded = finish_decoding(d, ports, decoding=decoding)
        r = forked.start(lambda: merge_dir(d, ports, decoded=decoded), nested=True)()
    except (MergeError, OSError, ValueError, forked.ChildFailed) as exc:
        print(f"report: merge failed, layers aligned from the raw tables: {exc}",
              file=sys.stderr)
        return
    for line in summary(r, time.monotonic() - t0):
        print(f"merge: {line}", file=sys.stderr)


def _start_decoders(d: Path, ports: tuple[int, ...]) -> dict[str, decoderun.Decoding] | None:
    """The decoders of the pcaps not decoded yet, started before the analysis imports its
    libraries (pandas, pyarrow: 0.6 s), which load while they run. Any trouble starting
    them is the merge's to report: it starts them itself then."""
    try:
        return decoderun.start_missing(d, ports)
    except (MissingBinary, OSError):
        return None


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="istrace report", description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="capture directory")
    ap.add_argument("--out", help="HTML file (default DIR/report.html)")
    ap.add_argument("--no-merge", action="store_true",
                    help="do not run istrace merge first when merged.parquet is absent")
    args = parse(ap, argv)
    return analyse("istrace report", args.dir, lambda work: _report(work, args))


def _report(d: Path, args: argparse.Namespace) -> int:
    why = None if args.no_merge or not layout.has_capture_input(d) else stamps.merge_state(d)
    merging = why is not None
    decoding = _start_decoders(d, capture_ports(d, ports_of(args))) if merging else None
    try:
        # the analysis' libraries imported while the decoders run
        from istrace.capture.load import EmptyCapture
        from istrace.report.html import report

        if merging:
            _merge_first(d, ports_of(args), str(why), decoding)
    finally:
        for run in (decoding or {}).values():
            run.cancel()  # those the merge did not finish (it failed or was interrupted)
    try:
        path, diag = report(d, Path(args.out) if args.out else None, ports=ports_of(args))
    except EmptyCapture as exc:
        print(f"istrace report: {exc}", file=sys.stderr)
        return 2
    for w in diag["warnings"]:
        if not stamps.said(w):  # said when it was found
            print(f"WARNING: {w}", file=sys.stderr)
    for f in diag["verdict_lines"] + diag["findings"]:
        print(f"- {f}")
    for m in diag["missing"]:
        print(f"missing: {m}")
    print(f"wrote {path}")
    return 0
