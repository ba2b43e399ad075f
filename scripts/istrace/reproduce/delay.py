"""Experiment `delay-sweep` (seed 000, fig. 6): sequential-read throughput against one-way delay.

Series: one READ outstanding at a time of 32 KB (what Linux cut a 500 KB read() into: the
study's "iSCSI (UNH) Tx256"), 256 KB, 1 MB, 4 MB (the study's pseudo-initiator "iSCSI (KI)"),
and the pure-socket stream ("Socket"), each behind a small and a large transmit queue.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from istrace.model import study as model
from istrace.reproduce import plot as repro_plot
from istrace.reproduce import run as repro_run
from istrace.reproduce.sweep import Row, measured_rows, none_measured, num

COLUMNS = ["series", "size", "txqueuelen", "delay_ms", "mbps", "iops", "commands", "seconds",
           "lat_p50_ms", "rtt_ms", "model_mbps", "status", "error"]
KEY = ["series", "txqueuelen", "delay_ms"]
SIZES = {"32K": 32 * 1024, "256K": 256 * 1024, "1M": 1 << 20, "4M": 4 << 20}
SMALL_Q, LARGE_Q = 256, 4096
# The study's path topped out at ~40 MB/s (its dummynet PC); the same here keeps tgtd, the
# forwarder and the reader within this 2-core machine and gives the queue a link to wait for.
RATE_MBIT = 320.0
RUNS = 2  # best of 2 runs per point (see repro_run.best_of)


def plan(quick: bool) -> list[Row]:
    delays = [0, 4, 16] if quick else [0, 1, 2, 4, 8, 16, 32, 64]
    series = ["32K", "4M", "socket"] if quick else [*SIZES, "socket"]
    points = []
    for txq in (SMALL_Q, LARGE_Q):
        for d in delays:
            for s in series:
                points.append({"series": s, "size": SIZES.get(s, 4 << 20), "txqueuelen": txq,
                               "delay_ms": d})
    return points


def measure(tb: repro_run.Testbed, p: Row, time_s: float, rtt_ms: float) -> Row:
    size = p["series"] if p["series"] != "socket" else "4M"
    if p["series"] == "socket":
        r = repro_run.best_of(RUNS, lambda: repro_run.run_socket(tb, size, time_s, stream=True))
    else:
        r = repro_run.best_of(RUNS, lambda: repro_run.run_gen(tb, size, time_s, queue_depth=1))
    return {"mbps": round(r.mbps, 4), "iops": round(r.iops, 2), "commands": r.commands,
            "seconds": round(r.seconds, 3), "lat_p50_ms": r.lat_p50_ms, "rtt_ms": rtt_ms}


def run(out: Path, quick: bool, time_s: float | None = None) -> int:
    secs = time_s or (2.0 if quick else 3.0)
    rtts: dict[tuple[int, float], float] = {}

    def meas(tb: repro_run.Testbed, p: Row) -> Row:
        k = (int(p["txqueuelen"]), float(p["delay_ms"]))
        if k not in rtts:
            rtts[k] = repro_run.ping_rtt_ms(tb)
        return measure(tb, p, secs, rtts[k])

    failed = repro_run.sweep_grouped(
        out / "delay-sweep.csv", COLUMNS, KEY, "delay-sweep", plan(quick),
        group=lambda p: (p["txqueuelen"], p["delay_ms"]),
        bed=lambda p: {"delay_ms": float(p["delay_ms"]), "rate_mbit": RATE_MBIT,
                       "txqueuelen": int(p["txqueuelen"]), "queue": int(p["txqueuelen"])},
        tag="rd", measure=meas,
        summary=lambda r: f"{num(r, 'mbps'):.2f} MB/s")
    return finish(out, failed=failed)


def add_model(df: pd.DataFrame) -> pd.DataFrame:
    """Eq. (1) per iSCSI point with LowerLayerThroughput = the socket at that delay and queue."""
    df = df.copy()
    sock = df[df["series"] == "socket"].set_index(["txqueuelen", "delay_ms"])["mbps"]
    vals = []
    for _, r in df.iterrows():
        lower = sock.get((r["txqueuelen"], r["delay_ms"]))
        if r["series"] == "socket" or lower is None or not lower > 0:
            vals.append(float("nan"))
        else:
            vals.append(model.seq_read_throughput(float(r["size"]), r["delay_ms"] / 1e3,
                                                  float(lower) * model.MB) / model.MB)
    df["model_mbps"] = vals
    return df


def improvement(df: pd.DataFrame, delay: float = 16.0) -> float:
    """The study's 60x: 32 KB behind the small queue -> 4 MB behind the large queue."""
    def at(series: str, txq: int) -> float:
        sel = df[(df["series"] == series) & (df["txqueuelen"] == txq) & (df["delay_ms"] == delay)]
        return float(sel["mbps"].iloc[0]) if not sel.empty else float("nan")
    return at("4M", LARGE_Q) / at("32K", SMALL_Q)


def load(out: Path) -> pd.DataFrame:
    df = measured_rows(out / "delay-sweep.csv")
    df["delay_ms"] = df["delay_ms"].astype(float)
    df["txqueuelen"] = df["txqueuelen"].astype(int)
    return df


def finish(out: Path, failed: int = 0) -> int:
    df = load(out)
    if none_measured("delay-sweep", df):
        return 1
    df = add_model(df)
    df.to_csv(out / "delay-sweep-table.csv", index=False)
    factor = improvement(df)
    repro_plot.plot_delay_sweep(
        df, out / "repro-delay-sweep.png",
        f"Sequential READ throughput vs one-way delay (seed 000 fig. 6); "
        f"4M Tx{LARGE_Q} / 32K Tx{SMALL_Q} at 16 ms = {factor:.1f}x")
    table = df.pivot_table(index="delay_ms", columns=["series", "txqueuelen"], values="mbps")
    print(table.round(2).to_string())
    print(f"delay-sweep: improvement 32K Tx{SMALL_Q} -> 4M Tx{LARGE_Q} at 16 ms: {factor:.1f}x "
          "(study: 60.5x)")
    print(f"delay-sweep: wrote {out / 'delay-sweep.csv'}, {out / 'repro-delay-sweep.png'}")
    if failed:
        print(f"delay-sweep: {failed} point(s) failed (see the CSV's error column)")
    return 1 if failed else 0
