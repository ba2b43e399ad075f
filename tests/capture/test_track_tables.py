"""The tracker's tables: Parquet by default, CSV when the name asks, the same rows either way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from istrace.capture.layout import track_files
from istrace.capture.outputs import write_track_tables
from istrace.capture.tracksamples import FileSamples, Samples, as_samples
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


def test_a_large_table_is_written_a_series_a_row_group_at_a_time(tmp_path: Path) -> None:
    """More rows than one row group holds, four series interleaved: each series comes back
    whole and in time order, from the file and from the file opened again, in row groups of
    one series each; a text column empty in the first row group of the events stays text."""
    n = 600_000
    rng = np.random.default_rng(3)
    samples = pd.DataFrame({c: np.full(n, np.nan) for c in SAMPLE_COLUMNS})
    samples["ts_ns"] = rng.permutation(n).astype(np.int64)
    samples["conn"] = pd.Categorical(rng.choice(["a:1-b:2", "a:3-b:2"], n))
    samples["dir"] = pd.Categorical(rng.choice(["t2i", "i2t"], n))
    samples["host"] = "target"
    samples["source"] = "estimated"
    samples["rtt_us"] = np.where(rng.random(n) < 0.1, rng.random(n) * 100, np.nan)
    events = pd.DataFrame({c: np.zeros(n, np.int64) for c in EVENT_COLUMNS})
    events["note"] = pd.Series([None] * n, dtype=object)
    events.loc[n - 3:, "note"] = "late"  # text only in the last row group
    states = pd.DataFrame(columns=STATE_COLUMNS)
    paths = write_track_tables(samples, states, events, tmp_path / "track.parquet")
    back = pd.read_parquet(paths[0])
    assert list(back.columns) == SAMPLE_COLUMNS and len(back) == n
    pf = pq.ParquetFile(paths[0])
    assert pf.metadata.num_row_groups >= 4
    for i in range(pf.metadata.num_row_groups):
        g = pf.read_row_group(i, columns=["conn", "dir"]).to_pandas()
        assert g["conn"].nunique() == 1 and g["dir"].nunique() == 1
    for got in (FileSamples.open(paths[0]), as_samples(samples)):
        assert len(got) == n and len(got.keys()) == 4
        for conn in ("a:1-b:2", "a:3-b:2"):
            for d in ("t2i", "i2t"):
                want = samples[(samples["conn"] == conn) & (samples["dir"] == d)]
                want = want.sort_values("ts_ns")
                chunks = list(got.chunks(["ts_ns", "rtt_us"], conn=conn, dir=d))
                assert len(chunks) >= 1
                rows = pd.concat(chunks, ignore_index=True)
                np.testing.assert_array_equal(rows["ts_ns"], want["ts_ns"])
                np.testing.assert_array_equal(rows["rtt_us"], want["rtt_us"])
                assert got.rows(conn=conn, dir=d) == len(want)
                # a column's values (NaN dropped), read from the file without a table per
                # row group: what the table-made reading of the base class gives
                for col in ("rtt_us", "cwnd", "ts_ns"):
                    fast = list(got.values(col, conn=conn, dir=d))
                    slow = list(Samples.values(got, col, conn=conn, dir=d))
                    assert [v.dtype for v in fast] == [np.float64] * len(slow)
                    np.testing.assert_array_equal(np.concatenate(fast), np.concatenate(slow))
                    assert len(np.concatenate(fast)) == (
                        want[col].notna().sum() if col != "cwnd" else 0)
    ev = pd.read_parquet(paths[2])
    assert ev["note"].isna().sum() == n - 3 and ev["note"].tolist()[-3:] == ["late"] * 3


def _marks(n: int, seed: int = 5) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "ts_ns": rng.permutation(n).astype(np.int64),
        "conn": pd.Categorical(rng.choice(["a:1-b:2", "a:3-b:2"], n)),
        "dir": rng.choice(["t2i", "i2t"], n),  # text, not categorical: converted
        "host": "target", "source": rng.choice(["exact", "estimated"], n),
        "kind": pd.Categorical(rng.choice(["retransmit", "dupack", "loss_episode"], n)),
        "seq": rng.random(n) * 1e9, "bytes": np.where(rng.random(n) < 0.5, 1448.0, np.nan),
        "cmd": np.where(rng.random(n) < 0.3, np.nan, rng.integers(0, 50, n).astype(float)),
        "note": pd.Categorical([None] * n)})[EVENT_COLUMNS]


def test_marks_read_from_the_file_are_the_rows_held(tmp_path: Path) -> None:
    """A table of marks written in frames (more rows than a block holds) reads back, whole or
    picked by label, as the same rows the table in memory gives; the loss of each command and
    the time in each state, summed a block at a time, are those of the whole table."""
    from istrace.capture.tracktables import GROUP_ROWS, FileTable, FrameTable, TableWriter
    from istrace.track.tracker import TrackResult, loss_commands, state_time

    n = 3 * GROUP_ROWS + 17
    ev = _marks(n)
    with TableWriter(tmp_path / "ev.parquet", EVENT_COLUMNS) as w:
        w.write(ev.iloc[:1000])
        w.write(ev.iloc[1000:])
    filed, held = w.close(), FrameTable(EVENT_COLUMNS, ev)
    assert len(filed) == n and len(FileTable.open(tmp_path / "ev.parquet")) == n
    assert len(list(filed.blocks(["ts_ns"]))) >= 4  # never all at once
    for where in ({}, {"kind": "retransmit"}, {"kind": ("retransmit", "loss_episode"),
                                                "dir": "t2i", "conn": "a:3-b:2"}):
        a, b = filed.read(**where), held.read(**where)
        assert len(a) > 0
        pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True),
                                      check_dtype=False, check_categorical=False)
        assert a["note"].isna().all()
    assert filed.read(["ts_ns"], kind="nothing").empty
    st = pd.DataFrame({"conn": ["c"] * n, "dir": "t2i", "host": "target",
                       "source": ev["source"].to_numpy(), "state": ev["kind"].astype(str),
                       "start_ns": ev["ts_ns"], "end_ns": ev["ts_ns"] + ev.index.to_numpy() % 7})
    st_filed = TableWriter(tmp_path / "st.parquet", STATE_COLUMNS)
    st_filed.write(st)
    one = TrackResult(states=FrameTable(STATE_COLUMNS, st), events=held)
    two = TrackResult(states=st_filed.close(), events=filed)
    pd.testing.assert_frame_equal(loss_commands(two), loss_commands(one))
    pd.testing.assert_frame_equal(state_time(two), state_time(one))
    hit = ev[ev["kind"].isin(["retransmit", "loss_episode"]) & ev["cmd"].notna()]
    assert loss_commands(two)["retransmits"].sum() == len(hit)
    assert state_time(two)["total_ns"].sum() == int((st["end_ns"] - st["start_ns"]).sum())


def test_a_failed_writer_leaves_no_table(tmp_path: Path) -> None:
    from istrace.capture.tracktables import TableWriter

    path = tmp_path / "ev.parquet"
    with pytest.raises(RuntimeError):
        with TableWriter(path, EVENT_COLUMNS) as w:
            w.write(_marks(10))
            raise RuntimeError("the tracking failed")
    assert list(tmp_path.iterdir()) == []
    empty = TableWriter(path, EVENT_COLUMNS).close()  # no rows: still a readable table
    assert empty.empty and list(pd.read_parquet(path).columns) == EVENT_COLUMNS


def test_small_frames_are_gathered_into_row_groups(tmp_path: Path) -> None:
    """The tracker writes a slice's few rows at a time: hundreds of small frames make a few
    row groups (their metadata is held by the writer to the end and parsed by every reader),
    the rows in the order written, labels whose values differ from frame to frame intact;
    a series' samples never share a row group with another series'."""
    from istrace.capture.tracksamples import MIN_GROUP_ROWS, Key, SampleWriter
    from istrace.capture.tracktables import GROUP_ROWS, TableWriter

    ev = _marks(5 * GROUP_ROWS // 2, seed=9)
    with TableWriter(tmp_path / "ev.parquet", EVENT_COLUMNS) as w:
        for a in range(0, len(ev), 97):
            w.write(ev.iloc[a:a + 97])
    filed = w.close()
    assert pq.ParquetFile(filed.path).metadata.num_row_groups == 3
    pd.testing.assert_frame_equal(filed.read().reset_index(drop=True),
                                  ev.reset_index(drop=True), check_dtype=False,
                                  check_categorical=False)

    keys = [Key("a:1-b:2", "i2t", "initiator", "estimated"),
            Key("a:1-b:2", "t2i", "target", "estimated")]
    with SampleWriter(tmp_path / "track.parquet") as sw:
        for k in keys:
            for a in range(0, 50 * (3 * MIN_GROUP_ROWS // 50), 50):
                sw.write(k, {"ts_ns": np.arange(a, a + 50, dtype=np.int64),
                             "rtt_us": np.full(50, float(a))})
        sw.write(keys[0], {"ts_ns": np.arange(10**6, 10**6 + 3, dtype=np.int64)})
    got = sw.close()
    pf = pq.ParquetFile(got.path)
    assert pf.metadata.num_row_groups <= 8, pf.metadata.num_row_groups
    for i in range(pf.metadata.num_row_groups):
        g = pf.read_row_group(i, columns=["dir"]).to_pandas()
        assert g["dir"].nunique() == 1
    again = FileSamples.open(got.path)
    for k in keys:
        rows = pd.concat(list(again.chunks(["ts_ns", "rtt_us"], **k._asdict())))
        n = 50 * (3 * MIN_GROUP_ROWS // 50) + (3 if k.dir == "i2t" else 0)
        assert len(rows) == n and (np.diff(rows["ts_ns"].to_numpy()) > 0).all()
        assert got.rows(**k._asdict()) == n
