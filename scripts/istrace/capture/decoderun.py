"""Running istrace-decode on a pcap into its decoded/ directory, each run a process of its own:
the one module that starts the decoder (`istrace decode`, the command line's pass-through,
aside).

Light on purpose (no numpy or pandas): `istrace report` starts the decoders of a raw capture
before it imports its analysis libraries, so the decoding and the second of imports overlap.
A run writes into a scratch directory beside its output and moves its tables in when the
decoder succeeds, pdus.csv last: pdus.csv is what marks a directory decoded, so a run killed
or failed half-way never leaves a partial table that a later analysis would take as whole.
The pcap's record (istrace.capture.stamps) is removed before and written after: tables of a
pcap that was cut short since are kept, not replaced by the shorter one's (`state`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

from istrace.capture import layout, stamps
from istrace.system import paths


def decoder() -> str:
    """The decoder's path; paths.MissingBinary when it is not built."""
    return str(paths.binary("istrace-decode"))


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
        cmd = [decoder(), "-q"]
        for p in ports:
            cmd += ["--port", str(int(p))]
        if block_size:
            cmd += ["--block-size", str(int(block_size))]
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self._source = stamps.signatures([self.pcap])  # the pcap as the decoder starts on it
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
            if _shorter_copy(self._part, self.out):
                # an older istrace's tables (no record) of a longer copy of this pcap: kept,
                # and recorded as such (stamps.judge says CUT from now on)
                stamps.write(self.out / layout.INPUTS, self._source, cut=True)
                state(self.out, self.pcap)  # said
                return self.out
            (self.out / layout.INPUTS).unlink(missing_ok=True)
            (self.out / layout.DECODER_LOG).unlink(missing_ok=True)
            names = sorted(os.listdir(self._part), key=lambda n: n == layout.PDUS)
            for name in names:
                os.replace(self._part / name, self.out / name)
            stamps.write(self.out / layout.INPUTS, self._source)
            return self.out
        finally:
            self.cancel()

    def cancel(self) -> None:
        """Stop the decoder if it still runs and remove what it wrote (idempotent)."""
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.communicate()
        shutil.rmtree(self._part, ignore_errors=True)


def _shorter_copy(new: Path, old: Path) -> bool:
    """Whether `new` holds the tables of a shorter copy of the pcap `old`'s tables, which have
    no record, were decoded from: the same first PDU (pdus.csv's header and first row), a
    shorter pdus.csv."""
    a, b = new / layout.PDUS, old / layout.PDUS
    if (old / layout.INPUTS).is_file() or not a.is_file() or not b.is_file():
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        head = [fa.readline(), fa.readline()]
        same = head == [fb.readline(), fb.readline()] and head[1].strip() != b""
    return same and a.stat().st_size < b.stat().st_size


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
    """Whether istrace's own folder holds the host's PDUs decoded from its pcap as it is, or
    as it was before it was cut short (said in one line)."""
    pdus = decoded_dir(d, host) / layout.PDUS
    return pdus.is_file() and state(pdus.parent, layout.pcap(d, host)) in (stamps.SAME,
                                                                          stamps.CUT)


def state(out: Path, pcap: Path) -> str:
    """How the tables in `out` stand to `pcap` (stamps.SAME, CUT, CHANGED); with no record, by
    time: pdus.csv (else segments.bin) newer than the pcap is SAME. A CUT is said, once."""
    s, cut = stamps.judge(out / layout.INPUTS, [pcap])
    for p in cut:
        stamps.say_once(stamps.kept_note(p, out / layout.INPUTS))
    if s != stamps.NONE:
        return s
    table = out / layout.PDUS if (out / layout.PDUS).is_file() else out / layout.SEGMENTS
    return stamps.CHANGED if layout.older_than(table, pcap) else stamps.SAME


def decode_segments(pcap: Path, out: Path, timeout: float | None) -> None:
    """The segments table alone (`istrace-decode --segments`) into `out`."""
    if not pcap.is_file():
        raise DecodeError(f"{pcap}: no such file", 2)
    run([decoder(), "-q", "--segments", str(out), str(pcap)], timeout)


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
