"""Rows put in order of a time column in memory that does not grow with their number: an
external merge sort.

Rows come in tables (`add`); every `run_rows` of them are sorted and written to a run file in
a scratch directory. `batches` then merges the runs, holding a batch of each: at most
`fan_in` runs at once, merged in passes when there are more. Rows with the same time keep
the order they came in (each carries its arrival number), so the result is what a stable
sort of all of them at once gives, for a trace of any length.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_ORD = "_arrival"
# a missing time sorts last, as Arrow's sort puts nulls
_NO_TIME = np.iinfo(np.int64).max
# scratch files (the merge's too): Arrow's own format, compressed, written and read back
# several times faster than Parquet, and only ever read here
SCRATCH_FORMAT = pa.ipc.IpcWriteOptions(compression="lz4")


def scratch_batches(path: Path) -> Iterator[pa.RecordBatch]:
    """A scratch file's batches, read (not mapped: a mapped file's pages would count as this
    process's memory) one at a time."""
    reader = pa.ipc.open_file(pa.OSFile(str(path)))
    for i in range(reader.num_record_batches):
        yield reader.get_batch(i)


class ExternalSort:
    """Sorts the rows given to `add` (tables of one schema) by `key`, ties in arrival order.
    A context manager: the scratch directory, made under `scratch_in`, goes on exit."""

    # run_rows: a run is sorted by copying its rows in order, so its rows are held twice,
    # which a smaller run keeps small beside the merge's other holdings
    def __init__(self, schema: pa.Schema, key: str, scratch_in: Path, run_rows: int = 1 << 14,
                 read_rows: int = 1 << 10, fan_in: int = 32) -> None:
        self.schema, self.key = schema, key
        self.run_rows, self.read_rows, self.fan_in = run_rows, read_rows, max(fan_in, 2)
        self._scratch = Path(tempfile.mkdtemp(prefix=".sort-", dir=scratch_in))
        self._run_schema = schema.append(pa.field(_ORD, pa.int64()))
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._runs: list[Path] = []
        self._made = 0  # runs written, for unique names (a pass reads some while writing one)
        self.rows = 0

    def __enter__(self) -> ExternalSort:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._pending.clear()
        shutil.rmtree(self._scratch, ignore_errors=True)

    def add(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        table = table.select(self.schema.names).cast(self.schema)
        self._pending.append(table.append_column(
            _ORD, pa.array(np.arange(self.rows, self.rows + table.num_rows, dtype=np.int64))))
        self.rows += table.num_rows
        self._pending_rows += table.num_rows
        if self._pending_rows >= self.run_rows:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        run = pa.concat_tables(self._pending)
        self._pending, self._pending_rows = [], 0
        run = run.take(pc.sort_indices(run, [(self.key, "ascending"), (_ORD, "ascending")]))
        self._write_run(iter([run]))

    def _write_run(self, tables: Iterator[pa.Table]) -> None:
        path = self._scratch / f"run-{self._made:06d}.arrow"
        self._made += 1
        with pa.ipc.new_file(path, self._run_schema, options=SCRATCH_FORMAT) as w:
            for t in tables:
                w.write_table(t, max_chunksize=self.read_rows)
        self._runs.append(path)

    def batches(self, rows: int = 1 << 15) -> Iterator[pa.Table]:
        """Every row in order, `rows` a table (the last may be shorter), without the arrival
        numbers."""
        self._flush()
        while len(self._runs) > self.fan_in:  # passes: fan_in runs into one, until few
            groups = [self._runs[i:i + self.fan_in]
                      for i in range(0, len(self._runs), self.fan_in)]
            self._runs = []
            for group in groups:
                self._write_run(_merged(group, self.key))
                for p in group:
                    p.unlink()
        buf: list[pa.Table] = []
        held = 0
        for t in _merged(self._runs, self.key):
            buf.append(t)
            held += t.num_rows
            while held >= rows:
                whole = pa.concat_tables(buf)
                yield whole.slice(0, rows).drop_columns([_ORD])
                rest = whole.slice(rows)
                buf, held = ([rest] if rest.num_rows else []), rest.num_rows
        if held:
            yield pa.concat_tables(buf).drop_columns([_ORD])


class _Cursor:
    """A run read a batch at a time; `time` and `order` are the current batch's keys."""

    def __init__(self, path: Path, key: str) -> None:
        self.batches = scratch_batches(path)
        self.key = key
        self.table: pa.Table | None = None
        self._next()

    def _next(self) -> None:
        self.table = None
        for batch in self.batches:
            t = pa.Table.from_batches([batch])
            if t.num_rows:
                self.table = t
                self.time = pc.fill_null(t[self.key], _NO_TIME).to_numpy()
                self.order = t[_ORD].to_numpy()
                return

    def last(self) -> tuple[int, int]:
        return int(self.time[-1]), int(self.order[-1])

    def take_through(self, bound: tuple[int, int]) -> pa.Table | None:
        """The rows at or before `bound` (time, then arrival), taken off the front."""
        assert self.table is not None
        t, o = bound
        lo = int(np.searchsorted(self.time, t, "left"))
        hi = int(np.searchsorted(self.time, t, "right"))
        n = lo + int(np.searchsorted(self.order[lo:hi], o, "right"))
        if n == 0:
            return None
        got = self.table.slice(0, n)
        if n == self.table.num_rows:
            self._next()
        else:
            self.table = self.table.slice(n)
            self.time, self.order = self.time[n:], self.order[n:]
        return got


def _merged(runs: list[Path], key: str) -> Iterator[pa.Table]:
    """The runs' rows in order, a table per step: each step takes every run's rows up to the
    smallest last row among the groups held, so one group at least is used up."""
    cursors = [c for c in (_Cursor(p, key) for p in runs) if c.table is not None]
    while cursors:
        bound = min(c.last() for c in cursors)
        pieces = [p for p in (c.take_through(bound) for c in cursors) if p is not None]
        cursors = [c for c in cursors if c.table is not None]
        step = pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)
        if len(pieces) > 1:
            step = step.take(pc.sort_indices(step, [(key, "ascending"), (_ORD, "ascending")]))
        yield step
