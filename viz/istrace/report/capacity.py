"""The path's capacity: bytes/s of payload it can carry, from the run's settings (meta.json) or
estimated from the capture (packet pairs at the receiver). Whether the capture bears the figure
out is istrace.report.checks' to say; the verdict reads the checked figure there."""

from __future__ import annotations

import numpy as np
from istrace.capture.load import Capture
from istrace.capture.meta import meta_number
from istrace.capture.segsource import payload_slices
from istrace.capture.slices import SLICE_ROWS
from istrace.plot import data
from istrace.plot.render import data_dir

# where a figure estimated from the capture itself comes from (checks holds it to the bursts)
ESTIMATED = "estimated from packet dispersion at the receiver"


def path_capacity(cap: Capture) -> tuple[float | None, str]:
    """Bytes/s of payload the path can carry, and where that figure comes from."""
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
        return est, ESTIMATED
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
    totals = data.payload_totals(recv, d)
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
