"""The merged per-packet table (docs/schema.md §6b): written a row group at a time, read back
as written, and the layout DuckDB reads as one table over a directory of captures (the query
docs/report.md shows)."""

from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
from istrace.capture import layout, segtable


def _write(d: Path, host: str, groups: list[int], conn: str,
           publish: bool = True) -> pd.DataFrame:
    rows = []
    with segtable.SegmentTableWriter(d, host, publish) as w:
        at = 0
        for n in groups:
            ts = np.arange(at, at + n, dtype=np.int64) * 1000
            cols = {"ts_ns": ts, "ts_ns_merged": ts - 7, "conn": pd.Series([conn] * n),
                    "dir": pd.Series(["t2i", "i2t"] * (n // 2) + ["t2i"] * (n % 2)),
                    "seq": ts % 2**32, "ack": ts // 3, "len": np.where(ts % 2000 == 0, 1448, 0),
                    "flags": np.full(n, 0x10), "win": np.full(n, 512),
                    "cmd_id": pd.array([i // 4 if i % 3 else None for i in range(at, at + n)],
                                       dtype="Int64")}
            w.write(cols)
            rows.append(pd.DataFrame(cols))
            at += n
    return pd.concat(rows, ignore_index=True)


def test_read_back_as_written(tmp_path: Path) -> None:
    want = _write(tmp_path, "target", [5, 0, 7], "10.0.0.1:5000-10.0.0.2:3260")
    got = segtable.read(tmp_path, "target")
    assert list(got.columns) == segtable.SCHEMA.names
    assert isinstance(got["conn"].dtype, pd.CategoricalDtype)
    for c in got.columns:
        assert got[c].astype(str).tolist() == want[c].astype(str).tolist(), c
    # the first rows only, across row groups
    head = segtable.read(tmp_path, "target", ["ts_ns"], max_rows=6)
    assert head["ts_ns"].tolist() == want["ts_ns"].head(6).tolist()
    assert segtable.hosts(tmp_path) == ["target"]


def test_failed_write_keeps_the_old_table(tmp_path: Path) -> None:
    _write(tmp_path, "initiator", [4], "a:1-b:3260")
    with pytest.raises(KeyError), segtable.SegmentTableWriter(tmp_path, "initiator") as w:
        w.write({"ts_ns": [1]})  # no such row: every column is required
    assert len(segtable.read(tmp_path, "initiator")) == 4
    assert [p.name for p in layout.segment_table(tmp_path, "initiator").parent.iterdir()] == \
        ["part-0.parquet"]


def test_a_table_written_unpublished_waits_beside_the_old_one(tmp_path: Path) -> None:
    """The merger writes the segment tables while its other steps may still fail: the new
    table replaces the old one only when published, and a discarded one leaves no trace."""
    _write(tmp_path, "target", [4], "a:1-b:3260")
    _write(tmp_path, "target", [9], "a:1-b:3260", publish=False)
    assert len(segtable.read(tmp_path, "target")) == 4
    segtable.discard(tmp_path, "target")
    assert len(segtable.read(tmp_path, "target")) == 4
    assert [p.name for p in layout.segment_table(tmp_path, "target").parent.iterdir()] == \
        ["part-0.parquet"]
    _write(tmp_path, "target", [9], "a:1-b:3260", publish=False)
    segtable.publish(tmp_path, "target")
    assert len(segtable.read(tmp_path, "target")) == 9
    assert [p.name for p in layout.segment_table(tmp_path, "target").parent.iterdir()] == \
        ["part-0.parquet"]


def test_duckdb_reads_many_captures_as_one_table(tmp_path: Path) -> None:
    for run, n in (("run-a", 6), ("run-b", 9)):
        for host in layout.HOSTS:
            _write(tmp_path / run, host, [n], f"{run}:1-tgt:3260")
    q = f"""
        SELECT regexp_extract(filename, '([^/]+)/segments/', 1) AS capture, host,
               count(*) AS segments, sum(len) AS payload, count(cmd_id) AS tied
        FROM read_parquet('{tmp_path}/*/segments/*/*.parquet', hive_partitioning = true,
                          filename = true)
        GROUP BY ALL ORDER BY capture, host"""
    got = duckdb.sql(q).df()
    assert got[["capture", "host"]].values.tolist() == [
        ["run-a", "initiator"], ["run-a", "target"], ["run-b", "initiator"], ["run-b", "target"]]
    assert got["segments"].tolist() == [6, 6, 9, 9]
    assert got["payload"].tolist() == [3 * 1448] * 2 + [5 * 1448] * 2
    assert got["tied"].tolist() == [4, 4, 6, 6]
