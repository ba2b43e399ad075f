"""The tracker's tables: Parquet by default, CSV when the name asks, the same rows either way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
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
