"""The data sender's bursts, the gaps between them, the idle ratio, the peak rate, the
median spacing and the payload totals: on a synthetic capture of known truth and on
segment tables whose answer numpy gives whole."""

import numpy as np
import pandas as pd
import pytest
import synth
from istrace.measure.bursts import (
    burst_gap_threshold,
    data_bursts,
    gaps_from_bursts,
    idle_ratio,
    median_spacing,
    peak_rate,
)
from istrace.measure.payload import payload_totals
from istrace.model import study


def test_bursts_idle_gaps_and_ratio(cap1):
    cap, t = cap1
    segs = cap.segs["target"]
    thr = burst_gap_threshold(segs, "t2i")
    b = data_bursts(segs, "t2i", thr)
    # The Response PDU goes out one segment time after the data: same burst.
    assert len(b) == t.n_cmds
    assert b["start_ns"].tolist() == t.burst_start
    seg_ns = int(synth.MSS / t.rate * 1e9)
    assert (b["end_ns"] - np.asarray(t.burst_end) == seg_ns).all()
    gaps = gaps_from_bursts(b)
    assert len(gaps) == t.n_cmds - 1
    expect = np.asarray(t.burst_start[1:]) - (np.asarray(t.burst_end[:-1]) + seg_ns)
    assert (gaps["gap_ns"].to_numpy() == expect).all()
    # Idle is the 2 one-way delays + target think time out of each cycle.
    assert gaps["gap_ns"].min() > 2 * t.owd_ns
    ratio = idle_ratio(b)
    total = b["end_ns"].iloc[-1] - b["start_ns"].iloc[0]
    busy = (b["end_ns"] - b["start_ns"]).sum()
    assert ratio == pytest.approx(1 - busy / total, rel=1e-4)
    assert 0.8 < ratio < 0.95
    rate = peak_rate(b)
    assert rate == pytest.approx(t.rate, rel=0.1)
    # The study's model: 32 KiB at 2 ms one way and 100 MB/s.
    send = 32768 / 100e6
    assert study.idle_ratio(32768, 0.002, 100e6) == pytest.approx(1 - send / (0.008 + send))
    assert study.seq_read_throughput(32768, 0.002, 100e6) == pytest.approx(
        32768 / (0.008 + send))


def test_bursts_spacing_and_totals_read_in_slices_match_the_whole_table():
    """Bursts, the median spacing of data segments and the per-connection totals are read a
    slice of the table at a time: they must be what the whole table sorted by time gives,
    with bursts and equal time stamps across the cuts and stamps stepping back in time."""
    rng = np.random.default_rng(7)
    n = 150_000  # three slices and more
    gap = rng.choice([1_000, 2_000, 2_500, 150_000, 3_000_000_000], size=n,
                     p=[0.5, 0.3, 0.1, 0.09, 0.01])
    ts = 10**12 + np.cumsum(gap)
    ts[1000:1003] = ts[1000:1003][::-1]  # a capture's stamps stepping back
    segs = pd.DataFrame({"ts_ns": ts, "len": rng.integers(0, 9000, n).astype(np.int32),
                         "dir": pd.Categorical(rng.choice(["t2i", "i2t"], n, p=[0.9, 0.1])),
                         "conn": pd.Categorical(rng.choice(["a", "b"], n))})
    for d in ("t2i", "i2t"):
        x = segs[(segs["dir"] == d) & (segs["len"] > 0)]
        o = np.argsort(x["ts_ns"].to_numpy(), kind="stable")
        t, ln = x["ts_ns"].to_numpy()[o], x["len"].to_numpy(np.int64)[o]
        med = float(np.median(np.diff(t)))
        assert burst_gap_threshold(segs, d) == int(max(5 * med, 100_000))
        for thr in (100_000, 1_000_000):
            first = np.flatnonzero(np.concatenate([[True], np.diff(t) > thr]))
            last = np.concatenate([first[1:] - 1, [len(t) - 1]])
            b = data_bursts(segs, d, thr)
            assert b["start_ns"].tolist() == t[first].tolist()
            assert b["end_ns"].tolist() == t[last].tolist()
            assert b["bytes"].tolist() == np.add.reduceat(ln, first).tolist()
            assert b["segments"].tolist() == (last - first + 1).tolist()
        tot = payload_totals(segs, d)
        g = x.groupby("conn", observed=True)
        assert tot["bytes"].tolist() == g["len"].sum().tolist()
        assert tot["first_ns"].tolist() == g["ts_ns"].min().tolist()
        assert tot["last_ns"].tolist() == g["ts_ns"].max().tolist()
        assert tot["largest"].tolist() == g["len"].max().tolist()


@pytest.mark.parametrize("n", [140_001, 140_002])
def test_median_spacing_is_exact(n):
    """The median spacing is taken in two passes of bounded memory: it must be np.median's,
    for odd and even counts, spacings from nanoseconds to seconds, across the slices' cuts."""
    rng = np.random.default_rng(n)
    gap = np.where(rng.random(n) < 0.3, rng.integers(2**30, 2**33, n), rng.integers(1, 5000, n))
    ts = 10**12 + np.cumsum(gap)
    segs = pd.DataFrame({"ts_ns": ts, "len": np.full(n, 100, np.int32),
                         "dir": pd.Categorical(["t2i"] * n), "conn": pd.Categorical(["a"] * n)})
    assert median_spacing(segs, "t2i") == float(np.median(np.diff(ts)))
    segs["ts_ns"] = 10**12 + np.cumsum(rng.integers(2**30, 2**33, n))  # the median >= 1 s
    assert median_spacing(segs, "t2i") == float(np.median(np.diff(segs["ts_ns"])))
    segs["ts_ns"] = 10**12 + np.cumsum(rng.integers(2**26, 2**29, n))  # 67-540 ms
    assert median_spacing(segs, "t2i") == float(np.median(np.diff(segs["ts_ns"])))
