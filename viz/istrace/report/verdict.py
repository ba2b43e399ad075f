"""The verdict: what limited the transfer, with its share of the time, the numbers behind it,
the other causes, what would help (with a predicted gain where a model exists), and what the
capture could not tell. Written beside report.html as verdict.json (docs/schema.md §8).

The time accounting is istrace.report.accounting; the models are istrace.model.study.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from istrace.capture import orderstat
from istrace.capture.load import Capture
from istrace.capture.meta import meta_number, one_way_ms
from istrace.capture.segsource import payload_slices
from istrace.capture.slices import SLICE_ROWS
from istrace.measure.bursts import burst_gap_threshold, data_bursts, peak_rate
from istrace.measure.direction import data_dir, sender_segs
from istrace.measure.outstanding import outstanding, outstanding_ceiling, resp_times
from istrace.measure.payload import payload_totals
from istrace.measure.spans import SpanArrays, data_spans, spans_frame
from istrace.report import accounting, checks
from istrace.report.advice import what_would_help
from istrace.system import freed
from istrace.track import tracker as track
from istrace.track.echo_rtt import echo_rtt_ms

SCHEMA = 1
# cause -> (layer, words for the report)
CAUSES: dict[str, tuple[str, str]] = {
    "initiator_concurrency": ("initiator", "too few commands outstanding at the initiator "
                              "(its queue depth, or the application's own)"),
    "iscsi_r2t": ("iscsi", "iSCSI R2T round trips (WRITE data waits for the target's R2T)"),
    "target_service": ("target", "the target's service time (command in to data out)"),
    "tcp_rwnd": ("tcp", "the receiver's TCP window"),
    "tcp_cwnd": ("tcp", "the sender's congestion control (congestion window or pacing rate)"),
    "tcp_sndbuf": ("tcp", "the sender's socket send buffer"),
    "tcp_window": ("tcp", "a TCP window (congestion window or send buffer; not told apart "
                   "without probe events)"),
    "tcp_sndbuf_or_app": ("tcp", "the sender's send buffer, or the sending application not "
                          "writing (not told apart without the kernel's clocks, ss -ti)"),
    "tcp_sndbuf_or_pacing": ("tcp", "the sender's send buffer or its pacing rate (not told "
                             "apart without the kernel's clocks, ss -ti)"),
    "tcp_loss_recovery": ("tcp", "TCP loss (recovery, and the congestion window cut by it)"),
    "network_capacity": ("network", "the network's capacity (the link is full)"),
    "network_queueing": ("network", "queueing delay on the path"),
    "host_cpu_target": ("host", "the target host's CPU"),
    "host_cpu_initiator": ("host", "the initiator host's CPU"),
    "sending_unexplained": ("unknown", "sending below the known capacity, cause not visible"),
    "idle_unexplained": ("unknown", "the sender idle with nothing to send (no iSCSI commands "
                         "decoded: the initiator not asking and the target not answering look "
                         "alike)"),
    "unknown": ("unknown", "unknown"),
}


def cause_words(cause: str) -> str:
    """A cause in the words the report shows (its id stays in verdict.json and tooltips)."""
    return CAUSES.get(cause, ("unknown", cause))[1]


# A cause with at least this share of the time is named as secondary.
SECONDARY = 0.15
# A primary cause below this share is reported as unsure.
CONFIDENT = 0.4
# Causes that name a class of limits the capture could not split: unsure as the primary.
AMBIGUOUS = {
    "tcp_window": "window-limited without probe events: the congestion window and the send "
                  "buffer cannot be told apart",
    "tcp_sndbuf_or_app": "data to send and neither window full, without the kernel's clocks "
                         "(ss -ti): a full send buffer or the sender not writing",
    "tcp_sndbuf_or_pacing": "data held in the sender's socket with neither window full, "
                            "without the kernel's clocks (ss -ti): a full send buffer or the "
                            "pacing rate",
    "idle_unexplained": "the sender had nothing to send and no iSCSI commands were decoded "
                        "(PDU headers cut or not captured): too few commands outstanding or a "
                        "slow target cannot be told apart",
    "sending_unexplained": "the sender was busy below any known capacity: the path's capacity "
                           "or the hosts' CPU (no rate set, no host CPU samples)",
}


def capacity(cap: Capture) -> tuple[float | None, str]:
    """Bytes/s of payload the path can carry, and where that figure comes from, as the checks
    before the verdict leave it (unknown when the capture contradicts the estimate)."""
    return inputs_checked(cap).capacity


def inputs_checked(cap: Capture) -> checks.Checked:
    """The cross-checks of the capture's inputs (istrace.report.checks), given the measures
    of its data they hold the capacity figure to."""
    def peak() -> float | None:  # the report's "peak burst rate" (bursts made once, cached)
        d = data_dir(cap)
        segs = sender_segs(cap, d)
        return None if segs is None or segs.empty else \
            peak_rate(data_bursts(segs, d, burst_gap_threshold(segs, d)))
    return checks.of(cap, lambda: path_capacity(cap), peak)


def path_capacity(cap: Capture) -> tuple[float | None, str]:
    """Bytes/s of payload the path can carry, and where that figure comes from: the run's
    settings (meta.json), else an estimate from the capture (checks holds it to the bursts)."""
    tb = cap.meta.get("testbed") if isinstance(cap.meta.get("testbed"), dict) else {}
    rates = [float(r) for r in ((tb or {}).get("rate_mbit"), (tb or {}).get("nic_rate_mbit"))
             if isinstance(r, int | float) and r > 0]
    if rates:
        # Payload of a full 1500-byte frame: 1448 of 1514 bytes on the wire.
        return min(rates) * 1e6 / 8 * 1448 / 1514, "testbed rate setting (meta.json)"
    sock = meta_number(cap.meta, "socket_Bps", "socket_bytes_per_s")
    mbps = meta_number(cap.meta, "socket_MBps", "socket_mbps_MB")
    if sock is None and mbps is not None:
        sock = mbps * 1e6
    if sock:
        return sock, "plain-socket baseline measured on the same path (meta.json)"
    if tb:
        return None, "unknown (the testbed's path has no rate limit: the hosts set the pace)"
    est = dispersion_capacity(cap)
    if est:
        return est, checks.ESTIMATED
    return None, "unknown"


def dispersion_capacity(cap: Capture, rows: int = SLICE_ROWS) -> float | None:
    """The bottleneck's rate as the receiver saw it: full-sized data segments arriving back to
    back are spaced by their serialisation at the slowest link (packet pairs); the median of
    those pair rates (on a 200 Mbit/s testbed path: 24.1 MB/s for 23.9 of payload; the 90th
    percentile read 40, jitter in the path squeezing some pairs together)."""
    d = data_dir(cap)
    recv = cap.segs.get("initiator" if d == "t2i" else "target")
    if recv is None or recv.empty:
        return None
    # the receiver's data segments in time order, a slice at a time (not a sorted copy of
    # millions of rows): each pair of neighbours, the last segment of a slice carried into
    # the next
    totals = payload_totals(recv, d)
    if int(totals["segments"].sum()) < 100:
        return None
    mss = int(totals["largest"].max())
    rates, carry = [], None
    for sl in payload_slices(recv, d, ("ts_ns", "len", "conn"), rows=rows):
        if carry is not None:
            sl = {k: np.concatenate([carry[k], v]) for k, v in sl.items()}
        ts, ln, cc = sl["ts_ns"].astype(np.int64), sl["len"].astype(np.float64), sl["conn"]
        same = (cc[1:] == cc[:-1]) & (ln[1:] >= mss)
        dt = np.diff(ts).astype(np.float64)
        ok = same & (dt > 0)
        rates.append(ln[1:][ok] / (dt[ok] / 1e9))
        carry = {k: v[-1:] for k, v in sl.items()}
    r = np.concatenate(rates)
    if len(r) < 50:
        return None
    return float(np.median(r))


def rtt_stats(cap: Capture, d: str) -> dict[str, float | None]:
    """Base (the testbed's round trip, else the 5th percentile), minimum and median round-trip
    time of the data direction (ms). A lone tiny sample (an ACK of something else) is not the
    path's round trip, hence the percentile. The tracker's samples (data to its ACK) are the
    path's only at the data sender; without the sender's pcap, TCP timestamp echoes at the
    receiver say it (istrace.track.echo_rtt)."""
    owd = one_way_ms(cap.meta)
    sender = "target" if d == "t2i" else "initiator"
    r = None
    if cap.track is not None and not cap.track.samples.empty:
        s = cap.track.samples
        r = s.order_stats("rtt_us", (0.05,), dir=d, host=sender)  # an ACK in tens has one
        if r.n < 10:
            r = s.order_stats("srtt_us", (0.05,), dir=d, host=sender)
    if r is not None and r.n >= 10:
        p5, lo, mid = r.quantiles[0.05] / 1e3, r.min / 1e3, r.median / 1e3
    else:
        for host in cap.segs:
            e = echo_rtt_ms(cap.segs[host],
                            "i2t" if host == "initiator" else "t2i")
            if e["p5_ms"] is not None:
                p5, lo, mid = e["p5_ms"], e["min_ms"], e["p50_ms"]
                break
        else:
            return {"base_ms": None, "min_ms": None, "p50_ms": None}
    base = max(p5, 2 * owd) if owd else p5
    return {"base_ms": base, "min_ms": lo, "p50_ms": mid}


def _retransmits(cap: Capture, d: str) -> int:
    return 0 if cap.track is None else track.retransmit_count(cap.track, d)


def _loss_states(cap: Capture, d: str, conn: str) -> pd.DataFrame | None:
    if cap.track is None or cap.track.states.empty:
        return None
    st = cap.track.states.read(dir=d, conn=conn)
    if (st["source"] == "exact").any():
        st = st[st["source"] == "exact"]
    return st


def _first_loss(cap: Capture, d: str, conn: str) -> int | None:
    """Time of the connection's first retransmission in the data direction (None: none)."""
    if cap.track is None:
        return None
    r = cap.track.events.read(["ts_ns"], kind="retransmit", dir=d, conn=conn)["ts_ns"].dropna()
    return int(r.min()) if not r.empty else None


def _sock_rows(cap: Capture, sender: str, conn: str) -> pd.DataFrame | None:
    sock = getattr(cap, "sockstats", None)
    if not isinstance(sock, pd.DataFrame) or sock.empty or "conn" not in sock.columns:
        return None
    s = sock[(sock["host"].astype(str) == sender) & (sock["conn"].astype(str) == conn)]
    return s if not s.empty else None


def _pdu_spans(parts: list[SpanArrays], conn: str) -> tuple[np.ndarray, np.ndarray] | None:
    """[first, last] segment of each data PDU of `conn` at the sender, sorted by start."""
    mine = [p for p in parts if p.conn == conn]
    if not mine or not sum(len(p.first) for p in mine):
        return None
    # the pass's own arrays when they are one connection's and in order already (a PDU's
    # span each: 630 000 of them on 30 s of 8 KiB Data-In PDUs, each copy 5 MB)
    start = mine[0].first if len(mine) == 1 else np.concatenate([p.first for p in mine])
    end = mine[0].last if len(mine) == 1 else np.concatenate([p.last for p in mine])
    if (start[1:] >= start[:-1]).all():
        return start, end
    order = np.argsort(start, kind="stable")  # equal starts (PDUs sharing a segment) in order
    return start[order], end[order]


def _data_on_wire(cmds: pd.DataFrame, spans: pd.DataFrame) -> pd.DataFrame:
    """Commands with their data phase as the segments carrying their data PDUs' bytes took it
    at the sender (`spans`: spans_frame's): a PDU's time is its header's, so a 256 KiB
    Data-In would otherwise end where its payload starts."""
    if spans.empty or "cmd" not in cmds.columns:
        return cmds
    by = spans.groupby("cmd").agg(a=("start_ns", "min"), b=("end_ns", "max"))
    out = cmds.copy()
    key = pd.to_numeric(out["cmd"], errors="coerce")
    a = key.map(by["a"])
    b = key.map(by["b"])
    out["first_data_ts_ns"] = a.where(a.notna(), out.get("first_data_ts_ns"))
    out["last_data_ts_ns"] = b.where(b.notna(), out.get("last_data_ts_ns"))
    return out


def account(cap: Capture) -> accounting.Accounting | None:
    """Time accounting of the main data direction over every connection that carried data."""
    d = data_dir(cap)
    segs = sender_segs(cap, d)
    if segs is None or segs.empty:
        return None
    sender = "target" if d == "t2i" else "initiator"
    acc = accounting.Accounting(direction=d, sender=sender)
    cmds, cmd_source = accounting.sender_commands(cap, d)
    if cmds is None:
        acc.unsure.append("no iSCSI commands decoded: time between commands cannot be told "
                          "from time inside them")
    elif "other end" in cmd_source and d == "t2i":
        # READ commands timed where they left the initiator, data timed where it arrived: a
        # command reaches the target, and the target's answer this capture point, one round
        # trip later. Not knowing it, that round trip would read as the target's service.
        rtt = rtt_stats(cap, d)["base_ms"]
        if rtt and "issue_ts_ns" in cmds.columns:
            cmds = cmds.copy()
            cmds["issue_ts_ns"] = cmds["issue_ts_ns"] + int(rtt * 1e6)
            acc.notes.append(f"command times from {cmd_source}: moved by the round trip, "
                             f"{rtt:.2f} ms")
        else:
            acc.unsure.append("commands timed at the initiator only and no round-trip time: "
                              "the target's service time cannot be told from the path's")
    cap_bps, _ = capacity(cap)
    per_conn = payload_totals(segs, d)
    phase = (int(per_conn["first_ns"].min()), int(per_conn["last_ns"].max())) \
        if not per_conn.empty else None
    cpu = accounting.cpu_saturation(cap, phase)
    acc.cpu = cpu
    # The PDUs decoded where the segments were taken (the receiver's, without the sender's
    # pcap): their data phases, R2Ts and spans are all in that capture point's time.
    seg_host = next((h for h, s in cap.segs.items() if s is segs), sender)
    if cmds is not None:
        cmds = _data_on_wire(cmds, spans_frame(data_spans(cap, seg_host), "data",
                                               seg_host))
    pdu_spans = data_spans(cap, seg_host, "pdu")
    # the R2Ts' times (only a write has them)
    pdus = cap.pdus.read(seg_host, ["ts_ns", "conn", "opcode_name"]) if d == "i2t" else None
    totals = per_conn["bytes"]
    link_busy = None
    if cap_bps and per_conn["segments"].sum() > 1:
        t0 = int(per_conn["first_ns"].min())
        if cmds is not None and "issue_ts_ns" in cmds.columns and cmds["issue_ts_ns"].notna().any():
            t0 = min(t0, int(cmds["issue_ts_ns"].min()))
        span = int(per_conn["last_ns"].max()) - t0
        link_busy = float(totals.sum()) / cap_bps / (span / 1e9) if span > 0 else None
    present = segs.conns()
    for conn, nbytes in totals.items():
        if nbytes < 0.01 * totals.sum():
            continue
        c = segs if len(present) == 1 else segs.only(str(conn))  # one: no copy
        cc = cmds[cmds["conn"].astype(str) == str(conn)] if cmds is not None \
            and "conn" in cmds.columns else cmds
        r2t = np.zeros(0, np.int64)
        if d == "i2t" and pdus is not None and "opcode_name" in pdus.columns:
            p = pdus[(pdus["opcode_name"] == "R2T") & (pdus["conn"].astype(str) == str(conn))]
            r2t = np.sort(p["ts_ns"].dropna().to_numpy(np.int64))
        samples = cap.track.samples if cap.track is not None else None
        accounting.account_connection(acc, c, cc, r2t, samples, _loss_states(cap, d, str(conn)),
                                      _sock_rows(cap, sender, str(conn)), cap_bps, cpu,
                                      link_busy, _first_loss(cap, d, str(conn)),
                                      _pdu_spans(pdu_spans, str(conn)), conn=str(conn))
        freed.give_back()  # a connection's passes over its segments, before the next one's
    return acc


def _evidence(cap: Capture, acc: accounting.Accounting) -> dict[str, Any]:
    d = acc.direction
    cmds = cap.main_commands()
    series = outstanding(cmds)
    ceil = outstanding_ceiling(series)
    ev: dict[str, Any] = {"direction": d, "sender": acc.sender,
                          "connections": len(acc.connections)}
    span_s = acc.span_ns / 1e9 if acc.span_ns else float("nan")
    ev["throughput_MBps"] = acc.bytes / span_s / 1e6 if span_s == span_s and span_s else None
    cap_bps, cap_src = capacity(cap)
    ev["capacity_MBps"] = cap_bps / 1e6 if cap_bps else None
    ev["capacity_source"] = cap_src
    ev["outstanding_max"] = int(ceil["max"])
    ev["outstanding_flat"] = bool(ceil["flat"])
    if not series.empty:
        ev["outstanding_mean"] = ceil["mean"] if ceil["mean"] == ceil["mean"] else None
    rt = resp_times(cmds)
    ev["response_ms_p50"] = float(rt.median()) / 1e3 if not rt.empty else None
    sizes = cmds["xfer_bytes"].dropna() if cmds is not None and "xfer_bytes" in cmds.columns \
        else pd.Series(dtype=float)
    ev["command_bytes"] = float(sizes.median()) if not sizes.empty else None
    ev["r2ts_per_command"] = float(cmds["r2ts"].mean()) if cmds is not None \
        and "r2ts" in cmds.columns and len(cmds) else None
    ev.update({f"rtt_{k}": v for k, v in rtt_stats(cap, d).items()})
    ev["one_way_ms"] = one_way_ms(cap.meta)
    segs = sender_segs(cap, d)
    per_conn = payload_totals(segs, d)
    nseg = int(per_conn["segments"].sum())
    rtx = _retransmits(cap, d)
    ev["retransmits"] = rtx
    ev["loss_rate"] = rtx / nseg if nseg else None
    phase = (int(per_conn["first_ns"].min()), int(per_conn["last_ns"].max())) if nseg else None
    ev["cpu_use"] = accounting.cpu_use(cap, phase)
    ev["cpu_throttled"] = accounting.cpu_throttled(cap, phase)
    tb = cap.meta.get("testbed") if isinstance(cap.meta.get("testbed"), dict) else {}
    # the namespace testbed and the VM testbed: both ends share one kernel and its CPUs
    ev["one_machine"] = (tb or {}).get("mode") in ("netns", "vm")
    ev["rwnd_median"] = ev["cwnd_median"] = ev["rwnd_max"] = ev["sndbuf_max"] = None
    ev["rcvbuf_max"] = None
    if cap.track is not None and not cap.track.samples.empty:
        s = cap.track.samples
        # millions of values, a chunk at a time: never all held
        n, _, top = orderstat.count_range(lambda: s.values("rwnd", dir=d))
        if n:
            ev["rwnd_max"] = top
            ev["rwnd_median"] = orderstat.median(lambda: s.values("rwnd", dir=d), n)
        cwnd = s.column("cwnd", dir=d, source="exact")  # probe events: few
        if len(cwnd):
            ev["cwnd_median"] = float(np.median(cwnd))
    sock = getattr(cap, "sockstats", None)
    if isinstance(sock, pd.DataFrame) and "sndbuf_bytes" in sock.columns:
        sb = sock[sock["host"].astype(str) == acc.sender]["sndbuf_bytes"].dropna()
        if not sb.empty:
            ev["sndbuf_max"] = float(sb.max())
    if isinstance(sock, pd.DataFrame) and "rcvbuf_bytes" in sock.columns:
        rb = sock[sock["host"].astype(str) != acc.sender]["rcvbuf_bytes"].dropna()
        if not rb.empty:
            ev["rcvbuf_max"] = float(rb.max())
    return ev


def _queueing(ev: dict[str, Any]) -> float | None:
    """Share of the median round trip spent queued (RTT above its base), when large. The base
    is the path's own round trip when the testbed set it, else the 5th-percentile RTT."""
    lo, mid = ev.get("rtt_base_ms"), ev.get("rtt_p50_ms")
    if not lo or not mid or mid <= 0:
        return None
    q = (mid - lo) / mid
    return q if (mid - lo) >= max(1.0, lo) else None


# The cause a host's CPU takes over from once saturated: the target's service time, the
# workload's missing commands; (whose CPU, the cause it becomes, in words).
CPU_TWIN = {"target_service": ("target", "host_cpu_target", "the target's"),
            "initiator_concurrency": ("initiator_workload", "host_cpu_initiator",
                                      "the workload's")}
# A CPU this close below saturation may have been saturated: its measure is coarse (ticks).
CPU_NEAR = 0.6


def cpu_near(primary: str, cpu: dict[str, float]) -> str | None:
    """Why a verdict of `primary` is unsure when the CPU that would be its cause instead was
    near, but below, saturation; None when it was not."""
    twin = CPU_TWIN.get(primary)
    level = cpu.get(twin[0]) if twin else None
    if twin is None or level is None or not CPU_NEAR <= level < accounting.CPU_SATURATED:
        return None
    return (f"{twin[2]} CPU was at {level * 100:.0f}% of what it may use, near saturation: "
            f"the time may have been due to {cause_words(twin[1])}")


def decide(cap: Capture) -> dict[str, Any]:
    """The verdict as a dict (the content of verdict.json)."""
    found = inputs_checked(cap)  # each failed check makes the verdict unsure
    out: dict[str, Any] = {"schema": SCHEMA, "primary": None, "secondary": [], "shares": {},
                           "unsure": True, "unsure_why": [], "help": [],
                           "missing": list(dict.fromkeys([*cap.missing, *found.missing])),
                           "caveats": [c.as_dict() for c in found.caveats], "evidence": {}}
    acc = account(cap)
    if acc is None or not acc.time_ns:
        out["primary"] = {"cause": "unknown", "layer": "unknown", "share": None,
                          "text": "unknown (no data segments to account)"}
        out["unsure_why"].append("no data segments in either pcap")
        out["unsure_why"] += [c.text for c in found.caveats]
        out["text"] = "unknown (no data segments)."
        return out
    shares = acc.shares()
    ev = _evidence(cap, acc)
    out["evidence"] = ev
    out["shares"] = {k: round(v, 4) for k, v in shares.items()}
    out["span_s"] = acc.span_ns / 1e9
    out["notes"] = acc.notes
    unsure = list(dict.fromkeys([*acc.unsure, *(c.text for c in found.caveats)]))

    ranked = [k for k in shares if k != "sending_unexplained"] + \
        (["sending_unexplained"] if "sending_unexplained" in shares else [])
    primary = ranked[0]
    share = shares.get(primary, 0.0)
    if primary in AMBIGUOUS:
        unsure.append(AMBIGUOUS[primary])
    near = cpu_near(primary, acc.cpu)
    if near:
        unsure.append(near)
    if share < CONFIDENT:
        unsure.append(f"the largest cause holds only {share * 100:.0f}% of the time")
    runner_up = next((shares[k] for k in ranked[1:]), 0.0)
    if share - runner_up < 0.1:
        unsure.append(f"two causes hold nearly equal shares ({share * 100:.0f}% and "
                      f"{runner_up * 100:.0f}%)")
    # a secondary cause the capture could not split: a caveat, not a reason to be unsure
    out["caveats"] += [{"code": k, "text": AMBIGUOUS[k]} for k in ranked[1:]
                       if k in AMBIGUOUS and shares[k] >= SECONDARY]
    layer, words = CAUSES.get(primary, ("unknown", primary))
    out["primary"] = {"cause": primary, "layer": layer, "share": round(share, 4),
                      "text": words}
    sec = [k for k in ranked if k != primary and shares[k] >= SECONDARY
           and k != "sending_unexplained"]
    q = _queueing(ev)
    if q is not None and primary != "network_queueing":
        sec.append("network_queueing")
        out["shares_of_rtt"] = {"network_queueing": round(q, 4)}
    out["secondary"] = [{"cause": k, "layer": CAUSES.get(k, ("unknown", k))[0],
                         "share": round(shares.get(k, q or 0.0), 4),
                         "text": CAUSES.get(k, ("unknown", k))[1]} for k in sec]
    out["unsure"] = bool(unsure)
    out["unsure_why"] = unsure
    out["help"] = what_would_help(primary, [s["cause"] for s in out["secondary"]], shares, ev)
    out["connections"] = _per_connection(acc)
    out["text"] = limited_by(out)
    return out


def _per_connection(acc: accounting.Accounting) -> list[dict[str, Any]]:
    """Each connection's own primary cause and shares (verdict.json `connections`): with
    several sessions one may be held by a cause the sum hides."""
    rows = []
    for conn, pc in acc.per_connection.items():
        total = sum(pc["time_ns"].values())
        if total <= 0:
            continue
        shares = {k: round(v / total, 4)
                  for k, v in sorted(pc["time_ns"].items(), key=lambda kv: -kv[1])}
        span = pc["span_ns"] / 1e9
        rows.append({"conn": conn, "direction": acc.direction, "sender": acc.sender,
                     "primary": next(iter(shares)), "shares": shares, "bytes": pc["bytes"],
                     "throughput_MBps": round(pc["bytes"] / span / 1e6, 3) if span > 0
                     else None})
    return rows


def limited_by(v: dict[str, Any]) -> str:
    """The report's "Limited by" sentence from a verdict."""
    p = v["primary"]
    ev = v.get("evidence", {})
    share = p.get("share")
    pct = f"{share * 100:.0f}% of the time" if isinstance(share, float) else "?"
    if p["cause"] == "initiator_concurrency":
        n = ev.get("outstanding_max")
        s = (f"application / protocol-limited: {pct} the sender had nothing to send and the "
             f"initiator had not sent the next command (never more than {n} outstanding)")
    else:
        s = f"{p['text']}: {pct}"
    if p["cause"].startswith("host_cpu_"):
        use = (ev.get("cpu_use") or {}).get(p["cause"].removeprefix("host_cpu_"), {})
        who = ", ".join(f"{k.replace('_', ' ')} {x * 100:.0f}% busy" for k, x in use.items())
        held = (ev.get("cpu_throttled") or {}).get(p["cause"].removeprefix("host_cpu_"))
        if held is not None:
            who += f", held at its CPU quota in {held * 100:.0f}% of periods"
        if who:
            s += f" ({who}" + ("; both ends and the emulated path share this machine's CPUs"
                               if ev.get("one_machine") else "") + ")"
    if v.get("secondary"):
        s += "; then " + ", ".join(
            f"{x['text']} ({x['share'] * 100:.0f}%"
            + (" of the round trip)" if x["cause"] == "network_queueing" else ")")
            for x in v["secondary"])
    if v.get("unsure"):
        s += " (unsure: " + "; ".join(v["unsure_why"]) + ")"
    return s + "."
