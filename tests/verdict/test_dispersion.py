"""The bottleneck rate from packet pairs at the receiver (verdict.dispersion_capacity): the
median rate of back-to-back full-sized segments of one connection, whatever the slicing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from istrace.capture.load import Capture
from istrace.report.verdict import dispersion_capacity

A, B = "10.0.0.1:40000-10.0.0.2:3260", "10.0.0.1:40001-10.0.0.2:3260"


def _receiver(seed: int) -> tuple[pd.DataFrame, float]:
    """Data segments of two interleaved connections at the initiator, and the median rate
    computed the obvious way over the whole table."""
    rng = np.random.default_rng(seed)
    n = 3000
    ts = np.cumsum(rng.choice([0, 1000, 1160, 5000, 20_000], n)) + 1_000_000  # ties too
    ln = rng.choice([1448, 1448, 1448, 700], n)
    conn = rng.choice([A, B], n, p=[0.8, 0.2])
    segs = pd.DataFrame({"ts_ns": ts, "len": ln, "conn": pd.Categorical(conn),
                         "dir": pd.Categorical(["t2i"] * n)})
    acks = pd.DataFrame({"ts_ns": ts[::3] + 10, "len": 0, "conn": pd.Categorical(conn[::3]),
                         "dir": pd.Categorical(["i2t"] * len(ts[::3]))})
    table = pd.concat([segs, acks]).sort_values("ts_ns", kind="stable").reset_index(drop=True)
    x = segs.sort_values("ts_ns", kind="stable")
    t, size, c = x["ts_ns"].to_numpy(), x["len"].to_numpy(float), x["conn"].to_numpy()
    dt = np.diff(t).astype(float)
    ok = (c[1:] == c[:-1]) & (size[1:] >= size.max()) & (dt > 0)
    return table, float(np.median(size[1:][ok] / (dt[ok] / 1e9)))


@pytest.mark.parametrize("rows", [1, 2, 7, 100, 1 << 16])
def test_packet_pair_rate_is_the_same_in_any_slicing(rows: int) -> None:
    for seed in range(3):
        table, want = _receiver(seed)
        cap = Capture(dir=Path("."), segs={"initiator": table})
        assert dispersion_capacity(cap, rows=rows) == want


def test_too_few_pairs_say_nothing() -> None:
    table, _ = _receiver(0)
    cap = Capture(dir=Path("."), segs={"initiator": table.head(50)})
    assert dispersion_capacity(cap) is None
