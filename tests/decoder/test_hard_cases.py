"""Hard cases on made-up captures: every decoded field is checked against what was written."""

from __future__ import annotations

import gzip
import random
import re
import select
import subprocess
from pathlib import Path

import decoder_cases as dc
import pytest
from dechelp import Decoded, decode, decode_json, mismatches, norm, notes, row_at, run_decoder
from istrace.synth import pcapwriter as pw

T0 = 1_700_000_000_000_000_000
STEP = 10_000


# ---------------------------------------------------------------- helpers
def write(tmp: Path, name: str, flow: pw.Flow, segs: list[pw.Segment], *,
          linktype: int = pw.LINKTYPE_ETHERNET, vlan: int | None = None, qinq: int | None = None,
          fmt: str = "pcap", gz: bool = False, snaplen: int = 262144) -> Path:
    pk = pw.packets_of(flow, segs, linktype, t0_ns=T0, step_ns=STEP, vlan=vlan, qinq=qinq)
    return Path(pw.write_capture(str(tmp / name), pk, linktype, fmt=fmt, gz=gz, snaplen=snaplen))


def header_ts(segs: list[pw.Segment], p: dc.Pdu, hlen: int = 48) -> int:
    """Capture time of the first segment that carries the PDU's last header byte."""
    last = p.seq + hlen - 1
    for i, s in enumerate(segs):
        if s.dir == p.dir and s.payload and s.seq <= last < s.seq + len(s.payload):
            return T0 + i * STEP
    raise AssertionError("header byte not in any segment")


def check_all(res: Decoded, conv: dc.Conversation, segs: list[pw.Segment] | None = None,
              only: list[dc.Pdu] | None = None, exact_count: bool = True) -> None:
    """Every expected PDU is there with exactly the expected fields (and ts when segs given)."""
    want = conv.pdus if only is None else only
    problems = []
    rows: dict[tuple[str, int], list[dict[str, str]]] = {}
    for r in res.pdus.to_dict("records"):
        rows.setdefault((r["dir"], int(r["tcp_seq"])), []).append(r)
    for p in want:
        hits = rows.get((p.dir, p.seq), [])
        assert len(hits) <= 1, f"{len(hits)} rows for {p.dir} seq {p.seq}"
        row = hits[0] if hits else None
        if row is None:
            problems.append(f"missing PDU {p.exp} at {p.dir} seq {p.seq}")
            continue
        bad = mismatches(row, p.exp)
        if segs is not None:
            hlen = 52 if conv.digests.header and p.exp["opcode"] not in (0x03, 0x23) else 48
            if norm("ts_ns", row["ts_ns"]) != header_ts(segs, p, hlen):
                bad.append(f"ts_ns {row['ts_ns']} want {header_ts(segs, p, hlen)}")
        if row["conn"] != conv.flow.conn:
            bad.append(f"conn {row['conn']} want {conv.flow.conn}")
        if bad:
            problems.append(f"PDU at {p.dir} seq {p.seq} ({p.exp.get('opcode')}): "
                            + "; ".join(bad))
    if exact_count:
        problems += [] if len(res.pdus) == len(want) else [
            f"{len(res.pdus)} PDU rows, want {len(want)}"]
    assert not problems, "\n".join(problems) + "\nstderr: " + res.stderr


def check_no_wrong_rows(res: Decoded, conv: dc.Conversation) -> None:
    """Whatever the decoder emitted lies exactly on a real PDU and reports its true fields."""
    truth = {(p.dir, p.seq): p for p in conv.pdus}
    for row in res.pdus.to_dict("records"):
        key = (row["dir"], int(row["tcp_seq"]))
        assert key in truth, f"row at a non-PDU position: {row}"
        p = truth[key]
        strict = {k: v for k, v in p.exp.items() if k not in ("hdigest", "ddigest", "kv")}
        assert not mismatches(row, strict), (row, mismatches(row, strict))
        if "kv" in p.exp and row["kv"] != p.exp["kv"]:
            # Cut by snaplen: whole pairs only, a prefix of the real list, and said so.
            got, want = row["kv"].split(";"), str(p.exp["kv"]).split(";")
            assert got == want[:len(got)] and "truncated" in row["note"], (row["kv"], row["note"])


def by_name(conv: dc.Conversation, opcode: int, itt: int, **more: object) -> dc.Pdu:
    for p in conv.pdus:
        if p.exp["opcode"] == opcode and p.exp["itt"] == itt and all(
                p.exp.get(k) == v for k, v in more.items()):
            return p
    raise KeyError((opcode, itt, more))


def basic_capture(tmp: Path, name: str = "basic.pcap", **kw: object
                  ) -> tuple[dc.Conversation, list[pw.Segment], Path]:
    conv = dc.basic()
    segs = conv.segments()
    return conv, segs, write(tmp, name, conv.flow, segs, **kw)


# ---------------------------------------------------------------- the reference conversation
def test_basic_every_field(dec: Path, tmp: Path) -> None:
    conv, segs, path = basic_capture(tmp)
    res = decode(dec, path)
    assert res.rc == 0, res.stderr
    check_all(res, conv, segs)
    pd_ = res.pdus
    assert pd_["pdu"].tolist() == [str(i) for i in range(len(pd_))]
    names = dict(zip(pd_["opcode"].astype(int), pd_["opcode_name"], strict=False))
    assert names[0x01] == "SCSI Command" and names[0x25] == "SCSI Data-In"
    assert names[0x21] == "SCSI Response" and names[0x31] == "R2T"
    assert names[0x03] == "Login Request" and names[0x23] == "Login Response"
    # Sense names are present for the two CHECK CONDITIONs.
    rsp = row_at(pd_, "t2i", by_name(conv, 0x21, 4).seq)
    assert rsp is not None and rsp["status_name"] and rsp["sense_text"]
    # Response time on the response PDU (READ(10) command at segment i, response later).
    rd = row_at(pd_, "t2i", by_name(conv, 0x21, 2).seq)
    assert rd is not None and norm("resp_time_us", rd["resp_time_us"]) != ""


def test_basic_commands_table(dec: Path, tmp: Path) -> None:
    conv, _segs, path = basic_capture(tmp)
    res = decode(dec, path)
    cmds = res.commands
    assert len(cmds) == len(dc.BASIC_COMMANDS), cmds.to_string()
    for row in cmds.to_dict("records"):
        exp = dc.BASIC_COMMANDS[int(row["itt"], 0)]
        assert not mismatches(row, exp), (row["itt"], mismatches(row, exp))
        assert row["conn"] == conv.flow.conn
    rd = cmds[cmds["itt"].map(lambda x: int(x, 0)) == 2].iloc[0]
    # Issue at the READ(10) command segment, response at the SCSI Response segment.
    assert int(rd["resp_ts_ns"]) > int(rd["first_data_ts_ns"]) > int(rd["issue_ts_ns"])
    assert float(rd["resp_time_us"]) == pytest.approx(
        (int(rd["resp_ts_ns"]) - int(rd["issue_ts_ns"])) / 1000, abs=1)
    # PDUs point at their command.
    pdus = res.pdus
    din = pdus[pdus["opcode"].astype(int) == 0x25]
    assert set(din["cmd"]) <= set(cmds["cmd"])


def test_basic_connection_table(dec: Path, tmp: Path) -> None:
    conv, _segs, path = basic_capture(tmp)
    res = decode(dec, path)
    assert len(res.connections) == 1
    c = res.connections.iloc[0].to_dict()
    want = {"conn": conv.flow.conn, "initiator_name": "iqn.2026-01.test:ini",
            "target_name": "iqn.2026-01.test:tgt", "session_type": "Normal",
            "HeaderDigest": "None", "DataDigest": "None", "mrdsl_i2t": 65536, "mrdsl_t2i": 8192,
            "MaxBurstLength": 262144, "FirstBurstLength": 65536, "ImmediateData": "Yes",
            "InitialR2T": "Yes", "MaxOutstandingR2T": 1, "block_size": dc.BLOCK,
            "pdus": len(conv.pdus)}
    assert not mismatches(c, want), mismatches(c, want)


def test_json_lines_match_csv(dec: Path, tmp: Path) -> None:
    _conv, _segs, path = basic_capture(tmp)
    res = decode(dec, path)
    rows = decode_json(dec, path)
    assert len(rows) == len(res.pdus)
    for j, c in zip(rows, res.pdus.to_dict("records"), strict=True):
        for k in ("opcode", "itt", "tcp_seq", "cmdsn", "statsn", "lba", "xfer_bytes", "status",
                  "dsl", "buffer_offset", "ts_ns"):
            assert norm(k, j.get(k)) == norm(k, c[k]), (k, j.get(k), c[k])


# ---------------------------------------------------------------- segmentation
def test_one_pdu_over_three_segments(dec: Path, tmp: Path) -> None:
    """Every PDU (headers included) is cut into three segments."""
    conv = dc.basic()
    conv.assign_seqs()
    segs = conv.flow.handshake()
    for p in conv.pdus:
        n = len(p.data)
        cuts = [0, n // 3, 2 * n // 3, n]
        for a, b in zip(cuts, cuts[1:], strict=False):
            segs += conv.flow.send(p.dir, p.data[a:b], seg=1 << 20)
    segs += conv.flow.fin()
    res = decode(dec, write(tmp, "three.pcap", conv.flow, segs))
    assert res.rc == 0, res.stderr
    check_all(res, conv, segs)


def test_five_pdus_in_one_segment(dec: Path, tmp: Path) -> None:
    """Runs of same-direction PDUs share one segment: 5 TURs and their 5 responses, and the
    4 Data-In + SCSI Response of the READ(10) (one 40 KiB segment)."""
    conv = dc.basic()
    # Append a pipelined burst of 5 TEST UNIT READY commands and 5 GOOD responses.
    conv.pdus = conv.pdus[:-2]  # drop logout, add burst, re-add logout later
    for k in range(5):
        conv.add("i2t", pw.scsi_cmd(0x100 + k, pw.cdb_tur(), cmdsn=6 + k, expstatsn=6),
                 opcode=0x01, itt=0x100 + k, cmdsn=6 + k, cdb_opcode=0)
    for k in range(5):
        conv.add("t2i", pw.scsi_rsp(0x100 + k, statsn=6 + k, expcmdsn=7 + k, maxcmdsn=40),
                 opcode=0x21, itt=0x100 + k, statsn=6 + k, status=0)
    conv.assign_seqs()
    segs = conv.flow.handshake()
    run: list[dc.Pdu] = []
    for p in [*conv.pdus, None]:
        if run and (p is None or p.dir != run[0].dir):
            segs += conv.flow.send(run[0].dir, b"".join(x.data for x in run), seg=1 << 20)
            run = []
        if p is not None:
            run.append(p)
    segs += conv.flow.fin()
    burst = [s for s in segs if len(s.payload) == 5 * 48]
    assert len(burst) == 2  # the case really has 5 PDUs in one segment, both directions
    res = decode(dec, write(tmp, "five.pcap", conv.flow, segs))
    assert res.rc == 0, res.stderr
    check_all(res, conv, segs)
    # The five share one capture time.
    tur = res.pdus[res.pdus["itt"].map(lambda x: int(x, 0)).between(0x100, 0x104)]
    assert len(tur) == 10 and tur.groupby("dir")["ts_ns"].nunique().tolist() == [1, 1]


# ---------------------------------------------------------------- TCP disorder
def test_retransmitted_segments(dec: Path, tmp: Path) -> None:
    """Every 5th payload segment is sent twice: once right after, once 3 segments later."""
    conv = dc.basic()
    segs = conv.segments()
    out: list[pw.Segment] = []
    pending: list[tuple[int, pw.Segment]] = []
    for i, s in enumerate(segs):
        out.append(s)
        if s.payload and i % 5 == 0:
            out.append(pw.Segment(s.dir, s.seq, s.ack, s.flags, s.payload))
            pending.append((i + 3, s))
        for due, r in [x for x in pending if x[0] == i]:
            out.append(pw.Segment(r.dir, r.seq, r.ack, r.flags, r.payload))
            pending.remove((due, r))
    assert len(out) > len(segs) + 5
    res = decode(dec, write(tmp, "retx.pcap", conv.flow, out))
    assert res.rc == 0, res.stderr
    check_all(res, conv, out)


def test_reordered_segments(dec: Path, tmp: Path) -> None:
    """Neighbouring payload segments of the same direction swapped (Data-In bodies, and the
    segment holding a Data-In header with the one before it)."""
    conv = dc.basic()
    segs = conv.segments()
    swaps = 0
    i = 4
    while i + 1 < len(segs):
        a, b = segs[i], segs[i + 1]
        if a.payload and b.payload and a.dir == b.dir == "t2i" and i % 3 == 0:
            segs[i], segs[i + 1] = b, a
            swaps += 1
            i += 2
        else:
            i += 1
    assert swaps >= 4
    res = decode(dec, write(tmp, "reorder.pcap", conv.flow, segs))
    assert res.rc == 0, res.stderr
    check_all(res, conv)


def test_overlapping_segments_first_copy_wins(dec: Path, tmp: Path) -> None:
    """A segment overlapping two neighbours (half of each) is sent in between; once with the
    same bytes and once with different bytes covering a Data-In header: the first copy wins."""
    conv = dc.basic()
    segs = conv.segments()
    din2 = by_name(conv, 0x25, 2, datasn=2)
    out: list[pw.Segment] = []
    done = 0
    for s in segs:
        out.append(s)
        if s.dir == "t2i" and len(s.payload) == 1448 and done < 3:
            nxt = (s.seq + 1448) & 0xFFFFFFFF
            follow = [x for x in segs if x.dir == "t2i" and x.seq == nxt and x.payload]
            if follow:
                body = s.payload[724:] + follow[0].payload[:724]
                out.append(pw.Segment("t2i", s.seq + 724, s.ack, s.flags, body))
                done += 1
        if s.dir == "t2i" and s.seq == din2.seq:
            # A lying copy of din2's header, same sequence range, after the real one.
            fake = bytearray(s.payload)
            fake[16:20] = b"\x99\x99\x99\x99"  # ITT
            fake[36:40] = b"\x00\x00\x7f\x00"  # DataSN
            out.append(pw.Segment("t2i", s.seq, s.ack, s.flags, bytes(fake)))
    assert done == 3
    res = decode(dec, write(tmp, "overlap.pcap", conv.flow, out))
    assert res.rc == 0, res.stderr
    check_all(res, conv)


# ---------------------------------------------------------------- starting mid-stream
def test_capture_starts_mid_pdu(dec: Path, tmp: Path) -> None:
    """No handshake, no login: the capture begins inside the second Data-In's payload."""
    conv = dc.basic()
    segs = conv.segments()
    din1 = by_name(conv, 0x25, 2, datasn=1)
    start = next(i for i, s in enumerate(segs)
                 if s.dir == "t2i" and s.seq > din1.seq + 2000 and s.payload)
    kept = segs[start:]
    # READ CAPACITY is not in the capture: tell the decoder the block size.
    res = decode(dec, write(tmp, "mid.pcap", conv.flow, kept), "--block-size", str(dc.BLOCK))
    assert res.rc == 0, res.stderr
    first_seen = {d: min(s.seq for s in kept if s.dir == d and s.payload) for d in ("i2t", "t2i")}
    later = [p for p in conv.pdus if p.seq >= first_seen[p.dir]]
    check_all(res, conv, only=later)
    assert "resync" in notes(res.pdus) + notes(res.connections, "notes"), res.pdus.to_string()
    # The t2i side really did resync: its first row says so.
    t2i = res.pdus[res.pdus["dir"] == "t2i"]
    assert "resync" in t2i.iloc[0]["note"]


def test_capture_starts_mid_connection_on_pdu_boundary(dec: Path, tmp: Path) -> None:
    conv = dc.basic()
    segs = conv.segments()
    rc_cmd = by_name(conv, 0x01, 2)  # the READ(10) command
    start = next(i for i, s in enumerate(segs) if s.dir == "i2t" and s.seq == rc_cmd.seq)
    kept = segs[start:]
    res = decode(dec, write(tmp, "midc.pcap", conv.flow, kept, ))
    assert res.rc == 0, res.stderr
    # No READ CAPACITY seen: the block size falls back to 512 unless --block-size says 4096.
    first_seen = {d: min(s.seq for s in kept if s.dir == d and s.payload) for d in ("i2t", "t2i")}
    later = [p for p in conv.pdus if p.seq >= first_seen[p.dir]]
    res2 = decode(dec, write(tmp, "midc2.pcap", conv.flow, kept), "--block-size", "4096")
    check_all(res2, conv, only=later)
    r512 = row_at(res.pdus, "i2t", rc_cmd.seq)
    assert r512 is not None and norm("xfer_bytes", r512["xfer_bytes"]) == 8 * 512


def test_capture_starts_mid_connection_with_the_first_reply_reordered(dec: Path,
                                                                       tmp: Path) -> None:
    """A capture of a logged-in session (no handshake) whose first reply segments arrive
    out of order: the segment after the first one comes first. The peer's ACK says where the
    reply stream stood (the initiator had acknowledged nothing past the reply's first byte),
    so the stream starts there and the late first segment is decoded, not dropped as old.
    Seen on the VM testbed: the first READ's Data-In lost, so its command never ended and
    one command too many looked outstanding for the whole capture."""
    conv = dc.basic()
    segs = conv.segments()
    rc_cmd = by_name(conv, 0x01, 2)  # the READ(10) command
    start = next(i for i, s in enumerate(segs) if s.dir == "i2t" and s.seq == rc_cmd.seq)
    kept = segs[start:]
    first = next(i for i, s in enumerate(kept) if s.dir == "t2i" and s.payload)
    assert kept[first + 1].dir == "t2i" and kept[first + 1].payload
    kept[first], kept[first + 1] = kept[first + 1], kept[first]
    res = decode(dec, write(tmp, "midr.pcap", conv.flow, kept), "--block-size", "4096")
    assert res.rc == 0, res.stderr
    first_seen = {d: min(s.seq for s in kept if s.dir == d and s.payload) for d in ("i2t", "t2i")}
    later = [p for p in conv.pdus if p.seq >= first_seen[p.dir]]
    check_all(res, conv, only=later)
    assert res.commands["resp_ts_ns"].notna().all(), res.commands.to_string()


# ---------------------------------------------------------------- digests
def test_digests_ok(dec: Path, tmp: Path) -> None:
    conv = dc.basic(digests=True)
    segs = conv.segments()
    res = decode(dec, write(tmp, "dig.pcap", conv.flow, segs))
    assert res.rc == 0, res.stderr
    check_all(res, conv, segs)
    ffp = res.pdus[~res.pdus["opcode"].astype(int).isin([0x03, 0x23])]
    assert set(ffp["hdigest"]) == {"ok"}
    assert set(res.pdus[res.pdus["opcode"].astype(int).isin([0x03, 0x23])]["hdigest"]) == {""}
    c = res.connections.iloc[0]
    assert c["HeaderDigest"] == "CRC32C" and c["DataDigest"] == "CRC32C"


@pytest.mark.parametrize("where", ["hdigest", "ddigest"])
def test_bad_digest_reported(dec: Path, tmp: Path, where: str) -> None:
    if where == "hdigest":
        conv = dc.basic(digests=True, bad_hdigest_at="read_cmd")
        victim = by_name(conv, 0x01, 2)
    else:
        conv = dc.basic(digests=True, bad_ddigest_at="read_din2")
        victim = by_name(conv, 0x25, 2, datasn=2)
    segs = conv.segments()
    res = decode(dec, write(tmp, "bad.pcap", conv.flow, segs))
    assert res.rc == 0, res.stderr
    row = row_at(res.pdus, victim.dir, victim.seq)
    assert row is not None and row[where] == "bad", row
    others = [p for p in conv.pdus if p is not victim]
    check_all(res, conv, only=others, exact_count=False)
    assert (res.pdus[where] == "bad").sum() == 1


# ---------------------------------------------------------------- damaged captures
def test_snaplen_truncated_every_packet(dec: Path, tmp: Path) -> None:
    """snaplen 200: small PDUs whole, data bodies cut. Nothing decoded wrong, truncation said."""
    conv = dc.basic()
    segs = conv.segments()
    for s in segs:
        s.caplen = 200
    res = decode(dec, write(tmp, "snap.pcap", conv.flow, segs, snaplen=200))
    assert res.rc == 0, res.stderr
    check_no_wrong_rows(res, conv)
    assert "truncated" in notes(res.pdus) + notes(res.connections, "notes") + res.stderr
    # The SCSI commands sit whole in their 102-byte frames and must decode.
    cmds = [p for p in conv.pdus if p.exp["opcode"] == 0x01]
    check_all(res, conv, only=cmds, exact_count=False)


def test_snaplen_truncated_one_data_packet(dec: Path, tmp: Path) -> None:
    conv = dc.basic()
    segs = conv.segments()
    din1 = by_name(conv, 0x25, 2, datasn=1)
    victim = next(s for s in segs if s.dir == "t2i" and s.seq == din1.seq + 1448)
    victim.caplen = 100
    res = decode(dec, write(tmp, "snap1.pcap", conv.flow, segs))
    assert res.rc == 0, res.stderr
    check_no_wrong_rows(res, conv)
    assert "truncated" in notes(res.pdus) + notes(res.connections, "notes")
    after = [p for p in conv.pdus if p.dir == "i2t" or p.seq > din1.seq or p.seq < din1.seq]
    check_all(res, conv, only=[p for p in after if p is not din1], exact_count=False)


def test_capture_gap(dec: Path, tmp: Path) -> None:
    """Two t2i segments never captured: one inside din1's body, one holding din3's header."""
    conv = dc.basic()
    segs = conv.segments()
    din1 = by_name(conv, 0x25, 2, datasn=1)
    din3 = by_name(conv, 0x25, 2, datasn=3)
    lost = {(din1.seq + 2 * 1448), din3.seq}
    kept = [s for s in segs if not (s.dir == "t2i" and s.seq in lost)]
    assert len(kept) == len(segs) - 2
    res = decode(dec, write(tmp, "gap.pcap", conv.flow, kept))
    assert res.rc == 0, res.stderr
    check_no_wrong_rows(res, conv)
    assert "gap" in notes(res.pdus) + notes(res.connections, "notes"), res.pdus.to_string()
    must = [p for p in conv.pdus if p is not din3 and p is not din1]
    check_all(res, conv, only=must, exact_count=False)


def test_truncated_file(dec: Path, tmp: Path) -> None:
    conv, segs, path = basic_capture(tmp)
    img = path.read_bytes()
    cut = tmp / "cut.pcap"
    cut.write_bytes(img[:int(len(img) * 0.6)])  # mid-packet
    res = decode(dec, cut)
    assert res.rc in (0, 1), res.stderr
    assert "trunc" in res.stderr.lower(), res.stderr
    assert len(res.stderr.strip().splitlines()) <= 3
    whole = {(s.dir, s.seq) for s in segs[:len(segs) // 2]}
    before = [p for p in conv.pdus if (p.dir, p.seq) in whole]
    assert len(before) >= 5
    check_all(res, conv, only=before, exact_count=False)
    check_no_wrong_rows(res, conv)


@pytest.mark.parametrize("content", [b"", b"hello, this is not a capture\n" * 20,
                                     b"\xd4\xc3\xb2\xa1" + b"\0" * 10, gzip.compress(b"text")])
def test_not_a_capture(dec: Path, tmp: Path, content: bytes) -> None:
    p = tmp / "not.pcap"
    p.write_bytes(content)
    res = decode(dec, p)
    assert res.rc == 2, (res.rc, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) < 300, res.stderr


def test_unreadable_file(dec: Path, tmp: Path) -> None:
    res = decode(dec, tmp / "does-not-exist.pcap")
    assert res.rc == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_no_iscsi(dec: Path, tmp: Path) -> None:
    flow = pw.Flow(tgt_port=80)
    segs = flow.handshake() + flow.send("i2t", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n") + \
        flow.send("t2i", b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + b"x" * 5000)
    res = decode(dec, write(tmp, "http.pcap", flow, segs))
    assert res.rc == 3, (res.rc, res.stderr)
    assert len(res.stderr.strip().splitlines()) == 1


def test_garbage_payload_on_3260(dec: Path, tmp: Path) -> None:
    """Random bytes both ways on port 3260: no crash, no hang; rows (if any) are not mixed
    with a real conversation that follows on a second connection."""
    rng = random.Random(4)
    flow = pw.Flow(ini_port=40001)
    segs = flow.handshake()
    for _ in range(60):
        d = rng.choice(["i2t", "t2i"])
        segs += flow.send(d, rng.randbytes(rng.randint(1, 1448)))
    conv = dc.basic()
    segs2 = conv.segments()
    pk = pw.packets_of(flow, segs, t0_ns=T0) + pw.packets_of(conv.flow, segs2, t0_ns=T0 + 10**9)
    path = Path(pw.write_capture(str(tmp / "garbage.pcap"), pk))
    res = decode(dec, path)
    assert res.rc == 0, res.stderr
    good = res.pdus[res.pdus["conn"] == conv.flow.conn]
    check_all(Decoded(res.rc, res.stderr, good, res.commands, res.connections, res.outdir), conv)
    only_garbage = Path(pw.write_capture(str(tmp / "g2.pcap"), pw.packets_of(flow, segs)))
    res2 = decode(dec, only_garbage)
    assert res2.rc in (0, 3), res2.stderr


# ---------------------------------------------------------------- file formats and links
@pytest.mark.parametrize("fmt,gz", [("pcap", True), ("pcapng", False), ("pcapng", True)])
def test_formats(dec: Path, tmp: Path, fmt: str, gz: bool) -> None:
    conv = dc.basic()
    segs = conv.segments()
    res = decode(dec, write(tmp, f"f.{fmt}{'.gz' if gz else ''}", conv.flow, segs, fmt=fmt,
                            gz=gz))
    assert res.rc == 0, res.stderr
    check_all(res, conv, segs)


def test_nanosecond_pcap(dec: Path, tmp: Path) -> None:
    conv = dc.basic()
    segs = conv.segments()
    for i, s in enumerate(segs):
        s.ts_ns = T0 + i * STEP + 123  # not representable in microseconds
    pk = pw.packets_of(conv.flow, segs)
    path = tmp / "ns.pcap"
    path.write_bytes(pw.pcap_bytes(pk, nanosecond=True))
    res = decode(dec, path)
    assert res.rc == 0, res.stderr
    for p in conv.pdus:
        row = row_at(res.pdus, p.dir, p.seq)
        assert row is not None and int(row["ts_ns"]) == header_ts(segs, p) + 123


LINKS = [
    ("eth-vlan", pw.LINKTYPE_ETHERNET, {"vlan": 77}, False),
    ("eth-qinq", pw.LINKTYPE_ETHERNET, {"vlan": 77, "qinq": 5}, False),
    ("sll", pw.LINKTYPE_LINUX_SLL, {}, False),
    ("sll2", pw.LINKTYPE_LINUX_SLL2, {}, False),
    ("raw", pw.LINKTYPE_RAW, {}, False),
    ("ipv4", pw.LINKTYPE_IPV4, {}, False),
    ("null", pw.LINKTYPE_NULL, {}, False),
    ("loop", pw.LINKTYPE_LOOP, {}, False),
    ("eth-ipv6", pw.LINKTYPE_ETHERNET, {}, True),
    ("sll2-ipv6", pw.LINKTYPE_LINUX_SLL2, {}, True),
    ("ipv6", pw.LINKTYPE_IPV6, {}, True),
]


@pytest.mark.parametrize("name,linktype,kw,v6", LINKS, ids=[x[0] for x in LINKS])
def test_link_types(dec: Path, tmp: Path, name: str, linktype: int, kw: dict[str, int],
                    v6: bool) -> None:
    flow = pw.Flow(ini_ip="fd00:99::1", tgt_ip="fd00:99::2") if v6 else pw.Flow()
    conv = dc.basic(flow=flow)
    segs = conv.segments()
    res = decode(dec, write(tmp, f"{name}.pcap", conv.flow, segs, linktype=linktype, **kw))
    assert res.rc == 0, res.stderr
    check_all(res, conv, segs)
    if v6:
        assert conv.flow.conn == "[fd00:99::1]:40000-[fd00:99::2]:3260"


def test_non_default_port(dec: Path, tmp: Path) -> None:
    conv = dc.basic(flow=pw.Flow(tgt_port=3261))
    segs = conv.segments()
    path = write(tmp, "p3261.pcap", conv.flow, segs)
    assert decode(dec, path).rc == 3
    res = decode(dec, path, "--port", "3261")
    assert res.rc == 0, res.stderr
    check_all(res, conv, segs)


@pytest.mark.parametrize("gz", [False, True])
def test_stdin(dec: Path, tmp: Path, gz: bool) -> None:
    conv = dc.basic()
    segs = conv.segments()
    path = write(tmp, "in.pcap", conv.flow, segs, gz=gz)
    res = decode(dec, None, stdin=path.read_bytes(), outdir=tmp / "out")
    assert res.rc == 0, res.stderr
    check_all(res, conv, segs)


def test_live_pipe_streams(dec: Path, tmp: Path) -> None:
    """Text mode through a pipe: PDUs come out while the writer still holds the pipe open."""
    conv = dc.basic()
    segs = conv.segments()
    img = pw.pcap_bytes(pw.packets_of(conv.flow, segs))
    p = subprocess.Popen([str(dec), "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write(img)
        p.stdin.flush()
        # The first line must arrive before EOF on stdin (bounded wait, never a hang).
        ready, _, _ = select.select([p.stdout], [], [], 15)
        assert ready, "no output line while the pipe is still open"
        first = p.stdout.readline()
        assert first.strip(), "no output line before the pipe closed"
        p.stdin.close()
        rest = p.stdout.read()
        assert p.wait(timeout=20) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    lines = [first, *rest.splitlines()]
    assert sum(1 for x in lines if x.strip()) >= len(conv.pdus)


# ---------------------------------------------------------------- more protocol corners
def test_sequence_number_wrap(dec: Path, tmp: Path) -> None:
    """Both directions' sequence numbers wrap past 2^32 in the middle of PDUs."""
    flow = pw.Flow(ini_isn=0xFFFFFF00, tgt_isn=0xFFFFF000)
    conv = dc.basic(flow=flow)
    segs = conv.segments()
    assert any(s.seq < 0x1000 for s in segs if s.dir == "t2i" and s.payload)
    res = decode(dec, write(tmp, "wrap.pcap", conv.flow, segs))
    assert res.rc == 0, res.stderr
    for p in conv.pdus:
        p.seq &= 0xFFFFFFFF
    check_all(res, conv, segs)


def test_extended_cdb_ahs_and_many_connections(dec: Path, tmp: Path) -> None:
    """A 32-byte CDB (Extended CDB AHS) and three connections interleaved packet by packet."""
    convs = [dc.basic(flow=pw.Flow(ini_port=41000 + k)) for k in range(3)]
    for c in convs:
        c.pdus.insert(2, dc.Pdu("i2t", pw.scsi_cmd(0x77, bytes([0x7F, 0, 0, 0, 0, 0, 0, 0x18])
                                                   + bytes(24), cmdsn=1, expstatsn=1),
                                {"opcode": 1, "itt": 0x77, "ahs_len": 20, "cdb_opcode": 0x7F}))
    seg_lists = [c.segments() for c in convs]
    pk: list[pw.Packet] = []
    n = max(len(x) for x in seg_lists)
    for i in range(n):
        for c, segs in zip(convs, seg_lists, strict=True):
            if i < len(segs):
                pk += pw.packets_of(c.flow, [segs[i]], t0_ns=T0 + len(pk) * STEP)
    path = Path(pw.write_capture(str(tmp / "multi.pcap"), pk))
    res = decode(dec, path)
    assert res.rc == 0, res.stderr
    assert len(res.connections) == 3
    for c in convs:
        mine = res.pdus[res.pdus["conn"] == c.flow.conn]
        check_all(Decoded(res.rc, res.stderr, mine, res.commands, res.connections, res.outdir),
                  c)


@pytest.mark.parametrize("seed", range(12))
def test_random_conversations(dec: Path, tmp: Path, seed: int) -> None:
    """Random well-formed sessions cut into random segment sizes (1 byte to 3000), with and
    without digests; odd seeds also duplicate and locally reorder segments."""
    rng = random.Random(seed)
    conv = dc.random_conversation(rng, digests=seed % 3 == 0)
    segs = dc.random_segments(conv, rng)
    if seed % 2:
        for i in range(3, len(segs) - 3, 5):
            if segs[i].dir == segs[i + 1].dir:
                segs[i], segs[i + 1] = segs[i + 1], segs[i]
        segs += [segs[i] for i in range(3, len(segs) - 2, 11)]  # late duplicates
        segs.sort(key=lambda s: 0)  # stable: keeps the order built above
    res = decode(dec, write(tmp, f"rand{seed}.pcap", conv.flow, segs))
    assert res.rc == 0, res.stderr
    check_all(res, conv, None if seed % 2 else segs)


def test_hostile_text_keys_keep_csv_and_json_valid(dec: Path, tmp: Path) -> None:
    """Login/Text values with quotes, commas, semicolons, backslashes, newlines, control
    bytes and invalid UTF-8: CSV still loads with one row per PDU, every JSON line parses."""
    flow = pw.Flow()
    evil = [("InitiatorName", 'iqn.x:"quoted",comma;semi\\back'),
            ("X-Line", "a\nb\rc\td"), ("X-Ctl", "\x01\x1f\x7f"), ("X-Utf8", "héllo ✓")]
    c = dc.Conversation(flow=flow)
    c.add("i2t", pw.login_req(evil) + b"", opcode=3)
    raw = pw.kv_data([("TargetAlias", "x")]) + b"X-Bin=\xff\xfe\x80\0"
    hdr = pw.bhs(pw.OP_LOGIN_RSP, 0x87, data=raw, lun_or_key=pw.ISID + b"\0\1", itt=0,
                 words=(0, 0, 1, 32))
    c.add("t2i", pw.pdu(hdr, data=raw), opcode=0x23)
    c.add("i2t", pw.text_req([("SendTargets", "All")], itt=5, cmdsn=1, expstatsn=1),
          opcode=4, itt=5)
    segs = c.segments()
    path = write(tmp, "evil.pcap", flow, segs)
    res = decode(dec, path)
    assert res.rc == 0, res.stderr
    check_all(res, c)
    kv0 = res.pdus.iloc[0]["kv"]
    assert 'iqn.x:"quoted",comma' in kv0 and "héllo ✓" in kv0, kv0
    rows = decode_json(dec, path)  # json.loads on every line: raises on invalid JSON
    assert len(rows) == 3 and 'iqn.x:"quoted",comma' in str(rows[0]["kv"])
    text = run_decoder(dec, ["-v", str(path)])
    assert text.returncode == 0 and text.stdout.count(b"\n") >= 3


def test_text_and_summary_agree_with_tables(dec: Path, tmp: Path) -> None:
    rng = random.Random(99)
    conv = dc.random_conversation(rng)
    path = write(tmp, "sum.pcap", conv.flow, dc.random_segments(conv, rng))
    res = decode(dec, path)
    text = run_decoder(dec, [str(path)]).stdout.decode().splitlines()
    assert len([x for x in text if x.strip()]) == len(res.pdus) == len(conv.pdus)
    summ = run_decoder(dec, ["--summary", str(path)]).stdout.decode()
    m = re.search(r"(\d+) connections?, (\d+) PDUs, (\d+) SCSI commands", summ)
    assert m, summ
    assert (int(m[1]), int(m[2]), int(m[3])) == (1, len(res.pdus), len(res.commands))
    per_op = {(d, name.strip()): int(n) for d, name, n in
              re.findall(r"^\s+(i2t|t2i) ([A-Za-z0-9 -]+?)\s+(\d+)\s+data", summ, re.M)}
    want = res.pdus.groupby(["dir", "opcode_name"]).size().to_dict()
    assert per_op == want, (per_op, want)


def test_capture_starts_inside_a_header(dec: Path, tmp: Path) -> None:
    """Every PDU cut in three; the capture's first segment of each direction starts 16 bytes
    into a BHS (the READ(10) command, the second Data-In). Decoding resumes at the next PDU."""
    conv = dc.basic()
    conv.assign_seqs()
    segs = conv.flow.handshake()
    for p in conv.pdus:
        for a, b in ((0, 16), (16, 40), (40, len(p.data))):
            segs += conv.flow.send(p.dir, p.data[a:b], seg=1 << 20)
    segs += conv.flow.fin()
    cmd = by_name(conv, 0x01, 2)
    din1 = by_name(conv, 0x25, 2, datasn=1)
    first = {"i2t": cmd.seq + 16, "t2i": din1.seq + 16}
    start = min(i for i, s in enumerate(segs) if s.seq == first[s.dir] and s.payload)
    kept = [s for s in segs[start:]
            if not s.payload or ((s.seq - first[s.dir]) & 0xFFFFFFFF) < 1 << 31]
    res = decode(dec, write(tmp, "inhdr.pcap", conv.flow, kept), "--block-size", str(dc.BLOCK))
    assert res.rc == 0, res.stderr
    later = [p for p in conv.pdus if p.seq > first[p.dir]]
    check_all(res, conv, only=later)


def test_same_four_tuple_reused_after_fin(dec: Path, tmp: Path) -> None:
    """A second session on the same addresses and ports with a new ISN after the first one
    closed: both decode exactly (state of the first must not leak into the second)."""
    a = dc.basic(flow=pw.Flow(ini_isn=1000, tgt_isn=5_000_000))
    b = dc.basic(digests=True, flow=pw.Flow(ini_isn=0x7000_0000, tgt_isn=0x9000_0000))
    sa, sb = a.segments(), b.segments()
    pk = pw.packets_of(a.flow, sa, t0_ns=T0) + pw.packets_of(b.flow, sb, t0_ns=T0 + 10**9)
    path = Path(pw.write_capture(str(tmp / "reuse.pcap"), pk))
    res = decode(dec, path)
    assert res.rc == 0, res.stderr
    ts = res.pdus["ts_ns"].astype("int64")
    for conv, part in ((a, res.pdus[ts < T0 + 10**9]), (b, res.pdus[ts >= T0 + 10**9])):
        check_all(Decoded(res.rc, res.stderr, part, res.commands, res.connections, res.outdir),
                  conv)


def test_new_isn_with_early_bytes_queued(dec: Path, tmp: Path) -> None:
    """A SYN with a new ISN while early bytes of the old stream wait in the reorder queue
    (the old stream never delivered a byte), and the capture ends before the new stream
    delivers any. It used to spin for ever at the end (a fuzz finding): the queue head lay
    behind the new stream's next byte, where no gap could reach it. Both streams must end,
    and a second session after that must decode exactly."""
    a = dc.basic(flow=pw.Flow(ini_isn=1000, tgt_isn=5_000_000))
    syn = next(s for s in a.segments() if s.dir == "i2t" and s.flags & pw.TCP_SYN)
    early = pw.Segment("i2t", syn.seq + 1 + 48, 0, pw.TCP_ACK, b"\0" * 100)
    b = dc.basic(flow=pw.Flow(ini_isn=1_000_000, tgt_isn=9_000_000))
    syn_b = next(s for s in b.segments() if s.dir == "i2t" and s.flags & pw.TCP_SYN)
    pk = pw.packets_of(a.flow, [syn, early, syn_b], t0_ns=T0)
    res = decode(dec, Path(pw.write_capture(str(tmp / "isn.pcap"), pk)))
    assert res.rc == 3 and "no iSCSI PDUs found (3 packets" in res.stderr, res.stderr
    c = dc.basic(flow=pw.Flow(ini_isn=0x7000_0000, tgt_isn=0x9000_0000))
    pk += pw.packets_of(c.flow, c.segments(), t0_ns=T0 + 10**9)
    res = decode(dec, Path(pw.write_capture(str(tmp / "isn2.pcap"), pk)))
    assert res.rc == 0, res.stderr
    ts = res.pdus["ts_ns"].astype("int64")
    check_all(Decoded(res.rc, res.stderr, res.pdus[ts >= T0 + 10**9], res.commands,
                      res.connections, res.outdir), c)


def test_tables_load_in_pandas_as_they_are(dec: Path, tmp: Path) -> None:
    """docs/schema.md: pd.read_csv / pd.read_json(lines=True) with no options give usable
    columns: numbers numeric, tags and names as text."""
    import pandas as pd

    _conv, _segs, path = basic_capture(tmp)
    res = decode(dec, path)
    pdus = pd.read_csv(res.outdir / "pdus.csv")
    for col in ("pdu", "ts_ns", "tcp_seq", "opcode", "dsl", "lba", "xfer_bytes", "status",
                "cmdsn", "statsn", "resp_time_us"):
        assert pd.api.types.is_numeric_dtype(pdus[col]), (col, pdus[col].dtype)
    assert pdus["itt"].str.startswith("0x").all()
    assert pdus["ts_ns"].dtype == "int64"
    cmds = pd.read_csv(res.outdir / "commands.csv")
    for col in ("issue_ts_ns", "bytes_in", "bytes_out", "data_pdus", "outstanding"):
        assert pd.api.types.is_integer_dtype(cmds[col]), (col, cmds[col].dtype)
    js = tmp / "pdus.jsonl"
    js.write_bytes(run_decoder(dec, ["--json", str(path)]).stdout)
    jdf = pd.read_json(js, lines=True)
    assert len(jdf) == len(pdus) and list(jdf["tcp_seq"]) == list(pdus["tcp_seq"])
