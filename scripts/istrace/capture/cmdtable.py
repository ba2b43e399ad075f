"""Each host's SCSI commands as Parquet (docs/schema.md §6c), under DIR/commands/host=<host>/
(Hive partitions, as the segments are): the decoder's commands.csv with every time also on the
initiator's clock, so the commands of many captures and both hosts are one query away
(docs/report.md, "Querying many captures at once"). The only writer and reader of those files.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from istrace.capture import layout


def write(d: Path, host: str, commands: pd.DataFrame, offset_ns: int) -> Path:
    """`commands` (commands.csv's columns) with `<time>_merged` beside each `*_ts_ns` column:
    the target's times moved by the clock offset (target minus initiator), the initiator's as
    they are. Written beside the old file, then renamed over it."""
    path = layout.command_table(d, host)
    path.parent.mkdir(parents=True, exist_ok=True)
    out = commands.copy()
    shift = offset_ns if host == "target" else 0
    for c in [c for c in commands.columns if c.endswith("_ts_ns")]:
        out[c] = pd.to_numeric(out[c], errors="coerce").astype("Int64")
        out[f"{c}_merged"] = out[c] - shift
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        pq.write_table(pa.Table.from_pandas(out, preserve_index=False), tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def remove(d: Path, host: str) -> None:
    """Drop a host's table (a merge without its commands: an older one would lie)."""
    layout.command_table(d, host).unlink(missing_ok=True)


def read(d: Path, host: str) -> pd.DataFrame:
    return pq.read_table(layout.command_table(d, host)).to_pandas()
