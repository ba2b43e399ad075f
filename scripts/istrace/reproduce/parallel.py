"""Experiment `parallel` (seed 001): N parallel 512-byte readers at 16 ms one-way delay.

Each reader keeps one 512-byte READ in flight (a closed loop, as the study's raw-device
readers). The initiator admits at most `limit` of them at once - the study's can_queue (2) and
queue_depth (8), then both raised to 100 - which here is the pseudo-initiator's queue depth:
N readers behind a limit L put min(N, L) commands on the wire, the rest wait in the initiator.
"unlimited" gives every reader its own slot (queue depth N), so whatever flattens the curve
there is beyond the initiator (the target's CmdSN window). The outstanding count is measured
(gen's mean outstanding, or Little's law from its completions and latency), not assumed.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from istrace.model import study as model
from istrace.reproduce import plot as repro_plot
from istrace.reproduce import run as repro_run
from istrace.reproduce.sweep import Row, measured_rows, none_measured, num

COLUMNS = ["limit", "readers", "queue_depth", "delay_ms", "tps", "mbps", "outstanding",
           "outstanding_src", "max_outstanding", "lat_p50_ms", "rtt_ms", "ceiling_tps",
           "seconds", "status", "error"]
KEY = ["limit", "readers", "delay_ms"]
UNLIMITED = 100000
DELAY_MS = 16.0
RUNS = 2  # best of 2 short runs per point (see repro_run.best_of)


def plan(quick: bool) -> list[Row]:
    if quick:
        readers, limits = [1, 2, 4, 8, 32], [2, 8, UNLIMITED]
    else:
        readers = [1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 128, 256]
        limits = [2, 8, 100, UNLIMITED]
    return [{"limit": lim, "readers": n, "queue_depth": min(n, lim), "delay_ms": DELAY_MS}
            for lim in limits for n in readers]


def run(out: Path, quick: bool, time_s: float | None = None) -> int:
    secs = time_s or (2.0 if quick else 4.0)
    rtt: list[float] = []

    def meas(tb: repro_run.Testbed, p: Row) -> Row:
        if not rtt:
            rtt.append(repro_run.ping_rtt_ms(tb))
        r = repro_run.best_of(RUNS, lambda: repro_run.run_gen(
            tb, "512", secs, queue_depth=int(p["queue_depth"])))
        return {"tps": round(r.iops, 2), "mbps": round(r.mbps, 5),
                "outstanding": round(r.outstanding, 3), "outstanding_src": r.outstanding_src,
                "max_outstanding": r.max_outstanding,
                "lat_p50_ms": r.lat_p50_ms, "rtt_ms": rtt[0], "seconds": round(r.seconds, 3),
                "ceiling_tps": round(model.outstanding_ceiling(int(p["queue_depth"]),
                                                               rtt[0] / 1e3), 1)}

    failed = repro_run.sweep_grouped(
        out / "parallel.csv", COLUMNS, KEY, "parallel", plan(quick),
        group=lambda p: (p["delay_ms"],),
        bed=lambda p: {"delay_ms": float(p["delay_ms"])}, tag="rp", measure=meas,
        summary=lambda r: f"{num(r, 'tps'):.1f} trans/s, {num(r, 'outstanding'):.1f} outstanding")
    return finish(out, failed=failed)


def load(out: Path) -> pd.DataFrame:
    return measured_rows(out / "parallel.csv")


def speedup(df: pd.DataFrame) -> float:
    """The study's 32x: best aggregate with the limits lifted / best with can_queue=2."""
    low = df[df["limit"] == df["limit"].min()]["tps"].max()
    return float(df["tps"].max() / low)


def finish(out: Path, failed: int = 0) -> int:
    df = load(out)
    if none_measured("parallel", df):
        return 1
    rtt_s = float(df["rtt_ms"].median()) / 1e3
    factor = speedup(df)
    repro_plot.plot_parallel(
        df, out / "repro-parallel.png",
        f"512-byte readers at {DELAY_MS:g} ms one-way (seed 001 fig. 3/8); "
        f"best / limit-2 best = {factor:.1f}x", rtt_s)
    table = df.pivot_table(index="readers", columns="limit", values="tps")
    print(table.round(1).to_string())
    print(f"parallel: RTT {rtt_s * 1e3:.1f} ms; lifting the limits: {factor:.1f}x (study: 32.2x)")
    print(f"parallel: wrote {out / 'parallel.csv'}, {out / 'repro-parallel.png'}")
    if failed:
        print(f"parallel: {failed} point(s) failed (see the CSV's error column)")
    return 1 if failed else 0
