"""What the analysis steps write into a capture directory (names from istrace.capture.layout)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from istrace.capture import layout
from istrace.capture.swapwrite import replace_text, replacing
from istrace.capture.tracksamples import FileSamples, SamplesLike, as_samples, write_samples
from istrace.capture.tracktables import (
    EVENT_COLUMNS,
    STATE_COLUMNS,
    TrackTable,
    as_table,
    write_table,
)


def write_track_tables(samples: SamplesLike, states: pd.DataFrame | TrackTable,
                       events: pd.DataFrame | TrackTable, out: Path) -> list[Path]:
    """The tracker's three tables (layout.track_files) beside each other: Parquet (a sample
    per packet makes millions of rows: 2.4 s of CSV for the 2 M of a 10 s full-rate
    capture), CSV when `out` ends in .csv. Tables already written where they go (the
    tracker's writers) stay as they are."""
    out.parent.mkdir(parents=True, exist_ok=True)
    paths = list(layout.track_files(out))
    s = as_samples(samples)
    if paths[0].suffix == ".csv":
        _write_csv(s.frame(), paths[0])
    elif not (isinstance(s, FileSamples) and s.path.resolve() == paths[0].resolve()):
        write_samples(s, paths[0])
    for table, columns, path in ((states, STATE_COLUMNS, paths[1]),
                                 (events, EVENT_COLUMNS, paths[2])):
        if path.suffix == ".csv":
            _write_csv(as_table(table, columns).frame(), path)
        else:
            write_table(table, path, columns)
    return paths


def _write_csv(df: pd.DataFrame, path: Path) -> None:
    """Arrow's CSV writer (a sample per packet makes millions of rows: ten times faster than
    pandas'); pandas' for a column Arrow cannot type."""
    with replacing(path) as tmp:
        try:
            table = pa.Table.from_pandas(df, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            df.to_csv(tmp, index=False)
            return
        pacsv.write_csv(table, tmp, pacsv.WriteOptions(quoting_style="needed"))


def _json_safe(x: Any) -> Any:
    """NaN and infinities become null, numpy scalars plain numbers."""
    if isinstance(x, dict):
        return {str(k): _json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_json_safe(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def write_verdict(verdict: dict[str, Any], d: Path) -> Path:
    """verdict.json (docs/schema.md §8) beside report.html, read back with read_verdict; and
    its shares as verdict.parquet (verdict_rows), for queries across captures."""
    p = d / layout.VERDICT
    with replacing(d / layout.VERDICT_TABLE) as tmp:
        pq.write_table(pa.Table.from_pandas(verdict_rows(verdict), preserve_index=False), tmp)
    replace_text(p, json.dumps(_json_safe(verdict), indent=1) + "\n")
    return p


def verdict_rows(verdict: dict[str, Any]) -> pd.DataFrame:
    """A row per cause with a share: cause, share, primary (the verdict's first cause),
    unsure (the verdict said it was), and the evidence's direction, sender and throughput."""
    ev = verdict.get("evidence") or {}
    prim = (verdict.get("primary") or {}).get("cause")
    shares = verdict.get("shares") or {}
    return pd.DataFrame({
        "cause": pd.Series(list(shares), dtype=object),
        "share": pd.Series([float(v) for v in shares.values()], dtype="float64"),
        "primary": pd.Series([c == prim for c in shares], dtype=bool),
        "unsure": bool(verdict.get("unsure")),
        "direction": ev.get("direction"), "sender": ev.get("sender"),
        "throughput_MBps": pd.Series([ev.get("throughput_MBps")] * len(shares),
                                     dtype="float64")})


def read_verdict(d: Path) -> dict[str, Any]:
    """A capture directory's verdict.json (after `istrace report`)."""
    return json.loads((d / layout.VERDICT).read_text())
