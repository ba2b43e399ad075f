"""Python access to the decoder's tables (docs/schema.md §2-4).

    from istrace.capture.decoded import decode_to_dir, load_pdus, load_commands
    out = decode_to_dir("trace.pcap", "out/decoded", ports=[3260])
    cmds = load_commands(out)
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path

import pandas as pd
from istrace.system import paths

PDU_FILE = "pdus.csv"
COMMAND_FILE = "commands.csv"
CONNECTION_FILE = "connections.csv"

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


def decode_to_dir(pcap: str | Path, outdir: str | Path, ports: Iterable[int] = (),
                  block_size: int | None = None, timeout: float | None = None) -> Path:
    """Decode `pcap` into outdir/pdus.csv, commands.csv, connections.csv; returns outdir."""
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    cmd = [str(paths.binary("istrace-decode")), "-q", "--csv-dir", str(out)]
    for p in ports:
        cmd += ["--port", str(int(p))]
    if block_size:
        cmd += ["--block-size", str(int(block_size))]
    cmd.append(str(pcap))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if r.returncode != 0:
        msg = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
        raise DecodeError(msg, r.returncode)
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
