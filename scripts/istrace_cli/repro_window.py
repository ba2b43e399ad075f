"""Experiment `window` (seed 002, figs. 10/11): READ throughput against delay for several TCP
window sizes and MSS values, against the one-window-per-round-trip bound.

The window is clamped with the initiator's route metric `window` (the largest receive window
it will advertise, in bytes) and the MSS with `advmss`; both bound each new connection exactly.
The MSS series keep the window at a fixed number of segments (20, the ns2 study's default), so
as there the bound is MSS x window / RTT. Reads keep 4 x 1 MiB in flight so only the window can
hold them back.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from istrace_cli import repro_model as model
from istrace_cli import repro_plot, repro_run
from istrace_cli.repro_sweep import Progress, Row, SweepCSV, num

COLUMNS = ["vary", "window", "mss", "delay_ms", "mbps", "bound_mbps", "ratio", "rtt_ms",
           "seconds", "status", "error"]
KEY = ["vary", "window", "mss", "delay_ms"]
DEFAULT_MSS = 1460
SEGMENTS = 20  # ns2 study: "TCP window assumes the default value of 20"


def plan(quick: bool) -> list[Row]:
    if quick:
        delays = [2, 10, 50]
        windows = [64 << 10, 512 << 10]
        mss = [536, 1460]
    else:
        delays = [1, 2, 5, 10, 20, 50]
        windows = [16 << 10, 64 << 10, 256 << 10, 1 << 20]
        mss = [256, 536, 1460]
    pts: list[Row] = []
    for d in delays:
        pts += [{"vary": "window", "window": w, "mss": DEFAULT_MSS, "delay_ms": d}
                for w in windows]
        pts += [{"vary": "mss", "window": SEGMENTS * m, "mss": m, "delay_ms": d} for m in mss]
    return pts


def run(out: Path, quick: bool, time_s: float | None = None) -> int:
    secs = time_s or (2.0 if quick else 3.0)
    sweep = SweepCSV(out / "window.csv", COLUMNS, KEY)
    points = plan(quick)
    progress = Progress("window", len(points))
    rtts: dict[float, float] = {}

    def meas(tb: repro_run.Testbed, p: Row) -> Row:
        d = float(p["delay_ms"])
        if d not in rtts:
            rtts[d] = repro_run.ping_rtt_ms(tb)
        win, mss = int(p["window"]), int(p["mss"])
        repro_run.set_route_metrics(tb, window=win, advmss=mss)
        r = repro_run.run_gen(tb, "1M", secs, queue_depth=4)
        bound = model.window_bound(win, rtts[d] / 1e3) / model.MB
        return {"mbps": round(r.mbps, 4), "bound_mbps": round(bound, 4),
                "ratio": round(r.mbps / bound, 3), "rtt_ms": rtts[d],
                "seconds": round(r.seconds, 3)}

    rows = repro_run.run_grouped(
        sweep, points, group=lambda p: (p["delay_ms"],),
        bed=lambda p: {"delay_ms": float(p["delay_ms"])}, tag="rw", measure=meas,
        progress=progress,
        summary=lambda r: f"{num(r, 'mbps'):.2f} MB/s (bound {num(r, 'bound_mbps'):.2f})")
    return finish(out, failed=sum(r.get("status") != "ok" for r in rows))


def load(out: Path) -> pd.DataFrame:
    df = pd.read_csv(out / "window.csv")
    return df[df["status"] == "ok"].copy()


def finish(out: Path, failed: int = 0) -> int:
    df = load(out)
    if df.empty:
        print("window: no point measured")
        return 1
    repro_plot.plot_window(df, out / "repro-window.png",
                           "READ throughput vs delay per TCP window and MSS (seed 002 figs. 10/11)")
    for vary, part in df.groupby("vary"):
        cols = "window" if vary == "window" else "mss"
        print(f"window: varying {vary} (MB/s)")
        print(part.pivot_table(index="delay_ms", columns=cols, values="mbps").round(3)
              .to_string())
    print(f"window: measured / (window/RTT) median {df['ratio'].median():.2f}, "
          f"max {df['ratio'].max():.2f}")
    print(f"window: wrote {out / 'window.csv'}, {out / 'repro-window.png'}")
    if failed:
        print(f"window: {failed} point(s) failed (see the CSV's error column)")
    return 1 if failed else 0
