"""`istrace track DIR|PCAP [--out track.parquet]`: TCP cwnd/state time series per connection.

From a capture directory (docs/schema.md; `istrace capture --out DIR`) it uses, when present:
probe events (events-*.jsonl/csv, exact), target.pcap for the target's sending direction (t2i)
and initiator.pcap for the initiator's (i2t), each direction tracked at its sender's capture
point; decoded PDUs (pdus.csv) to say which command each loss hit. Given one pcap it tracks both
directions from that single capture point.

Writes three tables: the samples (--out, default DIR/track.parquet), and beside it
<stem>_states.parquet (CA-state intervals) and <stem>_events.parquet (retransmit/dupack/loss
marks); CSV all three when --out ends in .csv. A directory it cannot write is read, and its
decoded tables and default output made, in its cache (istrace.capture.place), named in one line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import cast

import pandas as pd
from istrace.capture import layout, place
from istrace.capture.decoded import DecodeError, conn_and_dir, load_segments, read_table
from istrace.capture.load import EmptyCapture, load_capture
from istrace.capture.meta import DEFAULT_PORT
from istrace.capture.outputs import write_track_tables
from istrace.cli.analysis_args import NoPlace, parse, ports_of, working
from istrace.system.paths import MissingBinary
from istrace.track import tracker as track
from istrace.track.of_capture import track_capture


def summary(res: track.TrackResult) -> str:
    s = res.samples
    lines = []
    if s.empty:
        lines.append("no TCP data found")
    series = sorted({(k.conn, k.dir, k.source) for k, _ in s.keys()})
    for conn, d, src in series:
        where = {"conn": conn, "dir": d, "source": src}
        part = [f"{conn} {d} [{src}] {s.rows(**where)} samples"]
        top = {c: max((float(v.max()) for v in s.values(c, **where) if len(v)), default=None)
               for c in ("cwnd", "inflight_bytes")}
        if top["cwnd"] is not None:
            part.append(f"cwnd max {top['cwnd']:.0f} seg")
        if top["inflight_bytes"] is not None:
            part.append(f"in flight max {top['inflight_bytes'] / 1024:.0f} KiB")
        rtt = s.order_stats("rtt_us", (), **where)
        if rtt.n:
            part.append(f"RTT median {rtt.median:.0f} us")
        elif (srtt := s.order_stats("srtt_us", (), **where)).n:
            part.append(f"srtt median {srtt.median:.0f} us")
        lines.append(", ".join(part))
    ev = res.events.read(["dir", "kind"])
    if not ev.empty:
        counts = cast("Iterable[tuple[tuple[str, str], int]]",  # keyed by (dir, kind)
                      ev.groupby(["dir", "kind"], observed=True).size().items())
        lines.append("marks: " + ", ".join(f"{d} {k}={n}" for (d, k), n in counts))
    st = track.state_time(res)
    for _, r in st[st["state"] != "Open"].iterrows():
        lines.append(f"state {r['state']} ({r['source']}, {r['dir']}): {r['intervals']} "
                     f"intervals, {r['total_ns'] / 1e6:.2f} ms")
    lines += [f"note: {n}" for n in res.notes]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="istrace track", description=__doc__.split("\n")[0])
    ap.add_argument("input", help="capture directory or a pcap/pcapng file")
    ap.add_argument("--out", help="samples table, Parquet or .csv (default DIR/track.parquet "
                    "or PCAP-stem.track.parquet)")
    ap.add_argument("--pdus", help="pdus.csv to tie losses to commands")
    ap.add_argument("--host", default="initiator", help="capture point of a single pcap")
    args = parse(ap, argv)
    src = Path(args.input)
    pdus = None
    if args.pdus:
        try:
            pdus = read_table(args.pdus)
        except (OSError, ValueError) as exc:
            print(f"istrace track: {args.pdus}: {exc}", file=sys.stderr)
            return 2
    try:
        if src.is_dir():
            with working("istrace track", src) as work:
                return _track_dir(work, args, pdus)
        elif src.is_file():
            segs = conn_and_dir(load_segments(src), ports_of(args) or (DEFAULT_PORT,))
            res = track.track_pcap(segs, pdus, host=args.host)
            out = Path(args.out) if args.out else _beside(src)
        else:
            print(f"istrace track: {src}: no such file or directory", file=sys.stderr)
            return 2
    except (DecodeError, MissingBinary, EmptyCapture) as exc:
        print(f"istrace track: {exc}", file=sys.stderr)
        return 2
    except NoPlace:
        return 2
    return _written(res, out)


def _beside(pcap: Path) -> Path:
    """A pcap's default samples table: beside it, or in its folder's cache when that folder
    cannot be written (said in one line)."""
    name = pcap.name.split(".")[0] + ".track.parquet"
    if place.writable(pcap.parent):
        return pcap.with_name(name)
    cache = layout.cache_dir(pcap.parent)
    print(f"istrace track: {pcap.parent} is not writable: derived files go to {cache}",
          file=sys.stderr)
    return cache / name


def _track_dir(d: Path, args: argparse.Namespace, pdus: pd.DataFrame | None) -> int:
    cap = load_capture(d, ports=ports_of(args))
    if pdus is not None:
        cap.pdus["initiator"] = pdus
    out = Path(args.out) if args.out else d / layout.TRACK
    # Parquet: the samples written as they are made (a row per packet: millions)
    res = track_capture(cap, None if out.suffix == ".csv" else out)
    return _written(res, out)


def _written(res: track.TrackResult, out: Path) -> int:
    paths = write_track_tables(res.samples, res.states, res.events, out)
    print(summary(res))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0
