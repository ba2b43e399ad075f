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
    r = rel(values, base)
    step = np.diff(r, prepend=r[:1])
    wraps = np.cumsum(np.where(step < -HALF, 1, 0) - np.where(step > HALF, 1, 0))
    return r + wraps * SPACE
