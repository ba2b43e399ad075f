"""Export a capture as Chrome trace-event JSON (loads in Perfetto / chrome://tracing).

One process per host (initiator, wire, target), one thread (track) per layer. Spans of the
cross-layer timeline become complete ("X") events; PDUs and probe records without a duration
become instant ("i") events on their layer's track.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from istrace.capture import segtable
from istrace.capture.labels import is_
from istrace.capture.load import read_merged
from istrace.plot import data

PIDS = {"initiator": 1, "wire": 2, "target": 3}
LAYERS = ["syscall", "block", "scsi", "iscsi", "tcp", "net", "store"]
# instants in a trace at most: Perfetto's UI slows past a million; probe events and PDUs first
MAX_INSTANTS = 1_000_000


def _tid(layer: str) -> int:
    return LAYERS.index(layer) + 1 if layer in LAYERS else len(LAYERS) + 1


def trace_events(spans: pd.DataFrame, instants: pd.DataFrame | None = None,
                 max_instants: int = MAX_INSTANTS) -> list[dict | str]:
    """spans: data.SPAN_COLUMNS; instants: ts_ns, host, layer, event (+ cmd). ts in us. The
    instants come as JSON text already (built column-wise), the rest as dicts."""
    out: list[dict | str] = []
    starts = [int(spans["start_ns"].min())] if not spans.empty else []
    if instants is not None and not instants.empty:
        starts.append(int(instants["ts_ns"].min()))
    t0 = min(starts) if starts else 0
    used: set[tuple[str, str]] = set()
    for r in spans.itertuples():
        layer = "store" if r.row == "target backing store" else r.layer
        used.add((r.host, layer))
        ev = {"name": str(r.label) if isinstance(r.label, str) and r.label else r.row,
              "cat": layer, "ph": "X", "ts": (r.start_ns - t0) / 1e3,
              "dur": max(r.end_ns - r.start_ns, 0) / 1e3, "pid": PIDS.get(r.host, 9),
              "tid": _tid(layer), "args": {}}
        if not pd.isna(r.cmd):
            ev["args"]["cmd"] = int(r.cmd)
        if not pd.isna(r.bytes):
            ev["args"]["bytes"] = int(r.bytes)
        out.append(ev)
    if instants is not None and not instants.empty:
        ins = _bounded(instants, max_instants)
        host, layer = ins["host"].astype(str), ins["layer"].astype(str)
        used.update(pd.MultiIndex.from_arrays([host, layer]).unique())
        out.extend(_instants_json(ins["ts_ns"], host, layer, ins["event"].astype(str), t0))
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


def _instants_json(ts_ns: pd.Series, host: pd.Series, layer: pd.Series, name: pd.Series,
                   t0: int) -> list[str]:
    """Each instant's JSON object, built column by column: a million instants as dicts took
    seconds. Names, layers and hosts are a few labels, each JSON-encoded once."""
    def once(s: pd.Series, enc: Any) -> pd.Series:
        return s.map({v: enc(v) for v in pd.unique(s)})

    ts = ((ts_ns.astype(np.int64) - t0) / 1e3).astype(float).map(repr)
    return ('{"name":' + once(name, json.dumps) + ',"cat":' + once(layer, json.dumps) +
            ',"ph":"i","s":"t","ts":' + ts + ',"pid":' +
            once(host, lambda h: str(PIDS.get(h, 9))) + ',"tid":' +
            once(layer, lambda x: str(_tid(x))) + "}").tolist()


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


def pdu_instants(pdus: dict[str, pd.DataFrame], offset_ns: int = 0) -> pd.DataFrame:
    """Every decoded PDU as an instant on its capture host's iSCSI track."""
    frames = []
    for host, p in pdus.items():
        if p is None or p.empty:
            continue
        ts = p["ts_ns"].astype(np.int64) - (offset_ns if host == "target" else 0)
        frames.append(pd.DataFrame({"ts_ns": ts, "host": host, "layer": "iscsi",
                                    "event": p["opcode_name"].fillna("?").astype(str)}))
    if not frames:
        return pd.DataFrame(columns=["ts_ns", "host", "layer", "event"])
    return pd.concat(frames, ignore_index=True)


def merged_instants(cap: Any, most: int = MAX_INSTANTS) -> pd.DataFrame:
    """The merged trace's rows on the initiator clock: every probe event and PDU, then the
    TCP segments from the start as many as `most` leaves room for (read no further: a
    full-rate capture has tens of millions); without merged.parquet, the decoded PDUs and
    the raw probe events."""
    m = None
    if cap.merged is not None and "ts_ns_merged" in cap.merged.columns:
        m = read_merged(cap.dir, columns=["ts_ns_merged", "host", "layer", "event"])
    if m is not None and not m.empty:
        ts = pd.to_numeric(m["ts_ns_merged"], errors="coerce")
        ok = ts.notna().to_numpy()
        parts = [pd.DataFrame({"ts_ns": ts[ok].astype(np.int64).to_numpy(),
                               "host": m["host"].astype(object).to_numpy()[ok],
                               "layer": m["layer"].astype(object).to_numpy()[ok],
                               "event": m["event"].astype(object).to_numpy()[ok]})]
        room = most - len(parts[0])
        for host in segtable.hosts(cap.dir) if room > 0 else []:
            s = segtable.read(cap.dir, host, ["ts_ns_merged"], max_rows=room)
            parts.append(pd.DataFrame({"ts_ns": s["ts_ns_merged"].to_numpy(np.int64),
                                       "host": host, "layer": "net", "event": "segment"}))
        out = pd.concat(parts, ignore_index=True)
        return out.iloc[np.argsort(out["ts_ns"].to_numpy(), kind="stable")]
    parts = [pdu_instants(cap.pdus, cap.offset_ns)]
    ev = cap.events
    if ev is not None and not ev.empty:
        ev = ev[~is_(ev["layer"], "meta")]
        ts = ev["ts_ns"].astype(np.int64) - np.where(ev["host"] == "target", cap.offset_ns, 0)
        parts.append(pd.DataFrame({"ts_ns": ts, "host": ev["host"].astype(object),
                                   "layer": ev["layer"].astype(object),
                                   "event": ev["event"].astype(object)}))
    return pd.concat([p for p in parts if not p.empty] or [parts[0]], ignore_index=True)


def write_trace(path: Path, spans: pd.DataFrame, instants: pd.DataFrame | None) -> int:
    events = trace_events(spans if spans is not None else pd.DataFrame(
        columns=data.SPAN_COLUMNS), instants)
    # json.dumps (the C encoder) a chunk at a time: json.dump's pure-Python encoder took
    # half a minute on a million events, one string of them all would hold them twice
    chunk = 100_000
    with open(path, "w") as f:
        f.write('{"traceEvents":[')
        first = True
        for is_text, run in itertools.groupby(events, key=lambda e: isinstance(e, str)):
            items = list(run)
            for i in range(0, len(items), chunk):
                part = items[i:i + chunk]
                f.write(("" if first else ",") + (",".join(part) if is_text else
                        json.dumps(part, separators=(",", ":"))[1:-1]))
                first = False
        f.write('],"displayTimeUnit":"ms"}')
    return len(events)
