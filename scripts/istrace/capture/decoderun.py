"""Running istrace-decode on a pcap into its decoded/ directory, each run a process of its own.

Light on purpose (no numpy or pandas): `istrace report` starts the decoders of a raw capture
before it imports its analysis libraries, so the decoding and the second of imports overlap.
A run writes into a scratch directory beside its output and moves its tables in when the
decoder succeeds, pdus.csv last: pdus.csv is what marks a directory decoded, so a run killed
or failed half-way never leaves a partial table that a later analysis would take as whole.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

from istrace.capture import layout
from istrace.system import paths


class DecodeError(RuntimeError):
    """istrace-decode failed; `returncode` is its exit status (3: no iSCSI in the capture)."""

    def __init__(self, message: str, returncode: int) -> None:
        super().__init__(message)
        self.returncode = returncode


def run(cmd: list[str], timeout: float | None) -> None:
    """Run the decoder to its end; DecodeError with its last line of stderr when it fails."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    _check(r.returncode, r.stderr)


def _check(returncode: int, stderr: str) -> None:
    if returncode != 0:
        msg = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit {returncode}"
        raise DecodeError(msg, returncode)


_PART = ".part-"  # scratch directories: <output name>.part-<pid>-<random>


class Decoding:
    """One decoder run under way: `pcap` into outdir/pdus.csv, commands.csv, connections.csv
    and segments.bin; `wait()` ends it. Raises paths.MissingBinary when the decoder is not
    built."""

    def __init__(self, pcap: str | Path, outdir: str | Path, ports: Iterable[int] = (),
                 block_size: int | None = None) -> None:
        self.pcap, self.out = Path(pcap), Path(outdir)
        cmd = [str(paths.binary("istrace-decode")), "-q"]
        for p in ports:
            cmd += ["--port", str(int(p))]
        if block_size:
            cmd += ["--block-size", str(int(block_size))]
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self._part = Path(tempfile.mkdtemp(prefix=f".{self.out.name}{_PART}{os.getpid()}-",
                                           dir=self.out.parent))
        try:
            self._proc = subprocess.Popen([*cmd, "--csv-dir", str(self._part), str(self.pcap)],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                          text=True)
        except OSError:
            shutil.rmtree(self._part, ignore_errors=True)
            raise

    def wait(self, timeout: float | None = None) -> Path:
        """outdir, its tables in place; DecodeError (nothing moved in) when the decoder
        failed, subprocess.TimeoutExpired (the decoder killed) past `timeout` seconds."""
        try:
            _, err = self._proc.communicate(timeout=timeout)
            _check(self._proc.returncode, err)
            # what it said of the pcap ("capture ends early", ...), kept for the checks
            # before a verdict (istrace.report.checks), none left from an earlier run
            if err.strip():
                (self._part / layout.DECODER_LOG).write_text(err)
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / layout.DECODER_LOG).unlink(missing_ok=True)
            names = sorted(os.listdir(self._part), key=lambda n: n == layout.PDUS)
            for name in names:
                os.replace(self._part / name, self.out / name)
            return self.out
        finally:
            self.cancel()

    def cancel(self) -> None:
        """Stop the decoder if it still runs and remove what it wrote (idempotent)."""
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.communicate()
        shutil.rmtree(self._part, ignore_errors=True)


def decode_to_dir(pcap: str | Path, outdir: str | Path, ports: Iterable[int] = (),
                  block_size: int | None = None, timeout: float | None = None) -> Path:
    """Decode `pcap` into outdir/pdus.csv, commands.csv, connections.csv and segments.bin;
    returns outdir."""
    return Decoding(pcap, outdir, ports, block_size).wait(timeout)


def ends_early(decoded: Path) -> str | None:
    """The decoder's own finding that the pcap it decoded into `decoded` ends early (a dump
    cut short: the line it said it in), else None."""
    log = decoded / layout.DECODER_LOG
    text = log.read_text(errors="replace") if log.is_file() else ""
    return next((x.strip() for x in text.splitlines() if "capture ends early" in x), None)


def decoded_dir(d: Path, host: str) -> Path:
    """Where a host's decoded tables are: the first of its directories holding pdus.csv,
    else where a decode writes them."""
    return next((c for c in layout.decoded_dirs(d, host) if (c / layout.PDUS).is_file()),
                layout.decoded_dir(d, host))


def missing(d: Path) -> list[str]:
    """The hosts whose pcap has no decoded PDUs yet in istrace's own folder, or older ones
    than the pcap (decoded from a pcap written over since)."""
    return [h for h in layout.HOSTS if layout.pcap(d, h).is_file() and not current(d, h)]


def current(d: Path, host: str) -> bool:
    """Whether istrace's own folder holds the host's PDUs decoded from its pcap as it is."""
    pdus = decoded_dir(d, host) / layout.PDUS
    return pdus.is_file() and not layout.older_than(pdus, layout.pcap(d, host))


def start_missing(d: Path, ports: Iterable[int]) -> dict[str, Decoding]:
    """A decoder started on each host's pcap that has no decoded PDUs yet, all at once (one
    process each: 3.8 + 7.7 s one after the other for the two pcaps of a 10 s full-rate
    capture); the scratch directories of runs whose process is gone removed first."""
    remove_stale(d)
    runs: dict[str, Decoding] = {}
    try:
        for h in missing(d):
            runs[h] = Decoding(layout.pcap(d, h), decoded_dir(d, h), ports)
    except BaseException:
        for r in runs.values():
            r.cancel()
        raise
    return runs


def remove_stale(d: Path) -> None:
    """Scratch directories left by runs killed before they could remove them (named after
    their process, which is gone)."""
    for h in layout.HOSTS:
        parent = layout.decoded_dir(d, h).parent
        if not parent.is_dir():
            continue
        for old in parent.glob(f".*{_PART}*"):
            pid = old.name.rsplit(_PART, 1)[1].split("-")[0]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                shutil.rmtree(old, ignore_errors=True)
