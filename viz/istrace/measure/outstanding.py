"""What is in flight: commands issued and not yet answered (on the wire, in the initiator's
SCSI midlayer, the application's reads) as step functions, the ceiling such a count holds,
and the commands' response times.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from istrace.capture.labels import is_
from istrace.measure.appreads import app_reads, initiator_mask


def outstanding(commands: pd.DataFrame | None) -> pd.DataFrame:
    """Commands outstanding (issued, not yet answered) as a step function: t_ns, outstanding."""
    cols = ["t_ns", "outstanding"]
    if commands is None or commands.empty or "issue_ts_ns" not in commands.columns:
        return pd.DataFrame(columns=cols)
    c = commands.dropna(subset=["issue_ts_ns"])
    iss = c["issue_ts_ns"].to_numpy(np.int64)
    done = (c["resp_ts_ns"].dropna().to_numpy(np.int64) if "resp_ts_ns" in c.columns
            else np.zeros(0, np.int64))
    return in_flight(iss, np.concatenate([done, _ended_by_tag_reuse(c)]))


def in_flight(starts: np.ndarray, ends: np.ndarray) -> pd.DataFrame:
    """How many things are in flight as a step function (t_ns, outstanding), from their start
    and end times: commands on the wire, in the SCSI midlayer, the application's reads. An end
    at the same instant as a start comes first (no false peak); ends of things begun before
    the capture would go below zero, so the count is lifted to start at zero."""
    t = np.concatenate([np.asarray(starts, np.int64), np.asarray(ends, np.int64)])
    step = np.concatenate([np.ones(len(starts), np.int64), -np.ones(len(ends), np.int64)])
    o = np.lexsort((step, t))
    n = np.cumsum(step[o])
    return pd.DataFrame({"t_ns": t[o], "outstanding": n - min(int(n.min()), 0) if len(n)
                         else n})


def scsi_outstanding(events: pd.DataFrame | None) -> pd.DataFrame:
    """SCSI commands outstanding in a kernel initiator's SCSI midlayer (dispatched to the
    driver, not yet done) as a step function: t_ns, outstanding. This is where queue_depth and
    can_queue act; commands dispatched but still inside the initiator (not yet on the wire)
    count here and not in `outstanding`. Data commands (with an LBA) only, like the wire
    series' READ/WRITE. Empty without the midlayer's events."""
    cols = ["t_ns", "outstanding"]
    if events is None or events.empty or "layer" not in events.columns:
        return pd.DataFrame(columns=cols)
    ev = events[initiator_mask(events) & is_(events["layer"], "scsi").to_numpy()
                & events["event"].isin(["scsi_dispatch", "scsi_done"]).to_numpy(bool)]
    if "lba" in ev.columns:   # data commands only: not the disk's TEST UNIT READY polls
        ev = ev[ev["lba"].notna()]
    if ev.empty or not (ev["event"] == "scsi_dispatch").any():
        return pd.DataFrame(columns=cols)
    t = ev["ts_ns"].to_numpy(np.int64)
    dispatch = (ev["event"] == "scsi_dispatch").to_numpy(bool)
    return in_flight(t[dispatch], t[~dispatch])


def _ended_by_tag_reuse(c: pd.DataFrame) -> np.ndarray:
    """Ends of commands whose response the capture lacks (lost at capture start, say) but
    whose task tag the initiator issued again on the connection: a tag is unique among a
    session's outstanding tasks (RFC 7143 §11.1.2), so the command had ended by then (the
    decoder's rule for its `outstanding` column too). Unanswered, unreused ones stay open."""
    if "resp_ts_ns" not in c.columns or "itt" not in c.columns or not c["resp_ts_ns"].isna().any():
        return np.zeros(0, np.int64)
    key = [k for k in ("conn", "itt") if k in c.columns]
    x = c[key + ["issue_ts_ns", "resp_ts_ns"]].sort_values("issue_ts_ns", kind="stable")
    nxt = x.groupby(key, sort=False, dropna=False)["issue_ts_ns"].shift(-1)
    ended = nxt[x["resp_ts_ns"].isna() & nxt.notna()]
    return ended.to_numpy(np.int64)


def outstanding_ceiling(series: pd.DataFrame) -> dict[str, float]:
    """Highest count outstanding and how it behaves: `flat` when the peak is held for long."""
    if series.empty:
        return {"max": 0, "time_at_max": 0.0, "reached": 0, "flat": False, "mean": float("nan")}
    t = series["t_ns"].to_numpy(np.int64)
    v = series["outstanding"].to_numpy()
    mx = int(v.max())
    dur = np.diff(t, append=t[-1])
    total = t[-1] - t[0]
    at_max = float(dur[v == mx].sum() / total) if total > 0 else 0.0
    mean = float((v * dur).sum() / total) if total > 0 else float("nan")
    reached = int(((v == mx) & np.concatenate([[True], v[:-1] != mx])).sum())
    issued = int((np.diff(v, prepend=0) > 0).sum())
    # A concurrency limit shows as a ceiling hit again and again (never passed): held for a
    # large share of the run, or reached by at least a tenth of all issues - not one spike.
    flat = mx > 0 and reached >= 3 and (at_max >= 0.3 or reached >= 0.1 * issued)
    return {"max": mx, "time_at_max": at_max, "reached": reached, "flat": bool(flat),
            "mean": mean}


def resp_times(commands: pd.DataFrame | None) -> pd.Series:
    """Response times in microseconds of answered commands."""
    if commands is None or commands.empty or "resp_time_us" not in commands.columns:
        return pd.Series(dtype=float)
    return commands["resp_time_us"].dropna().astype(float)


def app_reads_in_flight(events: pd.DataFrame | None) -> int | None:
    """The most application reads of the disk in flight at once, where the initiator has a
    block layer (a kernel initiator: its reads are the application's own). None otherwise."""
    if events is None or events.empty or "layer" not in events.columns:
        return None
    if not (initiator_mask(events) & is_(events["layer"], "block").to_numpy()).any():
        return None
    sc = app_reads(events)
    if sc.empty:
        return None
    end = sc["ts_ns"].to_numpy(np.int64)
    start = end - sc["lat_ns"].to_numpy(np.float64).astype(np.int64)
    return int(in_flight(start, end)["outstanding"].max())
