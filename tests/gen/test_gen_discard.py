"""READ data nobody checks is dropped in the kernel (recv with MSG_TRUNC), never copied into
the tool's memory; --verify and --copy keep receiving it into buffers, and --verify still
sees one wrong byte. Against tgtd on the namespace testbed, and the scripted loopback target
for a command that ends early."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from fake_target import FakeTarget
from gen_helpers import gen_binary, run_gen
from istrace.testbed.namespaces import Testbed as Bed


def _max_rss_kb(tb: Bed, *args: str) -> tuple[int, str]:
    """Peak resident memory of one istrace-gen run (GNU time), and its stderr."""
    out = Path(f"/tmp/istrace-gen-rss.{os.getpid()}")
    cmd = ["/usr/bin/time", "-f", "%M", "-o", str(out), gen_binary(), "--portal", tb.portal,
           "--target", tb.iqn, "--quiet", *args]
    try:
        proc = tb.run_ini(cmd, capture_output=True, timeout=90)
        assert proc.returncode == 0, proc.stderr
        return int(out.read_text().split()[-1]), proc.stderr
    finally:
        out.unlink(missing_ok=True)


def test_unchecked_read_never_holds_the_data(tb: Bed) -> None:
    # four 16 MiB commands in flight: 64 MiB of buffers when the data is received, none when
    # it is dropped in the kernel
    args = ("--size", "16M", "--queue-depth", "4", "--count", "8")
    dropped, _ = _max_rss_kb(tb, *args)
    copied, _ = _max_rss_kb(tb, *args, "--copy")
    assert dropped < 32 << 10, dropped
    assert copied > 64 << 10, copied
    s = run_gen(tb, *args, "--quiet").summary
    assert s["exit"] == 0 and s["bytes"] == 8 * (16 << 20) and s["commands"] == 8


def test_cpu_figures_in_the_summary(tb: Bed) -> None:
    s = run_gen(tb, "--size", "1M", "--queue-depth", "4", "--count", "64", "--quiet").summary
    assert s["exit"] == 0 and s["bytes"] == 64 << 20
    assert s["cpu_s"] > 0 and s["user_s"] >= 0 and s["sys_s"] > 0
    assert abs(s["user_s"] + s["sys_s"] - s["cpu_s"]) <= 2e-6
    assert s["cpu_s_per_gb"] == pytest.approx(s["cpu_s"] / (s["bytes"] / 1e9), rel=0.02)


@pytest.mark.parametrize(("size", "qd"), [("1M", "4"), ("4M", "8"), ("64k", "32")])
def test_verify_catches_one_flipped_byte(tb: Bed, size: str, qd: str) -> None:
    off = (40 << 20) + 777  # away from the regions the write tests zero
    with open(tb.lun_path, "r+b") as f:
        f.seek(off)
        good = f.read(1)
        f.seek(off)
        f.write(bytes([good[0] ^ 0x10]))
        f.flush()
        os.fsync(f.fileno())
    try:
        region = ("--size", size, "--offset", "32M", "--count", str((16 << 20) // _bytes(size)),
                  "--queue-depth", qd, "--quiet")
        bad = run_gen(tb, *region, "--verify")
        assert bad.rc == 7, bad.stderr
        assert f"first wrong byte at LUN offset {off} " in bad.stderr
        plain = run_gen(tb, *region)  # nothing checks: the data is dropped, the run is clean
        assert plain.rc == 0 and plain.summary["bytes"] == 16 << 20, plain.stderr
    finally:
        with open(tb.lun_path, "r+b") as f:
            f.seek(off)
            f.write(good)
            f.flush()
            os.fsync(f.fileno())
    assert run_gen(tb, *region, "--verify").rc == 0


def _bytes(size: str) -> int:
    return int(size[:-1]) << {"k": 10, "M": 20}[size[-1]]



@pytest.mark.parametrize(("size", "qd"), [("4M", "8"), ("64k", "32"), ("4k", "8")])
def test_dropping_path_under_sanitizers(tb: Bed, sanitized_gen: str, size: str,
                                        qd: str) -> None:
    cmd = [sanitized_gen, "--portal", tb.portal, "--target", tb.iqn, "--size", size,
           "--queue-depth", qd, "--count", "64", "--quiet"]
    proc = tb.run_ini(cmd, capture_output=True, timeout=120,
                      env={**os.environ, "ASAN_OPTIONS": "detect_leaks=0"})
    assert "Sanitizer" not in proc.stderr and "runtime error" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    assert f"{64 * _bytes(size)} bytes" in proc.stderr


def test_command_ending_early_is_not_waited_for() -> None:
    """Half a READ's data, then CHECK CONDITION 0.3 s later: the rest of the command that the
    dropping path waits for never comes, and the status is still taken at once."""
    tgt = FakeTarget("partsense")
    try:
        t = time.monotonic()
        proc = subprocess.run([gen_binary(), "--portal", f"127.0.0.1:{tgt.port}", "--target",
                               "iqn.fake:t", "--size", "256k", "--count", "1", "--timeout",
                               "5"], capture_output=True, text=True, timeout=30, check=False)
        took = time.monotonic() - t
    finally:
        tgt.close()
    assert proc.returncode == 6, proc.stderr
    assert "MEDIUM ERROR / UNRECOVERED READ ERROR" in proc.stderr
    assert took < 2.5, took
