"""32-bit TCP sequence numbers as 64-bit stream offsets: the one implementation every table
user (tracker, plots, merger) shares."""

from __future__ import annotations

import numpy as np

SPACE = 1 << 32
HALF = SPACE // 2


def rel(values: np.ndarray, base: int) -> np.ndarray:
    """Signed distance of each sequence number from `base`, in (-2 GiB, 2 GiB]: a value just
    before `base` (a SYN, an old ACK) stays negative."""
    return ((values.astype(np.int64) - base + HALF) % SPACE) - HALF


def unwrap(values: np.ndarray, base: int) -> np.ndarray:
    """Sequence numbers in time order -> int64 offsets from `base`, unwrapping once per 4 GiB
    (a step backwards by more than half the space is a wrap forwards, and vice versa)."""
    return Unwrapper(base)(values)


class Unwrapper:
    """`unwrap` for a sequence fed in pieces (slices of a table): each call continues from the
    last value of the one before, so any slicing gives the offsets of one call."""

    def __init__(self, base: int) -> None:
        self.base, self.wraps = base, 0
        self.last: int | None = None

    def __call__(self, values: np.ndarray) -> np.ndarray:
        if not len(values):
            return np.zeros(0, np.int64)
        r = rel(values, self.base)
        step = np.diff(r, prepend=r[:1] if self.last is None else [self.last])
        wraps = self.wraps + np.cumsum(np.where(step < -HALF, 1, 0) - np.where(step > HALF, 1, 0))
        self.last, self.wraps = int(r[-1]), int(wraps[-1])
        return r + wraps * SPACE
