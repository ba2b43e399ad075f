"""istrace-decode as a program: tables per docs/schema.md, output modes, inputs, exit codes."""

from __future__ import annotations

import gzip
import json
import os
import select
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
from core_helpers import BIN, connection_columns, schema_columns, session_image, write_session
from istrace.capture.decoded import load_commands, load_connections, load_pdus
from istrace.capture.decoderun import DecodeError, decode_to_dir
from istrace.synth import pcapwriter as pw


def run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    assert BIN.exists(), "decoder/istrace-decode is not built: run make"
    return subprocess.run([str(BIN), *args], input=stdin, capture_output=True, timeout=60,
                          check=False)


@pytest.fixture
def session(tmp_path: Path) -> Path:
    return write_session(tmp_path / "s.pcap")


def test_tables_follow_schema(session: Path, tmp_path: Path) -> None:
    out = decode_to_dir(session, tmp_path / "out")
    for name, section in (("pdus.csv", "2."), ("commands.csv", "3.")):
        header = (out / name).read_text().splitlines()[0].split(",")
        assert header == schema_columns(section), name
    header = (out / "connections.csv").read_text().splitlines()[0].split(",")
    assert header == connection_columns()


def test_decoded_fields(session: Path, tmp_path: Path) -> None:
    out = decode_to_dir(session, tmp_path / "out")
    pdus, cmds, conns = load_pdus(out), load_commands(out), load_connections(out)
    assert list(pdus["opcode_name"]) == [
        "Login Request", "Login Response", "SCSI Command"] + ["SCSI Data-In"] * 4 + [
        "SCSI Command", "SCSI Response", "SCSI Command", "SCSI Data-In", "SCSI Command",
        "SCSI Data-In"]
    assert list(pdus["pdu"]) == list(range(len(pdus)))
    rd = pdus.iloc[2]
    assert (rd["cdb_name"], rd["lba"], rd["xfer_blocks"], rd["xfer_bytes"], rd["edtl"]) == (
        "READ(10)", 2048, 64, 32768, 32768)
    assert rd["itt"] == "0x00000001" and rd["tcp_seq"] == 1001 + 2 * 0 + len(
        pw.login_req([("InitiatorName", "iqn.t:ini"), ("TargetName", "iqn.t:tgt"),
                      ("MaxRecvDataSegmentLength", "65536")]))
    din = pdus[pdus["opcode"] == 0x25].iloc[:4]
    assert list(din["buffer_offset"]) == [0, 8192, 16384, 24576]
    assert list(din["datasn"]) == [0, 1, 2, 3] and list(din["cmd"]) == [0] * 4
    assert din.iloc[3]["status_name"] == "GOOD" and din.iloc[3]["resp_time_us"] > 0
    rsp = pdus[pdus["opcode"] == 0x21].iloc[0]
    assert (rsp["status"], rsp["sense_key"], rsp["asc"], rsp["ascq"]) == (2, 5, 0x24, 0)
    assert rsp["sense_text"] == "ILLEGAL REQUEST: INVALID FIELD IN CDB"
    # READ CAPACITY(16) taught 4096-byte blocks: READ(16) of 8 blocks = 32 KiB.
    r16 = pdus[pdus["cdb_name"] == "READ(16)"].iloc[0]
    assert (r16["xfer_blocks"], r16["xfer_bytes"]) == (8, 32768)
    assert pdus.iloc[0]["kv"] == ("InitiatorName=iqn.t:ini;TargetName=iqn.t:tgt;"
                                  "MaxRecvDataSegmentLength=65536")
    assert list(cmds["cdb_name"]) == ["READ(10)", "TEST UNIT READY", "READ CAPACITY(16)",
                                      "READ(16)"]
    c0 = cmds.iloc[0]
    assert (c0["bytes_in"], c0["data_pdus"], c0["direction"], c0["outstanding"]) == (
        32768, 4, "read", 1)
    assert c0["resp_ts_ns"] - c0["issue_ts_ns"] == round(c0["resp_time_us"] * 1000)
    assert cmds.iloc[1]["status_name"] == "CHECK CONDITION"
    assert len(conns) == 1
    k = conns.iloc[0]
    assert (k["initiator_name"], k["mrdsl_t2i"], k["mrdsl_i2t"], k["MaxBurstLength"],
            k["block_size"], k["HeaderDigest"]) == ("iqn.t:ini", 65536, 8192, 262144, 4096,
                                                    "None")


def test_json_lines_match_csv(session: Path, tmp_path: Path) -> None:
    r = run("--json", str(session))
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.decode().splitlines()]
    csv = pd.read_csv(decode_to_dir(session, tmp_path / "o") / "pdus.csv", dtype=str,
                      keep_default_na=False)
    assert list(rows[0].keys()) == list(csv.columns)
    assert len(rows) == len(csv)
    for j, c in zip(rows, csv.to_dict("records"), strict=True):
        for key, v in j.items():
            if isinstance(v, float):
                assert v == float(c[key]), key
            else:
                assert ("" if v is None else str(v)) == c[key], key


def test_text_verbose_and_summary(session: Path) -> None:
    r = run(str(session))
    lines = r.stdout.decode().splitlines()
    assert len(lines) == 13 and "READ(10) lba=2048 len=64 blk (32768 B)" in lines[2]
    assert "sense=5/24/00 (ILLEGAL REQUEST: INVALID FIELD IN CDB)" in lines[8]
    v = run("-v", str(session)).stdout.decode()
    assert "BHS[24-27]  CmdSN = 1" in v and "CDB[2-5]    Logical Block Address = 2048" in v
    assert "CDB[7-8]    Transfer Length (blocks) = 64" in v
    s = run("--summary", str(session)).stdout.decode()
    assert "READ: 2 commands; most common size 32768 bytes (32 KiB) = 100.0%" in s
    assert "SCSI Data-In" in s and "p50" in s


def test_summary_with_json_keeps_stdout_json(session: Path) -> None:
    """--summary --json: stdout is JSON lines only (a reader parses every line), the summary
    goes to stderr."""
    r = run("--summary", "--json", str(session))
    assert r.returncode == 0
    rows = [json.loads(x) for x in r.stdout.decode().splitlines()]
    assert rows == [json.loads(x) for x in run("--json", str(session)).stdout.splitlines()]
    assert "READ: 2 commands; most common size 32768 bytes" in r.stderr.decode()


def test_inputs_gzip_pcapng_stdin(session: Path, tmp_path: Path) -> None:
    base = run("--json", str(session)).stdout
    gz = write_session(tmp_path / "s.pcap.gz", gz=True)
    ng = write_session(tmp_path / "s.pcapng", fmt="pcapng")
    assert run("--json", str(gz)).stdout == base
    assert run("--json", "-", stdin=session.read_bytes()).stdout == base
    assert run("--json", "-", stdin=gz.read_bytes()).stdout == base
    # pcapng carries nanoseconds, the pcap microseconds: the same to the microsecond.
    a = [json.loads(x) for x in run("--json", str(ng)).stdout.splitlines()]
    b = [json.loads(x) for x in base.splitlines()]
    assert [x["ts_ns"] for x in a] == [x["ts_ns"] for x in b]


def test_bad_inputs_exit_codes(tmp_path: Path, session: Path) -> None:
    assert run(str(tmp_path / "missing.pcap")).returncode == 2
    (tmp_path / "txt").write_text("not a capture\n")
    r = run(str(tmp_path / "txt"))
    assert r.returncode == 2 and b"not a pcap/pcapng capture" in r.stderr
    assert len(r.stderr.decode().strip().splitlines()) == 1
    assert run().returncode == 2
    assert run("--port", "x", str(session)).returncode == 2
    r = run("--port", "3261", str(session))
    assert r.returncode == 3 and b"no iSCSI PDUs found" in r.stderr
    with pytest.raises(DecodeError) as e:
        decode_to_dir(session, tmp_path / "o", ports=[3999])
    assert e.value.returncode == 3
    # A file cut mid-packet: what is there is decoded, the end is reported.
    img = session.read_bytes()
    (tmp_path / "cut.pcap").write_bytes(img[: len(img) - 100])
    r = run("--json", str(tmp_path / "cut.pcap"))
    assert r.returncode == 0 and b"capture ends early" in r.stderr
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(rows) == 13 and rows[-1]["note"] == "incomplete" and rows[-1]["ddigest"] is None
    # gzip'd and cut: same
    (tmp_path / "cut.pcap.gz").write_bytes(gzip.compress(img)[:-40])
    r = run("--json", str(tmp_path / "cut.pcap.gz"))
    assert r.returncode == 0 and len(r.stdout.splitlines()) >= 10


def test_other_port_and_block_size(tmp_path: Path) -> None:
    flow = pw.Flow(tgt_port=3999)
    segs = flow.handshake()
    segs += flow.send("i2t", pw.scsi_cmd(5, pw.cdb_read10(0, 4), edtl=4 * 4096, read=True))
    pk = pw.packets_of(flow, segs)
    p = Path(pw.write_capture(str(tmp_path / "p.pcap"), pk))
    r = run("--json", "--port", "3999", "--block-size", "4096", str(p))
    row = json.loads(r.stdout.splitlines()[0])
    assert row["xfer_bytes"] == 16384 and row["conn"] == "10.99.0.1:40000-10.99.0.2:3999"


def test_live_pipe_streams_each_pdu(tmp_path: Path) -> None:
    """A PDU is printed as soon as its packets arrive on stdin, not at end of input."""
    img = session_image()
    header, packets = img[:24], img[24:]
    proc = subprocess.Popen([str(BIN), "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        # Feed everything up to the first READ(10) response only, then wait for its line.
        cut = packets.index(b"\x28\x00\x00\x00\x08\x00") + 200
        proc.stdin.write(header + packets[:cut])
        proc.stdin.flush()
        got = b""
        deadline = time.monotonic() + 10
        while b"READ(10)" not in got and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            if ready:
                got += os.read(proc.stdout.fileno(), 65536)
        assert b"READ(10)" in got, got
        proc.stdin.write(packets[cut:])
        proc.stdin.close()
        rest = proc.stdout.read()
        assert proc.wait(timeout=10) == 0
        assert len((got + rest).splitlines()) == 13
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
