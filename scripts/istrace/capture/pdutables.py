"""The decoded PDU tables of a capture, read from the decoder's pdus.csv when a step asks for
them and let go when it is done, not held for the whole analysis.

Held from the load on, the PDUs were in every one of the report's processes (each forked
holding them) and were what grew most with the capture's length. Reading the analysed
columns back is cheap, and each step reads only what it needs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from istrace.capture.decoded import (
    ANALYSED_PDU_COLUMNS,
    read_table,
    read_table_blocks,
    table_columns,
)

# the PDU table's text columns that name one of a few values: read as categoricals, so
# each process holds a code per row, not the same text again and again
PDU_LABELS = ["conn", "dir", "opcode_name", "cdb_name"]
BLOCK_ROWS = 4096  # read_where's rows a block: its parser holds every field of a block's rows


class PduTables(MutableMapping[str, pd.DataFrame]):
    """host -> its PDUs (the columns of decoded.ANALYSED_PDU_COLUMNS the file has): a table
    given to it (a test's, `istrace track --pdus`'s) is held; one of a file is read anew each
    time it is asked for. `read` takes fewer columns."""

    def __init__(self, given: dict[str, pd.DataFrame] | None = None) -> None:
        self._tables: dict[str, pd.DataFrame | Path] = dict(given or {})

    def add_file(self, host: str, path: Path) -> None:
        """`path` (a decoder's pdus.csv) is `host`'s table; its header is read now, so an
        unreadable file is told at the load (OSError, ValueError), not by a later step."""
        table_columns(path)
        self._tables[host] = path

    def read(self, host: str, columns: Sequence[str] | None = None) -> pd.DataFrame | None:
        """`host`'s PDUs with `columns` of the analysed ones (None: all of them); None when
        the host has no table."""
        t = self._tables.get(host)
        if isinstance(t, pd.DataFrame):
            return t if columns is None else t[[c for c in columns if c in t.columns]]
        if t is None:
            return None
        return read_table(t, ANALYSED_PDU_COLUMNS if columns is None else columns, PDU_LABELS,
                          by_blocks=True)

    def blocks(self, host: str, columns: Sequence[str], rows: int = 1 << 14
               ) -> Iterator[pd.DataFrame]:
        """`host`'s PDUs with `columns` of the analysed ones, `rows` at a time (the labels
        categorical, each block's own): for a step that takes a few arrays of every PDU and
        need not hold the table (nothing when the host has no table)."""
        t = self._tables.get(host)
        if isinstance(t, pd.DataFrame):
            yield t[[c for c in columns if c in t.columns]]
        elif t is not None:
            yield from read_table_blocks(t, columns, rows, PDU_LABELS)

    def read_where(self, host: str, columns: Sequence[str],
                   keep: Callable[[pd.DataFrame], Any]) -> pd.DataFrame | None:
        """The rows of `host`'s PDUs that `keep` (a mask of a table of `columns`) picks,
        the file read a block at a time: a step that needs a few of a minute's PDUs never
        holds them all. None when the host has no table."""
        t = self._tables.get(host)
        if t is None:
            return None
        if isinstance(t, pd.DataFrame):
            t = t[[c for c in columns if c in t.columns]]
            return t[_mask(keep(t))]
        kept = [b[_mask(keep(b))] for b in read_table_blocks(t, columns, BLOCK_ROWS)]
        kept = [b for b in kept if len(b)] or kept[:1]
        if not kept:
            return read_table(t, columns, PDU_LABELS)  # no row at all
        out = pd.concat(kept, ignore_index=True) if len(kept) > 1 else kept[0]
        # as read_table reads them: the labels categorical, every kept block's one type
        for c in PDU_LABELS:
            if c in out.columns:
                out[c] = out[c].astype("category")
        return out.reset_index(drop=True)

    def __getitem__(self, host: str) -> pd.DataFrame:
        t = self.read(host)
        if t is None:
            raise KeyError(host)
        return t

    def __setitem__(self, host: str, table: pd.DataFrame) -> None:
        self._tables[host] = table

    def __delitem__(self, host: str) -> None:
        del self._tables[host]

    def __contains__(self, host: object) -> bool:  # Mapping's would read the table
        return host in self._tables

    def __iter__(self) -> Iterator[str]:
        return iter(self._tables)

    def __len__(self) -> int:
        return len(self._tables)

    def first(self, hosts: Sequence[str]) -> str | None:
        """The first of `hosts` that has a table (none read)."""
        return next((h for h in hosts if h in self._tables), None)


def _mask(m: Any) -> np.ndarray:
    """A mask of rows as booleans, a missing value (a comparison with a missing time) False."""
    if isinstance(m, pd.Series | pd.api.extensions.ExtensionArray):
        # pandas-stubs type pd.array(..., "boolean") for sequences and numpy only; pandas
        # takes a Series or an extension array too
        return pd.array(m, dtype="boolean").fillna(False).to_numpy(bool)  # type: ignore[call-overload]
    return np.asarray(m, bool)
