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

Seed 002's iSCSI keys, as RFC 7143 defines them: a command of `size` bytes moves in data PDUs
of at most MaxRecvDataSegmentLength (`pdu`) bytes, each behind a 48-byte header; a WRITE
sends its first `unsolicited` bytes with the command (ImmediateData, FirstBurstLength,
InitialR2T) and each further MaxBurstLength only after an R2T, one round trip each (with
MaxOutstandingR2T = 1). So one command takes

    rtt * (1 + r2t_rounds) + wire_bytes / rate                             (3)

and `queue_depth` of them in flight move at most queue_depth * size per that time, never more
than the link carries of payload. A READ has no R2T rounds: MaxBurstLength does not enter.
The model has no per-PDU processing cost; the measured gap to it is that cost.
"""

from __future__ import annotations

MB = 1_000_000  # the studies report MB/s in decimal megabytes
BHS = 48                # iSCSI basic header segment
SEGMENT_OVERHEAD = 66   # Ethernet 14 + IPv4 20 + TCP 20 + timestamps 12 per segment
MSS = 1448              # an Ethernet MTU's TCP payload with timestamps


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


def data_pdus(size: int, pdu: int) -> int:
    """Data PDUs that carry `size` bytes at most `pdu` bytes each."""
    if size < 0 or pdu <= 0:
        raise ValueError("size must be >= 0 and pdu > 0")
    return -(-size // pdu)


def wire_bytes(size: int, pdu: int, mss: int = MSS) -> int:
    """Bytes on the link for one command: data, its PDU headers, the command and status PDUs,
    and each TCP segment's headers."""
    iscsi = size + BHS * (data_pdus(size, pdu) + 2)
    return iscsi + -(-iscsi // mss) * SEGMENT_OVERHEAD


def r2t_rounds(size: int, max_burst: int, first_burst: int, immediate: bool,
               initial_r2t: bool, target_pdu: int) -> int:
    """R2T round trips of one WRITE: what is not sent unsolicited, MaxBurstLength at a time."""
    if max_burst <= 0:
        raise ValueError("max_burst must be > 0")
    unsolicited = 0
    if immediate:
        unsolicited = min(size, first_burst, target_pdu)
    if not initial_r2t:
        unsolicited = min(size, first_burst)
    return -(-max(0, size - unsolicited) // max_burst)


def command_seconds(size: int, pdu: int, rtt_s: float, rate_bps: float, rounds: int = 0) -> float:
    """Eq. (3): one command's time from issue to status."""
    if rtt_s < 0 or rate_bps <= 0:
        raise ValueError("rtt_s must be >= 0 and rate_bps > 0")
    return rtt_s * (1 + rounds) + wire_bytes(size, pdu) / rate_bps


def iscsi_throughput(size: int, pdu: int, rtt_s: float, rate_bps: float, rounds: int = 0,
                     queue_depth: int = 1) -> float:
    """Payload bytes/s of `queue_depth` such commands kept in flight, capped by the link."""
    link = rate_bps * size / wire_bytes(size, pdu)
    if size == 0:
        return 0.0
    return min(link, queue_depth * size / command_seconds(size, pdu, rtt_s, rate_bps, rounds))
