"""Loss on a real path whose drops are counted by the emulator itself: the pcap-only tracker
must find as many retransmissions as the bottleneck queue dropped, in fast-recovery episodes,
and the report must blame the path, not the hosts."""

import json
import os
import subprocess
import sys

import pandas as pd
from istrace.report import diagnosis
from istrace.track import tracker
from istrace.track.of_capture import load_tracked


def test_bottleneck_drops_vs_tracker(tmp_path):
    out = tmp_path / "cap"
    r = subprocess.run(
        [sys.executable, "-m", "istrace.cli.main", "capture", "--name",
         f"vl{os.getpid() % 10000}", "--delay", "4ms", "--rate", "200mbit", "--queue", "20",
         "--no-probes", "--workload", "gen --size 4M --count 3", "--out", str(out),
         "--timeout", "120"], capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["drops_total"] == 0  # the capture itself is complete
    dropped = meta["path_stats"]["t2i"]["drop_queue"]
    assert dropped > 0, "a 20-packet queue should overflow in slow start"
    cap = load_tracked(out)
    sent = cap.segs["target"].frame().query("dir == 't2i' and len > 0")
    ev = cap.track.events.frame()
    rtx = ev[(ev["kind"] == "retransmit") & (ev["dir"] == "t2i") & (ev["host"] == "target")]
    # At the sender, before the queue, every byte sent more than once is a retransmission:
    # the tracker's retransmitted bytes are exactly the excess over the stream's extent.
    base = int(sent["seq"].iloc[0])
    start = (sent["seq"].astype("int64") - base) % 2**32
    excess = int(sent["len"].sum() - (start + sent["len"]).max())
    assert int(rtx["bytes"].sum()) == excess
    # And as many segments as the bottleneck dropped were resent (the emulator counts a few
    # packets outside the capture window; Linux may merge resent segments). A timeout resends
    # what was in flight, dropped or not: those copies reach the receiver twice, so what the
    # receiver got more than once is taken off before comparing with the drops.
    got = cap.segs["initiator"].frame().query("dir == 't2i' and len > 0")
    g_start = (got["seq"].astype("int64") - base) % 2**32
    twice = int(got["len"].sum() - (g_start + got["len"]).max())
    mss = int(sent["len"].max())
    assert len(rtx) >= 0.8 * dropped, (dropped, len(rtx))
    needed = (excess - twice) / mss
    # (CI once saw 852 resent for 672 dropped with nothing received twice: the emulator's
    # count is of its own queue; a resent copy it still held when the capture stopped, or one
    # it dropped while tcpdump's window had closed, is not in it)
    assert 0.8 * dropped <= needed <= 1.3 * dropped + 10, (dropped, len(rtx), twice, needed)
    st = cap.track.states.frame()
    assert st["state"].isin(["Recovery", "Loss"]).sum() >= 1
    # Losses tied to the READ they hit (a resent login or response PDU may have none).
    assert rtx["cmd"].notna().mean() >= 0.9, rtx["cmd"].isna().sum()
    # The tracker's slices carry real losses across their cuts: any slicing, the same rows.
    one, sliced = (tracker.track_pcap(cap.segs["target"], cap.main_pdus(), host="target",
                                      dirs=("t2i",), slice_rows=rows) for rows in (10**9, 997))
    pd.testing.assert_frame_equal(sliced.samples.frame(), one.samples.frame())
    for name in ("events", "states"):  # labels listed in the order the slices met them
        pd.testing.assert_frame_equal(getattr(sliced, name).frame(), getattr(one, name).frame(),
                                      check_categorical=False)
    diag = diagnosis.diagnose(cap)
    assert "emulated path" in " ".join(diag["findings"])
