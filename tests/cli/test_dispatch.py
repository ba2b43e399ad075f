"""The `istrace` entry point: subcommand dispatch and its errors."""

import shutil
import subprocess
import sys

from istrace.cli import main as cli


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


def test_installed_console_script_runs():
    exe = shutil.which("istrace")
    assert exe, "`make install` must put `istrace` on PATH"
    proc = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and "subcommands:" in proc.stdout
    # the module form works too, for machines without the console script
    proc = subprocess.run([sys.executable, "-m", "istrace.cli.main", "nope"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
