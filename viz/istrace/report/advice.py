"""What would help, per cause, with a predicted throughput where a model exists.

Models (istrace.model.study): Little's law for the number of commands outstanding, one window
per round trip for socket buffers (the bandwidth-delay product), the study's eq. (1) for the
READ size of a one-command-at-a-time reader, R2T round trips for burst lengths. Where no model
exists the prediction is the time-removed bound: the transfer without that cause's share of
the time, current / (1 - share), capped at the link's capacity.
"""

from __future__ import annotations

import math
from typing import Any

from istrace.model import study


def _cap(x: float | None, capacity_Bps: float | None) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return min(x, capacity_Bps) if capacity_Bps else x


def _removed(share: float, now_Bps: float | None) -> float | None:
    if now_Bps is None or share >= 0.99:
        return None
    return now_Bps / (1.0 - share)


def _mb(x: float | None) -> float | None:
    return round(x / 1e6, 2) if x is not None else None


def window_bound(ev: dict[str, Any]) -> float | None:
    """Bytes/s the largest window seen allows per round trip (receive window, send buffer):
    more commands outstanding cannot beat it without bigger buffers."""
    rtt = ev.get("rtt_base_ms")
    wins = [w for w in (ev.get("rwnd_max"), ev.get("sndbuf_max")) if w]
    if not rtt or not wins:
        return None
    return study.window_bound(min(wins), rtt / 1e3)


def _concurrency(ev: dict[str, Any], now: float | None, cap: float | None) -> list[dict[str, Any]]:
    n = ev.get("outstanding_max") or 1
    size = ev.get("command_bytes")
    resp = ev.get("response_ms_p50")
    out: list[dict[str, Any]] = []
    if size and resp:
        r = resp / 1e3
        # Little's law: throughput = outstanding x size / response time, until the link fills.
        want = max(2 * n, math.ceil(cap * r / size)) if cap else 4 * n
        want = min(want, 128)
        pred = _cap(study.outstanding_ceiling(want, r) * size, cap)
        wb = window_bound(ev)
        if pred is not None and wb is not None:
            pred = min(pred, wb)
        out.append({"cause": "initiator_concurrency",
                    "change": f"raise the commands outstanding from {n} to {want} (queue "
                              "depth / cmds_max / the workload's own I/O depth)",
                    "model": "Little's law: outstanding x size / response time",
                    "value": want, "predicted_MBps": _mb(pred), "now_MBps": _mb(now)})
    owd = ev.get("one_way_ms")
    if n == 1 and size and owd and cap:
        big = 4 * size
        pred = study.seq_read_throughput(big, owd / 1e3, cap)
        out.append({"cause": "initiator_concurrency",
                    "change": f"larger commands: {int(size)} -> {int(big)} bytes per READ "
                              "(max_sectors_kb / the application's request size)",
                    "model": "the study's eq. (1): size / (4 x one-way delay + size / rate)",
                    "value": int(big),
                    "predicted_MBps": _mb(pred), "now_MBps": _mb(now)})
    return out


def _buffer(cause: str, ev: dict[str, Any], share: float, now: float | None,
            cap: float | None) -> dict[str, Any]:
    rtt = ev.get("rtt_base_ms")
    bdp = cap * rtt / 1e3 if cap and rtt else None
    knob = ("the initiator's receive buffer (net.ipv4.tcp_rmem max / SO_RCVBUF)"
            if cause == "tcp_rwnd" else
            "the sender's send buffer (net.ipv4.tcp_wmem max / SO_SNDBUF)")
    # The buffer behind the window: the receiver advertises only part of its receive buffer
    # (about half: the rest pays for skb overhead), so the buffer itself is what to scale.
    if cause == "tcp_rwnd":
        buf = ev.get("rcvbuf_max") or (2 * ev["rwnd_max"] if ev.get("rwnd_max") else None)
    else:
        buf = ev.get("sndbuf_max")
    if bdp:
        value: int | None = int(2 * bdp)
        change = f"raise {knob} to at least 2 x the bandwidth-delay product, {value} bytes"
        # One window per round trip: a window of one BDP fills the link.
        pred: float | None = cap
    elif buf and now:
        # No capacity known: throughput is one window per round trip, so four times the
        # buffer gives up to four times as much, until the time this cause holds is gone.
        value = int(4 * buf)
        change = f"raise {knob} from {int(buf)} to 4 x that, {value} bytes"
        pred = min(4 * now, _removed(share, now) or 4 * now)
    else:
        change, pred, value = f"raise {knob}", None, None
    return {"cause": cause, "change": change, "value": value,
            "model": "window / RTT (bandwidth-delay product)",
            "predicted_MBps": _mb(pred), "now_MBps": _mb(now)}


def _r2t(ev: dict[str, Any], share: float, now: float | None,
         cap: float | None) -> dict[str, Any]:
    k = ev.get("r2ts_per_command")
    return {"cause": "iscsi_r2t",
            "change": "negotiate ImmediateData=Yes, InitialR2T=No and MaxBurstLength / "
                      "FirstBurstLength >= the WRITE size (or MaxOutstandingR2T > 1)"
                      + (f": {k:.1f} R2T round trips per command today" if k else ""),
            "model": "R2T round trips removed: current / (1 - R2T share)",
            "predicted_MBps": _mb(_cap(_removed(share, now), cap)), "now_MBps": _mb(now)}


_GENERIC = {
    "tcp_cwnd": "a larger initial / steady congestion window or pacing rate: longer-lived "
                "connections, net.ipv4.tcp_slow_start_after_idle=0, or a congestion control "
                "that ramps faster (BBR paces an app-limited flow at its low measured rate)",
    "tcp_loss_recovery": "remove the packet loss (path errors, a full queue upstream)",
    "target_service": "a faster target back end (backing store, target threads)",
    "host_cpu_target": "more CPU for the target (its cgroup cap, a faster core, offloads)",
    "host_cpu_initiator": "more CPU for the initiator (its cgroup cap, no data digests, "
                          "offloads)",
    "network_queueing": "a smaller bottleneck queue (AQM) or pacing: RTT falls back to its "
                        "minimum",
    "tcp_window": "larger socket buffers (both ends) or a larger congestion window",
    "tcp_sndbuf_or_pacing": "a larger send buffer (net.ipv4.tcp_wmem) if it was full, else a "
                            "congestion control whose pacing follows the link (cubic; BBR "
                            "paces an app-limited flow at its low measured rate)",
    "tcp_sndbuf_or_app": "a larger send buffer (net.ipv4.tcp_wmem) if it was full, else a "
                         "sender that writes sooner (sample ss -ti to tell which)",
}


NO_MODEL = ("network_queueing", "host_cpu_target", "host_cpu_initiator")


def cpu_ceiling(ev: dict[str, Any]) -> tuple[float, float] | None:
    """(MB/s, busiest share): the throughput at which the busiest CPU the sampler saw (a
    machine's CPUs, or a capped process's share of its cap) would be full, if CPU grows with
    throughput. None without CPU samples."""
    now = ev.get("throughput_MBps")
    use = ev.get("cpu_use") or {}
    busiest = max((float(x) for h in use.values() for x in h.values()), default=0.0)
    if not now or busiest < 0.05:
        return None
    return now / min(busiest, 1.0), busiest


def what_would_help(primary: str, secondary: list[str], shares: dict[str, float],
                    ev: dict[str, Any]) -> list[dict[str, Any]]:
    """Suggestions for the primary then the secondary causes, each with a prediction, and
    none above the CPU ceiling: the models are of time, and freeing time costs CPU."""
    out = _suggestions(primary, secondary, shares, ev)
    ceiling = cpu_ceiling(ev)
    if ceiling is not None:
        top, busiest = ceiling
        for h in out:
            if h.get("predicted_MBps") and h["predicted_MBps"] > top:
                h["predicted_MBps"] = round(top, 2)
                h["model"] = (f"{h['model']}; " if h.get("model") else "") + (
                    f"capped at the CPU ceiling, now / the busiest CPU's share "
                    f"({busiest * 100:.0f}%)")
    return out


def _suggestions(primary: str, secondary: list[str], shares: dict[str, float],
                 ev: dict[str, Any]) -> list[dict[str, Any]]:
    now = ev.get("throughput_MBps")
    now_Bps = now * 1e6 if now else None
    cap = ev.get("capacity_MBps")
    cap_Bps = cap * 1e6 if cap else None
    out: list[dict[str, Any]] = []
    for cause in [primary, *secondary]:
        share = shares.get(cause, 0.0)
        if cause == "initiator_concurrency":
            out += _concurrency(ev, now_Bps, cap_Bps)
        elif cause in ("tcp_rwnd", "tcp_sndbuf"):
            out.append(_buffer(cause, ev, share, now_Bps, cap_Bps))
        elif cause == "iscsi_r2t":
            out.append(_r2t(ev, share, now_Bps, cap_Bps))
        elif cause == "network_capacity":
            out.append({"cause": cause, "change": "a faster link (or more paths): the link is "
                        "full", "model": None, "predicted_MBps": None, "now_MBps": _mb(now_Bps)})
        elif cause in _GENERIC:
            # CPU and queueing have no time model: freeing them moves the limit elsewhere.
            pred = None if cause in NO_MODEL else _cap(_removed(share, now_Bps), cap_Bps)
            out.append({"cause": cause, "change": _GENERIC[cause],
                        "model": "time removed: current / (1 - share)" if pred else None,
                        "predicted_MBps": _mb(pred), "now_MBps": _mb(now_Bps)})
    return out
