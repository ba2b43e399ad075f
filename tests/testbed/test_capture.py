"""istrace capture end to end on a real testbed, and teardown after a kill -9 mid-capture."""

import json
import os
import signal
import subprocess
import time

from tb_helpers import istrace_argv, leftovers


def test_capture_iscsi_perf(istrace, tmp_path):
    out = tmp_path / "cap"
    r = istrace("capture", "--name", "tbcap", "--delay", "2ms", "--lun-mb", "16",
                "--workload", "iscsi-perf -t 3 $ISTRACE_LUN_URL", "--out", str(out),
                timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert meta["status"] == "ok"
    assert meta["workload"]["returncode"] == 0
    assert "iops average" in (out / "workload.stdout").read_text()
    for role in ("initiator", "target"):
        cap = meta["captures"][role]
        pcap = out / cap["file"]
        assert pcap.stat().st_size > 100_000, role
        assert cap["packets_captured"] > 1000
        assert cap["dropped_by_kernel"] == 0, cap
        # the capture reads back: tshark sees iSCSI in it
        t = subprocess.run(["tshark", "-r", str(pcap), "-c", "200", "-Y", "iscsi"],
                           capture_output=True, text=True, timeout=120)
        assert "iSCSI" in t.stdout or "SCSI" in t.stdout, t.stderr
        assert meta["probes"][role]["status"]  # ok, or "probes unavailable: why"
    assert meta["complete"] is True and meta["drops_total"] == 0
    assert meta["testbed"]["delay_i2t_ms"] == 2.0 and meta["testbed"]["emulator"] == "dummynet"
    for key in ("host", "tools", "clock_start", "clock_end", "negotiated", "started_ns",
                "ended_ns", "path_stats"):
        assert meta.get(key) is not None, key
    assert meta["host"]["kernel"] == os.uname().release
    assert meta["clock"]["same_host_clock"] is True
    neg = meta["negotiated"]
    if "connections" in neg:  # the decoder is built: negotiated keys from the login
        assert neg["connections"][0]["target_name"].endswith(":tbcap")
    assert "packets" in r.stdout and "WARNING" not in r.stderr
    assert leftovers("tbcap") == []


def test_failing_workload_keeps_files_and_cleans_up(istrace, tmp_path):
    out = tmp_path / "fail"
    r = istrace("capture", "--name", "tbfail", "--no-probes", "--lun-mb", "1",
                "--workload", "echo started; exit 7", "--out", str(out), timeout=120)
    assert r.returncode == 3
    meta = json.loads((out / "meta.json").read_text())
    assert meta["status"] == "workload_failed" and meta["workload"]["returncode"] == 7
    assert (out / "workload.stdout").read_text() == "started\n"
    assert meta["captures"]["initiator"]["dropped_by_kernel"] == 0
    assert leftovers("tbfail") == []


def test_kill_9_mid_capture_then_down(istrace, tmp_path):
    out = tmp_path / "k9"
    argv, env = istrace_argv("capture", "--name", "tbk9", "--delay", "5ms", "--lun-mb", "4",
                             "--workload", "iscsi-perf -t 60 $ISTRACE_LUN_URL",
                             "--out", str(out))
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:  # wait until the workload runs
            if (out / "workload.stdout").exists() and (out / "workload.stdout").stat().st_size:
                break
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.2)
        else:
            raise AssertionError("workload never started")
        assert any("tcpdump" in line for line in leftovers("tbk9"))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # kill -9 left everything running: namespaces, tgtd, dummynet, tcpdump, the workload
    assert leftovers("tbk9")
    r = istrace("testbed", "down", "--name", "tbk9", timeout=60)
    assert r.returncode == 0, r.stderr
    assert leftovers("tbk9") == []
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(out) not in ps  # tcpdump writing into the capture dir is gone too
    # what tcpdump wrote stays a readable capture
    t = subprocess.run(["tcpdump", "-r", str(out / "initiator.pcap"), "-c", "5"],
                       capture_output=True, text=True, timeout=60)
    assert t.returncode == 0, t.stderr


def test_real_hosts_code_path_over_an_ssh_shim(istrace, tmp_path):
    """--initiator-host/--target-host: the ssh command building, remote files, fetch-back.

    The shim stands in for `ssh HOST CMD` by running CMD in the namespace named HOST, which
    exercises everything the real-host path does except the network login itself."""
    from istrace.testbed.namespaces import Testbed, TestbedConfig

    shim = tmp_path / "fake-ssh"
    shim.write_text('#!/bin/sh\nhost="$1"; shift\nexec ip netns exec "$host" sh -c "$*"\n')
    shim.chmod(0o755)
    out = tmp_path / "remote"
    with Testbed(TestbedConfig(name="tbssh", delay_ms=1, lun_mb=4)) as tb:
        r = istrace("capture", "--initiator-host", tb.ini_ns, "--target-host", tb.tgt_ns,
                    "--ssh-cmd", str(shim), "--initiator-iface", tb.ini_dev,
                    "--target-iface", tb.tgt_dev, "--portal", tb.portal, "--iqn", tb.iqn,
                    "--remote-dir", str(tmp_path / "remote-work"), "--no-probes",
                    "--workload", "iscsi-perf -t 2 $ISTRACE_LUN_URL", "--out", str(out),
                    timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert meta["testbed"]["mode"] == "ssh" and meta["status"] == "ok"
    clk = meta["clock"]["hosts"]["target"]
    assert clk["kernel"] == os.uname().release and abs(clk["offset_ns_estimate"]) < 1e9
    for role in ("initiator", "target"):
        cap = meta["captures"][role]
        assert cap["fetched"] and cap["dropped_by_kernel"] == 0
        assert (out / cap["file"]).stat().st_size > 50_000
    assert "iops average" in (out / "workload.stdout").read_text()
    assert not any((tmp_path / "remote-work").iterdir())  # remote files cleaned after fetch
    assert leftovers("tbssh") == []


def test_ctrl_c_mid_capture_stops_in_order(tmp_path):
    out = tmp_path / "int"
    argv, env = istrace_argv("capture", "--name", "tbint", "--no-probes", "--lun-mb", "4",
                             "--workload", "iscsi-perf -t 60 $ISTRACE_LUN_URL",
                             "--out", str(out))
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 60
        while not ((out / "workload.stdout").exists()
                   and (out / "workload.stdout").stat().st_size):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.2)
        time.sleep(1)
        proc.send_signal(signal.SIGINT)  # what a terminal's Ctrl-C delivers
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    meta = json.loads((out / "meta.json").read_text())
    assert meta["status"] == "interrupted"
    for role in ("initiator", "target"):
        cap = meta["captures"][role]
        assert cap["dropped_by_kernel"] == 0 and cap["packets_captured"] > 100
        t = subprocess.run(["tcpdump", "-r", str(out / cap["file"]), "-q"],
                           capture_output=True, text=True, timeout=60)
        assert t.returncode == 0 and "truncated" not in t.stderr, t.stderr
    assert leftovers("tbint") == []


def test_lost_packets_are_reported_loudly(istrace, tmp_path):
    """A tiny capture buffer on a bulk read must drop, and the capture must say so."""
    out = tmp_path / "drop"
    r = istrace("capture", "--name", "tbdrp", "--no-probes", "--buffer-kib", "16",
                "--lun-mb", "64", "--workload",
                "iscsi-perf -t 2 -b 2048 -m 8 $ISTRACE_LUN_URL", "--out", str(out),
                timeout=120)
    assert r.returncode == 0, r.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert meta["drops_total"] > 0 and meta["complete"] is False
    assert meta["drops_total"] == sum(c["dropped_by_kernel"] for c in meta["captures"].values())
    assert "LOST" in r.stderr and "WARNING" in r.stderr
    assert any("lost" in w for w in meta["warnings"])
    assert leftovers("tbdrp") == []
