"""What the analysis steps write into a capture directory (names from istrace.capture.layout)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from istrace.capture import layout


def write_track_tables(samples: pd.DataFrame, states: pd.DataFrame, events: pd.DataFrame,
                       out: Path) -> list[Path]:
    """The tracker's three tables (layout.track_files) beside each other."""
    out.parent.mkdir(parents=True, exist_ok=True)
    paths = list(layout.track_files(out))
    for table, path in zip((samples, states, events), paths, strict=True):
        table.to_csv(path, index=False)
    return paths
