"""Export a capture as Chrome trace-event JSON (loads in Perfetto / chrome://tracing).

One process per host (initiator, wire, target), one thread (track) per layer. Spans of the
cross-layer timeline become complete ("X") events; PDUs and probe records without a duration
become instant ("i") events on their layer's track.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from istrace.capture import segtable
from istrace.capture.labels import is_, object_labels
from istrace.capture.load import merged_blocks
from istrace.capture.swapwrite import replacing
from istrace.measure.spans import SPAN_COLUMNS
from pandas.api.types import union_categoricals

PIDS = {"initiator": 1, "wire": 2, "target": 3}
LAYERS = ["syscall", "block", "scsi", "iscsi", "tcp", "net", "store"]
# instants in a trace at most: Perfetto's UI slows past a million; probe events and PDUs first
MAX_INSTANTS = 1_000_000


def _tid(layer: str) -> int:
    return LAYERS.index(layer) + 1 if layer in LAYERS else len(LAYERS) + 1


def _span_events(spans: pd.DataFrame, t0: int) -> tuple[list[dict], set[tuple[str, str]]]:
    """Each span as a complete event, and the (host, layer) tracks they use."""
    out, used = [], set()
    # a column at a time as Python values (what a row's fields are): a row tuple at a time
    # took 18 us a span, most of it in reading the text columns' values one by one
    cols = [spans[c].tolist() for c in ("row", "host", "layer", "start_ns", "end_ns", "cmd",
                                        "bytes", "label")]
    for row, host, layer, start, end, cmd, nbytes, label in zip(*cols, strict=True):
        layer = "store" if row == "target backing store" else layer
        used.add((host, layer))
        ev = {"name": str(label) if isinstance(label, str) and label else row,
              "cat": layer, "ph": "X", "ts": (start - t0) / 1e3,
              "dur": max(end - start, 0) / 1e3, "pid": PIDS.get(host, 9),
              "tid": _tid(layer), "args": {}}
        if not pd.isna(cmd):
            ev["args"]["cmd"] = int(cmd)
        if not pd.isna(nbytes):
            ev["args"]["bytes"] = int(nbytes)
        out.append(ev)
    return out, used


def _track_events(used: set[tuple[str, str]]) -> list[dict]:
    """The metadata events naming and ordering each process (host) and thread (layer)."""
    out: list[dict] = []
    for host, pid in PIDS.items():
        out.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": host}})
        out.append({"name": "process_sort_index", "ph": "M", "pid": pid,
                    "args": {"sort_index": pid}})
    for host, layer in sorted(used):
        out.append({"name": "thread_name", "ph": "M", "pid": PIDS.get(host, 9),
                    "tid": _tid(layer), "args": {"name": f"{host} {layer}"}})
        out.append({"name": "thread_sort_index", "ph": "M", "pid": PIDS.get(host, 9),
                    "tid": _tid(layer), "args": {"sort_index": _tid(layer)}})
    return out


def _kinds(instants: pd.DataFrame) -> tuple[np.ndarray, list[tuple[str, str, str]]]:
    """Each instant's kind (host, layer, event) as a code, and the kinds: a million instants
    are a few dozen kinds, each formatted once."""
    # each column's codes packed into one integer, then the packed values present numbered by
    # a count over them (a sort of a million keys held five arrays of them; a MultiIndex, a
    # million tuples)
    # (the narrowest integers that hold them: a million instants' keys and numbers as int64
    # were 16 MB, the largest part of the trace's peak)
    cats = [pd.Categorical(instants[c]) for c in ("host", "layer", "event")]
    sizes = [len(c.categories) + 1 for c in cats]  # + 1: missing (code -1) is a kind too
    key = np.zeros(len(instants), np.min_scalar_type(int(np.prod(sizes))))
    for c, k in zip(cats, sizes, strict=True):
        key *= k
        key += (c.codes + 1).astype(key.dtype)  # its own type holds one more
    present = np.flatnonzero(np.bincount(key, minlength=1))
    number = np.zeros(int(np.prod(sizes)), np.min_scalar_type(max(len(present) - 1, 0)))
    number[present] = np.arange(len(present))
    kinds = []
    for k in present.tolist():
        parts = []
        for c, size in zip(reversed(cats), reversed(sizes), strict=True):
            code = k % size - 1
            parts.append(str(c.categories[code]) if code >= 0 else "nan")
            k //= size
        kinds.append((parts[2], parts[1], parts[0]))
    return number[key], kinds


def _instant_lines(ts_ns: np.ndarray, codes: np.ndarray, heads: pa.Array,
                   tails: pa.Array, t0: int) -> memoryview:
    """One chunk of instants as JSON objects joined by commas, UTF-8 (a view of the Arrow
    buffer: written as it is, no copy). The time is written in microseconds with the
    nanoseconds as three decimals, exact (no float rounding)."""
    d = ts_ns - t0
    us = pa.array(d // 1000).cast(pa.string())
    ns = pc.utf8_slice_codeunits(pa.array(d % 1000 + 1000).cast(pa.string()), 1)
    idx = pa.array(codes)
    # each object followed by a comma, joined in Arrow: the result's data buffer is the
    # chunk's text (Python strings of a million objects were most of this step)
    lines = pc.binary_join_element_wise(heads.take(idx), us, ".", ns, tails.take(idx), "")
    off = np.frombuffer(lines.buffers()[1], np.int32)[lines.offset:lines.offset + len(lines) + 1]
    return memoryview(lines.buffers()[2])[int(off[0]):int(off[-1]) - 1]


def _bounded(instants: pd.DataFrame, most: int) -> pd.DataFrame:
    """At most `most` instants: every probe event and PDU first, then the per-packet rows
    (layer net) from the start, as many as fit; time order kept."""
    if len(instants) <= most:
        return instants
    net = is_(instants["layer"], "net").to_numpy()
    keep = ~net
    room = most - int(keep.sum())
    if room < 0:
        return instants[keep].head(most)
    keep[np.flatnonzero(net)[:room]] = True
    return instants[keep]


def pdu_instants(pdus: Mapping[str, pd.DataFrame], offset_ns: int = 0) -> pd.DataFrame:
    """Every decoded PDU as an instant on its capture host's iSCSI track."""
    frames = []
    for host, p in pdus.items():
        if p is None or p.empty:
            continue
        ts = p["ts_ns"].astype(np.int64) - (offset_ns if host == "target" else 0)
        name = p["opcode_name"].astype(object).fillna("?").astype(str)  # categorical: text
        frames.append(pd.DataFrame({"ts_ns": ts, "host": host, "layer": "iscsi",
                                    "event": name}))
    if not frames:
        return pd.DataFrame(columns=["ts_ns", "host", "layer", "event"])
    return pd.concat(frames, ignore_index=True)


def merged_instants(cap: Any, most: int = MAX_INSTANTS) -> pd.DataFrame:
    """The merged trace's rows on the initiator clock: its probe events and PDUs (the first
    `most` of them: the file is in time order), then the TCP segments from the start as many
    as `most` leaves room for (read no further: a full-rate capture has tens of millions);
    without merged.parquet, the decoded PDUs and the raw probe events."""
    parts: list[dict[str, Any]] = []
    if "ts_ns_merged" in cap.merged_columns:
        # a row group at a time (a minute's 430 000 rows read whole left 13 MB of this
        # process resident under the trace's writing); labels stay categorical: a million
        # rows of text are a few dozen names, and reordering text columns (pyarrow strings)
        # was most of this step
        # merged.parquet is in time order: its first `most` rows are those the trace keeps
        # of them (write_trace's bound), and none after are read (30 s of 8 KiB Data-In
        # PDUs, 1.3 million rows read to keep a million, peaked at 150 MB more)
        got = 0
        for m in merged_blocks(cap.dir, ["ts_ns_merged", "host", "layer", "event"],
                               lambda t: pc.is_valid(t["ts_ns_merged"]), probe_rows_only=False):
            take = min(len(m["ts_ns_merged"]), most - got)
            parts.append({"ts_ns": m.pop("ts_ns_merged").to_numpy(np.int64)[:take],
                          **{c: object_labels(m.pop(c))[:take]
                             for c in ("host", "layer", "event")}})
            got += take
            if got >= most:
                break
    if parts:
        room = most - sum(len(p["ts_ns"]) for p in parts)
        net = [(host, segtable.read(cap.dir, host, ["ts_ns_merged"], max_rows=room)
                ["ts_ns_merged"].to_numpy(np.int64))
               for host in (segtable.hosts(cap.dir) if room > 0 else [])]
        # the first `room` of the hosts' segments in time order (write_trace's bound, made
        # here: the rows beyond it are never joined, sorted or labelled)
        if len(net) > 1:
            first = np.zeros(sum(len(t) for _, t in net), bool)
            first[np.argsort(np.concatenate([t for _, t in net]), kind="stable")[:room]] = True
            cuts = np.cumsum([0] + [len(t) for _, t in net])
            net = [(h, t[first[a:b]]) for (h, t), a, b in zip(net, cuts[:-1], cuts[1:],
                                                               strict=True)]
            del first
        for host, t in net:
            parts.append({"ts_ns": t, **{c: object_labels(pd.Categorical.from_codes(
                np.zeros(len(t), np.int8), pd.Index([v])))
                for c, v in (("host", host), ("layer", "net"), ("event", "segment"))}})
        del net
        ts = np.concatenate([p.pop("ts_ns") for p in parts])
        order = np.argsort(ts, kind="stable")
        return pd.DataFrame({"ts_ns": ts[order],
                             **{c: union_categoricals([p[c] for p in parts])[order]
                                for c in ("host", "layer", "event")}})
    frames = [pdu_instants(cap.pdus, cap.offset_ns)]
    ev = cap.all_events()
    if ev is not None and not ev.empty:
        ev = ev[~is_(ev["layer"], "meta")]
        ts = ev["ts_ns"].astype(np.int64) - np.where(ev["host"] == "target", cap.offset_ns, 0)
        frames.append(pd.DataFrame({"ts_ns": ts, "host": ev["host"].astype(object),
                                   "layer": ev["layer"].astype(object),
                                   "event": ev["event"].astype(object)}))
    return pd.concat([p for p in frames if not p.empty] or [frames[0]], ignore_index=True)


def write_trace(path: Path, spans: pd.DataFrame | None, instants: pd.DataFrame | None,
                max_instants: int = MAX_INSTANTS, chunk: int = 25_000,
                span_chunk: int = 10_000, more_spans: Iterable[pd.DataFrame] = (),
                more_start: int | None = None) -> int:
    """Write the trace: spans (SPAN_COLUMNS) as complete events, then those of
    `more_spans` (blocks made as they are written, the earliest starting at `more_start`),
    instants (ts_ns, host, layer, event) as instant events on their layer's track, times in
    us from the earliest. The instants are formatted and written a chunk at a time,
    column-wise: a million of them as dicts took seconds, as one list of strings hundreds
    of MB. Returns the count."""
    spans = spans if spans is not None else pd.DataFrame(columns=SPAN_COLUMNS)
    ins = _bounded(instants, max_instants) if instants is not None and not instants.empty \
        else None
    starts = [int(spans["start_ns"].min())] if not spans.empty else []
    if more_start is not None:
        starts.append(more_start)
    if ins is not None:
        ts = ins["ts_ns"].to_numpy(np.int64)
        starts.append(int(ts.min()))
    t0 = min(starts) if starts else 0
    n = 0
    used: set[tuple[str, str]] = set()
    with replacing(path) as tmp, open(tmp, "wb") as f:
        f.write(b'{"traceEvents":[')
        # json.dumps (the C encoder) a chunk at a time: json.dump's pure-Python encoder
        # took half a minute on a million events; a chunk's dicts at a time (a minute's
        # 170 000 spans as dicts were 200 MB, 100 000 of them 110 MB)
        first = True
        for block in itertools.chain([spans], more_spans):
            n += len(block)
            for i in range(0, len(block), span_chunk):
                head, here = _span_events(block.iloc[i:i + span_chunk], t0)
                used |= here
                f.write((("" if first else ",")
                         + json.dumps(head, separators=(",", ":"))[1:-1]).encode())
                first = False
        if ins is not None:
            codes, kinds = _kinds(ins)
            used.update((h, la) for h, la, _ in kinds)
            heads = pa.array(['{"name":' + json.dumps(e) + ',"cat":' + json.dumps(la)
                              + ',"ph":"i","s":"t","ts":' for _, la, e in kinds], pa.string())
            tails = pa.array([f',"pid":{PIDS.get(h, 9)},"tid":{_tid(la)}}},'
                              for h, la, _ in kinds], pa.string())
            for i in range(0, len(ts), chunk):
                if not first:
                    f.write(b",")
                f.write(_instant_lines(ts[i:i + chunk], codes[i:i + chunk], heads, tails, t0))
                first = False
            n += len(ts)
        meta = _track_events(used)
        f.write(((",") if not first else "").encode()
                + json.dumps(meta, separators=(",", ":"))[1:-1].encode())
        f.write(b'],"displayTimeUnit":"ms"}')
    return n + len(meta)
