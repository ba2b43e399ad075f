"""Exact quantiles of a column read a chunk at a time (the tracker's samples: millions of
values never held at once).

Few distinct values (a window, bytes in flight in whole segments) are counted in one pass.
Otherwise the k-th smallest value is found by its bits: each float's 64-bit pattern, turned so that
the patterns sort as the numbers do, is narrowed 16 bits a pass (a count per 16-bit prefix)
until few enough values share the prefix to be gathered. A few passes over the column, memory
of one chunk and 65536 counts; the result is the value itself, bit for bit, and a quantile is
interpolated between two of them as numpy's default ("linear") does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

Chunks = Callable[[], Iterable[np.ndarray]]  # a fresh pass over the values, NaN-free

_STEP = 16
_SIGN = np.uint64(1 << 63)
# values sharing a prefix gathered and partitioned once this few are left
_GATHER = 1 << 20


def _keys(v: np.ndarray) -> np.ndarray:
    """Bit patterns that sort as the floats do (negatives flipped, positives signed up)."""
    u = np.ascontiguousarray(v, np.float64).view(np.uint64)
    return np.where((u & _SIGN) != 0, ~u, u | _SIGN)


def _value(key: np.uint64) -> float:
    k = np.uint64(key)
    u = k & ~_SIGN if k & _SIGN else ~k
    return float(np.array([u], np.uint64).view(np.float64)[0])


def count_range(chunks: Chunks) -> tuple[int, float, float]:
    """(values, smallest, largest); NaN for both when there are none."""
    n, lo, hi = 0, np.inf, -np.inf
    for v in chunks():
        if len(v):
            n += len(v)
            lo, hi = min(lo, float(v.min())), max(hi, float(v.max()))
    return (n, lo, hi) if n else (0, float("nan"), float("nan"))


def kth(chunks: Chunks, k: int) -> float:
    """The k-th smallest value (0-based) of all the chunks."""
    prefix, shift, rank = np.uint64(0), 64, k
    while shift > 0:
        high = shift
        shift -= _STEP
        counts = np.zeros(1 << _STEP, np.int64)
        for v in chunks():
            key = _keys(v)
            if high < 64:
                key = key[(key >> np.uint64(high)) == prefix]
            digit = ((key >> np.uint64(shift)) & np.uint64((1 << _STEP) - 1)).astype(np.intp)
            counts += np.bincount(digit, minlength=1 << _STEP)
        cum = np.cumsum(counts)
        if rank >= int(cum[-1]):
            raise IndexError(f"rank {k} of {int(cum[-1])} values")
        j = int(np.searchsorted(cum, rank, side="right"))
        rank -= int(cum[j - 1]) if j else 0
        prefix = (prefix << np.uint64(_STEP)) | np.uint64(j)
        if shift and counts[j] <= _GATHER:
            got = [k_[(k_ >> np.uint64(shift)) == prefix]
                   for k_ in (_keys(v) for v in chunks())]
            keys = np.concatenate(got)
            return _value(np.partition(keys, rank)[rank])
    return _value(prefix)


# distinct values counted in one pass (a window or a count of segments in flight takes a
# few thousand values over millions of samples) up to this many, else narrowed by bits
_DISTINCT = 1 << 16


def _distinct(chunks: Chunks) -> tuple[np.ndarray, np.ndarray] | None:
    """(sorted distinct values, their counts), or None past _DISTINCT of them."""
    vals, counts = np.zeros(0), np.zeros(0, np.int64)
    for v in chunks():
        if not len(v):
            continue
        u, c = np.unique(v, return_counts=True)
        vals, at = np.unique(np.concatenate([vals, u]), return_inverse=True)
        counts = np.bincount(at, weights=np.concatenate([counts, c]),
                             minlength=len(vals)).astype(np.int64)
        if len(vals) > _DISTINCT:
            return None
    return vals, counts


def _order_stats(chunks: Chunks, n: int | None,
                 ranks_of: Callable[[int], list[int]]) -> tuple[int, list[float]]:
    """(values, the values at the ranks `ranks_of(values)` asks for)."""
    got = _distinct(chunks)
    if got is not None:
        vals, counts = got
        n = int(counts.sum())
        ends = np.cumsum(counts)
        return n, [float(vals[np.searchsorted(ends, r, side="right")]) for r in ranks_of(n)]
    if n is None:
        n = count_range(chunks)[0]
    return n, [kth(chunks, r) for r in ranks_of(n)]


def quantile(chunks: Chunks, q: float, n: int | None = None) -> float:
    """numpy.quantile(all values, q) (its default, linear interpolation); NaN when there are
    no values. `n`: the number of values when known (else a pass counts them)."""
    def ranks(m: int) -> list[int]:
        if not m:
            return []
        lo = int(np.floor((m - 1) * q))
        return [lo] + ([lo + 1] if lo + 1 < m else [])
    n, got = _order_stats(chunks, n, ranks)
    if not n:
        return float("nan")
    h = (n - 1) * q
    t = h - np.floor(h)
    if t == 0 or len(got) == 1:
        return got[0]
    a, b = got
    d = b - a
    # numpy's lerp: from the nearer end, so that t = 1 gives b exactly
    return a + d * t if t < 0.5 else b - d * (1 - t)


def median(chunks: Chunks, n: int | None = None) -> float:
    """numpy.median(all values): the middle one, or the mean of the middle two."""
    n, got = _order_stats(chunks, n, lambda m: [] if not m else (
        [m // 2] if m % 2 else [m // 2 - 1, m // 2]))
    if not n:
        return float("nan")
    return got[0] if len(got) == 1 else float(np.mean(got))
