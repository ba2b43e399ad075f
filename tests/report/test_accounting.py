"""The verdict's time accounting on hand-made timelines whose answer is known to the microsecond."""

import numpy as np
import pandas as pd
import pytest
from istrace.report import accounting

US = 1_000
CONN = "10.0.0.1:5000-10.0.0.2:3260"


def segs(*bursts: tuple[int, int, int]) -> pd.DataFrame:
    """Data segments t2i: each burst (start_us, count, spacing_us) of 1448-byte segments."""
    ts = np.concatenate([s * US + np.arange(n) * sp * US for s, n, sp in bursts])
    return pd.DataFrame({"ts_ns": ts.astype(np.int64), "len": 1448, "dir": "t2i", "conn": CONN})


def cmds(rows: list[tuple[int, int, int]]) -> pd.DataFrame:
    """(arrival_us, first_data_us, last_data_us) per command, at the sender."""
    a = np.array(rows, dtype=np.int64) * US
    return pd.DataFrame({"cmd": range(len(rows)), "conn": CONN, "issue_ts_ns": a[:, 0],
                         "first_data_ts_ns": a[:, 1], "last_data_ts_ns": a[:, 2]})


def run(sg: pd.DataFrame, cm: pd.DataFrame | None, samples: pd.DataFrame | None = None,
        states: pd.DataFrame | None = None, sock: pd.DataFrame | None = None,
        r2t: list[int] = (), first_loss_ns: int | None = None, d: str = "t2i",
        link_busy: float | None = None, capacity: float | None = None) -> dict[str, float]:
    acc = accounting.Accounting(direction=d, sender="target" if d == "t2i" else "initiator")
    empty = pd.DataFrame(columns=["ts_ns", "source", "cwnd", "inflight_bytes", "rwnd"])
    accounting.account_connection(
        acc, sg, cm, np.array([x * US for x in r2t], dtype=np.int64),
        samples if samples is not None else empty,
        states if states is not None else pd.DataFrame(columns=["state", "start_ns", "end_ns"]),
        sock, capacity, {}, link_busy, first_loss_ns)
    return {k: v / 1e3 for k, v in acc.time_ns.items()}  # microseconds


def test_between_commands_splits_service_from_concurrency():
    # Command 0 arrives at 0, data 100..190 us; command 1 arrives at 1000, data from 1300.
    t = run(segs((100, 10, 10), (1300, 10, 10)),
            cmds([(0, 100, 190), (1000, 1300, 1390)]))
    # Before the first data: 100 us of service; gap 190..1300: 810 us before command 1
    # arrived (concurrency), 300 us after (service).
    assert t["target_service"] == pytest.approx(100 + 300)
    assert t["initiator_concurrency"] == pytest.approx(810)
    assert t["sending_unexplained"] == pytest.approx(2 * 90)


def test_gap_inside_a_command_at_the_receive_window():
    # One command whose data stops 500 us in the middle with the receiver's window full.
    est = pd.DataFrame({"ts_ns": [150 * US], "source": ["estimated"], "cwnd": [np.nan],
                        "inflight_bytes": [64_000.0], "rwnd": [65_535.0]})
    t = run(segs((100, 10, 10), (690, 10, 10)), cmds([(0, 100, 780)]), samples=est)
    assert t["tcp_rwnd"] == pytest.approx(500)
    assert "tcp_window" not in t


def test_without_probes_cwnd_and_send_buffer_stay_one_class():
    est = pd.DataFrame({"ts_ns": [150 * US], "source": ["estimated"], "cwnd": [np.nan],
                        "inflight_bytes": [20_000.0], "rwnd": [1_000_000.0]})
    t = run(segs((100, 10, 10), (690, 10, 10)), cmds([(0, 100, 780)]), samples=est)
    assert t["tcp_window"] == pytest.approx(500)


def test_exact_cwnd_full_then_after_a_loss_it_is_the_loss():
    # cwnd 28 before the loss at 120 us, cut to 14 (full) at the gap
    s = pd.DataFrame({"ts_ns": [50 * US, 150 * US, 150 * US],
                      "source": ["exact", "estimated", "exact"],
                      "cwnd": [28.0, np.nan, 14.0], "inflight_bytes": [np.nan, 20_000.0, np.nan],
                      "rwnd": [np.nan, 1_000_000.0, np.nan]})
    sg, cm = segs((100, 10, 10), (690, 10, 10)), cmds([(0, 100, 780)])
    assert run(sg, cm, samples=s)["tcp_cwnd"] == pytest.approx(500)
    assert run(sg, cm, samples=s, first_loss_ns=120 * US)["tcp_loss_recovery"] == \
        pytest.approx(500)


def test_a_window_at_its_ceiling_after_a_loss_is_the_windows():
    """A loss that did not cut the window (undone, or a clamp below the cut) leaves the
    window-limited time to the window: CI saw a cwnd clamped at 40 throughout, one fast
    retransmit undone, called 58% loss recovery."""
    s = pd.DataFrame({"ts_ns": [50 * US, 150 * US, 150 * US],
                      "source": ["exact", "estimated", "exact"],
                      "cwnd": [14.0, np.nan, 14.0], "inflight_bytes": [np.nan, 20_000.0, np.nan],
                      "rwnd": [np.nan, 1_000_000.0, np.nan]})
    sg, cm = segs((100, 10, 10), (690, 10, 10)), cmds([(0, 100, 780)])
    t = run(sg, cm, samples=s, first_loss_ns=120 * US)
    assert t["tcp_cwnd"] == pytest.approx(500) and "tcp_loss_recovery" not in t
    # Without probes, bytes in flight tell the same: at their ceiling the window's, well
    # below it the loss's.
    est = pd.DataFrame({"ts_ns": [50 * US, 150 * US], "source": ["estimated"] * 2,
                        "cwnd": [np.nan] * 2, "inflight_bytes": [20_000.0, 20_000.0],
                        "rwnd": [1_000_000.0] * 2})
    t = run(sg, cm, samples=est, first_loss_ns=120 * US)
    assert t["tcp_window"] == pytest.approx(500) and "tcp_loss_recovery" not in t
    cut = est.assign(inflight_bytes=[40_000.0, 20_000.0])
    assert run(sg, cm, samples=cut, first_loss_ns=120 * US)["tcp_loss_recovery"] == \
        pytest.approx(500)


def test_kernel_clocks_name_the_send_buffer():
    s = pd.DataFrame({"ts_ns": [150 * US, 150 * US], "source": ["estimated", "exact"],
                      "cwnd": [np.nan, 100.0], "inflight_bytes": [20_000.0, np.nan],
                      "rwnd": [1_000_000.0, np.nan]})
    sg, cm = segs((100, 10, 10), (690, 10, 10)), cmds([(0, 100, 780)])
    assert run(sg, cm, samples=s)["tcp_sndbuf_or_app"] == pytest.approx(500)
    clocks = pd.DataFrame({"ts_ns": [0, 1000 * US], "busy_us": [0.0, 100.0],
                           "rwnd_limited_us": [0.0, 0.0], "sndbuf_limited_us": [0.0, 800.0]})
    # The whole sampled period ran the sndbuf clock: the gap and the 100 us before the first
    # data (the command at the target, its data unable to start) are the send buffer's.
    assert run(sg, cm, samples=s, sock=clocks)["tcp_sndbuf"] == pytest.approx(500 + 100)
    # No limit clock ran: the snapshot says whether cwnd was full (congestion control) or not
    # (the socket was app-limited: the target had not written its data yet).
    free = clocks.assign(sndbuf_limited_us=[0.0, 0.0], unacked=[0.0, 5.0], cwnd=[10.0, 100.0])
    assert run(sg, cm, samples=s, sock=free)["target_service"] == pytest.approx(500 + 100)
    held = free.assign(unacked=[0.0, 99.0])
    assert run(sg, cm, samples=s, sock=held)["tcp_cwnd"] == pytest.approx(500)


def test_loss_recovery_state_is_carved_out_first():
    st = pd.DataFrame({"state": ["Recovery"], "start_ns": [400 * US], "end_ns": [600 * US]})
    t = run(segs((100, 10, 10), (1300, 10, 10)),
            cmds([(0, 100, 190), (1000, 1300, 1390)]), states=st)
    assert t["tcp_loss_recovery"] == pytest.approx(200)
    assert t["initiator_concurrency"] + t["target_service"] == pytest.approx(810 + 300 + 100 - 200)


def test_write_waiting_for_r2t():
    # WRITE data (i2t) 0..90 us, R2T arrives at 600, the next burst at 610.
    sg = segs((0, 10, 10), (610, 10, 10)).assign(dir="i2t")
    t = run(sg, cmds([(0, 0, 700)]), r2t=[600], d="i2t")
    assert t["iscsi_r2t"] == pytest.approx(520)


def test_known_capacity_gives_the_link_its_busy_share():
    t = run(segs((100, 10, 10), (1300, 10, 10)),
            cmds([(0, 100, 190), (1000, 1300, 1390)]), link_busy=0.6, capacity=1e9)
    total = sum(t.values())
    assert t["network_capacity"] == pytest.approx(0.6 * total)
    # The rest keeps the proportions of the sender's own gaps (each burst now ends one
    # segment's serialisation at the capacity later: 1.448 us).
    assert t["initiator_concurrency"] / t["target_service"] == pytest.approx(810 / 400, rel=0.01)


def test_without_commands_an_idle_sender_is_not_blamed_on_the_initiator():
    # PDU headers cut by the snaplen: no command decoded, so a gap with nothing to send may
    # be the initiator not asking or the target not answering.
    t = run(segs((100, 10, 10), (1300, 10, 10)), None)
    assert t["idle_unexplained"] == pytest.approx(1300 - 190)
    assert "initiator_concurrency" not in t and "target_service" not in t
