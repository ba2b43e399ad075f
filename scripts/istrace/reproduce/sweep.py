"""Sweep bookkeeping shared by every experiment: one CSV row per measured point, written and
flushed as soon as the point is done, so a run can be interrupted (Ctrl-C, crash) and resumed
without re-measuring what is already on disk; plus an integer golden-section search.
"""

from __future__ import annotations

import csv
import math
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

Row = dict[str, Any]


def _key_text(value: object) -> str:
    """Keys compare as text so values read back from the CSV match freshly built points."""
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        return text
    if number.is_integer():
        return str(int(number))
    return repr(number)


class SweepCSV:
    """An append-only CSV of points; `key` columns identify a point for resume."""

    def __init__(self, path: Path, columns: list[str], key: list[str]) -> None:
        missing = [k for k in key if k not in columns]
        if missing:
            raise ValueError(f"key columns {missing} are not in the CSV columns")
        self.path = path
        self.columns = columns
        self.key = key
        self.rows: list[Row] = []
        if path.exists() and path.stat().st_size > 0:
            self._load()

    def _load(self) -> None:
        with self.path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            if reader.fieldnames != self.columns:
                raise ValueError(f"{self.path}: columns differ from this experiment's; "
                                 "use another --out or remove the file")
            # A row cut short by a crash has missing fields: drop it, it is measured again.
            self.rows = [r for r in reader if None not in r.values() and None not in r]

    def point_key(self, point: Mapping[str, Any]) -> tuple[str, ...]:
        return tuple(_key_text(point.get(k, "")) for k in self.key)

    def find(self, point: Mapping[str, Any]) -> Row | None:
        want = self.point_key(point)
        for row in self.rows:
            if self.point_key(row) == want and row.get("status", "ok") == "ok":
                return row
        return None

    def append(self, row: Mapping[str, Any]) -> Row:
        clean: Row = {c: row.get(c, "") for c in self.columns}
        new_file = not self.path.exists() or self.path.stat().st_size == 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not new_file:
            self._repair_tail()
        with self.path.open("a", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=self.columns)
            if new_file:
                writer.writeheader()
            writer.writerow(clean)
            fh.flush()
        self.rows.append({k: _key_text(v) if v != "" else "" for k, v in clean.items()})
        return clean

    def _repair_tail(self) -> None:
        """A file killed mid-write may lack its last newline; start the next row on a new line."""
        with self.path.open("rb+") as fh:
            fh.seek(-1, 2)
            if fh.read(1) != b"\n":
                fh.write(b"\n")


@dataclass
class Progress:
    """One line per point on stderr: `[exp 3/12 0:41] series=... -> 12.3 MB/s`."""

    name: str
    total: int
    done: int = 0
    started: float = field(default_factory=time.monotonic)

    def line(self, text: str) -> None:
        self.done += 1
        secs = int(time.monotonic() - self.started)
        print(f"[{self.name} {self.done}/{self.total} {secs // 60}:{secs % 60:02d}] {text}",
              file=sys.stderr, flush=True)


def describe(point: Mapping[str, Any], keys: Iterable[str]) -> str:
    return " ".join(f"{k}={point[k]}" for k in keys if k in point)


def run_points(sweep: SweepCSV, points: list[Row], measure: Callable[[Row], Row],
               progress: Progress, summary: Callable[[Row], str]) -> list[Row]:
    """Measure every point not already in `sweep`; return all rows of these points in order.

    A failing point is recorded with status=error (and measured again on the next run); the
    sweep goes on. KeyboardInterrupt propagates after the finished rows are on disk.
    """
    out: list[Row] = []
    for point in points:
        have = sweep.find(point)
        if have is not None:
            progress.line(f"{describe(point, sweep.key)} (from CSV) -> {summary(have)}")
            out.append(have)
            continue
        try:
            result = {**point, **measure(point), "status": "ok"}
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - one bad point must not lose the sweep
            result = {**point, "status": "error", "error": str(exc)[:300]}
        row = sweep.append(result)
        text = summary(row) if row.get("status") == "ok" else f"ERROR {row.get('error')}"
        progress.line(f"{describe(point, sweep.key)} -> {text}")
        out.append(row)
    return out


def measured_rows(path: Path, **read_csv: Any) -> pd.DataFrame:
    """The rows of a sweep CSV that were measured (status ok): every experiment's loader
    starts from these."""
    df = pd.read_csv(path, **read_csv)
    return df[df["status"] == "ok"].copy()


def none_measured(name: str, df: pd.DataFrame) -> bool:
    """True (and says so) when an experiment has no measured point to draw."""
    if df.empty:
        print(f"{name}: no point measured")
    return df.empty


def num(row: Mapping[str, Any], col: str, default: float = math.nan) -> float:
    """A CSV cell as float (NaN when empty or not a number)."""
    try:
        return float(row[col])
    except (KeyError, TypeError, ValueError):
        return default


# --- integer golden-section search --------------------------------------------------------

INV_PHI = (math.sqrt(5.0) - 1.0) / 2.0  # 0.618...


@dataclass
class SearchResult:
    best: int
    value: float
    path: list[tuple[int, float]]  # every evaluation, in order (cached repeats not listed)


def golden_section_max(f: Callable[[int], float], lo: int, hi: int,
                       max_evals: int = 40) -> SearchResult:
    """Maximise `f` over the integers lo..hi (assumed unimodal) by golden-section search.

    Each x is evaluated at most once (measurements are expensive); the bracket shrinks by the
    golden ratio per step, so ~log_phi(hi - lo) + 3 evaluations suffice.
    """
    if lo > hi:
        raise ValueError("lo must be <= hi")
    cache: dict[int, float] = {}
    path: list[tuple[int, float]] = []

    def ev(x: int) -> float:
        if x not in cache:
            if len(cache) >= max_evals:
                raise _Budget
            cache[x] = float(f(x))
            path.append((x, cache[x]))
        return cache[x]

    a, b = lo, hi
    try:
        c = b - round((b - a) * INV_PHI)
        d = a + round((b - a) * INV_PHI)
        while b - a > 2:
            c = min(max(c, a + 1), b - 2)
            d = min(max(d, c + 1), b - 1)
            if ev(c) >= ev(d):
                b, d = d, c           # max is in [a, d]; old c is the new upper probe
                c = b - round((b - a) * INV_PHI)
            else:
                a, c = c, d           # max is in [c, b]; old d is the new lower probe
                d = a + round((b - a) * INV_PHI)
        for x in range(a, b + 1):
            ev(x)
    except _Budget:
        pass
    best = max(cache, key=lambda x: (cache[x], -x))
    return SearchResult(best=best, value=cache[best], path=path)


class _Budget(Exception):
    pass


def geometric_grid(lo: int, hi: int, steps_per_doubling: int = 2) -> list[int]:
    """Integers lo..hi spaced evenly in log scale (1, 2, 3, 4, 6, 8, 11, 16, 23, 32, ...)."""
    if lo < 1 or lo > hi:
        raise ValueError("need 1 <= lo <= hi")
    n = math.ceil(math.log2(hi / lo) * steps_per_doubling)
    grid = {min(hi, max(lo, round(lo * 2 ** (k / steps_per_doubling)))) for k in range(n + 1)}
    return sorted(grid | {lo, hi})


def golden_section_grid(f: Callable[[int], float], grid: list[int],
                        max_evals: int = 40) -> SearchResult:
    """Golden-section search over the sorted candidates `grid` (by index).

    Throughput against a count of parallel connections changes on a multiplicative scale
    (1 -> 2 sessions matters as much as 16 -> 32), so searching a geometric grid brackets the
    best count symmetrically; on a linear 1..32 range the first probes (13, 20) both sit past
    a peak at 4 and measurement noise can send the bracket the wrong way.
    """
    res = golden_section_max(lambda i: f(grid[i]), 0, len(grid) - 1, max_evals)
    return SearchResult(best=grid[res.best], value=res.value,
                        path=[(grid[i], v) for i, v in res.path])
