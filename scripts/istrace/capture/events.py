"""Probe event streams (docs/schema.md §1): the one reader of events-<host>.jsonl / .csv.

Arrow parses them against a fixed schema (several times faster than pandas' JSON reader, and a
file cut mid-line by a killed probe loses only that line); the stream's meta line and counter
lines are taken out and returned beside the table.
"""

from __future__ import annotations

import json
import mmap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
from istrace.capture import layout

HOSTS = ("initiator", "target")

# docs/schema.md §1, in order; then the columns added at the end.
EVENT_COLUMNS = [
    "ts_ns", "host", "layer", "event", "pid", "comm", "conn", "cookie", "lba", "bytes", "itt",
    "opcode", "seq", "ack", "cwnd", "ssthresh", "srtt_us", "ca_state", "inflight", "rwnd",
    "snd_wnd", "lat_ns", "dev", "reason",
]
EXTRA_COLUMNS = ["tid", "netns", "fd", "ret", "again", "offset", "status", "source"]
# which rows of a table of events a reader keeps (analysed_rows, held_rows, tcp_rows)
RowMask = Callable[[pa.Table], pa.ChunkedArray]
STR_COLUMNS = {"host", "layer", "event", "comm", "conn", "ca_state", "dev", "reason", "source"}
EVENT_SCHEMA = pa.schema([
    pa.field(c, pa.string() if c in STR_COLUMNS else pa.uint64() if c == "cookie" else pa.int64())
    for c in [*EVENT_COLUMNS, *EXTRA_COLUMNS, "lost"]
])


# The application's reads among the system calls (read, readv, pread64, preadv, preadv2;
# entry or exit): the requests the initiator's storage stack is asked for.
APP_READ_EVENTS = r"^(p?readv?|pread64|preadv2?)(_exit)?$"


def analysed_rows(table: pa.Table) -> pa.ChunkedArray:
    """The events the analysis reads: every layer's but the system calls', and of those the
    initiator's reads (APP_READ_EVENTS). The others are the hosts' socket I/O (the
    workload's receives, tgtd's writes, one per few packets): two events in three of a
    full-rate capture, which only the timeline and the trace draw, reading them from
    merged.parquet."""
    syscall = pc.fill_null(pc.equal(table["layer"], "syscall"), False)
    read = pc.and_(pc.fill_null(pc.equal(table["host"], "initiator"), False),
                   pc.fill_null(pc.match_substring_regex(table["event"], APP_READ_EVENTS),
                                False))
    return pc.or_(pc.invert(syscall), read)


def tcp_rows(table: pa.Table) -> pa.ChunkedArray:
    """The TCP layer's events (tcp_probe samples, congestion state changes, retransmits):
    the tracker's input, and nothing else's."""
    return pc.fill_null(pc.equal(table["layer"], "tcp"), False)


def held_rows(table: pa.Table) -> pa.ChunkedArray:
    """analysed_rows' events but the TCP layer's: what load_capture holds while the analysis
    runs. The TCP layer's events, a row per few ACKs, are nearly three in four of those
    (a full-rate minute's 49 000 rows, 9.5 MB) and only the tracker reads them, when it
    runs."""
    return pc.and_(analysed_rows(table), pc.invert(tcp_rows(table)))


def host_order(host: str) -> tuple[bool, str]:
    """The order of the hosts' events among equal times: the initiator's, the target's, then
    any other's by name (load_events joins the streams in it)."""
    return host not in HOSTS, host


def with_sorted_labels(frame: pd.DataFrame) -> pd.DataFrame:
    """The events' label columns with their categories in text order: the same table whether
    it was read from the streams or from merged.parquet (whose rows come in another order),
    and whatever order the names first appeared in."""
    for c in frame.columns:
        col = frame[c]
        if isinstance(col.dtype, pd.CategoricalDtype):
            frame[c] = col.cat.reorder_categories(sorted(col.cat.categories, key=str))
    return frame


def events_file(d: Path, host: str) -> Path:
    """DIR/events-HOST.jsonl or .csv (istrace probe --format); the newer when both exist."""
    cands = [p for p in (layout.events_file(d, host), layout.events_file(d, host, "csv"))
             if p.is_file()]
    if not cands:
        return layout.events_file(d, host)
    return max(cands, key=lambda p: p.stat().st_mtime)


# Text parsed a block at a time (about 2 500 events): neither the text nor the parsed table of
# a stream is held whole by a reader that takes it a block at a time (4 MiB blocks raised the
# reader's own peak by 50 MB), _PARSERS blocks at once on Arrow's threads (one at a time took
# twice as long; four, 8 MB more)
_BLOCK = 1 << 20
_PARSERS = 2


def _line_blocks(path: Path, size: int, start: int = 0) -> Iterator[bytes]:
    """The file's whole lines from byte `start`, about `size` bytes at a time (a partial last
    line, left by a probe killed mid-write, is not among them). Arrow's streaming readers
    read the whole file ahead of the batches they hand out (a minute's 56 MB of JSON events
    were 32 MB of its buffers at once; 9 MB of CSV, 41 MB), so each block is parsed on its
    own instead. The pages of each block read are handed back once it is copied out (they
    stay in the page cache): mapped to the end, a minute's 74 MB stream was resident in the
    reading process by its last block (the merge's peak grew with the capture)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        n = len(m)
        done = 0  # the mapping's pages before this are handed back
        while start < n:
            cut = m.find(b"\n", start + size - 1) if start + size < n else -1
            if cut < 0:  # the last block: up to the last newline
                cut = m.rfind(b"\n", start, n)
                if cut < 0:
                    return
            block = m[start:cut + 1]
            start = cut + 1
            upto = start // mmap.PAGESIZE * mmap.PAGESIZE
            if upto > done:
                m.madvise(mmap.MADV_DONTNEED, done, upto - done)
                done = upto
            yield block


def _csv_batches(path: Path) -> Iterator[pa.RecordBatch]:
    """A CSV stream's blocks, each parsed under the file's header line: the schema's columns
    only, typed as there (a column the schema lacks would be typed from the first block
    alone), those a CSV from an older probe lacks null."""
    with open(path, "rb") as f:
        header = f.readline()
    if not header.endswith(b"\n"):
        return
    options = pacsv.ConvertOptions(
        column_types={f.name: f.type for f in EVENT_SCHEMA},
        include_columns=[f.name for f in EVENT_SCHEMA], include_missing_columns=True,
        strings_can_be_null=True, quoted_strings_can_be_null=False)
    for block in _line_blocks(path, _BLOCK * _PARSERS, start=len(header)):
        yield from pacsv.read_csv(pa.BufferReader(header + block), convert_options=options,
                                  read_options=pacsv.ReadOptions(
                                      block_size=max(_BLOCK, 1 << 16))).to_batches()


def _json_batches(path: Path) -> Iterator[pa.RecordBatch]:
    options = pajson.ParseOptions(explicit_schema=EVENT_SCHEMA,
                                  unexpected_field_behavior="ignore")
    for block in _line_blocks(path, _BLOCK * _PARSERS):
        yield from pajson.read_json(pa.BufferReader(block), parse_options=options,
                                    # Arrow's blocks hold whole lines: an event's is < 1 KiB
                                    read_options=pajson.ReadOptions(
                                        block_size=max(_BLOCK, 1 << 16))).to_batches()


class EventStream:
    """One stream's events a block at a time, as Arrow tables with the schema's columns in its
    order (meta and counter rows taken out). Once iterated, `meta` is the stream's meta line
    and `lost` the events the probe lost (its ring buffer full)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.meta: dict[str, Any] = {}
        self.lost = 0

    def __iter__(self) -> Iterator[pa.Table]:
        path = self.path
        if not path.is_file() or path.stat().st_size == 0:
            return
        if path.suffix == ".csv":
            self.meta = _side_meta(path.with_suffix(".meta.json"))
            reader = _csv_batches(path)
        else:
            self.meta = _meta_line(path)
            reader = _json_batches(path)
        names = [f.name for f in EVENT_SCHEMA]
        for batch in reader:
            table = pa.Table.from_batches([batch]).select(names)
            is_meta = pc.fill_null(pc.equal(table["layer"], "meta"), False)
            counters = table.filter(pc.and_(is_meta, pc.is_in(
                table["event"], value_set=pa.array(["lost", "end"]))))
            top = pc.max(counters["lost"]).as_py() if counters.num_rows else None
            self.lost = max(self.lost, int(top or 0))
            table = table.filter(pc.invert(is_meta)).drop_columns(["lost"])
            if table.num_rows:
                yield table


def _meta_line(path: Path) -> dict[str, Any]:
    """A JSON stream's first line when it is the meta line, else {}."""
    with open(path, "rb") as f:
        first = f.readline()
    try:
        rec = json.loads(first) if first else {}
    except json.JSONDecodeError:
        return {}
    return rec if isinstance(rec, dict) and rec.get("event") == "meta" else {}


def _side_meta(path: Path) -> dict[str, Any]:
    """A CSV stream's meta, written beside it."""
    try:
        got = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    return got if isinstance(got, dict) else {}


def read_events_table(path: Path) -> tuple[pa.Table, dict[str, Any], int]:
    """One stream as one Arrow table (EventStream's batches joined), the stream's meta, and
    the events it lost."""
    stream = EventStream(path)
    tables = list(stream)
    empty = pa.table({f.name: pa.array([], f.type) for f in EVENT_SCHEMA if f.name != "lost"})
    return (pa.concat_tables(tables) if tables else empty), stream.meta, stream.lost


def read_events(path: Path) -> tuple[pd.DataFrame, dict[str, Any], int]:
    """read_events_table as a pandas frame with nullable integer columns."""
    table, meta, lost = read_events_table(path)
    df = table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype(),
                                       pa.uint64(): pd.UInt64Dtype()}.get)
    return df, meta, lost


def load_events(d: Path, keep: RowMask | None = None,
                columns: Sequence[str] | None = None) -> pd.DataFrame | None:
    """Every host's events of a capture directory as one table in time order (None when there
    are none), or those the mask `keep` picks (analysed_rows, held_rows, tcp_rows), with
    `columns` only when given (ts_ns among them); integers with gaps are floats (NaN), as
    analysis code expects."""
    tables = []
    for host in event_hosts(d):
        for table in EventStream(events_file(d, host)):
            tables.append(_kept(table, host, keep, columns))
    if not tables:
        return None
    # joined and put in time order as Arrow tables (a stable sort: equal times in host_order,
    # each host's in stream order), then converted a column at a time: one copy of the events
    # besides the table (pandas' concat and sort made two more: on the 60 s capture, the
    # report's peak was there)
    table = pa.concat_tables(tables, promote_options="permissive")
    del tables
    table = table.take(pc.sort_indices(table, [("ts_ns", "ascending")]))
    return with_sorted_labels(table.to_pandas(split_blocks=True, self_destruct=True))


def event_hosts(d: Path) -> list[str]:
    """The hosts with an event stream in `d`, in host_order."""
    return sorted({layout.events_host(f) for f in layout.events_files(d)}, key=host_order)


def _kept(table: pa.Table, host: str, keep: RowMask | None,
          columns: Sequence[str] | None) -> pa.Table:
    """A block of a host's events as load_events holds it: host filled in, `keep`'s share
    when asked, text dictionary-encoded (a minute's 330 000 events repeat a few dozen names,
    which as strings were 40% of the table, and become categoricals), a block at a time so
    that neither the text nor the dropped events are ever held whole."""
    i = table.schema.get_field_index("host")
    table = table.set_column(i, "host", pc.fill_null(table["host"], host))
    if keep is not None:
        table = table.filter(keep(table))
    if columns is not None:
        table = table.select([c for c in table.column_names if c in set(columns)])
    for j, f in enumerate(table.schema):
        if pa.types.is_string(f.type):
            table = table.set_column(j, f.name, pc.dictionary_encode(table[f.name]))
    return table
