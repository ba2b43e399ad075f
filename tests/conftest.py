"""Fixtures every test directory shares. Helper modules two or more test folders import
(synth: a synthetic capture of known truth; core_helpers: small decoder captures) sit beside
this file, and this folder is on the import path for all of them."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

# Subprocesses (`python -m istrace.cli.main`, the testbed's helpers) run this tree's sources,
# never an installed copy: `make test` does not install, and a fresh machine has none.
_REPO = Path(__file__).resolve().parents[1]
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(_REPO / p) for p in ("scripts", "bpf", "decoder", "viz")]
    + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])


@pytest.fixture(scope="module")
def module_tmp(request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Path]]:
    """mktemp for a module's captures, removed after the module when none of its tests
    failed: the scenario suite's, the probe runs' and the bulk reads' captures are 9 GB
    together, which kept to the session's end all sat on the disk at once."""
    made: list[Path] = []
    failed = request.session.testsfailed

    def mktemp(name: str) -> Path:
        made.append(tmp_path_factory.mktemp(name))
        return made[-1]

    yield mktemp
    if request.session.testsfailed == failed:
        for path in made:
            shutil.rmtree(path, ignore_errors=True)
