"""Round-trip time at any capture point from TCP timestamps (RFC 7323), the way passive ping
(pping) measures it: a segment leaving the capture point carries TSval X; the first segment
back from the far end that echoes X (TSecr = X) arrives one round trip later, plus whatever the
far end waited before sending. The smallest of many such samples is the path's round trip.

The tracker's own RTT (data to the ACK that covers it) is the path's only at the data sender;
at the receiver it measures the receiver's ACK delay. This one holds at either end, and from
the client's pcap it includes the SYN -> SYN/ACK exchange.
"""

from __future__ import annotations

import pandas as pd


def echo_rtt_samples(segs: pd.DataFrame, out_dir: str) -> pd.DataFrame:
    """Samples (conn, ts_ns of the echo, rtt_ns) for segments sent in `out_dir` from the
    capture point and echoed back. Needs columns conn, dir, ts_ns, tsval, tsecr."""
    cols = ["conn", "ts_ns", "rtt_ns"]
    if segs is None or segs.empty or not {"tsval", "tsecr"} <= set(segs.columns):
        return pd.DataFrame(columns=cols)
    back = "t2i" if out_dir == "i2t" else "i2t"
    sent = segs[(segs["dir"] == out_dir) & (segs["tsval"] > 0)]
    echo = segs[(segs["dir"] == back) & (segs["tsecr"] > 0)]
    if sent.empty or echo.empty:
        return pd.DataFrame(columns=cols)
    # The first time each value left, the first time it came back: later copies are
    # retransmissions or later segments of the same clock tick.
    first_out = sent.groupby(["conn", "tsval"], observed=True)["ts_ns"].min()
    first_back = echo.groupby(["conn", "tsecr"], observed=True)["ts_ns"].min()
    first_out.index = first_out.index.set_names(["conn", "ts"])
    first_back.index = first_back.index.set_names(["conn", "ts"])
    j = pd.concat({"out": first_out, "back": first_back}, axis=1, join="inner").reset_index()
    j["rtt_ns"] = j["back"] - j["out"]
    j = j[j["rtt_ns"] >= 0]
    return j.rename(columns={"back": "ts_ns"})[cols].sort_values("ts_ns", kind="stable")


def echo_rtt_ms(segs: pd.DataFrame, out_dir: str) -> dict[str, float | None]:
    """min, 5th percentile and median of the echo samples, ms (None without timestamps)."""
    s = echo_rtt_samples(segs, out_dir)["rtt_ns"]
    if len(s) < 3:
        return {"min_ms": None, "p5_ms": None, "p50_ms": None}
    return {"min_ms": float(s.min()) / 1e6, "p5_ms": float(s.quantile(0.05)) / 1e6,
            "p50_ms": float(s.median()) / 1e6}
