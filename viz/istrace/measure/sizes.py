"""Block sizes at each layer: the application's read size, the block request size and the
SCSI command's transfer size (typical, largest, how many), and a size written for people.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from istrace.capture.labels import is_
from istrace.measure.appreads import app_reads, initiator_mask


def human_size(n: float) -> str:
    if pd.isna(n):
        return "?"
    n = float(n)
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n / (1 << 20):.0f} MiB"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.2f} MiB"
    if n >= 1024:
        return f"{n / 1024:.0f} KiB" if n % 1024 == 0 else f"{n / 1024:.1f} KiB"
    return f"{n:.0f} B"


# the probe events' columns block_sizes, scsi_outstanding and app_reads_in_flight read
SIZE_EVENT_COLUMNS = ["ts_ns", "host", "layer", "event", "pid", "lba", "bytes", "lat_ns"]


def block_sizes(commands: pd.DataFrame | None,
                events: pd.DataFrame | None) -> dict[str, dict[str, float] | None]:
    """Syscall size vs block request size vs PDU block size (bytes per SCSI command)."""
    out: dict[str, dict[str, float] | None] = {}

    def mode(s: pd.Series) -> dict[str, float] | None:
        s = s.dropna()
        if s.empty:
            return None
        return {"typical": float(s.mode().iloc[0]), "max": float(s.max()), "count": len(s)}

    if events is not None and not events.empty and "bytes" in events.columns:
        out["syscall"] = mode(app_reads(events)["bytes"])
        done = events["lat_ns"].notna().to_numpy() if "lat_ns" in events.columns \
            else np.ones(len(events), bool)
        bl = events[initiator_mask(events) & is_(events["layer"], "block").to_numpy() & done]
        out["block"] = mode(bl["bytes"])
    if commands is not None and not commands.empty:
        col = "xfer_bytes" if "xfer_bytes" in commands.columns else "edtl"
        c = commands
        if "cdb_name" in c.columns:  # data transfers only, not INQUIRY / READ CAPACITY
            rw = c["cdb_name"].astype(str).str.match(r"^(READ|WRITE)\(\d+\)$")
            c = c[rw.to_numpy(dtype=bool)] if rw.any() else c
        out["scsi_command"] = mode(c[col]) if col in c.columns else None
    return out
