"""One capture point's TCP segments as the analyses walk them: a slice of rows at a time.

`FileSegments` reads the decoder's segments.bin (istrace.capture.decoded) where a slice is
asked for and gives the file's pages back once it is read; `FrameSegments` takes the slices
from a table in memory (what tests and small tools build). Nothing is held per row for the
whole capture: a minute at full rate is millions of segments, and what an analysis holds must
not grow with them (issue 17). A file's rows are labelled where they are read, from a table
of its few distinct (src, dst, sport, dport): each one's connection and direction.

Both answer `read(columns, a, b)` (rows a..b of the stored columns, each in the type
`read_segments` gives it, and of the label columns `conn` and `dir` as integer codes into
`conn_labels` / `dir_labels`, -1 missing), `cuts(rows)` (istrace.capture.slices.clean_cuts
of the time stamps) and `only(conn)` (one connection's rows, as a table filtered by it would
hold them).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd
from istrace.capture import decoded, endpoints
from istrace.capture.endpoints import LABELS
from istrace.capture.labels import label_codes
from istrace.capture.slices import SLICE_ROWS, clean_cuts_by_block
from istrace.system import freed

T = TypeVar("T")

# A pass over the file frees each slice's temporaries (its columns, what was computed from
# them) as it goes, but the C library keeps freed heap for reuse, and what a pass keeps
# between slices (events found, carried state) lands among it: without a trim the heap
# grew by 45 MB over a minute's tracking (its samples and events are 10 MB). Trimmed each
# time this many rows were read since (half a millisecond a trim).
_TRIM_ROWS = 1 << 20


class Segments:
    """The interface."""

    def __init__(self) -> None:
        self._cuts: dict[int, list[int]] = {}
        self._memo: dict[Hashable, Any] = {}

    def cached(self, key: Hashable, make: Callable[[], T]) -> T:
        """make(), worked out once per `key` for these segments: several steps of a report
        ask for the same pass over millions of rows (the payload per connection: five)."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def __len__(self) -> int:
        raise NotImplementedError

    @property
    def empty(self) -> bool:
        return len(self) == 0

    def has(self, column: str) -> bool:
        raise NotImplementedError

    def read(self, columns: Sequence[str], a: int, b: int) -> dict[str, np.ndarray]:
        """Rows a..b of `columns`: a stored one in the type read_segments gives it, a label
        column (LABELS) as codes into its labels(), -1 missing."""
        raise NotImplementedError

    def labels(self, column: str) -> pd.Index:
        """The distinct labels of `column` (conn or dir), in the order of its codes."""
        raise NotImplementedError

    @property
    def conn_labels(self) -> pd.Index:
        return self.labels("conn")

    @property
    def dir_labels(self) -> pd.Index:
        return self.labels("dir")

    def code(self, column: str, value: str) -> int:
        """The code `read` gives `value` in label column `column` (-2: no label is it)."""
        found = np.flatnonzero(self.labels(column) == value)
        return int(found[0]) if len(found) else -2

    def group_order(self, column: str) -> np.ndarray:
        """The codes of `column` in the order a group-by of it lists them (of a categorical:
        its categories, the codes' order)."""
        return np.arange(len(self.labels(column)))

    def only(self, conn: str) -> Segments:
        raise NotImplementedError

    def frame(self, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """Every row of `columns` (all stored ones and conn, dir) as one table: for tests and
        the few steps that need a whole column at once."""
        raise NotImplementedError

    def cuts(self, rows: int = SLICE_ROWS) -> list[int]:
        """clean_cuts of the time stamps (worked out once per `rows`)."""
        if rows not in self._cuts:
            self._cuts[rows] = clean_cuts_by_block(
                len(self), lambda a, b: self.read(["ts_ns"], a, b)["ts_ns"], rows)
        return self._cuts[rows]

    def ts_min(self) -> int | None:
        """The earliest time stamp (None: no rows)."""
        best = None
        for a, b in zip(self.cuts()[:-1], self.cuts()[1:], strict=True):
            if b > a:
                m = int(self.read(["ts_ns"], a, b)["ts_ns"].min())
                best = m if best is None else min(best, m)
        return best

    def ts_span(self) -> tuple[int, int] | None:
        """The earliest and the latest time stamp (None: no rows)."""
        lo = hi = None
        for a, b in zip(self.cuts()[:-1], self.cuts()[1:], strict=True):
            if b > a:
                ts = self.read(["ts_ns"], a, b)["ts_ns"]
                lo = int(ts.min()) if lo is None else min(lo, int(ts.min()))
                hi = int(ts.max()) if hi is None else max(hi, int(ts.max()))
        return None if lo is None or hi is None else (lo, hi)

    def payload_by_dir(self) -> dict[str, int]:
        """Payload bytes per direction (every step asks which direction carried the data)."""
        return self.cached("payload_by_dir", self._payload_by_dir)

    def _payload_by_dir(self) -> dict[str, int]:
        labels = self.dir_labels
        by = np.zeros(len(labels), np.int64)
        for _a, _b, c in row_slices(self, ["dir", "len"]):
            ok = c["dir"] >= 0
            by += np.bincount(c["dir"][ok], weights=c["len"][ok],
                              minlength=len(labels)).astype(np.int64)
        return {str(k): int(v) for k, v in zip(labels, by, strict=True)}

    def conns(self) -> list[str]:
        """The connections present, in order of first appearance."""
        return list(self.cached("conns", self._conns))

    def _conns(self) -> list[str]:
        seen: dict[int, None] = {}
        for a in range(0, len(self), SLICE_ROWS):
            codes = self.read(["conn"], a, a + SLICE_ROWS)["conn"]
            seen.update(dict.fromkeys(int(c) for c in pd.unique(codes) if c >= 0))
        return [str(self.conn_labels[c]) for c in seen]


SegmentsLike = Segments | pd.DataFrame


def as_segments(segs: SegmentsLike | None) -> Segments | None:
    """A Segments for either kind of input (a table is wrapped, not copied)."""
    if segs is None or isinstance(segs, Segments):
        return segs
    return FrameSegments(segs)


class FrameSegments(Segments):
    """Segments taken from a table in memory (with `conn` and `dir` columns: categoricals,
    text or missing)."""

    def __init__(self, df: pd.DataFrame) -> None:
        super().__init__()
        self.df = df
        self._arrays: dict[str, np.ndarray] = {}
        self._labels: dict[str, pd.Index] = {}

    def __len__(self) -> int:
        return len(self.df)

    def has(self, column: str) -> bool:
        return column in self.df.columns

    def _array(self, c: str) -> np.ndarray:
        if c in LABELS:
            self._label_codes(c)
        elif c not in self._arrays:
            self._arrays[c] = self.df[c].to_numpy()
        return self._arrays[c]

    def _label_codes(self, c: str) -> None:
        if c in self._labels:
            return
        if c in self.df.columns:
            codes, labels = label_codes(self.df[c])
        else:
            codes, labels = np.full(len(self.df), -1, np.int8), np.zeros(0, object)
        self._arrays[c], self._labels[c] = codes, pd.Index(labels, dtype=object)

    def read(self, columns: Sequence[str], a: int, b: int) -> dict[str, np.ndarray]:
        return {c: self._array(c)[a:b] for c in columns}

    def labels(self, column: str) -> pd.Index:
        self._label_codes(column)
        return self._labels[column]

    def group_order(self, column: str) -> np.ndarray:
        col = self.df.get(column)
        if col is None or isinstance(col.dtype, pd.CategoricalDtype):
            return super().group_order(column)
        return np.argsort(self.labels(column).to_numpy(), kind="stable")  # a group-by sorts text

    def only(self, conn: str) -> Segments:
        return FrameSegments(self.df[self._array("conn") == self.code("conn", conn)])

    def frame(self, columns: Sequence[str] | None = None) -> pd.DataFrame:
        return self.df if columns is None else self.df[list(columns)]


class FileSegments(Segments):
    """Segments read from a segments.bin where asked for. `ports`: the iSCSI target ports,
    which say each connection's sides (decoded.conn_and_dir's rule). Held for the whole
    file: its endpoint pairs, a handful, with each one's labels (endpoints.EndpointLabels)."""

    def __init__(self, path: Path, ports: tuple[int, ...]) -> None:
        super().__init__()
        self.path = Path(path)
        self.ports = ports
        self._blocks = decoded.SegmentBlocks(self.path)
        self.n = self._blocks.n
        self._read_since_trim = 0
        self._ends = endpoints.EndpointLabels(self._blocks.endpoints, self._blocks.labels, ports)

    def __len__(self) -> int:
        return self.n

    def has(self, column: str) -> bool:
        return column in decoded.SEGMENT_COLUMNS

    def labels(self, column: str) -> pd.Index:
        return self._ends.labels[column]

    def read(self, columns: Sequence[str], a: int, b: int) -> dict[str, np.ndarray]:
        labels = [c for c in columns if c in LABELS]
        stored = [c for c in columns if c not in LABELS]
        # the endpoint columns the labels are told by, read beside the asked ones
        extra = [c for c in self._ends.keys_for(labels) if c not in stored] if labels else []
        got = self._blocks.read(stored + extra, a, b)
        rows = max(min(b, self.n) - max(a, 0), 0)
        if labels:
            got.update(self._ends.codes(got, labels, rows))
            for c in extra:
                del got[c]
        self._read_since_trim += rows
        if self._read_since_trim >= _TRIM_ROWS:
            self._read_since_trim = 0
            freed.give_back()
        return {c: got[c] for c in columns}

    def conns(self) -> list[str]:
        # every label is some row's, numbered in the order the endpoints first appear
        return [str(c) for c in self.conn_labels]

    def only(self, conn: str) -> Segments:
        if self.n == 0 or list(self.conn_labels) == [conn]:
            return self
        return _ConnRows(self, self.code("conn", conn))

    def frame(self, columns: Sequence[str] | None = None) -> pd.DataFrame:
        stored = [c for c in (columns or decoded.SEGMENT_COLUMNS) if c not in LABELS]
        df = decoded.read_segments(self.path, stored)
        for c in LABELS:
            codes = [self.read([c], a, a + SLICE_ROWS)[c] for a in range(0, self.n, SLICE_ROWS)]
            df[c] = pd.Categorical.from_codes(
                np.concatenate(codes) if codes else np.zeros(0, np.int32), self.labels(c))
        return df if columns is None else df[list(columns)]


class _ConnRows(Segments):
    """One connection's rows of a FileSegments, numbered among themselves. Held: a bit per
    row of the file, whether it is the connection's, packed a file slice (SLICE_ROWS rows)
    at a time, and how many of its rows come before each slice. A position per row was 8
    bytes a segment, 37 MB of a full-rate minute's connection in the report's main process
    (the tracker and the diagnosis take a capture of several connections one at a time);
    the bits are an eighth of a byte a row of the file. A read unpacks the bits of the
    slices its rows are in and reads the file's rows from its first to its last: the same
    read as with positions (reading whole slices and keeping the connection's rows took 3x
    the CPU)."""

    _STRIDE = SLICE_ROWS // 8  # bytes of packed bits a file slice

    def __init__(self, whole: FileSegments, code: int) -> None:
        super().__init__()
        self.whole, self._code = whole, code
        n_slices = -(-len(whole) // SLICE_ROWS) if code >= 0 else 0
        self._bits = np.zeros(n_slices * self._STRIDE, np.uint8)
        counts = np.zeros(n_slices, np.int64)
        for k in range(n_slices):
            a = k * SLICE_ROWS
            mine = whole.read(["conn"], a, a + SLICE_ROWS)["conn"] == code
            packed = np.packbits(mine)
            self._bits[k * self._STRIDE:k * self._STRIDE + len(packed)] = packed
            counts[k] = np.count_nonzero(mine)
        # the connection's rows before each slice of the file, and in all
        self._before = np.concatenate([[0], np.cumsum(counts)])

    def __len__(self) -> int:
        return int(self._before[-1])

    def has(self, column: str) -> bool:
        return self.whole.has(column)

    def labels(self, column: str) -> pd.Index:
        return self.whole.labels(column)

    def _positions(self, a: int, b: int) -> np.ndarray:
        """The file positions of the connection's rows a..b (0 <= a < b <= len)."""
        k0 = int(np.searchsorted(self._before, a, side="right")) - 1
        k1 = int(np.searchsorted(self._before, b - 1, side="right")) - 1
        pos = np.concatenate([
            np.flatnonzero(np.unpackbits(self._bits[k * self._STRIDE:(k + 1) * self._STRIDE]))
            + k * SLICE_ROWS for k in range(k0, k1 + 1)])
        first = int(self._before[k0])
        return pos[a - first:b - first]

    def read(self, columns: Sequence[str], a: int, b: int) -> dict[str, np.ndarray]:
        a, b = max(a, 0), min(b, len(self))
        if b <= a:
            return self.whole.read(columns, 0, 0)
        pos = self._positions(a, b)
        got = self.whole.read(columns, int(pos[0]), int(pos[-1]) + 1)
        pick = pos - pos[0]
        return {c: v[pick] for c, v in got.items()}

    def only(self, conn: str) -> Segments:
        # within one connection's rows another connection has none
        return self if not len(self) or self.code("conn", conn) == self._code \
            else _ConnRows(self.whole, -1)

    def frame(self, columns: Sequence[str] | None = None) -> pd.DataFrame:
        rows = self._positions(0, len(self)) if len(self) else np.zeros(0, np.int64)
        return self.whole.frame(columns).iloc[rows].reset_index(drop=True)


def row_slices(segs: Segments | pd.DataFrame, columns: Sequence[str], rows: int = SLICE_ROWS
               ) -> Iterator[tuple[int, int, dict[str, np.ndarray]]]:
    """(a, b, the arrays of `columns` of rows a..b) of each clean slice, in table order."""
    src = as_segments(segs)
    if src is None or src.empty:
        return
    cuts = src.cuts(rows)
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        yield a, b, src.read(columns, a, b)


def payload_slices(segs: Segments | pd.DataFrame | None, d: str,
                   columns: tuple[str, ...] = ("ts_ns", "len"), conn: str | None = None,
                   rows: int = SLICE_ROWS) -> Iterator[dict[str, np.ndarray]]:
    """The payload-carrying segments of direction `d` (of one connection with `conn`), the
    arrays of `columns` (stored or label columns) a slice at a time, each slice in time order
    (stable): joined, the slices are the table's payload segments sorted by time. A slice's
    labels are read first: the rest only when some row is of `d` (and `conn`)."""
    src = as_segments(segs)
    if src is None or src.empty:
        return
    want = {"dir": src.code("dir", d)} | ({} if conn is None else {"conn": src.code("conn", conn)})
    if min(want.values()) < 0:
        return  # no row is of them
    labels = list(dict.fromkeys([*want, *(c for c in columns if c in LABELS)]))
    need = list(dict.fromkeys(["ts_ns", "len", *columns]))
    cuts = src.cuts(rows)
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        got = src.read(labels, a, b)
        m = np.ones(b - a, bool)
        for c, v in want.items():
            m &= got[c] == v
        if not m.any():
            continue
        got |= src.read([c for c in need if c not in got], a, b)
        m &= got["len"] > 0
        if not m.any():
            continue
        out = {c: got[c][m] for c in columns}
        t = got["ts_ns"][m]
        if not (t[1:] >= t[:-1]).all():
            o = np.argsort(t, kind="stable")
            out = {c: v[o] for c, v in out.items()}
        yield out
