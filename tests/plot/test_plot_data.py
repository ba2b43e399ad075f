"""The data behind every plot, checked against a synthetic capture whose truth is known."""

import numpy as np
import pandas as pd
import pytest
import synth
from istrace.capture import tcpseq
from istrace.capture.decoded import conn_and_dir
from istrace.measure.payload import throughput
from istrace.plot import data, render
from istrace.plot.seqgraph import seq_graph
from istrace.plot.thin import thin
from istrace.track.of_capture import load_tracked


@pytest.fixture(scope="module")
def cap1(module_tmp):
    d = module_tmp("qd1")
    truth = synth.make_capture(d, n_cmds=64, qd=1)
    return load_tracked(d), truth


def test_loader_finds_everything(cap1):
    cap, _ = cap1
    assert set(cap.segs) == {"initiator", "target"}
    assert set(cap.pdus) == {"initiator", "target"} and set(cap.commands) == {"initiator",
                                                                              "target"}
    assert cap.held_events() is not None and not cap.warnings
    assert any("merged.parquet" in m for m in cap.missing)


def test_ladder_rows_and_one_way_delay(cap1):
    cap, t = cap1
    rows = data.ladder_rows(cap.pdus["initiator"], cap.pdus["target"], cap.offset_ns)
    assert len(rows) == 3 * t.n_cmds
    assert rows["kind"].value_counts().to_dict() == {"SCSI Command": 64, "SCSI Data-In": 64,
                                                     "SCSI Response": 64}
    assert not rows["estimated"].any()
    owd = rows["t_recv_ns"] - rows["t_send_ns"]
    assert (owd == t.owd_ns).all()
    cmd_rows = rows[rows["kind"] == "SCSI Command"]
    assert cmd_rows["t_send_ns"].tolist() == t.issue
    assert cmd_rows["label"].iloc[0] == "READ(10) 32 KiB"
    # With one capture only, the far end is estimated from the one-way delay given.
    one = data.ladder_rows(cap.pdus["initiator"], None, 0, t.owd_ns)
    assert one["estimated"].all()
    assert (one["t_recv_ns"] - one["t_send_ns"] == t.owd_ns).all()
    w0, w1 = data.default_window(rows, 5)
    assert w0 == t.issue[0] and w1 == t.resp[4]


@pytest.mark.parametrize("middle", [False, True])
@pytest.mark.parametrize("margin", [False, True])
def test_ladder_made_for_its_window_shows_what_the_whole_ladder_does(cap1, monkeypatch, middle,
                                                                     margin):
    # no margin: only the commands with a PDU inside the window are read; else the window's
    # own length or ten one-way delays either side
    if not margin:
        monkeypatch.setattr(render, "LADDER_PAD_NS", 0)
    cap, t = cap1
    whole = data.ladder_rows(cap.pdus["initiator"], cap.pdus["target"], cap.offset_ns,
                             render.one_way_ns(cap))
    window = (t.issue[30], t.resp[33]) if middle else None
    rows, shown = render.ladder_for(cap, window)
    assert shown == (window or data.default_window(whole))
    assert 0 < len(rows) < len(whole) / 4

    def inside(r):
        return r[(r["t_recv_end_ns"] >= shown[0]) & (r["t_send_ns"] <= shown[1])].reset_index(
            drop=True)
    assert len(inside(whole)) >= 12
    pd.testing.assert_frame_equal(inside(rows), inside(whole))


def test_the_ladders_margin_follows_its_window_and_delay():
    w = (10**9, 10**9 + 50_000_000)
    assert render.ladder_pad(w, None) == render.LADDER_PAD_NS  # delay unknown: the most
    assert render.ladder_pad(w, 100_000) == 50_000_000  # the window's length
    assert render.ladder_pad(w, 20_000_000) == 200_000_000  # ten one-way delays
    assert render.ladder_pad(w, 10**9) == render.LADDER_PAD_NS
    assert render.ladder_pad((5, 5), 0) == 1_000_000


def test_timeline_spans_every_row(cap1):
    cap, t = cap1
    spans = render.timeline_spans(cap)
    summ = data.span_summary(spans).set_index("row")
    assert summ.loc["initiator syscall", "spans"] == 1
    assert summ.loc["initiator block", "spans"] == 4
    for row in ("initiator SCSI", "initiator iSCSI", "initiator TCP", "wire", "target TCP",
                "target iSCSI", "target backing store"):
        assert summ.loc[row, "spans"] == 64, row
    for row in ("initiator SCSI", "initiator iSCSI", "wire", "target iSCSI", "target TCP"):
        assert set(spans.loc[spans["row"] == row, "cmd"].astype(int)) == set(range(64)), row
    wire = spans[spans["row"] == "wire"].sort_values("cmd")
    assert wire["start_ns"].tolist() == t.burst_start
    assert (wire["end_ns"].to_numpy() == np.asarray(t.burst_end) + t.owd_ns).all()
    isc = spans[spans["row"] == "initiator iSCSI"].sort_values("cmd")
    assert isc["start_ns"].tolist() == t.issue and isc["end_ns"].tolist() == t.resp
    sc = spans[spans["row"] == "initiator syscall"].iloc[0]
    assert (sc["start_ns"], sc["end_ns"]) == t.syscall
    w = render.default_timeline_window(spans)
    assert w[0] <= t.syscall[0] and w[1] >= t.syscall[1]


def test_seq_graph_and_throughput(cap1):
    cap, t = cap1
    g = seq_graph(cap.segs["target"], "t2i")
    sg = g["segments"]
    nseg = -(-(32768 + 48) // synth.MSS)
    assert len(sg) == 64 * (nseg + 1) and not sg["rtx"].any()
    assert sg["start"].iloc[0] == 0 and sg["end"].max() == 64 * (32768 + 96)
    assert g["acks"]["ack"].is_monotonic_increasing
    small = seq_graph(cap.segs["target"], "t2i", max_points=300)["segments"]
    assert len(small) <= 320 and small["end"].max() == sg["end"].max()
    th = throughput(cap.segs["target"], "t2i", bins=50)
    assert th["bytes"].sum() == 64 * (32768 + 96)


def test_track_on_capture(cap1):
    cap, t = cap1
    tr = cap.track
    samples = tr.samples.frame()
    ex = samples[samples["source"] == "exact"]
    assert len(ex) == 16 and ex["cwnd"].tolist() == [10 + k for k in range(0, 64, 4)]
    st = tr.states.frame()
    cwr = st[st["state"] == "CWR"]
    assert cwr[["start_ns", "end_ns"]].values.tolist() == [[t.resp[2], t.resp[2] + 1_000_000]]
    est = samples[(samples["source"] == "estimated") & (samples["dir"] == "t2i")]
    assert (est["host"] == "target").all()
    assert est["inflight_bytes"].max() <= 32768 + 96 and est["inflight_bytes"].iloc[-1] == 0
    rtt = est["rtt_us"].dropna()
    assert ((rtt >= 2 * t.owd_ns / 1000) & (rtt < 2 * t.owd_ns / 1000 + 20)).all()
    assert tr.events.empty or not (tr.events.frame()["kind"] == "retransmit").any()


def test_plots_render(cap1, tmp_path):
    cap, _ = cap1
    made = render.make_plots(cap, tmp_path, render.KINDS)
    for kind in render.KINDS:
        png, svg = made[kind]
        assert png.stat().st_size > 5000 and svg.stat().st_size > 5000


def test_cwnd_draws_a_retransmission_marker_a_pixel_and_counts_them_all():
    """Tens of thousands of retransmissions (a lossy minute's) are one marker per pixel's
    width on the cwnd plot, each at the first of its pixel; the legend counts every one."""
    from istrace.capture.tracksamples import FrameSamples, empty_frame
    from istrace.plot import plots
    from istrace.track.tracker import EVENT_COLUMNS, STATE_COLUMNS

    n = 20_000
    ts = np.arange(n, dtype=np.int64) * 50_000  # one every 50 us over a second
    samples = empty_frame().reindex(range(n))
    samples = samples.assign(ts_ns=ts, conn="c", dir="t2i", host="target", source="exact",
                             cwnd=10.0, ssthresh=np.nan)
    events = pd.DataFrame({"ts_ns": ts[::2] + 7, "conn": "c", "dir": "t2i", "host": "target",
                           "source": "estimated", "kind": "retransmit", "seq": 0.0,
                           "bytes": 1448.0, "cmd": np.nan, "note": ""})[EVENT_COLUMNS]
    fig = plots.cwnd(FrameSamples(samples), pd.DataFrame(columns=STATE_COLUMNS), events)
    ax = fig.axes[0]
    marks = [line for line in ax.get_lines() if line.get_marker() == "v"]
    assert len(marks) == 1 and marks[0].get_label() == f"retransmission ({n // 2})"
    x = marks[0].get_xdata()
    px = (ts[-1] - ts[0]) / 1e6 / 2000  # the plot's pixel, in ms
    assert 1900 <= len(x) <= 2001 and (np.diff(x) > 0).all()
    assert x[0] == pytest.approx(7 / 1e6) and (np.diff(np.floor(x / px)) >= 1).all()
    plots.plt.close(fig)


def test_timeline_lanes_keep_concurrent_spans_apart(tmp_path):
    synth.make_capture(tmp_path, n_cmds=24, qd=2)
    cap = load_tracked(tmp_path)
    spans = render.timeline_spans(cap)
    isc = spans[spans["row"] == "initiator iSCSI"]
    a, b = isc["start_ns"].to_numpy(), isc["end_ns"].to_numpy()
    lanes = data.assign_lanes(a, b)
    assert lanes.max() == 1  # queue depth 2: two lanes, and no more
    for k in (0, 1):
        o = np.argsort(a[lanes == k])
        s, e = a[lanes == k][o], b[lanes == k][o]
        assert (s[1:] >= e[:-1]).all()  # nothing overlaps within a lane
    assert (data.assign_lanes(np.array([0, 0, 0]), np.array([5, 5, 5]), max_lanes=2)
            == [0, 1, 0]).all()


def test_kernel_stack_start_and_end_points_become_spans():
    """The stock kernel's SCSI midlayer and LIO mark work by a start and an end event, no
    latency: each pair, tied by cmd_id (or by task tag before a merge), becomes one span in its
    row: SCSI dispatch -> done, LIO execute -> done, backing-store submit -> done. A done that
    comes before its start (another command's) draws nothing."""
    import pandas as pd

    rows = [  # host, layer, event, ts, cmd_id, itt
        ("initiator", "scsi", "scsi_dispatch", 100, 0, None),
        ("initiator", "scsi", "scsi_done", 900, 0, None),
        ("initiator", "scsi", "scsi_dispatch", 150, 1, None),
        ("initiator", "scsi", "scsi_done", 120, 1, None),     # before its dispatch: no span
        ("target", "scsi", "lio_cmd_start", 300, None, 7),    # not merged: tied by its tag
        ("target", "scsi", "lio_bs_submit", 320, None, 7),
        ("target", "scsi", "lio_cmd_done", 700, None, 7),
        ("target", "iscsi", "lio_cmd_rx", 250, None, 7),
        ("target", "iscsi", "lio_data_in", 800, None, 7),
    ]
    ev = pd.DataFrame(rows, columns=["host", "layer", "event", "ts_ns", "cmd_id", "itt"])
    ev["lat_ns"] = np.nan
    spans = data.timeline_spans(None, None, ev)
    got = sorted(zip(spans.row, spans.start_ns, spans.end_ns, strict=True))
    assert got == [("initiator SCSI", 100, 900), ("target SCSI", 300, 700),
                   ("target backing store", 320, 700), ("target iSCSI", 250, 800)]


def test_seq_graph_draws_one_connection():
    """Two sessions' segments interleaved: each has its own sequence numbers, so the graph
    is of one connection (the busiest), not both numbered from one's first byte."""
    rows = []
    for conn_port, isn, n in ((40000, 7, 300), (40001, 3_000_000_000, 100)):
        for k in range(n):
            rows.append({"frame": 0, "ts_ns": 10**9 + k * 2_000 + (conn_port - 40000) * 1_000,
                         "src": "10.0.0.2", "sport": 3260, "dst": "10.0.0.1",
                         "dport": conn_port, "seq": isn + k * 1000, "ack": 1, "flags": 0x18,
                         "win": 500, "len": 1000, "wscale": -1, "mss": -1, "tsval": -1,
                         "tsecr": -1, "sack": 0})
    segs = conn_and_dir(pd.DataFrame(rows).sort_values("ts_ns").reset_index(drop=True))
    assert data.busiest_conn(segs, "t2i") == "10.0.0.1:40000-10.0.0.2:3260"
    g = seq_graph(segs, "t2i")["segments"]
    assert len(g) == 300 and not g["rtx"].any()
    assert g["start"].tolist() == [k * 1000 for k in range(300)]
    other = seq_graph(segs, "t2i", conn="10.0.0.1:40001-10.0.0.2:3260")["segments"]
    assert other["start"].tolist() == [k * 1000 for k in range(100)]


def _seq_graph_reference(segs: pd.DataFrame, d: str, conn: str) -> dict[str, pd.DataFrame]:
    """The sequence graph computed over the whole table at once, unthinned: the rows a
    chunked pass must give."""
    rev = "i2t" if d == "t2i" else "t2i"
    c = segs[segs["conn"] == conn]
    x = c[(c["dir"] == d) & (c["len"] > 0)]
    base = int(x["seq"].iloc[0])
    start = tcpseq.unwrap(x["seq"].to_numpy(np.int64), base)
    end = start + x["len"].to_numpy(np.int64)
    prev = np.maximum.accumulate(np.concatenate([[np.iinfo(np.int64).min], end]))[:-1]
    a = c[(c["dir"] == rev) & ((c["flags"] & 0x10) != 0)]
    ack = tcpseq.unwrap(a["ack"].to_numpy(np.int64), base)
    ak = pd.DataFrame({"t_ns": a["ts_ns"].to_numpy(np.int64), "ack": ack,
                       "win_edge": ack + (a["win"].to_numpy(np.int64) << 7)})
    return {"segments": pd.DataFrame({"t_ns": x["ts_ns"].to_numpy(np.int64), "start": start,
                                      "end": end, "rtx": start < prev}),
            "acks": ak[ak["ack"] >= 0].reset_index(drop=True)}


@pytest.mark.parametrize("rows", [1, 2, 7, 100, 1 << 16])
def test_seq_graph_is_the_same_in_any_chunking(rows):
    """Two interleaved connections, resends and a sequence wrap, ACKs with a scaled window:
    read a chunk of rows at a time, the graph is the whole table's (thinned or not)."""
    rng = np.random.default_rng(5)
    out = []
    for port, isn in ((40000, 2**32 - 50_000), (40001, 17)):
        sent, t = 0, 10**9 + port
        out.append({"ts_ns": t, "sport": port, "dport": 3260, "seq": 99, "ack": 0,
                    "flags": 0x02, "win": 64240, "len": 0, "wscale": 7})
        out.append({"ts_ns": t + 1, "sport": 3260, "dport": port, "seq": isn - 1, "ack": 100,
                    "flags": 0x12, "win": 65160, "len": 0, "wscale": 7})
        for _ in range(3000):
            t += int(rng.integers(1, 20_000))
            back = int(rng.integers(0, 5)) * 1448 if rng.random() < 0.03 else 0  # a resend
            seq = (isn + max(sent - back, 0)) % 2**32
            out.append({"ts_ns": t, "sport": 3260, "dport": port, "seq": seq, "ack": 100,
                        "flags": 0x18, "win": 500, "len": 1448, "wscale": -1})
            sent = max(sent, sent - back + 1448)
            if rng.random() < 0.5:
                out.append({"ts_ns": t + 5, "sport": port, "dport": 3260, "seq": 100,
                            "ack": (isn + sent - int(rng.integers(0, 3)) * 1448) % 2**32,
                            "flags": 0x10, "win": int(rng.integers(100, 900)), "len": 0,
                            "wscale": -1})
    raw = pd.DataFrame(out).sort_values("ts_ns", kind="stable").reset_index(drop=True)
    raw = raw.assign(frame=0, src=np.where(raw["sport"] == 3260, "10.0.0.2", "10.0.0.1"),
                     dst=np.where(raw["sport"] == 3260, "10.0.0.1", "10.0.0.2"), mss=-1,
                     tsval=-1, tsecr=-1, sack=0)
    segs = conn_and_dir(raw)
    conn = "10.0.0.1:40000-10.0.0.2:3260"
    want = _seq_graph_reference(segs, "t2i", conn)
    sent = segs[(segs["conn"] == conn) & (segs["len"] > 0)]["seq"]
    assert want["segments"]["rtx"].sum() > 50 and sent.min() < 2**20 < 2**32 - 2**20 < sent.max()
    got = seq_graph(segs, "t2i", conn=conn, rows=rows)
    for k in ("segments", "acks"):
        pd.testing.assert_frame_equal(got[k], want[k])
    thinned = seq_graph(segs, "t2i", max_points=200, conn=conn, rows=rows)
    pd.testing.assert_frame_equal(thinned["segments"], thin(
        want["segments"], "t_ns", "end", 200, keep=want["segments"]["rtx"].to_numpy()))
    pd.testing.assert_frame_equal(thinned["acks"], thin(want["acks"], "t_ns", "ack", 200))


def test_thin_keeps_each_bins_first_lowest_and_highest_row():
    t = np.array([0, 1, 2, 3, 10, 11, 12, 13, 20, 21])
    v = np.array([5, 1, 9, 1, 3, 3, 7, 7, 4, 0])
    df = pd.DataFrame({"t": t, "v": v})
    # 3 bins of 7 ns: [0, 7), [7, 14), [14, 21]; ties: the first row of the value
    got = thin(df, "t", "v", 9)
    assert got["t"].tolist() == [0, 1, 2, 10, 12, 20, 21]
    keep = np.zeros(10, bool)
    keep[3] = True
    assert 3 in thin(df, "t", "v", 9, keep=keep)["t"].tolist()


def test_only_the_events_that_make_spans_are_kept():
    """data.span_events keeps what timeline_spans draws or pairs, and drops the rest (tgtd's
    socket writes, TCP samples): the spans of the kept events are those of all of them."""
    import pandas as pd

    rows = [  # host, layer, event, ts, lat, cmd_id, itt
        ("initiator", "syscall", "recvfrom_exit", 500, 400, 0, None),  # drawn
        ("target", "syscall", "write_exit", 510, 30, 0, None),        # socket write: not drawn
        ("target", "syscall", "pread64_exit", 330, 20, 0, None),      # the backing store
        ("target", "tcp", "tcp_probe", 520, None, 0, None),           # no latency: nothing
        ("initiator", "tcp", "tcp_probe", 530, 5, 0, None),           # drawn with a latency
        ("initiator", "scsi", "scsi_dispatch", 100, None, 0, None),   # a pair's ends
        ("initiator", "scsi", "scsi_done", 900, None, 0, None),
        ("target", "iscsi", "lio_cmd_rx", 250, None, None, 7),        # a task tag's span
        ("target", "iscsi", "lio_data_in", 800, None, None, 7),
    ]
    ev = pd.DataFrame(rows, columns=["host", "layer", "event", "ts_ns", "lat_ns", "cmd_id",
                                     "itt"])
    drawn, paired = data.span_events(sorted(set(zip(ev.host, ev.layer, ev.event,
                                                    strict=True))))
    kind = list(zip(ev.host, ev.layer, ev.event, strict=True))
    keep = [(k in drawn and not pd.isna(lat)) or k in paired
            for k, lat in zip(kind, ev.lat_ns, strict=True)]
    assert keep == [True, False, True, False, True, True, True, True, True]
    spans = data.timeline_spans(None, None, ev)
    assert spans.equals(data.timeline_spans(None, None, ev[keep].reset_index(drop=True)))
    assert len(spans) == 5


def test_the_timeline_from_its_window_spans_is_the_timeline_from_all(cap1, tmp_path):
    """The report draws the timeline from timeline_shown's spans and window (the Perfetto
    process keeps the rest): the same picture, pixel for pixel, as from every span."""
    from PIL import Image, ImageChops

    cap, _ = cap1
    spans = render.timeline_spans(cap)
    spans = spans[spans["row"] != "initiator syscall"]  # the window: the first 64 commands
    later = spans.assign(start_ns=spans["start_ns"] + 10**9, end_ns=spans["end_ns"] + 10**9,
                         cmd=spans["cmd"] + 64)
    spans = pd.concat([spans, later], ignore_index=True)
    shown, window = render.timeline_shown(spans)
    assert window == render.default_timeline_window(spans)
    assert 0 < len(shown) < len(spans) and set(shown["cmd"].dropna().astype(int)) == set(range(64))
    whole = render.make_plots(cap, tmp_path / "whole", ["timeline"], formats=("png",),
                              spans=spans)["timeline"][0]
    cut = render.make_plots(cap, tmp_path / "cut", ["timeline"], formats=("png",), spans=shown,
                            span_window=window)["timeline"][0]
    a, b = Image.open(whole).convert("RGBA"), Image.open(cut).convert("RGBA")
    assert a.size == b.size and ImageChops.difference(a, b).getbbox() is None


@pytest.mark.parametrize("late", [set(), {"cwnd"}, {"cwnd", "ladder"}])
def test_the_plots_are_shared_between_two_processes_once_each_and_evenly(late):
    """Each kind is drawn once; the first process draws what needs the tracker (it is fed
    that first), the second the timeline (it is fed the spans); the two shares differ by
    less than the costliest kind."""
    first, second = render.split_kinds(late)
    first_all = first + [k for k in render.KINDS if k in late]
    second_all = second + ["timeline"]
    assert sorted(first_all + second_all) == sorted(render.KINDS)
    assert not late & set(first + second) and "timeline" not in first_all
    cost = [sum(render.DRAW_COST[k] for k in part) for part in (first_all, second_all)]
    assert abs(cost[0] - cost[1]) < max(render.DRAW_COST.values())


def test_tracked_to_file_is_the_tracked_in_memory(tmp_path, monkeypatch):
    """`istrace plot`'s tracker result, its samples in DIR/track.parquet (not held), is the one
    held in memory; a directory that cannot be written gets them in a temporary one."""
    from istrace.capture import layout
    from istrace.capture.tracksamples import FileSamples
    from istrace.track import of_capture
    synth.make_capture(tmp_path, n_cmds=24, qd=2)
    held = load_tracked(tmp_path).track
    filed = load_tracked(tmp_path, to_file=True).track
    assert isinstance(filed.samples, FileSamples)
    assert filed.samples.path == tmp_path / layout.TRACK
    # the same rows and values; the file's label columns keep only the labels used
    same = {"check_categorical": False, "check_dtype": False}
    pd.testing.assert_frame_equal(filed.samples.frame(), held.samples.frame(), **same)
    assert len(held.samples.frame()) > 100
    for name in ("states", "events"):
        pd.testing.assert_frame_equal(getattr(filed, name).frame(), getattr(held, name).frame(),
                                      check_categorical=False)
    assert all(p.is_file() for p in layout.track_files(tmp_path / layout.TRACK))
    (tmp_path / layout.TRACK).unlink()
    monkeypatch.setattr(of_capture.os, "access", lambda *_: False)
    elsewhere = load_tracked(tmp_path, to_file=True).track
    assert not (tmp_path / layout.TRACK).exists()
    assert elsewhere.samples.path.parent != tmp_path
    pd.testing.assert_frame_equal(elsewhere.samples.frame(), held.samples.frame(), **same)


@pytest.mark.parametrize("rows", [7, 1 << 16])
def test_seq_graph_keeps_the_first_retransmission_of_each_cell(rows, monkeypatch):
    """Past max_points, of the retransmissions in one cell of the RTX_CELLS grid (time by
    sequence) only the first is kept, in any chunking; the count is of all of them."""
    from istrace.plot import seqgraph
    monkeypatch.setattr(seqgraph, "RTX_CELLS", 8)
    out = [{"ts_ns": 10**9, "sport": 40000, "dport": 3260, "seq": 99, "ack": 0, "flags": 0x02,
            "win": 64240, "len": 0, "wscale": 7},
           {"ts_ns": 10**9 + 1, "sport": 3260, "dport": 40000, "seq": 999, "ack": 100,
            "flags": 0x12, "win": 65160, "len": 0, "wscale": 7}]
    rng = np.random.default_rng(3)
    sent, t = 0, 10**9 + 10
    for k in range(4000):
        t += int(rng.integers(1, 1000))
        back = 1448 * int(rng.integers(1, 30)) if k % 3 == 0 and sent else 0  # many resends
        out.append({"ts_ns": t, "sport": 3260, "dport": 40000, "seq": 1000 + max(sent - back, 0),
                    "ack": 100, "flags": 0x18, "win": 500, "len": 1448, "wscale": -1})
        sent = max(sent, sent - back + 1448)
    raw = pd.DataFrame(out).assign(frame=0, mss=-1, tsval=-1, tsecr=-1, sack=0,
                                   src=lambda x: np.where(x["sport"] == 3260, "10.0.0.2",
                                                          "10.0.0.1"),
                                   dst=lambda x: np.where(x["sport"] == 3260, "10.0.0.1",
                                                          "10.0.0.2"))
    segs = conn_and_dir(raw)
    conn = "10.0.0.1:40000-10.0.0.2:3260"
    want = _seq_graph_reference(segs, "t2i", conn)["segments"]
    rtx = want[want["rtx"]]
    assert len(rtx) > 1000
    got = seq_graph(segs, "t2i", max_points=300, conn=conn, rows=rows)["segments"]
    assert got.attrs["retransmissions"] == len(rtx)
    t0, t1, top = want["t_ns"].min(), want["t_ns"].max(), want["end"].max()

    def cell(f: pd.DataFrame) -> pd.Series:
        return ((f["t_ns"] - t0) * 8 // (t1 - t0)).clip(0, 7) * 8 + (f["end"] * 8 // top).clip(0, 7)
    first = rtx.groupby(cell(rtx)).head(1)  # each cell's first retransmission
    kept = got[got["rtx"]]
    # each cell's first is kept; others only as a time bin's first, lowest or highest row
    assert set(first["t_ns"]) <= set(kept["t_ns"])
    assert len(kept) < len(rtx) // 4
