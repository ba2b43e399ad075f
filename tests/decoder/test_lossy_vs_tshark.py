"""Real traffic over a lossy path (1% loss each way, 1 ms delay, the testbed's forwarder):
retransmissions and out-of-order arrivals are real. istrace must account for every command
the initiators completed (ground truth from the workloads themselves), and agree with tshark
on every PDU both decode. tshark reports reassembled PDUs where reassembly completes, which
after a retransmission is not stream order, so PDUs are joined here by their protocol
identity (connection, direction, opcode, ITT, CmdSN/StatSN/DataSN/offset/R2TSN) instead of
by TCP sequence number."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from istrace.system.paths import binary
from istrace.testbed.namespaces import Testbed, TestbedConfig
from test_vs_tshark import COMPARED, Captured, capture_workloads, explain

READS, READ_SIZE, WRITES, WRITE_SIZE = 10, 1 << 20, 6, 512 << 10


@pytest.fixture(scope="module")
def lossy(module_tmp: Callable[[str], Path]) -> Captured:
    pcap = module_tmp("lossy") / "initiator.pcap"
    with Testbed(TestbedConfig(name="d2lo", lun_mb=8, loss=0.01, delay_ms=1.0)) as tb:
        gen = [str(binary("istrace-gen")), "--portal", tb.portal, "--target", tb.iqn,
               "--quiet", "--timeout", "20"]
        url = f"iscsi://{tb.portal}/{tb.iqn}/1"
        work = {
            "perf": ["timeout", "-s", "KILL", "15", "iscsi-perf", "-b", "64", "-m", "4", "-t",
                     "1", url],
            "gen-read": [*gen, "--size", str(READ_SIZE), "--count", str(READS), "--mrdsl",
                         "65536"],
            "gen-write": [*gen, "--write", "--size", str(WRITE_SIZE), "--count", str(WRITES)],
        }
        return capture_workloads(tb, pcap, list(work.items()), timeout=90)


def test_lossy_capture_is_complete_and_lossy(lossy: Captured) -> None:
    assert lossy.drops == 0 and lossy.unwritten == 0, (lossy.drops, lossy.unwritten)
    bad = {k: v for k, v in lossy.rc.items() if v != 0}
    assert not bad, {k: lossy.out[k][-400:] for k in bad}
    notes = " ".join(lossy.res.pdus["note"])
    assert "retransmit" in notes, "the path lost nothing: the case tests nothing"


def test_lossy_every_completed_command_accounted(lossy: Captured) -> None:
    """The workloads' own counts: 10 x 1 MiB READ(10) and 6 x 512 KiB WRITE(10), all GOOD,
    with every byte seen; no PDU lost to a gap, a resync or the end of the capture."""
    c = lossy.res.commands
    for cdb, n, size, col in ((0x28, READS, READ_SIZE, "bytes_in"),
                              (0x2A, WRITES, WRITE_SIZE, "bytes_out")):
        mine = c[(c["cdb_opcode"].map(lambda x: int(x, 0) if x else -1) == cdb)
                 & (c["xfer_bytes"] == str(size))]
        assert len(mine) == n, mine.to_string()
        assert set(mine[col]) == {str(size)} and set(mine["status"]) == {"0"}, mine.to_string()
    for word in ("gap", "resync", "incomplete", "truncated"):
        assert word not in " ".join(lossy.res.pdus["note"]), word
    # Every command of the capture got its response.
    assert (c["status"] != "").all(), c[c["status"] == ""].to_string()


def _key(conn: str, d: str, f: dict[str, int]) -> tuple[object, ...]:
    op = f["opcode"]
    return (conn, d, op, f.get("itt"),
            f.get("cmdsn") if op in (0x00, 0x01, 0x03, 0x04, 0x06) else None,
            f.get("statsn") if op in (0x21, 0x23, 0x24, 0x26) else None,
            f.get("datasn") if op in (0x05, 0x25) else None,
            f.get("buffer_offset") if op in (0x05, 0x25, 0x31) else None,
            f.get("r2tsn") if op == 0x31 else None)


def test_lossy_agrees_with_tshark(lossy: Captured) -> None:
    def fields(r: dict[str, str]) -> dict[str, int]:
        return {c: int(r[c], 0) for c in ("opcode", "itt", "cmdsn", "statsn", "datasn",
                                           "buffer_offset", "r2tsn") if r[c] != ""}

    # A multi-stage login repeats ITT and CmdSN: the n-th occurrence is part of the key.
    seen: Counter[tuple[object, ...]] = Counter()
    ist: dict[tuple[object, ...], dict[str, str]] = {}
    for r in lossy.res.pdus.to_dict("records"):
        k = _key(r["conn"], r["dir"], fields(r))
        seen[k] += 1
        ist[(*k, seen[k])] = r
    seen.clear()
    tkey: dict[int, tuple[object, ...]] = {}
    for p in lossy.tsh:
        k = _key(p.conn, p.dir, p.fields)
        seen[k] += 1
        tkey[id(p)] = (*k, seen[k])
    tkeys = set(tkey.values())
    only_t = [k for k in tkeys if k not in ist]
    only_i = [k for k in ist if k not in tkeys]
    assert not only_t, f"tshark decoded PDUs istrace did not: {only_t[:5]}"
    assert not only_i, f"istrace decoded PDUs tshark did not: {only_i[:5]}"
    unexplained = []
    compared = 0
    for p in lossy.tsh:
        irow = ist[tkey[id(p)]]
        for col in COMPARED:
            if col not in p.fields or (col == "lun" and p.fields["opcode"] != 0x01):
                continue
            raw = irow.get(col, "")
            ival: object = "" if raw == "" else int(raw, 0)
            compared += 1
            if ival != p.fields[col] and not explain(col, irow, p.fields[col], ival):
                unexplained.append(f"frame {p.frame} {col}: istrace {raw!r} tshark "
                                   f"{p.fields[col]}")
    assert not unexplained, "\n".join(unexplained[:30])
    assert compared > 5000 and len(lossy.tsh) > 500
