"""Path emulation accuracy, measured: ping RTT vs delay, TCP throughput vs rate, loss rate.

Each test brings its own small testbed up (unique names) and prints what it measured, so the
numbers in docs/testbed.md can be re-read from `pytest -s tests/testbed/test_path.py`.
"""

import json
import os
import re
import statistics
import time

import pytest
from istrace.testbed.namespaces import Testbed, TestbedConfig
from istrace.testbed.path import rt_prefix
from tb_helpers import leftovers


def load_note():
    """For failure messages: these are timing tests, and the machine may be shared."""
    return f"load average {os.getloadavg()} on {os.cpu_count()} CPUs"


def ping_rtts(tb, count, interval="0.02"):
    """ping at real-time priority (as the forwarder): the path is measured, not how long a
    busy machine keeps the ping process waiting for a CPU."""
    r = tb.run_ini([*rt_prefix(), "ping", "-n", "-c", str(count), "-i", interval, tb.tgt_ip],
                   capture_output=True, timeout=60)
    return [float(x) for x in re.findall(r"time=([0-9.]+)", r.stdout)]


def within(measured_ms, target_ms):
    """5% of the set RTT, plus 0.1 ms for the stack's own hops."""
    return abs(measured_ms - target_ms) <= 0.05 * target_ms + 0.1


def rtt_rounds(tb, target_ms, rounds=5):
    """(25th percentile, median) of 40 pings, again (up to `rounds` times) while the 25th
    percentile misses. The path's delay is judged by the 25th percentile, as the testbed's
    calibration is: on a virtual machine whose host is busy, an idle vCPU wakes from 0.1 to a
    few ms late, and a fifth or more of the pings can carry such a late wakeup of the forwarder
    (a CI run saw every median 0.4-0.6 ms high at 1 ms). Those only add; a path that is
    really off moves the low quantile too, in every round."""
    seen = []
    for _ in range(rounds):
        rtts = sorted(ping_rtts(tb, 40))
        assert len(rtts) >= 38
        seen.append((rtts[len(rtts) // 4], statistics.median(rtts)))
        if within(seen[-1][0], target_ms):
            break
        time.sleep(1)
    return seen


@pytest.mark.parametrize("delay_ms", [1, 10, 100])
def test_ping_rtt_is_twice_the_delay(delay_ms):
    with Testbed(TestbedConfig(name=f"tbp{delay_ms}", delay_ms=delay_ms, lun_mb=1)) as tb:
        assert tb.emulator in ("dummynet", "netem")
        seen = rtt_rounds(tb, 2 * delay_ms)
        low, med = seen[-1]
        print(f"\ndelay {delay_ms} ms one way: ping RTT 25th percentile {low:.3f} ms, median "
              f"{med:.3f} ms (rounds {seen}), compensation {tb.state.get('compensate_us')} us")
        assert within(low, 2 * delay_ms), (seen, load_note())
    assert leftovers(f"tbp{delay_ms}") == []


def test_asymmetric_delay():
    cfg = TestbedConfig(name="tbpas", delay_i2t_ms=5, delay_t2i_ms=15, lun_mb=1)
    with Testbed(cfg) as tb:
        low, med = rtt_rounds(tb, 20)[-1]
        print(f"\n5 ms + 15 ms: ping RTT 25th percentile {low:.3f} ms, median {med:.3f} ms")
        assert within(low, 20)


@pytest.mark.parametrize("fields", [{}, {"delay_ms": 1, "rate_mbit": 300}])
def test_jumbo_mtu_end_to_end(fields):
    """--mtu 9000 sets every link, the forwarder's TUNs included: a 9000-byte packet with
    don't-fragment crosses the path; at the default MTU the same ping is refused."""
    def big_ping(tb):
        return tb.run_ini(["ping", "-M", "do", "-s", "8972", "-c", "1", "-W", "2", tb.tgt_ip],
                          capture_output=True)

    with Testbed(TestbedConfig(name="tbmtu", mtu=9000, **fields)) as tb:
        r = big_ping(tb)
        assert r.returncode == 0, r.stdout + r.stderr
        assert tb.describe()["mtu"] == 9000
    with Testbed(TestbedConfig(name="tbmtu", **fields)) as tb:
        r = big_ping(tb)
        assert r.returncode != 0 and "mtu=1500" in r.stdout + r.stderr


def iperf(tb, args, seconds, port):
    srv = tb.popen_tgt(["iperf3", "-s", "-1", "-B", tb.tgt_ip, "-p", str(port)],
                       stdout=open(os.devnull, "w"), stderr=open(os.devnull, "w"))
    try:
        for _ in range(50):  # the server listens within a moment; bounded wait
            r = tb.run_tgt(["ss", "-ltn", f"sport = :{port}"], capture_output=True)
            if f":{port}" in r.stdout:
                break
            time.sleep(0.1)
        r = tb.run_ini(["iperf3", "-c", tb.tgt_ip, "-p", str(port), "-t", str(seconds), "-J",
                        *args], capture_output=True, timeout=seconds + 30)
        assert r.returncode == 0, r.stdout[-500:] + r.stderr
        return json.loads(r.stdout)["end"]
    finally:
        srv.kill()
        srv.wait()


def forwarder_cpu(tb):
    pid = tb.state["dummynet_pid"]
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("rate", [100, 300])
def test_tcp_reaches_the_set_rate(rate):
    cfg = TestbedConfig(name=f"tbr{rate}", delay_ms=1, rate_mbit=rate, lun_mb=1)
    # iperf3 counts TCP payload: 1448 of every 1500 IP bytes the link carries
    expect = rate * 1448 / 1500
    with Testbed(cfg) as tb:
        seen = []
        # another run only if a CPU-starved one fell short (seen on CI at 300 Mbit/s: 273 and
        # 255 with the load average at 1.65 on 2 CPUs); a run above the rate fails at once
        for attempt in range(3):
            end = iperf(tb, ["-O", "1"], 4, 5311 + attempt)
            seen.append(end["sum_received"]["bits_per_second"] / 1e6)
            if seen[-1] - expect >= -0.05 * expect:
                break
        got = seen[-1]
        print(f"\nrate {rate} Mbit/s (IP): TCP goodput {got:.1f} Mbit/s, expected "
              f"{expect:.1f} ({100 * (got / expect - 1):+.1f}%), runs {seen}")
        assert abs(got - expect) <= 0.05 * expect, f"{seen}: {load_note()}"


def test_loss_rate():
    """5% per direction: an echo survives both, so ping loses 1 - 0.95^2 = 9.75%."""
    cfg = TestbedConfig(name="tbloss", loss=0.05, lun_mb=1)
    with Testbed(cfg) as tb:
        # flood with 32 in flight: 10k echoes in a few seconds even on a busy machine
        r = tb.run_ini(["ping", "-n", "-q", "-c", "10000", "-f", "-l", "32", "-W", "1",
                        tb.tgt_ip], capture_output=True, text=True, timeout=60)
        m = re.search(r"(\d+) packets transmitted, (\d+) received", r.stdout)
        assert m, r.stdout + r.stderr
        sent, got = int(m.group(1)), int(m.group(2))
        time.sleep(1.2)  # the forwarder writes its counters every second
        stats = json.loads((tb.run_dir / "dummynet.json").read_text())
        fwd = {d: stats[d]["drop_loss"] / stats[d]["rx_pkts"] for d in ("i2t", "t2i")}
        lost = 1 - got / sent
        print(f"\nloss 5% each way: ping lost {sent - got}/{sent} = {100 * lost:.2f}% "
              f"(expected 9.75%), forwarder dropped i2t {100 * fwd['i2t']:.2f}% "
              f"t2i {100 * fwd['t2i']:.2f}%")
        assert sent == 10000
        assert abs(lost - 0.0975) <= 0.1 * 0.0975
        for frac in fwd.values():
            assert abs(frac - 0.05) <= 0.005


def test_bulk_at_16ms_and_forwarder_cpu():
    """No rate limit: what one TCP flow gets through the forwarder at 16 ms, and its CPU."""
    cfg = TestbedConfig(name="tbcpu", delay_ms=16, lun_mb=1)
    with Testbed(cfg) as tb:
        c0, t0 = forwarder_cpu(tb), time.monotonic()
        end = iperf(tb, ["-O", "2"], 5, 5313)
        cpu = 100 * (forwarder_cpu(tb) - c0) / (time.monotonic() - t0)
        got = end["sum_received"]["bits_per_second"] / 1e6
        time.sleep(1.2)
        stats = json.loads((tb.run_dir / "dummynet.json").read_text())
        print(f"\n16 ms, no rate limit: TCP goodput {got:.0f} Mbit/s, forwarder CPU {cpu:.0f}% "
              f"of one core (both directions), drops ring {stats['i2t']['drop_ring']}")
        assert got > 50
        assert stats["i2t"]["drop_ring"] == 0
