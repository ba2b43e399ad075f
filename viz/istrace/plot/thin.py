"""Thinning a time series for a plot: past `max_points` rows, per time bin only the first, the
lowest and the highest row (and rows asked to be kept), so a figure of millions of samples
draws a few thousand and looks the same at its resolution.

`Thinner` takes the rows a chunk at a time, holding a few values per bin: a pass over a
table of any length keeps what the whole table thinned at once would (`thin`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

_Cols = dict[str, np.ndarray]


class Thinner:
    """thin() over rows fed in table order, a chunk at a time. The row count and the time
    range must be known before (a first pass): the bins are fixed by them."""

    def __init__(self, rows: int, t_min: int, t_max: int, max_points: int) -> None:
        self.everything = rows <= max_points
        self.nb = max(max_points // 3, 1)
        self.t_min, self.span = int(t_min), max(int(t_max) - int(t_min), 1)
        nb = self.nb
        self.at = 0  # rows fed so far: the position of the next chunk's first row
        # per bin: the row positions of its first, lowest and highest row (-1: none yet)
        self.first = np.full(nb, -1, np.int64)
        self.lo = np.full(nb, -1, np.int64)
        self.hi = np.full(nb, -1, np.int64)
        self.lo_v = np.full(nb, np.inf)
        self.hi_v = np.full(nb, -np.inf)
        self.values: dict[str, _Cols] = {}  # "first"/"lo"/"hi" -> column -> value per bin
        self.taken: list[tuple[np.ndarray, _Cols]] = []  # kept rows: positions, values

    def feed(self, cols: _Cols, t: str, v: str, keep: np.ndarray | None = None) -> None:
        """The next rows: `cols` the columns to give back (time column `t`, value `v`), `keep`
        a mask of rows kept whatever their bin."""
        n = len(cols[t])
        pos = self.at + np.arange(n, dtype=np.int64)
        self.at += n
        if not n:
            return
        if self.everything:
            self.taken.append((pos, cols))
            return
        if not self.values:
            self.values = {k: {c: np.zeros(self.nb, a.dtype) for c, a in cols.items()}
                           for k in ("first", "lo", "hi")}
        tt = cols[t].astype(np.int64)
        b = ((tt - self.t_min) * self.nb // self.span).clip(max=self.nb - 1)
        val = cols[v].astype(np.float64)
        ub, at = np.unique(b, return_index=True)  # each bin's first row in this chunk
        new = self.first[ub] < 0
        self._set("first", self.first, ub[new], at[new], pos, cols)
        idx = np.arange(n)
        for kind, sign in (("lo", 1.0), ("hi", -1.0)):
            # each bin's lowest (highest) value, the first row holding it
            order = np.lexsort((idx, sign * val, b))
            starts = np.flatnonzero(np.diff(b[order], prepend=-1) != 0)
            rows, bins = order[starts], b[order[starts]]
            best_v = self.lo_v if kind == "lo" else self.hi_v
            better = sign * val[rows] < sign * best_v[bins]  # ties: the earlier chunk's row
            best_v[bins[better]] = val[rows[better]]
            self._set(kind, self.lo if kind == "lo" else self.hi, bins[better], rows[better],
                      pos, cols)
        if keep is not None and keep.any():
            self.taken.append((pos[keep], {c: a[keep] for c, a in cols.items()}))

    def _set(self, kind: str, where: np.ndarray, bins: np.ndarray, rows: np.ndarray,
             pos: np.ndarray, cols: _Cols) -> None:
        where[bins] = pos[rows]
        for c, a in cols.items():
            self.values[kind][c][bins] = a[rows]

    def _parts(self) -> list[tuple[np.ndarray, _Cols]]:
        parts = list(self.taken)
        for kind, where in (("first", self.first), ("lo", self.lo), ("hi", self.hi)):
            ok = where >= 0
            if ok.any():
                parts.append((where[ok], {c: a[ok] for c, a in self.values[kind].items()}))
        return parts

    def positions(self) -> np.ndarray:
        """The table positions of the rows kept, ascending."""
        parts = self._parts()
        return np.unique(np.concatenate([p for p, _ in parts])) if parts else \
            np.zeros(0, np.int64)

    def frame(self, columns: list[str]) -> pd.DataFrame:
        """The rows kept, in table order, as a table of `columns`."""
        parts = self._parts()
        if not parts:
            return pd.DataFrame(columns=columns)
        pos = np.concatenate([p for p, _ in parts])
        _, first = np.unique(pos, return_index=True)  # each row once, in table order
        return pd.DataFrame({c: np.concatenate([v[c] for _, v in parts])[first]
                             for c in columns})


def thin(df: pd.DataFrame, tcol: str, vcol: str, max_points: int,
         keep: np.ndarray | None = None) -> pd.DataFrame:
    """Keep at most ~max_points rows: per time bin the first, min and max rows (+ `keep` rows)."""
    if len(df) <= max_points:
        return df.reset_index(drop=True)
    t = df[tcol].to_numpy(np.int64)
    th = Thinner(len(df), int(t.min()), int(t.max()), max_points)
    th.feed({tcol: t, vcol: df[vcol].to_numpy()}, tcol, vcol, keep)
    return df.iloc[th.positions()].reset_index(drop=True)
