"""Commands outstanding on the wire and in the SCSI midlayer, and the ceiling they hold."""

import synth
from istrace.capture.load import load_capture
from istrace.measure.outstanding import outstanding, outstanding_ceiling, scsi_outstanding


def test_outstanding_ceiling(cap1, tmp_path):
    cap, t = cap1
    s1 = outstanding(cap.commands["initiator"])
    c1 = outstanding_ceiling(s1)
    assert c1["max"] == 1 and s1["outstanding"].iloc[-1] == 0
    t2 = synth.make_capture(tmp_path / "qd2", n_cmds=40, qd=2)
    cap2 = load_capture(tmp_path / "qd2")
    s2 = outstanding(cap2.commands["initiator"])
    c2 = outstanding_ceiling(s2)
    assert c2["max"] == 2 and c2["flat"] and c2["reached"] >= 10
    assert (s2["outstanding"] >= 0).all()
    assert len(t2.issue) == 40


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
    s = scsi_outstanding(ev)
    assert s["outstanding"].max() == 2 and s["outstanding"].min() == 0
    ceil = outstanding_ceiling(s)
    # 2 outstanding from 110 to 300 (the done at 200 and the dispatch at 200 are one instant)
    assert ceil["max"] == 2 and abs(ceil["time_at_max"] - 190 / 350) < 1e-9
    assert scsi_outstanding(ev.assign(layer="block")).empty


def test_outstanding_ends_an_unanswered_command_where_its_tag_is_reused():
    """A command whose reply the capture lacks ended before the initiator used its task tag
    again on the connection (RFC 7143: tags are unique among outstanding tasks); one never
    reused stays open."""
    import pandas as pd

    c = pd.DataFrame({"conn": "a", "itt": ["0x1", "0x2", "0x1", "0x3"],
                      "issue_ts_ns": [0, 10, 50, 60],
                      "resp_ts_ns": pd.array([None, 40, 70, None], dtype="Int64")})
    s = outstanding(c)
    at = dict(zip(s["t_ns"], s["outstanding"], strict=False))
    assert at[40] == 1 and at[50] == 1      # 0x1 closed at 50 by its reuse, reopened at 50
    assert s["outstanding"].iloc[-1] == 1   # 0x3: no reply, tag never reused
