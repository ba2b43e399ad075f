"""What would help: the models' predictions, and the CPU ceiling none may pass."""

import pytest
from istrace.report.advice import what_would_help

EV = {"throughput_MBps": 80.0, "outstanding_max": 1, "command_bytes": 4 << 20,
      "response_ms_p50": 50.0}


def test_more_outstanding_commands_by_littles_law():
    [little] = what_would_help("initiator_concurrency", [], {"initiator_concurrency": 0.9}, EV)
    # 4 outstanding x 4 MiB / 50 ms
    assert little["predicted_MBps"] == pytest.approx(4 * (4 << 20) / 0.05 / 1e6, abs=0.01)
    assert "CPU" not in little["model"]


def test_no_prediction_past_the_cpu_ceiling():
    """At 80 MB/s the busiest machine is half busy: no change can give more than 160 MB/s
    without more CPU, whatever the time model says."""
    ev = {**EV, "cpu_use": {"target": {"tgtd": 0.1, "all_cpus": 0.5},
                            "initiator": {"workload": 0.05, "all_cpus": 0.5}}}
    [little] = what_would_help("initiator_concurrency", [], {"initiator_concurrency": 0.9}, ev)
    assert little["predicted_MBps"] == pytest.approx(160.0)
    assert "capped at the CPU ceiling" in little["model"] and "(50%)" in little["model"]
    # a process held at its cgroup cap: nothing to gain without more CPU for it
    ev["cpu_use"] = {"target": {"tgtd": 1.0, "all_cpus": 0.1}}
    [little] = what_would_help("initiator_concurrency", [], {"initiator_concurrency": 0.9}, ev)
    assert little["predicted_MBps"] == pytest.approx(80.0)


def test_the_setting_is_data_not_prose():
    """Scripts (the scenario suite's help runs) apply the advised setting from `value`."""
    [little] = what_would_help("initiator_concurrency", [], {"initiator_concurrency": 0.9}, EV)
    assert little["value"] == 4 and "to 4 " in little["change"]
    [buf] = what_would_help("tcp_rwnd", [], {"tcp_rwnd": 0.9},
                            {**EV, "rcvbuf_max": 65536.0, "rtt_base_ms": 20.0})
    assert buf["value"] == 4 * 65536 and f"{4 * 65536} bytes" in buf["change"]
