"""tgtd in the target namespace: one daemon per testbed on its own control port."""

from __future__ import annotations

import socket
import subprocess
import time
import zlib
from pathlib import Path

TGTD_SOCKET_DIR = Path("/var/run/tgtd")


class TargetError(RuntimeError):
    pass


def _socket_in_use(port: int) -> bool:
    path = TGTD_SOCKET_DIR / f"socket.{port}"
    if not path.exists():
        return False
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


def pick_control_port(name: str) -> int:
    """A control port derived from the testbed name, skipping ones a live tgtd holds."""
    TGTD_SOCKET_DIR.mkdir(parents=True, exist_ok=True)  # absent on a machine that never ran tgtd
    # tgtd accepts control ports up to 32767.
    base = 10000 + zlib.crc32(name.encode()) % 22000
    for port in range(base, base + 500):
        if not _socket_in_use(port):
            for stale in (f"socket.{port}", f"socket.{port}.lock"):
                (TGTD_SOCKET_DIR / stale).unlink(missing_ok=True)
            return port
    raise TargetError(f"no free tgtd control port near {base}")


def socket_files(port: int) -> list[str]:
    return [str(TGTD_SOCKET_DIR / f"socket.{port}"), str(TGTD_SOCKET_DIR / f"socket.{port}.lock")]


def tgtd_argv(ns: str, ip: str, port: int, run_dir: Path) -> list[str]:
    # the pid file puts the testbed's run dir in tgtd's command line: `ps` shows whose it is
    return ["ip", "netns", "exec", ns, "tgtd", "-f", "--iscsi", f"portal={ip}:3260",
            "-C", str(port), "--pid-file", str(run_dir / "tgtd.pid")]


class Tgtadm:
    """tgtadm bound to one control port; raises TargetError with tgtadm's own message."""

    def __init__(self, port: int) -> None:
        self.port = port

    def __call__(self, *args: str) -> str:
        argv = ["tgtadm", "-C", str(self.port), "--lld", "iscsi", *args]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        if proc.returncode != 0:
            raise TargetError(f"`{' '.join(argv)}`: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc.stdout

    def wait_ready(self, proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise TargetError(f"tgtd exited with {proc.returncode} (see tgtd.log)")
            try:
                self("--op", "show", "--mode", "sys")
                return
            except TargetError:
                time.sleep(0.1)
        raise TargetError(f"tgtd did not answer on control port {self.port}")

    def add_target(self, tid: int, iqn: str) -> None:
        self("--op", "new", "--mode", "target", "--tid", str(tid), "-T", iqn)

    def add_lun(self, tid: int, lun: int, path: str) -> None:
        self("--op", "new", "--mode", "logicalunit", "--tid", str(tid), "--lun", str(lun),
             "-b", path, "--bstype", "rdwr")

    def set_param(self, tid: int, key: str, value: str) -> None:
        """An iSCSI key the target offers in login (e.g. InitialR2T No, FirstBurstLength)."""
        self("--op", "update", "--mode", "target", "--tid", str(tid), "--name", key,
             "--value", value)

    def allow_all(self, tid: int) -> None:
        self("--op", "bind", "--mode", "target", "--tid", str(tid), "-I", "ALL")

    def chap(self, tids: list[int], user: str, secret: str, outgoing: bool = False) -> None:
        """One-way CHAP (target checks initiator) on each target; outgoing=True makes it the
        target's own account for mutual CHAP."""
        self("--op", "new", "--mode", "account", "--user", user, "--password", secret)
        extra = ["--outgoing"] if outgoing else []
        for tid in tids:
            self("--op", "bind", "--mode", "account", "--tid", str(tid), "--user", user, *extra)
