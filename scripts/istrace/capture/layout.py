"""The names of a capture directory's files: the one place that knows them (docs/architecture.md
has the table of who writes and who reads each).

    DIR/meta.json                      settings in force, drop counts (istrace.session)
    DIR/<host>.pcap                    each end's packets (tcpdump)
    DIR/events-<host>.jsonl|.csv       each end's probe events (istrace-probe)
    DIR/hoststats-<host>.jsonl         each end's sampled tcp_info and CPU (istrace.session)
    DIR/decoded/<host>/*.csv           the decoder's tables (istrace-decode --csv-dir), and
                                       decoder.log: what it said of the pcap (its stderr)
    DIR/merged.parquet, clock.json     one clock, one trace of events and PDUs (istrace merge)
    DIR/segments/host=<host>/*.parquet every TCP segment on that clock, tied to its command
                                       (istrace merge; Hive-partitioned by host)
    DIR/commands/host=<host>/*.parquet each host's SCSI commands, times on that clock too
                                       (istrace merge; Hive-partitioned by host)
    DIR/track.parquet (+_states, _events)  cwnd/state series (istrace track, report)
    DIR/plots/, report.html, trace.json  (istrace plot, report)
    DIR/verdict.json                   what limited the transfer (istrace report)
    DIR/verdict.parquet                its shares, a row per cause, for queries across captures
    DIR/merged.inputs.json, decoded/<host>/inputs.json  what the merge and the decode were made
                                       from (istrace.capture.stamps)
    DIR/.istrace.lock                  held by the analysis running on DIR (istrace.capture.lock)

A directory the analysis cannot write to (an archive on a read-only share) is analysed in
its cache directory (cache_dir), which mirrors it (istrace.capture.place): the same names.
"""

from __future__ import annotations

import hashlib
import os
import shutil
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
# what the decoder said of the pcap as it decoded it (its stderr: "capture ends early", ...)
DECODER_LOG = "decoder.log"
INPUTS = "inputs.json"            # in decoded/<host>/: the pcap its tables were decoded from
MERGE_INPUTS = "merged.inputs.json"  # the pcaps and event streams the merge was made from
LOCK = ".istrace.lock"


def cache_dir(d: Path) -> Path:
    """Where the analysis of a capture directory it cannot write goes:
    $XDG_CACHE_HOME/istrace/<hash of d's full path>/<d's name> (~/.cache without
    XDG_CACHE_HOME); the name kept last, so reports and comparisons still call it by it."""
    d = d.resolve()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    key = hashlib.sha256(str(d).encode()).hexdigest()[:16]
    return base / "istrace" / key / (d.name or "capture")


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


def older_than(table: Path, *inputs: Path) -> bool:
    """Whether `table`, made from `inputs`, was written before one of them was (a pcap or an
    event stream written again since): it then describes another capture."""
    if not table.is_file():
        return False
    made = table.stat().st_mtime
    return any(p.is_file() and p.stat().st_mtime > made for p in inputs)


def capture_inputs(d: Path) -> list[Path]:
    """The pcaps and probe event streams d holds: what every derived table is made from."""
    return [p for p in (pcap(d, h) for h in HOSTS) if p.is_file()] + events_files(d)


def has_capture_input(d: Path) -> bool:
    """Anything an analysis can start from: a pcap or a probe event stream of either host."""
    return any(pcap(d, h).is_file() for h in HOSTS) or bool(events_files(d))


# What a capture session writes besides the pcaps and event streams (`istrace capture`),
# each host's own files, and what the analysis derives from them
_SESSION_FILES = (META, "probe.log", "workload.stdout", "workload.stderr")
_HOST_FILES = ("{h}.pcap", "{h}.pcapng", "events-{h}.jsonl", "events-{h}.csv",
               "events-{h}.meta.json", "hoststats-{h}.jsonl", "tcpdump-{h}.log",
               "probe-{h}.log")
_DERIVED = (MERGED, MERGED_CSV, MERGE_INPUTS, CLOCK, SEGMENT_TABLE, COMMAND_TABLE, PLOTS,
            REPORT, VERDICT, VERDICT_TABLE, TRACE_JSON, "decoded")
_DECODED_TABLES = (PDUS, COMMANDS, CONNECTIONS, SEGMENTS, INPUTS)


def earlier_capture(d: Path) -> list[Path]:
    """The files and folders an earlier capture into d, and its analysis, left there: a new
    capture must not be analysed with them (a merged.parquet present is not merged again,
    a pdus.csv not decoded again), so it removes them first (`istrace capture --replace`).
    Only names istrace gives: the decoded tables in folders decoded by hand, not the folders
    themselves, and nothing else a person keeps beside them."""
    if not d.is_dir():
        return []
    names = [*_SESSION_FILES, *_DERIVED,
             *(f.format(h=h) for h in HOSTS for f in _HOST_FILES),
             *(p.name for out in (d / TRACK, d / "track.csv") for p in track_files(out))]
    found = [d / n for n in dict.fromkeys(names) if (d / n).exists() or (d / n).is_symlink()]
    found += sorted(d.glob(".merge-*"))  # a killed merge's scratch
    for h in HOSTS:
        for folder in decoded_dirs(d, h):
            found += [folder / t for t in _DECODED_TABLES
                      if (folder / t).is_file() and not any(f in (folder / t).parents
                                                            for f in found)]
    return list(dict.fromkeys(found))


def remove(paths: list[Path]) -> None:
    """Each file or folder of `paths` (earlier_capture's), gone."""
    for p in paths:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink(missing_ok=True)


class EarlierCapture(ValueError):
    """The capture directory holds an earlier capture (or its analysis)."""


def clear_for_capture(d: Path, replace: bool) -> int:
    """d ready for a new capture: an earlier capture there (earlier_capture) is removed when
    `replace`, else EarlierCapture names it (analysed with the new one's files, its merged
    trace and decoded PDUs would be reported as the new capture's). Returns how many files
    and folders were removed."""
    earlier = earlier_capture(d)
    if earlier and not replace:
        shown = ", ".join(p.name for p in earlier[:4]) + (", ..." if len(earlier) > 4 else "")
        raise EarlierCapture(f"{d} holds an earlier capture ({shown}): choose another "
                             "directory, or --replace to remove it and what was derived "
                             "from it")
    remove(earlier)
    return len(earlier)
