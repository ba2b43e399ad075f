"""One real small capture (testbed: netns + veth + tgtd, istrace-gen reads, tcpdump at both
ends) checked against known truth: the workload's own numbers and tshark's dissection."""

import json
import os
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest
from istrace.capture import decoderun, layout
from istrace.capture.decoded import load_pdus, load_segments
from istrace.capture.load import load_capture
from istrace.measure.outstanding import outstanding, outstanding_ceiling
from istrace.plot import data, render
from istrace.plot.seqgraph import seq_graph
from istrace.report import diagnosis, html
from istrace.system.paths import binary
from istrace.testbed import namespaces as testbed
from istrace.track.of_capture import load_tracked
from segcheck import assert_same_as_tshark
from test_stale_tables import later

N_CMDS, SIZE = 6, 1 << 20
# Big buffer (the default drops), and every packet handed over at once: without immediate mode
# packets wait in the ring for a block timeout and a stop can leave them unwritten.
TCPDUMP = ["-U", "--immediate-mode", "-B", "524288"]


# veth on a busy host reorders segments now and then (seen: 52 out-of-order segments in one
# 6 MiB read). tshark leaves a PDU that spans reordered data undissected unless told to
# reassemble out of order, and then counts one Data-In fewer than the workload sent.
TSHARK_OPTS = ["-n", "-o", "tcp.reassemble_out_of_order:TRUE"]


def _tshark(pcap, *args):
    r = subprocess.run(["tshark", "-r", str(pcap), *TSHARK_OPTS, *args], capture_output=True,
                       text=True, timeout=120, check=True)
    return [x for x in r.stdout.splitlines() if x.strip()]


@pytest.fixture(scope="module")
def real(module_tmp):
    out = module_tmp("real")
    gen = binary("istrace-gen")
    cfg = testbed.TestbedConfig(name=f"vz{os.getpid() % 10000}", lun_mb=16)
    with testbed.Testbed(cfg) as tb:
        dumps = []
        try:
            for host, popen, dev in (("initiator", tb.popen_ini, tb.ini_dev),
                                     ("target", tb.popen_tgt, tb.tgt_dev)):
                err = open(out / f"tcpdump-{host}.err", "w")
                dumps.append(popen(["tcpdump", *TCPDUMP, "-i", dev, "-w",
                                    str(out / f"{host}.pcap"), "tcp port 3260"],
                                   stdout=subprocess.DEVNULL, stderr=err))
            deadline = time.time() + 10
            while time.time() < deadline and not all(
                    "listening" in (out / f"tcpdump-{h}.err").read_text()
                    for h in ("initiator", "target")):
                time.sleep(0.1)
            r = tb.run_ini([str(gen), "--portal", tb.portal, "--target", tb.iqn, "--size",
                            str(SIZE), "--count", str(N_CMDS), "--queue-depth", "1",
                            "--json", "--quiet"], capture_output=True, timeout=60)
            assert r.returncode == 0, r.stderr
            # The connection's last packets (tgtd's FIN, the ACK of it) may come seconds
            # after the initiator exits on a busy machine: one that reached the ring at the
            # SIGINT was counted and never written (a CI run).
            tb.wait_iscsi_closed(10)
            # tcpdump on a busy machine lags: stop it only once its files have not grown
            # for three looks in a row (one still look was not enough on a loaded CI machine:
            # 3 packets were still in the ring at the SIGINT)
            sizes, still, deadline = None, 0, time.time() + 30
            while time.time() < deadline and still < 3:
                now = [(out / f"{h}.pcap").stat().st_size for h in ("initiator", "target")]
                still = still + 1 if now == sizes else 0
                sizes = now
                time.sleep(0.5)
        finally:
            for p in dumps:
                p.send_signal(signal.SIGINT)
                p.wait(timeout=10)
    summary = json.loads(r.stdout)
    (out / "meta.json").write_text(json.dumps({"testbed": {"delay_ms": 0.0},
                                               "workload": summary}))
    return out, summary


def test_capture_complete(real):
    out, summary = real
    assert summary["commands"] == N_CMDS and summary["max_outstanding"] == 1
    for h in ("initiator", "target"):
        assert "0 packets dropped by kernel" in (out / f"tcpdump-{h}.err").read_text()
    assert not load_tracked(out, decode=False).warnings


def test_segments_match_tshark(real):
    out, _ = real
    cap = load_tracked(out)
    for host in ("initiator", "target"):
        segs = cap.segs[host].frame()
        # every row and column of the decoder's segment table, field by field (the capture
        # reads it a slice at a time; frame() is all of it, with each row's conn and dir)
        table = load_segments(out / f"{host}.pcap", cache_dir=out / "decoded" / host)
        assert assert_same_as_tshark(table, out / f"{host}.pcap") > 100
        assert (table["ts_ns"].to_numpy() == segs["ts_ns"].to_numpy()).all()
        echo = cap.segment_columns(host, ["tsval", "tsecr"])
        for c in ("ts_ns", "tsval", "tsecr"):
            assert (echo[c].to_numpy() == table[c].to_numpy()).all(), c
        assert (echo["dir"].astype(str) == segs["dir"].astype(str)).all()
        assert (echo["tsval"] > 0).mean() > 0.9  # Linux sends the option on every segment
        rows = _tshark(out / f"{host}.pcap", "-T", "fields", "-e", "tcp.srcport", "-e",
                       "tcp.len")
        t2i = sum(int(x.split()[1]) for x in rows if x.split()[0] == "3260")
        i2t = sum(int(x.split()[1]) for x in rows if x.split()[0] != "3260")
        assert len(segs) == len(rows)
        assert segs.loc[segs["dir"] == "t2i", "len"].sum() == t2i
        assert segs.loc[segs["dir"] == "i2t", "len"].sum() == i2t
        assert t2i >= N_CMDS * SIZE


def test_pdus_match_tshark_and_workload(real):
    out, _ = real
    cap = load_tracked(out)
    pdus = cap.pdus["initiator"]
    ops = _tshark(out / "initiator.pcap", "-Y", "iscsi", "-T", "fields", "-e", "iscsi.opcode")
    flat = [int(o, 16) for line in ops for o in line.split(",")]
    for code, name in ((0x01, "SCSI Command"), (0x25, "SCSI Data-In")):
        assert (pdus["opcode_name"] == name).sum() == flat.count(code), name
    cmds = cap.commands["initiator"]
    reads = cmds[cmds["cdb_name"].astype(str).str.startswith("READ(")]
    assert len(reads) == N_CMDS
    assert (reads["xfer_bytes"] == SIZE).all() and (reads["bytes_in"] == SIZE).all()
    assert reads["resp_ts_ns"].notna().all()
    # The plots' data: one command at a time, both ends' times, every READ in every row.
    ceil = outstanding_ceiling(outstanding(cmds))
    assert ceil["max"] == 1
    rows = data.ladder_rows(cap.pdus["initiator"], cap.pdus["target"], cap.offset_ns)
    rd = rows[rows["cmd"].isin(reads["cmd"])]
    assert not rd["estimated"].any()
    owd = (rd["t_recv_ns"] - rd["t_send_ns"]).to_numpy()
    assert (owd >= -50_000).all() and np.median(owd) < 1_000_000  # veth: microseconds
    assert rd[rd["kind"] == "SCSI Data-In"]["bytes"].tolist() == [SIZE] * N_CMDS
    spans = render.timeline_spans(cap)
    for row in ("initiator iSCSI", "initiator TCP", "wire", "target TCP", "target iSCSI"):
        got = set(spans.loc[spans["row"] == row, "cmd"].dropna().astype(int))
        assert set(reads["cmd"].astype(int)) <= got, row


def test_tracker_and_seq_graph(real):
    out, _ = real
    cap = load_tracked(out)
    tr = cap.track
    s = tr.samples.frame(dir="t2i", host="target")
    t2i_total = cap.segs["target"].frame().query("dir == 't2i'")["len"].sum()
    assert s["inflight_bytes"].min() >= 0 and s["inflight_bytes"].max() <= t2i_total
    assert s["inflight_bytes"].iloc[-1] == 0  # everything acknowledged at the end
    rtt = s["rtt_us"].dropna()
    assert len(rtt) > 10 and (rtt >= 0).all() and rtt.median() < 5000
    assert (s["rwnd"].dropna() > 65535).any()  # window scale from the SYNs applied
    g = seq_graph(cap.segs["target"], "t2i")
    # tshark's relative next-sequence numbers start at 1 after the SYN.
    nxt = _tshark(out / "target.pcap", "-Y", "tcp.srcport == 3260 && tcp.len > 0", "-T",
                  "fields", "-e", "tcp.nxtseq")
    assert g["segments"]["end"].max() == max(int(x) for x in nxt) - 1
    sg = g["segments"]
    assert sg["rtx"].sum() <= len(_tshark(out / "target.pcap", "-Y",
                                          "tcp.analysis.retransmission || "
                                          "tcp.analysis.fast_retransmission || "
                                          "tcp.analysis.spurious_retransmission || "
                                          "tcp.analysis.out_of_order"))


def test_report_on_real_capture(real):
    out, _ = real
    path, diag = html.report(out)
    assert path.read_text().count("data:image/png;base64,") == 7
    assert diag["outstanding"]["max"] == 1
    assert diag["sizes"]["scsi_command"]["typical"] == SIZE
    assert not [w for w in diag["warnings"] if "DROPS" in w]
    tr = json.loads((out / "trace.json").read_text())["traceEvents"]
    assert any(e["ph"] == "X" for e in tr)


def test_every_pdu_matches_tshark(real):
    """Every PDU the decoder found is one tshark dissects, opcode for opcode; the READs are
    the workload's."""
    out, _ = real
    cap = load_tracked(out)
    # the decoder's whole table (the report holds only the columns its analyses read)
    pdus, cmds = load_pdus(layout.decoded_dir(out, "initiator")), cap.commands["initiator"]
    ops = _tshark(out / "initiator.pcap", "-Y", "iscsi", "-T", "fields", "-e", "iscsi.opcode")
    flat = [int(o, 16) for line in ops for o in line.split(",")]
    assert len(pdus) == len(flat)
    assert sorted(pdus["opcode"].apply(lambda v: int(str(v), 0)).tolist()) == sorted(flat)
    reads = cmds[cmds["cdb_name"] == "READ(10)"]
    assert len(reads) == N_CMDS and (reads["bytes_in"] == SIZE).all()
    assert reads["resp_ts_ns"].notna().all() and (reads["outstanding"] == 1).all()


def test_real_queue_depth_ceiling(tmp_path):
    """Seed 001's finding in miniature: a queue-depth limit shows as a flat ceiling."""
    gen = binary("istrace-gen")
    qd = 4
    # 2 ms each way: answers come late, so the queue depth, not the target, sets the pace.
    cfg = testbed.TestbedConfig(name=f"vq{os.getpid() % 10000}", lun_mb=16, delay_ms=2.0)
    with testbed.Testbed(cfg) as tb:
        err = open(tmp_path / "tcpdump-initiator.err", "w")
        dump = tb.popen_ini(["tcpdump", *TCPDUMP, "-i", tb.ini_dev, "-w",
                             str(tmp_path / "initiator.pcap"), "tcp port 3260"],
                            stdout=subprocess.DEVNULL, stderr=err)
        try:
            deadline = time.time() + 10
            while time.time() < deadline and "listening" not in (
                    tmp_path / "tcpdump-initiator.err").read_text():
                time.sleep(0.1)
            r = tb.run_ini([str(gen), "--portal", tb.portal, "--target", tb.iqn, "--size",
                            "64k", "--count", "64", "--queue-depth", str(qd), "--json",
                            "--quiet"], capture_output=True, timeout=60)
            assert r.returncode == 0, r.stderr
            sizes, deadline = None, time.time() + 20
            while time.time() < deadline:
                now = (tmp_path / "initiator.pcap").stat().st_size
                if now == sizes:
                    break
                sizes = now
                time.sleep(0.7)
        finally:
            dump.send_signal(signal.SIGINT)
            dump.wait(timeout=10)
    assert json.loads(r.stdout)["max_outstanding"] == qd
    log = (tmp_path / "tcpdump-initiator.err").read_text()
    assert "0 packets dropped by kernel" in log
    cap = load_tracked(tmp_path)
    assert not cap.warnings, cap.warnings  # nothing lost or left unwritten
    cmds = cap.commands["initiator"]
    reads = cmds[cmds["cdb_name"].astype(str).str.startswith("READ(")]
    assert len(reads) == 64
    ceil = outstanding_ceiling(outstanding(reads))
    assert ceil["max"] == qd and ceil["flat"], ceil
    diag = diagnosis.diagnose(cap)
    assert diag["outstanding"]["max"] == qd


def test_pcapng_reads_the_same(real, tmp_path):
    out, _ = real
    ng = tmp_path / "initiator.pcapng"
    subprocess.run(["editcap", "-F", "pcapng", str(out / "initiator.pcap"), str(ng)],
                   check=True, timeout=60)
    a, b = load_segments(out / "initiator.pcap"), load_segments(ng)
    assert len(a) == len(b) > 100
    assert a.equals(b)
    assert_same_as_tshark(b, ng)


def test_a_pcap_written_again_is_decoded_again(real, tmp_path):
    out, _ = real
    for h in layout.HOSTS:
        shutil.copy(out / f"{h}.pcap", tmp_path)
    first = load_capture(tmp_path)  # decoded into istrace's own folder
    want, other = first.pdus["target"], first.pdus["initiator"]
    # that folder's tables made from another pcap (the initiator's), before the target's
    # pcap was written again: they are not the new pcap's
    stale = layout.decoded_dir(tmp_path, "target") / layout.PDUS
    shutil.copy(layout.decoded_dir(tmp_path, "initiator") / layout.PDUS, stale)
    later(layout.pcap(tmp_path, "target"))
    assert decoderun.missing(tmp_path) == ["target"]
    got = load_capture(tmp_path).pdus["target"]
    assert decoderun.missing(tmp_path) == []
    assert got.equals(want) and not got.equals(other)
