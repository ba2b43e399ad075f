"""A capture directory's probe events (docs/schema.md §1) as one table, both hosts."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
from istrace.capture import layout


def load_events(d: Path) -> pd.DataFrame | None:
    """All probe event files of a capture directory, as one table (None when there are none)."""
    frames = []
    for f in layout.events_files(d):
        try:
            df = (pd.read_json(f, lines=True) if f.suffix == ".jsonl" else pd.read_csv(f))
        except ValueError as exc:
            print(f"istrace: {f}: unreadable ({exc}); skipped", file=sys.stderr)
            continue
        if df.empty:
            continue
        if "host" not in df.columns:
            df["host"] = layout.events_host(f)
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else None
