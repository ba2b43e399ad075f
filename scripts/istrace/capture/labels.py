"""Label columns (host, dir, conn, source, layer: a few values over millions of rows) compared
with a value without building their text: `col.astype(str) == v` on a per-packet table makes
millions of strings (seconds a full-rate capture); a categorical compares its codes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals


def is_(col: pd.Series, value: str) -> pd.Series:
    """col == value as plain booleans, missing values False, whatever the column's dtype."""
    out = col == value
    if out.dtype != bool:
        out = out.fillna(False).astype(bool)
    return out


def label_codes(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(integer codes, distinct labels) of a label column (-1: missing); categoricals cost
    nothing."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.cat.codes.to_numpy(), np.asarray(col.cat.categories, dtype=object)
    codes, labels = pd.factorize(col.to_numpy(dtype=object), use_na_sentinel=True)
    return codes, np.asarray(labels, dtype=object)



def object_labels(values: Any) -> pd.Categorical:
    """Labels (text, missing allowed; a categorical keeps its codes) as a categorical whose
    categories are plain Python objects: union_categoricals joins only categoricals whose
    categories are of one kind, and pandas infers its text type for some and not others."""
    cat = pd.Categorical(values)
    return pd.Categorical.from_codes(cat.codes, pd.Index(np.asarray(cat.categories, object),
                                                         dtype=object))


def coded_labels(codes: np.ndarray, names: Sequence[str]) -> pd.Categorical:
    """Codes into `names` as object_labels(names[codes]) gives them (the names used, sorted,
    plain objects), without a Python object per row: a lossy minute's hundred thousand
    tracker events as a text array each were two copies more of the column at its peak."""
    used = used_labels(np.asarray(codes), pd.Index(list(names), dtype=object))
    return used.reorder_categories(pd.Index(sorted(used.categories), dtype=object))


def used_labels(codes: np.ndarray, labels: pd.Index) -> pd.Categorical:
    """Codes into `labels` (-1: missing) as a categorical of the labels they use, in their
    order: Categorical.from_codes(codes, labels).remove_unused_categories(), found by a count
    of the codes where that sorts them (a full-rate capture's slices of segments: a second
    of the merge's CPU)."""
    codes = np.asarray(codes)
    present = np.flatnonzero(np.bincount(codes[codes >= 0], minlength=len(labels)))
    renumber = np.full(len(labels) + 1, -1, np.int64)  # the extra last slot: code -1 stays -1
    renumber[present] = np.arange(len(present))
    return pd.Categorical.from_codes(renumber[codes], labels[present])


def concat_labelled(frames: list[pd.DataFrame], columns: Sequence[str]) -> pd.DataFrame:
    """Tables of `columns` one after the other, label columns kept categorical (pd.concat makes
    text of categoricals whose labels differ: the per-connection ones always do). A column at a
    time, each taken out of its frames as it is joined: millions of rows are never held twice
    over, only one column of them (the frames are used up)."""
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame(columns=list(columns))
    if len(frames) == 1:  # the usual case (one connection, one direction): no copy
        return frames[0][list(columns)].reset_index(drop=True)
    out: dict[str, pd.Categorical | pd.Series] = {}
    for c in columns:
        parts = [f.pop(c) for f in frames]
        if all(isinstance(p.dtype, pd.CategoricalDtype) for p in parts):
            out[c] = union_categoricals([pd.Categorical.from_codes(
                p.cat.codes, p.cat.categories.astype(object)) for p in parts])
        else:
            out[c] = pd.concat(parts, ignore_index=True)
        del parts
    return pd.DataFrame(out, columns=list(columns), copy=False)
