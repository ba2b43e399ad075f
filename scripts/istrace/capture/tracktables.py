"""The TCP tracker's CA-state intervals and marks (docs/schema.md §7): DIR/track_states.parquet
and DIR/track_events.parquet, their one writer and reader.

A lossy minute at full rate has a hundred thousand marks (retransmissions, duplicate ACKs, loss
episodes) and tens of thousands of state intervals; an hour's are millions. The tracker writes
each connection's and direction's as it finishes them (`TableWriter`) and hands on `FileTable`s:
the report's processes (its diagnosis, its plotter) each read only the rows and columns a step
asks for (`read`, `blocks`), when it asks, rather than each holding them whole (issue 17).
`FrameTable` holds a table in
memory (what tests, `istrace track` on one pcap and small tools build).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from istrace.capture.labels import concat_labelled
from istrace.capture.swapwrite import SwapWriter

STATE_COLUMNS = ["conn", "dir", "host", "source", "state", "start_ns", "end_ns"]
EVENT_COLUMNS = ["ts_ns", "conn", "dir", "host", "source", "kind", "seq", "bytes", "cmd", "note"]

_LABEL = pa.dictionary(pa.int32(), pa.string())
_TYPES = {"ts_ns": pa.int64(), "start_ns": pa.int64(), "end_ns": pa.int64(),
          "seq": pa.float64(), "bytes": pa.float64(), "cmd": pa.float64()}
# rows per row group, and per block a reader holds: what a step holds of a table at a time,
# and what a writer gathers (as Arrow tables of a slice's rows each, which cost far more a
# row than the values they hold)
GROUP_ROWS = 1 << 14

# where: a column and the value (or values) its rows must have; None: any
Where = str | Sequence[str] | None


def schema_of(columns: Sequence[str]) -> pa.Schema:
    """Times and numbers as such, every other column a label (dictionary-encoded text)."""
    return pa.schema([(c, _TYPES.get(c, _LABEL)) for c in columns])


def _wanted(where: dict[str, Where]) -> dict[str, list[str]]:
    return {k: [v] if isinstance(v, str) else list(v) for k, v in where.items() if v is not None}


def _picked(df: pd.DataFrame, want: dict[str, list[str]]) -> pd.DataFrame:
    if not want:
        return df
    keep = np.ones(len(df), bool)
    for k, values in want.items():
        keep &= df[k].isin(values).to_numpy(bool, na_value=False) if k in df.columns \
            else np.zeros(len(df), bool)
    return df[keep] if not keep.all() else df


class TrackTable:
    """The interface: `columns`, the table's; `where` picks rows by label (kind="retransmit",
    dir="t2i", state=("Loss", "Recovery")...)."""

    columns: list[str]

    def blocks(self, columns: Sequence[str] | None = None,
               **where: Where) -> Iterator[pd.DataFrame]:
        """The rows `where` picks with `columns` (all when None), a block at a time, in
        stored order."""
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    @property
    def empty(self) -> bool:
        return len(self) == 0

    def read(self, columns: Sequence[str] | None = None, **where: Where) -> pd.DataFrame:
        """blocks() as one table (labels categorical): what one step asks for."""
        cols = list(self.columns if columns is None else columns)
        return concat_labelled(list(self.blocks(cols, **where)), cols)

    def frame(self) -> pd.DataFrame:
        """The whole table: for tests and small tools."""
        return self.read()


class FrameTable(TrackTable):
    """A table in memory (a column the table lacks reads as all missing)."""

    def __init__(self, columns: Sequence[str], df: pd.DataFrame | None = None) -> None:
        self.columns = list(columns)
        self.df = pd.DataFrame(columns=self.columns) if df is None else df

    def blocks(self, columns: Sequence[str] | None = None,
               **where: Where) -> Iterator[pd.DataFrame]:
        if len(self.df):
            got = _picked(self.df, _wanted(where))
            if len(got):
                yield got.reindex(columns=list(self.columns if columns is None else columns))

    def __len__(self) -> int:
        return len(self.df)


class FileTable(TrackTable):
    """A table in a Parquet file TableWriter wrote."""

    def __init__(self, path: Path, columns: Sequence[str], rows: int) -> None:
        self.path, self.columns, self.rows = path, list(columns), rows

    @classmethod
    def open(cls, path: Path) -> FileTable:
        meta = pq.read_metadata(path)
        return cls(path, meta.schema.to_arrow_schema().names, meta.num_rows)

    def blocks(self, columns: Sequence[str] | None = None,
               **where: Where) -> Iterator[pd.DataFrame]:
        cols = list(self.columns if columns is None else columns)
        want = _wanted(where)
        if not self.rows:
            return
        read = list(dict.fromkeys([*cols, *want]))
        pf = pq.ParquetFile(self.path)
        try:
            for batch in pf.iter_batches(GROUP_ROWS, columns=read):
                got = _picked(batch.to_pandas(), want)
                if len(got):
                    yield got[cols]
        finally:
            pf.close()

    def __len__(self) -> int:
        return self.rows


class TableWriter(SwapWriter):
    """A table written a frame at a time, beside the old file and renamed over it on a clean
    close, which returns the FileTable that reads it (a failed tracking leaves no half
    table). Frames are gathered into row groups of GROUP_ROWS: the tracker writes a slice's
    few marks at a time, and a row group each was a footer that grew with the capture."""

    def __init__(self, path: Path, columns: Sequence[str]) -> None:
        self.columns = list(columns)
        self._schema = schema_of(self.columns)
        labels = [c for c in self.columns if c not in _TYPES]
        # dictionary pages for the labels only; lz4, as the samples
        super().__init__(path, self._schema, compression="lz4", use_dictionary=labels,
                         write_statistics=labels)
        self.rows = 0

    def write(self, df: pd.DataFrame | TrackTable) -> None:
        """Rows of the table's columns (a missing one: all missing), in any dtypes a label
        or number converts from."""
        if isinstance(df, TrackTable):
            for block in df.blocks(self.columns):
                self.write(block)
            return
        for a in range(0, len(df), GROUP_ROWS):
            part = df.iloc[a:a + GROUP_ROWS]
            arrays = [_array(part[c] if c in part.columns else None, f.type, len(part))
                      for c, f in zip(self.columns, self._schema, strict=True)]
            self.pending.add(pa.Table.from_arrays(arrays, schema=self._schema))
            self.rows += len(part)
            if self.pending.rows >= GROUP_ROWS:
                self._flush(whole_groups=True)

    def _flush(self, whole_groups: bool) -> None:
        """The rows gathered, written as row groups of GROUP_ROWS (`whole_groups`: the rest
        of a group kept for the next frames)."""
        t = self.pending.take()
        if t is None:
            return
        n = len(t) if not whole_groups else len(t) // GROUP_ROWS * GROUP_ROWS
        if n:
            self.writer.write_table(t.slice(0, n), row_group_size=GROUP_ROWS)
        if n < len(t):
            self.pending.add(t.slice(n))

    def close(self) -> FileTable:
        if not self.done:
            self._flush(whole_groups=False)
            if not self.rows:  # a readable table of no rows
                self.writer.write_table(self._schema.empty_table())
        self.swap()
        return FileTable(self.path, self.columns, self.rows)


def _array(col: pd.Series | None, kind: pa.DataType, n: int) -> pa.Array:
    if col is None:
        return pa.nulls(n, kind)
    if kind == _LABEL:
        cat = col if isinstance(col.dtype, pd.CategoricalDtype) else col.astype("category")
        codes = cat.cat.codes.to_numpy().astype(np.int32)
        return pa.DictionaryArray.from_arrays(
            pa.array(codes, mask=codes < 0),
            pa.array([str(v) for v in cat.cat.categories], pa.string()))
    if kind == pa.int64():
        return pa.array(pd.to_numeric(col).to_numpy(np.int64), pa.int64())
    v = pd.to_numeric(col, errors="coerce").to_numpy(np.float64, na_value=np.nan)
    return pa.array(v, pa.float64(), from_pandas=True)


def write_table(table: pd.DataFrame | TrackTable, path: Path, columns: Sequence[str]
                ) -> FileTable:
    """A whole table (in memory, or another file's) into `path`."""
    if isinstance(table, FileTable) and table.path.resolve() == path.resolve():
        return table
    with TableWriter(path, columns) as w:
        w.write(table)
    return w.close()


def as_table(t: pd.DataFrame | TrackTable | None, columns: Sequence[str]) -> TrackTable:
    """A TrackTable for either kind of input (a frame is wrapped, not copied)."""
    if isinstance(t, TrackTable):
        return t
    return FrameTable(columns, t)
