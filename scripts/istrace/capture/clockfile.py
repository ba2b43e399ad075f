"""DIR/clock.json: the merge's estimate of the target's clock against the initiator's (offset
= target minus initiator, the half-width it is known to, how and from how many segments).
Its one writer, its one reader, and the estimate said in words (the merge's summary and the
report's page say it the same way)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from istrace.capture import layout
from istrace.capture.swapwrite import replace_text


def write(d: Path, doc: dict[str, Any]) -> None:
    """clock.json whole (a temporary file renamed into place: a merge killed mid-write leaves
    the previous one)."""
    replace_text(d / layout.CLOCK, json.dumps(doc, indent=2) + "\n")


def read(d: Path) -> dict[str, Any] | None:
    """clock.json, or None when there is none; ValueError when it is not a JSON object."""
    path = d / layout.CLOCK
    if not path.is_file():
        return None
    doc = json.loads(path.read_text())
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a JSON object")
    return doc


def describe(doc: dict[str, Any]) -> str:
    """The estimate in words: 'offset +1.5 us +- 0.5 us (target minus initiator; ...)'."""
    method = doc.get("method") or "?"
    off, bound = doc.get("offset_ns"), doc.get("bound_ns")
    if off is None:  # no segment seen at both ends (one pcap, or none in common)
        return f"offset unknown ({method}: no segment seen at both ends); target times not moved"
    if bound is None:  # segments in one direction only
        return (f"offset {int(off) / 1e3:+.1f} us, bounded on one side only ({method}; "
                f"{int(doc.get('samples') or 0)} segments)")
    return (f"offset {int(off) / 1e3:+.1f} us +- {int(bound) / 1e3:.1f} us (target minus "
            f"initiator; {method}; {int(doc.get('samples_i2t') or 0)} i2t + "
            f"{int(doc.get('samples_t2i') or 0)} t2i segments)")
