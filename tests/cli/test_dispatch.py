"""The `istrace` entry point: subcommand dispatch and its errors."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from istrace.cli import main as cli

REPO = Path(__file__).resolve().parents[2]


def test_help_lists_every_subcommand(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("testbed", "capture", "decode", "merge", "track", "plot", "gen", "report",
                 "reproduce", "probe"):
        assert f"  {name} " in out


def test_no_arguments_is_a_usage_error(capsys):
    assert cli.main([]) == 2
    assert "usage: istrace" in capsys.readouterr().out


def test_unknown_subcommand_names_it(capsys):
    assert cli.main(["frobnicate"]) == 2
    assert "unknown subcommand 'frobnicate'" in capsys.readouterr().err


def test_missing_part_is_reported_not_raised(monkeypatch, capsys):
    monkeypatch.setitem(cli.COMMANDS, "ghost", ("istrace_ghost_part.cli", "not built"))
    assert cli.main(["ghost"]) == 2
    assert "not available in this build" in capsys.readouterr().err


def test_console_script_installs_into_a_venv_of_its_own(tmp_path):
    """The packaging works (every folder's part mapped), installed only into a throwaway
    venv: the test never touches the machine's installed `istrace`."""
    before = shutil.which("istrace")
    before_target = os.path.realpath(before) if before else None
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, timeout=120)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps",
                    "--no-build-isolation", str(REPO)], check=True, timeout=300,
                   capture_output=True)
    exe = venv / "bin" / "istrace"
    proc = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=30,
                          cwd=tmp_path)
    assert proc.returncode == 0 and "subcommands:" in proc.stdout
    # the module form works too, for machines without the console script
    proc = subprocess.run([sys.executable, "-m", "istrace.cli.main", "nope"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    after = shutil.which("istrace")
    assert (os.path.realpath(after) if after else None) == before_target
