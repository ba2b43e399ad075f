"""The capture's PDU tables: read from pdus.csv when asked for, never held by the capture."""

import pandas as pd
import pytest
import synth
from istrace.capture.decoded import ANALYSED_PDU_COLUMNS, read_table
from istrace.capture.load import Capture, load_capture
from istrace.capture.pdutables import PDU_LABELS, PduTables


@pytest.fixture(scope="module")
def cap(module_tmp):
    d = module_tmp("pdutables")
    synth.make_capture(d, n_cmds=16, qd=2)
    return load_capture(d)


def test_read_when_asked_equals_the_whole_read(cap):
    for host in ("initiator", "target"):
        path = cap.dir / "decoded" / host / "pdus.csv"
        want = read_table(path, ANALYSED_PDU_COLUMNS, PDU_LABELS)
        pd.testing.assert_frame_equal(cap.pdus[host], want)
        # a second read is a new table: nothing is held between steps
        assert cap.pdus[host] is not cap.pdus[host]
    assert not any(isinstance(v, pd.DataFrame) for v in vars(cap.pdus)["_tables"].values())


def test_read_takes_only_the_columns_asked(cap):
    got = cap.pdus.read("target", ["ts_ns", "opcode_name"])
    assert list(got.columns) == ["ts_ns", "opcode_name"]
    assert isinstance(got["opcode_name"].dtype, pd.CategoricalDtype)
    assert got["ts_ns"].dtype == "Int64"
    assert cap.pdus.read("nobody") is None


def test_main_pdus_reads_only_the_initiators(cap, monkeypatch):
    asked = []
    real = PduTables.read
    monkeypatch.setattr(PduTables, "read", lambda self, h, c=None: asked.append(h) or
                        real(self, h, c))
    assert len(cap.main_pdus()) == len(cap.pdus.read("initiator"))
    assert asked == ["initiator", "initiator"]  # the table, then the test's own read
    # the tracker reads only the columns its command lookup needs
    got = cap.main_pdus(["conn", "dir", "tcp_seq", "cmd"])
    assert sorted(got.columns) == ["cmd", "conn", "dir", "tcp_seq"]
    assert len(got) == len(cap.pdus.read("initiator"))


def test_a_table_given_is_held_as_given():
    t = pd.DataFrame({"ts_ns": [1, 2], "dir": ["i2t", "t2i"]})
    c = Capture(dir=".", pdus={"initiator": t})
    assert c.pdus["initiator"] is t
    assert list(c.pdus.read("initiator", ["dir", "cmd"]).columns) == ["dir"]
    c.pdus["target"] = t
    assert list(c.pdus) == ["initiator", "target"] and len(c.pdus) == 2
    del c.pdus["target"]
    assert "target" not in c.pdus and c.pdus.get("target") is None


def test_an_unreadable_file_is_told_at_the_load(tmp_path):
    bad = tmp_path / "pdus.csv"
    bad.write_bytes(b"")
    with pytest.raises((OSError, ValueError)):
        PduTables().add_file("initiator", bad)
