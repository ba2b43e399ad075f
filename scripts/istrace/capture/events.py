"""Probe event streams (docs/schema.md §1): the one reader of events-<host>.jsonl / .csv.

Arrow parses them against a fixed schema (several times faster than pandas' JSON reader, and a
file cut mid-line by a killed probe loses only that line); the stream's meta line and counter
lines are taken out and returned beside the table.

Damage is counted, not fatal, up to a bound: a line Arrow cannot read (not JSON, junk bytes,
a field of the wrong type) is skipped with a warning naming the file and the line, and the
stream's `health` says how many there were. More than BAD_SHARE of a stream's lines (at least
BAD_MIN, at most BAD_MAX) is a stream too damaged to stand for the probe's record: InputError.
"""

from __future__ import annotations

import json
import mmap
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
from istrace.capture import layout
from istrace.capture.inputerror import InputError

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


# Unreadable lines a stream may hold and still be read: 1% of its lines, at least 10 (a few
# junk bytes in a short stream), at most 1000 (past that it is refused as soon as they are seen).
BAD_SHARE, BAD_MIN, BAD_MAX = 0.01, 10, 1000
# the lines named in the warning
BAD_NAMED = 5


@dataclass
class StreamHealth:
    """What reading a stream found of its completeness: its whole lines, the unreadable ones
    (skipped; the first few with their line number and why), a partial last line (the probe
    stopped mid-write), its end record (the probe's own count of the events it wrote)."""

    lines: int = 0
    bad: int = 0
    first_bad: list[tuple[int, str]] = field(default_factory=list)
    torn_line: int | None = None
    ended: bool = False
    written: int | None = None
    events: int = 0

    def limit(self) -> int:
        return min(BAD_MAX, max(BAD_MIN, int(self.lines * BAD_SHARE)))

    def skipped(self, line: int, why: str) -> None:
        self.bad += 1
        if len(self.first_bad) < BAD_NAMED:
            self.first_bad.append((line, why))


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


def _numbered_blocks(path: Path, size: int, health: StreamHealth,
                     start: int = 0, first_line: int = 1) -> Iterator[tuple[int, bytes]]:
    """_line_blocks' blocks, each with the number of its first line; `health` counts the
    lines and notes a partial last line."""
    line = first_line
    for block in _line_blocks(path, size, start):
        yield line, block
        n = block.count(b"\n")
        line += n
        health.lines += n
    with open(path, "rb") as f:
        f.seek(-1, 2)
        if f.read(1) != b"\n" and f.tell() > start:
            health.torn_line = line


def _why(line: bytes) -> str | None:
    """Why a line is unreadable, in words; None when it may be an event (JSON, an object)."""
    try:
        text = line.decode()
    except UnicodeDecodeError:
        return "not text (junk bytes)"
    if not text.strip():
        return None  # a blank line: no event, and nothing lost (Arrow passes over it)
    try:
        rec = json.loads(text)
    except ValueError:
        return "not JSON"
    return None if isinstance(rec, dict) else "not a JSON object"


def _parsed(block: bytes, line: int, parse: Callable[[bytes], pa.Table], json_lines: bool,
            path: Path, health: StreamHealth) -> Iterator[pa.RecordBatch]:
    """A block's events: parsed whole, or when Arrow refuses it, its lines sorted out: those
    not even JSON (a JSON stream's) at once, the rest parsed together and, if Arrow still
    refuses them (a field of the wrong type), halved until the bad ones are alone. Each bad
    line is counted in `health` and skipped (InputError past BAD_MAX)."""
    try:
        yield from parse(block).to_batches()
        return
    except pa.ArrowInvalid:
        pass
    rows = list(enumerate(block.split(b"\n")[:-1], start=line))
    if json_lines:
        checked = [(n, text, _why(text)) for n, text in rows]
        for n, _, why in checked:
            if why is not None:
                _skip(path, health, n, why)
        rows = [(n, text) for n, text, why in checked if why is None]
    why = "a field of the wrong type" if json_lines else "not a row of the header's columns"
    yield from _halved(rows, parse, why, path, health)


def _halved(rows: list[tuple[int, bytes]], parse: Callable[[bytes], pa.Table], why: str,
            path: Path, health: StreamHealth) -> Iterator[pa.RecordBatch]:
    if not rows:
        return
    try:
        table = parse(b"".join(text + b"\n" for _, text in rows))
    except pa.ArrowInvalid:
        if len(rows) == 1:
            _skip(path, health, rows[0][0], why)
            return
        half = len(rows) // 2
        yield from _halved(rows[:half], parse, why, path, health)
        yield from _halved(rows[half:], parse, why, path, health)
        return
    yield from table.to_batches()


def _skip(path: Path, health: StreamHealth, line: int, why: str) -> None:
    health.skipped(line, why)
    if health.bad > BAD_MAX:
        raise _refusal(path, health, upto=line)


def _refusal(path: Path, health: StreamHealth, upto: int | None = None) -> InputError:
    """The stream refused: its first bad line, how many, and what to do. `upto`: refused
    there, before the end (its lines not all counted yet)."""
    first, why = health.first_bad[0]
    many = f"{health.bad} unreadable lines by line {upto} (at most {BAD_MAX} are skipped)" \
        if upto is not None else \
        f"{health.bad} of {health.lines} lines unreadable (at most {health.limit()} are skipped)"
    return InputError(path, first, f"{why}; {many}: the event stream is damaged. Capture "
                      "again, or move the file away to analyse without its events")


def _csv_batches(path: Path, health: StreamHealth) -> Iterator[pa.RecordBatch]:
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
    read = pacsv.ReadOptions(block_size=max(_BLOCK, 1 << 16))

    def parse(block: bytes) -> pa.Table:
        return pacsv.read_csv(pa.BufferReader(header + block), convert_options=options,
                              read_options=read)
    for line, block in _numbered_blocks(path, _BLOCK * _PARSERS, health, start=len(header),
                                        first_line=2):
        yield from _parsed(block, line, parse, False, path, health)


def _json_batches(path: Path, health: StreamHealth) -> Iterator[pa.RecordBatch]:
    options = pajson.ParseOptions(explicit_schema=EVENT_SCHEMA,
                                  unexpected_field_behavior="ignore")
    # Arrow's blocks hold whole lines: an event's is < 1 KiB
    read = pajson.ReadOptions(block_size=max(_BLOCK, 1 << 16))

    def parse(block: bytes) -> pa.Table:
        return pajson.read_json(pa.BufferReader(block), parse_options=options,
                                read_options=read)
    for line, block in _numbered_blocks(path, _BLOCK * _PARSERS, health):
        yield from _parsed(block, line, parse, True, path, health)


class EventStream:
    """One stream's events a block at a time, as Arrow tables with the schema's columns in its
    order (meta and counter rows taken out). Once iterated, `meta` is the stream's meta line,
    `lost` the events the probe lost (its ring buffer full) and `health` what the reading found
    of the stream's completeness; unreadable lines were warned about on stderr (`warn`) and
    skipped, InputError when there were more than a stream may hold."""

    def __init__(self, path: Path, warn: bool = True) -> None:
        self.path = Path(path)
        self.meta: dict[str, Any] = {}
        self.lost = 0
        self.health = StreamHealth()
        self.warn = warn

    def __iter__(self) -> Iterator[pa.Table]:
        path = self.path
        self.health = StreamHealth()
        if not path.is_file() or path.stat().st_size == 0:
            return
        yield from self._tables()
        h = self.health
        if h.bad > h.limit():
            raise _refusal(path, h)
        if self.warn:
            for line in warnings(path, h):
                print(f"istrace: {line}", file=sys.stderr)

    def _tables(self) -> Iterator[pa.Table]:
        path = self.path
        if path.suffix == ".csv":
            self.meta = _side_meta(path.with_suffix(".meta.json"))
            reader = _csv_batches(path, self.health)
        else:
            self.meta = _meta_line(path)
            self.health.written = _written(path)
            reader = _json_batches(path, self.health)
        names = [f.name for f in EVENT_SCHEMA]
        for batch in reader:
            table = pa.Table.from_batches([batch]).select(names)
            is_meta = pc.fill_null(pc.equal(table["layer"], "meta"), False)
            counters = table.filter(pc.and_(is_meta, pc.is_in(
                table["event"], value_set=pa.array(["lost", "end"]))))
            top = pc.max(counters["lost"]).as_py() if counters.num_rows else None
            self.lost = max(self.lost, int(top or 0))
            if counters.num_rows and pc.any(pc.equal(counters["event"], "end")).as_py():
                self.health.ended = True
            table = table.filter(pc.invert(is_meta)).drop_columns(["lost"])
            self.health.events += table.num_rows
            if table.num_rows:
                yield table


def warnings(path: Path, h: StreamHealth) -> list[str]:
    """What a stream's reading skipped, one line each, naming the file and the lines."""
    out = []
    if h.bad:
        (first, why), more = h.first_bad[0], [str(n) for n, _ in h.first_bad[1:]]
        out.append(f"{path}: line {first}: {why}: skipped ({h.bad} unreadable line"
                   + (f"s in all: {', '.join([str(first), *more])}"
                      + (" ..." if h.bad > len(h.first_bad) else "") if h.bad > 1 else "")
                   + ")")
    if h.torn_line is not None:
        out.append(f"{path}: line {h.torn_line}: cut mid-line (the probe stopped while "
                   "writing it): skipped")
    return out


def _written(path: Path) -> int | None:
    """The events the probe says it wrote (its end record, the last line of a JSON stream);
    None without one."""
    with open(path, "rb") as f:
        f.seek(max(0, f.seek(0, 2) - 4096))
        last = f.read().rstrip(b"\n").rsplit(b"\n", 1)[-1]
    try:
        rec = json.loads(last)
    except ValueError:
        return None
    n = rec.get("events") if isinstance(rec, dict) and rec.get("event") == "end" else None
    return int(n) if isinstance(n, int) else None


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
