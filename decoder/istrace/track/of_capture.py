"""The tracker over a whole capture: probe events exact, each pcap for the direction it sends."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from istrace.capture import layout, stamps
from istrace.capture.load import Capture, load_capture
from istrace.capture.outputs import write_track_tables
from istrace.capture.tracksamples import SampleWriter
from istrace.capture.tracktables import EVENT_COLUMNS, STATE_COLUMNS, TableWriter
from istrace.track import tracker as track


def track_capture(cap: Capture, out: Path | None = None) -> track.TrackResult:
    """Each data direction is best seen where it is sent; with one pcap, both from there.
    With `out`, the samples are written there (track.parquet) and the states and events
    beside it (layout.track_files) as they are made; each is read back from its file where a
    step asks: none are held (a row per packet: millions; a lossy minute's marks: a hundred
    thousand)."""
    if out is None:
        return _track(cap, None)
    bad = stamps.unreadable(out) if out.is_file() else None
    if bad:  # never read, only replaced: said so that nobody wonders where it went
        stamps.say_once(f"{out} unreadable ({bad}): made again from the capture")
    _, states_at, events_at = layout.track_files(out)
    with SampleWriter(out) as w, TableWriter(states_at, STATE_COLUMNS) as ws, \
            TableWriter(events_at, EVENT_COLUMNS) as we:
        res = _track(cap, track.TrackSink(w, ws, we))
    res.samples, res.states, res.events = w.close(), ws.close(), we.close()
    return res


def _track(cap: Capture, sink: track.TrackSink | None) -> track.TrackResult:
    res = track.TrackResult()
    events = cap.tcp_events(track.PROBE_COLUMNS)
    if events is not None:
        res.extend(track.track_events(events, sink))
    else:
        res.notes.append("no probe events (events-*.jsonl): cwnd/ssthresh/CA state unknown, "
                         "pcap estimates only")
    del events  # a minute's 49 000 TCP events: not held while the pcaps are tracked
    # what the marks' commands are looked up in, only: the whole table (13 columns), held
    # through the tracking, grew it by 25 MB for a 10 s capture of 8 KiB Data-In PDUs
    pdus = cap.main_pdus(track.PDU_COLUMNS)
    both = len(cap.segs) == 2
    for host, segs in cap.segs.items():
        dirs = (("t2i",) if host == "target" else ("i2t",)) if both else ("i2t", "t2i")
        res.extend(track.track_pcap(segs, pdus, host=host, dirs=dirs, sink=sink))
    if not cap.segs:
        res.notes.append("no initiator.pcap/target.pcap: no pcap estimates")
    return res


def track_to_file(cap: Capture, out: Path) -> track.TrackResult:
    """track_capture with its samples in `out` and the states and events beside
    (layout.track_files): the three tables the report, `istrace plot` and `compare` read."""
    res = track_capture(cap, out)
    write_track_tables(res.samples, res.states, res.events, out)
    return res


def load_tracked(d: str | Path, decode: bool = True, ports: tuple[int, ...] | None = None,
                 to_file: bool = False) -> Capture:
    """A capture with its tracker result in `cap.track` (what plots and the report need).
    `to_file`: its tables written where the report and `istrace track` write them
    (layout.TRACK), the samples read back from there, none held: a sample per packet, a
    full-rate minute's 8 M held were 750 MB, its cwnd plot's peak 1.7 GB. A directory that
    cannot be written gets them in a temporary one, removed at exit."""
    cap = load_capture(d, decode=decode, ports=ports)
    if not to_file:
        cap.track = track_capture(cap)
        return cap
    out = cap.dir / layout.TRACK
    if not os.access(cap.dir, os.W_OK):
        tmp = tempfile.mkdtemp(prefix="istrace-track-")
        atexit.register(shutil.rmtree, tmp, True)
        out = Path(tmp) / layout.TRACK
    cap.track = track_to_file(cap, out)
    return cap
