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
