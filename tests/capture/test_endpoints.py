"""A segments file's rows labelled from its few distinct endpoints (istrace.capture.endpoints)
get the labels decoded.conn_and_dir gives the whole table, in the same order, whichever way a
label is looked up: one for all, by source port, by port pair, by addresses and ports."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from istrace.capture import decoded
from istrace.capture.endpoints import LABELS, walk

ADDRS = pd.Index(["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"], dtype=object)
SYNACK = decoded.TCP_SYN | decoded.TCP_ACK

# each case: (src, sport, dst, dport, flags) of the distinct endpoints
CASES = {
    "one connection": [(0, 40000, 1, 3260, 0), (1, 3260, 0, 40000, 0)],
    "ports apart": [(0, 40000, 1, 3260, 0), (1, 3260, 0, 40000, 0), (0, 40001, 1, 3260, 0),
                    (1, 3260, 0, 40001, 0)],
    "addresses apart": [(0, 40000, 1, 3260, 0), (1, 3260, 0, 40000, 0),
                        (2, 40000, 1, 3260, 0), (1, 3260, 2, 40000, 0)],
    # port 5000 sends i2t in one connection and t2i (it answered the SYN) in the other
    "a port both sides": [(0, 5000, 1, 3260, 0), (1, 3260, 0, 5000, 0),
                          (2, 6000, 3, 5000, 0), (3, 5000, 2, 6000, SYNACK)],
}


def _records(ends: list[tuple[int, int, int, int, int]], n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    pick = np.concatenate([np.arange(len(ends)), rng.integers(0, len(ends), n - len(ends))])
    rng.shuffle(pick)
    rec = np.zeros(n, decoded.SEG_FIELDS)
    for k, c in enumerate(["src", "sport", "dst", "dport", "flags"]):
        rec[c] = np.array([e[k] for e in ends])[pick]
    rec["ts_ns"] = np.arange(n)
    return rec


def _read(rec: np.ndarray):
    return lambda columns, a, b: {c: rec[c][a:b].astype(decoded.memory_type(c))
                                  for c in columns}


@pytest.mark.parametrize("case", list(CASES))
def test_labels_are_the_whole_tables(case: str) -> None:
    rec = _records(CASES[case], 500, seed=len(case))
    whole = decoded.conn_and_dir(pd.DataFrame(
        {c: pd.Categorical.from_codes(rec[c].astype(np.int64), ADDRS) if c in ("src", "dst")
         else rec[c].astype(decoded.memory_type(c)) for c in decoded.SEGMENT_COLUMNS}), (3260,))
    ends = walk(_read(rec), len(rec), ADDRS, (3260,), rows=7)
    for a, b in ((0, 500), (0, 1), (13, 200), (499, 500)):
        got = ends.codes(_read(rec)(ends.keys_for(LABELS), a, b), LABELS, b - a)
        for c in LABELS:
            assert list(ends.labels[c]) == list(whole[c].cat.categories)
            assert got[c].tolist() == whole[c].cat.codes.to_numpy()[a:b].tolist(), c
