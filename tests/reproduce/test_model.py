"""The studies' models give the studies' own numbers."""

import math

import pytest
from istrace.model import study as m

KB32 = 32 * 1024


def test_eq1_idle_ratios_match_seed_000():
    # Seed 000: with 32 KB PDUs the idle share is 84, 91, 95, 97, 98 % at 1, 2, 4, 8, 16 ms
    # one-way (truncated); its pure socket ran at ~40 MB/s (the dummynet PC's limit).
    lower = 43.5e6
    got = [int(100 * m.idle_ratio(KB32, d / 1e3, lower)) for d in (1, 2, 4, 8, 16)]
    assert got == [84, 91, 95, 97, 98]


def test_eq1_value_and_limits():
    # 4 MB at 16 ms with a 40 MB/s lower layer: 4 MiB / (64 ms + 104.9 ms)
    v = m.seq_read_throughput(4 << 20, 0.016, 40e6)
    assert v == pytest.approx((4 << 20) / (0.064 + (4 << 20) / 40e6))
    assert m.seq_read_throughput(KB32, 0.0, 40e6) == pytest.approx(40e6)  # no delay: the wire
    # Longer delay is always slower, bigger commands always faster.
    assert m.seq_read_throughput(KB32, 0.016, 40e6) < m.seq_read_throughput(KB32, 0.008, 40e6)
    assert m.seq_read_throughput(4 << 20, 0.016, 40e6) > 20 * m.seq_read_throughput(
        KB32, 0.016, 40e6)
    assert m.non_idle_ratio(KB32, 0.001, 42e6) + m.idle_ratio(KB32, 0.001, 42e6) == 1.0


def test_eq1_rejects_bad_input():
    with pytest.raises(ValueError):
        m.seq_read_throughput(0, 0.01, 1e6)
    with pytest.raises(ValueError):
        m.seq_read_throughput(KB32, 0.01, 0)


def test_outstanding_ceiling_seed_001():
    # One 512-byte reader at 32 ms RTT: ~31 trans/s (measured 31.0); 2 readers 62.
    assert m.outstanding_ceiling(1, 0.032) == pytest.approx(31.25)
    assert m.outstanding_ceiling(2, 0.032) == pytest.approx(62.5)
    # 69 outstanding -> ~2150 trans/s, the study measured 1992.9 at 69 readers.
    assert 1900 < m.outstanding_ceiling(69, 0.032) < 2200
    with pytest.raises(ValueError):
        m.outstanding_ceiling(2, 0.0)


def test_window_bound_seed_002():
    # ns2 study: (MSS * window) / (2 * delay): 20 segments of 296 B at 0.4 ms RTT ~ 14.8 MB/s.
    assert m.window_bound(20 * 296, 0.0004) == pytest.approx(14.8e6)
    assert m.best_sessions(25e6, 5e6) == pytest.approx(5.0)
    assert math.isclose(m.window_bound(1 << 20, 0.1), 10485760.0)


def test_eq3_r2t_rounds_follow_rfc7143():
    # 1 MiB WRITE, 16 KiB bursts, 8 KiB of immediate data: the rest in 63.5 -> 64 bursts
    assert m.r2t_rounds(1 << 20, 16384, 16384, True, True, 8192) == 64
    # no immediate data, InitialR2T=Yes: every byte solicited
    assert m.r2t_rounds(1 << 20, 262144, 65536, False, True, 8192) == 4
    # InitialR2T=No: the first burst goes unsolicited; a 64 KiB write needs no R2T at all
    assert m.r2t_rounds(64 << 10, 262144, 65536, True, False, 8192) == 0
    # ImmediateData only: the command carries 8 KiB, the remaining 56 KiB need one R2T
    assert m.r2t_rounds(64 << 10, 262144, 65536, True, True, 8192) == 1
    with pytest.raises(ValueError):
        m.r2t_rounds(1 << 20, 0, 65536, True, True, 8192)


def test_eq3_pdu_size_and_round_trips():
    rate, rtt = 40e6, 0.002
    # 512-byte PDUs carry 48 bytes of header each: 2048 of them on a 1 MiB READ
    assert m.data_pdus(1 << 20, 512) == 2048
    assert m.wire_bytes(1 << 20, 512) - m.wire_bytes(1 << 20, 262144) > 2044 * 48
    small, big = (m.iscsi_throughput(1 << 20, p, rtt, rate) for p in (512, 262144))
    assert 0.85 * big < small < big                   # headers alone cost under 15 %
    # each R2T round trip costs one RTT: 64 of them dominate a 1 MiB write at 2 ms
    t = m.command_seconds(1 << 20, 8192, rtt, rate, rounds=64)
    assert t == pytest.approx(65 * rtt + m.wire_bytes(1 << 20, 8192) / rate)
    # queue depth fills the link but never passes it
    assert m.iscsi_throughput(1 << 20, 8192, rtt, rate, queue_depth=64) < rate
