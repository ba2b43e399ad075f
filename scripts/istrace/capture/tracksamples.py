"""The TCP tracker's samples (docs/schema.md §7): a row per observation, millions on a
full-rate capture. The only writer and reader of DIR/track.parquet.

The rows come in series: one connection, direction, capture point (host) and source
(`exact` from probe events, `estimated` from a pcap), each in time order. `SampleWriter` stores
each series a row group at a time as the tracker makes it, and gives back `FileSamples`, which
reads the row groups a step asks for when it asks; `FrameSamples` holds a table in memory (what
tests and small tools build). A step walks the series it needs a chunk at a time
(`chunks`, `timed`): held from the tracking to the end, the samples were the largest part of
the report's peak (issue 17).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from istrace.capture import orderstat
from istrace.capture.labels import concat_labelled
from istrace.capture.swapwrite import SwapWriter

LABELS = ["conn", "dir", "host", "source"]
NUMBERS = ["cwnd", "ssthresh", "srtt_us", "rtt_us", "inflight_pkts", "inflight_bytes", "rwnd",
           "delivery_rate_bps"]
COLUMNS = ["ts_ns", *LABELS, *NUMBERS, "ca_state"]
_LABEL = pa.dictionary(pa.int8(), pa.string())
SCHEMA = pa.schema([("ts_ns", pa.int64()), *((c, _LABEL) for c in LABELS),
                    *((c, pa.float64()) for c in NUMBERS), ("ca_state", _LABEL)])
# rows per row group: what a step holds of one series at a time
GROUP_ROWS = 1 << 18
# a series' chunks smaller than this are gathered into row groups of about this many rows
MIN_GROUP_ROWS = 1 << 14


class Key(NamedTuple):
    """One series (None: a label the samples did not carry)."""
    conn: str | None
    dir: str | None
    host: str | None
    source: str | None


def _matches(key: Key, where: dict[str, str | None]) -> bool:
    return all(v is None or getattr(key, k) == v for k, v in where.items())


class OrderStats(NamedTuple):
    n: int
    min: float
    median: float
    quantiles: dict[float, float]


class Samples:
    """The interface. `where`: conn=, dir=, host=, source= (None: any)."""

    def keys(self) -> list[tuple[Key, int]]:
        """Each series and its rows, in stored order."""
        raise NotImplementedError

    def chunks(self, columns: Sequence[str], **where: str | None) -> Iterator[pd.DataFrame]:
        """The rows of the series `where` picks, a chunk at a time with `columns`: series
        after series, each in time order."""
        raise NotImplementedError

    def time_range(self, **where: str | None) -> tuple[int, int] | None:
        """(first, last) time of the rows `where` picks; None without any."""
        ends = [(int(c["ts_ns"].min()), int(c["ts_ns"].max()))
                for c in self.chunks(["ts_ns"], **where) if len(c)]
        return (min(a for a, _ in ends), max(b for _, b in ends)) if ends else None

    def __len__(self) -> int:
        return sum(n for _, n in self.keys())

    @property
    def empty(self) -> bool:
        return len(self) == 0

    def rows(self, **where: str | None) -> int:
        return sum(n for k, n in self.keys() if _matches(k, where))

    def timed(self, columns: Sequence[str], **where: str | None) -> Iterator[pd.DataFrame]:
        """The rows `where` picks in time order, a chunk at a time: the chunks themselves
        when one series holds them, else all of them in one table sorted by time (stable:
        series order among equal times; several capture points' series of one direction
        are few rows)."""
        if sum(1 for k, n in self.keys() if n and _matches(k, where)) <= 1:
            yield from self.chunks(columns, **where)
            return
        cols = list(dict.fromkeys(["ts_ns", *columns]))
        parts = list(self.chunks(cols, **where))
        df = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=cols)
        yield df.sort_values("ts_ns", kind="stable", ignore_index=True)[list(columns)]

    def values(self, column: str, **where: str | None) -> Iterator[np.ndarray]:
        """One numeric column's values (float64, NaN dropped), a chunk at a time."""
        for c in self.chunks([column], **where):
            v = c[column].to_numpy(np.float64, na_value=np.nan)
            yield v[~np.isnan(v)]

    def column(self, column: str, **where: str | None) -> np.ndarray:
        """values() as one array: for the columns only a few rows fill (probe events'
        cwnd)."""
        parts = list(self.values(column, **where))
        return np.concatenate(parts) if parts else np.zeros(0)

    def order_stats(self, column: str, qs: Sequence[float] = (),
                    **where: str | None) -> OrderStats:
        """One numeric column's count, minimum, median and quantiles `qs` (numpy's, exactly;
        NaN when it has no values), its chunks read a few times over and never held whole:
        the RTT samples are about one per ACK, a full-rate minute's 160 000, an hour's ten
        million."""
        def chunks() -> Iterator[np.ndarray]:
            return self.values(column, **where)
        n, lo, _ = orderstat.count_range(chunks)
        return OrderStats(n, lo, orderstat.median(chunks, n),
                          {q: orderstat.quantile(chunks, q, n) for q in qs})

    def frame(self, **where: str | None) -> pd.DataFrame:
        """Every column of the rows `where` picks as one table: for tests and small tools."""
        out = concat_labelled(list(self.chunks(COLUMNS, **where)), COLUMNS)
        return out if len(out) else empty_frame()


def empty_frame() -> pd.DataFrame:
    return SCHEMA.empty_table().to_pandas()


class FrameSamples(Samples):
    """Samples in a table (the tracker's COLUMNS); each series' rows are taken in time order."""

    def __init__(self, df: pd.DataFrame | None = None) -> None:
        self.df = empty_frame() if df is None else df
        self._keys: list[tuple[Key, np.ndarray]] | None = None

    def _series(self) -> list[tuple[Key, np.ndarray]]:
        if self._keys is None:
            self._keys = []
            if len(self.df):
                labels = pd.DataFrame({c: self.df[c].astype(object) if c in self.df.columns
                                       else None for c in LABELS}, index=self.df.index)
                codes = labels.groupby(LABELS, sort=False, dropna=False).ngroup().to_numpy()
                ts = self.df["ts_ns"].to_numpy(np.int64)
                for g in pd.unique(codes):
                    pos = np.flatnonzero(codes == g)
                    pos = pos[np.argsort(ts[pos], kind="stable")]
                    key = Key(*(None if pd.isna(v) else str(v) for v in labels.iloc[pos[0]]))
                    self._keys.append((key, pos))
        return self._keys

    def keys(self) -> list[tuple[Key, int]]:
        return [(k, len(p)) for k, p in self._series()]

    def chunks(self, columns: Sequence[str], **where: str | None) -> Iterator[pd.DataFrame]:
        for k, pos in self._series():
            if _matches(k, where):
                # a column the table lacks is all missing (tests build partial tables)
                yield self.df.iloc[pos].reindex(columns=list(columns)).reset_index(drop=True)


class FileSamples(Samples):
    """Samples in DIR/track.parquet, each row group one series' (as SampleWriter stores them)."""

    def __init__(self, path: Path, groups: list[tuple[Key, int]]) -> None:
        self.path = path
        self.groups = groups  # per row group: its series, its rows

    @classmethod
    def open(cls, path: Path) -> FileSamples:
        """A track.parquet written before: the series of each row group read from it."""
        pf = pq.ParquetFile(path)
        groups = []
        for i in range(pf.num_row_groups):
            t = pf.read_row_group(i, columns=LABELS)
            if t.num_rows:
                first = (t[c][0].as_py() for c in LABELS)
                groups.append((Key(*(None if v is None else str(v) for v in first)), t.num_rows))
        return cls(path, groups)

    def keys(self) -> list[tuple[Key, int]]:
        out: dict[Key, int] = {}
        for k, n in self.groups:
            out[k] = out.get(k, 0) + n
        return list(out.items())

    def chunks(self, columns: Sequence[str], **where: str | None) -> Iterator[pd.DataFrame]:
        for t in self._row_groups(columns, where):
            yield _frame(t)

    def values(self, column: str, **where: str | None) -> Iterator[np.ndarray]:
        # Arrow's column straight to numpy (nulls as NaN), no table per chunk: the
        # diagnosis asks for a column at a time, over and over (a pandas table a row group
        # was most of the time it spent reading the samples)
        for t in self._row_groups([column], where):
            v = np.asarray(t.column(0).to_numpy(), np.float64)
            yield v[~np.isnan(v)]

    def time_range(self, **where: str | None) -> tuple[int, int] | None:
        # from the row groups' statistics (SampleWriter writes the time's), no row read:
        # reading every sample's time for two numbers cost the cwnd plot memory for nothing
        want = [i for i, (k, _) in enumerate(self.groups) if _matches(k, where)]
        if not want:
            return None
        meta = pq.read_metadata(self.path)
        at = meta.schema.to_arrow_schema().get_field_index("ts_ns")
        stats = [meta.row_group(i).column(at).statistics for i in want]
        if not all(st is not None and st.has_min_max for st in stats):
            return super().time_range(**where)
        return min(int(st.min) for st in stats), max(int(st.max) for st in stats)

    def _row_groups(self, columns: Sequence[str], where: dict[str, str | None]
                    ) -> Iterator[pa.Table]:
        """`columns` of each row group of the series `where` picks, in stored order."""
        want = [i for i, (k, _) in enumerate(self.groups) if _matches(k, where)]
        if not want:
            return
        pf = pq.ParquetFile(self.path)
        try:
            for i in want:
                yield pf.read_row_group(i, columns=list(columns))
        finally:
            pf.close()


def _frame(t: pa.Table) -> pd.DataFrame:
    """A row group as a table: the numbers as numpy arrays (Arrow's own, not copied), the
    labels as categoricals. Table.to_pandas took twice as long a row group, and the
    diagnosis reads the samples a row group at a time, pass after pass."""
    return pd.DataFrame({n: t.column(n).to_pandas() if pa.types.is_dictionary(f.type)
                         else t.column(n).to_numpy() for n, f in zip(t.column_names, t.schema,
                                                                    strict=True)}, copy=False)


class SampleWriter(SwapWriter):
    """track.parquet written a series chunk at a time, beside the old file and renamed over it
    on a clean close, which returns the FileSamples that reads it. A series' chunks under
    MIN_GROUP_ROWS are gathered (up to that many rows) into one row group: a change-only
    direction gives a few rows a slice, and a row group each was half a minute's 356 groups,
    whose metadata the writer holds to the end and every reader parses."""

    def __init__(self, path: Path) -> None:
        # dictionary pages for the labels only; lz4: a third faster than snappy, as small.
        # Statistics for the time and the labels, what a query filters on: min/max of the
        # float columns (NaN-aware) were a quarter of the write
        super().__init__(path, SCHEMA, compression="lz4", use_dictionary=[*LABELS, "ca_state"],
                         write_statistics=["ts_ns", *LABELS, "ca_state"])
        self.groups: list[tuple[Key, int]] = []
        self._pending_key: Key | None = None

    def write(self, key: Key, cols: Mapping[str, object]) -> None:
        """Rows of one series, in time order: `ts_ns` and any of NUMBERS and ca_state (the
        others all missing)."""
        if key != self._pending_key:
            self._flush()
        n = len(cols["ts_ns"])  # type: ignore[arg-type]
        for a in range(0, n, GROUP_ROWS):
            b = min(a + GROUP_ROWS, n)
            arrays = [pa.array(np.asarray(cols["ts_ns"])[a:b], pa.int64())]
            arrays += [_label(getattr(key, c), b - a) for c in LABELS]
            for c in NUMBERS:
                v = cols.get(c)
                arrays.append(pa.nulls(b - a, pa.float64()) if v is None else
                              pa.array(np.asarray(v, np.float64)[a:b], pa.float64()))
            ca = cols.get("ca_state")
            arrays.append(pa.nulls(b - a, _LABEL) if ca is None else _categories(ca, a, b))
            t = pa.Table.from_arrays(arrays, schema=SCHEMA)
            if b - a >= MIN_GROUP_ROWS:
                self._flush()
                self._put(key, t)
            else:
                self.pending.add(t)
                self._pending_key = key
                if self.pending.rows >= MIN_GROUP_ROWS:
                    self._flush()

    def _put(self, key: Key, t: pa.Table) -> None:
        self.writer.write_table(t)
        self.groups.append((key, t.num_rows))

    def _flush(self) -> None:
        t = self.pending.take()
        if t is not None and self._pending_key is not None:
            self._put(self._pending_key, t)
        self._pending_key = None

    def write_all(self, samples: SamplesLike) -> None:
        """Every series of `samples` (a table of COLUMNS, or read from elsewhere)."""
        s = as_samples(samples)
        for k, _ in s.keys():
            for c in s.chunks(["ts_ns", *NUMBERS, "ca_state"], **k._asdict()):
                self.write(k, {name: c[name] for name in c.columns})

    def close(self) -> FileSamples:
        if not self.done:
            self._flush()
        self.swap()
        return FileSamples(self.path, self.groups)


def _label(value: str | None, n: int) -> pa.Array:
    if value is None:
        return pa.nulls(n, _LABEL)
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int8)),
                                          pa.array([value], pa.string()))


def _categories(v: object, a: int, b: int) -> pa.Array:
    """A label column (categorical or text, missing allowed) as a dictionary array."""
    s = pd.Series(v).iloc[a:b]
    cat = s.astype("category") if not isinstance(s.dtype, pd.CategoricalDtype) else s
    codes = cat.cat.codes.to_numpy()
    return pa.DictionaryArray.from_arrays(
        pa.array(codes.astype(np.int8), mask=codes < 0),
        pa.array(cat.cat.categories.astype(str), pa.string()))


def write_samples(samples: SamplesLike, path: Path) -> FileSamples:
    """Samples (from memory or another file) into track.parquet."""
    with SampleWriter(path) as w:
        w.write_all(samples)
    return w.close()


SamplesLike = Samples | pd.DataFrame


def as_samples(s: SamplesLike | None) -> Samples:
    """A Samples for either kind of input (a table is wrapped, not copied)."""
    if s is None:
        return FrameSamples()
    return s if isinstance(s, Samples) else FrameSamples(s)
