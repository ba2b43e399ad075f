"""`istrace compare` on captures that differ in one setting: it names that setting and the gain."""

import json

import synth
from istrace.cli import compare as compare_cli
from istrace.report import compare


def _capture(d, qd):
    synth.make_capture(d, n_cmds=32, qd=qd)
    meta = json.loads((d / "meta.json").read_text())
    meta["workload"] = {"command": "gen --size 32k" + (f" --queue-depth {qd}" if qd > 1 else "")}
    (d / "meta.json").write_text(json.dumps(meta))


def test_compare_names_queue_depth_and_the_gain(tmp_path, capsys):
    _capture(tmp_path / "qd1", 1)
    _capture(tmp_path / "qd4", 4)
    out = tmp_path / "cmp.html"
    assert compare_cli.main([str(tmp_path / "qd1"), str(tmp_path / "qd4"),
                             "--html", str(out)]) == 0
    text = capsys.readouterr().out
    sums = [compare.summarize(tmp_path / n) for n in ("qd1", "qd4")]
    diff = compare.differing(sums)
    # The queue depth differs (1 is istrace-gen's default), and so does what was measured.
    assert diff["gen --queue-depth"] == ["1", "4"]
    assert diff["commands outstanding (measured max)"] == [1, 4]
    assert "gen --size" not in diff and "testbed delay_ms" not in diff
    gain = sums[1]["throughput_MBps"] / sums[0]["throughput_MBps"]
    assert gain > 2
    assert f"(x{gain:.2f})" in text
    assert sums[0]["primary"] == "initiator_concurrency"
    page = out.read_text()
    assert "gen --queue-depth" in page and "data:image/png;base64," in page
    # Each capture got its verdict.json on the way.
    assert (tmp_path / "qd1" / "verdict.json").is_file()


def test_compare_needs_two_captures(tmp_path, capsys):
    _capture(tmp_path / "a", 1)
    assert compare_cli.main([str(tmp_path / "a")]) == 2
    assert compare_cli.main([str(tmp_path / "a"), str(tmp_path / "missing")]) == 2
