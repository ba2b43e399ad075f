"""One analysis at a time on a capture directory: `held` takes an exclusive lock
(fcntl.flock) on DIR/.istrace.lock (layout.LOCK; DIR is where the derived files go, the
capture's cache for a read-only one). A second run waits for the first, saying so in one
line, then finds the first's tables made and trusts them as any later run would. The
kernel drops the lock with its last holder, so a killed run never leaves it taken."""

from __future__ import annotations

import fcntl
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from istrace.capture import layout


@contextmanager
def held(d: Path, prog: str) -> Iterator[None]:
    fd = os.open(d / layout.LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            print(f"{prog}: {d} is being analysed by another istrace run (pid {other}): "
                  "waiting for it to finish", file=sys.stderr)
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)
