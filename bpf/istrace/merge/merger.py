"""Merge both hosts' probe events, PDUs and TCP segments onto one clock (docs/schema.md §6).

Writes merged.parquet (the events and PDUs of both hosts, in time order), the per-packet
table DIR/segments/host=<host>/ (istrace.capture.segtable, written a slice at a time by
segment_pass) and clock.json.

Inputs in DIR: events-initiator.jsonl, events-target.jsonl (istrace probe), initiator.pcap,
target.pcap (istrace capture), decoded/initiator/ and decoded/target/ (istrace decode
--csv-dir, with segments.bin; made here from the pcaps when absent and the decoder is
built).

Clock: a TCP segment sent by one host and received by the other gives
recv_ts - send_ts = (receiver clock - sender clock) + one-way delay.  With offset =
target - initiator, every i2t segment gives an upper bound on offset (delay >= 0) and every
t2i segment a lower bound; the estimate is the middle of [max lower, min upper] and the
bound its half-width.  Matching uses the first copy of a segment on each side, so a
retransmission can only loosen a bound, never make it wrong (a capture of millions of
segments: those of a fixed share of keys, segment_pass.clock_sample).

cmd_id is the index into the initiator-side commands.csv.  PDU rows carry it from the
decoder (`cmd`); TCP segments and sequence-carrying probe events (retransmit, tcp_probe's
snd_una) get the command of the PDU whose bytes they carry, by TCP sequence (both ends see
the same sequence numbers); events with an ITT (USDT, tgtd, libiscsi) get the command with
that ITT live at that time; syscall and block events get the command outstanding at that
time on their host (the latest issued one that has not completed: exact at queue depth 1,
a best guess above it); pread/pwrite of a LUN file get the command at that byte offset.
The rules live in istrace.capture.attribution (shared with the plots); everything is
vectorised (merge_asof, searchsorted), no per-row Python.

Memory does not grow with the trace: the events and PDUs are read, tied to their commands
(istrace.merge.ties) and put in time order (istrace.merge.extsort) a block at a time, the
segments a slice at a time in a process per host (segment_pass).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from istrace.capture import attribution, clockfile, cmdtable, decoderun, layout, segtable, stamps
from istrace.capture.decoded import DecodeError, read_table, read_table_blocks, segments_file
from istrace.capture.events import EVENT_COLUMNS, HOSTS, STR_COLUMNS, EventStream, events_file
from istrace.capture.labels import is_
from istrace.capture.meta import capture_ports
from istrace.merge import segment_pass
from istrace.merge.extsort import SCRATCH_FORMAT, ExternalSort, scratch_batches
from istrace.merge.ties import CommandTies
from istrace.system import forked, freed
from istrace.system.paths import MissingBinary

# The events' columns (docs/schema.md §1), then the merger's (§6), then the events' extras.
MERGED_EXTRA = ["source", "ts_ns_merged", "cmd_id", "dir", "pdu", "cdb_name", "xfer_bytes"]
TAIL_EXTRA = ["flags", "tid", "status", "fd", "ret", "again", "offset", "netns"]
MERGED_COLUMNS = EVENT_COLUMNS + MERGED_EXTRA + TAIL_EXTRA
_STR_COLS = [c for c in MERGED_COLUMNS if c in STR_COLUMNS] + ["dir", "cdb_name", "flags"]

# a socket cookie is the kernel's unsigned 64-bit number (as the streams give it)
MERGED_SCHEMA = pa.schema([pa.field(c, pa.string() if c in _STR_COLS else
                                    pa.uint64() if c == "cookie" else pa.int64())
                           for c in MERGED_COLUMNS])
# Rows placed, tied and sorted a block at a time, whatever the capture's length (a minute's is
# 190 000 rows): at 32 Ki rows a block (and a sort run, extsort) raised the merge's peak by
# 18 MB on a minute's capture, whose blocks fill, over a 10 s one's, whose do not.
# merged.parquet's row groups: at 128 Ki rows a group, the writer's buffers raised the
# merge's peak by 70 MB on a minute's capture.
BLOCK_ROWS = 1 << 14
SORTED_ROWS = 1 << 15

class MergeError(RuntimeError):
    pass


@dataclass
class ClockEstimate:
    offset_ns: int | None      # target clock minus initiator clock
    bound_ns: int | None       # half-width of the interval the offset lies in
    samples: int               # matched segments, both directions
    samples_i2t: int
    samples_t2i: int
    lower_ns: int | None       # from t2i segments
    upper_ns: int | None       # from i2t segments
    method: str
    note: str = ""


# ----------------------------------------------------------------------------- loading

def _finish(run: decoderun.Decoding) -> str | None:
    """Wait for a decoder run; a problem text, or None when its tables are in place."""
    try:
        run.wait()
    except (DecodeError, OSError) as exc:
        return f"istrace-decode {run.pcap.name} failed: {exc}"
    return None


# what a PDU's merged row is made of (_pdu_rows)
PDU_ROW_COLUMNS = ["pdu", "ts_ns", "conn", "dir", "tcp_seq", "opcode", "opcode_name", "dsl",
                   "itt", "cdb_name", "lba", "xfer_bytes", "note"]
# what ties a row to its command by TCP sequence (attribution.by_seq) or PDU number
PDU_TIE_COLUMNS = ["pdu", "ts_ns", "conn", "dir", "tcp_seq", "cmd"]


@dataclass
class Decoded:
    """What the merge takes from one host's decode: its pdus.csv (its rows read a block at a
    time: 65 000 PDUs a host a minute at full rate, 2 million with 8 KiB Data-In PDUs), the
    columns of its PDUs that tie rows to commands, and its commands."""
    pdus: Path | None = None
    ties: pd.DataFrame | None = None
    commands: pd.DataFrame | None = None


def load_decoded(d: Path, ties: bool = True) -> Decoded:
    """`ties`: read the tie columns (only the initiator's PDUs tie rows to commands: the
    target's would be held by the segment writers forked after, 5 MB of a full-rate minute's
    each)."""
    out = Decoded()
    if (d / layout.PDUS).is_file():
        out.pdus = d / layout.PDUS
        if ties:
            # the labels as categoricals: as text, a 30 s capture's 630 000 PDUs (8 KiB
            # Data-In) held 1.3 million strings (28 MB more) through the merge
            out.ties = read_table(out.pdus, PDU_TIE_COLUMNS, ["conn", "dir"], by_blocks=True)
    if (d / layout.COMMANDS).is_file():
        out.commands = read_table(d / layout.COMMANDS)
        if "itt" in out.commands:
            out.commands["itt"] = attribution.tag_numbers(out.commands["itt"])
    return out


def _has_pdus(x: Decoded) -> bool:
    """Whether a host's decode has a PDU row (its pdus.csv read for it when its tie columns
    were not)."""
    if x.ties is not None:
        return not x.ties.empty
    return x.pdus is not None and not read_table(x.pdus, ["pdu"], by_blocks=True).empty


# ----------------------------------------------------------------------------- clock

def estimate_offset(seg_i: pd.DataFrame, seg_t: pd.DataFrame) -> ClockEstimate:
    """Clock offset (target - initiator) from segments captured at both ends."""
    return offset_of_first_copies(segment_pass.first_copies(seg_i),
                                  segment_pass.first_copies(seg_t))


def offset_of_first_copies(first_i: pd.DataFrame, first_t: pd.DataFrame) -> ClockEstimate:
    """estimate_offset from each end's segment_pass.first_copies (each host's made apart:
    the merger makes them in a process a host)."""
    key = segment_pass.KEY
    if first_i.empty or first_t.empty:
        return ClockEstimate(None, None, 0, 0, 0, None, None, "none",
                             "a capture is missing or empty: no common segments")
    _, at_i, at_t = np.intersect1d(first_i["_h"].to_numpy(), first_t["_h"].to_numpy(),
                                   assume_unique=True, return_indices=True)
    # a 64-bit hash may (rarely) pair two different segments: keep only true pairs, compared
    # a column at a time (the pairs' rows are never gathered into a table: the samples are
    # half a million segments a host)
    same = np.ones(len(at_i), bool)
    for c in key:
        a = first_i[c].iloc[at_i].reset_index(drop=True)
        b = first_t[c].iloc[at_t].reset_index(drop=True)
        same &= _same_labels(a, b) if c in ("conn", "dir") else (a == b).to_numpy()
    at_i, at_t = at_i[same], at_t[same]
    direction = first_i["dir"].iloc[at_i]
    i2t, t2i = is_(direction, "i2t").to_numpy(), is_(direction, "t2i").to_numpy()
    # receive time minus send time of each pair: one-way delay plus or minus the offset
    t_i = first_i["ts_ns"].to_numpy(np.int64)[at_i]
    t_t = first_t["ts_ns"].to_numpy(np.int64)[at_t]
    upper = int((t_t - t_i)[i2t].min()) if i2t.any() else None
    lower = int(-(t_i - t_t)[t2i].min()) if t2i.any() else None
    n_i2t, n_t2i = int(i2t.sum()), int(t2i.sum())
    n = n_i2t + n_t2i
    if upper is not None and lower is not None:
        note = ""
        lo, hi = lower, upper
        if lo > hi:  # clocks drifted or jumped during the capture: report it, keep going
            note = (f"inconsistent bounds (lower {lo} > upper {hi} ns): the clocks moved "
                    "during the capture; the interval is widened to contain both")
            lo, hi = hi, lo
        return ClockEstimate((lo + hi) // 2, (hi - lo + 1) // 2, n, n_i2t, n_t2i,
                             lower, upper, "tcp-segments-two-way", note)
    one = upper if upper is not None else lower
    return ClockEstimate(one, None, n, n_i2t, n_t2i, lower, upper, "tcp-segments-one-way",
                         "segments in one direction only: the offset is bounded on one side "
                         "only (estimate = that bound)" if n else "no common segments")


def _same_labels(a: pd.Series, b: pd.Series) -> np.ndarray:
    """Row by row, whether two label columns hold the same text (categoricals compared by
    code, their few labels matched once)."""
    if isinstance(a.dtype, pd.CategoricalDtype) and isinstance(b.dtype, pd.CategoricalDtype):
        codes = a.cat.codes.to_numpy()
        other = b.cat.set_categories(a.cat.categories).cat.codes.to_numpy()
        return (codes == other) & (codes >= 0)
    return (a.astype(str) == b.astype(str)).to_numpy()


# ----------------------------------------------------------------------------- rows

def _rows(n: int, cols: dict[str, Any]) -> pa.Table:
    """A table of n rows with the MERGED_SCHEMA columns `cols` gives, typed as there and in
    its order: a str is repeated, an array or Series converted (NaN/NA -> null). Only the
    columns a kind of row has: a packet's row would otherwise carry some thirty null
    columns, gigabytes for a full-rate capture (`_full` adds them a row group at a time).
    Built in Arrow: the per-packet rows never pass through pandas objects."""
    names, arrays = [], []
    for f in MERGED_SCHEMA:
        v = cols.get(f.name)
        if v is None:
            continue
        if isinstance(v, str):
            arr = pa.repeat(pa.scalar(v, f.type), n)
        else:
            arr = v if isinstance(v, pa.Array | pa.ChunkedArray) else pa.array(v, from_pandas=True)
        names.append(f.name)
        arrays.append(arr if arr.type == f.type else pc.cast(arr, f.type))
    return pa.Table.from_arrays(arrays, names=names)


def _full(t: pa.Table, names: list[str] | None = None) -> pa.Table:
    """t with exactly the columns `names` (MERGED_SCHEMA's by default), missing ones null."""
    fields = [MERGED_SCHEMA.field(c) for c in (names or MERGED_SCHEMA.names)]
    cols = [t[f.name] if f.name in t.column_names else pa.nulls(t.num_rows, f.type)
            for f in fields]
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


def _pdu_rows(pdus: pd.DataFrame, host: str) -> pa.Table:
    get = pdus.get
    return _rows(len(pdus), {
        "ts_ns": pdus["ts_ns"].astype("int64"), "host": host, "layer": "iscsi",
        "event": get("opcode_name"), "conn": get("conn"), "itt": get("itt"),
        "opcode": get("opcode"), "seq": get("tcp_seq"), "bytes": get("dsl"),
        "lba": get("lba"), "source": "pcap", "dir": get("dir"), "pdu": get("pdu"),
        "cdb_name": get("cdb_name"), "xfer_bytes": get("xfer_bytes"), "reason": get("note"),
    })


def _conform(t: pa.Table, host: str) -> pa.Table:
    """A block of `host`'s event stream as MERGED_SCHEMA columns, typed as there; `host` and
    `source` (probe) filled in where a row has none (docs/schema.md §6: the probe writes both,
    a stream written by hand may not; load_events fills the host in the same way)."""
    cols = {c: t[c] for c in t.column_names}
    for name, value in (("host", host), ("source", "probe")):
        cols[name] = pc.fill_null(cols[name], value) if name in cols else value
    return _rows(t.num_rows, cols)


def _with_clock(t: pa.Table, off: int) -> pa.Table:
    """ts_ns_merged (the target's times moved onto the initiator's clock) and dir (a probe
    TCP event's: its socket's own sending direction)."""
    t = _full(t, [c for c in MERGED_SCHEMA.names if c in t.column_names or
                  c in ("host", "conn", "source", "layer", "dir", "ts_ns_merged")])
    is_tgt = pc.fill_null(pc.equal(t["host"], "target"), False)
    ts = t["ts_ns"]
    t = t.set_column(t.schema.get_field_index("ts_ns_merged"), "ts_ns_merged",
                     pc.if_else(is_tgt, pc.subtract(ts, off), ts))
    tcp_ev = pc.fill_null(pc.and_(pc.and_(pc.equal(t["source"], "probe"),
                                          pc.is_valid(t["conn"])),
                                  pc.is_in(t["layer"], value_set=pa.array(["tcp", "net"]))),
                          False)
    return t.set_column(t.schema.get_field_index("dir"), "dir",
                        pc.if_else(tcp_ev, pc.if_else(is_tgt, "t2i", "i2t"), t["dir"]))


# ----------------------------------------------------------------------------- main

def _write_sorted(batches: Iterator[pa.Table], parquet: Path, csv: Path | None) -> None:
    """The sorted rows, a row group at a time, to parquet and csv; each file written beside
    and renamed over the old one."""
    tmp = [parquet.with_name(f".{parquet.name}.tmp")] + \
        ([csv.with_name(f".{csv.name}.tmp")] if csv else [])
    try:
        with pq.ParquetWriter(tmp[0], MERGED_SCHEMA, compression="lz4") as pw, \
                (pacsv.CSVWriter(tmp[1], MERGED_SCHEMA) if csv else nullcontext()) as cw:
            empty = True
            for part in batches:
                # as the sort hands it over, in chunks: combined, each row group was held twice
                pw.write_table(part, row_group_size=SORTED_ROWS)
                if cw is not None:
                    cw.write_table(part)
                empty = False
                freed.give_back()  # as the join's blocks
            if empty:  # the files still have their columns (and the CSV its header)
                pw.write_table(MERGED_SCHEMA.empty_table())
                if cw is not None:
                    cw.write_table(MERGED_SCHEMA.empty_table())
        os.replace(tmp[0], parquet)
        if csv:
            os.replace(tmp[1], csv)
    finally:
        for t in tmp:
            t.unlink(missing_ok=True)


@dataclass
class MergeResult:
    """What a merge did: its notes first (what is missing or unsure), then the counts."""
    notes: list[str]
    rows: int
    clock: ClockEstimate
    lost: dict[str, int]
    counts: dict[str, int]


# merged.csv beside merged.parquet up to this many rows unless asked: a full-rate capture's
# millions of per-packet rows make a CSV of gigabytes that takes longer than the merge
CSV_MAX_ROWS = 1_000_000


def finish_decoding(d: Path, ports: tuple[int, ...] | None = None, log: Any = None,
                    decoding: dict[str, decoderun.Decoding] | None = None
                    ) -> dict[str, str | None]:
    """The decoder on d's pcaps not decoded yet, the merge's first step (its segments.bin,
    beside the PDUs, is the segment table): the runs the caller started (`decoding`,
    decoderun.start_missing) taken over, else started here; each host's problem text (None:
    its tables are in place). In the process that started the runs: only it can wait for
    them."""
    say = log or (lambda m: print(m, file=sys.stderr))
    problems: dict[str, str | None] = {}
    try:
        runs = decoding if decoding is not None else \
            decoderun.start_missing(d, capture_ports(d, ports))
    except (MissingBinary, OSError) as exc:
        return {h: f"istrace-decode {layout.pcap(d, h).name} failed: {exc}"
                for h in decoderun.missing(d)}
    for run in runs.values():
        say(f"merge: decoding {run.pcap.name} into {run.out.relative_to(d)}/")
    try:
        problems.update({h: _finish(run) for h, run in runs.items()})
    finally:
        for run in runs.values():
            run.cancel()
    return problems


def merge_dir(d: Path, ports: tuple[int, ...] | None = None, offset_override: int | None = None,
              write_csv: bool | None = None, log: Any = None,
              decoded: dict[str, str | None] | None = None) -> MergeResult:
    """Merge everything in d; writes merged.parquet, clock.json and merged.csv (write_csv
    None: when at most CSV_MAX_ROWS rows). `ports`: the iSCSI target port(s), else the
    portal meta.json recorded, else 3260. `decoded`: what finish_decoding returned, when the
    caller ran it; without, it runs here first."""
    say = log or (lambda m: print(m, file=sys.stderr))
    notes: list[str] = []
    if not d.is_dir():
        raise MergeError(f"{d}: not a directory")
    ports = capture_ports(d, ports)
    # the record of what the merge is made from goes first and comes back last: a merge
    # killed half-way is judged by its tables' times (stamps.merge_state)
    (d / layout.MERGE_INPUTS).unlink(missing_ok=True)
    inputs = stamps.signatures(layout.capture_inputs(d))
    problems = decoded if decoded is not None else finish_decoding(d, ports, say)
    seg_dirs: dict[str, Path] = {}
    for h in HOSTS:
        dd = decoderun.decoded_dir(d, h)
        if problems.get(h):
            notes.append(f"PDUs of {h} not available: {problems[h]}")
        seg_dirs[h] = dd if (dd / layout.SEGMENTS).is_file() else layout.decoded_dir(d, h)
    seg_bins: dict[str, Path] = {}
    for h in HOSTS:
        p = layout.pcap(d, h)
        if not p.is_file() and (d / f"{h}.pcapng").is_file():
            p = d / f"{h}.pcapng"
        if not p.is_file():
            notes.append(f"no {h}.pcap")
            continue
        try:
            seg_bins[h] = segments_file(p, seg_dirs[h])
        except (DecodeError, MissingBinary, OSError) as exc:
            notes.append(f"TCP segments of {p.name} not available: {exc}")
    bound = segment_pass.sample_bound(*seg_bins.values())
    # Each host's walk over its segments in a process of its own: both at once on a second
    # CPU (forked.start), the merger's longest steps.
    say("merge: the clock's segments of " + " and ".join(seg_bins)
        + (f" ({bound / 2 ** 64:.0%} of the keys)" if bound is not None else ""))
    def walk(h: str) -> pd.DataFrame:
        return segment_pass.first_copies(segment_pass.clock_sample(seg_bins[h], ports, bound))

    walks = {h: forked.start(partial(walk, h)) for h in seg_bins}
    # the probe events read here meanwhile (tens of MB of JSON at full rate), a block at a
    # time into the merge's scratch files: the clock must be known before they are placed
    _remove_stale_scratch(d)
    scratch = Path(tempfile.mkdtemp(prefix=f".merge-{os.getpid()}-", dir=d))
    try:
        staged, lost, event_notes = _stage_events(d, scratch, say)
        notes[:0] = event_notes  # first, as they were read first
        sample = {h: walks[h]() if h in walks else segment_pass.first_copies(
            pd.DataFrame(columns=segment_pass.KEY + ["ts_ns"])) for h in HOSTS}
        if offset_override is not None:
            clock = ClockEstimate(offset_override, 0, 0, 0, 0, None, None,
                                  "given (--offset-ns)")
        else:
            clock = offset_of_first_copies(sample["initiator"], sample["target"])
        del sample
        # the PDUs' tie columns and the commands, read once the clock's matching (the merge's
        # peak) is done with its sample
        tables = {h: load_decoded(decoderun.decoded_dir(d, h), ties=h == "initiator")
                  for h in HOSTS}
        freed.give_back()  # what reading them freed, before the segment writers are forked
        if clock.offset_ns is None:
            notes.append("clock offset unknown (no segment seen at both ends): target times "
                         "are NOT moved; ts_ns_merged = ts_ns for both hosts")
        off = int(clock.offset_ns or 0)
        slack = max(attribution.SLACK_NS, 2 * int(clock.bound_ns or 0))
        if not staged and not seg_bins and not any(_has_pdus(x) for x in tables.values()):
            raise MergeError(f"{d}: nothing to merge (no events, no pcaps)")
        n_rows, counts = _merge_all(d, staged, tables, seg_bins, ports, off, slack,
                                    write_csv, notes, scratch, say)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    clock_doc = asdict(clock)
    clock_doc["notes"] = [n for n in notes if "clock" in n]
    clockfile.write(d, clock_doc)
    stamps.write(d / layout.MERGE_INPUTS, inputs)
    return MergeResult(notes, n_rows, clock, lost, counts)


def _remove_stale_scratch(d: Path) -> None:
    """The scratch directories of merges killed before they could remove them (named after
    their process, which is gone)."""
    for old in d.glob(".merge-*-*"):
        pid = old.name.split("-")[1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(old, ignore_errors=True)


def _stage_events(d: Path, scratch: Path, say: Any
                  ) -> tuple[dict[str, Path], dict[str, int], list[str]]:
    """Each host's probe events, read a block at a time into a scratch file as merged rows
    (not yet on the common clock); (host -> file, host -> events lost, notes)."""
    staged: dict[str, Path] = {}
    lost: dict[str, int] = {}
    notes: list[str] = []
    for h in HOSTS:
        path = events_file(d, h)
        say(f"merge: reading {path.name}")
        stream = EventStream(path)
        out = scratch / f"events-{h}.arrow"
        writer = None
        try:
            for block in stream:
                rows = _conform(block, h)
                if writer is None:
                    writer = pa.ipc.new_file(out, rows.schema, options=SCRATCH_FORMAT)
                writer.write_table(rows)
                freed.give_back()  # the parsed block's text and tables (as the join's)
        finally:
            if writer is not None:
                writer.close()
        if writer is not None:
            staged[h] = out
        lost[h] = stream.lost
        if not path.is_file():
            notes.append(f"no events-{h}.jsonl (or .csv)")
        if stream.lost:
            notes.append(f"{h}: the probe lost {stream.lost} events (ring buffer full)")
    return staged, lost, notes


def _merge_all(d: Path, staged: dict[str, Path], decoded: dict[str, Decoded],
               seg_bins: dict[str, Path], ports: tuple[int, ...], off: int, slack: int,
               write_csv: bool | None, notes: list[str], scratch: Path, say: Any
               ) -> tuple[int, dict[str, int]]:
    """merged.parquet (and merged.csv), each host's segments table and commands; (rows of
    merged.parquet, rows per host and layer)."""
    ini = decoded["initiator"]
    have_cmds = ini.ties is not None and "cmd" in ini.ties and ini.commands is not None
    # the PDUs by sequence, made once for the segments' ties and the rows': made in each of
    # the processes, a full-rate minute's 125 000 PDUs peaked at 15 MB in each
    index = attribution.SeqIndex(ini.ties if have_cmds else None)
    tie = CommandTies(ini.ties, ini.commands, slack, index) \
        if have_cmds and ini.ties is not None and ini.commands is not None else None
    # the tie columns served these two only: let go before the segment writers are forked
    # (30 s of 8 KiB Data-In PDUs: 630 000 rows, 24 MB, held by each of them and the join)
    for h in HOSTS:
        decoded[h].ties = None
    freed.give_back()
    # each host's segments tied to their commands (its own table), beside the events' join
    for h in seg_bins:
        say(f"merge: {h}'s segments on the common clock, tied to their commands")
    segs = {h: forked.start(partial(segment_pass.tie_segments, d, seg_bins[h], h, ports, off,
                                    index, say, publish=False)) for h in seg_bins}
    try:
        n_rows, counts = _write_merged(d, staged, decoded, tie, off, write_csv, notes,
                                       scratch, say)
        for h in segs:
            counts[f"{h}/net"] = segs[h]()
    except BaseException:
        # a failed merge leaves the previous tables whole: the new segment tables wait
        # beside them until everything else is written
        for h, wait in segs.items():
            try:
                wait()
            except Exception:  # noqa: BLE001, S110 - the first failure is the one raised
                pass
            segtable.discard(d, h)
        raise
    for h in HOSTS:
        if h in segs:
            segtable.publish(d, h)
        else:
            segtable.remove(d, h)  # an older merge's would contradict this one
    return n_rows, counts


def _sources(staged: dict[str, Path], decoded: dict[str, Decoded]) -> Iterator[pa.Table]:
    """Every merged row but the segments' in blocks, each host's events then its PDUs (the
    order ties in time keep)."""
    for h in HOSTS:
        if h in staged:
            yield from _blocks(staged[h])
        pdus = decoded[h].pdus
        for block in read_table_blocks(pdus, PDU_ROW_COLUMNS, BLOCK_ROWS) if pdus else []:
            if "itt" in block:
                block["itt"] = attribution.tag_numbers(block["itt"])
            yield _pdu_rows(block, h)


def _blocks(staged: Path) -> Iterator[pa.Table]:
    """A staged file's rows, BLOCK_ROWS a table (the probe's blocks are a few thousand)."""
    held: list[pa.RecordBatch] = []
    n = 0
    for batch in scratch_batches(staged):
        held.append(batch)
        n += batch.num_rows
        if n >= BLOCK_ROWS:
            yield pa.Table.from_batches(held)
            held, n = [], 0
    if held:
        yield pa.Table.from_batches(held)


def _write_merged(d: Path, staged: dict[str, Path], decoded: dict[str, Decoded],
                  tie: CommandTies | None, off: int, write_csv: bool | None,
                  notes: list[str], scratch: Path, say: Any) -> tuple[int, dict[str, int]]:
    """The events and PDUs on the common clock, tied to their commands (`tie`; None: the
    initiator's decode is missing), sorted and written (merged.parquet, merged.csv) a block
    at a time, and each host's commands on the common clock; (rows, rows per host and
    layer)."""
    if tie is None:
        notes.append("no initiator-side decode (pdus.csv/commands.csv): cmd_id is empty")
    elif decoded["target"].pdus is None:
        notes.append("target PDUs not decoded: target PDU rows have no cmd_id")
    counts: dict[str, int] = {}
    say("merge: joining")
    with ExternalSort(MERGED_SCHEMA, "ts_ns_merged", scratch) as rows:
        for block in _sources(staged, decoded):
            block = _with_clock(block, off)
            cmd = tie.cmd_ids(block) if tie is not None else \
                pa.nulls(block.num_rows, pa.int64())
            i = block.schema.get_field_index("cmd_id")
            block = block.set_column(i, MERGED_SCHEMA.field("cmd_id"), cmd) if i >= 0 else \
                block.append_column(MERGED_SCHEMA.field("cmd_id"), cmd)
            for g in block.group_by(["host", "layer"]).aggregate(
                    [("ts_ns", "count")]).to_pylist():
                k = f"{g['host']}/{g['layer']}"
                counts[k] = counts.get(k, 0) + int(g["ts_ns_count"])
            rows.add(_full(block))
            # what tying and labelling the block freed goes back now: left to the C library,
            # a minute's join grew this process by 90 MB of freed blocks (the rows kept are in
            # the sort's run files)
            freed.give_back()
        freed.give_back()  # the join's, before the sort's run readers and row groups
        n_rows = rows.rows
        say("merge: sorting and writing")
        csv = d / layout.MERGED_CSV
        with_csv = bool(write_csv or (write_csv is None and n_rows <= CSV_MAX_ROWS))
        _write_sorted(rows.batches(SORTED_ROWS), d / layout.MERGED, csv if with_csv else None)
    if not with_csv:
        csv.unlink(missing_ok=True)  # an older merge's would contradict the new parquet
        notes.append(f"merged.csv not written ({n_rows} rows > {CSV_MAX_ROWS}; "
                     "istrace merge --csv writes it)" if write_csv is None else
                     "merged.csv not written (--no-csv)")
    for h in HOSTS:  # each host's commands, times also on the common clock
        host_cmds = decoded[h].commands
        if host_cmds is None:
            cmdtable.remove(d, h)  # an older merge's would contradict this one
        else:
            cmdtable.write(d, h, host_cmds, off)
    return n_rows, counts
