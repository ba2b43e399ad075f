"""A capture into a directory that holds an earlier one: refused unless --replace, which
removes exactly what istrace wrote there (the earlier capture's merged trace or decoded PDUs
would otherwise be reported as the new capture's)."""

import subprocess
import sys
from pathlib import Path

import pytest
from istrace.capture import layout

EARLIER = ["meta.json", "initiator.pcap", "target.pcap", "events-target.jsonl",
           "events-target.meta.json", "hoststats-initiator.jsonl", "tcpdump-target.log",
           "workload.stderr", "merged.parquet", "merged.csv", "clock.json", "report.html",
           "trace.json", "verdict.json", "verdict.parquet", "track.parquet",
           "track_states.parquet", "track_events.csv", "pdus.csv",
           "decoded/initiator/pdus.csv", "decoded/target/segments.bin",
           "segments/host=initiator/part-0.parquet", "commands/host=target/part-0.parquet",
           "plots/cwnd.png", "decoded-target/pdus.csv", "decoded-target/commands.csv",
           ".merge-999999-x/events-initiator.arrow"]
KEPT = ["notes.txt", "decoded-target/how-i-decoded.txt", "mine/pdus.txt"]


def _fill(d: Path) -> None:
    for name in EARLIER + KEPT:
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_text("x")


def test_only_what_istrace_wrote_goes(tmp_path: Path) -> None:
    _fill(tmp_path)
    found = layout.earlier_capture(tmp_path)
    top = {p.relative_to(tmp_path).parts[0] for p in found}
    assert {"decoded", "segments", "commands", "plots", ".merge-999999-x"} <= top
    assert not any(k.split("/")[0] in top for k in ("notes.txt", "mine"))
    layout.remove(found)
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert left == sorted(KEPT)
    assert layout.earlier_capture(tmp_path) == []


def test_a_new_directory_holds_no_earlier_capture(tmp_path: Path) -> None:
    assert layout.earlier_capture(tmp_path / "new") == []
    (tmp_path / "notes.txt").write_text("x")
    assert layout.earlier_capture(tmp_path) == []


def test_replace_removes_what_refusal_names(tmp_path: Path) -> None:
    _fill(tmp_path)
    with pytest.raises(layout.EarlierCapture, match="earlier capture .*--replace"):
        layout.clear_for_capture(tmp_path, replace=False)
    assert all((tmp_path / n).is_file() for n in EARLIER + KEPT)
    named = len(layout.earlier_capture(tmp_path))
    assert layout.clear_for_capture(tmp_path, replace=True) == named > 20
    assert not layout.earlier_capture(tmp_path)
    assert all((tmp_path / n).is_file() for n in KEPT)


@pytest.mark.parametrize("how", [["capture", "--name", "ecap", "--workload", "true"],
                                 ["capture", "--kernel", "--name", "ecapvm", "--dd-count", "1"]])
def test_capture_refuses_an_earlier_capture_and_keeps_it(tmp_path: Path, how: list[str]) -> None:
    """Both testbeds' captures (namespaces, the full-kernel VM): refused before any testbed
    is brought up or looked for."""
    _fill(tmp_path)
    r = subprocess.run([sys.executable, "-m", "istrace.cli.main", *how, "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2, r.stderr
    assert "earlier capture" in r.stderr and "--replace" in r.stderr
    assert r.stderr.count("\n") == 1
    for name in EARLIER + KEPT:
        assert (tmp_path / name).is_file(), name


def test_the_vm_testbeds_capture_call_refuses_too(tmp_path: Path) -> None:
    """The library call (`istrace reproduce kernel`'s, the VM tests') as the command line:
    refused before the guest is asked anything (no VM is up here: asking would fail
    otherwise), every file kept."""
    from istrace.testbed.vm import VmConfig, VmTestbed

    _fill(tmp_path)
    tb = VmTestbed(VmConfig(name="ecapl"))
    with pytest.raises(layout.EarlierCapture, match="earlier capture"):
        tb.capture(tmp_path, "true")
    for name in EARLIER + KEPT:
        assert (tmp_path / name).is_file(), name


def test_a_hung_vm_capture_tried_again_keeps_the_directorys_other_files(tmp_path: Path) -> None:
    """A guest that hangs is rebooted and the capture run again: what istrace wrote is
    cleared for it, the directory's other files stay (it used to remove the whole directory)."""
    from istrace.testbed.vm import VmConfig, VmHung, VmTestbed

    class Hangs(VmTestbed):
        tries = 0

        def capture_once(self, out_dir, workload, probes="istrace", timeout_s=900.0):
            Hangs.tries += 1
            if Hangs.tries == 1:
                (Path(out_dir) / "initiator.pcap").write_text("partial")
                raise VmHung("guest request timed out")
            return Path(out_dir)

        def restart(self):
            pass

    (tmp_path / "notes.txt").write_text("mine")
    Hangs(VmConfig(name="ecaph")).capture(tmp_path, "true", hang_retries=1)
    assert Hangs.tries == 2
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert not (tmp_path / "initiator.pcap").exists()
