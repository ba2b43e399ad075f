"""Label columns (host, dir, conn, source, layer: a few values over millions of rows) compared
with a value without building their text: `col.astype(str) == v` on a per-packet table makes
millions of strings (seconds a full-rate capture); a categorical compares its codes."""

from __future__ import annotations

import pandas as pd


def is_(col: pd.Series, value: str) -> pd.Series:
    """col == value as plain booleans, missing values False, whatever the column's dtype."""
    out = col == value
    if out.dtype != bool:
        out = out.fillna(False).astype(bool)
    return out
