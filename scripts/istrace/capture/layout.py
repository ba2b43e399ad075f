"""The names of a capture directory's files: the one place that knows them (docs/architecture.md
has the table of who writes and who reads each).

    DIR/meta.json                      settings in force, drop counts (istrace.session)
    DIR/<host>.pcap                    each end's packets (tcpdump)
    DIR/events-<host>.jsonl|.csv       each end's probe events (istrace-probe)
    DIR/hoststats-<host>.jsonl         each end's sampled tcp_info and CPU (istrace.session)
    DIR/decoded/<host>/*.csv           the decoder's tables (istrace-decode --csv-dir)
    DIR/merged.parquet, clock.json     one clock, one trace of events and PDUs (istrace merge)
    DIR/segments/host=<host>/*.parquet every TCP segment on that clock, tied to its command
                                       (istrace merge; Hive-partitioned by host)
    DIR/commands/host=<host>/*.parquet each host's SCSI commands, times on that clock too
                                       (istrace merge; Hive-partitioned by host)
    DIR/track.parquet (+_states, _events)  cwnd/state series (istrace track, report)
    DIR/plots/, report.html, trace.json  (istrace plot, report)
    DIR/verdict.json                   what limited the transfer (istrace report)
    DIR/verdict.parquet                its shares, a row per cause, for queries across captures
"""

from __future__ import annotations

from pathlib import Path

HOSTS = ("initiator", "target")

META = "meta.json"
CLOCK = "clock.json"
MERGED = "merged.parquet"
MERGED_CSV = "merged.csv"
SEGMENT_TABLE = "segments"
COMMAND_TABLE = "commands"
TRACK = "track.parquet"
PLOTS = "plots"
REPORT = "report.html"
VERDICT = "verdict.json"
VERDICT_TABLE = "verdict.parquet"
TRACE_JSON = "trace.json"

PDUS = "pdus.csv"
COMMANDS = "commands.csv"
CONNECTIONS = "connections.csv"
SEGMENTS = "segments.bin"


def pcap(d: Path, host: str) -> Path:
    return d / f"{host}.pcap"


def segment_table(d: Path, host: str) -> Path:
    """The merged per-packet table of one host: a Hive partition (`host=<host>`), so DuckDB,
    Arrow or Spark read DIR/segments/ (or many captures' at once) as one table."""
    return d / SEGMENT_TABLE / f"host={host}" / "part-0.parquet"


def command_table(d: Path, host: str) -> Path:
    """One host's commands (istrace.capture.cmdtable), partitioned as segment_table is."""
    return d / COMMAND_TABLE / f"host={host}" / "part-0.parquet"


def events_file(d: Path, host: str, fmt: str = "jsonl") -> Path:
    return d / f"events-{host}.{fmt}"


def hoststats_file(d: Path, host: str) -> Path:
    return d / f"hoststats-{host}.jsonl"


def hoststats_files(d: Path) -> list[Path]:
    return sorted(d.glob("hoststats-*.jsonl"))


def events_files(d: Path) -> list[Path]:
    """Every host's probe event stream, JSON lines first."""
    return sorted(d.glob("events-*.jsonl")) + sorted(d.glob("events-*.csv"))


def events_host(path: Path) -> str:
    return path.name.split(".")[0].removeprefix("events-")


def decoded_dir(d: Path, host: str) -> Path:
    """Where `istrace report`/`plot` decode a host's pcap to."""
    return d / "decoded" / host


def decoded_dirs(d: Path, host: str) -> list[Path]:
    """Where a host's decoded tables may already be: istrace's own folder first, then the
    folders people pass to `istrace decode --csv-dir` by hand."""
    out = [decoded_dir(d, host), d / f"decoded-{host}", d / f"decode-{host}", d / host]
    if host == "initiator":
        out += [d, d / "decoded"]
    return out


def track_files(out: Path) -> tuple[Path, Path, Path]:
    """The tracker's samples, CA-state intervals and marks, beside each other, in the samples'
    format (.parquet, or .csv when asked for)."""
    stem, ext = out.with_suffix(""), out.suffix if out.suffix == ".csv" else ".parquet"
    return out, Path(f"{stem}_states{ext}"), Path(f"{stem}_events{ext}")


def has_capture_input(d: Path) -> bool:
    """Anything an analysis can start from: a pcap or a probe event stream of either host."""
    return any(pcap(d, h).is_file() for h in HOSTS) or bool(events_files(d))
