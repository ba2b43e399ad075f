"""Fixtures of the istrace-gen tests: one plain testbed per module."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from istrace.system import paths
from istrace.testbed import namespaces as testbed_mod
from istrace.testbed.namespaces import Testbed as Bed


@pytest.fixture(scope="module")
def tb() -> Iterator[Bed]:
    """A plain testbed (no CHAP, no delay) with a 64 MiB LUN of the schema pattern."""
    paths.binary("istrace-gen")  # fail early with the build hint
    # names are short and fixed so runs by other suites never collide; their tgtd control
    # ports (derived from the name) stay below tgtd's limit of 32767
    with testbed_mod.Testbed(testbed_mod.TestbedConfig(name="gena", lun_mb=64)) as bed:
        yield bed


@pytest.fixture(scope="module")
def sanitized_gen() -> str:
    """istrace-gen built with ASan/UBSan (make -C initiator-gen istrace-gen-san)."""
    root = Path(paths.binary("istrace-gen")).parent
    subprocess.run(["make", "-s", "-C", str(root), "istrace-gen-san"], check=True, timeout=300,
                   capture_output=True)
    return str(root / "istrace-gen-san")
