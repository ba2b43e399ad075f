"""`istrace track DIR|PCAP [--out track.csv]`: TCP cwnd/state time series per connection.

From a capture directory (docs/schema.md; `istrace capture --out DIR`) it uses, when present:
probe events (events-*.jsonl/csv, exact), target.pcap for the target's sending direction (t2i)
and initiator.pcap for the initiator's (i2t), each direction tracked at its sender's capture
point; decoded PDUs (pdus.csv) to say which command each loss hit. Given one pcap it tracks both
directions from that single capture point.

Writes three tables: the samples (--out, default DIR/track.csv), and beside it
<stem>_states.csv (CA-state intervals) and <stem>_events.csv (retransmit/dupack/loss marks).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
from istrace.track import tracker as track
from istrace.track.pcap_tcp import PcapError, conn_and_dir, read_segments

PCAP_SUFFIXES = (".pcap", ".pcapng", ".cap", ".pcap.gz")


def load_events(d: Path) -> pd.DataFrame | None:
    """All probe event files of a capture directory, as one table (None when there are none)."""
    frames = []
    for f in sorted(d.glob("events-*.jsonl")) + sorted(d.glob("events-*.csv")):
        try:
            df = (pd.read_json(f, lines=True) if f.suffix == ".jsonl" else pd.read_csv(f))
        except ValueError as exc:
            print(f"istrace track: {f}: unreadable ({exc}); skipped", file=sys.stderr)
            continue
        if df.empty:
            continue
        if "host" not in df.columns:
            df["host"] = f.stem.removeprefix("events-")
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else None


def find_pdus(d: Path) -> pd.DataFrame | None:
    """Decoded PDUs of the initiator's capture, wherever `istrace decode` put them."""
    for cand in (d / "pdus.csv", d / "decoded" / "initiator" / "pdus.csv",
                 d / "decode-initiator" / "pdus.csv", d / "decoded" / "pdus.csv"):
        if cand.is_file():
            try:
                return pd.read_csv(cand, low_memory=False)
            except ValueError:
                return None
    return None


def track_dir(d: Path, pdus: pd.DataFrame | None = None) -> track.TrackResult:
    """Tracker over everything a capture directory holds (exact and estimated rows)."""
    res = track.TrackResult()
    events = load_events(d)
    if events is not None:
        res.extend(track.track_events(events))
    else:
        res.notes.append("no probe events (events-*.jsonl): cwnd/ssthresh/CA state unknown, "
                         "pcap estimates only")
    if pdus is None:
        pdus = find_pdus(d)
    ini, tgt = d / "initiator.pcap", d / "target.pcap"
    # Each data direction is best seen where it is sent; fall back to the other end.
    plan = []
    if tgt.is_file():
        plan.append((tgt, "target", ("t2i",) if ini.is_file() else ("t2i", "i2t")))
    if ini.is_file():
        plan.append((ini, "initiator", ("i2t",) if tgt.is_file() else ("i2t", "t2i")))
    if not plan:
        res.notes.append("no initiator.pcap/target.pcap: no pcap estimates")
    for path, host, dirs in plan:
        segs = conn_and_dir(read_segments(path))
        res.extend(track.track_pcap(segs, pdus, host=host, dirs=dirs))
    return res


def write_result(res: track.TrackResult, out: Path) -> list[Path]:
    out.parent.mkdir(parents=True, exist_ok=True)
    stem = out.with_suffix("")
    paths = [out, Path(f"{stem}_states.csv"), Path(f"{stem}_events.csv")]
    res.samples.to_csv(paths[0], index=False)
    res.states.to_csv(paths[1], index=False)
    res.events.to_csv(paths[2], index=False)
    return paths


def summary(res: track.TrackResult) -> str:
    s = res.samples
    lines = []
    if s.empty:
        lines.append("no TCP data found")
    for (conn, d, src), g in s.groupby(["conn", "dir", "source"], sort=True):
        part = [f"{conn} {d} [{src}] {len(g)} samples"]
        if g["cwnd"].notna().any():
            part.append(f"cwnd max {g['cwnd'].max():.0f} seg")
        if g["inflight_bytes"].notna().any():
            part.append(f"in flight max {g['inflight_bytes'].max() / 1024:.0f} KiB")
        if g["rtt_us"].notna().any():
            part.append(f"RTT median {g['rtt_us'].median():.0f} us")
        elif g["srtt_us"].notna().any():
            part.append(f"srtt median {g['srtt_us'].median():.0f} us")
        lines.append(", ".join(part))
    ev = res.events
    if not ev.empty:
        counts = ev.groupby(["dir", "kind"]).size()
        lines.append("marks: " + ", ".join(f"{d} {k}={n}" for (d, k), n in counts.items()))
    st = track.state_time(res)
    for _, r in st[st["state"] != "Open"].iterrows():
        lines.append(f"state {r['state']} ({r['source']}, {r['dir']}): {r['intervals']} "
                     f"intervals, {r['total_ns'] / 1e6:.2f} ms")
    lines += [f"note: {n}" for n in res.notes]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="istrace track", description=__doc__.split("\n")[0])
    ap.add_argument("input", help="capture directory or a pcap/pcapng file")
    ap.add_argument("--out", help="samples CSV (default DIR/track.csv or PCAP-stem.track.csv)")
    ap.add_argument("--pdus", help="pdus.csv to tie losses to commands")
    ap.add_argument("--host", default="initiator", help="capture point of a single pcap")
    args = ap.parse_args(argv)
    src = Path(args.input)
    pdus = None
    if args.pdus:
        try:
            pdus = pd.read_csv(args.pdus, low_memory=False)
        except (OSError, ValueError) as exc:
            print(f"istrace track: {args.pdus}: {exc}", file=sys.stderr)
            return 2
    try:
        if src.is_dir():
            res = track_dir(src, pdus)
            out = Path(args.out) if args.out else src / "track.csv"
        elif src.is_file():
            segs = conn_and_dir(read_segments(src))
            res = track.track_pcap(segs, pdus, host=args.host)
            out = Path(args.out) if args.out else src.with_name(src.name.split(".")[0]
                                                                 + ".track.csv")
        else:
            print(f"istrace track: {src}: no such file or directory", file=sys.stderr)
            return 2
    except PcapError as exc:
        print(f"istrace track: {exc}", file=sys.stderr)
        return 2
    paths = write_result(res, out)
    print(summary(res))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0
