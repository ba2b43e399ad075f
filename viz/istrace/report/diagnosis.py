"""The diagnosis of a capture: the numbers the study drew by hand, and the verdict.

`diagnose` returns every number (tested directly) plus sentences for the report; it says
which inputs were missing rather than guessing.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import pandas as pd
from istrace.capture.load import Capture
from istrace.capture.meta import meta_number, one_way_ms
from istrace.measure.bursts import (
    burst_gap_threshold,
    data_bursts,
    gaps_from_bursts,
    idle_ratio,
    peak_rate,
)
from istrace.measure.direction import data_dir, sender_segs
from istrace.measure.outstanding import (
    app_reads_in_flight,
    outstanding,
    outstanding_ceiling,
    scsi_outstanding,
)
from istrace.measure.sizes import SIZE_EVENT_COLUMNS, block_sizes, human_size
from istrace.model import study
from istrace.report import verdict
from istrace.track import tracker as track


def fmt_bytes(n: float | None) -> str:
    if n is None or pd.isna(n):
        return "?"
    return human_size(n)


def _tunables(meta: dict[str, Any]) -> dict[str, Any]:
    """The kernel stack's settings in force (a --kernel capture's testbed block)."""
    tb = meta.get("testbed") if isinstance(meta.get("testbed"), dict) else {}
    tun = (tb or {}).get("tunables")
    return tun if isinstance(tun, dict) else {}


def split_cause(meta: dict[str, Any], largest_request: float) -> str:
    """Why the block layer cut a read: the split size in force when it matches."""
    kb = _tunables(meta).get("max_sectors_kb")
    if isinstance(kb, int | float) and kb > 0 and largest_request <= kb * 1024 \
            and largest_request > kb * 1024 / 2:
        return f"max_sectors_kb = {kb:g} (the block device's request size limit, meta.json)"
    return "the block layer's request size limit (max_sectors_kb or the device's limits)"


def _reads(n: int) -> str:
    return f"{n} read" + ("" if n == 1 else "s")


def ceiling_cause(meta: dict[str, Any], n: int, app_in_flight: int | None = None) -> str:
    """Which concurrency limit sits at `n` outstanding: the settings recorded in meta.json
    that equal it (the kernel clamps queue_depth to can_queue, so both may), the
    application's own parallelism (its reads in flight, seen at the system call layer), or
    both when they coincide (then neither alone can be blamed)."""
    tun = _tunables(meta)
    cmds_max = f" {tun['cmds_max']}" if "cmds_max" in tun else ""
    names = [f"{what} = {n}" for key, what in
             (("queue_depth", "the SCSI device's queue_depth"),
              ("can_queue", f"the iSCSI host's can_queue (cmds_max{cmds_max})"))
             if tun.get(key) == n]
    setting = " and ".join(names) + " (meta.json)" if names else None
    app = app_in_flight == n
    if setting and app:
        return (f"{setting}, and the application never had more than {_reads(n)} in flight "
                "either (both limit it)")
    if setting:
        return setting
    if app:
        qd = tun.get("queue_depth")
        more = f"; the SCSI device's queue_depth of {qd} would admit more" \
            if isinstance(qd, int) and qd > n else ""
        return (f"the application: at most {_reads(n)} in flight at once (its own "
                f"parallelism{more})")
    return "a concurrency limit (queue depth, can_queue, or the workload's own)"


def diagnose(cap: Capture) -> dict[str, Any]:
    """Every number of the verdict (tested directly), plus sentences for the report."""
    out: dict[str, Any] = {"findings": [], "warnings": list(cap.warnings),
                           "missing": list(cap.missing)}
    say = out["findings"].append
    v = verdict.decide(cap)
    out["verdict"] = v
    out["limit"] = v["text"]
    # the verdict's lines apart from the measurements: the page shows them once, at the top
    out["verdict_lines"] = ["Limited by: " + v["text"]]
    for h in v["help"]:
        pred = (f" -> predicted {h['predicted_MBps']:.1f} MB/s (now {h['now_MBps']:.1f}; "
                f"{h['model']})" if h.get("predicted_MBps") and h.get("now_MBps") else "")
        out["verdict_lines"].append(f"What would help ({verdict.cause_words(h['cause'])}): "
                                    f"{h['change']}{pred}.")
    cmds = cap.main_commands()
    d = data_dir(cap)
    out["data_dir"] = d
    events = cap.held_events(SIZE_EVENT_COLUMNS)

    sizes = block_sizes(cmds, events)
    out["sizes"] = sizes
    parts = []
    for key, name in (("syscall", "system call"), ("block", "block request"),
                      ("scsi_command", "SCSI command (PDU block size)")):
        size = sizes.get(key)
        if size:
            parts.append(f"{name} {fmt_bytes(size['typical'])} (x{size['count']})")
        else:
            parts.append(f"{name} unknown")
    msg = "Sizes: " + " -> ".join(parts) + "."
    if sizes.get("syscall") and not sizes.get("block"):
        msg += (" (No block layer on the initiator: a user-space initiator, so its read "
                "syscalls are its own file/socket I/O, not the application's request size.)")
    sc, pb, bl = sizes.get("syscall"), sizes.get("scsi_command"), sizes.get("block")
    if sc and bl and bl["typical"] and sc["typical"] > bl["typical"]:
        split = split_cause(cap.meta, bl["max"])
        out["split"] = {"read_bytes": sc["typical"], "request_bytes": bl["typical"],
                        "requests_per_read": sc["typical"] / bl["typical"], "cause": split}
        msg += (f" One {fmt_bytes(sc['typical'])} read became "
                f"{sc['typical'] / bl['typical']:.0f} block requests of "
                f"{fmt_bytes(bl['typical'])}: {split}.")
    elif sc and pb and pb["typical"] and sc["typical"] > pb["typical"]:
        msg += (f" Each {fmt_bytes(sc['typical'])} read() is cut into "
                f"{sc['typical'] / pb['typical']:.0f} SCSI commands of "
                f"{fmt_bytes(pb['typical'])}: every one pays the round trip.")
    say(msg)

    # A kernel initiator's limits (queue_depth, can_queue) act in its SCSI midlayer, where a
    # command waits from dispatch to done: count there when its events were traced, since
    # dispatched commands may not have reached the wire yet.
    series = scsi_outstanding(events)
    where = "SCSI commands outstanding in the initiator's SCSI midlayer"
    if series.empty:
        series = outstanding(cmds)
        where = "Commands outstanding"
    ceil = outstanding_ceiling(series)
    out["outstanding"] = ceil
    if not series.empty:
        s = (f"{where}: at most {ceil['max']}, held {ceil['time_at_max'] * 100:.0f}%"
             f" of the time, reached {ceil['reached']} times.")
        if ceil["flat"]:
            cause = ceiling_cause(cap.meta, int(ceil["max"]),
                                  app_reads_in_flight(events))
            out["ceiling_cause"] = cause
            s += f" A flat ceiling at {ceil['max']}: {cause} caps parallelism."
        say(s)

    segs = sender_segs(cap, d)
    if segs is not None:
        bursts = data_bursts(segs, d, burst_gap_threshold(segs, d))
        rate_meta = meta_number(cap.meta, "socket_Bps", "socket_bytes_per_s")
        mbps = meta_number(cap.meta, "socket_MBps", "socket_mbps_MB")
        if rate_meta is None and mbps is not None:
            rate_meta = mbps * 1e6
        rate = rate_meta or peak_rate(bursts)
        out["rate_Bps"] = rate
        out["rate_source"] = "socket throughput from meta.json" if rate_meta else \
            "peak burst rate of this capture (no socket baseline measured)"
        idle = idle_ratio(bursts, rate_bps=rate)
        out["idle_ratio"] = idle
        out["bursts"] = len(bursts)
        delay_ms = one_way_ms(cap.meta)
        owd = (delay_ms / 1e3) if delay_ms is not None else None
        if owd is None and cap.track is not None:
            r = cap.track.samples.order_stats("rtt_us")
            owd = r.median / 2e6 if r.n else None
            out["delay_source"] = "half the median RTT (no testbed delay in meta.json)"
        else:
            out["delay_source"] = "meta.json testbed delay"
        out["one_way_s"] = owd
        pdu = pb["typical"] if pb else None
        model = study.idle_ratio(pdu, owd, rate) if pdu and owd is not None and rate \
            else float("nan")
        out["model_idle_ratio"] = model
        within, between = _idle_split(cap, d, bursts)
        out["idle_within_ns"], out["idle_between_ns"] = within, between
        out["idle_span_ns"] = int(bursts["end_ns"].max() - bursts["start_ns"].min()) \
            if len(bursts) else 0
        say(idle_sentence(out, d))
        if not np.isnan(model) and owd is not None and rate:  # (as the model needs)
            say(f"The study's model, PDU / (4 x one-way delay + PDU / throughput) busy, "
                f"predicts {model * 100:.1f}% idle for PDU {fmt_bytes(pdu)}, one-way delay "
                f"{owd * 1e3:.3f} ms ({out['delay_source']}), throughput {rate / 1e6:.1f} MB/s "
                f"({out['rate_source']}).")
        else:
            say("The study's model of the idle share needs the PDU block size, the delay and "
                "the throughput.")

    if cap.track is not None:
        st = track.state_time(cap.track)
        st = st[st["state"] != "Open"]
        out["states"] = st
        out["retransmits"] = track.retransmit_count(cap.track)
        for r in st.itertuples():
            say(f"TCP {r.state} ({r.source}, {r.dir}): {r.intervals} episodes, "
                f"{cast(int, r.total_ns) / 1e6:.2f} ms in total.")
        if out["retransmits"]:
            hit = track.loss_commands(cap.track)
            cause = _loss_cause(cap, events, d, out["retransmits"])
            say(f"{out['retransmits']} retransmissions; commands hit: "
                f"{', '.join(str(int(c)) for c in hit['cmd'][:20]) or 'unknown (no PDUs)'}"
                f"{' ...' if len(hit) > 20 else ''}. Cause: {cause}.")
        elif st.empty and not cap.track.samples.empty:
            say("No TCP loss, retransmission or congestion episode seen.")
    return out


IDLE_DEFINITION = ("idle: the share of the data phase (the data sender's first segment to its "
                   "last) in which it put no data on the wire, i.e. the gaps between its bursts "
                   "of segments")


def idle_sentence(out: dict[str, Any], d: str) -> str:
    """The one idle figure of the report (IDLE_DEFINITION), its time split between commands
    and inside them: the same gaps, so the parts add up to the whole."""
    idle, span = out["idle_ratio"], out.get("idle_span_ns") or 0
    if idle != idle:  # NaN: no burst of data
        return f"Idle: not measured (no {d} data bursts)."
    s = (f"Idle {idle * 100:.1f}% of the {d} data phase ({idle * span / 1e9:.2f} s of "
         f"{span / 1e9:.2f} s, over {out['bursts']} bursts)")
    within, between = out["idle_within_ns"], out["idle_between_ns"]
    if within or between:
        b = between / (within + between)
        s += (f": {b * 100:.0f}% of that idle time between commands (nothing left to send: "
              f"waiting for the next command or the target's answer), {(1 - b) * 100:.0f}% "
              "inside commands (data left to send, waiting for ACKs: window-limited)")
    return s + "."


def _idle_split(cap: Capture, d: str, bursts: pd.DataFrame) -> tuple[int, int]:
    """Idle gaps of the data sender inside a command's data phase vs between commands."""
    gaps = gaps_from_bursts(bursts)
    if gaps.empty:
        return 0, 0
    sender = "target" if d == "t2i" else "initiator"
    cmds = cap.commands.get(sender)
    shift = 0
    if cmds is None:
        cmds = cap.main_commands()
        shift = cap.offset_ns if sender == "target" else 0
    if cmds is None or cmds.empty or "first_data_ts_ns" not in cmds.columns:
        return 0, int(gaps["gap_ns"].sum())
    c = cmds.dropna(subset=["first_data_ts_ns", "last_data_ts_ns"])
    a = np.sort(c["first_data_ts_ns"].astype(np.int64).to_numpy() + shift)
    z = c.sort_values("first_data_ts_ns")["last_data_ts_ns"].astype(np.int64).to_numpy() + shift
    # The command whose data phase began last before the gap: is the gap inside it?
    k = np.searchsorted(a, gaps["start_ns"].to_numpy(np.int64), side="right") - 1
    inside = (k >= 0) & (gaps["end_ns"].to_numpy(np.int64) <= z[np.maximum(k, 0)])
    g = gaps["gap_ns"].to_numpy(np.int64)
    return int(g[inside].sum()), int(g[~inside].sum())


def _loss_cause(cap: Capture, ev: pd.DataFrame | None, d: str, retransmits: int) -> str:
    """Local queue drops on the sending host (in the probe events `ev`) vs drops on the path,
    from what was recorded."""
    sender = "target" if d == "t2i" else "initiator"
    why = []
    local = 0
    if ev is not None and not ev.empty:
        net = ev[(ev["layer"].astype(str) == "net") & ev["event"].astype(str).str.contains("drop")
                 & (ev["host"].astype(str) == sender)]
        local = len(net)
    path = cap.meta.get("path_stats") if isinstance(cap.meta.get("path_stats"), dict) else {}
    pd_dir = (path or {}).get(d) if isinstance((path or {}).get(d), dict) else {}
    path_drops = {k: int(v) for k, v in (pd_dir or {}).items()
                  if k.startswith("drop") and isinstance(v, int | float) and v > 0}
    if local and local >= 0.1 * max(retransmits, 1):
        why.append(f"local queue drops on the {sender} ({local} drop events from the probes): "
                   "its own device/qdisc queue overflowed, as in the study's Tx256 case")
    if path_drops:
        why.append("drops on the emulated path (" + ", ".join(
            f"{k}={v}" for k, v in path_drops.items()) + "): network loss / a full "
            "bottleneck queue, not the hosts")
    if why:
        return "; ".join(why)
    if ev is None or ev.empty:
        return "not visible (no probe events to tell local queue drops from network loss)"
    return (f"no local drop events on the {sender} ({local}): loss in the network "
            "(or drops the probes cannot see)")
