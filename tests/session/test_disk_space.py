"""`istrace capture` and a disk too small for it (a 60 MB tmpfs): it refuses to start when the
expected need is more than the free space, and, told to start anyway, stops cleanly before the
disk is full: exit code 4 and one line, readable pcaps, meta.json's ended_early."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from istrace.capture import meta as capture_meta
from istrace.session import diskspace
from istrace.system.paths import binary

REPO = Path(__file__).resolve().parents[2]
SIZE = "60m"
# 40 Mbit/s: the capture directory grows ~11 MB/s (both ends), the 60 MB fill in ~5 s, and the
# workload (30 s) would write ~330 MB
CAPTURE = ["--rate", "40mbit", "--lun-mb", "16", "--sample-ms", "0",
           "--workload", "gen --size 1M --queue-depth 4 --time 30 --quiet"]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(mnt)],
                   check=True, timeout=30)
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], timeout=30, check=False).returncode:
            subprocess.run(["umount", "-l", str(mnt)], timeout=30, check=False)


def _capture(*args: str) -> subprocess.CompletedProcess[str]:
    """`istrace capture ARGS` of this tree (not an installed istrace)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        str(REPO / p) for p in ("scripts", "bpf", "decoder", "viz"))}
    return subprocess.run([sys.executable, "-m", "istrace.cli.main", "capture", *args],
                          capture_output=True, text=True, timeout=300, check=False, env=env)


def _namespaces(name: str) -> list[str]:
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line for line in ns.splitlines() if f"ist-{name}-" in line]


def test_refused_before_it_starts(small_disk: Path) -> None:
    out = small_disk / "cap"
    r = _capture("--name", "disk1", *CAPTURE, "--out", str(out))
    assert r.returncode == 2, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert line.startswith(f"istrace capture: {small_disk} has ") and " free, " in line, line
    assert "needs about" in line and "--ignore-free-space" in line, line
    need = float(line.split("needs about ")[1].split(" MB")[0])
    assert need > 300, line  # 30 s at 40 Mbit/s, both ends
    assert not out.exists() and not _namespaces("disk1")


def test_stops_before_the_disk_is_full(small_disk: Path, tmp_path: Path) -> None:
    out = small_disk / "cap"
    r = _capture("--name", "disk2", *CAPTURE, "--ignore-free-space", "--out", str(out))
    assert r.returncode == 4, r.stdout + r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("istrace capture: ended early at ") and "free" in last, last
    st = os.statvfs(small_disk)
    assert st.f_bavail * st.f_frsize > 4 << 20, "the tmpfs filled up"
    assert not _namespaces("disk2")

    meta = json.loads((out / "meta.json").read_text())
    early = capture_meta.ended_early(meta)
    assert early is not None and early["reason"] == "disk", meta.get("ended_early")
    assert 0 < early["free_bytes"] < early["reserve_bytes"]
    assert 0 < early["at_s"] < 60
    assert meta["status"] == "ended_early"
    assert meta["disk"]["started_anyway"] is True
    assert meta["workload"]["seconds"] < 25  # stopped, not run to its 30 s
    written = sum(c["bytes"] for c in meta["captures"].values())
    assert written > 20e6  # the capture ran until the disk was low, not a moment

    for role in ("initiator", "target"):
        pcap = out / f"{role}.pcap"
        t = subprocess.run(["tcpdump", "-n", "-r", str(pcap)], capture_output=True,
                           text=True, timeout=120, check=False)
        assert t.returncode == 0 and "truncated" not in t.stderr, t.stderr[-500:]
        assert len(t.stdout.splitlines()) == meta["captures"][role]["packets_captured"]
        dec = tmp_path / f"dec-{role}"
        d = subprocess.run([str(binary("istrace-decode")), "-q", "--csv-dir", str(dec),
                            str(pcap)], capture_output=True, text=True, timeout=120,
                           check=False)
        assert d.returncode == 0, d.stderr
        pdus = (dec / "pdus.csv").read_text().splitlines()
        assert sum("Data-In" in x for x in pdus) > 20, role  # 4 a command of 1 MiB
    for role, probe in meta["probes"].items():
        assert probe["status"] == "ok" or probe["status"].startswith("probes unavailable"), \
            (role, probe)


def test_the_budget_follows_rate_length_and_snaplen() -> None:
    b = diskspace.budget({"rate_mbit": 40}, 0, "gen --size 1M --time 30", 3600)
    assert b.seconds == 30 and b.rate_bps == pytest.approx(2 * 5e6 * diskspace.ALLOWANCE)
    assert b.need_bytes == int(b.rate_bps * 30) + b.reserve_bytes
    assert diskspace.budget({}, 0, "gen --count 5", 3600).seconds == diskspace.UNKNOWN_S
    assert diskspace.budget({}, 0, "gen", 3600).seconds == diskspace.GEN_DEFAULT_S
    assert diskspace.budget({}, 0, "gen --time=120", 60).seconds == 60  # --timeout bounds it
    full = diskspace.budget({}, 0, "dd if=/dev/sdb", 3600)
    assert full.rate_bps == diskspace.FULL_RATE_BPS and full.seconds == diskspace.UNKNOWN_S
    cut = diskspace.budget({"nic_rate_mbit": 100, "mtu": 9000}, 200, "gen", 3600)
    assert cut.rate_bps == pytest.approx(2 * 12.5e6 * diskspace.ALLOWANCE * 216 / 9030)
