"""The BPF probe loader (bpf/istrace-probe) run from Python.

`Probe` starts one in the background for other tools (capture, tests) and waits until its
hooks are attached, which the loader signals by writing the stream's first line (the `meta`
event); `read_meta` reads that line.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from istrace.system.paths import binary


def read_meta(path: str | Path) -> dict[str, Any] | None:
    """The `meta` record of an event stream (clock offset, hooks), None if not written yet.

    JSON lines carry it as their first line; a CSV stream has a `meta` row after the
    header and the details in the `.meta.json` beside it (written before that row)."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as f:
            first = f.readline()
            second = f.readline() if path.suffix == ".csv" else ""
    except OSError:
        return None
    if path.suffix == ".csv":
        if not second.endswith("\n") or ",meta,meta," not in second:
            return None
        try:
            side = json.loads(path.with_suffix(".meta.json").read_text())
        except (OSError, ValueError):
            return None
        return {"event": "meta", **side}
    if not first.endswith("\n"):
        return None
    rec = json.loads(first)
    return rec if rec.get("event") == "meta" else None


class ProbeError(RuntimeError):
    pass


class Probe:
    """istrace-probe in the background: `with Probe(out, ["--netns", ns]) as p: ...`.

    Enter returns once every hook is attached (the meta line is on disk); exit stops the
    loader with SIGINT, which drains the ring buffer and writes the final `end` line.
    """

    def __init__(self, out: str | Path, args: list[str], ready_timeout: float = 60.0,
                 stderr_path: str | Path | None = None) -> None:
        self.out = Path(out)
        self.args = args
        self.ready_timeout = ready_timeout
        self.stderr_path = Path(stderr_path) if stderr_path else self.out.with_suffix(".err")
        self.proc: subprocess.Popen[bytes] | None = None
        self.meta: dict[str, Any] = {}

    def start(self) -> Probe:
        exe = binary("istrace-probe")
        self.out.unlink(missing_ok=True)
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen([str(exe), "--out", str(self.out), *self.args],
                                         stderr=err, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            meta = read_meta(self.out)
            if meta is not None:
                self.meta = meta
                return self
            if self.proc.poll() is not None:
                raise ProbeError(f"istrace-probe exited ({self.proc.returncode}): "
                                 f"{self.stderr().strip()[-500:]}")
            time.sleep(0.05)
        self.stop()
        raise ProbeError(f"istrace-probe not ready after {self.ready_timeout:.0f} s")

    def stop(self, timeout: float = 20.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def __enter__(self) -> Probe:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
