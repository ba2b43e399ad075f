"""A Parquet file written beside the one it replaces and renamed over it on a clean close: a
step that fails leaves neither a half-written table nor the old one changed. The tracker's
writers (tracksamples.SampleWriter, tracktables.TableWriter) are these."""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import pyarrow as pa
import pyarrow.parquet as pq


class SwapWriter:
    """`writer` takes the rows; `swap()` puts the file in place (once), `abandon()` drops it;
    as a context manager, whichever the block's end calls for."""

    def __init__(self, path: Path, schema: pa.Schema, **options: Any) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = path.with_name(f".{path.name}.tmp")
        self.writer = pq.ParquetWriter(self._tmp, schema, **options)
        self.done = False

    def swap(self) -> None:
        if not self.done:
            self.writer.close()
            os.replace(self._tmp, self.path)
            self.done = True

    def abandon(self) -> None:
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
