"""A segments file's rows labelled by their endpoint pairs (istrace.capture.endpoints) get
the labels decoded.conn_and_dir gives the whole table, in the same order: one connection,
connections told apart by ports or by addresses, a port on both sides (told by the SYN+ACK)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from istrace.capture import decoded
from istrace.capture.endpoints import LABELS, EndpointLabels

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


def _rows(ends: list[tuple[int, int, int, int, int]], n: int, seed: int
          ) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """n rows between `ends` in a random order (each at least once): the table, each row's
    endpoint pair (`ep`, numbered in order of first appearance) and the pairs as the decoder
    lists them (a pair's synack set when one of its rows is a SYN+ACK)."""
    rng = np.random.default_rng(seed)
    pick = np.concatenate([np.arange(len(ends)), rng.integers(0, len(ends), n - len(ends))])
    rng.shuffle(pick)
    rows = pd.DataFrame({c: np.array([e[k] for e in ends])[pick]
                         for k, c in enumerate(["src", "sport", "dst", "dport", "flags"])})
    order = list(dict.fromkeys(pick.tolist()))  # the pairs in order of first appearance
    pairs = np.zeros(len(order), decoded.SEG_ENDPOINT)
    for i, e in enumerate(order):
        src, sport, dst, dport, _ = ends[e]
        pairs[i] = (src, dst, sport, dport, int(((rows["flags"][pick == e] & SYNACK)
                                                 == SYNACK).any()), b"")
    ep = np.array([order.index(e) for e in pick.tolist()], np.int32)
    return rows, ep, pairs


@pytest.mark.parametrize("case", list(CASES))
def test_labels_are_the_whole_tables(case: str) -> None:
    rows, ep, pairs = _rows(CASES[case], 500, seed=len(case))
    table = rows.assign(**{c: pd.Categorical.from_codes(rows[c], ADDRS) for c in ("src", "dst")})
    whole = decoded.conn_and_dir(table, (3260,))
    ends = EndpointLabels(pairs, ADDRS, (3260,))
    for a, b in ((0, 500), (0, 1), (13, 200), (499, 500)):
        got = ends.codes({"ep": ep[a:b]}, LABELS, b - a)
        for c in LABELS:
            assert list(ends.labels[c]) == list(whole[c].cat.categories)
            assert got[c].tolist() == whole[c].cat.codes.to_numpy()[a:b].tolist(), c


def test_a_row_naming_no_pair_is_refused() -> None:
    _rows_, ep, pairs = _rows(CASES["ports apart"], 20, seed=3)
    ends = EndpointLabels(pairs, ADDRS, (3260,))
    with pytest.raises(decoded.DecodeError, match="endpoint pair"):
        ends.codes({"ep": np.append(ep, len(pairs))}, LABELS, len(ep) + 1)
