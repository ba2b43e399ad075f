"""The application's reads on the initiator: its finished read system calls of the disk (not
its socket chatter, nor, with a block layer, the reads that queued no block I/O).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from istrace.capture.events import APP_READ_EVENTS
from istrace.capture.labels import is_, label_codes


def _reads_that_did_io(sc: pd.DataFrame, events: pd.DataFrame, ini: np.ndarray) -> pd.DataFrame:
    """Where the initiator (`ini`: its rows of `events`) has a block layer: only the reads
    during which the same process queued a bio, i.e. the application's reads of the disk, not
    its shell's or loader's small file reads. Without block events (a user-space initiator),
    every read."""
    if "pid" not in events.columns or "lat_ns" not in sc.columns:
        return sc
    bio = events[ini & is_(events["layer"], "block").to_numpy()
                 & is_(events["event"], "bio_queue").to_numpy()]
    if bio.empty or sc.empty:
        return sc
    keep = np.zeros(len(sc), dtype=bool)
    end = sc["ts_ns"].to_numpy(dtype="int64")
    start = end - sc["lat_ns"].to_numpy(dtype="float64").astype("int64")
    pid = sc["pid"].to_numpy()
    for p, b in bio.groupby("pid"):
        ts = np.sort(b["ts_ns"].to_numpy(dtype="int64"))
        mine = pid == p
        i = np.searchsorted(ts, start[mine], side="left")
        inside = i < len(ts)
        inside[inside] = ts[i[inside]] <= end[mine][inside]
        keep[np.flatnonzero(mine)[inside]] = True
    return sc[keep] if keep.any() else sc


def initiator_mask(events: pd.DataFrame) -> np.ndarray:
    """Which events are the initiator's: a mask, not a copy (a minute's events are 360 000
    rows of 32 columns, and the diagnosis took the initiator's half four times)."""
    if "host" not in events.columns:
        return np.ones(len(events), bool)
    return is_(events["host"], "initiator").to_numpy()


def _named(col: pd.Series, pattern: str) -> np.ndarray:
    """Which rows' label matches `pattern` (re.match), tried once per distinct label."""
    codes, labels = label_codes(col)
    ok = np.array([re.match(pattern, str(x)) is not None for x in labels] + [False])
    return ok[codes]  # a missing label (-1) takes the last: no match


def app_reads(events: pd.DataFrame) -> pd.DataFrame:
    """The application's finished reads (read/pread/readv...) on the initiator, not its
    socket chatter; with a block layer, only those that queued block I/O."""
    if "lat_ns" not in events.columns or "bytes" not in events.columns:
        return events.iloc[0:0]
    ini = initiator_mask(events)
    sc = events[ini & is_(events["layer"], "syscall").to_numpy()
                & events["lat_ns"].notna().to_numpy()
                & _named(events["event"], APP_READ_EVENTS)]
    return _reads_that_did_io(sc, events, ini)
