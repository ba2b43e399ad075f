"""The merger's walks over each host's segments.bin, a slice at a time, so that what it
holds in memory does not grow with the capture (docs/schema.md §6b):

1. `clock_sample`: the key and time of the segments the clock estimate matches. Below
   CLOCK_KEYS segments a host, all of them; above, the segments whose key hash is below a
   bound (the same keys at both ends) that leaves about CLOCK_KEYS of them. Every copy of a
   chosen key is kept, so the first copy of each is exact, and a bound from fewer pairs is
   still a bound (only looser, by the spread of the fastest one-way delays).
2. `tie_segments`: each slice's iSCSI segments moved onto the initiator's clock, the data
   ones tied to their command by TCP sequence, written as a row group of the host's table.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd
from istrace.capture import attribution
from istrace.capture.decoded import segment_count
from istrace.capture.labels import is_, used_labels
from istrace.capture.segsource import FileSegments
from istrace.capture.segtable import SegmentTableWriter
from pandas.api.types import union_categoricals

# the clock's sample: about this many segments a host, whatever the capture's length (a
# demo's: all or most of them; a bound from fewer pairs is as valid, only a little looser).
# A hash bound, not one key in k buckets: that made the sample, and the merge's peak with
# it, swing between half and all of a cap with the capture's length.
CLOCK_KEYS = 400_000
# segments a slice: ~71 bytes each in the file, a few times that while a slice is worked on;
# smaller slices lower the peak a little more but run slower
SLICE_ROWS = 1 << 17
KEY = ["conn", "dir", "seq", "ack", "len", "flags", "win"]
_READ = ["ts_ns", "seq", "ack", "flags", "win", "len"]
_MIX = np.uint64(0x9E3779B97F4A7C15)


def key_hash(segs: pd.DataFrame) -> np.ndarray:
    """A 64-bit hash of each segment's KEY, the same for the same segment in either host's
    table (labels hashed by their text, not their codes). Equal hashes are still compared
    field by field before a pair is trusted."""
    conn = segs["conn"].astype("category")
    labels = np.array([int.from_bytes(hashlib.blake2b(str(c).encode(), digest_size=8)
                                      .digest(), "little") for c in conn.cat.categories],
                      dtype=np.uint64)
    h = labels[conn.cat.codes.to_numpy()] if len(labels) else np.zeros(len(segs), np.uint64)
    # the direction compared as a label (not a string made per row), the rounds in place
    h ^= is_(segs["dir"], "t2i").to_numpy().astype(np.uint64)
    with np.errstate(over="ignore"):
        for c in KEY[2:]:
            h ^= segs[c].to_numpy().astype(np.uint64)
            h *= _MIX
            h ^= h >> np.uint64(29)
    return h


def first_copies(seg: pd.DataFrame) -> pd.DataFrame:
    """The first copy of each segment (by KEY) in time order, with `_h`, its key_hash: one
    integer column to match on instead of seven (millions of segments a capture). Numbered
    from 0 (the rows' old numbers were an eighth of the table, sent to the merger)."""
    s = seg[KEY + ["ts_ns"]]
    s = s.iloc[np.argsort(s["ts_ns"].to_numpy(np.int64), kind="stable")]
    h = key_hash(s)
    _, first = np.unique(h, return_index=True)  # each hash's first row, in time order
    first.sort()
    return s.iloc[first].assign(_h=h[first]).reset_index(drop=True)


def sample_bound(*bins: Path) -> int | None:
    """The key hash below which a segment is in the clock's sample (None: all of them), for
    the hosts' segments.bin files: bound_for the larger one."""
    return bound_for(max((segment_count(b) for b in bins if b.is_file()), default=0))


def bound_for(segments: int) -> int | None:
    """The key hash below which about CLOCK_KEYS of `segments` fall (None: all of them)."""
    return None if segments <= CLOCK_KEYS else (CLOCK_KEYS << 64) // segments


def _iscsi_slices(seg_bin: Path, ports: tuple[int, ...]) -> Iterator[pd.DataFrame]:
    """The segments of the iSCSI connections (a side on one of `ports`) a slice at a time,
    labelled by connection and direction (decoded.conn_and_dir's rule, told by the file's
    endpoint pairs: istrace.capture.segsource) as categoricals of the labels they use."""
    segs = FileSegments(seg_bin, ports)
    labels = {"conn": segs.conn_labels, "dir": segs.dir_labels}
    for a in range(0, len(segs), SLICE_ROWS):
        got = segs.read([*_READ, "sport", "dport", "conn", "dir"], a, a + SLICE_ROWS)
        keep = np.isin(got.pop("sport"), ports) | np.isin(got.pop("dport"), ports)
        s = pd.DataFrame({c: v[keep] for c, v in got.items()}, copy=False)
        for c, lab in labels.items():
            s[c] = used_labels(s[c].to_numpy(), lab)
        yield s


def clock_sample(seg_bin: Path, ports: tuple[int, ...], bound: int | None) -> pd.DataFrame:
    """The segments (KEY + ts_ns) of one host the clock estimate matches: all without a
    `bound` (sample_bound), else those whose key hash is below it."""
    parts = []
    for s in _iscsi_slices(seg_bin, ports):
        if bound is not None:
            s = s[key_hash(s) < np.uint64(bound)]
        parts.append(s[KEY + ["ts_ns"]])
    if not parts:
        return pd.DataFrame(columns=KEY + ["ts_ns"])
    # each slice labels its few connections in its own categories: unite them, not as text
    labels = {c: union_categoricals([p[c] for p in parts], ignore_order=True)
              for c in ("conn", "dir")}
    out = pd.concat([p.drop(columns=["conn", "dir"]) for p in parts], ignore_index=True)
    return out.assign(**labels)[KEY + ["ts_ns"]]


def tie_segments(d: Path, seg_bin: Path, host: str, ports: tuple[int, ...], offset_ns: int,
                 pdu_seq: attribution.SeqIndex, say: Callable[[str], None],
                 publish: bool = True) -> int:
    """Write DIR/segments/host=<host>/: the iSCSI segments of one host's segments.bin on the
    initiator's clock, data segments tied to the initiator's PDUs by sequence (`pdu_seq`,
    asked once per slice); rows written. `publish=False`: the table waits beside the old one
    for segtable.publish."""
    total = segment_count(seg_bin)
    done = 0
    with SegmentTableWriter(d, host, publish) as w:
        for s in _iscsi_slices(seg_bin, ports):
            done += SLICE_ROWS
            ts = s["ts_ns"].to_numpy(np.int64)
            merged = ts - offset_ns if host == "target" else ts
            cmd = pd.array(np.zeros(len(s), np.int64), dtype="Int64")
            cmd[:] = pd.NA
            data = (s["len"] > 0).to_numpy()
            if data.any():
                cmd[data] = pdu_seq.cmds(merged[data], s["conn"][data], s["dir"][data],
                                         s["seq"][data])
            w.write({"ts_ns": ts, "ts_ns_merged": merged, "conn": s["conn"], "dir": s["dir"],
                     "seq": s["seq"], "ack": s["ack"], "len": s["len"], "flags": s["flags"],
                     "win": s["win"], "cmd_id": cmd})
            if total > 4 * SLICE_ROWS:
                say(f"merge: {host} segments {min(done, total) * 100 // max(total, 1)}%")
        return w.rows
