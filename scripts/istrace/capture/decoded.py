"""Python access to the decoder's tables (docs/schema.md §2-4b). The C decoder is the only
reader of capture files; Python loads what it writes.

    from istrace.capture.decoderun import decode_to_dir
    from istrace.capture.decoded import load_pdus, load_commands, load_segments
    out = decode_to_dir("trace.pcap", "out/decoded", ports=[3260])
    cmds = load_commands(out)
    segs = conn_and_dir(load_segments("trace.pcap", cache_dir=out))   # every TCP segment
"""

from __future__ import annotations

import mmap
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from istrace.capture import decoderun
from istrace.capture.conn import conn_key
from istrace.capture.decoderun import DecodeError

PDU_FILE = "pdus.csv"
# What the report's analyses read of a PDU (the tracker's command lookup, the verdict's data
# phases and R2Ts, the ladder, the spans and the trace): a pdus.csv row has 45 columns, most
# of them empty for most opcodes, and a minute's capture has 26 000 PDUs a host (2 million
# with 8 KiB Data-In PDUs), held by each of the report's four processes. The others (the
# sequence numbers of every kind, sense data, digests, text keys; the task tags, flags and
# per-command numbers the merge writes into merged.parquet, reading pdus.csv itself) are for
# people and queries reading pdus.csv and merged.parquet.
ANALYSED_PDU_COLUMNS = ["pdu", "ts_ns", "conn", "dir", "tcp_seq", "opcode_name", "ahs_len", "dsl",
                        "desired_len", "edtl", "cdb_name", "xfer_bytes", "cmd"]
COMMAND_FILE = "commands.csv"
CONNECTION_FILE = "connections.csv"
SEGMENT_FILE = "segments.bin"

TCP_FIN, TCP_SYN, TCP_RST, TCP_PSH, TCP_ACK = 0x01, 0x02, 0x04, 0x08, 0x10
# The segments table (schema §4b): integer columns (_SEG_MEMORY) but the two addresses.
SEGMENT_COLUMNS = ["frame", "ts_ns", "src", "sport", "dst", "dport", "seq", "ack", "flags",
                   "win", "len", "wscale", "mss", "tsval", "tsecr", "sack"]
# segments.bin (schema §4c, decoder/segments_bin.c): blocks of rows, each block a column after
# the other in SEG_FIELDS' order (little-endian), the addresses' text after them
# (NUL-terminated, in index order), the endpoint pairs (SEG_ENDPOINT each, in index order),
# then a 40-byte trailer. `ep`: the row's endpoint pair.
SEG_FIELDS = np.dtype([("ts_ns", "<i8"), ("frame", "<u8"), ("tsval", "<i8"), ("tsecr", "<i8"),
                       ("seq", "<u4"), ("ack", "<u4"), ("len", "<u4"), ("win", "<u4"),
                       ("src", "<u4"), ("dst", "<u4"), ("mss", "<i4"), ("ep", "<u4"),
                       ("sport", "<u2"), ("dport", "<u2"), ("flags", "u1"), ("wscale", "i1"),
                       ("sack", "u1")])
# a distinct (src, dst, sport, dport), addresses by index; synack 1: some row of it was a
# SYN+ACK (its source answered a SYN)
SEG_ENDPOINT = np.dtype([("src", "<u4"), ("dst", "<u4"), ("sport", "<u2"), ("dport", "<u2"),
                         ("synack", "u1"), ("pad", "V3")])
# In memory, each field in the signed type that holds it (a difference of two never wraps):
# the times, sequence numbers and timestamp options int64, the small fields narrower (54
# bytes a row instead of 90 for the columns the report reads, millions of rows a capture).
_SEG_MEMORY = {"flags": np.int16, "win": np.int32, "len": np.int32, "wscale": np.int8,
               "sack": np.int8, "mss": np.int32, "sport": np.int32, "dport": np.int32,
               "ep": np.int32}
_SEG_TRAILER = np.dtype([("magic", "S8"), ("row_bytes", "<u4"), ("n_addrs", "<u4"),
                         ("n_records", "<u8"), ("text_bytes", "<u8"), ("block_rows", "<u4"),
                         ("n_endpoints", "<u4")])
_SEG_MAGIC = b"ISTSEGS2"
# where each column starts in a block, in values of one byte per row before it
_SEG_NAMES: tuple[str, ...] = SEG_FIELDS.names or ()  # a structured dtype: never None
_SEG_PREFIX = {name: sum(SEG_FIELDS[m].itemsize for m in _SEG_NAMES[:i])
               for i, name in enumerate(_SEG_NAMES)}

def memory_type(column: str) -> type:
    """The type a segments column is held in (read_segments and istrace.capture.segsource)."""
    return _SEG_MEMORY.get(column, np.int64)


def segment_file_info(path: Path) -> tuple[int, pd.Index]:
    """(number of rows, the address labels) of a segments.bin, checked against its trailer;
    DecodeError when it is not one."""
    info = _SegmentTrailer.read(path)
    return info.n, info.labels


class _SegmentTrailer:
    """A segments.bin's counts, address list and endpoint pairs, checked against the file's
    size."""

    def __init__(self, n: int, block_rows: int, labels: pd.Index,
                 endpoints: np.ndarray) -> None:
        self.n, self.block_rows, self.labels, self.endpoints = n, block_rows, labels, endpoints

    @classmethod
    def read(cls, path: Path) -> _SegmentTrailer:
        size = path.stat().st_size
        if size < _SEG_TRAILER.itemsize:
            raise DecodeError(f"{path}: too short for a segments table", 2)
        t = np.fromfile(path, _SEG_TRAILER, count=1, offset=size - _SEG_TRAILER.itemsize)[0]
        n, text_bytes, block = int(t["n_records"]), int(t["text_bytes"]), int(t["block_rows"])
        n_ep, n_addrs = int(t["n_endpoints"]), int(t["n_addrs"])
        if t["magic"] != _SEG_MAGIC or int(t["row_bytes"]) != SEG_FIELDS.itemsize or \
                block <= 0 or block % 8 or n * SEG_FIELDS.itemsize + text_bytes + \
                n_ep * SEG_ENDPOINT.itemsize + _SEG_TRAILER.itemsize != size:
            raise DecodeError(f"{path}: not a segments table of this decoder (remove it to "
                              "decode again)", 2)
        with open(path, "rb") as f:
            f.seek(n * SEG_FIELDS.itemsize)
            names = f.read(text_bytes).decode().split("\0")
            eps = np.fromfile(f, SEG_ENDPOINT, count=n_ep)
        if len(names) < n_addrs or len(eps) != n_ep or (n_ep and max(
                int(eps["src"].max()), int(eps["dst"].max())) >= n_addrs):
            raise DecodeError(f"{path}: a segments table whose address list does not hold "
                              "its endpoints", 2)
        return cls(n, block, pd.Index(names[:n_addrs], dtype=object), eps)


# beyond the pages read, what a page fault may have mapped besides (the kernel maps up to
# 64 KiB of cached pages around a fault)
_FAULT_AROUND = 1 << 18


class SegmentBlocks:
    """A segments.bin mapped, its columns read a range of rows at a time (the one reader of
    the file's layout). Each read copies the rows' values out of the blocks that hold them
    and hands those blocks' pages back (they stay in the page cache: a later read maps them
    again), so a pass over the file holds a slice of it, not all."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        info = _SegmentTrailer.read(self.path)
        self.n, self.labels, self._block = info.n, info.labels, info.block_rows
        # the distinct endpoint pairs (SEG_ENDPOINT), each row's by its `ep` column
        self.endpoints = info.endpoints
        self._map: mmap.mmap | None = None

    def read(self, columns: Sequence[str], a: int, b: int) -> dict[str, np.ndarray]:
        """Rows a..b of each of `columns`, each in its memory_type."""
        a, b = max(a, 0), min(b, self.n)
        if b <= a:
            return {c: np.zeros(0, memory_type(c)) for c in columns}
        if self._map is None:
            with open(self.path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        out: dict[str, np.ndarray] = {c: np.empty(b - a, memory_type(c)) for c in columns}
        first, last = a // self._block, (b - 1) // self._block
        for k in range(first, last + 1):
            start = k * self._block
            rows = min(self._block, self.n - start)
            lo, hi = max(a, start) - start, min(b, start + rows) - start
            at = start * SEG_FIELDS.itemsize
            for c, v in out.items():
                t = SEG_FIELDS[c]
                col = np.frombuffer(self._map, t, rows, at + rows * _SEG_PREFIX[c])
                v[start + lo - a:start + hi - a] = col[lo:hi]
        self._give_back(first, last)
        return out

    def _give_back(self, first: int, last: int) -> None:
        assert self._map is not None
        row = SEG_FIELDS.itemsize
        lo = max(first * self._block * row - _FAULT_AROUND, 0) // mmap.PAGESIZE * mmap.PAGESIZE
        hi = min(min((last + 1) * self._block, self.n) * row + _FAULT_AROUND, len(self._map))
        self._map.madvise(mmap.MADV_DONTNEED, lo, hi - lo)


def _segment_frame(cols: dict[str, np.ndarray], labels: pd.Index,
                   columns: list[str]) -> pd.DataFrame:
    out = {c: pd.Categorical.from_codes(v, labels) if c in ("src", "dst") else v
           for c, v in cols.items()}
    # copy=False: a column per block, not stacked into one 2-D block (a second copy of
    # every column at once, the peak of a large capture's load)
    return pd.DataFrame(out, columns=columns, copy=False)


def read_segments(path: str | Path, columns: list[str] | None = None) -> pd.DataFrame:
    """A segments.bin as the decoder writes it: the columns read, not parsed; integer
    columns (each as narrow as its field allows), the addresses as categoricals of their
    text."""
    blocks = SegmentBlocks(path)
    columns = columns or SEGMENT_COLUMNS
    return _segment_frame(blocks.read(columns, 0, blocks.n), blocks.labels, columns)


def segment_count(path: str | Path) -> int:
    """How many segments a segments.bin holds (its trailer's count, checked)."""
    return segment_file_info(Path(path))[0]


def load_segments(pcap: str | Path, cache_dir: str | Path | None = None,
                  timeout: float | None = None,
                  columns: list[str] | None = None) -> pd.DataFrame:
    """Every TCP segment of a capture (schema §4b), one row each, in file order.

    The decoder writes the table (`istrace-decode --segments`, no iSCSI decoding). With
    `cache_dir` it goes to cache_dir/segments.bin and is reused while it is newer than the
    capture (decode_to_dir leaves one there too); without, it is read and thrown away.
    Raises DecodeError (returncode 2: not a readable capture) or paths.MissingBinary.
    """
    if cache_dir is not None:
        return read_segments(segments_file(pcap, cache_dir, timeout), columns)
    fd, tmp = tempfile.mkstemp(prefix="istrace-segments-", suffix=".bin")
    os.close(fd)
    try:
        _decode_segments(Path(pcap), Path(tmp), timeout)
        return read_segments(tmp, columns)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def segments_file(pcap: str | Path, cache_dir: str | Path,
                  timeout: float | None = None) -> Path:
    """cache_dir/segments.bin of a capture, made by the decoder when missing, made from
    another pcap (decoderun.state: one cut short since keeps it) or not of this decoder's
    layout (a directory decoded by an older istrace); for a pass over it a slice at a time
    (SegmentBlocks, segsource.FileSegments)."""
    pcap = Path(pcap)
    out = Path(cache_dir) / SEGMENT_FILE
    if out.is_file() and pcap.is_file() and _readable(out) and \
            decoderun.state(out.parent, pcap) != "changed":
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".segments-", suffix=".bin", dir=out.parent)
    os.close(fd)
    try:
        _decode_segments(pcap, Path(tmp), timeout)
        os.replace(tmp, out)  # readers never see a half-written table
        return out
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _readable(path: Path) -> bool:
    try:
        _SegmentTrailer.read(path)
    except (DecodeError, OSError):
        return False
    return True


def _decode_segments(pcap: Path, out: Path, timeout: float | None) -> None:
    decoderun.decode_segments(pcap, out, timeout)


def conn_and_dir(segs: pd.DataFrame, target_ports: tuple[int, ...] = (3260,)) -> pd.DataFrame:
    """Add `conn` (initiator side first, docs/schema.md) and `dir` (i2t/t2i) to a segments table.

    The target is the side whose port is an iSCSI port; failing that, the side that answered
    a SYN (SYN+ACK sender); failing that, the lower port. Worked out once per distinct
    (src, sport, dst, dport), so a capture of millions of segments costs a group-by.
    """
    out = segs.copy(deep=False)  # copy-on-write: the caller's table is never changed
    if out.empty:
        out["conn"] = pd.Categorical([])
        out["dir"] = pd.Categorical([])
        return out
    synack = out[(out["flags"] & (TCP_SYN | TCP_ACK)) == (TCP_SYN | TCP_ACK)]
    servers = set(zip(synack["src"].astype(str).tolist(), synack["sport"].tolist(), strict=True))
    # one integer per (src, sport, dst, dport): address codes and ports packed side by side
    src_c, src_l = _codes(out["src"])
    dst_c, dst_l = _codes(out["dst"])
    sp, dp = out["sport"].to_numpy(np.int64), out["dport"].to_numpy(np.int64)
    packed = ((src_c * len(dst_l) + dst_c) << 32) | (sp << 16) | dp
    # numbered in order of first appearance (as a group-by in file order would): a hash
    # table's codes, so the running highest code steps up where each first appears
    codes, _ = pd.factorize(packed)
    first = np.flatnonzero(np.diff(np.maximum.accumulate(codes), prepend=-1) > 0)
    src = [str(src_l[i]) for i in src_c[first]]
    dst = [str(dst_l[i]) for i in dst_c[first]]
    conn, direction = endpoint_sides(src, sp[first].tolist(), dst, dp[first].tolist(),
                                     servers, target_ports)
    # categoricals: millions of segments name a few connections
    for col, labels in (("conn", conn), ("dir", direction)):
        lc, lu = pd.factorize(pd.Series(labels, dtype=object))
        out[col] = pd.Categorical.from_codes(lc[codes], pd.Index(lu, dtype=object))
    return out


def endpoint_sides(src: list[str], sport: list[int], dst: list[str], dport: list[int],
                   servers: set[tuple[str, int]], target_ports: tuple[int, ...]
                   ) -> tuple[list[str], list[str]]:
    """(conn, dir) of each (src, sport, dst, dport): the target is the side on an iSCSI port;
    failing that, the side that answered a SYN (`servers`: (address, port) of SYN+ACK
    senders); failing that, the lower port."""
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
    return conn, direction


def _codes(col: pd.Series) -> tuple[np.ndarray, pd.Index]:
    """(int64 code per row, the labels) of an address column, categorical or text."""
    cat = col if isinstance(col.dtype, pd.CategoricalDtype) else col.astype("category")
    return cat.cat.codes.to_numpy().astype(np.int64), cat.cat.categories


def read_table(path: str | Path, columns: Iterable[str] | None = None,
               labels: Iterable[str] = (), by_blocks: bool = False) -> pd.DataFrame:
    """A table the decoder wrote (pdus.csv, commands.csv, connections.csv): the only reader of
    those files; with `columns`, only those of them the file has (a PDU row has 45 columns,
    most of them empty, and a step that reads a few need not hold the rest). Nanosecond
    times, TCP sequence numbers and command indexes as nullable integers: a gap (a command
    never answered) would make them float64, ~256 ns coarse. Only an empty field is missing:
    "None" is a digest's negotiated value, not a gap. `labels`: text columns of a few
    distinct values, read as categoricals (not a string object per row first: a minute's
    PDUs held 20 MB of them while read). `by_blocks`: the text parsed a block at a time, for
    columns of one type all through (a text column that is a number in some rows would come
    out of mixed types): a minute's PDUs, ANALYSED_PDU_COLUMNS, peak at 14 MB so, at 39 MB
    parsed whole."""
    options = _csv_options(path, columns)
    options["dtype"].update({c: "category" for c in labels if c in options["usecols"]})
    return pd.read_csv(path, low_memory=by_blocks, **options)


def read_table_blocks(path: str | Path, columns: Iterable[str], rows: int,
                      labels: Iterable[str] = ()) -> Iterator[pd.DataFrame]:
    """read_table's `columns` of a table, `rows` rows at a time (a column's type is found in
    each block: a block where it is empty holds it as missing floats); `labels` as
    categoricals, each block's own."""
    options = _csv_options(path, columns)
    options["dtype"].update({c: "category" for c in labels if c in options["usecols"]})
    with pd.read_csv(path, chunksize=rows, **options) as blocks:
        yield from blocks


def table_columns(path: str | Path) -> list[str]:
    """The columns of a table the decoder wrote (its header line)."""
    return list(pd.read_csv(path, nrows=0).columns)


def _csv_options(path: str | Path, columns: Iterable[str] | None) -> dict[str, Any]:
    """read_table's options for pandas: the columns asked for that the file has, the integer
    ones nullable, only an empty field missing."""
    head = table_columns(path)
    wanted = set(head) if columns is None else set(columns) & set(head)
    ints = {c: "Int64" for c in wanted if c.endswith("ts_ns") or c in ("tcp_seq", "cmd")}
    return {"dtype": ints, "keep_default_na": False, "na_values": [""],
            "usecols": [c for c in head if c in wanted]}


def _file(d: str | Path, name: str) -> Path:
    p = Path(d)
    return p if p.is_file() else p / name


def load_pdus(d: str | Path) -> pd.DataFrame:
    """pdus.csv of a decode directory (or the file itself) as a DataFrame."""
    return read_table(_file(d, PDU_FILE))


def load_commands(d: str | Path) -> pd.DataFrame:
    """commands.csv: one row per SCSI command, in issue order."""
    return read_table(_file(d, COMMAND_FILE))


def load_connections(d: str | Path) -> pd.DataFrame:
    """connections.csv: one row per iSCSI connection with its negotiated values."""
    return read_table(_file(d, CONNECTION_FILE))
