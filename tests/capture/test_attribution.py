"""The command-attribution rules (istrace.capture.attribution) on hand-made commands and rows
whose owner is known: one case per rule, and the cases where the time rule decides."""

from __future__ import annotations

import numpy as np
import pandas as pd
from istrace.capture import attribution as at

MS = 1_000_000
T0 = 1_700_000_000_000_000_000  # realistic epoch nanoseconds: no float round trip allowed


def _commands() -> pd.DataFrame:
    # cmd 0 and 2 reuse ITT 0x10 and LBA 0; cmd 1 is still outstanding at the end
    return pd.DataFrame({
        "cmd": [0, 1, 2], "itt": ["0x00000010", "0x00000011", "0x00000010"],
        "issue_ts_ns": [T0, T0 + 10 * MS, T0 + 20 * MS],
        "resp_ts_ns": pd.array([T0 + 5 * MS, None, T0 + 25 * MS], dtype="Int64"),
        "lba": [0, 8, 0], "xfer_bytes": [4096, 4096, 8192], "xfer_blocks": [8, 8, 16]})


def _ids(a: pd.api.extensions.ExtensionArray) -> list[int | None]:
    return [None if pd.isna(v) else int(v) for v in a]


def test_itt_latest_issued_before_within_life() -> None:
    t = np.array([T0 + 1 * MS, T0 + 21 * MS, T0 + 17 * MS, T0 - 10 * MS, T0 + 12 * MS])
    itt = [0x10, 0x10, 0x10, 0x10, 0x11]
    # at 17 ms cmd 0 is long answered and cmd 2 not yet issued (beyond the slack): still
    # cmd 0, within its life + the late allowance; before any issue: nobody
    assert _ids(at.by_itt(t, itt, _commands())) == [0, 2, 0, None, 1]
    assert _ids(at.by_itt(t[:1], [0x10], _commands(), late_ns=0)) == [0]
    assert _ids(at.by_itt(t[2:3], [0x10], _commands(), late_ns=0)) == [None]


def test_time_outstanding() -> None:
    t = np.array([T0 + 1 * MS, T0 + 7 * MS + 500_000, T0 + 15 * MS, T0 + 26 * MS,
                  T0 + 30 * MS])
    # 7.5 ms: cmd 0 answered at 5 (+2 slack), cmd 1 issued at 10 (-2 slack): none; only the
    # latest issued is looked at, so past cmd 2's life nobody owns it (cmd 1 never answered)
    assert _ids(at.by_time(t, _commands())) == [0, None, 1, 2, None]


def test_offset_is_lba_times_block_size() -> None:
    t = np.array([T0 + 1 * MS, T0 + 11 * MS, T0 + 22 * MS, T0 + 11 * MS])
    off = [0, 8 * 512, 0, 4096 * 3]
    assert at.block_size(_commands()) == 512
    assert _ids(at.by_offset(t, off, _commands())) == [0, 1, 2, None]


def test_lba_prefers_size_then_life_then_next() -> None:
    cmds = _commands()
    t = np.array([T0 + 21 * MS, T0 + 21 * MS, T0 + 15 * MS, T0 - 50 * MS])
    got = at.by_lba(t, [0, 0, 0, 8], [8192, 4096, None, 4096], cmds)
    # size 4096 at LBA 0 is cmd 0, but it is long over at 21 ms: by LBA alone, cmd 2;
    # at 15 ms no LBA-0 command lives: the next one; a dispatch long before its issue: next
    assert _ids(got) == [2, 2, 2, 1]


def test_lba_completion_after_the_response_with_late_allowance() -> None:
    # the SCSI midlayer's / block layer's completion of cmd 0 (LBA 0, 4096 B) comes 4 ms
    # after its response (+2 ms slack): only the late allowance keeps it with cmd 0
    t = np.array([T0 + 9 * MS])
    assert _ids(at.by_lba(t, [0], [4096], _commands())) == [2]        # next LBA-0 command
    assert _ids(at.by_lba(t, [0], [4096], _commands(), late_ns=10 * MS)) == [0]


def test_seq_carries_the_pdu_command_across_wraps() -> None:
    # one direction, PDUs of 1 GiB every 10 ms from just below 2^32: the stream wraps twice
    n = 10
    start = (1 << 32) - 100
    off = np.arange(n, dtype=np.int64) << 30
    pdus = pd.DataFrame({"conn": "c", "dir": "t2i", "tcp_seq": (start + off) % (1 << 32),
                         "ts_ns": T0 + np.arange(n) * 10 * MS,
                         "cmd": pd.array([0, 1, None, 3, 4, 5, 6, 7, 8, 9], dtype="Int64")})
    # a segment 5 bytes into each PDU, seen 1 ms after it; one in the command-less PDU 2;
    # one on another connection
    t = np.append(T0 + np.arange(n) * 10 * MS + MS, T0)
    seq = np.append((start + off + 5) % (1 << 32), start)
    conn = ["c"] * n + ["other"]
    got = at.by_seq(t, conn, ["t2i"] * (n + 1), seq, pdus)
    assert _ids(got) == [0, 1, 1, 3, 4, 5, 6, 7, 8, 9, None]
    # a retransmission of PDU 1's bytes long after: still PDU 1's command
    late = at.by_seq(np.array([T0 + 95 * MS]), ["c"], ["t2i"],
                     [(start + off[8] + 5) % (1 << 32)], pdus)
    assert _ids(late) == [8]


def test_seq_index_made_once_answers_every_block_as_by_seq() -> None:
    # two connections, both directions, PDUs of 64 KiB every ms, some without a command; the
    # rows asked block by block of one index, as the merge asks a slice at a time
    rng = np.random.default_rng(7)
    frames = []
    for s, (c, d, base) in enumerate((("a", "t2i", 1000), ("a", "i2t", 5),
                                      ("b", "t2i", (1 << 32) - 70_000))):
        n = 40
        frames.append(pd.DataFrame({
            "conn": c, "dir": d, "tcp_seq": (base + np.arange(n) * 65536) % (1 << 32),
            "ts_ns": T0 + np.arange(n) * MS,
            "cmd": pd.array([None if k % 7 == 3 else 100 * s + k for k in range(n)],
                            dtype="Int64")}))
    pdus = pd.concat(frames, ignore_index=True)
    m = 3000
    pick = rng.integers(0, len(pdus), m)
    conn = pdus["conn"].to_numpy()[pick]
    conn[::97] = "unknown"
    direction = pdus["dir"].to_numpy()[pick]
    seq = (pdus["tcp_seq"].to_numpy()[pick] + rng.integers(0, 65536, m)) % (1 << 32)
    t = pdus["ts_ns"].to_numpy()[pick] + rng.integers(0, MS, m)
    whole = _ids(at.by_seq(t, conn, direction, seq, pdus))
    index = at.SeqIndex(pdus)
    blocks = [_ids(index.cmds(t[a:a + 512], conn[a:a + 512], direction[a:a + 512],
                              seq[a:a + 512])) for a in range(0, m, 512)]
    assert sum(blocks, []) == whole
    assert whole.count(None) >= m // 97  # the unknown connection's rows
    assert len(set(whole) - {None}) > 60  # rows of many commands, on all three streams


def test_small_pdus_are_indexed_by_runs_and_answer_as_each_pdu_would() -> None:
    """8 KiB PDUs, 64 a command, two commands' PDUs interleaved at times, some without a
    command, the stream wrapping past 2^32: the index keeps a run of one command's
    PDUs as one entry and an anchor per ANCHOR_STEP, and answers every row as a lookup over
    each PDU does (the PDU sent last before the row places its sequence number; the last PDU
    starting at or before it gives the command)."""
    rng = np.random.default_rng(11)
    n, size = 64 * 320, 8192
    base = (1 << 32) - 5_000_000
    cmd = np.repeat(np.arange(n // 64), 64)
    swap = rng.random(n) < 0.02  # a PDU of the next command sent among this one's
    cmd = np.where(swap, cmd + 1, cmd).astype(object)
    cmd[rng.random(n) < 0.01] = None
    off = np.arange(n, dtype=np.int64) * size  # 168 MB from 5 MB below 2^32
    ts = T0 + np.arange(n, dtype=np.int64) * 10_000
    pdus = pd.DataFrame({"conn": "c", "dir": "t2i", "tcp_seq": (base + off) % (1 << 32),
                         "ts_ns": ts, "cmd": pd.array(cmd, dtype="Int64")})
    index = at.SeqIndex(pdus)
    anchors, runs = index.held()
    assert runs < n // 10 and anchors < n // 100  # runs and anchors, not PDUs
    m = 5000
    pick = rng.integers(0, n, m)
    row_off = off[pick] + rng.integers(0, size, m)
    row_t = ts[pick] + rng.integers(0, 10_000, m)
    late = rng.random(m) < 0.1  # retransmissions seen long after
    row_t = np.where(late, row_t + 50 * MS, row_t)
    got = _ids(index.cmds(row_t, ["c"] * m, ["t2i"] * m, (base + row_off) % (1 << 32)))
    has = np.flatnonzero(pd.notna(cmd))
    want = []
    for o in row_off.tolist():  # offsets are exact here: the last PDU with a command at or before
        j = has[np.searchsorted(off[has], o, side="right") - 1]
        want.append(int(cmd[j]))
    assert got == want


def test_tags_text_or_numbers() -> None:
    s = at.tag_numbers(pd.Series(["0x0000001f", None, "12", "junk"]))
    assert [None if pd.isna(v) else int(v) for v in s] == [31, None, 12, None]
    assert list(at.tag_numbers(pd.Series([1, 2]))) == [1, 2]
