"""What a derived table was made from, and whether it may still be trusted.

A decode (decoded/<host>/inputs.json) and a merge (merged.inputs.json) record, as their last
step, each input's size, modification time and first bytes. An input is then judged:
  same     size and time as recorded (or another time, but not after the record's, and the
           same first bytes: a copy that kept times, not written again since);
  cut      shorter, with the same first bytes: the same capture cut short (a disk that
           filled, a copy broken off). The tables made from the longer one are kept, and
           said to be kept (one line): a shorter file never replaces what a longer one gave;
  changed  anything else (written again, grown, another file): made again.
A table with no record (an older istrace's, or a run killed before its last step) is judged
by time alone: newer than every input. The writers remove the record before they replace a
table, so a killed run is judged by time, never by a record of the tables it replaced. (A
decode with no record that a shorter copy of its pcap would replace is kept by
decoderun._shorter_copy, and recorded with `cut`: judged CUT from then on.)
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from istrace.capture import layout

HEAD = 4096  # the first bytes compared: a pcap's header and first packets, their times

SAME, CUT, CHANGED, NONE = "same", "cut", "changed", "none"


def signature(p: Path) -> dict[str, Any]:
    st = p.stat()
    return {"name": p.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "head": _head(p, min(HEAD, st.st_size)), "head_len": min(HEAD, st.st_size)}


def _head(p: Path, n: int) -> str:
    with open(p, "rb") as f:
        return hashlib.sha256(f.read(n)).hexdigest()


def write(stamp: Path, inputs: Iterable[dict[str, Any]], cut: bool = False) -> None:
    """The record of `inputs` (signatures taken before the table was made) as `stamp`.
    (swapwrite, and pyarrow with it, imported here: decoderun, which imports this module,
    starts the decoders before the analysis' libraries load.)"""
    from istrace.capture.swapwrite import replace_text

    doc: dict[str, Any] = {"inputs": list(inputs)}
    if cut:  # the tables kept are of a longer copy of these inputs (decoderun._shorter_copy)
        doc["cut"] = True
    replace_text(stamp, json.dumps(doc, indent=1) + "\n")


def signatures(inputs: Iterable[Path]) -> list[dict[str, Any]]:
    return [signature(p) for p in inputs if p.is_file()]


def _judge_one(rec: dict[str, Any], p: Path, made_ns: int) -> str:
    st = p.stat()
    n = int(rec.get("head_len", 0))
    if st.st_size == rec.get("size") and (st.st_mtime_ns == rec.get("mtime_ns") or (
            st.st_mtime_ns <= made_ns and _head(p, n) == rec.get("head"))):
        return SAME  # as recorded, or its time changed but not to after the record's
    if st.st_size < int(rec.get("size", 0)) and (
            st.st_size < n or _head(p, n) == rec.get("head")):
        return CUT
    return CHANGED


def judge(stamp: Path, inputs: Iterable[Path]) -> tuple[str, list[Path]]:
    """(SAME | CUT | CHANGED | NONE, the inputs found cut) of the table `stamp` records.
    NONE: no readable record. An input that appeared or went since: CHANGED."""
    try:
        doc = json.loads(stamp.read_text())
        recorded = {r["name"]: r for r in doc["inputs"]}
    except (OSError, ValueError, KeyError, TypeError):
        return NONE, []
    now = {p.name: p for p in inputs if p.is_file()}
    if set(now) != set(recorded):
        return CHANGED, []
    made = stamp.stat().st_mtime_ns
    found = {name: _judge_one(recorded[name], p, made) for name, p in now.items()}
    if CHANGED in found.values():
        return CHANGED, []
    cut = [now[n] for n in sorted(found) if found[n] == CUT or doc.get("cut")]
    return (CUT if cut else SAME), cut


def kept_note(cut: Path, stamp: Path) -> str:
    """The one line that says the tables made from `cut` when it was longer were kept (the
    same line whichever table's record found it: said once)."""
    try:
        rec = {r["name"]: r["size"] for r in json.loads(stamp.read_text())["inputs"]}
    except (OSError, ValueError, KeyError, TypeError):
        rec = {}
    host = next((h for h in layout.HOSTS if cut.name == layout.pcap(cut.parent, h).name), None)
    tables = f"decoded/{host}/ and {layout.MERGED}" if host else layout.MERGED
    now, then = cut.stat().st_size, rec.get(cut.name, "?")
    how = f"{now} < {then} bytes, the same first bytes" if then != now else \
        f"{now} bytes, fewer PDUs than its tables of an earlier analysis, the same first one"
    return (f"{cut} is shorter than when it was analysed ({how}: cut short): kept the "
            f"tables made from the longer file; remove {tables} to analyse it as it is now")


_said: set[str] = set()


def say_once(line: str) -> None:
    """A notice on stderr, once per process."""
    if line not in _said:
        _said.add(line)
        print(f"istrace: {line}", file=sys.stderr)


def said(line: str) -> bool:
    """Whether say_once said it already (a report's warnings are not said twice)."""
    return line in _said


def merge_state(d: Path) -> str | None:
    """Why d's merge must be made again (None: merged.parquet and what was made with it may
    be trusted): missing, unreadable, made from other inputs than the capture's."""
    merged = d / layout.MERGED
    if not merged.is_file():
        return "no merged.parquet"
    bad = unreadable(merged)
    if bad:
        return f"merged.parquet unreadable ({bad})"
    inputs = layout.capture_inputs(d)
    state, cut = judge(d / layout.MERGE_INPUTS, inputs)
    for p in cut:
        say_once(kept_note(p, d / layout.MERGE_INPUTS))
    if state in (SAME, CUT):
        return None
    if state == NONE and not layout.older_than(merged, *inputs) \
            and (d / layout.CLOCK).is_file() and not layout.older_than(d / layout.CLOCK, *inputs):
        return None  # an older istrace's merge, or a merge killed before its record
    return "merged.parquet older than the capture"


def unreadable(path: Path) -> str | None:
    """Why a Parquet file cannot be read (its footer: garbage or a cut file), or None.
    pyarrow imported here only: decoderun, which imports this module, stays light."""
    import pyarrow.parquet as pq

    try:
        pq.ParquetFile(path).metadata  # noqa: B018 - reading the footer is the check
    except (OSError, ValueError) as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None
