"""Each command's (and data PDU's) data span at a capture point, from its TCP sequence range:
past 4 GiB of stream, in any slicing of the segments and any blocking of the PDUs."""

import numpy as np
import pandas as pd
from istrace.capture.decoded import conn_and_dir
from istrace.measure.spans import segment_spans, span_arrays


def test_command_spans_past_4_gib_and_any_slicing():
    """A minute at full rate sends several times 2^32 bytes: each command's span must come
    from its own segments, not from those 4 GiB earlier or later with the same sequence
    numbers mod 2^32 (seen: 39 s spans of 4 GiB "commands" on a 60 s capture)."""
    seg_len, per_cmd, n_cmds = 65536, 1024, 200  # 64 MiB commands: 12.5 GiB in all
    isn = 4_000_000_000
    k = np.arange(n_cmds * per_cmd, dtype=np.int64)
    ts = 1_000_000_000 + k * 10_000                     # a segment every 10 us
    segs = pd.DataFrame({
        "frame": k, "ts_ns": ts, "src": "10.0.0.2", "sport": 3260, "dst": "10.0.0.1",
        "dport": 40000, "seq": (isn + 1 + k * seg_len) % 2**32, "ack": 1, "flags": 0x18,
        "win": 500, "len": seg_len, "wscale": -1, "mss": -1, "tsval": -1, "tsecr": -1,
        "sack": 0})
    segs = conn_and_dir(segs)
    cmd_bytes = per_cmd * seg_len
    # one Data-In PDU per command, its 48-byte header at the command's first byte
    cmds = np.arange(n_cmds)
    pdus = pd.DataFrame({
        "conn": segs["conn"].iloc[0], "dir": "t2i", "opcode_name": "SCSI Data-In",
        "cmd": cmds, "pdu": cmds, "ts_ns": 1_000_000_000 + cmds * per_cmd * 10_000,
        "tcp_seq": (isn + 1 + cmds * cmd_bytes) % 2**32, "ahs_len": 0,
        "dsl": cmd_bytes - 48})
    assert (isn + 1 + n_cmds * cmd_bytes) // 2**32 >= 3  # the stream wraps three times
    want_start = 1_000_000_000 + cmds * per_cmd * 10_000
    want_end = want_start + (per_cmd - 1) * 10_000
    for rows in (1 << 16, 999, 10**9):
        sp = segment_spans(pdus, segs, "t", "target", "t2i", slice_rows=rows)
        assert sp["cmd"].tolist() == cmds.tolist()
        assert (sp["start_ns"].to_numpy() == want_start).all(), rows
        assert (sp["end_ns"].to_numpy() == want_end).all(), rows
        assert (sp["bytes"] == cmd_bytes).all()


def test_spans_of_small_pdus_from_blocks_are_those_of_the_table():
    """8 KiB PDUs, 16 a command, some sent among the next command's, the stream wrapping:
    each command's and each PDU's span is its own segments' first and last time, whether
    the PDUs come as one table or in blocks of any size (the report reads them a block at a
    time, keeping only each command's range of the stream)."""
    seg_len, per_cmd, n_cmds = 8192, 16, 300
    isn = 2**32 - 10 * seg_len
    n = per_cmd * n_cmds
    rng = np.random.default_rng(5)
    cmd = np.repeat(np.arange(n_cmds), per_cmd)
    moved = np.flatnonzero(rng.random(n) < 0.05)
    moved = moved[cmd[moved] < n_cmds - 1]
    cmd[moved] += 1  # this segment's PDU belongs to the next command
    k = np.arange(n, dtype=np.int64)
    ts = 10**9 + k * 7_000
    segs = conn_and_dir(pd.DataFrame({
        "frame": k, "ts_ns": ts, "src": "10.0.0.2", "sport": 3260, "dst": "10.0.0.1",
        "dport": 40000, "seq": (isn + 1 + k * seg_len) % 2**32, "ack": 1, "flags": 0x18,
        "win": 500, "len": seg_len, "wscale": -1, "mss": -1, "tsval": -1, "tsecr": -1,
        "sack": 0}))
    pdus = pd.DataFrame({
        "conn": segs["conn"].iloc[0], "dir": "t2i", "opcode_name": "SCSI Data-In",
        "cmd": cmd, "pdu": k, "ts_ns": ts, "tcp_seq": (isn + 1 + k * seg_len) % 2**32,
        "ahs_len": 0, "dsl": seg_len - 48})
    want = pd.DataFrame({"cmd": cmd, "ts": ts}).groupby("cmd")["ts"].agg(["min", "max"])
    for key in ("cmd", "pdu"):
        one = list(span_arrays(pdus, segs, "t2i", key))
        assert len(one) == 1
        if key == "cmd":
            assert one[0].keys.tolist() == want.index.tolist()
            assert (one[0].first == want["min"].to_numpy()).all()
            assert (one[0].last == want["max"].to_numpy()).all()
            # a command's range: from its lowest PDU's first byte to its highest's last
            assert (one[0].bytes == (want["max"] - want["min"]) // 7_000 * seg_len
                    + seg_len).all()
        else:
            assert (one[0].keys == k).all() and (one[0].first == ts).all()
            assert (one[0].last == ts).all() and (one[0].bytes == seg_len).all()
        for rows in (1, 7, 100, 10**6):
            got = list(span_arrays((pdus.iloc[a:a + rows]
                                         for a in range(0, len(pdus), rows)),
                                        segs, "t2i", key, slice_rows=999))
            assert len(got) == 1 and got[0].conn == one[0].conn
            for f in ("keys", "first", "last", "bytes"):
                np.testing.assert_array_equal(getattr(got[0], f), getattr(one[0], f))
