"""A synthetic capture directory whose every number is known: sequential iSCSI reads.

One read() of `syscall_bytes` becomes block requests of `block_bytes`, each becomes SCSI
commands of `cmd_bytes`; at most `qd` commands are outstanding. Every command is one SCSI
Command PDU (i2t) answered by one Data-In PDU (t2i, split into MSS segments sent at `rate`
bytes/s) and one SCSI Response PDU. Both ends' pcaps (headers only, IP length carries the
payload size), decoded tables for both ends, probe events and meta.json are written.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from istrace.capture.conn import conn_key

INI, TGT = ("10.9.0.1", 45000), ("10.9.0.2", 3260)
CONN = conn_key(*INI, *TGT)
MSS = 1448
BHS = 48


@dataclass
class Truth:
    n_cmds: int
    cmd_bytes: int
    owd_ns: int
    rate: float
    qd: int
    issue: list[int] = field(default_factory=list)      # initiator clock
    resp: list[int] = field(default_factory=list)
    burst_start: list[int] = field(default_factory=list)  # target: first data segment sent
    burst_end: list[int] = field(default_factory=list)    # target: last data segment sent
    syscall: tuple[int, int] = (0, 0)
    blocks: list[tuple[int, int]] = field(default_factory=list)


def _ip(a: str) -> bytes:
    return bytes(int(x) for x in a.split("."))


def write_pcap(path: Path, segs: list[tuple]) -> None:
    """segs: (ts_ns, src(ip,port), dst(ip,port), seq, ack, flags, win, payload_len, opts)."""
    out = [struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1)]
    for ts, (sip, sp), (dip, dp), seq, ack, flags, win, plen, opts in sorted(
            segs, key=lambda s: s[0]):
        tcp = struct.pack(">HHIIBBHHH", sp, dp, seq % 2**32, ack % 2**32,
                          (5 + len(opts) // 4) << 4, flags, win, 0, 0) + opts
        ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp) + plen, 0, 0x4000, 64, 6, 0,
                         _ip(sip), _ip(dip))
        frame = b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + tcp
        out.append(struct.pack("<IIII", ts // 10**9, ts % 10**9, len(frame),
                               len(frame) + plen) + frame)
    path.write_bytes(b"".join(out))


def make_capture(d: Path, n_cmds: int = 64, cmd_bytes: int = 32768, owd_ns: int = 2_000_000,
                 rate: float = 100e6, qd: int = 1, block_bytes: int = 524288,
                 t0: int = 1_700_000_000_000_000_000, delay_in_meta: bool = True) -> Truth:
    d.mkdir(parents=True, exist_ok=True)
    tr = Truth(n_cmds, cmd_bytes, owd_ns, rate, qd)
    isn_i, isn_t = 1000, 4_294_000_000  # target's sequence numbers wrap mid-transfer
    seg_ns = int(MSS / rate * 1e9)
    segs_i: list[tuple] = []  # as seen at the initiator
    segs_t: list[tuple] = []  # as seen at the target
    ws = b"\x03\x03\x07\x00"  # window scale 7 + NOP padding

    def both(ts: int, frm: str, seq: int, ack: int, flags: int, plen: int,
             opts: bytes = b"") -> None:
        src, dst = (INI, TGT) if frm == "i" else (TGT, INI)
        near, far = (segs_i, segs_t) if frm == "i" else (segs_t, segs_i)
        near.append((ts, src, dst, seq, ack, flags, 512, plen, opts))
        far.append((ts + owd_ns, src, dst, seq, ack, flags, 512, plen, opts))

    both(t0, "i", isn_i, 0, 0x02, 0, ws)
    both(t0 + owd_ns, "t", isn_t, isn_i + 1, 0x12, 0, ws)
    both(t0 + 2 * owd_ns, "i", isn_i + 1, isn_t + 1, 0x10, 0)
    sn_i, sn_t = isn_i + 1, isn_t + 1
    pdus_i, pdus_t, cmds_i, cmds_t, ev_i, ev_t = [], [], [], [], [], []
    start = t0 + 3 * owd_ns
    tr.syscall = (start, 0)
    tgt_free = 0
    resp_at: list[int] = []
    issue_t = start
    blocks_per = block_bytes // cmd_bytes
    for k in range(n_cmds):
        if k >= qd:
            issue_t = max(issue_t, sorted(resp_at)[k - qd])
        itt = f"0x{k + 16:08x}"
        lba = k * cmd_bytes // 512
        both(issue_t, "i", sn_i, sn_t, 0x18, BHS)
        common = {"conn": CONN, "itt": itt, "cdb_name": "READ(10)", "lba": lba,
                  "xfer_bytes": cmd_bytes, "edtl": cmd_bytes, "opcode": 1}
        pdus_i.append({"ts_ns": issue_t, "dir": "i2t", "tcp_seq": sn_i,
                       "opcode_name": "SCSI Command", "dsl": 0, "cmd": k, **common})
        pdus_t.append({"ts_ns": issue_t + owd_ns, "dir": "i2t", "tcp_seq": sn_i,
                       "opcode_name": "SCSI Command", "dsl": 0, "cmd": k, **common})
        sn_i += BHS
        arrive = issue_t + owd_ns
        send = max(arrive + 10_000, tgt_free)  # 10 us target think time
        total = BHS + cmd_bytes
        nseg = -(-total // MSS)
        data_seq = sn_t
        tr.burst_start.append(send)
        for s in range(nseg):
            ln = min(MSS, total - s * MSS)
            both(send + s * seg_ns, "t", sn_t, sn_i, 0x10, ln)
            if s % 2 == 1 or s == nseg - 1:  # delayed ACK every 2nd segment
                both(send + s * seg_ns + owd_ns + 1000, "i", sn_i, sn_t + ln, 0x10, 0)
            sn_t += ln
        last = send + (nseg - 1) * seg_ns
        tr.burst_end.append(last)
        rsp_t = last + seg_ns
        both(rsp_t, "t", sn_t, sn_i, 0x18, BHS)
        both(rsp_t + owd_ns + 1000, "i", sn_i, sn_t + BHS, 0x10, 0)
        for pl, off in ((pdus_i, owd_ns), (pdus_t, 0)):
            pl.append({"ts_ns": send + off, "dir": "t2i", "tcp_seq": data_seq,
                       "opcode_name": "SCSI Data-In", "dsl": cmd_bytes, "cmd": k, **common})
            pl.append({"ts_ns": rsp_t + off, "dir": "t2i", "tcp_seq": sn_t,
                       "opcode_name": "SCSI Response", "dsl": 0, "cmd": k, **common,
                       "resp_time_us": (rsp_t + owd_ns - issue_t) / 1000})
        sn_t += BHS
        tgt_free = rsp_t + seg_ns
        resp_i = rsp_t + owd_ns
        resp_at.append(resp_i)
        tr.issue.append(issue_t)
        tr.resp.append(resp_i)
        base = {"cmd": k, "conn": CONN, "itt": itt, "cdb_name": "READ(10)", "lba": lba,
                "xfer_bytes": cmd_bytes, "edtl": cmd_bytes, "direction": "read",
                "bytes_in": cmd_bytes, "data_pdus": 1}
        cmds_i.append({**base, "issue_ts_ns": issue_t, "first_data_ts_ns": send + owd_ns,
                       "last_data_ts_ns": send + owd_ns, "resp_ts_ns": resp_i,
                       "resp_time_us": (resp_i - issue_t) / 1000})
        cmds_t.append({**base, "issue_ts_ns": arrive, "first_data_ts_ns": send,
                       "last_data_ts_ns": send, "resp_ts_ns": rsp_t,
                       "resp_time_us": (rsp_t - arrive) / 1000})
        ev_i.append({"ts_ns": resp_i + 5000, "host": "initiator", "layer": "scsi",
                     "event": "cmd_done", "lat_ns": resp_i + 5000 - (issue_t - 5000),
                     "bytes": cmd_bytes, "lba": lba, "pid": 1})
        ev_t.append({"ts_ns": send - 1000, "host": "target", "layer": "syscall",
                     "event": "pread_exit", "lat_ns": send - 1000 - (arrive + 2000),
                     "bytes": cmd_bytes, "pid": 2})
        if k % 4 == 0:  # sender-side TCP probe on the target (exact cwnd)
            ev_t.append({"ts_ns": rsp_t, "host": "target", "layer": "tcp",
                         "event": "tcp_probe", "conn": CONN, "cwnd": 10 + k,
                         "ssthresh": 2**31 - 1, "srtt_us": 2 * owd_ns // 1000, "inflight": 0})
    # Block requests: each spans its commands' issue .. last response.
    for b in range(0, n_cmds, blocks_per):
        a, z = tr.issue[b] - 3000, tr.resp[min(b + blocks_per, n_cmds) - 1] + 8000
        tr.blocks.append((a, z))
        ev_i.append({"ts_ns": z, "host": "initiator", "layer": "block", "event": "rq_complete",
                     "lat_ns": z - a, "bytes": block_bytes, "pid": 1})
    tr.syscall = (start - 10_000, tr.resp[-1] + 20_000)
    ev_i.append({"ts_ns": tr.syscall[1], "host": "initiator", "layer": "syscall",
                 "event": "read_exit", "lat_ns": tr.syscall[1] - tr.syscall[0],
                 "bytes": n_cmds * cmd_bytes, "pid": 1})
    # One congestion episode on the target: CWR for 1 ms after the 3rd response.
    ev_t += [{"ts_ns": tr.resp[2], "host": "target", "layer": "tcp", "event": "cong_state",
              "conn": CONN, "ca_state": "CWR"},
             {"ts_ns": tr.resp[2] + 1_000_000, "host": "target", "layer": "tcp",
              "event": "cong_state", "conn": CONN, "ca_state": "Open"}]

    write_pcap(d / "initiator.pcap", segs_i)
    write_pcap(d / "target.pcap", segs_t)
    for host, pl, cl in (("initiator", pdus_i, cmds_i), ("target", pdus_t, cmds_t)):
        out = d / "decoded" / host
        out.mkdir(parents=True, exist_ok=True)
        p = pd.DataFrame(pl).sort_values("ts_ns", kind="stable").reset_index(drop=True)
        p.insert(0, "pdu", np.arange(len(p)))
        p.to_csv(out / "pdus.csv", index=False)
        pd.DataFrame(cl).to_csv(out / "commands.csv", index=False)
    for host, ev in (("initiator", ev_i), ("target", ev_t)):
        with open(d / f"events-{host}.jsonl", "w") as f:
            for e in sorted(ev, key=lambda e: e["ts_ns"]):
                f.write(json.dumps(e) + "\n")
    meta = {"testbed": {"delay_ms": owd_ns / 1e6} if delay_in_meta else {},
            "capture": {"initiator": {"dropped": 0}, "target": {"dropped": 0}}}
    (d / "meta.json").write_text(json.dumps(meta))
    return tr
