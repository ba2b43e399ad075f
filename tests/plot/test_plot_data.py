"""The data behind every plot, checked against a synthetic capture whose truth is known."""

import numpy as np
import pandas as pd
import pytest
import synth
from istrace.capture import tcpseq
from istrace.capture.decoded import conn_and_dir
from istrace.capture.load import load_capture
from istrace.model import study
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


def test_bursts_idle_gaps_and_ratio(cap1):
    cap, t = cap1
    segs = cap.segs["target"]
    thr = data.burst_gap_threshold(segs, "t2i")
    b = data.data_bursts(segs, "t2i", thr)
    # The Response PDU goes out one segment time after the data: same burst.
    assert len(b) == t.n_cmds
    assert b["start_ns"].tolist() == t.burst_start
    seg_ns = int(synth.MSS / t.rate * 1e9)
    assert (b["end_ns"] - np.asarray(t.burst_end) == seg_ns).all()
    gaps = data.gaps_from_bursts(b)
    assert len(gaps) == t.n_cmds - 1
    expect = np.asarray(t.burst_start[1:]) - (np.asarray(t.burst_end[:-1]) + seg_ns)
    assert (gaps["gap_ns"].to_numpy() == expect).all()
    # Idle is the 2 one-way delays + target think time out of each cycle.
    assert gaps["gap_ns"].min() > 2 * t.owd_ns
    ratio = data.idle_ratio(b)
    total = b["end_ns"].iloc[-1] - b["start_ns"].iloc[0]
    busy = (b["end_ns"] - b["start_ns"]).sum()
    assert ratio == pytest.approx(1 - busy / total, rel=1e-4)
    assert 0.8 < ratio < 0.95
    rate = data.peak_rate(b)
    assert rate == pytest.approx(t.rate, rel=0.1)
    # The study's model: 32 KiB at 2 ms one way and 100 MB/s.
    send = 32768 / 100e6
    assert study.idle_ratio(32768, 0.002, 100e6) == pytest.approx(1 - send / (0.008 + send))
    assert study.seq_read_throughput(32768, 0.002, 100e6) == pytest.approx(
        32768 / (0.008 + send))


def test_outstanding_ceiling(cap1, tmp_path):
    cap, t = cap1
    s1 = data.outstanding(cap.commands["initiator"])
    c1 = data.outstanding_ceiling(s1)
    assert c1["max"] == 1 and s1["outstanding"].iloc[-1] == 0
    t2 = synth.make_capture(tmp_path / "qd2", n_cmds=40, qd=2)
    cap2 = load_capture(tmp_path / "qd2")
    s2 = data.outstanding(cap2.commands["initiator"])
    c2 = data.outstanding_ceiling(s2)
    assert c2["max"] == 2 and c2["flat"] and c2["reached"] >= 10
    assert (s2["outstanding"] >= 0).all()
    assert len(t2.issue) == 40


def test_resp_times_and_sizes(cap1):
    cap, t = cap1
    rt = data.resp_times(cap.commands["initiator"]).to_numpy()
    assert np.allclose(rt, (np.asarray(t.resp) - np.asarray(t.issue)) / 1000)
    sizes = data.block_sizes(cap.commands["initiator"], cap.held_events())
    assert sizes["syscall"]["typical"] == 64 * 32768
    assert sizes["block"]["typical"] == 524288 and sizes["block"]["count"] == 4
    assert sizes["scsi_command"]["typical"] == 32768 and sizes["scsi_command"]["count"] == 64


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
    th = data.throughput(cap.segs["target"], "t2i", bins=50)
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


def test_syscall_size_counts_only_reads_that_queued_block_io():
    """With a block layer, the application's read size is that of the reads during which the
    same process queued a bio: a shell's small file reads (same cgroup, same pid space) are
    not it."""
    import pandas as pd

    t0 = 1_000_000_000
    ev = pd.DataFrame([
        # the shell reads its script: no block I/O during it
        {"ts_ns": t0 + 100, "host": "initiator", "layer": "syscall", "event": "read_exit",
         "pid": 7, "bytes": 832.0, "lat_ns": 50.0},
        # dd's 2 MiB O_DIRECT read, with its bio queued inside the call
        {"ts_ns": t0 + 1000, "host": "initiator", "layer": "block", "event": "bio_queue",
         "pid": 9, "bytes": 2097152.0, "lat_ns": float("nan")},
        {"ts_ns": t0 + 5000, "host": "initiator", "layer": "syscall", "event": "read_exit",
         "pid": 9, "bytes": 2097152.0, "lat_ns": 4500.0},
        # another process's read overlapping dd's bio: not the one that queued it
        {"ts_ns": t0 + 2000, "host": "initiator", "layer": "syscall", "event": "read_exit",
         "pid": 8, "bytes": 784.0, "lat_ns": 1500.0},
    ])
    sizes = data.block_sizes(None, ev)
    assert sizes["syscall"] == {"typical": 2097152.0, "max": 2097152.0, "count": 1}
    # no block events (a user-space initiator): every read counts
    sizes = data.block_sizes(None, ev[ev["layer"] == "syscall"])
    assert sizes["syscall"]["count"] == 3


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


def test_scsi_midlayer_outstanding_counts_data_commands_dispatched_not_done():
    """A kernel initiator's SCSI midlayer count: +1 at dispatch, -1 at done, data commands
    only (a TEST UNIT READY poll, no LBA, does not count), a completion of a command
    dispatched before the capture does not push the count below zero."""
    import pandas as pd

    rows = [("scsi_done", 50, 7.0),          # dispatched before the capture began
            ("scsi_dispatch", 100, 8.0), ("scsi_dispatch", 110, 16.0),
            ("scsi_dispatch", 115, None),     # TEST UNIT READY
            ("scsi_done", 120, None), ("scsi_done", 200, 8.0),
            ("scsi_dispatch", 200, 24.0), ("scsi_done", 300, 16.0), ("scsi_done", 400, 24.0)]
    ev = pd.DataFrame(rows, columns=["event", "ts_ns", "lba"]).assign(host="initiator",
                                                                        layer="scsi")
    s = data.scsi_outstanding(ev)
    assert s["outstanding"].max() == 2 and s["outstanding"].min() == 0
    ceil = data.outstanding_ceiling(s)
    # 2 outstanding from 110 to 300 (the done at 200 and the dispatch at 200 are one instant)
    assert ceil["max"] == 2 and abs(ceil["time_at_max"] - 190 / 350) < 1e-9
    assert data.scsi_outstanding(ev.assign(layer="block")).empty


def test_outstanding_ends_an_unanswered_command_where_its_tag_is_reused():
    """A command whose reply the capture lacks ended before the initiator used its task tag
    again on the connection (RFC 7143: tags are unique among outstanding tasks); one never
    reused stays open."""
    import pandas as pd

    c = pd.DataFrame({"conn": "a", "itt": ["0x1", "0x2", "0x1", "0x3"],
                      "issue_ts_ns": [0, 10, 50, 60],
                      "resp_ts_ns": pd.array([None, 40, 70, None], dtype="Int64")})
    s = data.outstanding(c)
    at = dict(zip(s["t_ns"], s["outstanding"], strict=False))
    assert at[40] == 1 and at[50] == 1      # 0x1 closed at 50 by its reuse, reopened at 50
    assert s["outstanding"].iloc[-1] == 1   # 0x3: no reply, tag never reused


def test_command_spans_past_4_gib_and_any_slicing():
    """A minute at full rate sends several times 2^32 bytes: each command's span must come
    from its own segments, not from those 4 GiB earlier or later with the same sequence
    numbers mod 2^32 (seen: 39 s spans of 4 GiB "commands" on a 60 s capture)."""
    seg_len, per_cmd, n_cmds = 65536, 1024, 200  # 64 MiB commands: 12.5 GiB in all
    isn = 4_000_000_000
    k = np.arange(n_cmds * per_cmd, dtype=np.int64)
    ts = 1_000_000_000 + k * 10_000                     # a segment every 10 us
    segs = pd.DataFrame({
        "frame": k, "ts_ns": ts, "src": "10.0.0.2", "sport": 3260, "dst": "10.0.0.1",
        "dport": 40000, "seq": (isn + 1 + k * seg_len) % 2**32, "ack": 1, "flags": 0x18,
        "win": 500, "len": seg_len, "wscale": -1, "mss": -1, "tsval": -1, "tsecr": -1,
        "sack": 0})
    segs = conn_and_dir(segs)
    cmd_bytes = per_cmd * seg_len
    # one Data-In PDU per command, its 48-byte header at the command's first byte
    cmds = np.arange(n_cmds)
    pdus = pd.DataFrame({
        "conn": segs["conn"].iloc[0], "dir": "t2i", "opcode_name": "SCSI Data-In",
        "cmd": cmds, "pdu": cmds, "ts_ns": 1_000_000_000 + cmds * per_cmd * 10_000,
        "tcp_seq": (isn + 1 + cmds * cmd_bytes) % 2**32, "ahs_len": 0,
        "dsl": cmd_bytes - 48})
    assert (isn + 1 + n_cmds * cmd_bytes) // 2**32 >= 3  # the stream wraps three times
    want_start = 1_000_000_000 + cmds * per_cmd * 10_000
    want_end = want_start + (per_cmd - 1) * 10_000
    for rows in (1 << 16, 999, 10**9):
        sp = data.segment_spans(pdus, segs, "t", "target", "t2i", slice_rows=rows)
        assert sp["cmd"].tolist() == cmds.tolist()
        assert (sp["start_ns"].to_numpy() == want_start).all(), rows
        assert (sp["end_ns"].to_numpy() == want_end).all(), rows
        assert (sp["bytes"] == cmd_bytes).all()


def test_spans_of_small_pdus_from_blocks_are_those_of_the_table():
    """8 KiB PDUs, 16 a command, some sent among the next command's, the stream wrapping:
    each command's and each PDU's span is its own segments' first and last time, whether
    the PDUs come as one table or in blocks of any size (the report reads them a block at a
    time, keeping only each command's range of the stream)."""
    seg_len, per_cmd, n_cmds = 8192, 16, 300
    isn = 2**32 - 10 * seg_len
    n = per_cmd * n_cmds
    rng = np.random.default_rng(5)
    cmd = np.repeat(np.arange(n_cmds), per_cmd)
    moved = np.flatnonzero(rng.random(n) < 0.05)
    moved = moved[cmd[moved] < n_cmds - 1]
    cmd[moved] += 1  # this segment's PDU belongs to the next command
    k = np.arange(n, dtype=np.int64)
    ts = 10**9 + k * 7_000
    segs = conn_and_dir(pd.DataFrame({
        "frame": k, "ts_ns": ts, "src": "10.0.0.2", "sport": 3260, "dst": "10.0.0.1",
        "dport": 40000, "seq": (isn + 1 + k * seg_len) % 2**32, "ack": 1, "flags": 0x18,
        "win": 500, "len": seg_len, "wscale": -1, "mss": -1, "tsval": -1, "tsecr": -1,
        "sack": 0}))
    pdus = pd.DataFrame({
        "conn": segs["conn"].iloc[0], "dir": "t2i", "opcode_name": "SCSI Data-In",
        "cmd": cmd, "pdu": k, "ts_ns": ts, "tcp_seq": (isn + 1 + k * seg_len) % 2**32,
        "ahs_len": 0, "dsl": seg_len - 48})
    want = pd.DataFrame({"cmd": cmd, "ts": ts}).groupby("cmd")["ts"].agg(["min", "max"])
    for key in ("cmd", "pdu"):
        one = list(data.span_arrays(pdus, segs, "t2i", key))
        assert len(one) == 1
        if key == "cmd":
            assert one[0].keys.tolist() == want.index.tolist()
            assert (one[0].first == want["min"].to_numpy()).all()
            assert (one[0].last == want["max"].to_numpy()).all()
            # a command's range: from its lowest PDU's first byte to its highest's last
            assert (one[0].bytes == (want["max"] - want["min"]) // 7_000 * seg_len
                    + seg_len).all()
        else:
            assert (one[0].keys == k).all() and (one[0].first == ts).all()
            assert (one[0].last == ts).all() and (one[0].bytes == seg_len).all()
        for rows in (1, 7, 100, 10**6):
            got = list(data.span_arrays((pdus.iloc[a:a + rows]
                                         for a in range(0, len(pdus), rows)),
                                        segs, "t2i", key, slice_rows=999))
            assert len(got) == 1 and got[0].conn == one[0].conn
            for f in ("keys", "first", "last", "bytes"):
                np.testing.assert_array_equal(getattr(got[0], f), getattr(one[0], f))


def test_bursts_spacing_and_totals_read_in_slices_match_the_whole_table():
    """Bursts, the median spacing of data segments and the per-connection totals are read a
    slice of the table at a time: they must be what the whole table sorted by time gives,
    with bursts and equal time stamps across the cuts and stamps stepping back in time."""
    rng = np.random.default_rng(7)
    n = 150_000  # three slices and more
    gap = rng.choice([1_000, 2_000, 2_500, 150_000, 3_000_000_000], size=n,
                     p=[0.5, 0.3, 0.1, 0.09, 0.01])
    ts = 10**12 + np.cumsum(gap)
    ts[1000:1003] = ts[1000:1003][::-1]  # a capture's stamps stepping back
    segs = pd.DataFrame({"ts_ns": ts, "len": rng.integers(0, 9000, n).astype(np.int32),
                         "dir": pd.Categorical(rng.choice(["t2i", "i2t"], n, p=[0.9, 0.1])),
                         "conn": pd.Categorical(rng.choice(["a", "b"], n))})
    for d in ("t2i", "i2t"):
        x = segs[(segs["dir"] == d) & (segs["len"] > 0)]
        o = np.argsort(x["ts_ns"].to_numpy(), kind="stable")
        t, ln = x["ts_ns"].to_numpy()[o], x["len"].to_numpy(np.int64)[o]
        med = float(np.median(np.diff(t)))
        assert data.burst_gap_threshold(segs, d) == int(max(5 * med, 100_000))
        for thr in (100_000, 1_000_000):
            first = np.flatnonzero(np.concatenate([[True], np.diff(t) > thr]))
            last = np.concatenate([first[1:] - 1, [len(t) - 1]])
            b = data.data_bursts(segs, d, thr)
            assert b["start_ns"].tolist() == t[first].tolist()
            assert b["end_ns"].tolist() == t[last].tolist()
            assert b["bytes"].tolist() == np.add.reduceat(ln, first).tolist()
            assert b["segments"].tolist() == (last - first + 1).tolist()
        tot = data.payload_totals(segs, d)
        g = x.groupby("conn", observed=True)
        assert tot["bytes"].tolist() == g["len"].sum().tolist()
        assert tot["first_ns"].tolist() == g["ts_ns"].min().tolist()
        assert tot["last_ns"].tolist() == g["ts_ns"].max().tolist()
        assert tot["largest"].tolist() == g["len"].max().tolist()


@pytest.mark.parametrize("n", [140_001, 140_002])
def test_median_spacing_is_exact(n):
    """The median spacing is taken in two passes of bounded memory: it must be np.median's,
    for odd and even counts, spacings from nanoseconds to seconds, across the slices' cuts."""
    rng = np.random.default_rng(n)
    gap = np.where(rng.random(n) < 0.3, rng.integers(2**30, 2**33, n), rng.integers(1, 5000, n))
    ts = 10**12 + np.cumsum(gap)
    segs = pd.DataFrame({"ts_ns": ts, "len": np.full(n, 100, np.int32),
                         "dir": pd.Categorical(["t2i"] * n), "conn": pd.Categorical(["a"] * n)})
    assert data.median_spacing(segs, "t2i") == float(np.median(np.diff(ts)))
    segs["ts_ns"] = 10**12 + np.cumsum(rng.integers(2**30, 2**33, n))  # the median >= 1 s
    assert data.median_spacing(segs, "t2i") == float(np.median(np.diff(segs["ts_ns"])))
    segs["ts_ns"] = 10**12 + np.cumsum(rng.integers(2**26, 2**29, n))  # 67-540 ms
    assert data.median_spacing(segs, "t2i") == float(np.median(np.diff(segs["ts_ns"])))


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
