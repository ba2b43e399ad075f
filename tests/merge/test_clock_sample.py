"""The clock's sample of a long capture (istrace.merge.segment_pass): the same segments at
both ends, and about CLOCK_KEYS of them whatever the capture's length, so the merge's memory
does not grow with it."""

from __future__ import annotations

import numpy as np
import pandas as pd
from istrace.merge import segment_pass


def _segments(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "conn": pd.Categorical(rng.choice(["10.0.0.1:40000-10.0.0.2:3260",
                                           "10.0.0.1:40001-10.0.0.2:3260"], n)),
        "dir": pd.Categorical(rng.choice(["i2t", "t2i"], n, p=[0.1, 0.9])),
        "seq": rng.integers(0, 1 << 32, n), "ack": rng.integers(0, 1 << 32, n),
        "len": rng.choice([0, 1448, 65160], n).astype(np.int32),
        "flags": np.full(n, 0x10, np.int16), "win": rng.integers(0, 1 << 16, n).astype(np.int32),
    })


def _sampled(segs: pd.DataFrame, bound: int | None) -> pd.DataFrame:
    keep = np.ones(len(segs), bool) if bound is None else \
        segment_pass.key_hash(segs) < np.uint64(bound)
    return segs[keep]


def test_both_ends_sample_the_same_segments() -> None:
    ini = _segments(50_000, 1)
    # the other end: the same segments in another order, its labels numbered otherwise
    tgt = ini.sample(frac=1.0, random_state=2).reset_index(drop=True)
    tgt["dir"] = tgt["dir"].cat.reorder_categories(["t2i", "i2t"])
    bound = (5_000 << 64) // len(ini)
    a, b = _sampled(ini, bound), _sampled(tgt, bound)
    key = ["seq", "ack", "len", "win"]
    assert 4_000 < len(a) < 6_000
    assert sorted(map(tuple, a[key].to_numpy())) == sorted(map(tuple, b[key].to_numpy()))


def test_the_sample_is_about_clock_keys_whatever_the_length(monkeypatch) -> None:
    monkeypatch.setattr(segment_pass, "CLOCK_KEYS", 10_000)
    assert segment_pass.bound_for(9_000) is None  # a short capture: every segment
    sizes = []
    for n in (25_000, 100_000, 400_000):
        segs = _segments(n, n)
        sizes.append(len(_sampled(segs, segment_pass.bound_for(n))))
    # one key in ceil(n / 10 000) made these 8 300, 10 000 and 10 000 (and 5 000 of 10 001
    # segments): a fixed share of the hash range leaves 10 000 +- 3% of any number
    assert all(9_400 < k < 10_600 for k in sizes), sizes
