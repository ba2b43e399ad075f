"""Each segment's connection and direction in a segments.bin, told by its endpoints.

A capture's millions of segments are between a handful of distinct (src, dst, sport, dport):
`EndpointLabels` holds those, each one's labels (decoded.endpoint_sides, the rule of
decoded.conn_and_dir) and is asked for the codes of a slice of rows where it is read, so
nothing is held per row (istrace.capture.segsource).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from istrace.capture import decoded

# the label columns a segments' read() gives as codes (istrace.capture.segsource)
LABELS = ("conn", "dir")
_WALK_COLUMNS = ["src", "dst", "sport", "dport", "flags"]


def _pack(src: np.ndarray, dst: np.ndarray, sport: np.ndarray, dport: np.ndarray,
          n_addrs: int) -> np.ndarray:
    """One int64 per (src, dst, sport, dport): address indexes and ports side by side."""
    pair = src.astype(np.int64) * max(n_addrs, 1) + dst
    return (pair << 32) | (sport.astype(np.int64) | (dport.astype(np.int64) << 16))


def _member(x: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    """Which of `x` are in `sorted_keys`."""
    if not len(sorted_keys):
        return np.zeros(len(x), bool)
    at = np.minimum(np.searchsorted(sorted_keys, x), len(sorted_keys) - 1)
    return sorted_keys[at] == x


class EndpointLabels:
    """The distinct endpoints of a segments file and each one's code per label column.
    `first`: (src, sport, dst, dport) of each, in order of first appearance (the codes are
    numbered in that order, as pd.factorize of the rows' labels would); `servers`: the
    (address, port) that sent a SYN+ACK; addresses as the file's indexes into `addrs`."""

    def __init__(self, first: list[tuple[int, int, int, int]], servers: set[tuple[int, int]],
                 addrs: pd.Index, target_ports: tuple[int, ...]) -> None:
        name = [str(a) for a in addrs]
        sides = decoded.endpoint_sides(
            [name[s] for s, _, _, _ in first], [p for _, p, _, _ in first],
            [name[d] for _, _, d, _ in first], [p for _, _, _, p in first],
            {(name[s], p) for s, p in servers}, target_ports)
        self.labels: dict[str, pd.Index] = {}
        codes: dict[str, np.ndarray] = {}
        for col, labels in zip(LABELS, sides, strict=True):
            c, u = pd.factorize(pd.Series(labels, dtype=object))
            codes[col], self.labels[col] = c.astype(np.int32), pd.Index(u, dtype=object)
        # a column of one label (the connection, in a capture of one) needs no look-up; one
        # told by the source port (the direction: the target's port or another) is looked up
        # by that one field of a record
        self._same = {c: int(v[0]) if len(v) and (v == v[0]).all() else None
                      for c, v in codes.items()}
        self._by_sport = {c: _by_port([sp for _, sp, _, _ in first], v)
                          if self._same[c] is None else None for c, v in codes.items()}
        # else by the port pair, when no two endpoints share one; else the addresses too
        self._n_addrs = len(addrs)
        ports = _ports(np.array([p for _, p, _, _ in first]), np.array([p for *_, p in first]))
        self._by_ports = len(np.unique(ports)) == len(ports)
        keys = ports if self._by_ports else _pack(*(np.array(v, np.int64) for v in (
            [s for s, _, _, _ in first], [d for _, _, d, _ in first],
            [p for _, p, _, _ in first], [p for _, _, _, p in first])), self._n_addrs)
        order = np.argsort(keys, kind="stable")
        self._keys = keys[order]
        self._codes = {c: v[order] for c, v in codes.items()}

    def keys_for(self, columns: Sequence[str]) -> list[str]:
        """The stored columns `codes` reads to tell `columns`."""
        need: list[str] = []
        for c in columns:
            if self._same[c] is not None:
                continue
            if self._by_sport[c] is not None:
                need.append("sport")
            else:
                need += ["sport", "dport"] + ([] if self._by_ports else ["src", "dst"])
        return list(dict.fromkeys(need))

    def codes(self, cols: dict[str, np.ndarray], columns: Sequence[str], n: int
              ) -> dict[str, np.ndarray]:
        """Each of `columns`' codes for `n` rows whose keys_for columns are `cols` (each
        row's endpoints are in this table: it was made from every row)."""
        at = None
        out = {}
        for c in columns:
            same, by_sport = self._same[c], self._by_sport[c]
            if same is not None:
                out[c] = np.full(n, same, np.int32)
            elif by_sport is not None:
                out[c] = np.take(by_sport, cols["sport"])
            else:
                if at is None:
                    at = np.searchsorted(self._keys, self._key(cols))
                out[c] = self._codes[c][at]
        return out

    def _key(self, cols: dict[str, np.ndarray]) -> np.ndarray:
        if self._by_ports:
            return _ports(cols["sport"], cols["dport"])
        return _pack(cols["src"], cols["dst"], cols["sport"], cols["dport"], self._n_addrs)


def _ports(sport: np.ndarray, dport: np.ndarray) -> np.ndarray:
    """One int64 per (sport, dport)."""
    return sport.astype(np.int64) | (dport.astype(np.int64) << 16)


def _by_port(ports: list[int], codes: np.ndarray) -> np.ndarray | None:
    """Each port's code (-1: none), when no port has two."""
    table = np.full(1 << 16, -1, np.int32)
    for p, c in zip(ports, codes.tolist(), strict=True):
        if table[p] not in (-1, c):
            return None
        table[p] = c
    return table


def walk(read: Callable[[list[str], int, int], dict[str, np.ndarray]], n: int,
         addrs: pd.Index, target_ports: tuple[int, ...], rows: int = 1 << 18
         ) -> EndpointLabels:
    """The EndpointLabels of `n` segments that `read(columns, a, b)` hands out (stored
    columns only), from one walk over their addresses, ports and flags `rows` at a time."""
    seen = np.zeros(0, np.int64)  # packed, sorted
    first: list[tuple[int, int, int, int]] = []
    servers: set[tuple[int, int]] = set()
    synack = decoded.TCP_SYN | decoded.TCP_ACK
    for a in range(0, n, rows):
        c = read(_WALK_COLUMNS, a, a + rows)
        packed = _pack(c["src"], c["dst"], c["sport"], c["dport"], len(addrs))
        new = np.flatnonzero(~_member(packed, seen))
        if len(new):
            uniq, at = np.unique(packed[new], return_index=True)
            first += [(int(c["src"][i]), int(c["sport"][i]), int(c["dst"][i]),
                       int(c["dport"][i])) for i in new[np.sort(at)]]  # in order of appearance
            seen = np.union1d(seen, uniq)
        sa = (c["flags"] & synack) == synack
        servers.update(zip(c["src"][sa].tolist(), c["sport"][sa].tolist(), strict=True))
    return EndpointLabels(first, servers, addrs, target_ports)
