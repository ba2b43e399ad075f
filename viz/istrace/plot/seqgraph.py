"""The data of the tcptrace-style sequence graph: one connection's data segments (start and
end byte, retransmission or not) and the ACKs coming back (acknowledged byte, window edge),
thinned for the figure. Read from the segments table a chunk of rows at a time: what is held
is the thinned points, not a copy of a full-rate capture's millions of segments."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd
from istrace.capture import tcpseq
from istrace.capture.segsource import Segments, SegmentsLike, as_segments
from istrace.capture.slices import SLICE_ROWS
from istrace.plot.data import busiest_conn
from istrace.plot.thin import Thinner

TCP_SYN, TCP_ACK = 0x02, 0x10
SEG_COLUMNS = ["t_ns", "start", "end", "rtx"]
_COLUMNS = ("ts_ns", "seq", "len", "ack", "win", "flags", "wscale")  # what a chunk reads
ACK_COLUMNS = ["t_ns", "ack", "win_edge"]
# Past max_points, a retransmission is kept when it is the first in its cell of a grid this
# many cells wide and high over the graph (finer than its pixels): a lossy minute's 96 000
# drawn one by one were most of the figure's memory, and they cover the same pixels.
RTX_CELLS = 2048


def seq_graph(segs: SegmentsLike | None, d: str = "t2i", max_points: int = 20000,
              conn: str | None = None, rows: int = SLICE_ROWS) -> dict[str, pd.DataFrame]:
    """tcptrace-style data of one connection (`conn`, else the busiest in `d`): segments
    (t_ns, start, end, rtx), acks (t_ns, ack, win_edge), in table order.

    Sequence numbers are relative to the first data byte (each connection has its own: two
    in one graph would mix their numbering). Past `max_points` segments, data are thinned to
    per-time-bin extremes so a plot stays fast, and retransmissions to the first in each cell
    of a RTX_CELLS grid; the segments' attrs["retransmissions"] counts them all.
    """
    empty = {"segments": pd.DataFrame(columns=SEG_COLUMNS),
             "acks": pd.DataFrame(columns=ACK_COLUMNS)}
    segs = as_segments(segs)
    if segs is None or segs.empty:
        return empty
    conn = conn if conn is not None else busiest_conn(segs, d)
    if conn is None:
        return empty
    rev = "i2t" if d == "t2i" else "t2i"
    g = _Graph(segs, conn, d, rev, rows)
    base = g.first_data_seq()
    if base is None:
        return empty
    # first pass: how many points of each kind and their time range (the thinning's bins),
    # and the window scale each end's SYN announced; second: the points themselves
    n_seg = n_ack = 0
    t_seg, t_ack = [np.iinfo(np.int64).max, 0], [np.iinfo(np.int64).max, 0]
    ws: dict[str, int | None] = {d: None, rev: None}
    unwrap_ack, unwrap_top = tcpseq.Unwrapper(base), tcpseq.Unwrapper(base)
    seq_top = 1  # the highest end byte sent: the retransmissions' grid
    for c, data, ack, syn in g.chunks():
        t = c["ts_ns"]
        if data.any():
            n_seg += int(data.sum())
            t_seg = [min(t_seg[0], int(t[data].min())), max(t_seg[1], int(t[data].max()))]
            seq_top = max(seq_top, int((unwrap_top(c["seq"][data])
                                        + c["len"][data].astype(np.int64)).max()))
        for dd in (d, rev):
            first = syn & (c["dir"] == g.dir_code[dd])
            if ws[dd] is None and first.any():
                ws[dd] = int(c["wscale"][np.argmax(first)])
        if ack.any():
            ok = unwrap_ack(c["ack"][ack]) >= 0
            if ok.any():
                n_ack += int(ok.sum())
                t_ack = [min(t_ack[0], int(t[ack][ok].min())), max(t_ack[1], int(t[ack][ok].max()))]
    # The receiver's window is scaled by the shift its SYN announced (if both SYNs had one).
    ws_d, ws_rev = ws[d], ws[rev]
    shift = ws_rev if ws_d is not None and ws_rev is not None and min(ws_d, ws_rev) >= 0 else 0
    seg_th = Thinner(n_seg, t_seg[0], t_seg[1], max_points)
    ack_th = Thinner(n_ack, t_ack[0], t_ack[1], max_points)
    unwrap_seg, unwrap_ack = tcpseq.Unwrapper(base), tcpseq.Unwrapper(base)
    top = np.iinfo(np.int64).min  # the highest end byte before the chunk
    n_rtx, cells = 0, np.zeros(0, np.int64)  # the grid's cells holding a kept retransmission
    for c, data, ack, _syn in g.chunks():
        if data.any():
            start = unwrap_seg(c["seq"][data])
            end = start + c["len"][data].astype(np.int64)
            prev = np.maximum.accumulate(np.concatenate([[top], end]))[:-1]
            top = int(prev[-1]) if end[-1] <= prev[-1] else int(end[-1])
            rtx = start < prev
            t = c["ts_ns"][data].astype(np.int64)
            n_rtx += int(rtx.sum())
            keep = rtx
            if not seg_th.everything and rtx.any():
                at = np.flatnonzero(rtx)
                cell = (((t[at] - t_seg[0]) * RTX_CELLS // max(t_seg[1] - t_seg[0], 1))
                        .clip(0, RTX_CELLS - 1) * RTX_CELLS
                        + (end[at] * RTX_CELLS // seq_top).clip(0, RTX_CELLS - 1))
                fresh, first = np.unique(cell, return_index=True)
                new = ~np.isin(fresh, cells, assume_unique=True)
                keep = np.zeros(len(rtx), bool)
                keep[at[first[new]]] = True
                cells = np.union1d(cells, fresh[new])
            seg_th.feed({"t_ns": t, "start": start, "end": end, "rtx": rtx}, "t_ns", "end",
                        keep=keep)
        if ack.any():
            a = unwrap_ack(c["ack"][ack])
            raw = c["win"][ack].astype(np.int64)
            win = np.where((c["flags"][ack] & TCP_SYN) != 0, raw, raw << shift)
            ok = a >= 0
            ack_th.feed({"t_ns": c["ts_ns"][ack][ok].astype(np.int64), "ack": a[ok],
                         "win_edge": a[ok] + win[ok]}, "t_ns", "ack")
    segments = _frame(seg_th, SEG_COLUMNS, n_seg, {"rtx": bool})
    segments.attrs["retransmissions"] = n_rtx
    return {"segments": segments, "acks": _frame(ack_th, ACK_COLUMNS, n_ack, {})}


def _frame(th: Thinner, columns: list[str], n: int, kinds: dict[str, type]) -> pd.DataFrame:
    if n:
        return th.frame(columns)
    return pd.DataFrame({c: np.zeros(0, kinds.get(c, np.int64)) for c in columns})


class _Graph:
    """One connection's rows of a segments table, a chunk of table rows at a time."""

    def __init__(self, segs: Segments, conn: str, d: str, rev: str, rows: int) -> None:
        self.rows, self.d, self.rev, self.segs = rows, d, rev, segs
        self.conn_code = segs.code("conn", conn)
        self.dir_code = {d: segs.code("dir", d), rev: segs.code("dir", rev)}

    def chunks(self) -> Iterator[tuple[dict[str, np.ndarray], np.ndarray, np.ndarray,
                                       np.ndarray]]:
        """(columns, data rows of `d`, ACKs coming back, SYNs) of each chunk, the connection's
        rows only (a chunk with none of them is not read past its labels)."""
        n = len(self.segs)
        for a in range(0, n, self.rows):
            b = min(a + self.rows, n)
            c = self.segs.read(["conn", "dir"], a, b)
            mine = c["conn"] == self.conn_code
            if not mine.any():
                continue
            c |= self.segs.read(_COLUMNS, a, b)
            flags = c["flags"]
            yield (c, mine & (c["dir"] == self.dir_code[self.d]) & (c["len"] > 0),
                   mine & (c["dir"] == self.dir_code[self.rev]) & ((flags & TCP_ACK) != 0),
                   mine & ((flags & TCP_SYN) != 0))

    def first_data_seq(self) -> int | None:
        for c, data, _ack, _syn in self.chunks():
            if data.any():
                return int(c["seq"][np.argmax(data)])
        return None
