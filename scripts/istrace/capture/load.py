"""Load everything a capture directory holds, degrading to what is there.

Layout (docs/schema.md, `istrace capture --out DIR`): initiator.pcap, target.pcap,
events-<host>.jsonl, meta.json, merged.parquet + clock.json (`istrace merge`), decoded tables
(pdus.csv, commands.csv, connections.csv, segments.bin from `istrace decode`; the decoder is
run on a pcap that has none). Each table may be missing;
`Capture.missing` says which, in words fit for the report.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from istrace.capture import clockfile, decoderun, layout, stamps
from istrace.capture.decoded import DecodeError, read_table, segments_file
from istrace.capture.decoderun import decode_to_dir
from istrace.capture.events import (
    EVENT_SCHEMA,
    RowMask,
    event_hosts,
    held_rows,
    host_order,
    load_events,
    tcp_rows,
    with_sorted_labels,
)
from istrace.capture.hoststats import load_hoststats
from istrace.capture.meta import DEFAULT_PORT, read_meta, target_ports
from istrace.capture.pdutables import PduTables
from istrace.capture.segsource import FileSegments, Segments, as_segments
from istrace.system.paths import MissingBinary

HOSTS = layout.HOSTS


class EmptyCapture(ValueError):
    """The directory holds nothing to analyse."""


@dataclass
class Capture:
    dir: Path
    meta: dict[str, Any] = field(default_factory=dict)
    # host -> pdus.csv, the columns the analyses read (decoded.ANALYSED_PDU_COLUMNS), read
    # when asked for (a table given here is held: istrace.capture.pdutables)
    pdus: PduTables = field(default_factory=PduTables)
    commands: dict[str, pd.DataFrame] = field(default_factory=dict)   # host -> commands.csv
    connections: pd.DataFrame | None = None
    # host -> its TCP segments, read from segments.bin a slice at a time (a table given here
    # is wrapped: istrace.capture.segsource)
    segs: dict[str, Segments] = field(default_factory=dict)
    # probe events, both hosts, when a table is given here; load_capture holds none:
    # held_events() reads those the analysis reads when a step asks (events.held_rows: not the
    # hosts' socket I/O system calls, not the TCP samples, which tcp_events() reads when the
    # tracker runs); all_events() reads every one
    events: pd.DataFrame | None = None
    events_complete: bool = True  # False: `events` is events.held_rows' share
    tcp_held: bool = True         # False: `events` has none of the TCP layer's events
    sockstats: pd.DataFrame | None = None   # sampled tcp_info of the iSCSI sockets (ss -ti)
    cpu: pd.DataFrame | None = None         # sampled CPU use per CPU and process
    # merged.parquet's columns (none: no readable merged.parquet); read_merged reads the rows
    # and columns a step needs where it needs them (a minute's probe rows are 50 MB)
    merged_columns: list[str] = field(default_factory=list)
    clock: dict[str, Any] = field(default_factory=dict)
    ports: tuple[int, ...] = (DEFAULT_PORT,)  # the iSCSI target port(s) the tables were cut to
    track: Any = None  # istrace.track.of_capture.track_capture fills it in
    meta_error: str | None = None  # why meta.json, present, could not be read
    checks: Any = None  # istrace.report.checks.of fills it in: the inputs' cross-checks
    missing: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.pdus, PduTables):
            self.pdus = PduTables(self.pdus)
        self.segs = {h: s for h, s in ((h, as_segments(v)) for h, v in self.segs.items())
                     if s is not None}

    @property
    def offset_ns(self) -> int:
        """Target clock minus initiator clock (0 when unknown; `clock_note` says so)."""
        return int(self.clock.get("offset_ns", 0) or 0)

    @property
    def clock_note(self) -> str:
        if self.clock:
            return "clock " + clockfile.describe(self.clock)
        if self.meta.get("testbed") or len(self.segs) == 2:
            return "clock offset assumed 0: both ends on one host's clock (no clock.json)"
        return "clock offset unknown (no clock.json)"

    def segment_columns(self, host: str, columns: list[str]) -> pd.DataFrame | None:
        """A host's segments with `columns` (besides ts_ns, conn and dir) as one table, row
        for row as in `segs`; None without its segments."""
        segs = self.segs.get(host)
        if segs is None:
            return None
        return segs.frame(["ts_ns", "conn", "dir", *columns])

    def main_commands(self) -> pd.DataFrame | None:
        return self.commands.get("initiator", self.commands.get("target"))

    def main_pdus(self, columns: Sequence[str] | None = None) -> pd.DataFrame | None:
        """The initiator's PDUs, else the target's (read now: not held), with `columns` of
        the analysed ones only when given."""
        host = self.pdus.first(HOSTS)
        return self.pdus.read(host, columns) if host is not None else None

    def held_events(self, columns: Sequence[str] | None = None) -> pd.DataFrame | None:
        """The probe events the analysis reads (events.held_rows'; every one when `events`
        holds them all): those held, else read now, with `columns` of theirs only when given
        (ts_ns, host and layer always), and not kept. Only the diagnosis reads them: read
        whole at load, a minute's 18 000 were 4 MB in the report's process and in each it
        forked (the tracing, the drawing and the tracking processes)."""
        if self.events is not None or self.events_complete:
            return self.events
        return _read_events(self.dir, self.merged_columns, held_rows, columns)

    def release_events(self) -> None:
        """Let go of the probe events held, in a process that reads none of them (the report's
        drawing and tracing processes, forked holding them: 7 MB of a minute's capture
        each); all_events() still reads every one from the streams."""
        if self.events is not None:
            self.events = None
            self.events_complete = False

    def tcp_events(self, columns: Sequence[str] | None = None) -> pd.DataFrame | None:
        """The TCP layer's probe events (the tracker's input): those in `events` when it holds
        them, else read now, from merged.parquet or the streams, with `columns` of theirs
        only when given (ts_ns, host and layer always; None: no events at all)."""
        if self.tcp_held:
            return self.events
        return _read_events(self.dir, self.merged_columns, tcp_rows, columns)

    def all_events(self) -> pd.DataFrame | None:
        """Every probe event, the socket I/O system calls too: `events` when it holds them
        all, else read from the event streams now (for the timeline and trace of a capture
        not merged, and comparisons of every layer's latencies)."""
        return self.events if self.events_complete else load_events(self.dir)


def _read_csv(path: Path, columns: list[str] | None = None,
              labels: Sequence[str] = ()) -> pd.DataFrame | None:
    try:
        return read_table(path, columns, labels)
    except (OSError, ValueError) as exc:
        print(f"istrace: {path}: unreadable ({exc})", file=sys.stderr)
        return None


def _try_decode(pcap: Path, out: Path, ports: tuple[int, ...]) -> str | None:
    """Run the decoder; error text or None."""
    try:
        decode_to_dir(pcap, out, ports=ports)
    except Exception as exc:  # noqa: BLE001 - any decoder failure degrades to "no PDUs"
        return f"decoding {pcap.name} failed: {exc}"
    return None


def load_capture(d: str | Path, decode: bool = True,
                 ports: tuple[int, ...] | None = None) -> Capture:
    """Everything `d` holds; raises EmptyCapture when it holds no capture input at all.
    `ports`: the iSCSI target port(s), else the portal meta.json recorded, else 3260."""
    d = Path(d)
    if not d.is_dir():
        raise EmptyCapture(f"{d}: not a directory")
    if not layout.has_capture_input(d):
        raise EmptyCapture(f"{d}: no capture input (no initiator.pcap, target.pcap or "
                           "events-*.jsonl/csv): run `istrace capture --out DIR` first")
    cap = Capture(dir=d)
    if (d / layout.META).is_file():
        try:
            cap.meta = read_meta(d)
        except ValueError as exc:
            cap.meta_error = str(exc)
            cap.missing.append(f"meta.json (unreadable: {exc})")
    else:
        cap.missing.append("meta.json (run parameters: delay, workload, capture drops)")
    cap.ports = tuple(ports) if ports else target_ports(cap.meta)
    try:
        cap.clock = clockfile.read(d) or {}
    except ValueError:
        cap.warnings.append("clock.json unreadable")

    for host in HOSTS:
        pcap = layout.pcap(d, host)
        if not pcap.is_file():
            cap.missing.append(f"{host}.pcap")
            continue
        found = None
        for cand in layout.decoded_dirs(d, host):
            if cand == layout.decoded_dir(d, host) and not decoderun.current(d, host):
                continue  # none yet, or decoded from an earlier pcap: decoded again below
            if (cand / layout.PDUS).is_file():
                found = cand
                if cand == layout.decoded_dir(d, host):
                    for p in stamps.judge(cand / layout.INPUTS, [pcap])[1]:
                        cap.warnings.append(stamps.kept_note(p, cand / layout.INPUTS))
                elif layout.older_than(cand / layout.PDUS, pcap):
                    cap.warnings.append(f"{cand / layout.PDUS} is older than {pcap.name}: "
                                        "decoded from an earlier pcap? (decoded by hand: "
                                        "not decoded again)")
                break
        if found is None and decode:
            out = layout.decoded_dir(d, host)
            err = _try_decode(pcap, out, cap.ports)
            if err is None and (out / layout.PDUS).is_file():
                found = out
            elif err:
                cap.missing.append(f"decoded PDUs of {host}.pcap ({err})")
        # TCP segments: the decoder's segments.bin beside the PDUs, or made now (segments only).
        seg_dir = found if found is not None and (found / layout.SEGMENTS).is_file() \
            else layout.decoded_dir(d, host)
        try:
            cap.segs[host] = FileSegments(segments_file(pcap, seg_dir), cap.ports)
        except (DecodeError, MissingBinary, OSError) as exc:
            cap.warnings.append(f"{host}.pcap: no TCP segments ({exc})")
            if found is None:
                continue
        if found is not None:
            try:
                cap.pdus.add_file(host, found / layout.PDUS)
            except (OSError, ValueError) as exc:
                print(f"istrace: {found / layout.PDUS}: unreadable ({exc})", file=sys.stderr)
            commands = _read_csv(found / layout.COMMANDS)
            if commands is not None:
                cap.commands[host] = commands
            if host == "initiator" and (found / layout.CONNECTIONS).is_file():
                cap.connections = _read_csv(found / layout.CONNECTIONS)

    merged = d / layout.MERGED
    why = stamps.merge_state(d) if merged.is_file() else None
    if why is not None and "unreadable" in why:
        cap.warnings.append(f"{why}: not used (istrace merge makes it again)")
    elif why is not None:
        cap.warnings.append("merged.parquet (and clock.json) are older than the capture's "
                            "pcaps or event streams: made from an earlier capture? "
                            "(istrace merge makes them again)")
    if merged.is_file() and (why is None or "unreadable" not in why):
        try:
            cap.merged_columns = pq.read_schema(merged).names
        except (OSError, ValueError) as exc:
            cap.warnings.append(f"merged.parquet unreadable: {exc}")
    else:
        cap.missing.append("merged.parquet (istrace merge): layers aligned from raw tables")
    cap.events_complete = cap.tcp_held = False  # read when asked (held_events)
    streams = layout.events_files(d)
    if not streams or (not any(f.stat().st_size for f in streams)
                       and not set(EVENT_NAMES) <= set(cap.merged_columns)):
        cap.missing.append("probe events (events-*.jsonl): no syscall/block/SCSI layers, "
                           "no exact cwnd/CA state")
    cap.sockstats, cap.cpu = load_hoststats(d)
    if cap.sockstats is None and cap.cpu is None:
        cap.missing.append("host samples (hoststats-*.jsonl: the kernel's sender-limit clocks "
                           "and CPU use)")
    _capture_drop_warnings(cap)
    return cap


# a probe event's columns, as the streams give them (docs/schema.md §1)
EVENT_NAMES = [f.name for f in EVENT_SCHEMA if f.name != "lost"]


def _read_events(d: Path, merged_columns: list[str], keep: RowMask,
                 columns: Sequence[str] | None = None) -> pd.DataFrame | None:
    """The probe events `keep` picks (their `columns`, else all), as load_events gives them:
    read from merged.parquet when the merge put every stream's events there (its columns:
    the streams' JSON was parsed by the merge, and parsing it again was 0.28 s of the 20 s
    capture's 0.40 s load, on the way to every step), else from the streams."""
    names = EVENT_NAMES if columns is None else \
        [c for c in EVENT_NAMES if c in {"ts_ns", "host", "layer", *columns}]
    hosts = event_hosts(d)
    if not hosts or not set(hosts) <= set(HOSTS) or not set(EVENT_NAMES) <= set(merged_columns):
        return load_events(d, keep, names)
    try:
        ev = read_merged(d, names, probe_rows_only=True, keep=keep)
    except (OSError, ValueError):
        ev = pd.DataFrame()
    if ev.empty:  # none kept: whether the streams have any is theirs to say
        return load_events(d, keep, names)
    # the streams' order: time, then the hosts' order, then each host's stream order (which
    # the merge's stable sort kept among a host's equal times)
    rank = pd.Series({h: k for k, h in enumerate(sorted(HOSTS, key=host_order))})
    ev["_rank"] = ev["host"].astype(object).map(rank).to_numpy()
    ev = ev.sort_values(["ts_ns", "_rank"], kind="stable", ignore_index=True)
    ev = ev.drop(columns="_rank")
    if "cookie" in ev.columns and ev["cookie"].dtype == np.int64:  # the streams' are unsigned
        ev["cookie"] = ev["cookie"].astype(np.uint64)
    return with_sorted_labels(ev)


def read_merged(d: Path, columns: list[str] | None = None, probe_rows_only: bool = False,
                keep: Callable[[pa.Table], Any] | None = None) -> pd.DataFrame:
    """merged.parquet (docs/schema.md §6): the chosen columns of every row, or, asked for,
    only the probe events' rows (filtered by the Parquet reader), and of those the ones
    `keep` (a mask of the Arrow table) picks before they become a pandas table, text columns
    as categoricals (a minute's 360 000 probe events repeat a few dozen host/layer/event
    names)."""
    if keep is None:
        table = pq.read_table(d / layout.MERGED, columns=columns,
                              filters=[("source", "=", "probe")] if probe_rows_only else None)
    else:  # a row group at a time, each cut to the rows kept before the next is read
        pf = pq.ParquetFile(d / layout.MERGED)
        parts = list(_kept_groups(pf, columns, probe_rows_only, keep))
        names = list(columns) if columns is not None else pf.schema_arrow.names
        table = pa.concat_tables(parts) if parts else pf.schema_arrow.empty_table().select(names)
    return _frame(table)


def merged_blocks(d: Path, columns: list[str], keep: Callable[[pa.Table], Any],
                  probe_rows_only: bool = True) -> Iterator[pd.DataFrame]:
    """read_merged's rows a row group at a time (those `keep` picks of each; none of a
    group that keeps none), in the file's order: for a step that makes something of each
    row on its own, and never holds a minute's rows at once."""
    pf = pq.ParquetFile(d / layout.MERGED)
    for table in _kept_groups(pf, columns, probe_rows_only, keep):
        if table.num_rows:
            yield _frame(table)


def _kept_groups(pf: pq.ParquetFile, columns: list[str] | None, probe_rows_only: bool,
                 keep: Callable[[pa.Table], Any]) -> Iterator[pa.Table]:
    names = list(columns) if columns is not None else pf.schema_arrow.names
    read = names + (["source"] if probe_rows_only and "source" not in names else [])
    for i in range(pf.num_row_groups):
        g = pf.read_row_group(i, columns=read)
        if probe_rows_only:
            g = g.filter(pc.fill_null(pc.equal(g["source"], "probe"), False))
        yield g.filter(keep(g)).select(names)


def _frame(table: pa.Table) -> pd.DataFrame:
    strings = [f.name for f in table.schema if pa.types.is_string(f.type)]
    # each Arrow column freed as it is converted: a minute's events were held twice over
    return table.to_pandas(categories=strings, split_blocks=True, self_destruct=True)


def _capture_drop_warnings(cap: Capture) -> None:
    """Capture drops (tcpdump 'dropped by kernel') from meta.json or tcpdump logs."""
    drops: dict[str, int] = {}
    unwritten: dict[str, int] = {}
    caps = cap.meta.get("captures") if isinstance(cap.meta.get("captures"), dict) else {}
    for host, c in (caps or {}).items():
        if isinstance(c, dict):
            n = sum(int(v) for k, v in c.items() if "drop" in k and isinstance(v, int | float))
            drops[f"meta.json captures.{host}"] = n
    for host in ("initiator", "target"):  # simple layouts: meta {"capture": {host: {dropped}}}
        c = (cap.meta.get("capture") or {}).get(host) if isinstance(
            cap.meta.get("capture"), dict) else None
        if isinstance(c, dict) and isinstance(c.get("dropped"), int | float):
            drops[f"meta.json capture.{host}"] = int(c["dropped"])
    for log in sorted(cap.dir.glob("*tcpdump*.log")) + sorted(cap.dir.glob("*tcpdump*.err")):
        got: dict[str, int] = {}
        for line in log.read_text(errors="replace").splitlines():
            for key in ("dropped by kernel", "packets captured", "received by filter"):
                if key in line:
                    try:
                        got[key] = int(line.split()[0])
                    except ValueError:
                        pass
        if "dropped by kernel" in got and not caps:
            drops[log.name] = got["dropped by kernel"]
        lost = got.get("received by filter", 0) - got.get("packets captured", 0)
        if "packets captured" in got and lost > 0:
            unwritten[log.name] = lost
    for where, n in drops.items():
        if n > 0:
            cap.warnings.append(f"CAPTURE DROPS: {n} packets dropped ({where}) - the pcap "
                                "misses packets; PDU and TCP figures are incomplete")
    for where, n in unwritten.items():
        cap.warnings.append(f"{where}: {n} packets matched the filter but were not written "
                            "(usually the last ones, still queued when tcpdump stopped)")
    path = cap.meta.get("path_stats")
    if isinstance(path, dict):
        path_lost = {k: v for k, v in _flat(path).items() if "drop" in k and isinstance(
            v, int | float) and v > 0}
        if path_lost:
            cap.warnings.append("emulated path dropped packets (network loss, not capture "
                                "loss): " + ", ".join(f"{k}={int(v)}"
                                                      for k, v in path_lost.items()))


def _flat(obj: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    else:
        out[prefix] = obj
    return out
