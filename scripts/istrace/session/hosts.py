"""Where a capture runs its commands: a local network namespace, or a real host over ssh.

Both speak the same way: a shell command string runs on the host (`ip netns exec NS sh -c CMD`
or `SSH HOST CMD`), files written there are fetched into the capture directory afterwards, and
a background command records its pid in a file so it can be stopped with a signal later.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import IO, Any


class Host:
    """One end of the capture. `work` is where its files go while the capture runs."""

    def __init__(self, role: str, prefix: list[str], work: str, local_dir: Path | None,
                 iface: str) -> None:
        self.role = role            # "initiator" | "target"
        self.prefix = prefix        # argv that runs one shell command string on the host
        self.work = work            # directory on the host
        self.local_dir = local_dir  # same directory seen from here (None: remote, fetch)
        self.iface = iface

    @classmethod
    def netns(cls, role: str, ns: str, out: Path, iface: str) -> Host:
        return cls(role, ["ip", "netns", "exec", ns, "sh", "-c"], str(out), out, iface)

    @classmethod
    def ssh(cls, role: str, ssh_cmd: str, host: str, work: str, iface: str) -> Host:
        return cls(role, [*shlex.split(ssh_cmd), host], work, None, iface)

    @property
    def remote(self) -> bool:
        return self.local_dir is None

    def argv(self, cmd: str) -> list[str]:
        return [*self.prefix, cmd]

    def run(self, cmd: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(cmd), capture_output=True, text=True, timeout=timeout,
                              check=False, stdin=subprocess.DEVNULL)

    def popen(self, cmd: str, stdout: IO[Any] | int | None = None,
              stderr: IO[Any] | int | None = None) -> subprocess.Popen[bytes]:
        # own session: a Ctrl-C at the terminal reaches us, and we stop children in order
        return subprocess.Popen(self.argv(cmd), stdout=stdout, stderr=stderr,
                                stdin=subprocess.DEVNULL, start_new_session=True)

    def path(self, name: str) -> str:
        return f"{self.work}/{name}"

    def background(self, name: str, cmd: str) -> str:
        """A shell command that runs `cmd` with its pid in WORK/NAME.pid (for stop())."""
        return f"echo $$ > {shlex.quote(self.path(name + '.pid'))}; exec {cmd}"

    def stop(self, name: str, sig: str = "INT") -> None:
        pidfile = shlex.quote(self.path(name + ".pid"))
        self.run(f"test -f {pidfile} && kill -{sig} $(cat {pidfile}) 2>/dev/null; true",
                 timeout=30)

    def prepare(self) -> None:
        self.run(f"mkdir -p {shlex.quote(self.work)}")

    def fetch(self, name: str, dest: Path) -> bool:
        """Copy WORK/NAME from the host to `dest` (a no-op when it was written locally)."""
        if not self.remote:
            return (Path(self.work) / name).exists()
        with open(dest, "wb") as out:
            r = subprocess.run(self.argv(f"cat {shlex.quote(self.path(name))}"), stdout=out,
                               stderr=subprocess.PIPE, timeout=600, check=False,
                               stdin=subprocess.DEVNULL)
        return r.returncode == 0

    def cleanup(self) -> None:
        if self.remote:
            self.run(f"rm -rf {shlex.quote(self.work)}")
