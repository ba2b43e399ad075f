"""The README's command line, each subcommand's --help and the code say the same: every
subcommand and plot kind the README names exists (and every one that exists is named), every
reproduce experiment it names exists, and each --help runs and its prose is whole sentences."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from istrace.cli import VERSION
from istrace.cli import main as cli
from istrace.cli.reproduce import EXPERIMENTS
from istrace.plot.render import KINDS

REPO = Path(__file__).resolve().parents[2]
# the subcommands whose --help is the C program's own usage, not argparse's
C_HELP = {"decode": "istrace-decode", "gen": "istrace-gen", "probe": "istrace-probe"}


def _readme_commands() -> list[str]:
    """The lines of the README's command-line block that start with `istrace`."""
    text = (REPO / "README.md").read_text()
    block = text.split("## The command line", 1)[1].split("```", 2)[1]
    return [ln for ln in block.splitlines() if ln.startswith("istrace ")]


def test_readme_names_every_subcommand_and_only_those() -> None:
    named = {m for ln in _readme_commands() for m in re.findall(r"(?:^|; )istrace (\w+)", ln)}
    assert named == set(cli.COMMANDS)


def test_readme_plot_kinds_are_the_code_s() -> None:
    kinds = {k for ln in _readme_commands() for m in re.findall(r"--kind ([\w|]+)", ln)
             for k in m.split("|")}
    assert kinds == {*KINDS, "all"}


def test_readme_reproduce_experiments_exist() -> None:
    named = {k for ln in _readme_commands() if ln.startswith("istrace reproduce ")
             for k in ln.split()[2].split("|")}
    assert named and named <= set(EXPERIMENTS), named - set(EXPERIMENTS)


def _istrace(*args: str) -> subprocess.CompletedProcess[str]:
    """The tree's `istrace` (not the machine's installed one)."""
    env = {"PYTHONPATH": ":".join(str(REPO / p) for p in ("scripts", "bpf", "decoder", "viz")),
           "PATH": "/usr/bin:/bin", "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-m", "istrace.cli.main", *args],
                          capture_output=True, text=True, timeout=60, env=env, cwd=REPO)


def _prose(text: str) -> list[str]:
    """argparse's description and epilog: the paragraphs that are neither the usage nor an
    option section (a section's first line ends in ':')."""
    paras = [p for p in re.split(r"\n\s*\n", text) if p.strip()]
    return [" ".join(p.split()) for p in paras
            if not p.startswith("usage:") and not p.splitlines()[0].rstrip().endswith(":")
            and not p.startswith(" ")]


def _whole(sentence: str) -> bool:
    return (sentence.endswith(".") and sentence.count("`") % 2 == 0
            and sentence.count("(") == sentence.count(")"))


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_help_runs_and_its_prose_is_whole_sentences(name: str) -> None:
    r = _istrace(name, "--help")
    assert r.returncode == 0, r.stderr
    if name in C_HELP:
        assert r.stdout.startswith(f"usage: {C_HELP[name]}")
        return
    assert r.stdout.startswith(f"usage: istrace {name}")
    prose = _prose(r.stdout)
    assert prose, f"istrace {name} --help has no description"
    for p in prose:
        assert _whole(p), f"istrace {name} --help: {p!r} is not a whole sentence"


def test_prose_check_catches_a_cut_sentence() -> None:
    cut = "usage: istrace x [-h]\n\n`istrace x A`: side by side (throughput, the\n\noptions:\n"
    assert not all(_whole(p) for p in _prose(cut))


def test_version() -> None:
    r = _istrace("--version")
    assert r.returncode == 0 and r.stdout == f"istrace {VERSION}\n"
    # the package's version (setuptools cannot read it from the namespace package's module)
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"] == VERSION
