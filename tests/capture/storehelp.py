"""What the stored-outputs tests share: one real capture (the testbed, istrace-gen reads,
probes and tcpdump at both ends), `istrace` run from this tree, copies of a capture's inputs,
and a read-only view of a directory (a read-only bind mount: root ignores permission bits)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from istrace.capture import layout

TREE = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(
    str(TREE / p) for p in ("scripts", "decoder", "viz", "bpf")))


def argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "istrace.cli.main", *args]


def istrace(*args: str, cache: Path | None = None, timeout: float = 300
            ) -> subprocess.CompletedProcess[str]:
    """`istrace ARGS` from this tree; `cache`: its XDG_CACHE_HOME."""
    env = dict(ENV, XDG_CACHE_HOME=str(cache)) if cache else ENV
    return subprocess.run(argv(*args), env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def make_capture(out: Path, name: str) -> Path:
    """A short real capture: 4 READs of 4 MiB over a 2 ms path, probes on."""
    r = istrace("capture", "--name", name, "--delay", "2ms", "--lun-mb", "16",
                "--workload", "gen --size 4M --count 4", "--out", str(out), "--timeout", "120")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert (out / "target.pcap").stat().st_size > 1_000_000
    return out


INPUT_NAMES = ("initiator.pcap", "target.pcap", "events-initiator.jsonl", "events-target.jsonl",
               "meta.json", "hoststats-initiator.jsonl", "hoststats-target.jsonl")


def inputs_copy(src: Path, dst: Path) -> Path:
    """A copy of `src`'s capture inputs only (nothing derived), times kept."""
    dst.mkdir(parents=True)
    for n in INPUT_NAMES:
        if (src / n).is_file():
            shutil.copy2(src / n, dst / n)
    return dst


def full_copy(src: Path, dst: Path) -> Path:
    """Everything of `src`, times kept (a capture after a good report)."""
    shutil.copytree(src, dst, symlinks=True)
    return dst


def verdict(d: Path) -> str:
    return (d / layout.VERDICT).read_text()


def listing(d: Path) -> dict[str, tuple[int, int]]:
    """Every file under d with its size and modification time."""
    return {str(p.relative_to(d)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(d.rglob("*")) if p.is_file()}


def no_traceback(r: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in r.stderr + r.stdout, r.stderr[-3000:]


@contextmanager
def read_only(src: Path, at: Path) -> Iterator[Path]:
    """`src` seen read-only at `at` (a read-only bind mount), unmounted at the end."""
    at.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(src), str(at)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(at)], check=True)
        probe = at / ".write-test"
        try:
            probe.touch()
        except OSError:
            pass
        else:
            probe.unlink()
            raise AssertionError(f"{at} is writable: the read-only mount did not take")
        yield at
    finally:
        subprocess.run(["umount", str(at)], check=False)
