"""A Parquet file written beside the one it replaces and renamed over it on a clean close: a
step that fails leaves neither a half-written table nor the old one changed. The tracker's
writers (tracksamples.SampleWriter, tracktables.TableWriter) are these, and gather the small
parts a slice of tracking gives into row groups (`Gathered`). Any other whole file of a
capture directory (verdict.json, report.html, trace.json, a plot, a CSV) goes through
`replacing`, the same rule for a writer that is given a path."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import pyarrow as pa
import pyarrow.parquet as pq


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary name beside `path` to write to; renamed over `path` when the block ends
    cleanly, removed when it fails (a killed run leaves only a hidden .tmp, which no reader
    takes for the file). A symlink at `path` (a read-only capture's mirror) is replaced, its
    target left alone."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # the suffix kept last: a writer that takes the format from the name (matplotlib) still can
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def replace_text(path: Path, text: str) -> None:
    """`text` as the whole of `path` (through `replacing`)."""
    with replacing(path) as tmp:
        tmp.write_text(text)


class SwapWriter:
    """`writer` takes the rows; `swap()` puts the file in place (once), `abandon()` drops it;
    as a context manager, whichever the block's end calls for."""

    def __init__(self, path: Path, schema: pa.Schema, **options: Any) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self.writer = pq.ParquetWriter(self._tmp, schema, **options)
        self.pending = Gathered()  # small parts not yet written as a row group
        self.done = False

    def swap(self) -> None:
        if not self.done:
            self.writer.close()
            os.replace(self._tmp, self.path)
            self.done = True

    def abandon(self) -> None:
        self.pending.take()
        if not self.done:
            self.writer.close()
            self._tmp.unlink(missing_ok=True)
            self.done = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        if et is None:
            self.close()
        else:
            self.abandon()

    def close(self) -> Any:
        """What the file holds, readable (the subclass's reader); the file put in place."""
        self.swap()
        return None


class Gathered:
    """Small Arrow tables of one schema gathered for one row group. Joined every JOIN parts:
    each part held alone kept its buffers and objects (a slice's few rows a part, a minute's
    tracking held thousands of them), and the join copies a few rows."""

    JOIN = 16

    def __init__(self) -> None:
        self.parts: list[pa.Table] = []
        self.rows = 0

    def add(self, t: pa.Table) -> None:
        self.parts.append(t)
        self.rows += t.num_rows
        if len(self.parts) >= self.JOIN:
            self.parts = [self.joined()]

    def joined(self) -> pa.Table:
        """The parts as one table of one chunk a column (labels in one dictionary)."""
        return pa.concat_tables(self.parts).unify_dictionaries().combine_chunks()

    def take(self) -> pa.Table | None:
        """The parts joined (None: none), and the gathering emptied."""
        t = self.joined() if self.parts else None
        self.parts, self.rows = [], 0
        return t
