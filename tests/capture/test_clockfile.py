"""clock.json (istrace.capture.clockfile): written whole, read back, told in words the same
way by the merge's summary and the report's page."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest
from istrace.capture import clockfile, layout
from istrace.capture.load import Capture
from istrace.cli.merge import summary
from istrace.merge.merger import ClockEstimate, MergeResult

TWO_WAY = ClockEstimate(-1500, 500, 30, 10, 20, -2000, -1000, "tcp-segments-two-way")


def test_written_whole_and_read_back(tmp_path: Path) -> None:
    clockfile.write(tmp_path, asdict(TWO_WAY))
    assert clockfile.read(tmp_path) == asdict(TWO_WAY)
    assert [p.name for p in tmp_path.iterdir()] == [layout.CLOCK]  # no temporary left
    (tmp_path / layout.CLOCK).write_text("[1, 2]\n")
    with pytest.raises(ValueError, match="not a JSON object"):
        clockfile.read(tmp_path)
    assert clockfile.read(tmp_path / "nothing-here") is None


@pytest.mark.parametrize(("clock", "says"), [
    (TWO_WAY, "offset -1.5 us +- 0.5 us (target minus initiator; tcp-segments-two-way; "
              "10 i2t + 20 t2i segments)"),
    (ClockEstimate(1500, None, 7, 0, 7, 1500, None, "tcp-segments-one-way"),
     "offset +1.5 us, bounded on one side only (tcp-segments-one-way; 7 segments)"),
    (ClockEstimate(None, None, 0, 0, 0, None, None, "none"),
     "offset unknown (none: no segment seen at both ends); target times not moved"),
])
def test_the_merge_and_the_report_say_the_same(clock: ClockEstimate, says: str) -> None:
    """The merge's summary (from its estimate) and the report's page (from clock.json as
    read back) give one text for one estimate."""
    r = MergeResult([], 0, clock, {}, {})
    assert summary(r, 1.0)[0] == f"clock: {says}"
    assert Capture(dir=Path("."), clock=asdict(clock)).clock_note == f"clock {says}"
