"""Tracker against hand-built segment and event tables whose truth is known exactly."""

import numpy as np
import pandas as pd
from istrace.capture.decoded import TCP_ACK, TCP_PSH, TCP_SYN, conn_and_dir
from istrace.track import tracker as track

INI, TGT = ("10.0.0.1", 40000), ("10.0.0.2", 3260)
ISN_T, ISN_I = 4_294_960_000, 1000  # target's ISN wraps past 2^32 within the transfer
MS = 1_000_000


def seg(t_ms, frm, seq, ack, flags=TCP_ACK, length=0, win=500, wscale=-1):
    (s, sp), (d, dp) = (INI, TGT) if frm == "i" else (TGT, INI)
    return dict(frame=0, ts_ns=int(t_ms * MS), src=s, sport=sp, dst=d, dport=dp,
                seq=seq % 2**32, ack=ack % 2**32, flags=flags, win=win, len=length,
                wscale=wscale, mss=-1, tsval=-1, tsecr=-1, sack=0)


def lossy_transfer() -> pd.DataFrame:
    """Target sends 10 x 1000 B; the 3rd segment is lost, 3 dupacks, fast retransmit."""
    rows = [seg(0, "i", ISN_I, 0, TCP_SYN, wscale=7),
            seg(10, "t", ISN_T, ISN_I + 1, TCP_SYN | TCP_ACK, wscale=2),
            seg(20, "i", ISN_I + 1, ISN_T + 1)]
    b = ISN_T + 1
    for k in range(10):  # data sent at 30, 31, ... 39 ms
        rows.append(seg(30 + k, "t", b + 1000 * k, ISN_I + 1, TCP_ACK | TCP_PSH, 1000))
    # Receiver: ACKs 1000 and 2000 arrive 10 ms after the segments (RTT 10 ms), then the hole
    # at 2000 makes every later segment produce a duplicate ACK of 2000.
    rows.append(seg(40, "i", ISN_I + 1, b + 1000))
    rows.append(seg(41, "i", ISN_I + 1, b + 2000))
    for k in range(3, 10):
        rows.append(seg(40 + k, "i", ISN_I + 1, b + 2000))
    rows.append(seg(50, "t", b + 2000, ISN_I + 1, TCP_ACK, 1000))  # fast retransmit
    rows.append(seg(60, "i", ISN_I + 1, b + 10000, win=400))
    return pd.DataFrame(rows).sort_values("ts_ns", kind="stable").reset_index(drop=True)


def test_conn_and_dir():
    s = conn_and_dir(lossy_transfer())
    assert set(s["conn"]) == {"10.0.0.1:40000-10.0.0.2:3260"}
    assert (s.loc[s["src"] == "10.0.0.2", "dir"] == "t2i").all()
    assert (s.loc[s["src"] == "10.0.0.1", "dir"] == "i2t").all()


def test_pcap_estimates_known_truth():
    segs = conn_and_dir(lossy_transfer())
    conn = segs["conn"].iloc[0]
    pdus = pd.DataFrame({"conn": [conn, conn], "dir": ["t2i", "t2i"],
                         "tcp_seq": [(ISN_T + 1) % 2**32, (ISN_T + 1 + 5000) % 2**32],
                         "cmd": [0, 1]})
    res = track.track_pcap(segs, pdus, host="target", dirs=("t2i",))
    s = res.samples.frame()
    assert (s["source"] == "estimated").all() and set(s["dir"]) == {"t2i"}
    # In flight: 10 segments out by 39 ms with 1000 acked at 40 ms -> 10000 - 2000 at 41 ms.
    at = s.set_index("ts_ns")["inflight_bytes"]
    assert at.loc[39 * MS] == 10000
    assert at.loc[41 * MS] == 8000
    assert at.iloc[-1] == 0
    # RTT: the first two ACKs each cover a segment sent once, 10 ms earlier.
    rtts = s["rtt_us"].dropna().to_numpy()
    assert rtts[0] == 10_000 and rtts[1] == 10_000
    # The final ACK covers the retransmitted range: Karn says no sample.
    assert np.isnan(s.set_index("ts_ns").loc[60 * MS, "rtt_us"])
    # Receive window: the initiator's 400 scaled by its SYN's shift 7.
    assert s.set_index("ts_ns").loc[60 * MS, "rwnd"] == 400 * 128
    ev = res.events.frame()
    rtx = ev[ev["kind"] == "retransmit"]
    assert len(rtx) == 1 and rtx["seq"].iloc[0] == 2000 and rtx["cmd"].iloc[0] == 0
    assert (ev["kind"] == "dupack").sum() == 7
    ep = ev[ev["kind"] == "loss_episode"]
    assert len(ep) == 1 and ep["ts_ns"].iloc[0] == 45 * MS  # the 3rd duplicate ACK
    st = res.states.frame()
    rec = st[st["state"] == "Recovery"]
    assert len(rec) == 1
    assert rec["start_ns"].iloc[0] == 45 * MS and rec["end_ns"].iloc[0] == 60 * MS
    lc = track.loss_commands(res)
    assert lc["cmd"].tolist() == [0]


def test_pcap_timeout_loss_no_dupacks():
    b = ISN_T + 1
    rows = [seg(0, "i", ISN_I, 0, TCP_SYN, wscale=0), seg(1, "t", ISN_T, ISN_I + 1,
                                                          TCP_SYN | TCP_ACK, wscale=0),
            seg(2, "t", b, ISN_I + 1, TCP_ACK, 1000),
            seg(300, "t", b, ISN_I + 1, TCP_ACK, 1000),  # RTO retransmission
            seg(310, "i", ISN_I + 1, b + 1000)]
    res = track.track_pcap(conn_and_dir(pd.DataFrame(rows)), dirs=("t2i",))
    st = res.states.frame()
    assert st["state"].tolist() == ["Loss"]
    assert st["start_ns"].iloc[0] == 300 * MS and st["end_ns"].iloc[0] == 310 * MS


def test_probe_events_exact():
    conn = "10.0.0.1:40000-10.0.0.2:3260"
    ev = pd.DataFrame({
        "ts_ns": [1, 2, 3, 4, 5, 6, 7],
        "host": ["target"] * 7, "layer": ["tcp"] * 7,
        "event": ["tcp_probe", "cong_state", "tcp_probe", "retransmit", "cong_state",
                  "tcp_probe", "tcp_probe"],
        "conn": [conn] * 7,
        "cwnd": [10, None, 20, None, None, 10, 12], "ssthresh": [None, None, None, None,
                                                                  None, 10, 10],
        "srtt_us": [100] * 7, "inflight": [5, None, 15, None, None, 8, 9],
        "ca_state": ["Open", "CWR", "CWR", None, "Open", "Open", "Open"],
        "seq": [None, None, None, 777, None, None, None], "bytes": [None, None, None, 1448,
                                                                     None, None, None],
    })
    res = track.track_events(ev)
    s = res.samples.frame()
    assert len(s) == 4 and (s["source"] == "exact").all() and (s["dir"] == "t2i").all()
    assert s["cwnd"].tolist() == [10, 20, 10, 12]
    st = res.states.frame()
    assert st[["state", "start_ns", "end_ns"]].values.tolist() == [["CWR", 2, 5], ["Open", 5, 7]]
    ev = res.events.frame()
    assert ev["kind"].tolist() == ["retransmit"] and ev["seq"].iloc[0] == 777


def read_with_commands() -> pd.DataFrame:
    """A read: 4 commands of 48 B from the initiator, each answered by 8 x 1000 B of data;
    every data segment carries the initiator's commands' ACK, a delayed ACK every second."""
    rows = [seg(0, "i", ISN_I, 0, TCP_SYN, wscale=7),
            seg(1, "t", ISN_T, ISN_I + 1, TCP_SYN | TCP_ACK, wscale=2),
            seg(2, "i", ISN_I + 1, ISN_T + 1)]
    t, si, st = 10.0, ISN_I + 1, ISN_T + 1
    for _ in range(4):
        rows.append(seg(t, "i", si, st, TCP_ACK | TCP_PSH, 48))
        si += 48
        for k in range(8):
            rows.append(seg(t + 1 + 0.1 * k, "t", st, si, TCP_ACK | TCP_PSH, 1000))
            st += 1000
            if k % 2:
                rows.append(seg(t + 1.6 + 0.1 * k, "i", si, st))
        t += 10
    return pd.DataFrame(rows).sort_values("ts_ns", kind="stable").reset_index(drop=True)


def test_command_only_direction_keeps_changes_only():
    segs = conn_and_dir(read_with_commands())
    res = track.track_pcap(segs, None, host="initiator", dirs=("i2t", "t2i"))
    s = res.samples.frame()
    i2t, t2i = s[s["dir"] == "i2t"], s[s["dir"] == "t2i"]
    # the data direction: a row per data segment and per initiator segment ACKing it (the
    # handshake's last, the 4 commands, 16 delayed ACKs), as before
    assert len(t2i) == 32 + 1 + 4 + 16
    # the command direction: each command sent, and the ACK that first covers it (the first
    # data segment after it); the other 7 data segments of each answer repeat that state
    assert len(i2t) < 4 * 3, i2t[["ts_ns", "inflight_bytes", "rtt_us"]]
    sent = segs[(segs["dir"] == "i2t") & (segs["len"] > 0)]["ts_ns"]
    assert set(sent) <= set(i2t["ts_ns"])
    assert i2t["rtt_us"].notna().sum() == 4  # each command's RTT sample kept
    # as of any ACK of the commands, the state kept is the state there was
    acks = segs[(segs["dir"] == "t2i") & (segs["len"] > 0)]["ts_ns"].to_numpy()
    last = i2t.set_index("ts_ns")["inflight_bytes"]
    assert (last.reindex(acks, method="ffill") == 0).all()
