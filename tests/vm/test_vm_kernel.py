"""Full-kernel testbed (issue 10): boot Debian's stock kernel under QEMU, log the kernel iSCSI
initiator into LIO over a netem-delayed veth, read through it, and check that every layer's
probes fired for the same commands: syscall, block, SCSI (tracepoints), iSCSI (kprobes on the
initiator's libiscsi and on LIO) and TCP, tied by driver tag, LBA and ITT.

One VM boot serves every test of this module: boot 1-3 min, one bpftrace capture 3-5 min
(bpftrace compiles its programs under software emulation), then the same kernel through the
product's own path: istrace-probe (the host's CO-RE loader) on both ends, a standard capture
directory, and `istrace report` naming the caps the kernel stack set (< 1 min more).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from istrace.testbed import pattern, vm_analysis
from istrace.testbed import vm as vmtestbed

# The VM part is bounded inside (boot <= 300 s, capture <= 330 s, down <= ~70 s: < 12 min);
# the module's budget adds room for installing the VM packages on a fresh machine.
pytestmark = pytest.mark.timeout(900)

DELAY_MS = 5
MAX_SECTORS_KB = 512          # a 2 MB read() becomes 4-5 block requests / SCSI commands
READ_BYTES = 2 << 20
SKIP_BLOCKS = 3               # read the 4th 2 MB of the LUN: LBA 12288..16383
QUEUE_DEPTH = 2               # the istrace-probe capture: 4 parallel readers behind it


def _cannot_boot_reason() -> str | None:
    """Why this machine cannot boot the VM at all, or None. Only these reasons skip."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, QEMU, package install)"
    try:
        vmtestbed.ensure_host_tools()
    except vmtestbed.VmError as exc:
        return f"VM packages cannot be installed here: {exc}"
    return None


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    reason = _cannot_boot_reason()
    if reason:
        pytest.skip(reason)
    name = f"t{os.getpid() % 100000}"
    cfg = vmtestbed.VmConfig(name=name, delay_ms=DELAY_MS, lun_mb=32,
                             max_sectors_kb=MAX_SECTORS_KB, boot_timeout_s=300)
    out = tmp_path_factory.mktemp("vmcap")
    with vmtestbed.VmTestbed(cfg) as tb:
        # The LUN's pattern, read back through the kernel initiator (not the backing file).
        rc, text = tb.run("dd if=$DEV bs=4096 skip=1000 count=2 iflag=direct 2>/dev/null | "
                          "od -A n -t x8 -v -w8 | head -1")
        first_word = int(text.split()[0], 16) if rc == 0 and text.split() else None
        delay = tb.run("tc qdisc show dev vi")[1]
        tb.capture(out, vmtestbed.dd_workload(1, "2M", skip=SKIP_BLOCKS), probes="bpftrace",
                   timeout_s=330)
        info = dict(tb.info)
        # The product's path: istrace-probe on the stock kernel, 4 parallel 2 MiB readers
        # behind a SCSI queue_depth of 2 and the 512 KiB request size limit.
        tuned = tb.retune(queue_depth=QUEUE_DEPTH)
        own = tmp_path_factory.mktemp("vmcap-istrace")
        readers = " ".join(f"dd if=$DEV of=/dev/null iflag=direct bs=2M count=1 skip={i} &"
                           for i in range(4)) + " wait"
        tb.capture(own, readers, probes="istrace", timeout_s=330)
        vm_pid = int(json.loads((tb.dir / "state.json").read_text())["pid"])
    yield {"dir": out, "first_word": first_word, "qdisc": delay, "info": info, "pid": vm_pid,
           "run_dir": vmtestbed.run_dir(name), "own": own, "tuned": tuned}
    shutil.rmtree(vmtestbed.run_dir(name), ignore_errors=True)


@pytest.fixture(scope="module")
def events(capture):
    return vm_analysis.load_events(capture["dir"])


@pytest.fixture(scope="module")
def commands(events):
    return vm_analysis.command_table(events)


def test_session_and_path(capture):
    info = capture["info"]
    assert info["dev"].startswith("/dev/sd")
    assert info["max_sectors_kb"] == MAX_SECTORS_KB
    assert info["queue_depth"] == 32 and info["can_queue"] > 0
    assert info["MaxBurstLength"] == 262144 and info["FirstBurstLength"] == 65536
    assert f"delay {DELAY_MS}ms" in capture["qdisc"] or f"delay {DELAY_MS}.0ms" in capture["qdisc"]
    # 4 KiB block 1000 starts at byte 4096000: word 512000 holds 512000.
    assert capture["first_word"] == 4096 * 1000 // pattern.WORD


def test_packets_captured_on_both_ends_without_drops(capture):
    d = capture["dir"]
    for side in ("initiator", "target"):
        err = (d / f"tcpdump-{side}.log").read_text()
        stats = dict((m[1], int(m[0])) for m in re.findall(
            r"^(\d+) packets (captured|received by filter|dropped by kernel)$", err, re.M))
        assert stats.get("dropped by kernel") == 0, err
        # Every packet the filter passed reached the pcap (none left behind at stop).
        assert stats.get("captured") == stats.get("received by filter"), err
        assert stats["captured"] > READ_BYTES // 9000, f"{side}: {err}"
    out = subprocess.run(["tshark", "-r", str(d / "initiator.pcap"), "-Y", "iscsi", "-T",
                          "fields", "-e", "iscsi.opcode"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "0x01" in out.stdout.split(), "no SCSI Command PDU on the wire"


def test_every_layer_fired(events):
    seen = set(zip(events.host, events.layer, events.event, strict=True))
    for need in [("initiator", "syscall", "read_enter"), ("initiator", "syscall", "read_exit"),
                 ("initiator", "block", "rq_issue"), ("initiator", "block", "rq_complete"),
                 ("initiator", "scsi", "cmd_issue"), ("initiator", "scsi", "cmd_done"),
                 ("initiator", "iscsi", "queuecommand"), ("initiator", "iscsi", "task_xmit"),
                 ("initiator", "iscsi", "pdu_complete"), ("target", "iscsi", "cmd_rx"),
                 ("target", "scsi", "cmd_exec"), ("target", "scsi", "data_in"),
                 ("initiator", "tcp", "tcp_probe"), ("target", "tcp", "tcp_probe")]:
        assert need in seen, f"no {need} event"


def _read_commands(commands: pd.DataFrame) -> pd.DataFrame:
    first_lba = SKIP_BLOCKS * READ_BYTES // 512
    return commands[(commands.lba >= first_lba)
                    & (commands.lba < first_lba + READ_BYTES // 512)]


def test_read_split_and_tied_across_layers(events, commands):
    reads = events[(events.layer == "syscall") & (events.event == "read_enter")
                   & (events.bytes == READ_BYTES)]
    assert len(reads) == 1
    first_lba = SKIP_BLOCKS * READ_BYTES // 512
    mine = _read_commands(commands).sort_values("lba")
    # The block layer cut the 2 MB read() into requests of at most max_sectors_kb (and at the
    # direct-I/O bios' own limit of 256 segments, so 4 or 5 of them), one SCSI command each,
    # tiling the read exactly.
    assert len(mine) >= READ_BYTES // (MAX_SECTORS_KB * 1024)
    assert (mine.bytes <= MAX_SECTORS_KB * 1024).all()
    ends = (mine.lba + mine.bytes // 512).astype(int).tolist()
    assert mine.lba.astype(int).tolist() == [first_lba, *ends[:-1]]
    assert ends[-1] == first_lba + READ_BYTES // 512
    rqs = events[(events.layer == "block") & (events.event == "rq_issue")
                 & (events.lba >= first_lba)]
    assert sorted(zip(rqs.lba.astype(int), rqs.bytes.astype(int), strict=True)) == \
        list(zip(mine.lba.astype(int), mine.bytes.astype(int), strict=True))
    assert (mine.cdb_opcode == 0x28).all()          # READ(10)
    cols = ["read_enter_ns", "rq_issue_ns", "scsi_issue_ns", "iscsi_queue_ns", "iscsi_xmit_ns",
            "lio_rx_ns", "lio_exec_ns", "lio_data_in_ns", "iscsi_status_ns", "scsi_done_ns",
            "rq_complete_ns", "read_exit_ns"]
    assert mine[cols].notna().all().all(), mine[cols].to_string()
    # Same LBA on LIO's side as on the initiator's, found through the ITT alone.
    assert (mine.lio_lba.astype(int) == mine.lba.astype(int)).all()
    assert mine.itt.nunique() == len(mine)
    # Causality along the path (one kernel, one clock): each layer starts after the one above.
    order = mine[cols].astype("int64")
    for a, b in [("read_enter_ns", "rq_issue_ns"), ("rq_issue_ns", "scsi_issue_ns"),
                 ("scsi_issue_ns", "iscsi_queue_ns"), ("iscsi_queue_ns", "iscsi_xmit_ns"),
                 ("iscsi_xmit_ns", "lio_rx_ns"), ("lio_rx_ns", "lio_exec_ns"),
                 ("lio_data_in_ns", "iscsi_status_ns"), ("iscsi_status_ns", "scsi_done_ns"),
                 ("scsi_done_ns", "rq_complete_ns"), ("rq_complete_ns", "read_exit_ns")]:
        assert (order[a] <= order[b]).all(), f"{a} after {b}"
    # netem: the command cannot reach LIO sooner than one delay after leaving the initiator.
    assert ((order.lio_rx_ns - order.iscsi_xmit_ns) >= DELAY_MS * 1e6).all()


def test_tcp_events_on_the_iscsi_connection(events, commands):
    tcp = events[events.layer == "tcp"]
    conns = set(tcp.conn)
    assert len(conns) == 1
    (conn,) = conns
    assert conn.startswith(f"{vmtestbed.INI_IP}:") and conn.endswith(f"-{vmtestbed.TGT_IP}:3260")
    # The target's socket carried the Data-In: its send sequence advanced by >= 2 MB in the read.
    first, last = commands.iscsi_xmit_ns.min(), commands.iscsi_status_ns.max()
    tgt = tcp[(tcp.host == "target") & (tcp.ts_ns >= first) & (tcp.ts_ns <= last)]
    assert (tgt.seq.max() - tgt.seq.min()) % (1 << 32) >= READ_BYTES
    assert (tcp.srtt_us > 0).all()


def test_commands_tied_in_the_merged_table(capture, commands):
    """`istrace merge` on the capture directory: each SCSI command of the 2 MB read has one
    cmd_id from the pcaps of both ends, and the probe rows of both kernels' iSCSI code carry its
    ITT and LBA."""
    from istrace.merge import merger as merge

    merge.merge_dir(capture["dir"])
    m = pd.read_parquet(capture["dir"] / "merged.parquet")
    mine = _read_commands(commands)
    assert len(mine) >= 4
    itt = m.itt.astype("Int64")
    for c in mine.itertuples():
        rows = m[itt == int(c.itt)]
        wire = rows[(rows.source == "pcap") & (rows.event == "SCSI Command")]
        assert set(wire.host) == {"initiator", "target"}, rows[["host", "event"]]
        assert (wire.lba.astype("int64") == int(c.lba)).all()
        ids = rows[rows.source == "pcap"].cmd_id.dropna().unique()
        assert len(ids) == 1, ids
        probes = rows[rows.source != "pcap"]
        got = set(zip(probes.host, probes.event, strict=True))
        assert {("initiator", "task_xmit"), ("initiator", "pdu_complete"), ("target", "cmd_rx"),
                ("target", "cmd_exec"), ("target", "data_in")} <= got, got
        assert (probes[probes.event.isin(["task_xmit", "cmd_rx", "cmd_exec"])].lba
                .astype("int64") == int(c.lba)).all()
        data_in = rows[(rows.source == "pcap") & (rows.event == "SCSI Data-In")
                       & (rows.host == "initiator")]
        assert data_in.bytes.sum() == int(c.bytes)


SCHEMA_COLUMNS = ["ts_ns", "host", "layer", "event", "pid", "comm", "conn", "cookie", "lba",
                  "bytes", "itt", "opcode", "seq", "ack", "cwnd", "ssthresh", "srtt_us",
                  "ca_state", "inflight", "rwnd", "snd_wnd", "lat_ns", "dev", "reason"]


def test_events_follow_the_schema(capture):
    for side in ("initiator", "target"):
        rows = [json.loads(line) for line in
                (capture["dir"] / f"events-{side}.jsonl").read_text().splitlines()[:200]]
        assert rows and all(r["host"] == side for r in rows)
        assert all(isinstance(r["ts_ns"], int) and r["ts_ns"] > 1.6e18 for r in rows)
    df = pd.read_json(capture["dir"] / "events-initiator.jsonl", lines=True)
    assert list(df.columns[:len(SCHEMA_COLUMNS)]) == SCHEMA_COLUMNS


KERNEL_HOOKS = {"initiator": ["sys_enter", "sys_exit", "bio_queue", "bio_split", "rq_issue",
                               "rq_complete", "scsi_dispatch", "scsi_done", "kiscsi_queue",
                               "kiscsi_xmit", "kiscsi_pdu", "tcp_probe", "cong_state",
                               "sock_state"],
                "target": ["lio_cmd_rx", "lio_cmd_start", "lio_bs_submit", "lio_cmd_done",
                           "lio_data_in", "tcp_probe", "cong_state"]}


def _own_events(capture) -> pd.DataFrame:
    from istrace.capture import events as capture_events

    return capture_events.load_events(capture["own"])


def test_istrace_probe_hook_table_in_the_guest(capture):
    """Every hook of istrace-probe's table is attached on the stock kernel or says why not,
    and the kernel stack's hooks (block, SCSI midlayer, iscsi_tcp, LIO, TCP) attached."""
    meta = json.loads((capture["own"] / "meta.json").read_text())
    assert meta["testbed"]["mode"] == "vm" and meta["drops_total"] == 0
    for side, need in KERNEL_HOOKS.items():
        p = meta["probes"][side]
        assert p["status"] == "ok" and p["lost"] == 0, p
        hooks = p["hooks"]
        assert all(v and (not v.startswith("not attached") or ": " in v) for v in hooks.values())
        missing = [h for h in need if str(hooks.get(h, "")).startswith("not attached")]
        assert not missing, {h: hooks[h] for h in missing}
    assert meta["testbed"]["tunables"]["queue_depth"] == QUEUE_DEPTH


def test_istrace_probe_events_of_four_2mib_reads(capture):
    """Event counts of 4 parallel 2 MiB O_DIRECT reads with max_sectors_kb 512: each read is one
    read() of the workload's cgroup, 4 block requests, 4 SCSI commands on the initiator and 4
    LIO commands on the target, with the same LBAs on both ends."""
    ev = _own_events(capture)
    ini, tgt = ev[ev.host == "initiator"], ev[ev.host == "target"]
    reads = ini[(ini.event == "read_exit") & (ini.bytes == READ_BYTES)]
    assert len(reads) == 4 and set(reads.comm) == {"dd"}
    assert set(ini[ini.layer == "syscall"].comm) <= {"bash", "dd"}   # the cgroup's tasks only
    rq = ini[ini.event == "rq_issue"]
    assert len(rq) == 16 and (rq.bytes == MAX_SECTORS_KB * 1024).all()
    assert len(ini[ini.event == "rq_complete"]) == 16
    reads_lba = {int(x) for x in rq.lba}
    assert reads_lba == {i * READ_BYTES // 512 + k * MAX_SECTORS_KB * 2
                         for i in range(4) for k in range(4)}
    lio = tgt[tgt.event == "lio_cmd_start"]
    assert {int(x) for x in lio[lio.bytes == MAX_SECTORS_KB * 1024].lba} == reads_lba
    # iscsi_tcp queued the same commands; the Data-In PDUs it completed carry the ITTs LIO saw
    queued = ini[ini.event == "kiscsi_queue"]
    assert {int(x) for x in queued.lba.dropna()} >= reads_lba
    data_in = ini[(ini.event == "kiscsi_pdu") & (ini.opcode == 0x25)]
    assert {int(x) for x in data_in.itt.dropna()} >= {int(x) for x in lio.itt.dropna()}
    assert (tgt[tgt.layer == "tcp"].conn.str.endswith(f"{vmtestbed.TGT_IP}:3260")
            | tgt[tgt.layer == "tcp"].conn.str.startswith(f"{vmtestbed.TGT_IP}:3260")).all()


def test_one_read_tied_through_every_layer_in_the_merge(capture):
    """`istrace merge` on the istrace-probe capture: each SCSI command of the 4 reads carries
    one cmd_id from the block request down to LIO, through the layers that know its LBA
    (block, SCSI midlayer, iscsi_tcp's queuecommand) and those that know its ITT (iscsi_tcp's
    PDUs, LIO), and the wire on both ends."""
    from istrace.merge import merger as merge

    merge.merge_dir(capture["own"])
    m = pd.read_parquet(capture["own"] / "merged.parquet")
    reads = m[(m.source == "pcap") & (m.host == "initiator") & (m.event == "SCSI Command")]
    ids = reads.cmd_id.dropna().unique()
    assert len(ids) >= 16, reads
    need = {("initiator", "rq_issue"), ("initiator", "rq_complete"),
            ("initiator", "scsi_dispatch"), ("initiator", "scsi_done"),
            ("initiator", "kiscsi_queue"), ("initiator", "kiscsi_xmit"),
            ("initiator", "kiscsi_pdu"), ("initiator", "SCSI Command"),
            ("initiator", "SCSI Data-In"), ("target", "SCSI Command"),
            ("target", "lio_cmd_rx"), ("target", "lio_cmd_start"), ("target", "lio_bs_submit"),
            ("target", "lio_cmd_done"), ("target", "lio_data_in")}
    tied = 0
    for cid in ids:
        rows = m[m.cmd_id == cid]
        if not (rows.event == "rq_issue").any():
            continue                      # not one of the reads (INQUIRY, READ CAPACITY...)
        got = set(zip(rows.host, rows.event, strict=True))
        assert need <= got, sorted(need - got)
        lbas = rows[rows.event.isin(["scsi_dispatch", "kiscsi_queue", "kiscsi_xmit",
                                     "lio_cmd_rx", "lio_cmd_start", "lio_data_in"])].lba
        assert lbas.nunique() == 1
        # the read's path in order, one kernel, one clock: down the initiator's stack, across
        # the delayed path, through LIO and back up
        first = rows[rows.source == "probe"].groupby("event").ts_ns_merged.min()
        chain = ["rq_issue", "scsi_dispatch", "kiscsi_queue", "kiscsi_xmit", "lio_cmd_rx",
                 "lio_cmd_start", "lio_bs_submit", "lio_cmd_done", "lio_data_in", "scsi_done",
                 "rq_complete"]
        times = [int(first[e]) for e in chain]
        assert times == sorted(times), dict(zip(chain, times, strict=True))
        assert first["lio_cmd_rx"] - first["kiscsi_xmit"] >= DELAY_MS * 1e6
        tied += 1
    assert tied == 16


def test_report_names_the_split_and_the_queue_depth(capture):
    """`istrace report` on the --kernel capture, unchanged: the block split and the SCSI
    queue depth are each named with the setting in force."""
    r = subprocess.run([sys.executable, "-m", "istrace.cli.main", "report",
                        str(capture["own"])], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    text = r.stdout + r.stderr
    assert "No block layer on the initiator" not in text
    assert ("One 2 MiB read became 4 block requests of 512 KiB: max_sectors_kb = 512"
            in text), text
    assert f"A flat ceiling at {QUEUE_DEPTH}: the SCSI device's queue_depth = {QUEUE_DEPTH}" \
        in text, text
    assert (capture["own"] / "verdict.json").exists()


def test_vm_powered_off_and_cleaned_up(capture):
    # down() ran when the fixture's `with` closed: no QEMU left behind, no run directory.
    assert not Path(f"/proc/{capture['pid']}").exists()
    assert not capture["run_dir"].exists()
