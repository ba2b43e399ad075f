"""Data spans: per command (or data PDU), the first and last time a capture point's segments
carried its bytes, from the TCP sequence range its data PDUs cover; as arrays per connection
(SpanArrays) or a table (SPAN_COLUMNS), and a capture's, worked out once (data_spans).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

import numpy as np
import pandas as pd
from istrace.capture import tcpseq
from istrace.capture.labels import label_codes
from istrace.capture.load import Capture
from istrace.capture.segsource import SegmentsLike, payload_slices
from istrace.capture.slices import SLICE_ROWS
from istrace.measure.direction import data_dir

DATA_OPS = {"SCSI Data-In", "SCSI Data-Out"}
# a span table's columns (the timeline's spans too)
SPAN_COLUMNS = ["row", "host", "layer", "start_ns", "end_ns", "cmd", "bytes", "label"]


def segment_spans(pdus: pd.DataFrame | None, segs: SegmentsLike | None, row: str,
                  host: str, d: str = "t2i", offset_ns: int = 0,
                  key: str = "cmd", slice_rows: int = SLICE_ROWS) -> pd.DataFrame:
    """Per command (or per data PDU with key="pdu"; the `cmd` column then holds the PDU's
    index), the time its data PDUs' bytes took at one capture point ([first, last] segment
    carrying them). `pdus` give each command's TCP sequence range in direction `d`.

    Sequence numbers are unwrapped (a minute at full rate passes 4 GiB several times); the
    segments are read `slice_rows` at a time, so a long capture costs a slice's memory."""
    return spans_frame(span_arrays(pdus, segs, d, key, slice_rows), row, host, offset_ns)


def spans_frame(parts: Iterable[SpanArrays], row: str, host: str,
                offset_ns: int = 0) -> pd.DataFrame:
    """segment_spans' table of span_arrays' arrays."""
    frames = [pd.DataFrame({"row": row, "host": host,
                            "layer": "net" if host == "wire" else "tcp",
                            "start_ns": p.first - offset_ns, "end_ns": p.last - offset_ns,
                            "cmd": list(p.keys), "bytes": p.bytes, "label": "data segments"})
              for p in parts]
    if not frames:
        return pd.DataFrame(columns=SPAN_COLUMNS)
    return pd.concat(frames, ignore_index=True)[SPAN_COLUMNS]


class SpanArrays(NamedTuple):
    """One connection's data spans: each key's (command's, PDU's) first and last segment
    time at one capture point and its bytes, keys rising."""
    conn: str
    keys: np.ndarray
    first: np.ndarray
    last: np.ndarray
    bytes: np.ndarray


# what span_arrays reads of the PDUs (besides its `key`, when that is not "cmd")
SPAN_PDU_COLUMNS = ["conn", "dir", "opcode_name", "tcp_seq", "ahs_len", "dsl", "cmd"]


def span_arrays(pdus: pd.DataFrame | Iterable[pd.DataFrame] | None,
                segs: SegmentsLike | None, d: str = "t2i", key: str = "cmd",
                slice_rows: int = SLICE_ROWS) -> Iterator[SpanArrays]:
    """segment_spans' rows as arrays, a connection at a time (SpanArrays): the keys whose
    data PDUs' bytes the segments carried. `pdus`: a table, or its blocks (PduTables.blocks),
    of which only each key's range of the stream is kept (key_ranges)."""
    if pdus is None or segs is None or segs.empty:
        return

    def base_of(conn: str) -> int | None:  # the stream's first byte at this capture point
        first = next(payload_slices(segs, d, ("seq",), conn=conn, rows=slice_rows), None)
        return None if first is None else int(first["seq"][0])

    ranges = key_ranges([pdus] if isinstance(pdus, pd.DataFrame) else pdus, d, key, base_of)
    for name in sorted(ranges):
        base, keys, lo, hi = ranges.pop(name)
        starts, ends = _first_last(lo, hi, payload_slices(segs, d, ("ts_ns", "seq", "len"),
                                                          conn=name, rows=slice_rows),
                                   tcpseq.Unwrapper(base))
        ok = starts <= ends
        hi -= lo
        del lo
        if ok.all():  # no copies: with a key per PDU, each array is as long as the PDUs
            yield SpanArrays(name, keys, starts, ends, hi)
        else:
            yield SpanArrays(name, keys[ok], starts[ok], ends[ok], hi[ok])


def key_ranges(blocks: Iterable[pd.DataFrame], d: str, key: str,
               base_of: Callable[[str], int | None]
               ) -> dict[str, tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
    """Per connection whose stream has a first byte (`base_of`; None: not seen), the range of
    the stream each `key` value's data PDUs in direction `d` cover: (base, keys rising, lowest
    start, highest end; unwrapped from base in the PDUs' order). A block's PDUs of one key in
    a row are one range at once: with 8 KiB Data-In PDUs a command has 512, so a table of
    every PDU, read whole, would be hundreds of times larger."""
    runs: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
    unwrap: dict[str, tcpseq.Unwrapper | None] = {}
    for b in blocks:
        if b.empty or "tcp_seq" not in b or key not in b:
            continue
        keep = ((b["dir"] == d) & b["opcode_name"].isin(DATA_OPS) & b["cmd"].notna()
                & b["tcp_seq"].notna()).to_numpy(bool)
        if not keep.any():
            continue
        c_code, names = label_codes(b["conn"][keep])
        seq = b["tcp_seq"].to_numpy(np.int64, na_value=0)[keep]
        ahs = b["ahs_len"].to_numpy(np.float64)[keep] if "ahs_len" in b else 0
        ln = 48 + np.nan_to_num(ahs).astype(np.int64) + \
            np.nan_to_num(b["dsl"].to_numpy(np.float64)[keep]).astype(np.int64)
        k = b[key].to_numpy(np.int64, na_value=0)[keep]
        for c, name in enumerate(str(n) for n in names):
            mine = c_code == c
            if name not in unwrap:
                base = base_of(name) if mine.any() else None
                unwrap[name] = None if base is None else tcpseq.Unwrapper(base)
            u = unwrap[name]
            if u is None or not mine.any():
                continue
            a, km = u(seq[mine]), k[mine]
            at = np.flatnonzero(np.concatenate([[True], km[1:] != km[:-1]]))
            runs.setdefault(name, []).append((km[at], np.minimum.reduceat(a, at),
                                              np.maximum.reduceat(a + ln[mine], at)))
    out = {}
    for name, parts in runs.items():
        keys = np.concatenate([p[0] for p in parts])
        lo = np.concatenate([p[1] for p in parts])
        hi = np.concatenate([p[2] for p in parts])
        del parts[:]
        if len(keys) > 1 and not (keys[1:] > keys[:-1]).all():  # a key in several runs
            order = np.argsort(keys, kind="stable")
            keys = keys[order]
            at = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
            lo = np.minimum.reduceat(lo[order], at)
            hi = np.maximum.reduceat(hi[order], at)
            keys = keys[at]
        u = unwrap[name]
        if u is not None:  # always: runs are only made where the stream has a first byte
            out[name] = (u.base, keys, lo, hi)
    return out


def _first_last(lo: np.ndarray, hi: np.ndarray, slices: Iterator[dict[str, np.ndarray]],
                unwrap: tcpseq.Unwrapper) -> tuple[np.ndarray, np.ndarray]:
    """The first and last time of the segments carrying each range [lo, hi) of the stream
    (int64 max / min where none did), a slice of the segments at a time: in a slice sorted by
    sequence, the segments from the first reaching past `lo` to the last starting before
    `hi`, their first and last times by reduceat over the (i, j) pairs laid side by side."""
    first = np.full(len(lo), np.iinfo(np.int64).max)
    last = np.full(len(lo), np.iinfo(np.int64).min)
    # the ranges in order of their start (PDUs' ranges mostly come so: then no copy)
    by_lo = None if not len(lo) or (lo[1:] >= lo[:-1]).all() else np.argsort(lo, kind="stable")
    lo_sorted = lo if by_lo is None else lo[by_lo]
    longest = int((hi - lo).max()) if len(lo) else 0
    for sl in slices:
        s0 = unwrap(sl["seq"])
        ts = sl["ts_ns"].astype(np.int64, copy=False)
        end = s0 + sl["len"]
        if not (s0[1:] >= s0[:-1]).all():  # out of sequence order (retransmissions)
            o = np.argsort(s0, kind="stable")
            s0, ts, end = s0[o], ts[o], end[o]
        np.maximum.accumulate(end, out=end)
        # the ranges this slice can touch: starting before its last byte, ending after its
        # first (no range is longer than the longest)
        a, b = (int(np.searchsorted(lo_sorted, v, side="left"))
                for v in (int(s0[0]) - longest, int(end[-1])))
        k = np.arange(a, b) if by_lo is None else by_lo[a:b]
        i = np.searchsorted(end, lo[k], side="right")
        j = np.searchsorted(s0, hi[k], side="left")
        ok = j > i
        if not ok.any():
            continue
        k = k[ok]
        pairs = np.column_stack([i[ok], j[ok]]).ravel()
        ext = np.append(ts, ts[-1])  # a sentinel: j may be one past the end
        first[k] = np.minimum(first[k], np.minimum.reduceat(ext, pairs)[0::2])
        last[k] = np.maximum(last[k], np.maximum.reduceat(ext, pairs)[0::2])
    return first, last


def data_spans(cap: Capture, host: str, key: str = "cmd") -> list[SpanArrays]:
    """span_arrays of `host`'s segments by `key` ("cmd", "pdu"), with the host's own
    PDUs, else the other end's (the same TCP sequence numbers): worked out once and kept
    with the segments. The timeline's spans and the diagnosis's data phases read the same,
    so the pass over every segment is made once, not in each process."""
    segs = cap.segs.get(host)
    other = "target" if host == "initiator" else "initiator"
    source = cap.pdus.first([host, other])
    if segs is None or source is None:
        return []
    d = data_dir(cap)

    def make() -> list[SpanArrays]:
        cols = SPAN_PDU_COLUMNS + ([key] if key not in SPAN_PDU_COLUMNS else [])
        # the PDUs a block at a time, only the arrays of the direction's data PDUs kept
        return list(span_arrays(cap.pdus.blocks(source, cols), segs, d, key))
    return segs.cached(("data_spans", d, key, source), make)
