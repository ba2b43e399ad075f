"""Each segment's connection and direction in a segments.bin, told by its endpoint pair.

A capture's millions of segments are between a handful of distinct (src, dst, sport, dport):
the decoder lists them in segments.bin, in order of first appearance, with whether each sent
a SYN+ACK, and numbers each row's (its `ep` column). `EndpointLabels` holds each pair's labels
(decoded.endpoint_sides, the rule of decoded.conn_and_dir) and is asked for the codes of a
slice of rows where it is read, so nothing is held per row (istrace.capture.segsource).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from istrace.capture import decoded

# the label columns a segments' read() gives as codes (istrace.capture.segsource)
LABELS = ("conn", "dir")


class EndpointLabels:
    """The labels of a segments file's endpoint pairs (rows of decoded.SEG_ENDPOINT, in the
    file's order) and each pair's code per label column, numbered in order of first
    appearance (as pd.factorize of the rows' labels would); addresses as the file's indexes
    into `addrs`."""

    def __init__(self, pairs: np.ndarray, addrs: pd.Index,
                 target_ports: tuple[int, ...]) -> None:
        name = [str(a) for a in addrs]
        src, dst = pairs["src"].tolist(), pairs["dst"].tolist()
        sport, dport = pairs["sport"].tolist(), pairs["dport"].tolist()
        servers = {(name[s], p) for s, p, a in zip(src, sport, pairs["synack"].tolist(),
                                                   strict=True) if a}
        sides = decoded.endpoint_sides([name[s] for s in src], sport, [name[d] for d in dst],
                                       dport, servers, target_ports)
        self.labels: dict[str, pd.Index] = {}
        self._codes: dict[str, np.ndarray] = {}
        for col, labels in zip(LABELS, sides, strict=True):
            c, u = pd.factorize(pd.Series(labels, dtype=object))
            self._codes[col], self.labels[col] = c.astype(np.int32), pd.Index(u, dtype=object)
        # a column of one label (the connection, in a capture of one) needs no look-up
        self._same = {c: int(v[0]) if len(v) and (v == v[0]).all() else None
                      for c, v in self._codes.items()}

    def keys_for(self, columns: Sequence[str]) -> list[str]:
        """The stored columns `codes` reads to tell `columns`."""
        return ["ep"] if any(self._same[c] is None for c in columns) else []

    def codes(self, cols: dict[str, np.ndarray], columns: Sequence[str], n: int
              ) -> dict[str, np.ndarray]:
        """Each of `columns`' codes for `n` rows whose keys_for columns are `cols`."""
        out = {}
        for c in columns:
            same = self._same[c]
            if same is not None:
                out[c] = np.full(n, same, np.int32)
                continue
            ep = cols["ep"]
            if len(ep) and (int(ep.max()) >= len(self._codes[c]) or int(ep.min()) < 0):
                raise decoded.DecodeError("a segments table row names an endpoint pair its "
                                          "list does not hold", 2)
            out[c] = self._codes[c][ep]
        return out
