"""Tables derived from a capture that was written again since (its pcap or event streams
newer than them) are made again, or flagged: never reported as the new capture's. (A pcap
written again is decoded again: test_real_capture, which has a pcap the decoder reads.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import synth
from istrace.capture import layout
from istrace.capture.load import load_capture
from istrace.merge.merger import merge_dir


def later(*paths: Path) -> None:
    """As if `paths` were written again after everything else in their directory (which is
    moved into the past, so that what is made from here on is newer than both)."""
    now = time.time()
    for p in paths[0].parent.rglob("*"):
        if p.is_file():
            t = now - 50 if p in paths else now - 100
            os.utime(p, (t, t))


def test_report_merges_again_when_the_capture_is_newer(tmp_path: Path) -> None:
    synth.make_capture(tmp_path, n_cmds=8)
    merge_dir(tmp_path, log=lambda m: None)
    assert not any("older" in w for w in load_capture(tmp_path).warnings)
    merged = tmp_path / layout.MERGED
    later(*layout.events_files(tmp_path))
    before = merged.stat().st_mtime
    # this tree's istrace, not the one installed
    tree = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        str(tree / p) for p in ("scripts", "decoder", "viz", "bpf")))
    r = subprocess.run([sys.executable, "-m", "istrace.cli.main", "report", str(tmp_path)],
                       capture_output=True, text=True, timeout=300, check=False, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "merging again" in r.stderr
    assert merged.stat().st_mtime > before
    assert not layout.older_than(merged, *layout.capture_inputs(tmp_path))
    assert not any("older" in w for w in load_capture(tmp_path).warnings)
