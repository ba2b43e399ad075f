"""A process under a CPU quota: saturated by the kernel's throttle count, not its clock ticks
(a 5% cap earns a few 10 ms ticks per sample: a process held at its cap all along reads 85-95%
of it), and a verdict that blames the target's service time while its CPU was near its cap says
it is unsure."""

import json
from types import SimpleNamespace

from istrace.capture import layout
from istrace.capture.hoststats import load_hoststats
from istrace.report import accounting, verdict

CPUS = {"cpu": [0, 0, 0, 0, 0, 0, 0, 0]}


def _write(d, throttled):
    """Four samples 1 s apart of a tgtd capped at 5% that earned 4, 4 and 5 ticks (87% of its
    cap); its cgroup's counters when `throttled` is a number (of 10 periods a second)."""
    with open(layout.hoststats_file(d, "target"), "w") as f:
        for i, ticks in enumerate((0, 4, 8, 13)):
            proc = {"pid": 7, "utime": 0, "stime": ticks}
            if throttled is not None:
                proc["cgroup"] = {"cgroup": "/tgtd", "quota_us": 5000, "period_us": 100000,
                                  "periods": 10 * i, "throttled": throttled * i,
                                  "throttled_us": 90000 * i}
            cpus = {"cpu": [i * 10, 0, 0, 200 - i * 10, 0, 0, 0, 0]}
            f.write(json.dumps({"ts_ns": i * 10 ** 9, "host": "target", "user_hz": 100,
                                "cpus": cpus, "procs": {"tgtd": proc}}) + "\n")


def _cap(d):
    _, cpu = load_hoststats(d)
    return SimpleNamespace(cpu=cpu, meta={"testbed": {"tgt_cpu": 5}})


def test_throttle_count_decides(tmp_path):
    _write(tmp_path, throttled=10)
    cap = _cap(tmp_path)
    assert abs(accounting.cpu_use(cap)["target"]["tgtd"] - 0.867) < 0.01
    assert accounting.cpu_throttled(cap) == {"target": 1.0}
    assert accounting.cpu_saturation(cap)["target"] >= accounting.CPU_SATURATED
    assert verdict.cpu_near("target_service", accounting.cpu_saturation(cap)) is None


def test_rarely_throttled_is_not_saturated(tmp_path):
    _write(tmp_path, throttled=2)
    cap = _cap(tmp_path)
    assert accounting.cpu_throttled(cap) == {"target": 0.2}
    assert accounting.cpu_saturation(cap)["target"] < accounting.CPU_SATURATED
    assert verdict.cpu_near("target_service", accounting.cpu_saturation(cap)) is None


def test_ticks_near_the_cap_make_the_verdict_unsure(tmp_path):
    _write(tmp_path, throttled=None)  # an older capture, or a kernel without the counters
    cap = _cap(tmp_path)
    assert accounting.cpu_throttled(cap) == {}
    sat = accounting.cpu_saturation(cap)
    assert 0.8 < sat["target"] < accounting.CPU_SATURATED
    why = verdict.cpu_near("target_service", sat)
    assert why and verdict.cause_words("host_cpu_target") in why  # in words, not its id
    assert verdict.cpu_near("tcp_rwnd", sat) is None


def test_a_cgroup_moved_between_samples_is_not_counted(tmp_path):
    _write(tmp_path, throttled=10)
    lines = layout.hoststats_file(tmp_path, "target").read_text().splitlines()
    rec = json.loads(lines[3])
    rec["procs"]["tgtd"]["cgroup"]["cgroup"] = "/elsewhere"
    lines[3] = json.dumps(rec)
    layout.hoststats_file(tmp_path, "target").write_text("\n".join(lines) + "\n")
    cap = _cap(tmp_path)
    assert accounting.cpu_throttled(cap) == {"target": 1.0}  # the first two intervals
    assert cap.cpu[cap.cpu["what"] == "tgtd"]["periods"].isna().sum() == 1
