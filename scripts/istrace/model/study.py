"""The studies' analytic models, in SI units (bytes, seconds, bytes/second).

Seed 000, eq. (1): a sequential reader that issues one READ of `pdu` bytes at a time pays
`cycle_delays` one-way delays of idle time per command (4 in the study: command out, R2T-less
data back, plus the TCP/iSCSI turnarounds it measured) and then moves the data at the lower
layer's (pure socket) throughput:

    throughput = pdu / (cycle_delays * one_way + pdu / lower)            (1)
    non_idle   = (pdu / lower) / (cycle_delays * one_way + pdu / lower)  (2)

Seed 001: a closed loop of readers with at most `limit` commands outstanding completes at most
`limit / rtt` transactions per second. Seed 002: one TCP window per round trip,
`window / rtt` (window = segments * MSS in the ns2 study).
"""

from __future__ import annotations

MB = 1_000_000  # the studies report MB/s in decimal megabytes


def seq_read_throughput(pdu: float, one_way_s: float, lower_bps: float,
                        cycle_delays: float = 4.0) -> float:
    """Eq. (1): bytes/s of a one-command-at-a-time reader; `lower_bps` > 0."""
    if pdu <= 0 or lower_bps <= 0 or one_way_s < 0:
        raise ValueError("pdu and lower_bps must be > 0, one_way_s >= 0")
    return pdu / (cycle_delays * one_way_s + pdu / lower_bps)


def non_idle_ratio(pdu: float, one_way_s: float, lower_bps: float,
                   cycle_delays: float = 4.0) -> float:
    """Eq. (2): the share of a read cycle spent moving data."""
    busy = pdu / lower_bps
    return busy / (cycle_delays * one_way_s + busy)


def idle_ratio(pdu: float, one_way_s: float, lower_bps: float,
               cycle_delays: float = 4.0) -> float:
    return 1.0 - non_idle_ratio(pdu, one_way_s, lower_bps, cycle_delays)


def outstanding_ceiling(limit: int, rtt_s: float) -> float:
    """Transactions/s that `limit` outstanding commands allow at round-trip time `rtt_s`."""
    if rtt_s <= 0:
        raise ValueError("rtt_s must be > 0")
    return limit / rtt_s


def window_bound(window_bytes: float, rtt_s: float) -> float:
    """Bytes/s that one window per round trip allows (seed 002)."""
    if rtt_s <= 0:
        raise ValueError("rtt_s must be > 0")
    return window_bytes / rtt_s


def best_sessions(link_bps: float, per_session_bps: float) -> float:
    """Sessions needed to fill the link when each one alone reaches `per_session_bps`."""
    if per_session_bps <= 0:
        raise ValueError("per_session_bps must be > 0")
    return link_bps / per_session_bps
