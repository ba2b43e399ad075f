"""A call run in a forked process: its result, its error and its death come back."""

from __future__ import annotations

import os

import numpy as np
import pytest
from istrace.system import forked


def test_the_result_comes_back_from_the_other_process() -> None:
    table = np.arange(1_000_000)  # shared by fork, not sent
    wait = forked.start(lambda: (os.getpid(), int(table.sum())))
    pid, total = wait()
    assert total == 999_999 * 1_000_000 // 2
    if (os.cpu_count() or 1) > 1:
        assert pid != os.getpid()


def test_an_error_is_raised_again_with_its_traceback() -> None:
    def fails() -> None:
        raise ValueError("no segments in window 3")
    wait = forked.start(fails) if (os.cpu_count() or 1) > 1 else None
    if wait is None:
        pytest.skip("one CPU: the call runs in this process")
    with pytest.raises(forked.ChildFailed, match="ValueError: no segments in window 3"):
        wait()


def test_a_child_that_dies_is_a_failure_not_a_hang() -> None:
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one CPU: the call runs in this process")
    wait = forked.start(lambda: os._exit(9))
    with pytest.raises(forked.ChildFailed, match="exit status 9"):
        wait()
