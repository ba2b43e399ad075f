"""istrace-gen against tgtd: discovery, reads of every size verified, queue depth, sessions,
digests, writes read back, and the socket baseline."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from gen_helpers import GenResult, gen_binary, run_gen, tgtadm
from istrace.testbed import pattern
from istrace.testbed.namespaces import Testbed as Bed

LUN = 64 << 20


def ok(r: GenResult) -> dict:
    assert r.rc == 0, f"rc {r.rc}: {r.stderr[-2000:]}"
    assert r.summary["exit"] == 0 and r.summary["error"] is None
    assert r.summary["errors"] == 0
    return r.summary


def test_discovery(tb: Bed) -> None:
    r = run_gen(tb, "--discover", target=False)
    assert r.rc == 0, r.stderr
    assert r.summary["targets"][0]["name"] == tb.iqn
    assert r.summary["targets"][0]["addresses"][0].startswith(tb.portal)
    # the human form too, and the negotiation table on stderr
    plain = tb.run_ini([gen_binary(), "--portal", tb.portal, "--discover"],
                       capture_output=True, timeout=30)
    assert f"TargetName={tb.iqn}" in plain.stdout
    assert "MaxRecvDataSegmentLength" in plain.stderr and "granted" in plain.stderr


@pytest.mark.parametrize(("size", "count", "nbytes"), [
    ("512", 64, 512), ("32k", 64, 32 << 10), ("1M", 16, 1 << 20), ("16M", 4, 16 << 20),
    ("lun", 1, LUN)])
def test_read_sizes_verified_against_backing_file(tb: Bed, size: str, count: int,
                                                  nbytes: int) -> None:
    s = ok(run_gen(tb, "--size", size, "--count", str(count), "--verify-file", tb.lun_path,
                   "--quiet"))
    assert s["size"] == nbytes
    assert s["commands"] == count and s["bytes"] == count * nbytes
    assert s["verify_errors"] == 0


def test_read_pattern_verify_random_read16(tb: Bed) -> None:
    s = ok(run_gen(tb, "--size", "96k", "--count", "200", "--random", "--cdb16", "--verify",
                   "--quiet"))
    assert s["bytes"] == 200 * 96 * 1024


@pytest.mark.parametrize("qd", [1, 8, 32])
def test_queue_depth(tb: Bed, qd: int) -> None:
    s = ok(run_gen(tb, "--size", "64k", "--count", "600", "--queue-depth", str(qd), "--random",
                   "--verify-file", tb.lun_path, "--quiet"))
    assert s["commands"] == 600 and s["queue_depth"] == qd
    # the engine really keeps qd commands in flight, never more
    assert s["max_outstanding"] == qd
    assert 0.5 * qd <= s["outstanding_mean"] <= qd
    lat = s["lat_us"]
    assert 0 < lat["p10"] <= lat["p50"] <= lat["max"] and lat["mean"] > 0


def test_four_sessions(tb: Bed) -> None:
    s = ok(run_gen(tb, "--size", "32k", "--count", "800", "--sessions", "4", "--queue-depth",
                   "4", "--verify", "--quiet"))
    assert s["sessions"] == 4 and s["commands"] == 800
    assert 8 <= s["max_outstanding"] <= 16  # several sessions were in flight at once


def test_time_bound_progress_lines(tb: Bed) -> None:
    r = run_gen(tb, "--size", "4M", "--time", "2.2", "--verify")
    s = ok(r)
    assert 2.0 <= s["seconds"] <= 4.0 and s["mb_s"] > 0
    progress = [ln for ln in r.stderr.splitlines() if "MB/s" in ln and "outstanding" in ln]
    assert len(progress) >= 2
    assert "p50" in progress[0] and "p99" in progress[0] and "IOPS" in progress[0]


@pytest.mark.parametrize("digest", ["header", "both"])
def test_digests(tb: Bed, digest: str) -> None:
    # tgtd offers no digests unless told to; let it accept CRC32C for this test only
    for key in ("HeaderDigest", "DataDigest"):
        tgtadm(tb, "--op", "update", "--mode", "target", "--tid", "1", "--name", key,
               "--value", "CRC32C,None")
    try:
        args = ["--header-digest", "crc32c"]
        if digest == "both":
            args += ["--data-digest", "crc32c"]
        s = ok(run_gen(tb, *args, "--size", "1M", "--count", "8", "--verify", "--quiet"))
        assert s["negotiated"]["HeaderDigest"] == "CRC32C"
        assert s["negotiated"]["DataDigest"] == ("CRC32C" if digest == "both" else "None")
        # digests on Data-Out too: write a pattern block range and read it back
        if digest == "both":
            off = 40 << 20
            _zero(tb.lun_path, off, 256 << 10)
            ok(run_gen(tb, *args, "--write", "--size", "256k", "--offset", str(off),
                       "--count", "1", "--quiet"))
            ok(run_gen(tb, *args, "--size", "256k", "--offset", str(off), "--count", "1",
                       "--verify", "--quiet"))
        # asking for none still gets none
        s = ok(run_gen(tb, "--size", "4k", "--count", "1", "--quiet"))
        assert s["negotiated"]["HeaderDigest"] == "None"
    finally:
        for key in ("HeaderDigest", "DataDigest"):
            tgtadm(tb, "--op", "update", "--mode", "target", "--tid", "1", "--name", key,
                   "--value", "None")


def _zero(path: str, off: int, length: int) -> None:
    with open(path, "r+b") as f:
        f.seek(off)
        f.write(bytes(length))
        f.flush()
        os.fsync(f.fileno())


@pytest.mark.parametrize("mode", ["immediate+r2t", "r2t-only", "unsolicited"])
def test_write_read_back(tb: Bed, mode: str) -> None:
    off = {"immediate+r2t": 8 << 20, "r2t-only": 16 << 20, "unsolicited": 24 << 20}[mode]
    size, count = 1 << 20, 4
    extra: list[str] = []
    if mode == "r2t-only":
        extra = ["--immediate-data", "no"]
    if mode == "unsolicited":
        tgtadm(tb, "--op", "update", "--mode", "target", "--tid", "1", "--name", "InitialR2T",
               "--value", "No")
        extra = ["--initial-r2t", "no", "--first-burst", "65536"]
    try:
        _zero(tb.lun_path, off, size * count)
        bad = run_gen(tb, "--size", "1M", "--offset", str(off), "--count", str(count),
                      "--verify", "--quiet")
        assert bad.rc == 7 and "verify failed" in bad.stderr  # the hole is seen
        w = ok(run_gen(tb, "--write", "--size", "1M", "--offset", str(off), "--count",
                       str(count), "--queue-depth", "2", *extra, "--quiet"))
        neg = w["negotiated"]
        if mode == "unsolicited":
            assert neg["InitialR2T"] == "No"
        if mode == "r2t-only":
            assert neg["ImmediateData"] == "No"
        assert w["bytes"] == size * count
        # PDUs as RFC 7143 gives them for these keys: tgtd's MaxRecvDataSegmentLength (8 KiB)
        # sizes Data-Out, its MaxBurstLength (256 KiB) each R2T; immediate data rides along
        # with the command unless switched off
        assert neg["TargetMaxRecvDataSegmentLength"] == 8192 and neg["MaxBurstLength"] == 262144
        imm = 0 if mode == "r2t-only" else 8192
        unsolicited = 65536 if mode == "unsolicited" else imm
        assert w["pdus"]["r2t"] == count * -(-(size - unsolicited) // 262144)
        assert w["pdus"]["data_out"] == count * ((size - imm) // 8192)
        assert w["pdus"]["data_in"] == 0
        r = ok(run_gen(tb, "--size", "1M", "--offset", str(off), "--count", str(count),
                       "--verify", "--quiet"))
        # READs: Data-In sized by our MaxRecvDataSegmentLength (256 KiB), no R2T
        assert r["pdus"] == {"data_in": count * 4, "data_out": 0, "r2t": 0}
        with open(tb.lun_path, "rb") as f:
            f.seek(off)
            assert f.read(size * count) == pattern.expected(off, size * count)
    finally:
        if mode == "unsolicited":
            tgtadm(tb, "--op", "update", "--mode", "target", "--tid", "1", "--name",
                   "InitialR2T", "--value", "Yes")


def test_socket_baseline(tb: Bed) -> None:
    port = 34977
    srv = tb.popen_tgt([gen_binary(), "--serve", f"{tb.tgt_ip}:{port}"],
                       stderr=subprocess.PIPE, text=True)
    try:
        line = srv.stderr.readline() if srv.stderr else ""
        assert "serving on" in line
        for extra in ([], ["--stream"]):
            proc = tb.run_ini([gen_binary(), "--socket", f"{tb.tgt_ip}:{port}", "--size", "4M",
                               "--time", "1", "--queue-depth", "2", "--json", "--quiet",
                               *extra], capture_output=True, timeout=30)
            assert proc.returncode == 0, proc.stderr
            s = json.loads(proc.stdout.strip().splitlines()[-1])
            assert s["mode"] == "socket" and s["stream"] == bool(extra)
            assert s["bytes"] >= 4 << 20 and s["bytes"] % (4 << 20) == 0
            assert s["errors"] == 0
    finally:
        srv.terminate()
        srv.wait(timeout=10)
    # the socket client against a closed port fails cleanly
    t = time.monotonic()
    proc = tb.run_ini([gen_binary(), "--socket", f"{tb.tgt_ip}:{port}", "--time", "1"],
                      capture_output=True, timeout=30)
    assert proc.returncode == 3 and "refused" in proc.stderr
    assert time.monotonic() - t < 5


def test_default_target_from_discovery(tb: Bed) -> None:
    r = run_gen(tb, "--size", "8k", "--count", "3", "--verify", target=False)
    s = ok(r)
    assert s["commands"] == 3
    assert f"target: {tb.iqn}" in r.stderr


def test_answers_nop_in_pings(tb: Bed) -> None:
    # tgtd pings every second and drops a connection with one unanswered ping
    settings = (("nop_interval", "1", "0"), ("nop_count", "1", "0"))
    for key, on, _ in settings:
        tgtadm(tb, "--op", "update", "--mode", "target", "--tid", "1", "--name", key,
               "--value", on)
    try:
        s = ok(run_gen(tb, "--size", "4k", "--queue-depth", "2", "--time", "3.5", "--quiet"))
        assert s["nop_pings"] >= 2
    finally:
        for key, _, off in settings:
            tgtadm(tb, "--op", "update", "--mode", "target", "--tid", "1", "--name", key,
                   "--value", off)


def test_socket_baseline_ipv6_loopback(tb: Bed) -> None:
    # IPv6 addressing ([addr]:port) through the same connect code, inside one namespace
    assert tb.run_ini(["ip", "link", "set", "lo", "up"]).returncode == 0
    port = 34978
    srv = tb.popen_ini([gen_binary(), "--serve", f"[::1]:{port}"], stderr=subprocess.PIPE,
                       text=True)
    try:
        line = srv.stderr.readline() if srv.stderr else ""
        assert "serving on ::1" in line
        proc = tb.run_ini([gen_binary(), "--socket", f"[::1]:{port}", "--size", "64k",
                           "--count", "50", "--json", "--quiet"], capture_output=True,
                          timeout=30)
        assert proc.returncode == 0, proc.stderr
        s = json.loads(proc.stdout.strip().splitlines()[-1])
        assert s["commands"] == 50 and s["bytes"] == 50 * 65536
    finally:
        srv.terminate()
        srv.wait(timeout=10)


def test_usdt_probes_fire(tb: Bed) -> None:
    """bpftrace attaches to the three probes and sees each command once, with its bytes."""
    g = gen_binary()
    # other runs of the same binary may be traced too: count only this run's LBA range
    first, count, blocks = 104448, 100, 128
    flt = f"/arg1 >= {first} && arg1 < {first + count * blocks} && arg2 == {blocks * 512}/"
    prog = ('BEGIN { printf("READY\\n"); } '  # runs once every probe is attached
            f"usdt:{g}:istrace:cmd_issue {flt} {{ @issue = count(); @bytes = sum(arg2); }} "
            f"usdt:{g}:istrace:cmd_first_data {flt} {{ @first = count(); }} "
            f"usdt:{g}:istrace:cmd_done {flt} {{ @done[arg3] = count(); }}")
    bt = subprocess.Popen(["bpftrace", "-e", prog], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    try:
        assert bt.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = bt.stdout.readline()
            if "READY" in line or not line:
                break
        ok(run_gen(tb, "--size", "64k", "--offset", f"{first}blk", "--count", str(count),
                   "--queue-depth", "4", "--quiet"))
        bt.send_signal(2)
        out = bt.communicate(timeout=30)[0]
    finally:
        if bt.poll() is None:
            bt.kill()
            bt.wait()
    assert "@issue: 100" in out and "@first: 100" in out, out
    assert "@done[0]: 100" in out and f"@bytes: {100 * 65536}" in out, out
