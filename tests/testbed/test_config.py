"""Option parsing, config checks and the netem command building (no namespaces needed)."""

import argparse

import pytest
from istrace.cli.testbed import parse_delay, parse_loss, parse_rate
from istrace.testbed import path as testbed_path
from istrace.testbed.namespaces import Testbed, TestbedConfig


def test_units():
    assert parse_delay("16ms") == 16 and parse_delay("0.5s") == 500
    assert parse_delay("250us") == 0.25 and parse_delay("7") == 7
    assert parse_rate("1gbit") == 1000 and parse_rate("500mbit") == 500
    assert parse_rate("800kbit") == 0.8 and parse_rate("100m") == 100
    assert parse_loss("0.1%") == pytest.approx(0.001) and parse_loss("0.05") == 0.05
    for bad, fn in (("fast", parse_rate), ("-1ms", parse_delay), ("150%", parse_loss),
                    ("x%", parse_loss)):
        with pytest.raises(argparse.ArgumentTypeError):
            fn(bad)


@pytest.mark.parametrize("fields", [
    {"name": "toolong7"}, {"name": "Bad"}, {"delay_ms": 201}, {"delay_i2t_ms": -1},
    {"rate_mbit": -5}, {"loss": 1.0}, {"lun_mb": 0}, {"chap_user": "u"},
    {"emulator": "tc"}, {"txqueuelen": -1}, {"mtu": 100}, {"mtu": 9001},
])
def test_bad_configs_are_refused(fields):
    with pytest.raises(ValueError):
        Testbed(TestbedConfig(**{"name": "tbcfg", **fields}))


def test_emulated_only_when_asked():
    assert not TestbedConfig(name="a").emulated()
    assert TestbedConfig(name="a", delay_t2i_ms=3).one_way() == (0.0, 3.0)
    for f in ({"delay_ms": 1}, {"rate_mbit": 10}, {"loss": 0.01}, {"queue": 50}):
        assert TestbedConfig(name="a", **f).emulated()


def test_default_queue_is_one_bdp():
    assert testbed_path.default_queue(0, 32) == 0
    assert testbed_path.default_queue(100, 1) == 1000
    assert testbed_path.default_queue(1000, 32) == 2667


def test_netem_commands(monkeypatch):
    """Where the kernel has netem, each end gets its direction's delay, rate, loss, limit."""
    calls = []
    monkeypatch.setattr(testbed_path.netns, "sh",
                        lambda cmd, check=True, ns=None: calls.append((ns, cmd)) or "")
    tb = Testbed(TestbedConfig(name="tbnem", delay_i2t_ms=5, delay_t2i_ms=7, rate_mbit=100,
                               loss=0.01, queue=500))
    testbed_path.netem(tb)
    assert calls == [
        ("ist-tbnem-i", ["tc", "qdisc", "replace", "dev", "isttbnem-i", "root", "netem",
                         "delay", "5.0ms", "rate", "100mbit", "loss", "1.0%",
                         "limit", "500"]),
        ("ist-tbnem-t", ["tc", "qdisc", "replace", "dev", "isttbnem-t", "root", "netem",
                         "delay", "7.0ms", "rate", "100mbit", "loss", "1.0%",
                         "limit", "500"]),
    ]


def test_cli_errors_are_one_line(istrace):
    r = istrace("testbed", "up", "--name", "tbbad", "--delay", "300ms")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "200" in r.stderr
    r = istrace("capture", "--out", "/tmp/x")
    assert r.returncode == 2 and "--workload" in r.stderr
    r = istrace("testbed", "down", "--name", "tbnone")
    assert r.returncode == 0 and "not up" in r.stdout
