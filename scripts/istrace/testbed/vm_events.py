"""Turns the VM capture's bpftrace lines (probes.txt) into event records of docs/schema.md §1.

Each bpftrace line is `layer event mono_ns pid comm key=value ...`; iSCSI headers and CDBs come
as raw little-endian u64 words and are decoded here (ITT, opcode, LBA, transfer length), so the
probe script stays small. One kernel runs both ends, so events split into host `initiator` and
`target` by what they probe (LIO functions and the socket with local port 3260 are the target)
and share one clock: clock-vm.json says so (offset 0); bpf-clock.json converts the probes'
CLOCK_MONOTONIC to CLOCK_REALTIME.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from istrace.capture.conn import conn_key

ISCSI_PORT = 3260
# probe name -> (host, layer, event) for the lines that are not decided per line
_LIO = {"cmd_rx": ("iscsi", "cmd_rx"), "cmd_exec": ("scsi", "cmd_exec"),
        "data_in": ("scsi", "data_in"), "status": ("scsi", "status")}
COLUMNS = ["ts_ns", "host", "layer", "event", "pid", "comm", "conn", "cookie", "lba", "bytes",
           "itt", "opcode", "seq", "ack", "cwnd", "ssthresh", "srtt_us", "ca_state", "inflight",
           "rwnd", "snd_wnd", "lat_ns", "dev", "reason", "tag", "cdb_opcode"]


def _bytes(*words: str) -> bytes:
    return b"".join(int(w, 16).to_bytes(8, "little") for w in words)


def decode_cdb(cdb: bytes, block_size: int = 512) -> tuple[int, int | None, int | None]:
    """(opcode, lba, bytes) of a READ/WRITE CDB of 6, 10, 12 or 16 bytes; others have no LBA."""
    op = cdb[0]
    if op in (0x28, 0x2A, 0x2F):                       # READ/WRITE/VERIFY(10)
        lba, blocks = int.from_bytes(cdb[2:6], "big"), int.from_bytes(cdb[7:9], "big")
    elif op in (0x88, 0x8A, 0x8F):                     # (16)
        lba, blocks = int.from_bytes(cdb[2:10], "big"), int.from_bytes(cdb[10:14], "big")
    elif op in (0xA8, 0xAA):                           # (12)
        lba, blocks = int.from_bytes(cdb[2:6], "big"), int.from_bytes(cdb[6:10], "big")
    elif op in (0x08, 0x0A):                           # (6)
        lba = int.from_bytes(cdb[1:4], "big") & 0x1FFFFF
        blocks = cdb[4] or 256
    else:
        return op, None, None
    return op, lba, blocks * block_size


def _kv(tokens: list[str]) -> dict[str, str]:
    out = {}
    for t in tokens:
        k, sep, v = t.partition("=")
        if sep:
            out[k] = v
    return out


def parse_line(line: str, offset_ns: int, ini_ip: str, tgt_ip: str,
               block_size: int = 512) -> dict[str, Any] | None:
    """One event record from one bpftrace line, or None for other output."""
    parts = line.split()
    if len(parts) < 5 or not parts[2].isdigit():
        return None
    probe, name, mono, pid, comm = parts[:5]
    kv = _kv(parts[5:])
    rec: dict[str, Any] = {"ts_ns": int(mono) + offset_ns, "host": "initiator", "layer": probe,
                           "event": name, "pid": int(pid), "comm": comm}
    if probe == "syscall":
        if name == "read_enter":
            rec["bytes"] = int(kv["bytes"])
            rec["reason"] = f"fd={kv['fd']}"
        else:
            rec["bytes"] = int(kv["ret"])
            rec["lat_ns"] = int(kv["lat"])
    elif probe == "block":
        rec.update(lba=int(kv["lba"]), bytes=int(kv["bytes"]), reason=kv.get("rwbs"))
        if name == "rq_complete" and kv.get("err", "0") != "0":
            rec["reason"] = f"{kv.get('rwbs')} err={kv['err']}"
    elif probe == "scsi":
        # No CDB here (see probes.bt.in): vm_analysis takes the LBA from iscsi queuecommand.
        op = int(kv["op"])
        rec.update(opcode=op, cdb_opcode=op, tag=int(kv["tag"]))
        if name == "cmd_done":
            rec["reason"] = f"result=0x{int(kv['result']) & 0xffffffff:x}"
        else:
            rec["reason"] = f"sgl={kv['sgl']}"
    elif probe == "iscsi" and name == "queuecommand":
        op, lba, nbytes = decode_cdb(_bytes(kv["cdb0"], kv["cdb1"]), block_size)
        rec.update(opcode=0x01, cdb_opcode=op, lba=lba, bytes=nbytes, tag=int(kv["tag"]))
    elif probe in ("iscsi", "lio") and name in ("task_xmit", "cmd_rx"):
        bhs = _bytes(kv["bhs0"]) + bytes(8) + _bytes(kv["bhs2"])
        op, lba, nbytes = decode_cdb(_bytes(kv["cdb0"], kv["cdb1"]), block_size)
        rec.update(opcode=bhs[0] & 0x3F, cdb_opcode=op, lba=lba,
                   itt=int.from_bytes(bhs[16:20], "big"),
                   bytes=int.from_bytes(bhs[20:24], "big"))   # Expected Data Transfer Length
        if probe == "lio":
            rec.update(host="target", layer="iscsi")
    elif probe == "iscsi" and name == "pdu_complete":
        bhs = _bytes(kv["bhs0"]) + bytes(8) + _bytes(kv["bhs2"], kv["bhs3"], kv["bhs4"])
        op = bhs[0] & 0x3F
        rec.update(opcode=op, itt=int.from_bytes(bhs[16:20], "big"),
                   bytes=int.from_bytes(bhs[5:8], "big"))        # DataSegmentLength
        if op == 0x25:
            rec["reason"] = f"flags=0x{bhs[1]:02x} datasn={int.from_bytes(bhs[36:40], 'big')}"
        elif op == 0x21:
            rec["reason"] = f"status=0x{bhs[3]:02x}"
    elif probe == "lio":
        layer, event = _LIO[name]
        # se_cmd.tag holds the ITT as it sat in the header (big-endian) read as a host u32.
        tag = int(kv["tag"]) & 0xFFFFFFFF
        rec.update(host="target", layer=layer, event=event, lba=int(kv["lba"]),
                   bytes=int(kv["bytes"]), itt=int.from_bytes(tag.to_bytes(4, "little"), "big"))
    elif probe == "tcp":
        sport, dport = int(kv["sport"]), int(kv["dport"])
        target_side = sport == ISCSI_PORT
        iport = dport if target_side else sport
        rec.update(host="target" if target_side else "initiator",
                   conn=conn_key(ini_ip, iport, tgt_ip, ISCSI_PORT), cookie=int(kv["cookie"]),
                   bytes=int(kv["len"]), seq=int(kv["snd_nxt"]), ack=int(kv["snd_una"]),
                   cwnd=int(kv["cwnd"]), ssthresh=int(kv["ssthresh"]),
                   srtt_us=int(kv["srtt"]), rwnd=int(kv["rcv_wnd"]),
                   snd_wnd=int(kv["snd_wnd"]))
    else:
        return None
    return rec


def convert_dir(cap: Path, ini_ip: str, tgt_ip: str) -> dict[str, int]:
    """Write events-initiator.jsonl and events-target.jsonl from cap/probes.txt; returns the
    number of events per host (nothing is written when the capture ran without probes)."""
    probes = cap / "probes.txt"
    if not probes.exists():
        return {}
    # bpf-clock.json (clock.json in captures before the merger took that name).
    pair = cap / "bpf-clock.json"
    clock = json.loads((pair if pair.exists() else cap / "clock.json").read_text())
    offset = int(clock["realtime_minus_monotonic_ns"])
    block_size = 512
    tb = cap / "testbed.json"
    if tb.exists():
        block_size = int(json.loads(tb.read_text()).get("logical_block_size") or 512)
    counts = {"initiator": 0, "target": 0}
    outs = {h: open(cap / f"events-{h}.jsonl", "w") for h in counts}
    try:
        with open(probes, errors="replace") as src:
            for line in src:
                try:
                    rec = parse_line(line, offset, ini_ip, tgt_ip, block_size)
                except (KeyError, ValueError):
                    continue   # a line cut by the stop signal
                if rec is None:
                    continue
                full = {c: rec.get(c) for c in COLUMNS}
                outs[rec["host"]].write(json.dumps(full) + "\n")
                counts[rec["host"]] += 1
    finally:
        for f in outs.values():
            f.close()
    # One kernel, one clock: both hosts' events are on it already.
    (cap / "clock-vm.json").write_text(json.dumps(
        {"offset_ns": 0, "bound_ns": 0, "samples": 0, "method": "same-kernel (VM testbed)",
         "realtime_minus_monotonic_ns": offset, "conversion_bound_ns": clock.get("bound_ns")}))
    return counts
