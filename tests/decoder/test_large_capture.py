"""A capture larger than the decoder may hold: its memory stays a window of the file.

The decoder reads a plain pcap through a memory mapping; pages once read count in its
resident set until given back. A 60 s full-rate capture is 14 GB of pcap, so without giving
them back the decoder's RSS is the capture's size (merge runs two at once).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from dechelp import NATIVE_BIN
from istrace.capture.decoded import read_segments
from istrace.synth import pcapwriter as pw

CHUNK = 1 << 20  # bytes of data per Data-In PDU
READS = 96       # 4 MiB READs: 384 MiB of payload, ~400 MB of pcap
SEG = 65000      # TSO-sized segments, as tcpdump sees them on veth


def _write_big_capture(path: Path) -> int:
    """Writes READS 4 MiB READs on one connection; returns the number of TCP segments."""
    flow = pw.Flow(mss=SEG)
    payload = bytes(range(256)) * (CHUNK // 256)
    n = 0
    t = 1_700_000_000_000_000_000
    with path.open("wb") as f:
        f.write(pw.pcap_bytes([], nanosecond=True))
        segs = flow.handshake()
        for r in range(READS):
            itt = r + 1
            segs += flow.send("i2t", pw.scsi_cmd(itt, pw.cdb_read10(r * 8192, 8192),
                                                 edtl=4 * CHUNK, cmdsn=itt, read=True))
            for k in range(4):
                segs += flow.send("t2i", pw.data_in(itt, payload, offset=k * CHUNK, datasn=k,
                                                    final=k == 3), SEG)
            segs += flow.send("t2i", pw.scsi_rsp(itt, statsn=itt))
            pk = pw.packets_of(flow, segs, t0_ns=t, step_ns=20_000)
            t += 20_000 * len(segs)
            f.write(pw.pcap_bytes(pk, nanosecond=True)[24:])  # records only
            n += len(segs)
            segs = []
    return n


def test_decoder_memory_is_a_window_of_the_capture(tmp_path: Path) -> None:
    pcap = tmp_path / "big.pcap"
    segments = _write_big_capture(pcap)
    size = pcap.stat().st_size
    assert size > 380e6
    out = tmp_path / "decoded"
    # GNU time forks the decoder: a process forked from this one would count this one's
    # pages in its peak (the peak RSS outlives exec), hundreds of MB late in a test run
    peak = tmp_path / "peak_kb"
    r = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", str(peak), str(NATIVE_BIN), "-q",
                        "--csv-dir", str(out), str(pcap)], capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    rss = int(peak.read_text().split()[-1]) * 1024
    # all decoded: every command, every segment
    cmds = (out / "commands.csv").read_text().splitlines()
    assert len(cmds) == READS + 1
    assert len(read_segments(out / "segments.bin", ["ts_ns"])) == segments
    # the mapping's read pages were given back: well under the file's size
    assert rss < 200e6, f"decoder peak RSS {rss / 1e6:.0f} MB for a {size / 1e6:.0f} MB pcap"
