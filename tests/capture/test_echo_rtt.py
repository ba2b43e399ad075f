"""Round-trip time from TCP timestamp echoes at either end of a connection."""

import pandas as pd
import pytest
from istrace.track.echo_rtt import echo_rtt_ms, echo_rtt_samples

CONN = "10.0.0.1:5000-10.0.0.2:3260"
MS = 1_000_000


def seg(ts_ms: float, d: str, tsval: int, tsecr: int) -> dict[str, object]:
    return {"conn": CONN, "dir": d, "ts_ns": int(ts_ms * MS), "tsval": tsval, "tsecr": tsecr}


def test_receiver_side_capture_sees_the_path_round_trip():
    """At the initiator (the READ data's receiver): each ACK's TSval comes back in the next
    data segment the target sends; the target answers at once or after its service time, so
    the smallest sample is the 20 ms path and the receiver's ACK delay plays no part."""
    rows = [seg(0, "i2t", 100, 0), seg(20, "t2i", 500, 100)]  # SYN, SYN/ACK
    t = 20.0
    for k in range(10):
        rows.append(seg(t + 0.01, "i2t", 101 + k, 500 + k))  # ACK right after the data
        wait = 3.0 if k % 2 else 0.0  # the target serves some commands before answering
        t += 20 + wait
        rows.append(seg(t, "t2i", 501 + k, 101 + k))
    # a retransmitted copy of an old TSval later: its first departure counts, not this one
    rows.append(seg(t + 1, "i2t", 105, 505))
    s = echo_rtt_samples(pd.DataFrame(rows), "i2t")
    assert len(s) == 11 and s["rtt_ns"].min() == pytest.approx(19.99 * MS)
    r = echo_rtt_ms(pd.DataFrame(rows), "i2t")
    assert r["min_ms"] == pytest.approx(19.99) and r["p50_ms"] == pytest.approx(20.0)


def test_no_timestamps_no_estimate():
    rows = [seg(0, "i2t", 0, 0), seg(20, "t2i", 0, 0), seg(40, "i2t", 0, 0)]
    assert echo_rtt_ms(pd.DataFrame(rows), "i2t")["min_ms"] is None
    assert echo_rtt_ms(pd.DataFrame(columns=["conn", "dir", "ts_ns"]), "i2t")["p5_ms"] is None


@pytest.mark.parametrize("rows", [1, 2, 3, 7, 10**6])
def test_any_slicing_gives_the_samples_of_the_whole_table(rows):
    """Read a slice at a time (a full-rate minute's segments are not held), the first
    departure and the first echo of each value are found across the slices' cuts, on two
    connections whose timestamp values are the same numbers."""
    other = "10.0.0.1:5001-10.0.0.2:3260"
    rows_ = []
    t = 0.0
    for k in range(40):
        for conn, lag in ((CONN, 1.0), (other, 2.5)):
            rows_.append({**seg(t, "i2t", 200 + k // 2, 0), "conn": conn})  # a tick, twice
            rows_.append({**seg(t + lag, "t2i", 900 + k, 200 + k // 2), "conn": conn})
        t += 0.4
    df = pd.DataFrame(rows_).sort_values("ts_ns", kind="stable").reset_index(drop=True)
    whole = echo_rtt_samples(df, "i2t", slice_rows=10**9)
    # each value's first departure and first echo: the lag, never the second copy's
    assert len(whole) == 40
    assert sorted(whole.groupby("conn")["rtt_ns"].median().round(-3)) == [1 * MS, 2.5 * MS]
    pd.testing.assert_frame_equal(echo_rtt_samples(df, "i2t", slice_rows=rows), whole)
