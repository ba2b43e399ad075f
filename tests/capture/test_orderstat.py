"""Exact quantiles over chunks (istrace.capture.orderstat) and the accounting's as-of lookup
over chunks: the same numbers as numpy on the whole column, whatever the chunking."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from istrace.capture import orderstat
from istrace.capture.tracksamples import FrameSamples
from istrace.report import accounting


def _chunked(x: np.ndarray, size: int) -> orderstat.Chunks:
    return lambda: (x[i:i + size] for i in range(0, len(x), size))


COLUMNS = {
    "normal": lambda rng, n: rng.normal(0, 1e6, n),
    "few values": lambda rng, n: rng.integers(0, 5, n).astype(float),
    "segments in flight": lambda rng, n: np.round(rng.exponential(70, n)) * 1448,
    "one value": lambda rng, n: np.full(n, 3.5),
    "signs and extremes": lambda rng, n: np.concatenate(
        [rng.normal(0, 1, n), [-0.0, 0.0, -1e300, 1e300, 5e-324]]),
}


@pytest.mark.parametrize("kind", sorted(COLUMNS))
@pytest.mark.parametrize("gather", [1 << 20, 64])
@pytest.mark.parametrize("distinct", [1 << 16, 0])
def test_quantiles_are_numpys(kind: str, gather: int, distinct: int,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Bit for bit: from the distinct values counted, and from the bits narrowed (also when
    few values may be gathered: more passes)."""
    monkeypatch.setattr(orderstat, "_GATHER", gather)
    monkeypatch.setattr(orderstat, "_DISTINCT", distinct)
    rng = np.random.default_rng(len(kind))
    for n in (1, 2, 3, 1000, 54321):
        x = COLUMNS[kind](rng, n)
        for size in (1, 997, 1 << 20):
            if size == 1 and n > 1000:
                continue
            c = _chunked(x, size)
            for q in (0.0, 0.05, 0.5, 0.99, 1.0):
                assert orderstat.quantile(c, q) == float(np.quantile(x, q)), (n, size, q)
            assert orderstat.median(c) == float(np.median(x))
            assert orderstat.count_range(c) == (len(x), float(x.min()), float(x.max()))


def test_no_values() -> None:
    none = _chunked(np.zeros(0), 10)
    assert np.isnan(orderstat.quantile(none, 0.5)) and np.isnan(orderstat.median(none))
    with pytest.raises(IndexError):
        orderstat.kth(_chunked(np.arange(3.0), 2), 3)


def test_asof_over_chunks_is_the_lookup_over_the_whole_series() -> None:
    """Chunk edges at repeated times (the last row of a time wins), queries before the first
    row (NaN), between, at and after the rows, in any order."""
    rng = np.random.default_rng(5)
    ts = np.sort(rng.integers(0, 400, 3000)).astype(np.int64)
    v = rng.random(len(ts))
    at = rng.integers(-10, 420, 5000).astype(np.int64)
    k = np.searchsorted(ts, at, side="right") - 1
    want = np.where(k >= 0, v[np.maximum(k, 0)], np.nan)
    for size in (1, 2, 7, 100, 5000):
        cuts = range(0, len(ts), size)
        got, rows = accounting.asof(((ts[a:a + size], v[a:a + size]) for a in cuts), at)
        np.testing.assert_array_equal(got, want)
        assert rows == len(ts)
    got, rows = accounting.asof(iter(()), at)
    assert np.isnan(got).all() and rows == 0


def test_samples_in_time_order_per_series() -> None:
    """A table's series come out each in time order; `timed` merges several in time order."""
    df = pd.DataFrame({"ts_ns": [5, 1, 4, 2, 3], "conn": "c", "dir": "t2i", "host": "target",
                       "source": ["estimated", "exact", "estimated", "exact", "estimated"],
                       "rwnd": [50.0, 10.0, 40.0, 20.0, 30.0]})
    s = FrameSamples(df)
    assert [(k.source, n) for k, n in s.keys()] == [("estimated", 3), ("exact", 2)]
    est = pd.concat(s.chunks(["ts_ns", "rwnd"], source="estimated"))
    assert est["ts_ns"].tolist() == [3, 4, 5] and est["rwnd"].tolist() == [30.0, 40.0, 50.0]
    both = pd.concat(s.timed(["ts_ns", "rwnd"], dir="t2i"))
    assert both["ts_ns"].tolist() == [1, 2, 3, 4, 5]
    assert s.rows(dir="i2t") == 0 and list(s.chunks(["ts_ns"], dir="i2t")) == []


def test_sample_order_stats_are_the_whole_columns(tmp_path) -> None:
    """Samples.order_stats over the series `where` picks, in the file a row group at a time:
    numpy's count, min, median and quantiles of those rows' values, NaN left out."""
    from istrace.capture.tracksamples import Key, SampleWriter
    rng = np.random.default_rng(7)
    keys = [Key("c", "t2i", "target", "estimated"), Key("c", "i2t", "initiator", "estimated")]
    want = {k: [] for k in keys}
    with SampleWriter(tmp_path / "track.parquet") as w:
        for _ in range(5):
            for k in keys:
                n = 3000
                rtt = np.round(rng.lognormal(8, 0.5, n))  # microseconds, many distinct
                rtt[rng.random(n) < 0.9] = np.nan  # an ACK in tens has a sample
                w.write(k, {"ts_ns": np.arange(n, dtype=np.int64), "rtt_us": rtt})
                want[k].append(rtt[~np.isnan(rtt)])
        s = w.close()
    for k in keys:
        x = np.concatenate(want[k])
        got = s.order_stats("rtt_us", (0.05, 0.99), dir=k.dir, host=k.host)
        assert got.n == len(x) > 1000
        assert (got.min, got.median) == (x.min(), np.median(x))
        assert got.quantiles == {q: float(np.quantile(x, q)) for q in (0.05, 0.99)}
    empty = s.order_stats("rtt_us", (0.05,), dir="t2i", host="initiator")
    assert empty.n == 0 and np.isnan(empty.median) and np.isnan(empty.quantiles[0.05])


def test_time_range_from_the_row_groups_is_the_rows(tmp_path) -> None:
    """FileSamples.time_range from the row groups' statistics: the first and last time of the
    rows `where` picks, as the rows themselves give them (FrameSamples reads them)."""
    from istrace.capture.tracksamples import Key, SampleWriter
    rng = np.random.default_rng(3)
    df = pd.DataFrame({"ts_ns": np.sort(rng.integers(10**9, 2 * 10**9, 9000)),
                       "conn": "c", "host": "target", "source": "estimated",
                       "dir": rng.choice(["t2i", "i2t"], 9000), "rwnd": 1.0})
    with SampleWriter(tmp_path / "track.parquet") as w:
        for d, g in df.groupby("dir"):
            w.write(Key("c", d, "target", "estimated"), {"ts_ns": g["ts_ns"].to_numpy(),
                                                          "rwnd": g["rwnd"].to_numpy()})
        s = w.close()
    for d in ("t2i", "i2t"):
        t = df.loc[df["dir"] == d, "ts_ns"]
        assert s.time_range(dir=d) == (t.min(), t.max()) == FrameSamples(df).time_range(dir=d)
    assert s.time_range() == (df["ts_ns"].min(), df["ts_ns"].max())
    assert s.time_range(dir="nowhere") is None and FrameSamples(df).time_range(host="x") is None
