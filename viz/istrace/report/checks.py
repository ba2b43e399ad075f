"""The cross-checks before a verdict: is each input whole, and do the inputs agree?

A verdict is only as good as what it was drawn from. Each check below is a fact about the
capture's inputs, worked out once per capture (`of` keeps it on the Capture) and read by the
verdict, which lists every failed check under `caveats` (a short code and a sentence) and is
then unsure, giving the sentences as its reasons:

  pcap_ends_early     the decoder's own finding: a pcap cut short (decoded/<host>/decoder.log)
  counts_disagree     the two ends' pcaps hold different numbers of commands or PDUs
  pcaps_apart         the two ends' data do not overlap in time: two runs' pcaps, or clocks
                      set far apart
  events_garbled      unreadable lines skipped in an event stream (istrace.capture.events:
                      past its bound the stream is refused instead, InputError)
  events_torn         an event stream cut mid-line, or without the probe's end record
  events_empty        an event stream with no events
  events_lost         the probe lost events (its ring buffer full) or wrote more than were read
  meta_missing        no meta.json, or one that cannot be read: the verdict takes nothing from
                      it (no link rate, no delay, no capture drop counts)
  capacity_contradicted
                      the path's capacity estimated from the capture is below the rate of the
                      sender's data bursts: the estimate is wrong, so no link is claimed full

The capacity the verdict uses is decided here too (`Checked.capacity`): the path's figure the
verdict works out (from meta.json, else estimated from the capture) unless the capture
contradicts the estimate, then unknown. The measures are the verdict's, handed in as calls:
this module reads the capture's inputs, not its pictures (no istrace.plot).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from istrace.capture import decoderun, layout
from istrace.capture.events import EventStream
from istrace.capture.load import Capture

# where a capacity figure estimated from the capture itself comes from (held to the bursts)
ESTIMATED = "estimated from packet dispersion at the receiver"

# Two ends' counts of one transfer differ by a few at most (a capture started or stopped a
# packet apart); more than this share, and more than COUNT_SLACK, is a pcap missing part of it.
COUNT_SHARE, COUNT_SLACK = 0.02, 2
# The ends' data may start and end this far apart (ns) and still be one run on two clocks.
APART_NS = 1_000_000_000
# Lost probe events above this share of those written make the stream incomplete.
LOST_SHARE = 0.01
# The sender's median burst rate may exceed an estimated capacity by this much before the
# estimate is taken as contradicted: with the receiver's pcap alone the bursts are timed where
# the pairs are, and jitter squeezes them (a 12.3 MB/s estimate, bursts at 16.5: docs/faults.md).
BURST_SLACK = 2.0


@dataclass
class Caveat:
    code: str
    text: str

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "text": self.text}


@dataclass
class Checked:
    """Every failed check's caveat; the inputs to list as missing besides load_capture's;
    the path's capacity as the verdict may use it (bytes/s or None, and its source)."""

    caveats: list[Caveat] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    capacity: tuple[float | None, str] = (None, "unknown")


Capacity = Callable[[], tuple[float | None, str]]


def of(cap: Capture, capacity: Capacity, burst_peak: Callable[[], float | None]) -> Checked:
    """The checks of `cap`, worked out on the first call and kept with it. `capacity`: the
    path's capacity figure and its source; `burst_peak`: the median rate of the sender's data
    bursts (bytes/s), asked for only when the figure is an estimate."""
    if cap.checks is None:
        cap.checks = _check(cap, capacity, burst_peak)
    return cap.checks


def _check(cap: Capture, capacity: Capacity, burst_peak: Callable[[], float | None]) -> Checked:
    out = Checked()
    out.caveats += _meta(cap)
    for host, caveat in _pcaps(cap):
        out.caveats.append(caveat)
        out.missing.append(f"the rest of {host}.pcap (it ends early)")
    out.caveats += _counts(cap)
    out.caveats += _apart(cap)
    for path in layout.events_files(cap.dir):
        found = _stream(path)
        out.caveats += found
        out.missing += [f"probe events of {layout.events_host(path)} ({path.name} holds none)"
                        for c in found if c.code == "events_empty"]
    out.capacity, contradicted = _capacity(capacity(), burst_peak)
    out.caveats += contradicted
    return out


def _meta(cap: Capture) -> list[Caveat]:
    if cap.meta_error is not None:
        return [Caveat("meta_missing", f"meta.json is unreadable ({cap.meta_error}): the "
                       "run's settings (link rate, delay) and capture drop counts are unknown, "
                       "and the verdict takes none of them")]
    if not (cap.dir / layout.META).is_file():
        return [Caveat("meta_missing", "no meta.json: the run's settings (link rate, delay) "
                       "and capture drop counts are unknown, and the verdict takes none of "
                       "them")]
    return []


def _pcaps(cap: Capture) -> list[tuple[str, Caveat]]:
    """Each host whose pcap the decoder found cut short, with its caveat."""
    out = []
    for host in layout.HOSTS:
        said = decoderun.ends_early(decoderun.decoded_dir(cap.dir, host)) \
            if layout.pcap(cap.dir, host).is_file() else None
        if said:  # "istrace-decode: PATH: capture ends early (WHY); ...": its WHY
            why = said.split("capture ends early", 1)[1].split(";")[0].strip(" ()")
            out.append((host, Caveat("pcap_ends_early", f"{host}.pcap ends early, cut short "
                                     f"(istrace-decode: {why}): the packets after the cut "
                                     "are missing")))
    return out


def _counts(cap: Capture) -> list[Caveat]:
    """The commands and PDUs each end's pcap holds: one transfer, seen twice."""
    if not all(h in cap.pdus for h in layout.HOSTS):
        return []
    got = {}
    for h in layout.HOSTS:
        pdus = cap.pdus.read(h, ["ts_ns"])
        cmds = cap.commands.get(h)
        got[h] = (0 if cmds is None else len(cmds), 0 if pdus is None else len(pdus))
    (ci, pi), (ct, pt) = got["initiator"], got["target"]
    if not any(abs(a - b) > max(COUNT_SLACK, COUNT_SHARE * max(a, b))
               for a, b in ((ci, ct), (pi, pt))):
        return []
    return [Caveat("counts_disagree", f"the two ends disagree: initiator.pcap holds {ci} "
                   f"commands and {pi} PDUs, target.pcap {ct} and {pt}: one pcap misses part "
                   "of the transfer")]


def _apart(cap: Capture) -> list[Caveat]:
    """Whether the two ends' packets, each on its own host's clock, overlap in time."""
    spans = {h: cap.segs[h].ts_span() for h in layout.HOSTS if h in cap.segs}
    ini, tgt = spans.get("initiator"), spans.get("target")
    if ini is None or tgt is None:
        return []
    (a0, a1), (b0, b1) = ini, tgt
    gap = max(b0 - a1, a0 - b1)
    if gap <= APART_NS:
        return []
    return [Caveat("pcaps_apart", f"the two ends' packets do not overlap in time: "
                   f"initiator.pcap's and target.pcap's are {gap / 1e9:.1f} s apart: pcaps of "
                   "two different runs, or hosts' clocks set that far apart")]


def _stream(path: Path) -> list[Caveat]:
    """One event stream read through (its events not kept): what the reading found. Too
    many unreadable lines: InputError, as for every other reader of the stream."""
    name = path.name
    if path.stat().st_size == 0:
        return [Caveat("events_empty", f"{name} is empty: no probe events from that end "
                       "(the probe not attached, or stopped at once)")]
    stream = EventStream(path, warn=False)
    for _ in stream:
        pass
    h = stream.health
    out = []
    if not h.events:
        out.append(Caveat("events_empty", f"{name} holds no events: no probe events from "
                          "that end (the probe not attached, or stopped at once)"))
    if h.bad:
        first, why = h.first_bad[0]
        out.append(Caveat("events_garbled", f"{name}: {h.bad} unreadable line"
                          f"{'s' if h.bad > 1 else ''} skipped (the first: line {first}, "
                          f"{why}): the events on {'them' if h.bad > 1 else 'it'} are lost"))
    if h.torn_line is not None:
        out.append(Caveat("events_torn", f"{name} is cut mid-line at line {h.torn_line}: "
                          "the probe stopped while writing, and what it had not written is "
                          "lost"))
    elif path.suffix == ".jsonl" and h.events and not h.ended:
        out.append(Caveat("events_torn", f"{name} has no end record: the probe did not "
                          "finish writing, and its last events may be lost"))
    written = max(h.written or 0, h.events)
    lost = stream.lost + (written - h.events if not h.bad else 0)
    if lost > LOST_SHARE * max(written + stream.lost, 1):
        out.append(Caveat("events_lost", f"{name}: {lost} of {written + stream.lost} events "
                          "lost (the probe's buffer full, or not in the file)"))
    return out


def _capacity(figure: tuple[float | None, str], burst_peak: Callable[[], float | None]
              ) -> tuple[tuple[float | None, str], list[Caveat]]:
    """The path's capacity figure, unless it was estimated from this capture and the rate the
    sender reached in its data bursts (the report's "peak burst rate") is above it: the
    capture contradicts itself, so no link is claimed full. A rate the run set (meta.json) is
    a fact, not an estimate: a sender's bursts may leave faster than a bottleneck further on."""
    bps, source = figure
    if not bps or source != ESTIMATED:
        return figure, []
    peak = burst_peak()
    if peak is None or peak <= BURST_SLACK * bps:
        return figure, []
    why = (f"the path's capacity estimated from packet dispersion, {bps / 1e6:.1f} MB/s, is "
           f"below the {peak / 1e6:.1f} MB/s the sender's data bursts reached: the estimate is "
           "contradicted, and the link is not claimed full")
    return (None, f"unknown ({why})"), [Caveat("capacity_contradicted", why)]
