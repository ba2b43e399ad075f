"""The merge's external sort (istrace.merge.extsort) gives what one stable sort of all the rows
gives, with many runs and passes, and leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from istrace.merge.extsort import ExternalSort

SCHEMA = pa.schema([("t", pa.int64()), ("row", pa.int64()), ("name", pa.string())])


def _rows(rng: np.random.Generator, start: int, n: int) -> pa.Table:
    t = rng.integers(0, 50, n)  # few distinct times: many ties
    missing = rng.random(n) < 0.05
    return pa.table({"t": pa.array(t, mask=missing), "row": np.arange(start, start + n),
                     "name": [f"r{i}" for i in range(start, start + n)]}, schema=SCHEMA)


@pytest.mark.parametrize(("run_rows", "read_rows", "fan_in"),
                         [(1 << 15, 1 << 11, 32), (100, 7, 3), (37, 1, 2)])
def test_same_order_as_one_stable_sort(tmp_path: Path, run_rows: int, read_rows: int,
                                       fan_in: int) -> None:
    rng = np.random.default_rng(7)
    blocks, at = [], 0
    for n in rng.integers(0, 300, 12):
        blocks.append(_rows(rng, at, int(n)))
        at += int(n)
    whole = pa.concat_tables(blocks)
    want = whole.take(pc.sort_indices(whole, [("t", "ascending")]))  # stable, nulls last
    with ExternalSort(SCHEMA, "t", tmp_path, run_rows, read_rows, fan_in) as s:
        for b in blocks:
            s.add(b)
        got = list(s.batches(rows=64))
        assert s.rows == whole.num_rows
    assert all(b.num_rows == 64 for b in got[:-1])
    assert pa.concat_tables(got).equals(want)
    assert list(tmp_path.iterdir()) == []  # the runs are gone


def test_no_rows_gives_no_batches(tmp_path: Path) -> None:
    with ExternalSort(SCHEMA, "t", tmp_path) as s:
        s.add(SCHEMA.empty_table())
        assert list(s.batches()) == []


def test_scratch_removed_when_the_caller_fails(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), ExternalSort(SCHEMA, "t", tmp_path, run_rows=10) as s:
        s.add(_rows(np.random.default_rng(1), 0, 100))
        raise RuntimeError("the merge failed")
    assert list(tmp_path.iterdir()) == []
