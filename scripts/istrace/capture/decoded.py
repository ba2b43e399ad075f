"""Python access to the decoder's tables (docs/schema.md §2-4b). The C decoder is the only
reader of capture files; Python loads what it writes.

    from istrace.capture.decoded import decode_to_dir, load_pdus, load_commands, load_segments
    out = decode_to_dir("trace.pcap", "out/decoded", ports=[3260])
    cmds = load_commands(out)
    segs = conn_and_dir(load_segments("trace.pcap", cache_dir=out))   # every TCP segment
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
from istrace.capture.conn import conn_key
from istrace.system import paths

PDU_FILE = "pdus.csv"
COMMAND_FILE = "commands.csv"
CONNECTION_FILE = "connections.csv"
SEGMENT_FILE = "segments.csv"

TCP_FIN, TCP_SYN, TCP_RST, TCP_PSH, TCP_ACK = 0x01, 0x02, 0x04, 0x08, 0x10
# segments.csv (schema §4b): every column an int64 but the two addresses.
SEGMENT_COLUMNS = ["frame", "ts_ns", "src", "sport", "dst", "dport", "seq", "ack", "flags",
                   "win", "len", "wscale", "mss", "tsval", "tsecr", "sack"]
_SEG_TYPES = {c: pa.string() if c in ("src", "dst") else pa.int64() for c in SEGMENT_COLUMNS}

# Columns that hold text even when every value looks like a number (hex tags, names).
_PDU_TEXT = ["conn", "dir", "opcode_name", "flags", "itt", "ttt", "cdb_name", "status_name",
             "sense_text", "residual_kind", "hdigest", "ddigest", "kv", "note"]
_CMD_TEXT = ["conn", "itt", "cdb_name", "direction", "status_name", "sense_text",
             "residual_kind"]
_CONN_TEXT = ["conn", "initiator_name", "target_name", "session_type", "isid", "HeaderDigest",
              "DataDigest", "ImmediateData", "InitialR2T", "notes"]
# Integer columns that may be empty: nullable Int64 keeps them integers in pandas.
_PDU_INT = ["lun", "cmdsn", "expstatsn", "statsn", "expcmdsn", "maxcmdsn", "datasn", "r2tsn",
            "buffer_offset", "desired_len", "edtl", "cdb_opcode", "lba", "xfer_blocks",
            "xfer_bytes", "status", "response", "sense_key", "asc", "ascq", "residual", "cmd"]
_CMD_INT = ["lba", "xfer_blocks", "xfer_bytes", "first_data_ts_ns", "last_data_ts_ns",
            "resp_ts_ns", "status", "sense_key", "asc", "ascq", "residual"]
_CONN_INT = ["tsih", "cid", "mrdsl_i2t", "mrdsl_t2i", "MaxBurstLength", "FirstBurstLength",
             "MaxOutstandingR2T"]


class DecodeError(RuntimeError):
    """istrace-decode failed; `returncode` is its exit status (3: no iSCSI in the capture)."""

    def __init__(self, message: str, returncode: int) -> None:
        super().__init__(message)
        self.returncode = returncode


def _run(cmd: list[str], timeout: float | None) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if r.returncode != 0:
        msg = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
        raise DecodeError(msg, r.returncode)


def decode_to_dir(pcap: str | Path, outdir: str | Path, ports: Iterable[int] = (),
                  block_size: int | None = None, timeout: float | None = None) -> Path:
    """Decode `pcap` into outdir/pdus.csv, commands.csv, connections.csv and segments.csv;
    returns outdir."""
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    cmd = [str(paths.binary("istrace-decode")), "-q", "--csv-dir", str(out)]
    for p in ports:
        cmd += ["--port", str(int(p))]
    if block_size:
        cmd += ["--block-size", str(int(block_size))]
    cmd.append(str(pcap))
    _run(cmd, timeout)
    return out


def read_segments_csv(path: str | Path) -> pd.DataFrame:
    """A segments.csv as written by the decoder: int64 columns, text addresses."""
    table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
        column_types=_SEG_TYPES, include_columns=SEGMENT_COLUMNS))
    return table.to_pandas()


def load_segments(pcap: str | Path, cache_dir: str | Path | None = None,
                  timeout: float | None = None) -> pd.DataFrame:
    """Every TCP segment of a capture (schema §4b), one row each, in file order.

    The decoder writes the table (`istrace-decode --segments`, no iSCSI decoding). With
    `cache_dir` it goes to cache_dir/segments.csv and is reused while it is newer than the
    capture (decode_to_dir leaves one there too); without, it is read and thrown away.
    Raises DecodeError (returncode 2: not a readable capture) or paths.MissingBinary.
    """
    pcap = Path(pcap)
    if not pcap.is_file():
        raise DecodeError(f"{pcap}: no such file", 2)
    exe = str(paths.binary("istrace-decode"))
    if cache_dir is not None:
        out = Path(cache_dir) / SEGMENT_FILE
        if out.is_file() and out.stat().st_mtime >= pcap.stat().st_mtime:
            return read_segments_csv(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".segments-", suffix=".csv", dir=out.parent)
    else:
        fd, tmp = tempfile.mkstemp(prefix="istrace-segments-", suffix=".csv")
    os.close(fd)
    try:
        _run([exe, "-q", "--segments", tmp, str(pcap)], timeout)
        if cache_dir is None:
            return read_segments_csv(tmp)
        os.replace(tmp, out)  # readers never see a half-written table
        return read_segments_csv(out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def conn_and_dir(segs: pd.DataFrame, target_ports: tuple[int, ...] = (3260,)) -> pd.DataFrame:
    """Add `conn` (initiator side first, docs/schema.md) and `dir` (i2t/t2i) to a segments table.

    The target is the side whose port is an iSCSI port; failing that, the side that answered
    a SYN (SYN+ACK sender); failing that, the lower port. Worked out once per distinct
    (src, sport, dst, dport), so a capture of millions of segments costs a group-by.
    """
    out = segs.copy()
    if out.empty:
        out["conn"] = pd.Series(dtype=object)
        out["dir"] = pd.Series(dtype=object)
        return out
    synack = out[(out["flags"] & (TCP_SYN | TCP_ACK)) == (TCP_SYN | TCP_ACK)]
    servers = set(zip(synack["src"].astype(str).tolist(), synack["sport"].tolist(), strict=True))
    key = ["src", "sport", "dst", "dport"]
    codes = out.groupby(key, sort=False, dropna=False).ngroup().to_numpy()
    uniq = out[key].drop_duplicates()  # first-appearance order, as ngroup(sort=False) numbers
    src, dst = uniq["src"].astype(str).tolist(), uniq["dst"].astype(str).tolist()
    sport, dport = uniq["sport"].tolist(), uniq["dport"].tolist()
    conn, direction = [], []
    for s, sp, d, dp in zip(src, sport, dst, dport, strict=True):
        if sp in target_ports and dp not in target_ports:
            tgt = True
        elif sp in target_ports or dp in target_ports:
            tgt = False
        else:  # neither end on an iSCSI port: the SYN+ACK sender, else the lower port
            tgt = (s, sp) in servers or (sp < dp and (d, dp) not in servers)
        conn.append(conn_key(d, dp, s, sp) if tgt else conn_key(s, sp, d, dp))
        direction.append("t2i" if tgt else "i2t")
    out["conn"] = np.asarray(conn, dtype=object)[codes]
    out["dir"] = np.asarray(direction, dtype=object)[codes]
    return out


def _load(path: Path, text: list[str], ints: list[str]) -> pd.DataFrame:
    # Parsing nullable integers directly keeps 64-bit nanosecond times exact (no float trip).
    dtypes: dict[str, str] = {c: "string" for c in text}
    dtypes.update({c: "Int64" for c in ints})
    if "resp_time_us" not in dtypes:
        dtypes["resp_time_us"] = "float64"
    df = pd.read_csv(path, dtype=dtypes, keep_default_na=False,
                     na_values={c: [""] for c in [*ints, "resp_time_us"]})
    for c in text:
        if c in df.columns:
            df[c] = df[c].replace("", pd.NA)
    return df


def _file(d: str | Path, name: str) -> Path:
    p = Path(d)
    return p if p.is_file() else p / name


def load_pdus(d: str | Path) -> pd.DataFrame:
    """pdus.csv of a decode directory (or the file itself) as a DataFrame."""
    return _load(_file(d, PDU_FILE), _PDU_TEXT, _PDU_INT)


def load_commands(d: str | Path) -> pd.DataFrame:
    """commands.csv: one row per SCSI command, in issue order."""
    return _load(_file(d, COMMAND_FILE), _CMD_TEXT, _CMD_INT)


def load_connections(d: str | Path) -> pd.DataFrame:
    """connections.csv: one row per iSCSI connection with its negotiated values."""
    return _load(_file(d, CONNECTION_FILE), _CONN_TEXT, _CONN_INT)
