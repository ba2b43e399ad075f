"""Real traffic, live: `tcpdump -w - | istrace-decode -` on the testbed while libiscsi's tools
talk to tgtd. Lines must appear while the capture is still running (streaming), and the
decode must hold the commands the tools sent."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time

from core_helpers import BIN
from istrace_cli.testbed import Testbed, TestbedConfig


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
