"""Which way the data flows (the direction that carried most payload) and where it is seen
sent (the data sender's capture point).
"""

from __future__ import annotations

from istrace.capture.load import Capture
from istrace.capture.segsource import Segments


def data_dir(cap: Capture) -> str:
    """The direction that carried most payload (t2i for reads, i2t for writes)."""
    for segs in cap.segs.values():
        if segs.empty:
            continue
        by = segs.payload_by_dir()
        if by:
            return max(by, key=lambda k: by[k])  # the first of equals, as argmax
    return "t2i"


def sender_segs(cap: Capture, d: str) -> Segments | None:
    """Segments as seen at the data sender (where the seq graph and flight are true)."""
    pref = ("target", "initiator") if d == "t2i" else ("initiator", "target")
    for host in pref:
        if host in cap.segs:
            return cap.segs[host]
    return None
