"""Figures and tables from CSVs (model-made data): `istrace reproduce X --plot-only`."""

import csv

from istrace.cli import reproduce
from istrace.model import study as m
from istrace.reproduce import delay as repro_delay
from istrace.reproduce import parallel as repro_parallel
from istrace.reproduce import sessions as repro_sessions
from istrace.reproduce import window as repro_window


def _write(path, columns, rows):
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=columns)
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "") for c in columns} | {"status": "ok"})


def _png_ok(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_delay_sweep_plot_and_factor(tmp_path, capsys):
    rows = []
    for txq, lower in ((256, 25.0), (4096, 40.0)):
        for p in repro_delay.plan(quick=False):
            if p["txqueuelen"] != txq:
                continue
            d = p["delay_ms"]
            mbps = lower if p["series"] == "socket" else m.seq_read_throughput(
                p["size"], d / 1e3, lower * m.MB) / m.MB
            rows.append(p | {"mbps": mbps})
    _write(tmp_path / "delay-sweep.csv", repro_delay.COLUMNS, rows)
    assert reproduce.main(["delay-sweep", "--plot-only", "--out", str(tmp_path)]) == 0
    _png_ok(tmp_path / "repro-delay-sweep.png")
    out = capsys.readouterr().out
    factor = (m.seq_read_throughput(4 << 20, 0.016, 40e6) / m.seq_read_throughput(
        32 << 10, 0.016, 25e6))
    assert f"at 16 ms: {factor:.1f}x" in out
    table = (tmp_path / "delay-sweep-table.csv").read_text()
    assert "model_mbps" in table.splitlines()[0]


def test_parallel_plot(tmp_path, capsys):
    rows = []
    for p in repro_parallel.plan(quick=False):
        q = min(p["queue_depth"], 128)  # the target's window caps the unlimited series
        rows.append(p | {"tps": q / 0.033, "outstanding": q, "rtt_ms": 33.0})
    _write(tmp_path / "parallel.csv", repro_parallel.COLUMNS, rows)
    assert reproduce.main(["parallel", "--plot-only", "--out", str(tmp_path)]) == 0
    _png_ok(tmp_path / "repro-parallel.png")
    assert "lifting the limits: 64.0x" in capsys.readouterr().out


def test_sessions_plot(tmp_path, capsys):
    rows, search = [], []
    for d in (10.0, 100.0):
        per = m.seq_read_throughput(1 << 20, d / 1e3, 25e6, cycle_delays=2) / m.MB
        for n in (1, 2, 4, 8, 16, 32):
            for k, noise in enumerate((-0.2, 0.0, 0.2), 1):   # three runs, sd 0.2
                rows.append({"delay_ms": d, "sessions": n, "repeat": k,
                             "mbps": min(25.0, n * per) - 0.01 * n + noise})
        for step, n in enumerate((13, 20, 8, 5), 1):
            search.append({"delay_ms": d, "step": step, "sessions": n,
                           "mbps": min(25.0, n * per) - 0.01 * n})
    _write(tmp_path / "sessions.csv", repro_sessions.COLUMNS, rows)
    with (tmp_path / "sessions-search.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["delay_ms", "step", "sessions", "mbps"])
        w.writeheader()
        w.writerows(search)
    assert reproduce.main(["sessions", "--plot-only", "--out", str(tmp_path)]) == 0
    _png_ok(tmp_path / "repro-sessions.png")
    out = capsys.readouterr().out
    assert "100 ms: 1 session" in out
    # mean of three runs with sd 0.2: t(2) 4.303 * 0.2 / sqrt(3) = 0.50 MB/s either side
    assert "± 0.50 MB/s" in out
    # at 10 ms the path is full from 2 sessions on, and the noise cannot rank 2..32
    assert "10 ms: 1 session" in out and "within the best's 95% interval: 2, 4, 8, 16, 32" in out
    assert "10 ms: search picked 5 sessions after 4 evaluations, within the noise of" in out


def test_sessions_confidence_interval():
    import pandas as pd

    df = pd.DataFrame({"delay_ms": [10.0] * 5, "sessions": [1, 1, 2, 2, 4],
                       "mbps": [1.0, 3.0, 10.0, 10.0, 9.0]})
    p = repro_sessions.points(df).set_index("sessions")
    assert p.loc[1, "mbps"] == 2.0 and p.loc[1, "runs"] == 2
    assert abs(p.loc[1, "ci95"] - 12.706 * 2 ** 0.5 / 2 ** 0.5) < 1e-9  # t(1) * sd / sqrt(n)
    assert p.loc[2, "ci95"] == 0.0 and pd.isna(p.loc[4, "ci95"])       # one run: no interval
    assert repro_sessions.indistinguishable(p.reset_index()) == [1, 2]


def test_window_plot(tmp_path, capsys):
    rows = []
    for p in repro_window.plan(quick=False):
        rtt = 2 * p["delay_ms"] + 0.1
        window = p["buffer"] * (0.6 if p["mss"] >= 1460 else 0.3)
        bound = m.window_bound(window, rtt / 1e3) / m.MB
        mbps = min(bound * 0.9, 100.0)
        rows.append(p | {"mbps": mbps, "window": window, "bound_mbps": bound, "rtt_ms": rtt,
                         "ratio": mbps / bound})
    _write(tmp_path / "window.csv", repro_window.COLUMNS, rows)
    assert reproduce.main(["window", "--plot-only", "--out", str(tmp_path)]) == 0
    _png_ok(tmp_path / "repro-window.png")
    assert "varying mss" in capsys.readouterr().out


def test_plot_only_without_csv_is_a_clear_error(tmp_path, capsys):
    assert reproduce.main(["window", "--plot-only", "--out", str(tmp_path / "none")]) == 1
    assert "window.csv" in capsys.readouterr().err


def test_bad_arguments():
    import pytest
    with pytest.raises(SystemExit):
        reproduce.main(["nosuch"])
    assert reproduce.main(["window", "--time", "0", "--plot-only"]) == 2


def test_params_plot_and_findings(tmp_path, capsys):
    from istrace.reproduce import params as repro_params

    rows = []
    for p in repro_params.plan(quick=False):
        rtt = 2 * p["delay_ms"] + 0.05
        neg = {"MaxRecvDataSegmentLength": p["mrdsl"], "TargetMaxRecvDataSegmentLength": 8192,
               "MaxBurstLength": p["max_burst"], "FirstBurstLength": p["first_burst"],
               "ImmediateData": p["immediate"], "InitialR2T": p["initial_r2t"]}
        model_mbps, rounds = repro_params.predict(p, neg, rtt)
        pdu = 8192 if p["write"] else p["mrdsl"]
        if p["series"] == "burst-read":
            pdu = 262144      # a target that ignores MaxBurstLength on Data-In
        pdus = m.data_pdus(p["size"], pdu)
        # 10 µs of per-PDU work the model does not have
        mbps = p["size"] / (p["size"] / (model_mbps * m.MB) + pdus * 10e-6) / m.MB
        rows.append(p | {"mbps": mbps, "commands": 10, "pdus_per_cmd": pdus,
                         "r2t_per_cmd": rounds, "pdu_bytes": p["size"] / pdus,
                         "neg_max_burst": p["max_burst"], "model_mbps": model_mbps,
                         "model_r2t": rounds, "ratio": mbps / model_mbps, "rtt_ms": rtt})
    _write(tmp_path / "params.csv", repro_params.COLUMNS, rows)
    assert reproduce.main(["params", "--plot-only", "--out", str(tmp_path)]) == 0
    _png_ok(tmp_path / "repro-params.png")
    out = capsys.readouterr().out
    assert "the model leaves out 10.0 µs per data PDU" in out
    assert "burst-read: the target sent Data-In PDUs of 262144 B with MaxBurstLength=16384" in out
    assert "R2Ts per command match the model's rounds at 28/28 points" in out


def test_blocksize_plot_names_cpu_bound_runs(tmp_path, capsys):
    from istrace.reproduce import blocksize as repro_bs

    rows = []
    for p in repro_bs.plan(quick=False):
        b = p["block"]
        tgt = min(1.0, 0.2 + b / 65536)
        faster = 1.5 if p["mtu"] == 9000 else 1.0
        rows.append(p | {"mbps": b / 1000 * p["queue_depth"] * faster,
                         "lat_mean_us": 100 + b / 100,
                         "lat_p99_us": 200 + b / 50, "commands": 1000, "ini_cpu": 0.3,
                         "tgt_cpu": tgt, "machine_busy": 1.0, "softirq": 0.3, "irq": 0.0,
                         "system": 0.5, "user": 0.2, "other": 0.0, "cpus": 2,
                         "cpu_bound": repro_bs.cpu_bound(0.3, tgt, 1.0, 2)})
    _write(tmp_path / "blocksize.csv", repro_bs.COLUMNS, rows)
    assert reproduce.main(["blocksize", "--plot-only", "--out", str(tmp_path)]) == 0
    _png_ok(tmp_path / "repro-blocksize.png")
    out = capsys.readouterr().out
    assert "CPU-bound: latency 65536 B" in out and "target (tgtd 100% of a CPU)" in out
    assert "CPU-bound: throughput 512 B" not in out
    assert "copy and checksum time: not measured" in out
    # the machine was 1.0 CPU busy throughout, 0.3 of it softirq: over 524 MB, then 786 MB
    assert ("jumbo frames (MTU 9000) at 64 KiB: packet work 0.57 -> 0.38 (33% less) CPU-s "
            "per GB, the run's CPU 1.91 -> 1.27 (33% less) CPU-s per GB, 524 -> 786 MB/s") in out


def test_blocksize_cpu_split_and_naming():
    from istrace.reproduce import blocksize as repro_bs
    from istrace.system.cputime import USER_HZ

    hz = USER_HZ
    before = {"cpu": [0, 0, 0, 0, 0, 0, 0, 0]}
    # over 2 s: 1 s user, 1 s system, 0.5 s softirq, 1.5 s idle (of 2 CPUs)
    after = {"cpu": [hz, 0, hz, int(1.5 * hz), 0, 0, hz // 2, 0]}
    s = repro_bs.cpu_split(before, after, 2.0)
    assert s["user"] == 0.5 and s["system"] == 0.5 and s["softirq"] == 0.25
    assert s["machine_busy"] == 1.25
    assert repro_bs.cpu_bound(0.2, 0.95, 1.2, 2) == "target (tgtd 95% of a CPU)"
    assert repro_bs.cpu_bound(0.97, 0.5, 1.5, 2) == "initiator (istrace-gen 97% of a CPU)"
    assert repro_bs.cpu_bound(0.6, 0.6, 1.9, 2) == "machine (95% of 2 CPUs)"
    assert repro_bs.cpu_bound(0.6, 0.6, 1.2, 2) == ""


def test_kernel_plot_and_table(tmp_path, capsys):
    """`reproduce kernel --plot-only`: the split per max_sectors_kb and the readers' ceilings,
    with the cap each point's report named, from a CSV whose answer is known."""
    from istrace.reproduce import kernel as repro_kernel

    rows = []
    for p in repro_kernel.plan(quick=False):
        if p["kind"] == "split":
            kb = p["max_sectors_kb"]
            rows.append(p | {"requests_per_read": max(1, 2048 // kb),
                             "request_bytes": min(kb, 2048) * 1024,
                             "split_named": f"max_sectors_kb = {kb}"})
        else:
            cq = p["cmds_max"] - 15
            n = min(p["readers"], p["queue_depth"], cq)
            rows.append(p | {"tps": n * 70.0, "max_outstanding": n, "can_queue": cq,
                             "ceiling_named": "the SCSI device's queue_depth = 2 (meta.json)"
                             if n == 2 < p["readers"] else ""})
    _write(tmp_path / "kernel.csv", repro_kernel.COLUMNS, rows)
    assert reproduce.main(["kernel", "--plot-only", "--out", str(tmp_path)]) == 0
    _png_ok(tmp_path / "repro-kernel.png")
    out = capsys.readouterr().out
    split_32 = [line.split() for line in out.splitlines() if line.split()[:1] == ["32"]]
    assert split_32 and split_32[0][1:3] == ["64.0", "32768"], out
    assert out.count("the SCSI device's queue_depth = 2 (meta.json)") == 3   # 4, 8, 16 readers
