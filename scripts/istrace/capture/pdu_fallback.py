"""Minimal iSCSI PDU tables straight from a pcap, for when the C decoder is not built.

Only what the plots need (docs/schema.md §2/§3 columns: pdu, ts_ns, conn, dir, tcp_seq,
opcode, opcode_name, immediate, final, ahs_len, dsl, itt, cmd, edtl, cdb_opcode, cdb_name, lba,
xfer_blocks, xfer_bytes, buffer_offset, status, resp_time_us; commands with issue / data /
response times, bytes and outstanding). Each direction's stream is reassembled in sequence
order (retransmitted bytes once); a gap in the capture ends that direction's decode (noted).
Digests are honoured when the login text negotiated them (CRC32C, 4 bytes each, unchecked).
The C decoder (`istrace decode`) is the real thing: full BHS fields, sense data, digest checks.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pandas as pd
from istrace.track.pcap_tcp import conn_and_dir, read_segments

OPCODES = {0x00: "NOP-Out", 0x01: "SCSI Command", 0x02: "SCSI Task Management Request",
           0x03: "Login Request", 0x04: "Text Request", 0x05: "SCSI Data-Out",
           0x06: "Logout Request", 0x10: "SNACK Request", 0x20: "NOP-In",
           0x21: "SCSI Response", 0x22: "SCSI Task Management Response",
           0x23: "Login Response", 0x24: "Text Response", 0x25: "SCSI Data-In",
           0x26: "Logout Response", 0x31: "R2T", 0x32: "Asynchronous Message", 0x3F: "Reject"}
CDBS = {0x00: "TEST UNIT READY", 0x12: "INQUIRY", 0x25: "READ CAPACITY(10)", 0x28: "READ(10)",
        0x2A: "WRITE(10)", 0x88: "READ(16)", 0x8A: "WRITE(16)", 0x9E: "SERVICE ACTION IN(16)",
        0xA0: "REPORT LUNS", 0x08: "READ(6)", 0x0A: "WRITE(6)", 0x1A: "MODE SENSE(6)",
        0x5A: "MODE SENSE(10)", 0x35: "SYNCHRONIZE CACHE(10)"}
BLOCK = 512


def _stream(segs: pd.DataFrame) -> tuple[bytes, np.ndarray, np.ndarray, int, str]:
    """Contiguous bytes of one direction from its first payload byte, with per-byte-run times.

    Returns (bytes, run_start_offsets, run_times, base_seq, note)."""
    x = segs[segs["len"] > 0]
    if x.empty:
        return b"", np.zeros(0, np.int64), np.zeros(0, np.int64), 0, ""
    base = int(x["seq"].iloc[0])
    rel = ((x["seq"].to_numpy(np.int64) - base + (1 << 31)) % (1 << 32)) - (1 << 31)
    rel = rel + np.cumsum(np.diff(rel, prepend=rel[:1]) < -(1 << 31)) * (1 << 32)
    order = np.argsort(rel, kind="stable")
    buf = bytearray()
    starts, times = [], []
    note = ""
    for i in order:
        off, data = int(rel[i]), x["data"].iloc[i]
        ts = int(x["ts_ns"].iloc[i])
        end = off + len(data)
        if end <= len(buf):
            continue  # retransmission or duplicate of bytes we have
        if off > len(buf):
            note = f"capture gap at stream offset {len(buf)}: decode stopped there"
            break
        if len(data) < int(x["len"].iloc[i]):
            note = "snap length cut payloads: decode stopped at the first cut segment"
            buf += data[len(buf) - off:]
            starts.append(len(buf))
            times.append(ts)
            break
        starts.append(len(buf))
        times.append(ts)
        buf += data[len(buf) - off:]
    return bytes(buf), np.asarray(starts, np.int64), np.asarray(times, np.int64), base, note


def _digests(kv_text: str) -> tuple[int, int]:
    h = 4 if "HeaderDigest=CRC32C" in kv_text else 0
    d = 4 if "DataDigest=CRC32C" in kv_text else 0
    return h, d


def decode_pcap(path: str | Path) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(pdus, commands, notes) from one capture point's pcap."""
    segs = conn_and_dir(read_segments(path, with_data=True))
    rows: list[dict] = []
    notes: list[str] = []
    for conn, c in segs.groupby("conn", sort=False):
        per_dir = {}
        for d in ("i2t", "t2i"):
            per_dir[d] = _stream(c[c["dir"] == d])
            if per_dir[d][4]:
                notes.append(f"{conn} {d}: {per_dir[d][4]}")
        hd = dd = 0
        for d in ("i2t", "t2i"):
            buf, starts, times, base, _ = per_dir[d]
            off = 0
            while off + 48 <= len(buf):
                bhs = buf[off:off + 48]
                op = bhs[0] & 0x3F
                ahs = bhs[4] * 4
                dsl = int.from_bytes(bhs[5:8], "big")
                total = 48 + ahs + hd + ((dsl + 3) & ~3) + (dd if dsl else 0)
                if op not in OPCODES:
                    notes.append(f"{conn} {d}: unknown opcode 0x{op:02x} at offset {off}: stop")
                    break
                hdr_last = off + 47
                k = int(np.searchsorted(starts, hdr_last, side="right")) - 1
                ts = int(times[max(k, 0)])
                r = {"ts_ns": ts, "conn": conn, "dir": d,
                     "tcp_seq": (base + off) % (1 << 32), "opcode": op,
                     "opcode_name": OPCODES[op], "immediate": (bhs[0] >> 6) & 1,
                     "final": bhs[1] >> 7, "flags": f"0x{bhs[1]:02x}", "ahs_len": ahs,
                     "dsl": dsl, "itt": f"0x{struct.unpack_from('>I', bhs, 16)[0]:08x}"}
                if op == 0x01:
                    r["edtl"] = struct.unpack_from(">I", bhs, 20)[0]
                    cdb = bhs[32:48]
                    r["cdb_opcode"] = cdb[0]
                    r["cdb_name"] = CDBS.get(cdb[0], f"0x{cdb[0]:02x}")
                    if cdb[0] in (0x28, 0x2A):
                        r["lba"] = struct.unpack_from(">I", cdb, 2)[0]
                        r["xfer_blocks"] = struct.unpack_from(">H", cdb, 7)[0]
                    elif cdb[0] in (0x88, 0x8A):
                        r["lba"] = struct.unpack_from(">Q", cdb, 2)[0]
                        r["xfer_blocks"] = struct.unpack_from(">I", cdb, 10)[0]
                    if "xfer_blocks" in r:
                        r["xfer_bytes"] = r["xfer_blocks"] * BLOCK
                elif op in (0x25, 0x05, 0x31):
                    r["buffer_offset"] = struct.unpack_from(">I", bhs, 40)[0]
                    if op == 0x31:
                        r["desired_len"] = struct.unpack_from(">I", bhs, 44)[0]
                    if op == 0x25 and bhs[1] & 0x01:
                        r["status"] = bhs[3]
                elif op == 0x21:
                    r["status"] = bhs[3]
                elif op in (0x03, 0x23) and off + total <= len(buf):
                    text = buf[off + 48 + ahs:off + 48 + ahs + dsl].decode("ascii", "replace")
                    r["kv"] = ";".join(t for t in text.split("\0") if t)
                    if op == 0x23 and bhs[1] & 0x80 and (bhs[1] & 0x03) == 3:
                        # Final login response switching to full feature: digests apply now.
                        hd, dd = _digests(r["kv"])
                rows.append(r)
                off += total
    pdus = pd.DataFrame(rows)
    if pdus.empty:
        return pdus, pd.DataFrame(), notes
    pdus = pdus.sort_values("ts_ns", kind="stable").reset_index(drop=True)
    pdus.insert(0, "pdu", np.arange(len(pdus)))
    return _tie_commands(pdus), _commands(pdus), notes


def _tie_commands(p: pd.DataFrame) -> pd.DataFrame:
    """Give every PDU the index of its command: (conn, ITT) of the latest SCSI Command."""
    cmd = np.full(len(p), -1, np.int64)
    open_: dict[tuple[str, str], int] = {}
    n = 0
    for i, (conn, itt, op) in enumerate(zip(p["conn"], p["itt"], p["opcode"], strict=True)):
        if op == 0x01:
            open_[(conn, itt)] = n
            cmd[i] = n
            n += 1
        elif op in (0x05, 0x21, 0x25, 0x31) and (conn, itt) in open_:
            cmd[i] = open_[(conn, itt)]
    p = p.assign(cmd=pd.array(np.where(cmd >= 0, cmd, 0), dtype="Int64"))
    p.loc[cmd < 0, "cmd"] = pd.NA
    return p


def _commands(p: pd.DataFrame) -> pd.DataFrame:
    p = _tie_commands(p) if "cmd" not in p.columns else p
    c = p[p["opcode"] == 0x01].copy()
    if c.empty:
        return pd.DataFrame()
    data = p[p["opcode"].isin([0x25, 0x05]) & p["cmd"].notna()]
    resp = p[(p["opcode"] == 0x21) | ((p["opcode"] == 0x25) & p.get(
        "status", pd.Series(np.nan, p.index)).notna())]
    resp = resp[resp["cmd"].notna()].groupby("cmd")["ts_ns"].min()
    g = data.groupby("cmd")
    out = pd.DataFrame({"cmd": c["cmd"].astype(np.int64).to_numpy(), "conn": c["conn"].to_numpy(),
                        "itt": c["itt"].to_numpy()})
    for col in ("cdb_opcode", "cdb_name", "lba", "xfer_blocks", "xfer_bytes", "edtl"):
        out[col] = c[col].to_numpy() if col in c.columns else np.nan
    out["direction"] = np.where(c["flags"].apply(lambda f: int(f, 16) & 0x40).to_numpy() > 0,
                                "read", np.where(c["flags"].apply(
                                    lambda f: int(f, 16) & 0x20).to_numpy() > 0, "write",
                                    "none"))
    out["issue_ts_ns"] = c["ts_ns"].to_numpy()
    out["first_data_ts_ns"] = g["ts_ns"].min().reindex(out["cmd"]).to_numpy()
    out["last_data_ts_ns"] = g["ts_ns"].max().reindex(out["cmd"]).to_numpy()
    out["resp_ts_ns"] = resp.reindex(out["cmd"]).to_numpy()
    out["resp_time_us"] = (out["resp_ts_ns"] - out["issue_ts_ns"]) / 1000
    din = data[data["opcode"] == 0x25].groupby("cmd")["dsl"].sum()
    out["bytes_in"] = din.reindex(out["cmd"]).fillna(0).to_numpy()
    out["data_pdus"] = g.size().reindex(out["cmd"]).fillna(0).astype(int).to_numpy()
    for col in ("first_data_ts_ns", "last_data_ts_ns", "resp_ts_ns"):
        out[col] = pd.array(out[col], dtype="Int64")
    # Outstanding at issue (itself included), per connection.
    outstanding = np.zeros(len(out), np.int64)
    for _, g in out.groupby("conn", sort=False):
        iss = g["issue_ts_ns"].to_numpy(np.int64)
        done = np.sort(g["resp_ts_ns"].dropna().to_numpy(np.int64))
        answered = np.searchsorted(done, iss, side="right")
        outstanding[g.index.to_numpy()] = np.arange(len(g)) - answered + 1
    out["outstanding"] = outstanding
    return out


def decode_to_dir(pcap: Path, out: Path) -> list[str]:
    pdus, cmds, notes = decode_pcap(pcap)
    out.mkdir(parents=True, exist_ok=True)
    pdus.to_csv(out / "pdus.csv", index=False)
    cmds.to_csv(out / "commands.csv", index=False)
    (out / "FALLBACK").write_text("decoded by istrace.capture.pdu_fallback (C decoder absent)\n"
                                  + "".join(n + "\n" for n in notes))
    return notes
