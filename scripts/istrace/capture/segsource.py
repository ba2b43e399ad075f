"""One capture point's TCP segments as the analyses walk them: a slice of rows at a time.

`FileSegments` reads the decoder's segments.bin (istrace.capture.decoded) where a slice is
asked for and gives the file's pages back once it is read; `FrameSegments` takes the slices
from a table in memory (what tests and small tools build). For the whole capture only each
row's connection and direction are held, a byte each: a minute at full rate is millions of
segments, and what an analysis holds must not grow with them (issue 17).

Both answer `read(columns, a, b)` (rows a..b of the stored columns, each in the type
`read_segments` gives it), `cuts(rows)` (istrace.capture.slices.clean_cuts of the time
stamps), `conn` and `dir` (label columns, every row) and `only(conn)` (one connection's
rows, as a table filtered by it would hold them).
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Hashable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd
from istrace.capture import decoded
from istrace.capture.labels import codes_of, label_codes
from istrace.capture.slices import SLICE_ROWS, clean_cuts_by_block

T = TypeVar("T")

# rows of segments.bin taken per pass of the load's label walk
_WALK_ROWS = 1 << 18
# beyond the pages read, what a page fault may have mapped besides (the kernel maps up to
# 64 KiB of cached pages around a fault)
_FAULT_AROUND = 1 << 18


class Segments:
    """The interface; `conn` and `dir` are set by each kind."""

    conn: pd.Series
    dir: pd.Series

    def __init__(self) -> None:
        self._cuts: dict[int, list[int]] = {}
        self._memo: dict[Hashable, Any] = {}

    def cached(self, key: Hashable, make: Callable[[], T]) -> T:
        """make(), worked out once per `key` for these segments: several steps of a report
        ask for the same pass over millions of rows (the payload per connection: five)."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]  # type: ignore[no-any-return]

    def __len__(self) -> int:
        return len(self.conn)

    @property
    def empty(self) -> bool:
        return len(self) == 0

    def has(self, column: str) -> bool:
        raise NotImplementedError

    def read(self, columns: Sequence[str], a: int, b: int) -> dict[str, np.ndarray]:
        raise NotImplementedError

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

    def payload_by_dir(self) -> dict[str, int]:
        """Payload bytes per direction (every step asks which direction carried the data)."""
        return self.cached("payload_by_dir", self._payload_by_dir)

    def _payload_by_dir(self) -> dict[str, int]:
        codes, labels = label_codes(self.dir)
        by = np.zeros(len(labels), np.int64)
        for a, b, c in row_slices(self, ["len"]):
            ok = codes[a:b] >= 0
            by += np.bincount(codes[a:b][ok], weights=c["len"][ok],
                              minlength=len(labels)).astype(np.int64)
        return {str(k): int(v) for k, v in zip(labels, by, strict=True)}

    def conns(self) -> list[str]:
        """The connections present, in order of first appearance."""
        codes, labels = label_codes(self.conn)
        seen = pd.unique(codes[codes >= 0])
        return [str(labels[c]) for c in seen]


SegmentsLike = Segments | pd.DataFrame


def as_segments(segs: SegmentsLike | None) -> Segments | None:
    """A Segments for either kind of input (a table is wrapped, not copied)."""
    if segs is None or isinstance(segs, Segments):
        return segs
    return FrameSegments(segs)


class FrameSegments(Segments):
    """Segments taken from a table in memory (with `conn` and `dir` columns)."""

    def __init__(self, df: pd.DataFrame) -> None:
        super().__init__()
        self.df = df
        self.conn = df["conn"] if "conn" in df.columns else pd.Series(
            pd.Categorical([None] * len(df)))
        self.dir = df["dir"] if "dir" in df.columns else pd.Series(
            pd.Categorical([None] * len(df)))
        self._arrays: dict[str, np.ndarray] = {}

    def has(self, column: str) -> bool:
        return column in self.df.columns

    def _array(self, c: str) -> np.ndarray:
        if c not in self._arrays:
            self._arrays[c] = self.df[c].to_numpy()
        return self._arrays[c]

    def read(self, columns: Sequence[str], a: int, b: int) -> dict[str, np.ndarray]:
        return {c: self._array(c)[a:b] for c in columns}

    def only(self, conn: str) -> Segments:
        codes, (code,) = codes_of(self.conn, conn)
        return FrameSegments(self.df[codes == code])

    def frame(self, columns: Sequence[str] | None = None) -> pd.DataFrame:
        return self.df if columns is None else self.df[list(columns)]


class FileSegments(Segments):
    """Segments read from a segments.bin where asked for. `ports`: the iSCSI target ports,
    which say each connection's sides (decoded.conn_and_dir's rule)."""

    def __init__(self, path: Path, ports: tuple[int, ...]) -> None:
        super().__init__()
        self.path = Path(path)
        self.ports = ports
        self.n, self._labels = decoded.segment_file_info(self.path)
        self._map: mmap.mmap | None = None
        self._records: np.ndarray | None = None
        self.conn, self.dir = self._label_columns()

    def has(self, column: str) -> bool:
        return column in decoded.SEGMENT_COLUMNS

    def _open(self) -> np.ndarray:
        if self._records is None:
            with open(self.path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            self._records = np.ndarray((self.n,), decoded.SEG_RECORD, buffer=self._map)
        return self._records

    def read(self, columns: Sequence[str], a: int, b: int) -> dict[str, np.ndarray]:
        a, b = max(a, 0), min(b, self.n)
        if b <= a:
            return {c: np.zeros(0, decoded.memory_type(c)) for c in columns}
        rec = self._open()[a:b]
        out = {c: rec[c].astype(decoded.memory_type(c)) for c in columns}
        self._give_back(a, b)
        return out

    def _give_back(self, a: int, b: int) -> None:
        """The file's pages of rows a..b leave this process (they stay in the page cache: a
        later read maps them again), so a pass over the file holds a slice of it, not all.
        With a margin: a page fault maps the cached pages around it too (fault-around)."""
        size = decoded.SEG_RECORD.itemsize
        lo = max(a * size - _FAULT_AROUND, 0) // mmap.PAGESIZE * mmap.PAGESIZE
        assert self._map is not None
        hi = min(b * size + _FAULT_AROUND, len(self._map))
        self._map.madvise(mmap.MADV_DONTNEED, lo, hi - lo)

    def _label_columns(self) -> tuple[pd.Series, pd.Series]:
        """Each row's connection and direction, from one walk over the addresses and ports
        (decoded.endpoint_sides says which side is the target)."""
        keys = np.empty(self.n, np.int32)
        key_of: dict[int, int] = {}
        first: list[tuple[int, int, int, int]] = []  # (src, sport, dst, dport) of each key
        servers: set[tuple[int, int]] = set()  # (address, port) that sent a SYN+ACK
        synack = decoded.TCP_SYN | decoded.TCP_ACK
        cols = ["src", "sport", "dst", "dport", "flags"]
        for a in range(0, self.n, _WALK_ROWS):
            c = self.read(cols, a, a + _WALK_ROWS)
            src, dst = c["src"].astype(np.int64), c["dst"].astype(np.int64)
            sp, dp = c["sport"].astype(np.int64), c["dport"].astype(np.int64)
            packed = ((src * max(len(self._labels), 1) + dst) << 32) | (sp << 16) | dp
            uniq, at, inv = np.unique(packed, return_index=True, return_inverse=True)
            ids = np.empty(len(uniq), np.int32)
            for k in np.argsort(at, kind="stable"):  # new keys in order of appearance
                u = int(uniq[k])
                if u not in key_of:
                    i = int(at[k])
                    key_of[u] = len(first)
                    first.append((int(src[i]), int(sp[i]), int(dst[i]), int(dp[i])))
                ids[k] = key_of[u]
            keys[a:a + len(packed)] = ids[inv]
            sa = (c["flags"] & synack) == synack
            servers.update(zip(src[sa].tolist(), sp[sa].tolist(), strict=True))
        names = self._labels
        conn, direction = decoded.endpoint_sides(
            [str(names[s]) for s, _, _, _ in first], [p for _, p, _, _ in first],
            [str(names[d]) for _, _, d, _ in first], [p for _, _, _, p in first],
            {(str(names[s]), p) for s, p in servers}, self.ports)
        out = []
        for labels in (conn, direction):
            lc, lu = pd.factorize(pd.Series(labels, dtype=object))
            out.append(pd.Series(pd.Categorical.from_codes(
                lc[keys] if len(keys) else np.zeros(0, np.int64),
                pd.Index(lu, dtype=object))))
        return out[0], out[1]

    def only(self, conn: str) -> Segments:
        codes, (code,) = codes_of(self.conn, conn)
        if (codes == code).all():
            return self
        return _ConnRows(self, np.flatnonzero(codes == code).astype(np.int64))

    def frame(self, columns: Sequence[str] | None = None) -> pd.DataFrame:
        stored = [c for c in (columns or decoded.SEGMENT_COLUMNS) if c not in ("conn", "dir")]
        df = decoded.read_segments(self.path, stored)
        df["conn"], df["dir"] = self.conn.array, self.dir.array
        return df if columns is None else df[list(columns)]


class _ConnRows(Segments):
    """One connection's rows of a FileSegments (`rows`: their positions in it)."""

    def __init__(self, whole: FileSegments, rows: np.ndarray) -> None:
        super().__init__()
        self.whole, self.rows = whole, rows
        self.conn = pd.Series(whole.conn.array[rows])
        self.dir = pd.Series(whole.dir.array[rows])

    def has(self, column: str) -> bool:
        return self.whole.has(column)

    def read(self, columns: Sequence[str], a: int, b: int) -> dict[str, np.ndarray]:
        pos = self.rows[max(a, 0):min(b, len(self.rows))]
        if not len(pos):
            return self.whole.read(columns, 0, 0)
        got = self.whole.read(columns, int(pos[0]), int(pos[-1]) + 1)
        pick = pos - pos[0]
        return {c: v[pick] for c, v in got.items()}

    def only(self, conn: str) -> Segments:
        codes, (code,) = codes_of(self.conn, conn)
        return self if (codes == code).all() else _ConnRows(self.whole, self.rows[codes == code])

    def frame(self, columns: Sequence[str] | None = None) -> pd.DataFrame:
        return self.whole.frame(columns).iloc[self.rows].reset_index(drop=True)


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
                   rows: int = SLICE_ROWS, extra: dict[str, np.ndarray] | None = None
                   ) -> Iterator[dict[str, np.ndarray]]:
    """The payload-carrying segments of direction `d` (of one connection with `conn`), the
    arrays of `columns` (and of `extra`, arrays as long as the table) a slice at a time, each
    slice in time order (stable): joined, the slices are the table's payload segments sorted
    by time. A slice none of whose rows is of `d` (and `conn`) is not read."""
    src = as_segments(segs)
    if src is None or src.empty:
        return
    dir_codes, (dc,) = codes_of(src.dir, d)
    conn_codes, (cc,) = codes_of(src.conn, conn) if conn is not None else (None, (0,))
    need = list(dict.fromkeys(["ts_ns", "len", *columns]))
    cuts = src.cuts(rows)
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        m = dir_codes[a:b] == dc
        if conn_codes is not None:
            m &= conn_codes[a:b] == cc
        if not m.any():
            continue
        got = src.read(need, a, b)
        m &= got["len"] > 0
        if not m.any():
            continue
        out = {c: got[c][m] for c in columns} | {c: v[a:b][m] for c, v in (extra or {}).items()}
        t = got["ts_ns"][m]
        if not (t[1:] >= t[:-1]).all():
            o = np.argsort(t, kind="stable")
            out = {c: v[o] for c, v in out.items()}
        yield out
