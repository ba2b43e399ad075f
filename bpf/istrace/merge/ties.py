"""Each merged row's command (cmd_id, docs/schema.md §6), a block of rows at a time: the rules
of istrace.capture.attribution, which look a row up in the initiator's commands and PDUs and
never at the other rows, so blocks give what the whole table would."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from istrace.capture import attribution

# the columns the rules look at
_NEED = ["host", "layer", "event", "source", "conn", "dir", "seq", "ack", "itt", "bytes", "lba",
         "ts_ns_merged", "offset", "pdu"]


class CommandTies:
    """The rules, given the initiator's PDUs and commands (pdus.csv with its `cmd` column,
    commands.csv), the PDUs' SeqIndex and the time slack the clock's bound allows."""

    def __init__(self, ini_pdus: pd.DataFrame, ini_cmds: pd.DataFrame, slack: int,
                 pdu_seq: attribution.SeqIndex) -> None:
        # `pdu_seq`: the PDUs' SeqIndex, made once by the caller (the segments' ties use it)
        self.pdu_seq, self.slack = pdu_seq, slack
        self.commands = ini_cmds.copy()
        if "cmd" not in self.commands:
            self.commands["cmd"] = np.arange(len(self.commands))
        self.pdu_cmd = PduCommands(ini_pdus["pdu"], ini_pdus["cmd"])

    def cmd_ids(self, block: pa.Table) -> pa.Array:
        """The command of each row of a block of merged rows (on the common clock)."""
        key = pa.table({c: (pc.dictionary_encode(block[c]) if pa.types.is_string(block[c].type)
                            else block[c]) if c in block.column_names
                        else pa.nulls(block.num_rows, pa.int64()) for c in _NEED})
        df = key.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
        cmd = pd.Series(pd.NA, index=df.index, dtype="Int64")
        commands, slack = self.commands, self.slack
        # initiator PDU rows: from the decoder
        pdu_rows = (df["source"] == "pcap") & (df["layer"] == "iscsi")
        ini_pdu_rows = (pdu_rows & (df["host"] == "initiator")).fillna(False).astype(bool)
        cmd[ini_pdu_rows] = self.pdu_cmd.of(df.loc[ini_pdu_rows, "pdu"].astype("float"))
        seq_rows = (df["host"] == "target") & pdu_rows | \
            ((df["source"] == "probe") & df["event"].isin(["retransmit", "tcp_probe"]))
        seq_rows = seq_rows.fillna(False).astype(bool) & df["seq"].notna() & df["conn"].notna()
        probe_seq = df.loc[seq_rows, ["conn", "dir", "seq", "ack", "event", "source"]].copy()
        # tcp_probe carries snd_nxt in seq and snd_una in ack: the oldest unacked byte
        is_probe = probe_seq["event"] == "tcp_probe"
        probe_seq.loc[is_probe, "seq"] = probe_seq.loc[is_probe, "ack"]
        probe_seq = probe_seq.dropna(subset=["seq", "dir"])
        if len(probe_seq):
            # the initiator's PDUs give each command's byte range: its own clock is the merged one
            cmd.loc[probe_seq.index] = self.pdu_seq.cmds(
                df.loc[probe_seq.index, "ts_ns_merged"].to_numpy(np.int64), probe_seq["conn"],
                probe_seq["dir"], probe_seq["seq"])
        # ITT-carrying probe events
        itt_rows = ((df["source"] == "probe") & df["itt"].notna()).fillna(False).astype(bool)
        if itt_rows.any():
            cmd[itt_rows] = attribution.by_itt(_times(df, itt_rows), df.loc[itt_rows, "itt"],
                                               commands, slack)
        # syscall / block: by time on the host's clock moved to the initiator's
        time_rows = (df["source"] == "probe") & df["layer"].isin(["syscall", "block"])
        time_rows = time_rows.fillna(False).astype(bool)
        if time_rows.any():
            cmd[time_rows] = attribution.by_time(_times(df, time_rows), commands, slack)
        off_rows = time_rows & df["offset"].notna()
        if off_rows.any():
            by_off = pd.Series(attribution.by_offset(_times(df, off_rows),
                                                     df.loc[off_rows, "offset"], commands,
                                                     slack), index=df.index[off_rows])
            cmd[off_rows] = by_off.where(by_off.notna(), cmd[off_rows])
        _tie_by_lba(df, cmd, commands, slack)
        return pa.array(cmd, type=pa.int64(), from_pandas=True)


class PduCommands:
    """Each initiator PDU's command by the PDU's number (the first row of a number given
    twice), kept as runs: PDUs numbered in a row with one command (or none) are one entry.
    A command's Data-In PDUs are numbered in a row but where another command's PDU comes
    between: with 8 KiB PDUs, a few runs a command for 512 PDUs, where a table indexed by
    PDU number (and its hash table) held a row per PDU through the merge."""

    def __init__(self, pdu: pd.Series, cmd: pd.Series) -> None:
        p = pd.to_numeric(pdu, errors="coerce").to_numpy(np.float64)
        c = pd.to_numeric(cmd, errors="coerce").astype("Int64").array
        ok = np.flatnonzero(~np.isnan(p))
        order = ok[np.argsort(p[ok], kind="stable")]  # equal numbers: the first row first
        num = p[order].astype(np.int64)
        first = np.concatenate([[True], num[1:] != num[:-1]])[:len(num)]
        order, num = order[first], num[first]
        val = c.to_numpy(np.int64, na_value=-1)[order]
        has = ~c.isna()[order]
        new_run = np.concatenate([[True], (num[1:] != num[:-1] + 1) | (val[1:] != val[:-1])
                                  | (has[1:] != has[:-1])])[:len(num)]
        at = np.flatnonzero(new_run)
        self.start, self.cmd, self.has = num[at], val[at], has[at]
        self.end = np.append(num[at[1:] - 1], num[-1]) if len(at) else num[:0]

    def __len__(self) -> int:
        return len(self.start)

    def of(self, pdu: pd.Series) -> pd.arrays.IntegerArray:
        """The command of each PDU number (<NA>: none, or a number not in the table)."""
        x = pdu.to_numpy(np.float64, na_value=np.nan)
        out = np.zeros(len(x), np.int64)
        whole = ~np.isnan(x)
        whole[whole] = x[whole] == np.floor(x[whole])
        xi = np.where(whole, x, -1).astype(np.int64)
        j = np.searchsorted(self.start, xi, side="right") - 1
        hit = whole & (j >= 0)
        jj = np.where(hit, j, 0)
        if len(self.start):
            hit &= (xi <= self.end[jj]) & self.has[jj]
            out[hit] = self.cmd[jj[hit]]
        else:
            hit[:] = False
        return pd.arrays.IntegerArray(out, ~hit)


def _tie_by_lba(df: pd.DataFrame, cmd: pd.Series, commands: pd.DataFrame, slack: int) -> None:
    """A kernel initiator's block, SCSI midlayer and iscsi_tcp events carry the LBA but no
    ITT (it is assigned later): tie them by LBA and size, which is exact where time is a
    guess (many commands outstanding). Block events count 512-byte sectors, the SCSI LBA
    counts the LUN's blocks. Initiator only: a target's block events are its backing store's
    sectors, which need not be the LUN's."""
    # ... and the ITT-carrying ones the ITT rule left out: iscsi_tcp hands a command to TCP
    # before the capture sees it on the wire, by more than the slack on a slow (emulated) host
    rows = ((df["source"] == "probe") & (df["host"] == "initiator")
            & (df["itt"].isna() | cmd.isna())
            & df["lba"].notna() & df["layer"].isin(["block", "scsi", "iscsi"]))
    rows = rows.fillna(False).astype(bool)
    if not rows.any():
        return
    lba = pd.to_numeric(df.loc[rows, "lba"], errors="coerce")
    blocks = df.loc[rows, "layer"] == "block"
    bs = attribution.block_size(commands)
    lba = lba.where(~blocks, lba * 512 // bs)
    got = pd.Series(attribution.by_lba(_times(df, rows), lba, df.loc[rows, "bytes"], commands,
                                       slack, attribution.ITT_LATE_NS), index=df.index[rows])
    cmd[rows] = got.where(got.notna(), cmd[rows])


def _times(df: pd.DataFrame, rows: pd.Series) -> np.ndarray:
    """ts_ns_merged of the chosen rows: the initiator's clock, the one commands.csv is on."""
    return df.loc[rows, "ts_ns_merged"].to_numpy(np.int64)

