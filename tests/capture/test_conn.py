"""The connection key: built and parsed in one place, spelled as the C decoder spells it."""

from __future__ import annotations

import pandas as pd
import pytest
from istrace.capture.conn import conn_key, endpoint, parse_conn, parse_endpoint
from istrace.capture.decoded import conn_and_dir


def test_ipv4_and_ipv6_spelling() -> None:
    assert conn_key("10.77.0.1", 40312, "10.77.0.2", 3260) == "10.77.0.1:40312-10.77.0.2:3260"
    key = conn_key("fd00:99::1", 40000, "fd00:99::2", "3260")
    assert key == "[fd00:99::1]:40000-[fd00:99::2]:3260"  # decoder/session.c addr_text
    assert endpoint("[fd00::1]", 1) == "[fd00::1]:1"  # segments.csv addresses: bracketed
    assert parse_conn(key) == ("fd00:99::1", 40000, "fd00:99::2", 3260)
    assert parse_endpoint("10.0.0.1:5") == ("10.0.0.1", 5)
    for bad in ("10.0.0.1-10.0.0.2", "a:1-b", "fd00::1:1-x:2"):
        with pytest.raises(ValueError):
            parse_conn(bad)


def test_segments_keyed_initiator_first() -> None:
    segs = pd.DataFrame({"src": ["[fd00::2]", "[fd00::1]"], "sport": [3260, 51000],
                         "dst": ["[fd00::1]", "[fd00::2]"], "dport": [51000, 3260],
                         "flags": [0x12, 0x10]})
    out = conn_and_dir(segs)
    assert set(out["conn"]) == {conn_key("fd00::1", 51000, "fd00::2", 3260)}
    assert out["dir"].tolist() == ["t2i", "i2t"]
