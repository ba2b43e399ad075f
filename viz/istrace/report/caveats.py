"""report.html's block of the verdict's caveats: each input check that failed, and each cause
the capture could not split, in words beside its code (verdict.json `caveats`)."""

from __future__ import annotations

import html
from typing import Any


def render(verdict: dict[str, Any]) -> str:
    """The caveats as an HTML block ("" when there are none)."""
    caveats = verdict.get("caveats") or []
    if not caveats:
        return ""
    e = html.escape
    items = "".join(f"<li><code>{e(c['code'])}</code>: {e(c['text'])}</li>" for c in caveats)
    return ("<div class='caveats' style='background:#fff3cd;padding:.4em;margin:.3em 0'>"
            f"<b>Caveats</b> (the verdict is read in their light)<ul>{items}</ul></div>")
