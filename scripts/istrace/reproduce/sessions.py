"""Experiment `sessions` (seed 004, BDL-APT): aggregate throughput against the number of parallel
iSCSI sessions at 10-100 ms one-way delay, and a golden-section search for the best count.

Each session is one TCP connection with one 1 MiB READ in flight, so alone it idles a round
trip per command (eq. (1)) and the longer the delay the more sessions it takes to fill the
rate-limited path.

The search runs live, first, on a fresh testbed: golden section over a geometric grid of
counts (1, 2, 3, 4, 6, 8, 11, 16, 23, 32), each evaluation the mean of REPEATS runs, as a
user tuning a real system would run it. The full grid is measured after it, the same way, so
the search's path and its confidence intervals sit next to the whole curve; a count the search
measured is not measured again. The run says whether the pick is within the noise of the
grid's best, and which counts the noise cannot tell apart.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import cast

import pandas as pd
from istrace.reproduce import plot as repro_plot
from istrace.reproduce import run as repro_run
from istrace.reproduce.sweep import (
    Progress,
    Row,
    SweepCSV,
    geometric_grid,
    golden_section_grid,
    num,
    run_points,
)

COLUMNS = ["delay_ms", "sessions", "repeat", "rate_mbit", "mbps", "iops", "per_session_mbps",
           "lat_p50_ms", "rtt_ms", "seconds", "status", "error"]
KEY = ["delay_ms", "sessions", "repeat"]
RATE_MBIT = 200.0   # the path's bottleneck (seed 004 used 1 Gbit/s; scaled to this machine)
SIZE = "1M"
# Student's t, two-sided 95%, by sample size: the interval of a mean of so few runs
T95 = {2: 12.706, 3: 4.303, 4: 3.182, 5: 2.776, 6: 2.571}


def settings(quick: bool) -> tuple[list[float], list[int], int, int]:
    """(delays, grid counts, largest count searched, runs per point)."""
    if quick:
        return [50.0], [1, 2, 4, 8], 16, 2
    return [10.0, 20.0, 50.0, 100.0], [1, 2, 3, 4, 6, 8, 11, 16, 23, 32], 32, 3


def run(out: Path, quick: bool, time_s: float | None = None) -> int:
    delays, counts, hi, repeats = settings(quick)
    sweep = SweepCSV(out / "sessions.csv", COLUMNS, KEY)
    progress = Progress("sessions", len(delays) * len(counts) * repeats)
    search_rows: list[dict[str, float]] = []
    failed = 0
    for d in delays:
        # Long paths need longer runs: slow start alone takes ~log2(window) round trips.
        secs = time_s or ((2.0 if quick else 3.0) + 30 * 2 * d / 1e3)
        try:
            with repro_run.testbed(repro_run.unique_name("rs"), delay_ms=d,
                                   rate_mbit=RATE_MBIT) as tb:
                rtt = repro_run.ping_rtt_ms(tb)
                bad: set[tuple[int, int]] = set()

                def meas(p: Row, tb: repro_run.Testbed = tb, rtt: float = rtt,
                         secs: float = secs) -> Row:
                    r = repro_run.run_gen(tb, SIZE, secs, queue_depth=1,
                                          sessions=int(p["sessions"]), allow_stall=True)
                    # Too many sessions overflow the path's queue; Reno then backs off to
                    # retransmission timeouts and a session can stall past gen's timeout:
                    # the figures until then are the point (a collapse), noted as such.
                    note = ("stalled: no data for 10 s (gen timeout), partial figures"
                            if r.raw.get("exit") == repro_run.GEN_EXIT_TIMEOUT else "")
                    return {"error": note, "mbps": round(r.mbps, 3), "iops": round(r.iops, 2),
                            "per_session_mbps": round(r.mbps / int(p["sessions"]), 3),
                            "lat_p50_ms": r.lat_p50_ms, "rtt_ms": rtt,
                            "seconds": round(r.seconds, 3)}

                def summary(r: Row) -> str:
                    return f"{num(r, 'mbps'):.2f} MB/s"

                def mean_of(n: int, d: float = d, meas=meas, summary=summary,  # noqa: ANN001
                            bad: set[tuple[int, int]] = bad) -> float:
                    pts = [{"delay_ms": d, "sessions": n, "repeat": k, "rate_mbit": RATE_MBIT}
                           for k in range(1, repeats + 1)]
                    rows = run_points(sweep, pts, meas, progress, summary)
                    bad.update((n, int(r["repeat"])) for r in rows if r.get("status") != "ok")
                    vals = [num(r, "mbps") for r in rows if r.get("status") == "ok"]
                    return sum(vals) / len(vals) if vals else 0.0

                grid = geometric_grid(1, hi)
                new = [n for n in grid if n not in counts]
                progress.total += len(new) * repeats  # the search may measure these too
                res = golden_section_grid(mean_of, grid)
                for step, (n, v) in enumerate(res.path, 1):
                    search_rows.append({"delay_ms": d, "step": step, "sessions": n, "mbps": v})
                print(f"sessions: {d:g} ms: golden-section pick {res.best} sessions "
                      f"({res.value:.2f} MB/s, mean of {repeats}) after {len(res.path)} "
                      f"evaluations", flush=True)
                for n in counts:
                    mean_of(n)
                failed += len(bad)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - the next delay may still work
            print(f"sessions: {d:g} ms failed: {exc}", flush=True)
            failed += 1
    _write_search(out, search_rows, delays)
    return finish(out, failed)


def _write_search(out: Path, rows: list[dict[str, float]], delays: list[float]) -> None:
    """The search path per delay; delays not searched this run keep their earlier path."""
    path = out / "sessions-search.csv"
    keep: list[dict[str, str]] = []
    if path.exists():
        with path.open(newline="") as fh:
            keep = [r for r in csv.DictReader(fh)
                    if float(r["delay_ms"]) not in {float(x["delay_ms"]) for x in rows}]
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["delay_ms", "step", "sessions", "mbps"])
        w.writeheader()
        w.writerows(keep)
        w.writerows(rows)


def points(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (delay, sessions): mean MB/s, runs, and the 95% confidence half-width."""
    g = df.groupby(["delay_ms", "sessions"])["mbps"]
    out = g.agg(["mean", "std", "count"]).reset_index()
    out["ci95"] = [T95.get(int(n), 2.0) * sd / math.sqrt(n) if n > 1 else math.nan
                   for sd, n in zip(out["std"].fillna(0.0), out["count"], strict=True)]
    return out.rename(columns={"mean": "mbps", "count": "runs"})


def knee(part: pd.DataFrame, share: float = 0.9) -> int:
    """Fewest sessions reaching `share` of the best mean throughput (robust to a noisy
    plateau)."""
    best = part["mbps"].max()
    return int(part[part["mbps"] >= share * best]["sessions"].min())


def indistinguishable(part: pd.DataFrame) -> list[int]:
    """Counts whose interval overlaps the best mean's: the noise cannot rank them."""
    top = part.iloc[part["mbps"].argmax()]
    lo = top["mbps"] - (0.0 if math.isnan(top["ci95"]) else top["ci95"])
    reach = part["mbps"] + part["ci95"].fillna(0.0)
    return sorted(int(n) for n in part[reach >= lo]["sessions"])


def load(out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    df = pd.read_csv(out / "sessions.csv")
    df = df[df["status"] == "ok"].copy()
    sp = out / "sessions-search.csv"
    search = pd.read_csv(sp) if sp.exists() else pd.DataFrame(
        columns=["delay_ms", "step", "sessions", "mbps"])
    return df, search


def finish(out: Path, failed: int = 0) -> int:
    df, search = load(out)
    if df.empty:
        print("sessions: no point measured")
        return 1
    means = points(df)
    repro_plot.plot_sessions(means, search, out / "repro-sessions.png",
                             f"Aggregate READ throughput vs parallel sessions, path "
                             f"{RATE_MBIT:g} Mbit/s (seed 004 fig. 4): mean and 95% CI")
    print(means.pivot_table(index="sessions", columns="delay_ms", values="mbps").round(2)
          .to_string())
    for d, part in means.groupby("delay_ms"):
        one = part[part["sessions"] == 1]["mbps"]
        top = part.iloc[part["mbps"].argmax()]
        tie = indistinguishable(part)
        one_mbps = float(one.to_numpy()[0]) if len(one) else 0
        print(f"sessions: {d:g} ms: 1 session {one_mbps:.2f} MB/s, "
              f"best {top['mbps']:.2f} ± {top['ci95']:.2f} MB/s at {int(top['sessions'])} "
              f"sessions, 90% of best from {knee(part)} sessions; within the best's 95% "
              f"interval: {', '.join(map(str, tie))}")
        s = search[search["delay_ms"].astype(float) == float(cast(float, d))]  # a number column
        if not s.empty:
            pick = s.iloc[s["mbps"].astype(float).argmax()]
            n = int(pick["sessions"])
            close = n in tie if n in set(part["sessions"].astype(int)) else \
                float(pick["mbps"]) >= top["mbps"] - (top["ci95"] if top["ci95"] > 0 else 0.0)
            verdict = "within the noise of" if close else "short of"
            print(f"sessions: {d:g} ms: search picked {n} sessions after "
                  f"{len(s)} evaluations, {verdict} the grid's best")
    print(f"sessions: wrote {out / 'sessions.csv'}, {out / 'sessions-search.csv'}, "
          f"{out / 'repro-sessions.png'}")
    if failed:
        print(f"sessions: {failed} point(s) failed (see the CSV's error column)")
    return 1 if failed else 0
