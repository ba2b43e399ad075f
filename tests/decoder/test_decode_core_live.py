"""Real traffic, live: `tcpdump -w - | istrace-decode -` on the testbed while libiscsi's tools
talk to tgtd. Lines must appear while the capture is still running (streaming), and the
decode must hold the commands the tools sent."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
from core_helpers import BIN
from istrace.capture.decoderun import decode_to_dir
from istrace.testbed.namespaces import Testbed, TestbedConfig


def _read_until(proc: subprocess.Popen[bytes], needle: bytes, timeout: float) -> bytes:
    assert proc.stdout is not None
    got = b""
    deadline = time.monotonic() + timeout
    while needle not in got and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            got += chunk
    return got


def test_live_tcpdump_pipe() -> None:
    with Testbed(TestbedConfig(name="d1core", lun_mb=8)) as tb:
        url = f"iscsi://{tb.portal}/{tb.iqn}/1"
        pidfile = tb.run_dir / "tcpdump.pid"
        cmd = (f"(tcpdump -i {tb.ini_dev} -B 524288 -U -s 0 -w - 'tcp port 3260' "
               f"2>{tb.run_dir}/tcpdump.err & echo $! > {pidfile}; wait) | {BIN} -")
        proc = tb.popen_ini(["sh", "-c", cmd], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
        try:
            errfile = tb.run_dir / "tcpdump.err"
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and (
                    not errfile.exists() or "listening on" not in errfile.read_text()):
                time.sleep(0.1)
            time.sleep(0.3)  # "listening" is printed just before the capture is live
            r = tb.run_ini(["iscsi-inq", url], capture_output=True, timeout=30)
            assert r.returncode == 0, r.stderr
            seen = _read_until(proc, b"Logout Response", 15)
            # Streaming: the whole first session is printed while tcpdump still runs.
            assert proc.poll() is None
            assert b"INQUIRY" in seen and b"Login Request" in seen, seen
            r = tb.run_ini(["iscsi-readcapacity16", url], capture_output=True, timeout=30)
            assert r.returncode == 0, r.stderr
            seen += _read_until(proc, b"READ CAPACITY(16)", 15)
            seen += _read_until(proc, b"Logout Response", 5) if seen.count(
                b"Logout Response") < 2 else b""
        finally:
            # Stop tcpdump only: the decoder must see end of input and finish by itself.
            try:
                os.kill(int(pidfile.read_text()), signal.SIGINT)
                out, err = proc.communicate(timeout=20)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate(timeout=10)
                raise
        text = (seen + out).decode()
        lines = text.splitlines()
        assert proc.returncode == 0, err
        assert "InitiatorName=iqn.2007-10.com.github:sahlberg:libiscsi:iscsi-inq" in text
        rc16 = [x for x in lines if "READ CAPACITY(16)" in x]
        assert len(rc16) == 1 and "xfer=32 B" in rc16[0]
        # Every command got its response, and it is tied to it.
        ncmd = sum(" SCSI Command " in x for x in lines)
        nresp = sum(" rt=" in x for x in lines)
        assert ncmd >= 4 and nresp == ncmd, text
        drops = (tb.run_dir / "tcpdump.err").read_text()
        assert "\n0 packets dropped by kernel" in drops, drops


def _records(img: bytes) -> list[tuple[int, int]]:
    off, out = 24, []
    while off + 16 <= len(img):
        caplen = int.from_bytes(img[off + 8:off + 12], "little")
        out.append((off, 16 + caplen))
        off += 16 + caplen
    return out


def test_capture_cut_anywhere_decodes_no_wrong_pdu(tmp_path: Path) -> None:
    """Real reads and writes from tgtd; the capture is then cut so it starts at arbitrary
    packets (mid-PDU, mid-header). Every PDU decoded from a cut capture must be a PDU of the
    full decode with the same fields: resynchronising may lose PDUs, never invent them."""
    pcap = tmp_path / "rw.pcap"
    with Testbed(TestbedConfig(name="d1cut", lun_mb=8)) as tb:
        url = f"iscsi://{tb.portal}/{tb.iqn}/1"
        errfile = tmp_path / "tcpdump.err"
        with errfile.open("w") as ef:
            tcpd = tb.popen_ini(["tcpdump", "-i", tb.ini_dev, "-B", "524288", "-U", "-w",
                                 str(pcap), "tcp port 3260"], stderr=ef)
        try:
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and "listening on" not in errfile.read_text():
                time.sleep(0.1)
            time.sleep(0.3)
            tb.run_ini(["timeout", "1", "iscsi-perf", "-b", "64", "-m", "4", url],
                       capture_output=True)
            tb.run_ini(["timeout", "20", "iscsi-test-cu", "--dataloss", "-t",
                        "SCSI.Write10.Simple", url], capture_output=True)
            time.sleep(0.5)
        finally:
            tcpd.send_signal(signal.SIGINT)
            tcpd.wait(timeout=20)
        # Kernel drops (possible under load) only make holes the decoder must cope with:
        # both decodes below read the same file, so the comparison stays exact. Report them.
        drops = [x for x in errfile.read_text().splitlines() if "dropped by kernel" in x]
        print("tcpdump:", drops)
        assert drops, errfile.read_text()
    img = pcap.read_bytes()
    recs = _records(img)
    assert len(recs) > 1000
    cols = ["opcode", "flags", "dsl", "itt", "ttt", "cmdsn", "statsn", "datasn",
            "buffer_offset", "edtl", "cdb_name", "lba", "xfer_blocks", "status", "sense_key"]

    def table(path: Path, out: str) -> pd.DataFrame:
        d = decode_to_dir(path, tmp_path / out)
        return pd.read_csv(d / "pdus.csv", dtype=str, keep_default_na=False)

    keys = ["conn", "dir", "tcp_seq"]
    full = table(pcap, "full")
    assert {"SCSI Data-In", "SCSI Data-Out", "R2T"} <= set(full["opcode_name"])
    for frac in (0.013, 0.31, 0.5, 0.77, 0.93):
        start = int(len(recs) * frac)
        cut = tmp_path / f"cut{start}.pcap"
        cut.write_bytes(img[:24] + b"".join(img[o:o + n] for o, n in recs[start:]))
        part = table(cut, f"cut{start}")
        assert len(part) > 0 and "resync" in part.iloc[0]["note"]
        both = part[keys + cols].merge(full[keys + cols], on=keys, how="left",
                                       suffixes=("", "_full"), indicator=True)
        invented = both[both["_merge"] != "both"]
        assert invented.empty, f"cut at packet {start}: invented PDUs\n{invented}"
        for c in cols:
            differ = both[both[c] != both[c + "_full"]]
            assert differ.empty, f"cut at packet {start}: {c} differs\n{differ}"
