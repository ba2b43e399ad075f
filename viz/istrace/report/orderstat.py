"""Exact quantiles of a column read a chunk at a time (the tracker's samples: millions of
values never held at once).

The k-th smallest value is found by its bits: each float's 64-bit pattern, turned so that
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


def quantile(chunks: Chunks, q: float, n: int | None = None) -> float:
    """numpy.quantile(all values, q) (its default, linear interpolation); NaN when there are
    no values. `n`: the number of values when known (else a pass counts them)."""
    if n is None:
        n = count_range(chunks)[0]
    if not n:
        return float("nan")
    h = (n - 1) * q
    lo = int(np.floor(h))
    a = kth(chunks, lo)
    t = h - lo
    if t == 0 or lo + 1 >= n:
        return a
    b = kth(chunks, lo + 1)
    d = b - a
    # numpy's lerp: from the nearer end, so that t = 1 gives b exactly
    return a + d * t if t < 0.5 else b - d * (1 - t)


def median(chunks: Chunks, n: int | None = None) -> float:
    """numpy.median(all values): the middle one, or the mean of the middle two."""
    if n is None:
        n = count_range(chunks)[0]
    if not n:
        return float("nan")
    if n % 2:
        return kth(chunks, n // 2)
    return float(np.mean([kth(chunks, n // 2 - 1), kth(chunks, n // 2)]))
