"""The data behind every plot, as tidy tables (tested directly; the plots only draw these).

Every function takes plain tables (docs/schema.md) so a test can feed it known truth.
Times stay integer nanoseconds; plots convert to ms relative to a t0 they choose.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from istrace.capture import attribution, tcpseq
from istrace.capture.events import APP_READ_EVENTS
from istrace.capture.labels import is_, label_codes
from istrace.capture.segsource import Segments, SegmentsLike, as_segments, payload_slices
from istrace.capture.slices import SLICE_ROWS

DATA_OPS = {"SCSI Data-In", "SCSI Data-Out"}
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
SPAN_COLUMNS = ["row", "host", "layer", "start_ns", "end_ns", "cmd", "bytes", "label"]


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
        send = np.where(near_sends, ts, ts - owd)
        recv = np.where(near_sends, ts + owd, ts)
        frames.append(p.assign(t_send_ns=send, t_recv_ns=recv, estimated=True))
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


def human_size(n: float) -> str:
    if pd.isna(n):
        return "?"
    n = float(n)
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n / (1 << 20):.0f} MiB"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.2f} MiB"
    if n >= 1024:
        return f"{n / 1024:.0f} KiB" if n % 1024 == 0 else f"{n / 1024:.1f} KiB"
    return f"{n:.0f} B"


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


def no_gaps() -> pd.DataFrame:
    """The gaps table with no row, typed (an untyped empty frame cannot be ranked)."""
    return pd.DataFrame({c: pd.Series(dtype=np.int64) for c in ("start_ns", "end_ns", "gap_ns")})


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


# ------------------------------------------------------------------------------ wire activity



def data_bursts(segs: SegmentsLike, d: str = "t2i", gap_ns: int = 1_000_000) -> pd.DataFrame:
    """Runs of payload-carrying segments of one direction separated by less than `gap_ns`.

    Columns: start_ns, end_ns, bytes, segments. Drives the idle ratio: the link is busy during
    a burst, idle between bursts. Read a slice of the table at a time (the burst still open
    at a slice's end goes on into the next); worked out once per segments, direction and gap
    (the accounting, the diagnosis and the ladder plot ask for the same).
    """
    src = as_segments(segs)
    if src is None:
        return pd.DataFrame(columns=["start_ns", "end_ns", "bytes", "segments"])
    # a shallow copy: copy-on-write keeps the cached table as it is whatever the caller
    # changes, and a full-rate minute's 190 000 bursts are not held twice
    return src.cached(("data_bursts", d, gap_ns),
                      lambda: _data_bursts(src, d, gap_ns)).copy(deep=False)


def _data_bursts(segs: Segments, d: str, gap_ns: int) -> pd.DataFrame:
    cols = ["start_ns", "end_ns", "bytes", "segments"]
    parts: list[tuple[np.ndarray, ...]] = []
    run: list[int] | None = None  # the open burst: start, end, bytes, segments
    for sl in payload_slices(segs, d):
        ts = sl["ts_ns"].astype(np.int64, copy=False)
        ln = sl["len"].astype(np.int64)
        new = np.empty(len(ts), bool)
        new[1:] = np.diff(ts) > gap_ns
        new[0] = run is None or int(ts[0]) - run[1] > gap_ns
        first = np.flatnonzero(new)
        if run is not None and not new[0]:  # the open burst goes on into this slice
            upto = int(first[0]) if len(first) else len(ts)
            run = [run[0], int(ts[upto - 1]), run[2] + int(ln[:upto].sum()), run[3] + upto]
        if not len(first):
            continue
        if run is not None:
            parts.append(tuple(np.array([v], np.int64) for v in run))
        last = np.concatenate([first[1:] - 1, [len(ts) - 1]])
        nbytes = np.add.reduceat(ln, first)
        count = last - first + 1
        parts.append((ts[first[:-1]], ts[last[:-1]], nbytes[:-1], count[:-1]))
        run = [int(ts[first[-1]]), int(ts[-1]), int(nbytes[-1]), int(count[-1])]
    if run is not None:
        parts.append(tuple(np.array([v], np.int64) for v in run))
    if not parts:
        return pd.DataFrame(columns=cols)
    return pd.DataFrame({c: np.concatenate([p[k] for p in parts]).astype(np.int64, copy=False)
                         for k, c in enumerate(cols)}, copy=False)


def burst_gap_threshold(segs: SegmentsLike, d: str = "t2i") -> int:
    """Gap that separates bursts: 5x the median spacing of data segments, at least 100 us
    (shorter pauses are the sender's own pacing, not waiting for the other end). Once per
    segments and direction."""
    src = as_segments(segs)
    if src is None:
        return 1_000_000
    med = src.cached(("median_spacing", d), lambda: median_spacing(src, d))
    return 1_000_000 if med is None else int(max(5 * med, 100_000))


def _spacings(segs: SegmentsLike, d: str) -> Iterator[np.ndarray]:
    """The time between each payload segment of `d` and the next, in time order, by slice."""
    last = None
    for sl in payload_slices(segs, d, ("ts_ns",)):
        ts = sl["ts_ns"].astype(np.int64, copy=False)
        yield np.diff(ts, prepend=ts[:1] if last is None else [last])[last is None:]
        last = int(ts[-1])


def median_spacing(segs: SegmentsLike, d: str) -> float | None:
    """The exact median of the spacings (as np.median; None under two), in two passes of
    bounded memory: counts per microsecond-wide bin, then per nanosecond in the one or two
    bins holding the middle ranks (spacings of 67 ms or more counted one by one). The bins
    are counted only as far as some spacing reaches: a full-rate capture's spacings are a few
    microseconds, and a million bins counted for each slice were 25 MB and most of the time.
    65 536 bins at most (0.5 MB): a spacing of a second, which a minute's capture holds, made
    every slice's count a million bins long (16 MB)."""
    top = 1 << 16
    coarse = np.zeros(0, np.int64)
    for x in _spacings(segs, d):
        here = np.bincount(np.minimum(x >> 10, top))
        if len(here) > len(coarse):
            coarse = np.concatenate([coarse, np.zeros(len(here) - len(coarse), np.int64)])
        coarse[:len(here)] += here
    n = int(coarse.sum())
    if n < 2:
        return None
    cum = np.cumsum(coarse)
    ranks = sorted({(n - 1) // 2, n // 2})
    bins = {int(np.searchsorted(cum, r, side="right")) for r in ranks}
    fine: dict[int, np.ndarray] = {b: np.zeros(1024, np.int64) for b in bins if b < top}
    wide: list[np.ndarray] = []
    for x in _spacings(segs, d):
        key = np.minimum(x >> 10, top)
        for b in bins:
            if b < top:
                fine[b] += np.bincount(x[key == b] & 1023, minlength=1024)
            else:
                wide.append(x[key == b])
    big = np.sort(np.concatenate(wide)) if wide else np.zeros(0, np.int64)

    def value(r: int) -> int:
        b = int(np.searchsorted(cum, r, side="right"))
        k = r - int(cum[b] - coarse[b])  # less the spacings in the bins before b
        if b >= top:
            return int(big[k])
        return (b << 10) + int(np.searchsorted(np.cumsum(fine[b]), k, side="right"))
    return float(np.mean([value(r) for r in ((n - 1) // 2, n // 2)]))


def payload_totals(segs: SegmentsLike | None, d: str) -> pd.DataFrame:
    """Per connection (as a group-by would order them), the payload segments of `d`: bytes,
    segments, first_ns, last_ns, largest (bytes of the largest segment). One pass of slices."""
    src = as_segments(segs)
    if src is None or src.empty:
        return pd.DataFrame(columns=["bytes", "segments", "first_ns", "last_ns", "largest"])
    return src.cached(("payload_totals", d), lambda: _payload_totals(src, d)).copy()


def _payload_totals(src: Segments, d: str) -> pd.DataFrame:
    labels = src.conn_labels
    k = len(labels)
    nbytes, count, largest = np.zeros(k, np.int64), np.zeros(k, np.int64), np.zeros(k, np.int64)
    first, last = np.full(k, -1, np.int64), np.full(k, -1, np.int64)
    for sl in payload_slices(src, d, ("ts_ns", "len", "conn")):
        c, ln, ts = sl["conn"].astype(np.int64), sl["len"].astype(np.int64), sl["ts_ns"]
        ok = c >= 0
        c, ln, ts = c[ok], ln[ok], ts[ok]
        nbytes += np.bincount(c, weights=ln, minlength=k).astype(np.int64)
        count += np.bincount(c, minlength=k)
        np.maximum.at(largest, c, ln)
        here, at = np.unique(c, return_index=True)  # each connection's first in time order
        new = first[here] < 0
        first[here[new]] = ts[at[new]]
        here, at = np.unique(c[::-1], return_index=True)
        last[here] = ts[len(ts) - 1 - at]
    order = src.group_order("conn")
    order = order[count[order] > 0]
    return pd.DataFrame({"bytes": nbytes[order], "segments": count[order],
                         "first_ns": first[order], "last_ns": last[order],
                         "largest": largest[order]},
                        index=pd.Index([labels[i] for i in order]))


def gaps_from_bursts(bursts: pd.DataFrame, rate_bps: float | None = None) -> pd.DataFrame:
    """Idle intervals between data bursts: from a burst's last segment (+ its serialisation at
    `rate_bps` when known) to the next burst's first. Columns: start_ns, end_ns, gap_ns."""
    if len(bursts) < 2:
        return no_gaps()
    end = bursts["end_ns"].to_numpy(np.int64)
    if rate_bps:
        per = bursts["bytes"].to_numpy() / np.maximum(bursts["segments"].to_numpy(), 1)
        end = end + (per / rate_bps * 1e9).astype(np.int64)
    a, b = end[:-1], bursts["start_ns"].to_numpy(np.int64)[1:]
    return pd.DataFrame({"start_ns": a, "end_ns": b, "gap_ns": b - a})


def peak_rate(bursts: pd.DataFrame, min_segments: int = 8) -> float | None:
    """Fastest sustained send rate seen (bytes/s over a burst's first to last segment)."""
    b = bursts[bursts["segments"] >= min_segments]
    if b.empty:
        return None
    dur = (b["end_ns"] - b["start_ns"]).to_numpy(np.float64)
    ok = dur > 0
    if not ok.any():
        return None
    per = (b["bytes"].to_numpy() / b["segments"].to_numpy())[ok]
    rates = (b["bytes"].to_numpy()[ok] - per) / (dur[ok] / 1e9)
    return float(np.median(rates))


def idle_ratio(bursts: pd.DataFrame, start_ns: int | None = None, end_ns: int | None = None,
               rate_bps: float | None = None) -> float:
    """Share of [start, end] with no data on the wire. A burst lasts from its first segment to
    its last, plus its last segment's serialisation at `rate_bps` (bytes/s) when known."""
    if bursts.empty:
        return float("nan")
    s = bursts["start_ns"].to_numpy(np.int64)
    e = bursts["end_ns"].to_numpy(np.int64).astype(float)
    if rate_bps:
        per = bursts["bytes"].to_numpy() / np.maximum(bursts["segments"].to_numpy(), 1)
        e = e + per / rate_bps * 1e9
    t0 = s.min() if start_ns is None else start_ns
    t1 = e.max() if end_ns is None else end_ns
    total = t1 - t0
    if total <= 0:
        return float("nan")
    busy = np.clip(e, t0, t1) - np.clip(s, t0, t1)
    return float(1.0 - busy.sum() / total)


def throughput(segs: SegmentsLike | None, d: str = "t2i", bins: int = 200,
               bin_ns: int | None = None) -> pd.DataFrame:
    """Payload bytes per time bin of one direction: t_ns (bin start), bytes, MBps (1e6 B/s)."""
    cols = ["t_ns", "bytes", "MBps"]
    t = payload_totals(segs, d)
    if t.empty:
        return pd.DataFrame(columns=cols)
    t0, t1 = int(t["first_ns"].min()), int(t["last_ns"].max()) + 1
    if bin_ns is None:
        bin_ns = max((t1 - t0) // bins, 100_000)
    n = (t1 - 1 - t0) // bin_ns + 1
    by = np.zeros(n)
    for sl in payload_slices(segs, d):
        idx = (sl["ts_ns"].astype(np.int64) - t0) // bin_ns
        by += np.bincount(idx, weights=sl["len"].astype(np.float64), minlength=n)
    return pd.DataFrame({"t_ns": t0 + np.arange(n, dtype=np.int64) * bin_ns, "bytes": by,
                         "MBps": by / (bin_ns / 1e9) / 1e6})


def outstanding(commands: pd.DataFrame | None) -> pd.DataFrame:
    """Commands outstanding (issued, not yet answered) as a step function: t_ns, outstanding."""
    cols = ["t_ns", "outstanding"]
    if commands is None or commands.empty or "issue_ts_ns" not in commands.columns:
        return pd.DataFrame(columns=cols)
    c = commands.dropna(subset=["issue_ts_ns"])
    iss = c["issue_ts_ns"].to_numpy(np.int64)
    done = (c["resp_ts_ns"].dropna().to_numpy(np.int64) if "resp_ts_ns" in c.columns
            else np.zeros(0, np.int64))
    return in_flight(iss, np.concatenate([done, _ended_by_tag_reuse(c)]))


def in_flight(starts: np.ndarray, ends: np.ndarray) -> pd.DataFrame:
    """How many things are in flight as a step function (t_ns, outstanding), from their start
    and end times: commands on the wire, in the SCSI midlayer, the application's reads. An end
    at the same instant as a start comes first (no false peak); ends of things begun before
    the capture would go below zero, so the count is lifted to start at zero."""
    t = np.concatenate([np.asarray(starts, np.int64), np.asarray(ends, np.int64)])
    step = np.concatenate([np.ones(len(starts), np.int64), -np.ones(len(ends), np.int64)])
    o = np.lexsort((step, t))
    n = np.cumsum(step[o])
    return pd.DataFrame({"t_ns": t[o], "outstanding": n - min(int(n.min()), 0) if len(n)
                         else n})


def scsi_outstanding(events: pd.DataFrame | None) -> pd.DataFrame:
    """SCSI commands outstanding in a kernel initiator's SCSI midlayer (dispatched to the
    driver, not yet done) as a step function: t_ns, outstanding. This is where queue_depth and
    can_queue act; commands dispatched but still inside the initiator (not yet on the wire)
    count here and not in `outstanding`. Data commands (with an LBA) only, like the wire
    series' READ/WRITE. Empty without the midlayer's events."""
    cols = ["t_ns", "outstanding"]
    if events is None or events.empty or "layer" not in events.columns:
        return pd.DataFrame(columns=cols)
    ev = events[_initiator(events) & is_(events["layer"], "scsi").to_numpy()
                & events["event"].isin(["scsi_dispatch", "scsi_done"]).to_numpy(bool)]
    if "lba" in ev.columns:   # data commands only: not the disk's TEST UNIT READY polls
        ev = ev[ev["lba"].notna()]
    if ev.empty or not (ev["event"] == "scsi_dispatch").any():
        return pd.DataFrame(columns=cols)
    t = ev["ts_ns"].to_numpy(np.int64)
    dispatch = (ev["event"] == "scsi_dispatch").to_numpy(bool)
    return in_flight(t[dispatch], t[~dispatch])


def _ended_by_tag_reuse(c: pd.DataFrame) -> np.ndarray:
    """Ends of commands whose response the capture lacks (lost at capture start, say) but
    whose task tag the initiator issued again on the connection: a tag is unique among a
    session's outstanding tasks (RFC 7143 §11.1.2), so the command had ended by then (the
    decoder's rule for its `outstanding` column too). Unanswered, unreused ones stay open."""
    if "resp_ts_ns" not in c.columns or "itt" not in c.columns or not c["resp_ts_ns"].isna().any():
        return np.zeros(0, np.int64)
    key = [k for k in ("conn", "itt") if k in c.columns]
    x = c[key + ["issue_ts_ns", "resp_ts_ns"]].sort_values("issue_ts_ns", kind="stable")
    nxt = x.groupby(key, sort=False, dropna=False)["issue_ts_ns"].shift(-1)
    ended = nxt[x["resp_ts_ns"].isna() & nxt.notna()]
    return ended.to_numpy(np.int64)


def outstanding_ceiling(series: pd.DataFrame) -> dict[str, float]:
    """Highest count outstanding and how it behaves: `flat` when the peak is held for long."""
    if series.empty:
        return {"max": 0, "time_at_max": 0.0, "reached": 0, "flat": False, "mean": float("nan")}
    t = series["t_ns"].to_numpy(np.int64)
    v = series["outstanding"].to_numpy()
    mx = int(v.max())
    dur = np.diff(t, append=t[-1])
    total = t[-1] - t[0]
    at_max = float(dur[v == mx].sum() / total) if total > 0 else 0.0
    mean = float((v * dur).sum() / total) if total > 0 else float("nan")
    reached = int(((v == mx) & np.concatenate([[True], v[:-1] != mx])).sum())
    issued = int((np.diff(v, prepend=0) > 0).sum())
    # A concurrency limit shows as a ceiling hit again and again (never passed): held for a
    # large share of the run, or reached by at least a tenth of all issues - not one spike.
    flat = mx > 0 and reached >= 3 and (at_max >= 0.3 or reached >= 0.1 * issued)
    return {"max": mx, "time_at_max": at_max, "reached": reached, "flat": bool(flat),
            "mean": mean}


def resp_times(commands: pd.DataFrame | None) -> pd.Series:
    """Response times in microseconds of answered commands."""
    if commands is None or commands.empty or "resp_time_us" not in commands.columns:
        return pd.Series(dtype=float)
    return commands["resp_time_us"].dropna().astype(float)


def _reads_that_did_io(sc: pd.DataFrame, events: pd.DataFrame, ini: np.ndarray) -> pd.DataFrame:
    """Where the initiator (`ini`: its rows of `events`) has a block layer: only the reads
    during which the same process queued a bio, i.e. the application's reads of the disk, not
    its shell's or loader's small file reads. Without block events (a user-space initiator),
    every read."""
    if "pid" not in events.columns or "lat_ns" not in sc.columns:
        return sc
    bio = events[ini & is_(events["layer"], "block").to_numpy()
                 & is_(events["event"], "bio_queue").to_numpy()]
    if bio.empty or sc.empty:
        return sc
    keep = np.zeros(len(sc), dtype=bool)
    end = sc["ts_ns"].to_numpy(dtype="int64")
    start = end - sc["lat_ns"].to_numpy(dtype="float64").astype("int64")
    pid = sc["pid"].to_numpy()
    for p, b in bio.groupby("pid"):
        ts = np.sort(b["ts_ns"].to_numpy(dtype="int64"))
        mine = pid == p
        i = np.searchsorted(ts, start[mine], side="left")
        inside = i < len(ts)
        inside[inside] = ts[i[inside]] <= end[mine][inside]
        keep[np.flatnonzero(mine)[inside]] = True
    return sc[keep] if keep.any() else sc


# the probe events' columns block_sizes, scsi_outstanding and app_reads_in_flight read
SIZE_EVENT_COLUMNS = ["ts_ns", "host", "layer", "event", "pid", "lba", "bytes", "lat_ns"]


def _initiator(events: pd.DataFrame) -> np.ndarray:
    """Which events are the initiator's: a mask, not a copy (a minute's events are 360 000
    rows of 32 columns, and the diagnosis took the initiator's half four times)."""
    if "host" not in events.columns:
        return np.ones(len(events), bool)
    return is_(events["host"], "initiator").to_numpy()


def _named(col: pd.Series, pattern: str) -> np.ndarray:
    """Which rows' label matches `pattern` (re.match), tried once per distinct label."""
    codes, labels = label_codes(col)
    ok = np.array([re.match(pattern, str(x)) is not None for x in labels] + [False])
    return ok[codes]  # a missing label (-1) takes the last: no match


def app_reads(events: pd.DataFrame) -> pd.DataFrame:
    """The application's finished reads (read/pread/readv...) on the initiator, not its
    socket chatter; with a block layer, only those that queued block I/O."""
    if "lat_ns" not in events.columns or "bytes" not in events.columns:
        return events.iloc[0:0]
    ini = _initiator(events)
    sc = events[ini & is_(events["layer"], "syscall").to_numpy()
                & events["lat_ns"].notna().to_numpy()
                & _named(events["event"], APP_READ_EVENTS)]
    return _reads_that_did_io(sc, events, ini)


def app_reads_in_flight(events: pd.DataFrame | None) -> int | None:
    """The most application reads of the disk in flight at once, where the initiator has a
    block layer (a kernel initiator: its reads are the application's own). None otherwise."""
    if events is None or events.empty or "layer" not in events.columns:
        return None
    if not (_initiator(events) & is_(events["layer"], "block").to_numpy()).any():
        return None
    sc = app_reads(events)
    if sc.empty:
        return None
    end = sc["ts_ns"].to_numpy(np.int64)
    start = end - sc["lat_ns"].to_numpy(np.float64).astype(np.int64)
    return int(in_flight(start, end)["outstanding"].max())


def block_sizes(commands: pd.DataFrame | None, events: pd.DataFrame | None) -> dict[str, object]:
    """Syscall size vs block request size vs PDU block size (bytes per SCSI command)."""
    out: dict[str, object] = {}

    def mode(s: pd.Series) -> dict[str, float] | None:
        s = s.dropna()
        if s.empty:
            return None
        return {"typical": float(s.mode().iloc[0]), "max": float(s.max()), "count": len(s)}

    if events is not None and not events.empty and "bytes" in events.columns:
        out["syscall"] = mode(app_reads(events)["bytes"])
        done = events["lat_ns"].notna().to_numpy() if "lat_ns" in events.columns \
            else np.ones(len(events), bool)
        bl = events[_initiator(events) & is_(events["layer"], "block").to_numpy() & done]
        out["block"] = mode(bl["bytes"])
    if commands is not None and not commands.empty:
        col = "xfer_bytes" if "xfer_bytes" in commands.columns else "edtl"
        c = commands
        if "cdb_name" in c.columns:  # data transfers only, not INQUIRY / READ CAPACITY
            rw = c["cdb_name"].astype(str).str.match(r"^(READ|WRITE)\(\d+\)$")
            c = c[rw.to_numpy(dtype=bool)] if rw.any() else c
        out["scsi_command"] = mode(c[col]) if col in c.columns else None
    return out


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
        cmd = c["cmd"]
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
    # it five times: a minute's 150 000 spans, 7 MB a copy)
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
    part, so that the join keeps them so: a minute's 160 000 spans as text were 40 MB, held
    by the report and both of its children (sorted categories: ordered as the text would
    be). Parts given as text or categoricals alike."""
    labelled = [f.copy(deep=False) for f in frames]  # the callers' tables left as they are
    for c in ("row", "host", "layer", "label"):
        cats = sorted({str(v) for f in labelled for v in pd.unique(f[c].dropna())})
        for f in labelled:
            col = f[c]
            f[c] = (col.cat.remove_unused_categories().cat.set_categories(cats)
                    if isinstance(col.dtype, pd.CategoricalDtype)
                    else pd.Categorical(col, categories=cats))
    return pd.concat(labelled, ignore_index=True)


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
        if ok.all():  # no copies: with a key per PDU, each array is 5 MB a 630 000 PDUs
            yield SpanArrays(name, keys, starts, ends, hi)
        else:
            yield SpanArrays(name, keys[ok], starts[ok], ends[ok], hi[ok])


def key_ranges(blocks: Iterable[pd.DataFrame], d: str, key: str,
               base_of: Callable[[str], int | None]
               ) -> dict[str, tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
    """Per connection whose stream has a first byte (`base_of`; None: not seen), the range of
    the stream each `key` value's data PDUs in direction `d` cover: (base, keys rising, lowest
    start, highest end; unwrapped from base in the PDUs' order). A block's PDUs of one key in
    a row are one range at once: with 8 KiB Data-In PDUs a command has 512, and a table of
    every PDU, read whole, was 65 MB of the pass's peak on a 30 s capture (630 000 PDUs)."""
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
    ev = ev[~ev.set_index(["host", "layer"]).index.map(has_lat).to_numpy(dtype=bool)]
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
