"""The tracker reads a direction a slice at a time: any slicing must give the rows of one slice,
on transfers whose losses, duplicate-ACK runs and loss episodes straddle the cuts."""

import numpy as np
import pandas as pd
import pytest
from istrace.capture.decoded import TCP_ACK, TCP_PSH, TCP_SYN, conn_and_dir
from istrace.capture.slices import clean_cuts
from istrace.track import tracker as track
from test_track_synthetic import ISN_I, ISN_T, seg


def random_transfer(seed: int, n: int = 300) -> pd.DataFrame:
    """The target sends n segments of 1000 B (its sequence numbers wrap); some are lost and
    resent after duplicate ACKs or after a silence (a timeout), some resent needlessly, some
    reordered; the initiator acknowledges cumulatively 2 ms after each arrival."""
    rng = np.random.default_rng(seed)
    rows = [seg(0, "i", ISN_I, 0, TCP_SYN, wscale=7),
            seg(10, "t", ISN_T, ISN_I + 1, TCP_SYN | TCP_ACK, wscale=2),
            seg(20, "i", ISN_I + 1, ISN_T + 1)]
    b, t, got, cum, lost = ISN_T + 1, 30.0, set(), 0, []

    def send(k: int, at: float, arrives: bool) -> None:
        nonlocal cum
        rows.append(seg(at, "t", b + 1000 * k, ISN_I + 1, TCP_ACK | TCP_PSH, 1000))
        if arrives:
            got.add(k)
            while cum in got:
                cum += 1
            rows.append(seg(at + 2, "i", ISN_I + 1, b + 1000 * cum,
                            win=int(rng.choice([500, 500, 480]))))

    for k in range(n):
        drop = rng.random() < 0.06
        if rng.random() < 0.03 and k + 1 < n:  # reordered: k+1 goes first
            send(k + 1, t, True)
            send(k, t + 0.05, not drop)
        elif k not in got:
            send(k, t, not drop)
        if drop:
            lost.append(k)
        if lost and rng.random() < 0.3:
            send(lost.pop(0), t + 0.5, True)
        if rng.random() < 0.02 and k > 5:
            send(k - 5, t + 0.3, True)  # a needless resend of bytes already acknowledged
        t += float(rng.choice([0.1, 0.5, 1.0, 1.0])) + (300.0 if rng.random() < 0.01 else 0)
    for j in lost:  # what is still missing goes after a timeout
        t += 200
        send(j, t, True)
    return conn_and_dir(pd.DataFrame(rows).sort_values("ts_ns", kind="stable")
                        .reset_index(drop=True))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_any_slicing_gives_the_rows_of_one_slice(seed):
    segs = random_transfer(seed)
    one = track.track_pcap(segs, None, host="target", dirs=("t2i", "i2t"), slice_rows=10**9)
    kinds = set(one.events.frame()["kind"])
    # the transfer exercises what the slices carry across their cuts
    assert {"retransmit", "dupack", "loss_episode"} <= kinds, kinds
    assert {"Recovery", "Loss"} <= set(one.states.frame()["state"]), one.states.frame()
    assert one.samples.frame()["rtt_us"].notna().sum() > 50
    for rows in (1, 2, 3, 7, 64, 301):
        got = track.track_pcap(segs, None, host="target", dirs=("t2i", "i2t"),
                               slice_rows=rows)
        pd.testing.assert_frame_equal(got.samples.frame(), one.samples.frame())
        # the labels' categories are listed in the order the slices met them
        pd.testing.assert_frame_equal(got.events.frame(), one.events.frame(),
                                      check_categorical=False)
        pd.testing.assert_frame_equal(got.states.frame(), one.states.frame(),
                                      check_categorical=False)


def test_karn_ignores_only_retransmissions_sent_before_the_ack():
    """An ACK is ambiguous when a retransmission of the bytes it newly covers went out before
    it; one resent after the ACK (a sender's timer racing the ACK) cannot have caused it."""
    b = ISN_T + 1
    rows = [seg(0, "i", ISN_I, 0, TCP_SYN, wscale=7),
            seg(10, "t", ISN_T, ISN_I + 1, TCP_SYN | TCP_ACK, wscale=2),
            seg(20, "i", ISN_I + 1, ISN_T + 1),
            seg(30, "t", b, ISN_I + 1, TCP_ACK, 1000),
            seg(31, "t", b + 1000, ISN_I + 1, TCP_ACK, 1000),
            seg(32, "t", b + 2000, ISN_I + 1, TCP_ACK, 1000),
            seg(40, "i", ISN_I + 1, b + 1000),             # RTT 10 ms, then its bytes resent
            seg(40.5, "t", b, ISN_I + 1, TCP_ACK, 1000),
            seg(41, "t", b + 1000, ISN_I + 1, TCP_ACK, 1000),  # resent before the next ACK
            seg(42, "i", ISN_I + 1, b + 2000),             # ambiguous: no sample
            seg(43, "i", ISN_I + 1, b + 3000)]             # RTT 11 ms
    segs = conn_and_dir(pd.DataFrame(rows))
    s = track.track_pcap(segs, None, host="target", dirs=("t2i",)).samples.frame()
    acks = s.set_index("ts_ns")["rtt_us"]
    assert acks[40 * 10**6] == 10_000
    assert np.isnan(acks[42 * 10**6])
    assert acks[43 * 10**6] == 11_000


def test_cuts_never_split_a_step_back_in_time():
    ts = np.array([1, 2, 3, 3, 3, 4, 9, 5, 6, 10, 11, 11, 12, 13], np.int64)
    for rows in range(1, len(ts) + 1):
        cuts = clean_cuts(ts, rows)
        assert cuts[0] == 0 and cuts[-1] == len(ts) and cuts == sorted(set(cuts))
        for c in cuts[1:-1]:
            assert ts[:c].max() < ts[c:].min(), (rows, c)
    assert clean_cuts(ts, 1) == [0, 1, 2, 5, 6, 9, 10, 12, 13, 14]


def test_a_loss_past_4_gib_is_tied_to_its_own_command():
    """Retransmissions name the READ they hit by its data PDUs' sequence range: past 4 GiB
    of stream, that range must be looked up unwrapped, not modulo 2^32."""
    seg_len, per_cmd, n_cmds, isn = 65536, 1024, 100, 4_000_000_000  # 64 MiB commands
    k = np.arange(n_cmds * per_cmd, dtype=np.int64)
    lost = 90 * per_cmd + 7  # a segment of command 90, past the stream's first wrap
    k = np.append(k, lost)
    ts = 1_000_000_000 + np.arange(len(k)) * 10_000
    segs = conn_and_dir(pd.DataFrame({
        "frame": k, "ts_ns": ts, "src": "10.0.0.2", "sport": 3260, "dst": "10.0.0.1",
        "dport": 40000, "seq": (isn + 1 + k * seg_len) % 2**32, "ack": 1, "flags": 0x18,
        "win": 500, "len": seg_len, "wscale": -1, "mss": -1, "tsval": -1, "tsecr": -1,
        "sack": 0}))
    cmds = np.arange(n_cmds)
    pdus = pd.DataFrame({
        "conn": segs["conn"].iloc[0], "dir": "t2i", "opcode_name": "SCSI Data-In",
        "cmd": cmds, "ts_ns": 1_000_000_000 + cmds * per_cmd * 10_000,
        "tcp_seq": (isn + 1 + cmds * per_cmd * seg_len) % 2**32})
    ev = track.track_pcap(segs, pdus, host="target", dirs=("t2i",)).events.frame()
    rtx = ev[ev["kind"] == "retransmit"]
    assert rtx["cmd"].tolist() == [90]
