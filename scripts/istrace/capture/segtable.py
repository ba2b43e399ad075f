"""The merged per-packet table (docs/schema.md §6b): every TCP segment of the iSCSI
connections, on the initiator's clock and tied to its command, one Parquet file per host
under DIR/segments/host=<host>/ (Hive partitions: the host is the directory's, not a column
of the files). The only writer and reader of those files.

Per-packet rows are most of a capture's rows, so they stay out of merged.parquet (events and
PDUs): the merger writes them a row group at a time as it walks the decoder's segments.bin,
and readers take the columns (and, for a look at the start, the rows) they need.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from istrace.capture import layout

# millions of rows name a few connections: stored (and read back) dictionary-encoded
_LABEL = pa.dictionary(pa.int32(), pa.string())
SCHEMA = pa.schema([
    ("ts_ns", pa.int64()),           # capture time on the host's own clock
    ("ts_ns_merged", pa.int64()),    # on the initiator's clock (clock.json's offset applied)
    ("conn", _LABEL),                # ini:port-tgt:port (istrace.capture.conn)
    ("dir", _LABEL),                 # i2t | t2i
    ("seq", pa.int64()), ("ack", pa.int64()), ("len", pa.int64()), ("flags", pa.int64()),
    ("win", pa.int64()),
    ("cmd_id", pa.int64()),          # the command whose bytes it carries; null for pure ACKs
])


def _pending(d: Path, host: str) -> Path:
    path = layout.segment_table(d, host)
    return path.with_name(f".{path.name}.tmp")


class SegmentTableWriter:
    """One host's table, written beside the old one and renamed over it on a clean close (a
    failed merge leaves the previous table whole); with `publish=False` it stays beside it
    until `publish` (the merger writes it while other steps that may still fail run)."""

    def __init__(self, d: Path, host: str, publish: bool = True) -> None:
        self.path = layout.segment_table(d, host)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = _pending(d, host)
        self._publish = publish
        # dictionary pages for the labels only: tried on every integer column they are
        # built and thrown away (half the write time, the same file size after lz4). The
        # integers delta-encoded: times, sequence numbers and lengths step by little from
        # row to row, so the file is far smaller and faster both ways (DuckDB, Spark and
        # Trino read the encoding)
        self._w = pq.ParquetWriter(
            self._tmp, SCHEMA, compression="lz4", use_dictionary=["conn", "dir"],
            column_encoding={f.name: "DELTA_BINARY_PACKED" for f in SCHEMA
                             if pa.types.is_integer(f.type)})
        self.rows = 0

    def write(self, cols: dict[str, object]) -> None:
        """One row group: a column (array or Series) per SCHEMA field."""
        arrays = []
        for f in SCHEMA:
            v = cols[f.name]
            if pa.types.is_dictionary(f.type):
                cat = pd.Series(v).astype("category")
                arrays.append(pa.DictionaryArray.from_arrays(
                    pa.array(cat.cat.codes.to_numpy().astype(np.int32),
                             mask=cat.isna().to_numpy()),
                    pa.array(cat.cat.categories.astype(str), pa.string())))
            else:
                arrays.append(pa.array(v, type=f.type, from_pandas=True))
        t = pa.Table.from_arrays(arrays, schema=SCHEMA)
        self._w.write_table(t)
        self.rows += t.num_rows

    def __enter__(self) -> SegmentTableWriter:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._w.close()
        if et is None:
            if self._publish:
                os.replace(self._tmp, self.path)
        else:
            self._tmp.unlink(missing_ok=True)


def publish(d: Path, host: str) -> None:
    """A table written with publish=False replaces the host's table."""
    os.replace(_pending(d, host), layout.segment_table(d, host))


def discard(d: Path, host: str) -> None:
    """A table written with publish=False is dropped; the host's table stays as it was."""
    _pending(d, host).unlink(missing_ok=True)


def remove(d: Path, host: str) -> None:
    """Drop a host's table (a merge that had no segments for it: an older one would lie)."""
    layout.segment_table(d, host).unlink(missing_ok=True)


def hosts(d: Path) -> list[str]:
    return [h for h in layout.HOSTS if layout.segment_table(d, h).is_file()]


def read(d: Path, host: str, columns: list[str] | None = None,
         max_rows: int | None = None) -> pd.DataFrame:
    """One host's table (the chosen columns; with max_rows, the first rows only, read a row
    group at a time), conn and dir as categoricals (their stored dictionaries)."""
    pf = pq.ParquetFile(layout.segment_table(d, host))
    if max_rows is None:
        t = pf.read(columns=columns)
    else:
        parts, got = [], 0
        for i in range(pf.num_row_groups):
            if got >= max_rows:
                break
            g = pf.read_row_group(i, columns=columns)
            parts.append(g.slice(0, max_rows - got))
            got += parts[-1].num_rows
        t = pa.concat_tables(parts) if parts else SCHEMA.empty_table().select(
            columns or SCHEMA.names)
    # cmd_id has gaps: a nullable integer, not float (the other columns have none)
    return t.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get if "cmd_id" in
                       t.column_names else None).astype(
        {c: "int64" for c in t.column_names if c not in ("conn", "dir", "cmd_id")})


def as_merged_rows(d: Path) -> pd.DataFrame:
    """Every host's table as rows of the merged trace (docs/schema.md §6: layer `net`,
    event `segment`, source `pcap`, `bytes` = payload, `rwnd` = window field; `flags` stays
    an integer), for a small capture looked at whole; a full-rate one is read a column or a
    window at a time (`read`)."""
    parts = [read(d, h).rename(columns={"len": "bytes", "win": "rwnd"}).assign(
        host=h, layer="net", event="segment", source="pcap") for h in hosts(d)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
