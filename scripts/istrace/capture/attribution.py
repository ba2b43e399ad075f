"""Which SCSI command a row belongs to (its cmd_id, docs/schema.md §6): the one set of rules
the merger (istrace.merge) and the plots (istrace.plot.data) share.

`commands` is the initiator's commands.csv (schema §3): `cmd` (the command's id; the row
position when absent), `issue_ts_ns`, `resp_ts_ns`, `itt`, `lba`, `xfer_bytes`,
`xfer_blocks`. Its times are on the initiator's clock, so every rule takes the rows' times as
an explicit array on that clock: the merger passes ts_ns_merged, the plots ts_ns minus the
target's clock offset for target rows.

Every rule returns a nullable Int64 array aligned with its inputs (missing: no command).
The time rules share one notion of a command's life: from its issue to its response, widened
by `slack_ns` on both sides (the clock offset's uncertainty; the merger uses twice the offset
bound, at least SLACK_NS); a command with no response lives to the end of the capture.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import pandas as pd
from istrace.capture import tcpseq
from istrace.capture.labels import label_codes

SLACK_NS = 2_000_000
# An application (libiscsi, tgtd) sees a response well after the wire does (scheduling,
# queueing): an ITT-carrying event may come this long after its command's response.
ITT_LATE_NS = 1_000_000_000
DEFAULT_BLOCK_SIZE = 512

_NEVER = np.iinfo(np.int64).max // 4  # "no response seen": beyond any time, with room to add


def tag_numbers(s: pd.Series) -> pd.Series:
    """ITT/TTT columns as Int64: the decoder's '0x0000001f' text, or plain integers."""
    if pd.api.types.is_numeric_dtype(s.dtype):
        return pd.to_numeric(s, errors="coerce").astype("Int64")

    def parse(v: Any) -> float:
        try:
            return float(int(str(v).strip(), 0))
        except ValueError:
            return float("nan")

    # parse each distinct text once: tags repeat across the PDUs of a command
    mapping = {u: parse(u) for u in pd.unique(s.dropna())}
    return s.map(mapping).astype("Float64").astype("Int64")


def end_times(commands: pd.DataFrame) -> np.ndarray:
    """Response time of each command (int64 ns); far future when the capture ended first."""
    if "resp_ts_ns" not in commands:
        return np.full(len(commands), _NEVER, dtype=np.int64)
    resp, seen = _ints(commands["resp_ts_ns"])
    return np.where(seen, resp, _NEVER)


def block_size(commands: pd.DataFrame) -> int:
    """The LUN's block size: the commands' typical bytes per block (512 when unknown)."""
    if "xfer_blocks" not in commands or "xfer_bytes" not in commands:
        return DEFAULT_BLOCK_SIZE
    blocks = pd.to_numeric(commands["xfer_blocks"], errors="coerce")
    nbytes = pd.to_numeric(commands["xfer_bytes"], errors="coerce")
    bs = (nbytes / blocks).where(blocks > 0).round()
    return int(bs.median()) if bs.notna().any() else DEFAULT_BLOCK_SIZE


def _ints(x: Any) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values, valid mask) of a column that may hold missing values; nanosecond
    times stay exact (no trip through float)."""
    if isinstance(x, pd.Series) and isinstance(x.dtype, pd.Int64Dtype):  # as read: no copies
        return x.array.to_numpy(np.int64, na_value=0), ~x.array.isna()
    s = pd.to_numeric(pd.Series(x.array if isinstance(x, pd.Series) else x), errors="coerce")
    if pd.api.types.is_float_dtype(s.dtype):
        s = s.round()
    s = s.astype("Int64")
    return s.fillna(0).to_numpy(np.int64), s.notna().to_numpy(bool)


def _result(cmd: np.ndarray, found: np.ndarray) -> pd.arrays.IntegerArray:
    return pd.arrays.IntegerArray(cmd.astype(np.int64), ~found)


def _cmd_ids(commands: pd.DataFrame) -> np.ndarray:
    if "cmd" in commands:
        return pd.to_numeric(commands["cmd"], errors="coerce").to_numpy(np.float64)
    return np.arange(len(commands), dtype=np.float64)


def _latest_issued(t: np.ndarray, keys: list[np.ndarray], valid: np.ndarray,
                   commands: pd.DataFrame, ckeys: list[np.ndarray], cvalid: np.ndarray,
                   slack_ns: int, late_ns: int, forward: bool = False
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The core of the time rules: among commands with the same keys, the latest issued
    before t + slack, if t is still within its life + slack + late_ns. With `forward`, the
    first issued after t - slack instead, whatever its life."""
    n = len(t)
    cmd_out = np.zeros(n, np.int64)
    found = np.zeros(n, bool)
    issue, ok_issue = _ints(commands["issue_ts_ns"]) if "issue_ts_ns" in commands else \
        (np.zeros(len(commands), np.int64), np.zeros(len(commands), bool))
    ids = _cmd_ids(commands)
    cok = cvalid & ok_issue & ~np.isnan(ids)
    if not n or not cok.any() or not valid.any():
        return cmd_out, found
    by = [f"k{j}" for j in range(len(keys))]
    left = pd.DataFrame({"t": t[valid].astype(np.int64), "i": np.flatnonzero(valid),
                         **{b: k[valid] for b, k in zip(by, keys, strict=True)}})
    right = pd.DataFrame({"t": issue[cok] - slack_ns,
                          "end": end_times(commands)[cok] + slack_ns + late_ns,
                          "cmd": ids[cok].astype(np.int64),
                          **{b: k[cok] for b, k in zip(by, ckeys, strict=True)}})
    mm = pd.merge_asof(left.sort_values("t", kind="stable"),
                       right.sort_values("t", kind="stable"), on="t", by=by or None,
                       direction="forward" if forward else "backward")
    ok = mm["cmd"].notna().to_numpy()
    if not forward:
        ok = ok & (mm["t"] <= mm["end"]).to_numpy()
    cmd_out[mm["i"].to_numpy()[ok]] = mm["cmd"].to_numpy()[ok].astype(np.int64)
    found[mm["i"].to_numpy()[ok]] = True
    return cmd_out, found


def by_itt(t: np.ndarray, itt: Any, commands: pd.DataFrame, slack_ns: int = SLACK_NS,
           late_ns: int = ITT_LATE_NS) -> pd.arrays.IntegerArray:
    """By initiator task tag: the command with that ITT issued last before the row's time
    (+ slack), while the row is within its life + slack + late_ns. Tags are reused, so the
    latest issue before the event owns it, never a later one."""
    tags, valid = _ints(tag_numbers(pd.Series(itt).reset_index(drop=True)))
    if "itt" not in commands:
        return _result(np.zeros(len(t), np.int64), np.zeros(len(t), bool))
    ctags, cvalid = _ints(tag_numbers(commands["itt"].reset_index(drop=True)))
    cmd, found = _latest_issued(np.asarray(t, np.int64), [tags], valid, commands, [ctags],
                                cvalid, slack_ns, late_ns)
    return _result(cmd, found)


def by_offset(t: np.ndarray, offset: Any, commands: pd.DataFrame,
              slack_ns: int = SLACK_NS) -> pd.arrays.IntegerArray:
    """By LUN file offset: a pread/pwrite of the backing file at LBA x block size (tgtd's
    backing store) belongs to the command with that LBA issued last before the call
    (+ slack), while the call is within the command's life + slack."""
    off, valid = _ints(offset)
    if "lba" not in commands:
        return _result(np.zeros(len(off), np.int64), np.zeros(len(off), bool))
    lba, cvalid = _ints(commands["lba"])
    cmd, found = _latest_issued(np.asarray(t, np.int64), [off], valid, commands,
                                [lba * block_size(commands)], cvalid, slack_ns, 0)
    return _result(cmd, found)


def by_lba(t: np.ndarray, lba: Any, nbytes: Any, commands: pd.DataFrame,
           slack_ns: int = SLACK_NS, late_ns: int = 0) -> pd.arrays.IntegerArray:
    """By LBA and size (SCSI-layer events, which carry the CDB): the command with that LBA
    and transfer size issued last before the event (+ slack), while the event is within its
    life + slack (+ late_ns: completions above the wire come after its response); failing
    the size (unknown on either side, or different), by LBA alone; failing the life, the next
    command with that LBA (the midlayer may dispatch a command long before the initiator's
    iSCSI layer puts it on the wire)."""
    t = np.asarray(t, np.int64)
    lb, valid = _ints(lba)
    n = len(lb)
    if "lba" not in commands:
        return _result(np.zeros(n, np.int64), np.zeros(n, bool))
    clba, cvalid = _ints(commands["lba"])
    size, size_ok = _ints(nbytes) if nbytes is not None else \
        (np.zeros(n, np.int64), np.zeros(n, bool))
    csize, csize_ok = _ints(commands["xfer_bytes"]) if "xfer_bytes" in commands else \
        (np.zeros(len(commands), np.int64), np.zeros(len(commands), bool))
    cmd, found = _latest_issued(t, [lb, size], valid & size_ok, commands, [clba, csize],
                                cvalid & csize_ok, slack_ns, late_ns)
    for forward in (False, True):
        more, f2 = _latest_issued(t, [lb], valid & ~found, commands, [clba], cvalid,
                                  slack_ns, late_ns, forward=forward)
        cmd = np.where(f2, more, cmd)
        found |= f2
    return _result(cmd, found)


def by_time(t: np.ndarray, commands: pd.DataFrame,
            slack_ns: int = SLACK_NS) -> pd.arrays.IntegerArray:
    """By time: the command outstanding at the row's time, i.e. the latest issued (before
    t + slack) whose life + slack has not ended. Exact at queue depth 1, a best guess above
    (syscall and block events, which carry no tag)."""
    t = np.asarray(t, np.int64)
    valid = np.ones(len(t), bool)
    cmd, found = _latest_issued(t, [], valid, commands, [], np.ones(len(commands), bool),
                                slack_ns, 0)
    return _result(cmd, found)


def by_seq(t: np.ndarray, conn: Any, direction: Any, seq: Any, pdus: pd.DataFrame,
           pdu_ts_ns: np.ndarray | None = None) -> pd.arrays.IntegerArray:
    """By TCP sequence range: the command of the PDU (same conn and dir) that starts at or
    before the row's sequence number, i.e. whose bytes the row carries (both ends see the
    same sequence numbers). PDUs without a command are passed over (the row goes to the
    command PDU before them).

    32-bit sequence numbers are unwrapped with istrace.capture.tcpseq: the PDUs in time
    order (`pdu_ts_ns`, default pdus.ts_ns, on the rows' clock), each row next to the PDU sent
    last before it, so streams of any length stay ordered.
    Rows that come in blocks: SeqIndex once, its `cmds` per block.
    """
    return SeqIndex(pdus, pdu_ts_ns).cmds(t, conn, direction, seq)


# the sequence space each anchor of SeqIndex stands for (a byte is placed by the one before
# it in time: within this of the PDU sent last before it, far inside the 2 GiB either side
# an anchor places)
ANCHOR_STEP = 1 << 24


class SeqIndex:
    """The PDUs by connection and direction, ordered for by_seq's lookups: made once for all
    the blocks of rows tied to them: made again for each block and scanned whole per
    connection, the index was a large share of the merge's CPU."""

    def __init__(self, pdus: pd.DataFrame | None, pdu_ts_ns: np.ndarray | None = None) -> None:
        # per (conn, dir): PDU times in order, their sequence numbers as sent and unwrapped;
        # the unwrapped starts of the PDUs with a command, in order, and those commands
        self._groups: dict[tuple[Any, Any], tuple[np.ndarray, ...]] = {}
        if pdus is None or pdus.empty or "tcp_seq" not in pdus:
            return
        p_seq, seq_ok = _ints(pdus["tcp_seq"])
        p_t, t_ok = _ints(pdus["ts_ns"] if pdu_ts_ns is None else pdu_ts_ns)
        # labels as codes, the PDUs put in time order by position: a pandas table of the
        # PDUs with text labels, sorted and grouped, held several copies of every PDU
        c_code, c_names = label_codes(pdus["conn"])
        d_code, d_names = label_codes(pdus["dir"])
        all_cmd = _cmd_ids(pdus) if "cmd" in pdus else np.full(len(pdus), np.nan)
        ok = np.flatnonzero(seq_ok & t_ok & (c_code >= 0) & (d_code >= 0))
        ok = ok[np.argsort(p_t[ok], kind="stable")]
        nd = max(len(d_names), 1)
        group = c_code[ok].astype(np.int64) * nd + d_code[ok]
        for g in pd.unique(group):
            pos = ok[group == g]
            key = (c_names[g // nd], d_names[g % nd])
            ps, pc = p_seq[pos], all_cmd[pos]
            po = tcpseq.unwrap(ps, int(ps[0]))
            has = ~np.isnan(pc)
            if not has.any():
                continue
            order = np.argsort(po[has], kind="stable")
            starts, cmds = po[has][order], pc[has][order].astype(np.int64)
            # A command's PDUs in a row, one entry: the lookup takes the last start at or
            # before a byte, whose command is its run's first's. Anchors, one where the
            # stream enters a new ANCHOR_STEP of sequence space: an anchor only places a
            # byte within 2 GiB of it. Both were a row per PDU, 40 B each, in the merge and
            # each segment writer (a minute of 8 KiB Data-In PDUs has 1.3 million).
            run = np.concatenate([[True], cmds[1:] != cmds[:-1]])
            step = po // ANCHOR_STEP
            anchor = np.concatenate([[True], step[1:] != step[:-1]])
            self._groups[key] = (p_t[pos][anchor], ps[anchor], po[anchor], starts[run],
                                 cmds[run])

    def held(self) -> tuple[int, int]:
        """(anchors, command runs) held over every connection and direction: what grows
        with the PDUs."""
        return (sum(len(g[0]) for g in self._groups.values()),
                sum(len(g[3]) for g in self._groups.values()))

    def cmds(self, t: np.ndarray, conn: Any, direction: Any,
             seq: Any) -> pd.arrays.IntegerArray:
        """by_seq of these rows: each row's command, <NA> where none."""
        seq_v, valid = _ints(seq)
        t = np.asarray(t, np.int64)
        n = len(seq_v)
        cmd_out = np.zeros(n, np.int64)
        found = np.zeros(n, bool)
        if not n or not self._groups:
            return _result(cmd_out, found)
        # labels as categoricals: millions of rows name a few connections, grouped by code
        rows = pd.DataFrame({"conn": pd.Series(conn).reset_index(drop=True).astype("category"),
                             "dir": pd.Series(direction).reset_index(drop=True)
                             .astype("category")})
        valid = valid & rows["conn"].notna().to_numpy() & rows["dir"].notna().to_numpy()
        groups = rows[valid].groupby(["conn", "dir"], sort=False, observed=True).indices
        sel = np.flatnonzero(valid)
        for key, pos in groups.items():
            g = self._groups.get(cast(tuple[Any, Any], key))  # grouped by two columns
            if g is None:
                continue
            pt, ps, po, starts, cmds = g
            idx = sel[pos]
            anchor = np.clip(np.searchsorted(pt, t[idx], "right") - 1, 0, None)
            # the row's signed distance from its anchor PDU: within 2 GiB either side
            off = po[anchor] + tcpseq.rel(seq_v[idx] - ps[anchor], 0)
            k = np.searchsorted(starts, off, "right") - 1
            ok = k >= 0
            cmd_out[idx[ok]] = cmds[k[ok]]
            found[idx[ok]] = True
        return _result(cmd_out, found)
