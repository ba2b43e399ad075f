"""The data behind every plot, as tidy tables (tested directly; the plots only draw these).

Every function takes plain tables (docs/schema.md) so a test can feed it known truth.
Times stay integer nanoseconds; plots convert to ms relative to a t0 they choose.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd
from istrace.capture import attribution
from istrace.capture.labels import label_codes
from istrace.capture.segsource import SegmentsLike
from istrace.measure.bursts import no_gaps
from istrace.measure.payload import payload_totals
from istrace.measure.sizes import human_size
from istrace.measure.spans import DATA_OPS, SPAN_COLUMNS

LADDER_KINDS = ["SCSI Command", "R2T", "SCSI Data-Out", "SCSI Data-In", "SCSI Response"]

# Cross-layer timeline rows, top to bottom (seed 001 fig. 2): (host, layer, label).
TIMELINE_ROWS = [
    ("initiator", "syscall", "initiator syscall"),
    ("initiator", "block", "initiator block"),
    ("initiator", "scsi", "initiator SCSI"),
    ("initiator", "iscsi", "initiator iSCSI"),
    ("initiator", "tcp", "initiator TCP"),
    ("wire", "net", "wire"),
    ("target", "tcp", "target TCP"),
    ("target", "iscsi", "target iSCSI"),
    ("target", "scsi", "target SCSI"),
    ("target", "store", "target backing store"),
]


# ------------------------------------------------------------------------------ ladder


# what the ladder reads of the PDUs
LADDER_PDU_COLUMNS = ["conn", "dir", "tcp_seq", "ts_ns", "opcode_name", "cmd", "dsl",
                      "xfer_bytes", "desired_len", "edtl", "cdb_name"]


def _clean_pdus(pdus: pd.DataFrame) -> pd.DataFrame:
    """The columns the ladder uses (a copy of all of a minute's PDUs was a tenth of the
    plotting process's peak), those the decoder did not write as missing."""
    p = pdus[[c for c in LADDER_PDU_COLUMNS if c in pdus.columns]]
    p = p.copy()
    for c in ("dsl", "tcp_seq", "cmd", "xfer_bytes", "desired_len", "edtl"):
        if c not in p.columns:
            p[c] = np.nan
    return p


def ladder_rows(pdus_i: pd.DataFrame | None, pdus_t: pd.DataFrame | None,
                offset_ns: int = 0, one_way_ns: int | None = None) -> pd.DataFrame:
    """One arrow per PDU (consecutive data PDUs of one command folded into one burst row).

    Send time comes from the sender's capture, receive time from the receiver's (target times
    moved by `offset_ns`, target minus initiator). With one capture only, the far end's time is
    the near one plus/minus `one_way_ns` and `estimated` is True.
    Columns: dir, kind, cmd, t_send_ns, t_recv_ns, t_send_end_ns, t_recv_end_ns, bytes, pdus,
    label, estimated.
    """
    cols = ["dir", "kind", "cmd", "t_send_ns", "t_recv_ns", "t_send_end_ns", "t_recv_end_ns",
            "bytes", "pdus", "label", "estimated"]
    if pdus_i is None and pdus_t is None:
        return pd.DataFrame(columns=cols)
    owd = int(one_way_ns or 0)
    frames = []
    if pdus_i is not None and pdus_t is not None:
        a, b = _clean_pdus(pdus_i), _clean_pdus(pdus_t)
        b = b.assign(ts_ns=b["ts_ns"].astype(np.int64) - offset_ns)
        key = ["conn", "dir", "tcp_seq"]
        m = a.merge(b[key + ["ts_ns"]].drop_duplicates(key), on=key, how="left",
                    suffixes=("", "_t"))
        i2t = m["dir"] == "i2t"
        ti = m["ts_ns"].astype("Int64")
        tt = m["ts_ns_t"].astype("Int64")
        send = ti.where(i2t, tt)
        recv = tt.where(i2t, ti)
        est = (send.isna() | recv.isna()).to_numpy()
        send = send.fillna(recv - owd)
        recv = recv.fillna(send + owd)
        m = m.assign(t_send_ns=send.astype(np.int64), t_recv_ns=recv.astype(np.int64),
                     estimated=est)
        frames.append(m)
    else:
        host = "initiator" if pdus_i is not None else "target"
        p = _clean_pdus(pdus_i if pdus_i is not None else pdus_t)  # type: ignore[arg-type]
        ts = p["ts_ns"].astype(np.int64).to_numpy()
        if host == "target":
            ts = ts - offset_ns
        near_sends = (p["dir"] == "i2t").to_numpy() == (host == "initiator")
        t_send = np.where(near_sends, ts, ts - owd)
        t_recv = np.where(near_sends, ts + owd, ts)
        frames.append(p.assign(t_send_ns=t_send, t_recv_ns=t_recv, estimated=True))
    m = frames[0]
    m = m[m["opcode_name"].notna()].sort_values("t_send_ns", kind="stable")
    # Fold runs of data PDUs of the same command and direction into one burst.
    is_data = m["opcode_name"].isin(DATA_OPS).to_numpy()
    cmd = m["cmd"].to_numpy()
    op = m["opcode_name"].to_numpy()
    new_group = np.ones(len(m), bool)
    if len(m) > 1:
        same_cmd = (cmd[1:] == cmd[:-1]) | (pd.isna(cmd[1:]) & pd.isna(cmd[:-1]))
        new_group[1:] = ~(is_data[1:] & is_data[:-1] & same_cmd & (op[1:] == op[:-1]))
    m = m.assign(group=np.cumsum(new_group), dsl=m["dsl"].fillna(0))
    g = m.groupby("group", sort=True)
    out = pd.DataFrame({
        "dir": g["dir"].first(), "kind": g["opcode_name"].first(), "cmd": g["cmd"].first(),
        "t_send_ns": g["t_send_ns"].min(), "t_recv_ns": g["t_recv_ns"].min(),
        "t_send_end_ns": g["t_send_ns"].max(), "t_recv_end_ns": g["t_recv_ns"].max(),
        "bytes": g["dsl"].sum(), "pdus": g.size(), "estimated": g["estimated"].any(),
        "xfer": g["xfer_bytes"].first(), "desired": g["desired_len"].first(),
        "cdb": g["cdb_name"].first() if "cdb_name" in m.columns else g["opcode_name"].first(),
    }).reset_index(drop=True)
    out["label"] = [_ladder_label(r) for r in out.itertuples()]
    return out[cols]


def _ladder_label(r: Any) -> str:
    kind = r.kind
    if kind == "SCSI Command":
        cdb = r.cdb
        name = cdb if isinstance(cdb, str) else "SCSI Command"
        return f"{name} {human_size(r.xfer)}"
    if kind == "R2T":
        return f"R2T {human_size(r.desired)}"
    if kind in DATA_OPS:
        n = int(r.pdus)
        return f"{kind.removeprefix('SCSI ')} {human_size(r.bytes)}" + (
            f" ({n} PDUs)" if n > 1 else "")
    return str(kind)


WINDOW_COMMANDS = 5  # the commands default_window shows


def default_window(ladder: pd.DataFrame, commands: int = WINDOW_COMMANDS) -> tuple[int, int]:
    """The span of the first `commands` SCSI commands (like the study's fig. 3)."""
    if ladder.empty:
        return 0, 0
    cmds = ladder[ladder["kind"] == "SCSI Command"]
    if cmds.empty:
        return int(ladder["t_send_ns"].min()), int(ladder["t_recv_end_ns"].max())
    first = cmds["cmd"].iloc[0]
    chosen = cmds["cmd"].iloc[:commands].tolist()
    rows = ladder[ladder["cmd"].isin(chosen)]
    start = int(cmds["t_send_ns"].iloc[0]) if not pd.isna(first) else int(rows["t_send_ns"].min())
    return start, int(rows["t_recv_end_ns"].max())


def idle_gaps(ladder: pd.DataFrame, min_gap_ns: int = 0) -> pd.DataFrame:
    """Intervals where the data sender sends no data PDU (ladder only, no segments at hand).

    Busy = union of [first send, last send] of every data burst row; the gaps between are idle
    (a gap includes the last PDU's own send time: `gaps_from_bursts` is exact, use it when the
    segments are there). Columns: start_ns, end_ns, gap_ns.
    """
    ladder = ladder[ladder["kind"].isin(DATA_OPS)]
    if ladder.empty:
        return no_gaps()
    s = ladder["t_send_ns"].to_numpy(np.int64)
    e = np.maximum(ladder["t_send_end_ns"].to_numpy(np.int64), s)
    o = np.argsort(s, kind="stable")
    s, e = s[o], e[o]
    reach = np.maximum.accumulate(e)
    gap_start = reach[:-1]
    gap_end = s[1:]
    keep = gap_end - gap_start > max(min_gap_ns, 0)
    return pd.DataFrame({"start_ns": gap_start[keep], "end_ns": gap_end[keep],
                         "gap_ns": (gap_end - gap_start)[keep]})


# ------------------------------------------------------------------------------ tcp seq graph


def busiest_conn(segs: SegmentsLike | None, d: str) -> str | None:
    """The connection that carried the most payload in direction `d` (None: none did)."""
    t = payload_totals(segs, d)
    return None if t.empty else str(t["bytes"].idxmax())


# ------------------------------------------------------------------------------ timeline


# what timeline_spans reads of the probe events (merged.parquet's ts_ns_merged stands in
# for ts_ns: the caller works the host's time out of it)
TIMELINE_EVENT_COLUMNS = ["ts_ns_merged", "host", "layer", "event", "lat_ns", "bytes", "cmd_id",
                          "itt", "lba", "offset"]


def span_events(kinds: list[tuple[str, str, str]]) -> tuple[set[tuple[str, str, str]],
                                                               set[tuple[str, str, str]]]:
    """Of the (host, layer, event) kinds of probe events, those timeline_spans makes spans
    of: (those drawn when they carry a latency, those it pairs whatever they carry). The
    others (tgtd's socket writes, TCP's samples: half a minute's probe events) it drops."""
    rows = {r[2] for r in TIMELINE_ROWS}
    pair_ends = {(h, x) for h, a, b, _ in KERNEL_PAIRS for x in (a, b)}
    drawn = {k for k in kinds if _row_of(*k) in rows}
    paired = {(h, la, e) for h, la, e in kinds if la in ("scsi", "iscsi") or (h, e) in pair_ends}
    return drawn, paired


def timeline_spans(commands_i: pd.DataFrame | None, commands_t: pd.DataFrame | None,
                   events: pd.DataFrame | None, offset_ns: int = 0,
                   merged_cmd: pd.DataFrame | None = None) -> pd.DataFrame:
    """Spans for the cross-layer timeline: one row per (layer row, piece of work).

    Probe events that close something (`lat_ns` set) give [ts - lat, ts] in their host/layer
    row; the initiator's commands give the iSCSI row (issue -> response) and the wire row
    (first -> last data PDU); the target's commands give target iSCSI (receipt -> response).
    Target times are moved onto the initiator clock with `offset_ns`. Command ids come from the
    event's cmd_id (merged trace), else by the iSCSI task tag, the LBA or the LUN file offset
    (the merger's rules, istrace.capture.attribution), else stay empty.
    """
    frames = _command_frames(commands_i, commands_t, offset_ns)
    frames.append(_event_frame(events, commands_i, offset_ns))
    return _in_time_order(frames)


def event_spans(events: pd.DataFrame | None, commands_i: pd.DataFrame | None,
                offset_ns: int = 0) -> pd.DataFrame:
    """timeline_spans' spans of probe events alone (`commands_i` ties them to commands): the
    events of a system call each make one span of their own (none is paired), so those can
    be made a block at a time."""
    return _in_time_order([_event_frame(events, commands_i, offset_ns)])


def _command_frames(commands_i: pd.DataFrame | None, commands_t: pd.DataFrame | None,
                    offset_ns: int) -> list[pd.DataFrame]:
    """The iSCSI rows' and the wire's spans, of the decoded commands."""
    frames = []
    if commands_i is not None and not commands_i.empty:
        c = commands_i
        iss = c["issue_ts_ns"]
        resp = c.get("resp_ts_ns", pd.Series(np.nan, c.index))
        lbl = c.get("cdb_name", pd.Series("", c.index)).fillna("").astype(str)
        byt = c.get("xfer_bytes", c.get("edtl", pd.Series(np.nan, c.index)))
        frames.append(pd.DataFrame({"row": "initiator iSCSI", "host": "initiator",
                                    "layer": "iscsi", "start_ns": iss, "end_ns": resp,
                                    "cmd": c["cmd"], "bytes": byt, "label": lbl}))
        if "first_data_ts_ns" in c.columns:
            f0 = c["first_data_ts_ns"]
            f1 = c["last_data_ts_ns"].fillna(f0)
            frames.append(pd.DataFrame({"row": "wire", "host": "wire", "layer": "net",
                                        "start_ns": f0, "end_ns": f1, "cmd": c["cmd"],
                                        "bytes": c.get("bytes_in", byt), "label": "data"}))
    if commands_t is not None and not commands_t.empty:
        c = commands_t
        cmd: pd.Series | np.ndarray = c["cmd"]
        if commands_i is not None and "itt" in c.columns and "itt" in commands_i.columns:
            # The same command in both decodes shares conn + ITT (+ LBA for reused tags).
            key = [k for k in ("conn", "itt", "lba") if k in c.columns and k in commands_i]
            m = c[key].merge(commands_i[key + ["cmd"]].drop_duplicates(key), on=key,
                             how="left")
            cmd = m["cmd"].to_numpy()
        frames.append(pd.DataFrame({
            "row": "target iSCSI", "host": "target", "layer": "iscsi",
            "start_ns": c["issue_ts_ns"] - offset_ns,
            "end_ns": c.get("resp_ts_ns", pd.Series(np.nan, c.index)) - offset_ns,
            "cmd": cmd, "bytes": c.get("xfer_bytes", pd.Series(np.nan, c.index)),
            "label": c.get("cdb_name", pd.Series("", c.index))}))
    return frames


def _event_frame(events: pd.DataFrame | None, commands_i: pd.DataFrame | None,
                 offset_ns: int) -> pd.DataFrame:
    """The spans of probe events: those that close something (lat_ns), and the pairs."""
    if events is None or events.empty or "lat_ns" not in events.columns:
        return pd.DataFrame(columns=SPAN_COLUMNS)
    events = _tie_events(events, commands_i, offset_ns)
    lat_all = pd.to_numeric(events["lat_ns"], errors="coerce").to_numpy(np.float64,
                                                                         na_value=np.nan)
    ev = events[lat_all >= 0]
    paired = _paired_spans(events)
    if not paired.empty:
        ev = pd.concat([ev, paired], ignore_index=True)
    if ev.empty:
        return pd.DataFrame(columns=SPAN_COLUMNS)
    # Work on the few distinct (host, layer, event) triples, as integer codes, not on
    # millions of strings. Target file I/O and block work is the backing store (tgtd's
    # preads of the LUN file); its socket reads/writes stay out of the picture.
    parts = [_labels(ev[c]) for c in ("host", "layer", "event")]
    (hc, hu), (lc, lu), (ec, eu) = parts
    nl, ne = len(lu), len(eu)
    combined = (hc.astype(np.int64) * nl + lc) * ne + ec
    uniq, inv = np.unique(combined, return_inverse=True)
    rows_u = np.array([_row_of(hu[x // (nl * ne)], lu[(x // ne) % nl], eu[x % ne])
                       for x in uniq], dtype=object)
    is_tgt = hc == np.flatnonzero(hu == "target")[0] if (hu == "target").any() else \
        np.zeros(len(hc), bool)
    ts = ev["ts_ns"].to_numpy(np.int64) - np.where(is_tgt, offset_ns, 0)
    cmd = ev["cmd_id"] if "cmd_id" in ev.columns else pd.Series(np.nan, ev.index)
    cmd = _cmd_by_lba(ev, pd.to_numeric(cmd, errors="coerce").astype(float),
                      commands_i, offset_ns)
    lat = pd.to_numeric(ev["lat_ns"], errors="coerce").to_numpy(np.float64, na_value=np.nan)
    byt = (pd.to_numeric(ev["bytes"], errors="coerce").to_numpy(np.float64, na_value=np.nan)
           if "bytes" in ev.columns else np.full(len(ev), np.nan))
    return pd.DataFrame({
        "row": _cat_from(inv, rows_u), "host": _cat_from(hc, hu),
        "layer": _cat_from(lc, lu), "start_ns": ts - lat.astype(np.int64),
        "end_ns": ts, "cmd": cmd.to_numpy(np.float64), "bytes": byt,
        "label": _cat_from(ec, eu)})


def _in_time_order(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The spans of `frames` in a timeline row, by start time, ends filled in."""
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame(columns=SPAN_COLUMNS)
    out = concat_spans(frames)
    del frames
    # the spans with a start in a row the timeline has, in time order, taken in one pass a
    # column at a time (dropping, filling, filtering and sorting the table in turn copied
    # it five times)
    start, end = out["start_ns"], out["end_ns"]
    known = [r[2] for r in TIMELINE_ROWS]
    keep = np.flatnonzero(start.notna().to_numpy(bool)
                          & out["row"].isin(known).to_numpy(dtype=bool))
    t0 = start.to_numpy(np.int64, na_value=0)
    keep = keep[np.argsort(t0[keep], kind="stable")]
    t0 = t0[keep]
    t1 = np.where(end.isna().to_numpy(bool)[keep], t0, end.to_numpy(np.int64, na_value=0)[keep])
    cols: dict[str, Any] = {"start_ns": t0, "end_ns": t1}
    for c in ("row", "host", "layer", "label"):  # the labels of the spans kept, no others
        cols[c] = out[c].array.take(keep).remove_unused_categories()
    for c in ("cmd", "bytes"):
        cols[c] = out[c].array.take(keep)
    return pd.DataFrame({c: cols[c] for c in SPAN_COLUMNS})


def concat_spans(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Span tables as one, the label columns categorical with the same categories in every
    part, so that the join keeps them so: as text they were held over again by the report and
    both of its children (sorted categories: ordered as the text would be). Parts given as
    text or categoricals alike."""
    labelled = [f.copy(deep=False) for f in frames]  # the callers' tables left as they are
    for c in ("row", "host", "layer", "label"):
        cats = sorted({str(v) for f in labelled for v in pd.unique(f[c].dropna())})
        for f in labelled:
            col = f[c]
            f[c] = (col.cat.remove_unused_categories().cat.set_categories(cats)
                    if isinstance(col.dtype, pd.CategoricalDtype)
                    else pd.Categorical(col, categories=cats))
    return pd.concat(labelled, ignore_index=True)


# Kernel stack probe points that mark a piece of work by its start and its end rather than
# by a latency: (host, start event, end event, layer of the span). The same command's two
# events share a cmd_id (the merge ties them) or, before a merge, an iSCSI task tag.
KERNEL_PAIRS = [
    ("initiator", "scsi_dispatch", "scsi_done", "scsi"),        # SCSI midlayer: dispatch -> done
    ("target", "lio_cmd_start", "lio_cmd_done", "scsi"),        # LIO target_core: execute -> done
    ("target", "lio_bs_submit", "lio_cmd_done", "store"),       # LIO backing store: submit -> done
]


def _paired_spans(events: pd.DataFrame) -> pd.DataFrame:
    """Spans from probe points without a latency: first the kernel stack's known start/end
    pairs (KERNEL_PAIRS), then, for the other SCSI/iSCSI (host, layer) pairs that have no
    latency-carrying events of their own, one span per task tag from its first to its last
    event. Each span is returned as an event row ending at the span's end with its lat_ns."""
    known = _known_pairs(events)
    if "itt" not in events.columns:
        return known
    ev = events[events["layer"].isin(["scsi", "iscsi"]) & events["itt"].notna()]
    if not known.empty:   # the table's events stay out of the generic rule
        mine = {(h, x) for h, a, b, _ in KERNEL_PAIRS for x in (a, b)}
        ev = ev[[(h, x) not in mine for h, x in zip(ev["host"], ev["event"], strict=True)]]
    if ev.empty:
        return known
    has_lat = ev.groupby(["host", "layer"])["lat_ns"].apply(lambda x: x.notna().any())
    # pandas maps an index through a Series too; pandas-stubs type a mapping or a function only
    ev = ev[~ev.set_index(["host", "layer"]).index.map(has_lat)  # type: ignore[arg-type]
            .to_numpy(dtype=bool)]
    if ev.empty:
        return known
    generic = _tag_spans(ev.sort_values("ts_ns", kind="stable"))
    return pd.concat([known, generic]) if not known.empty else generic


def _tag_spans(ev: pd.DataFrame) -> pd.DataFrame:
    """One span per (host, layer, task tag) from its first event to its last, as the last
    event's row with lat_ns set; a tag reused later starts a new span after a *done* event.
    `ev` in time order; the spans come in the order of their tags' first events. Column-wise:
    a full-rate capture has tens of thousands of commands (a loop over them took seconds)."""
    if ev.empty:
        return ev.iloc[0:0]
    codes = [pd.factorize(ev[c])[0] for c in ("host", "layer", "itt")]
    order = np.lexsort((np.arange(len(ev)), codes[2], codes[1], codes[0]))
    key = np.stack([c[order] for c in codes])
    ev_codes, ev_names = pd.factorize(ev["event"].astype(str))
    done = np.asarray(ev_names.str.contains("done|complete|rsp|resp"), bool)[ev_codes][order]
    new = np.ones(len(order), bool)
    new[1:] = (key[:, 1:] != key[:, :-1]).any(axis=0) | done[:-1]
    seg = np.cumsum(new) - 1
    first = np.flatnonzero(new)
    last = np.concatenate([first[1:], [len(order)]]) - 1
    keep = last > first                        # two events at least
    ts = ev["ts_ns"].to_numpy(np.int64)[order]
    rows = ev.iloc[order[last[keep]]].copy()
    rows["lat_ns"] = ts[last[keep]] - ts[first[keep]]
    # the original order: tags by their first event, then each tag's spans in time
    tag_start = np.minimum.reduceat(order, np.flatnonzero(np.concatenate(
        [[True], (key[:, 1:] != key[:, :-1]).any(axis=0)])))
    tag_of = np.cumsum(np.concatenate([[True], (key[:, 1:] != key[:, :-1]).any(axis=0)])) - 1
    rank = np.lexsort((seg[first[keep]], tag_start[tag_of[first[keep]]]))
    return rows.iloc[rank]


def _known_pairs(events: pd.DataFrame) -> pd.DataFrame:
    """KERNEL_PAIRS spans: per command (cmd_id, else task tag), the first start event to the
    first end event after it. Rows keep the end event's index; layer is the span's layer."""
    keys = [k for k in ("cmd_id", "itt") if k in events.columns]
    if not keys or "event" not in events.columns:
        return events.iloc[0:0]
    out = []
    for host, start, end, layer in KERNEL_PAIRS:
        here = events[(events["host"] == host) & events["event"].isin([start, end])]
        if here.empty:
            continue
        # "cmd 12" where the merge tied the event to a command, else "itt 0x..." (its tag)
        key = pd.Series(None, index=here.index, dtype=object)
        for k in keys:
            v = here[k]
            fill = key.isna() & v.notna()
            key[fill] = k + " " + v[fill].astype(str)
        h = here.assign(_key=key).dropna(subset=["_key"])
        s = h[h["event"] == start].groupby("_key")["ts_ns"].min()
        e = h[h["event"] == end]
        e = e[e["ts_ns"].to_numpy() >= s.reindex(e["_key"]).to_numpy(np.float64)]
        e = e.sort_values("ts_ns", kind="stable").drop_duplicates("_key")
        if e.empty:
            continue
        row = e.drop(columns="_key").copy()
        row["lat_ns"] = (e["ts_ns"] - s.reindex(e["_key"]).to_numpy()).astype(np.int64)
        row["layer"] = layer
        row["event"] = start
        out.append(row)
    return pd.concat(out) if out else events.iloc[0:0]


def _initiator_clock(ev: pd.DataFrame, offset_ns: int) -> np.ndarray:
    """Event times on the initiator's clock (the commands' clock): target times moved."""
    host = ev["host"] if "host" in ev.columns else pd.Series("", ev.index)
    return ev["ts_ns"].to_numpy(np.int64) - np.where(host == "target", offset_ns, 0)


def _tie_events(events: pd.DataFrame, commands: pd.DataFrame | None,
                offset_ns: int) -> pd.DataFrame:
    """Probe events with an iSCSI task tag and no cmd_id yet get one by attribution.by_itt."""
    if commands is None or commands.empty or "itt" not in events.columns or \
            "itt" not in commands.columns or events["itt"].isna().all():
        return events
    # a shallow copy and a new cmd_id column: a minute's probe rows are not copied whole
    ev = events.copy(deep=False)
    if "cmd_id" not in ev.columns:
        ev["cmd_id"] = np.nan
    want = (ev["itt"].notna() & ev["cmd_id"].isna()).to_numpy(bool)
    if not want.any():
        return ev
    e = ev.loc[want]
    got = attribution.by_itt(_initiator_clock(e, offset_ns), e["itt"], commands)
    cmd = ev["cmd_id"].copy()
    cmd.loc[want] = got.to_numpy(np.float64, na_value=np.nan)
    ev["cmd_id"] = cmd
    return ev


def _cmd_by_lba(ev: pd.DataFrame, cmd: pd.Series, commands: pd.DataFrame | None,
                offset_ns: int) -> pd.Series:
    """Events still without a command id: SCSI-layer ones by LBA and size, file reads and
    writes of a LUN by byte offset (attribution.by_lba, by_offset)."""
    out = cmd.astype(float).copy()
    if commands is None or commands.empty or "lba" not in commands:
        return out
    layer = ev["layer"] if "layer" in ev.columns else pd.Series("", ev.index)
    t = _initiator_clock(ev, offset_ns)
    if "lba" in ev.columns:
        want = (out.isna() & (layer == "scsi") & ev["lba"].notna()).to_numpy(bool)
        if want.any():
            e = ev.loc[want]
            got = attribution.by_lba(t[want], e["lba"], e.get("bytes"), commands)
            out[want] = got.to_numpy(np.float64, na_value=np.nan)
    if "offset" in ev.columns:
        want = (out.isna() & (layer == "syscall") & ev["offset"].notna()).to_numpy(bool)
        if want.any():
            got = attribution.by_offset(t[want], ev.loc[want, "offset"], commands)
            out[want] = got.to_numpy(np.float64, na_value=np.nan)
    return out


def _cat_from(codes: np.ndarray, labels: np.ndarray) -> pd.Categorical:
    """Categorical from codes into labels that may repeat or hold None (-> missing)."""
    lc, lu = pd.factorize(pd.Series(labels, dtype=object), use_na_sentinel=True)
    return pd.Categorical.from_codes(lc[codes], pd.Index(lu, dtype=object))


def _labels(series: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(codes >= 0, labels) of a label column; missing values get the label ''."""
    codes, uniq = label_codes(series)
    uniq = np.append(uniq.astype(object), "")
    return np.where(codes < 0, len(uniq) - 1, codes), uniq


def _row_of(host: str, layer: str, event: str) -> str | None:
    """Timeline row of a probe event (None: not drawn)."""
    if host == "target" and (layer == "block" or (layer == "syscall" and re.match(
            r"^p(read|write)(64|v|v2)?(_exit)?$", str(event)))):
        return "target backing store"
    return f"{host} {_layer_word(layer)}"


def _layer_word(layer: str) -> str:
    return {"syscall": "syscall", "block": "block", "scsi": "SCSI", "iscsi": "iSCSI",
            "tcp": "TCP", "net": "net", "store": "backing store"}.get(layer, layer)


def assign_lanes(start: np.ndarray, end: np.ndarray, max_lanes: int = 8) -> np.ndarray:
    """Lane of each span so overlapping spans sit side by side (greedy interval
    partitioning: the first lane free at the span's start). Beyond `max_lanes` concurrent
    spans, lanes are reused (they then overlap)."""
    order = np.argsort(start, kind="stable")
    lanes = np.zeros(len(start), np.int64)
    free_at: list[int] = []  # per lane: when its last span ends
    for i in order:
        for k, t in enumerate(free_at):
            if t <= start[i]:
                lanes[i] = k
                free_at[k] = end[i]
                break
        else:
            if len(free_at) < max_lanes:
                lanes[i] = len(free_at)
                free_at.append(end[i])
            else:  # all taken: the lane that frees first
                k = int(np.argmin(free_at))
                lanes[i] = k
                free_at[k] = max(free_at[k], end[i])
    return lanes


def spans_in(spans: pd.DataFrame, window: tuple[int, int]) -> pd.DataFrame:
    """The spans that overlap `window` (absolute ns): what a timeline of it draws."""
    return spans[(spans["end_ns"] >= window[0]) & (spans["start_ns"] <= window[1])]


def span_summary(spans: pd.DataFrame) -> pd.DataFrame:
    """Per row: spans, distinct commands, typical bytes, busy time (union of spans)."""
    rows = []
    for _h, _l, row in TIMELINE_ROWS:
        s = spans[spans["row"] == row]
        if s.empty:
            continue
        st, en = s["start_ns"].to_numpy(), s["end_ns"].to_numpy()
        o = np.argsort(st)
        st, en = st[o], en[o]
        reach = np.maximum.accumulate(en)
        gaps = np.clip(st[1:] - reach[:-1], 0, None).sum()
        rows.append({"row": row, "spans": len(s), "commands": s["cmd"].nunique(),
                     "typical_bytes": s["bytes"].mode().iloc[0] if s["bytes"].notna().any()
                     else np.nan,
                     "busy_ns": int(reach[-1] - st[0] - gaps)})
    return pd.DataFrame(rows, columns=["row", "spans", "commands", "typical_bytes", "busy_ns"])
