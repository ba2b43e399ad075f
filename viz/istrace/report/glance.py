"""The top of report.html, what a reader takes in at a glance: the run in one line (its
throughput, command size, commands outstanding, delay and settings), the verdict in words, the
causes' shares, what would help, and the verdict's caveats. Cause ids stay in tooltips and
verdict.json; their words are istrace.report.verdict.CAUSES's."""

from __future__ import annotations

import html
from typing import Any

from istrace.capture.meta import one_way_ms
from istrace.report.diagnosis import fmt_bytes
from istrace.report.verdict import cause_words

e = html.escape


def _settings(meta: dict[str, Any]) -> list[str]:
    """The path's and the hosts' settings in force, as meta.json recorded them (those left at
    their defaults unsaid, but the rate: "no rate limit" is a setting too)."""
    tb = meta.get("testbed") if isinstance(meta.get("testbed"), dict) else {}
    tb = tb or {}
    out = []
    rate = tb.get("rate_mbit")
    if isinstance(rate, int | float):
        out.append(f"path rate {rate:g} Mbit/s" if rate > 0 else "no rate limit")
    for key, fmt in (("loss", "loss {:g}%"), ("queue", "path queue {:g} packets"),
                     ("nic_rate_mbit", "NIC rate {:g} Mbit/s"), ("txqueuelen", "txqueuelen {:g}"),
                     ("tgt_cpu", "target CPU cap {:g}"), ("ini_cpu", "initiator CPU cap {:g}"),
                     ("ini_rmem", "initiator rmem {:g} B"), ("tgt_wmem", "target wmem {:g} B"),
                     ("tgt_rmem", "target rmem {:g} B"), ("tgt_cwnd", "target cwnd clamp {:g}")):
        v = tb.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool) and v:
            out.append(fmt.format(v))
    if tb.get("cc"):
        out.append(f"congestion control {tb['cc']}")
    if isinstance(tb.get("mtu"), int) and tb["mtu"] != 1500:
        out.append(f"MTU {tb['mtu']}")
    for k, v in sorted({**(tb.get("tgt_params") or {}), **(tb.get("tunables") or {})}.items()):
        out.append(f"{k} {v}")
    return out


def headline(meta: dict[str, Any], v: dict[str, Any]) -> str:
    """The run in one line: '38.6 MB/s of READ data over 10.2 s; 4 MiB commands, at most 1
    outstanding; one-way delay 16 ms; workload ...; settings ...'."""
    ev = v.get("evidence") or {}
    what = {"t2i": "READ", "i2t": "WRITE"}.get(str(ev.get("direction")), "")
    parts = []
    mbps, span = ev.get("throughput_MBps"), v.get("span_s")
    if isinstance(mbps, int | float):
        parts.append(f"<b>{mbps:.1f} MB/s</b> of {what} data".replace("  ", " ")
                     + (f" over {span:.1f} s" if isinstance(span, int | float) else ""))
    if isinstance(ev.get("command_bytes"), int | float):
        parts.append(f"{e(fmt_bytes(ev['command_bytes']))} commands")
    if isinstance(ev.get("outstanding_max"), int):
        parts.append(f"at most {ev['outstanding_max']} outstanding")
    owd = one_way_ms(meta)
    parts.append(f"one-way delay {owd:g} ms" if owd is not None else
                 "one-way delay not set (real path)")
    got = meta.get("workload")
    wl: dict[str, Any] = got if isinstance(got, dict) else {}
    if wl.get("command"):
        parts.append(f"workload <code>{e(str(wl['command']))}</code>")
    settings = _settings(meta)
    if settings:
        parts.append("settings: " + e(", ".join(settings)))
    return "<p class='headline'>" + "; ".join(parts) + ".</p>"


def _cause(cause: str) -> str:
    return f"<span title='{e(cause)}'>{e(cause_words(cause))}</span>"


def cause_table(v: dict[str, Any]) -> str:
    shares = v.get("shares") or {}
    if not shares:
        return ""
    span = v.get("span_s")
    rows = "".join(f"<tr><td>{_cause(k)}</td><td>{x * 100:.1f}%</td></tr>"
                   for k, x in shares.items())
    over = f"the transfer's {span:.1f} s" if isinstance(span, int | float) else "the transfer"
    return (f"<table class='causes'><tr><th>cause</th><th>share of the time</th></tr>{rows}"
            f"</table><p class='def'>Each instant of {over} (the data sender's first byte to "
            "its last) is charged to the one cause that held the data back then, so the shares "
            "add up to 100%.</p>")


def help_list(v: dict[str, Any]) -> str:
    if not v.get("help"):
        return ""
    items = []
    for h in v["help"]:
        pred = (f": predicted {h['predicted_MBps']} MB/s (now {h['now_MBps']}, "
                f"{e(str(h['model']))})" if h.get("predicted_MBps") else "")
        items.append(f"<li>{e(h['change'])}{pred} <span class='for'>(for "
                     f"{_cause(h['cause'])})</span></li>")
    return "<p><b>What would help</b></p><ul>" + "".join(items) + "</ul>"


def caveats(v: dict[str, Any]) -> str:
    """The verdict's caveats (verdict.json `caveats`: each input check that failed, each cause
    the capture could not split), right under the verdict, in words; the code as a tooltip."""
    items = []
    for c in v.get("caveats") or []:
        code, text = (str(c.get("code", "")), str(c.get("text", ""))) if isinstance(c, dict) \
            else ("", str(c))
        head, sep, rest = text.partition(": ")
        if sep and cause_words(head) != head:
            text = f"{cause_words(head)}: {rest}"
        items.append(f"<li title='{e(code)}'>{e(text)}</li>")
    return ("<div class='caveats'><b>Caveats</b> (the verdict is read in their light)<ul>"
            + "".join(items) + "</ul></div>") if items else ""


def clock_sentence(clock: dict[str, Any], meta: dict[str, Any], note: str) -> str:
    """The clock offset and its bound in one sentence: what the bound means and why it is as
    wide as it is (`note`: clockfile.describe's words, kept as the tooltip)."""
    off, bound = clock.get("offset_ns"), clock.get("bound_ns")
    if off is None or bound is None:
        return f"<p class='clock'>Clock: {e(note)}.</p>"
    tb = meta.get("testbed") if isinstance(meta.get("testbed"), dict) else {}
    same = (tb or {}).get("mode") == "netns"
    return (f"<p class='clock' title='{e(note)}'>Clock: the target's times are moved by "
            f"{int(off) / 1e6:+.3f} ms onto the initiator's clock, and the true offset lies "
            f"within &plusmn;{int(bound) / 1e6:.1f} ms of that, because a TCP segment seen at "
            "both ends shows only that it arrived after it was sent, which bounds the offset by "
            "about the one-way delay each way"
            + ("; here both ends run on this machine's one clock (the namespace testbed), so "
               "the true offset is 0" if same else "") + ".</p>")


def verdict_section(meta: dict[str, Any], v: dict[str, Any], warnings: list[str]) -> str:
    """The page's first section: the run, the verdict, the warnings that qualify it, the
    caveats, the causes, what would help."""
    parts = ["<section id='verdict'><h2>Verdict</h2>", headline(meta, v),
             f"<p class='verdict'><b>Limited by:</b> {e(v['text'])}</p>", caveats(v)]
    for w in warnings:
        cls = "warn" if w.startswith("CAPTURE DROPS") else "note"
        parts.append(f"<div class='{cls}'>WARNING: {e(w)}</div>")
    parts += [cause_table(v), help_list(v), "</section>"]
    return "\n".join(p for p in parts if p)
