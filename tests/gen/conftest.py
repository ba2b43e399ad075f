"""Fixtures of the istrace-gen tests: one plain testbed per module."""

from __future__ import annotations

from collections.abc import Iterator

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
