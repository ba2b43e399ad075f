"""The tracker's tables: Parquet by default, CSV when the name asks, the same rows either way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from istrace.capture.layout import track_files
from istrace.capture.outputs import write_track_tables
from istrace.track.tracker import EVENT_COLUMNS, SAMPLE_COLUMNS, STATE_COLUMNS


def _tables() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    n = 5
    samples = pd.DataFrame({c: np.full(n, np.nan) for c in SAMPLE_COLUMNS})
    samples["ts_ns"] = np.arange(n, dtype=np.int64) * 1000
    samples["conn"] = pd.Categorical(["10.0.0.1:5000-10.0.0.2:3260"] * n)
    samples["dir"] = pd.Categorical(["t2i"] * n)
    samples["inflight_bytes"] = [0.0, 1448.0, 2896.0, np.nan, 1448.0]
    states = pd.DataFrame([("c", "t2i", "target", "estimated", "Loss", 10, 20)],
                          columns=STATE_COLUMNS)
    events = pd.DataFrame(columns=EVENT_COLUMNS)  # none: still a readable table
    return samples, states, events


def _read(p: Path) -> pd.DataFrame:
    return pd.read_csv(p) if p.suffix == ".csv" else pd.read_parquet(p)


def test_parquet_by_default_csv_when_asked(tmp_path: Path) -> None:
    samples, states, events = _tables()
    for name in ("track.parquet", "track.csv"):
        paths = write_track_tables(samples, states, events, tmp_path / name)
        assert paths == list(track_files(tmp_path / name))
        assert {p.suffix for p in paths} == {Path(name).suffix}
        back = [_read(p) for p in paths]
        assert list(back[0].columns) == SAMPLE_COLUMNS and len(back[0]) == 5
        assert back[0]["inflight_bytes"].tolist()[:3] == [0.0, 1448.0, 2896.0]
        assert back[0]["conn"].astype(str).unique().tolist() == ["10.0.0.1:5000-10.0.0.2:3260"]
        assert back[1]["state"].tolist() == ["Loss"] and int(back[1]["end_ns"].iloc[0]) == 20
        assert list(back[2].columns) == EVENT_COLUMNS and back[2].empty


def test_a_large_table_is_written_a_row_group_at_a_time(tmp_path: Path) -> None:
    """More rows than one conversion takes: the same rows back, one schema throughout, also
    for a text column empty in the first row group."""
    n = 600_000
    rng = np.random.default_rng(3)
    samples = pd.DataFrame({c: np.full(n, np.nan) for c in SAMPLE_COLUMNS})
    samples["ts_ns"] = np.arange(n, dtype=np.int64)
    samples["conn"] = pd.Categorical(rng.choice(["a:1-b:2", "a:3-b:2"], n))
    samples["dir"] = pd.Categorical(rng.choice(["t2i", "i2t"], n))
    samples["rtt_us"] = np.where(rng.random(n) < 0.1, rng.random(n) * 100, np.nan)
    events = pd.DataFrame({c: np.zeros(n, np.int64) for c in EVENT_COLUMNS})
    events["note"] = pd.Series([None] * n, dtype=object)
    events.loc[n - 3:, "note"] = "late"  # text only in the last row group
    states = pd.DataFrame(columns=STATE_COLUMNS)
    paths = write_track_tables(samples, states, events, tmp_path / "track.parquet")
    back = pd.read_parquet(paths[0])
    assert list(back.columns) == SAMPLE_COLUMNS and len(back) == n
    for c in SAMPLE_COLUMNS:  # labels compared by code (element-wise text takes a minute)
        a, b = back[c], samples[c]
        if isinstance(b.dtype, pd.CategoricalDtype):
            assert list(a.cat.categories) == list(b.cat.categories), c
            a, b = a.cat.codes, b.cat.codes
        np.testing.assert_array_equal(a.to_numpy(), b.to_numpy(), err_msg=c)
    ev = pd.read_parquet(paths[2])
    assert ev["note"].isna().sum() == n - 3 and ev["note"].tolist()[-3:] == ["late"] * 3
    assert pq.ParquetFile(paths[0]).metadata.num_row_groups >= 3
