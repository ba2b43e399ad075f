"""Export a capture as Chrome trace-event JSON (loads in Perfetto / chrome://tracing).

One process per host (initiator, wire, target), one thread (track) per layer. Spans of the
cross-layer timeline become complete ("X") events; PDUs and probe records without a duration
become instant ("i") events on their layer's track.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from istrace.plot import data

PIDS = {"initiator": 1, "wire": 2, "target": 3}
LAYERS = ["syscall", "block", "scsi", "iscsi", "tcp", "net", "store"]


def _tid(layer: str) -> int:
    return LAYERS.index(layer) + 1 if layer in LAYERS else len(LAYERS) + 1


def trace_events(spans: pd.DataFrame, instants: pd.DataFrame | None = None,
                 max_instants: int = 1_000_000) -> list[dict]:
    """spans: data.SPAN_COLUMNS; instants: ts_ns, host, layer, event (+ cmd). ts in us."""
    out: list[dict] = []
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
        ins = instants.head(max_instants)
        ts = ((ins["ts_ns"].astype(np.int64) - t0) / 1e3).to_numpy()
        for t, host, layer, name in zip(ts, ins["host"].astype(str), ins["layer"].astype(str),
                                        ins["event"].astype(str), strict=True):
            used.add((host, layer))
            out.append({"name": name, "cat": layer, "ph": "i", "s": "t", "ts": float(t),
                        "pid": PIDS.get(host, 9), "tid": _tid(layer)})
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


def merged_instants(cap: Any) -> pd.DataFrame:
    """Every row of the merged trace (probe events, PDUs, TCP segments) on the initiator
    clock; without merged.parquet, the decoded PDUs and the raw probe events."""
    m = cap.merged
    if m is not None and not m.empty and "ts_ns_merged" in m.columns:
        ts = pd.to_numeric(m["ts_ns_merged"], errors="coerce")
        ok = ts.notna().to_numpy()
        return pd.DataFrame({"ts_ns": ts[ok].astype(np.int64).to_numpy(),
                             "host": m["host"].astype(object).to_numpy()[ok],
                             "layer": m["layer"].astype(object).to_numpy()[ok],
                             "event": m["event"].astype(object).to_numpy()[ok]})
    parts = [pdu_instants(cap.pdus, cap.offset_ns)]
    ev = cap.events
    if ev is not None and not ev.empty:
        ev = ev[ev["layer"].astype(str) != "meta"]
        ts = ev["ts_ns"].astype(np.int64) - np.where(ev["host"] == "target", cap.offset_ns, 0)
        parts.append(pd.DataFrame({"ts_ns": ts, "host": ev["host"].astype(object),
                                   "layer": ev["layer"].astype(object),
                                   "event": ev["event"].astype(object)}))
    return pd.concat([p for p in parts if not p.empty] or [parts[0]], ignore_index=True)


def write_trace(path: Path, spans: pd.DataFrame, instants: pd.DataFrame | None) -> int:
    events = trace_events(spans if spans is not None else pd.DataFrame(
        columns=data.SPAN_COLUMNS), instants)
    with open(path, "w") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f, separators=(",", ":"))
    return len(events)
