"""A call run in a forked process: its result, its error and its death come back."""

from __future__ import annotations

import os
import subprocess
import sys
import time

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
    """The same exception whether the call ran in another process or here (one CPU), raised
    by the wait, not by the start."""
    def fails() -> None:
        raise ValueError("no segments in window 3")
    wait = forked.start(fails)
    with pytest.raises(ValueError, match="no segments in window 3") as err:
        wait()
    if (os.cpu_count() or 1) > 1:
        assert any("in the forked process" in n and "fails" in n
                   for n in getattr(err.value, "__notes__", []))


def test_an_exception_pickle_cannot_carry_is_a_failure_with_its_text() -> None:
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one CPU: the call runs in this process")

    class Local(Exception):  # defined here: the parent cannot unpickle it
        pass

    def fails() -> None:
        raise Local("unsendable")
    with pytest.raises(forked.ChildFailed, match="unsendable"):
        forked.start(fails)()


def test_a_child_that_dies_is_a_failure_not_a_hang() -> None:
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one CPU: the call runs in this process")
    wait = forked.start(lambda: os._exit(9))
    with pytest.raises(forked.ChildFailed, match="exit status 9"):
        wait()


@pytest.mark.parametrize("cpus", [None, 1])
def test_a_fed_call_gets_what_is_sent_in_order(cpus: int | None,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """What the caller sends while the call runs reaches it in order, with one CPU too (then
    the call runs at the wait, its gets answered by what was sent)."""
    if cpus is not None:
        monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    table = np.arange(10)

    def fed(get: object) -> tuple[int, list[object]]:
        got = [get(), get()]  # type: ignore[operator]
        return os.getpid(), got + [int(table.sum())]
    send, wait = forked.start_fed(fed)
    send({"track": [1, 2]})
    send(None)
    pid, got = wait()
    assert got == [{"track": [1, 2]}, None, 45]
    assert (pid == os.getpid()) == (cpus == 1 or (os.cpu_count() or 1) < 2)


def test_a_fed_call_that_dies_is_a_failure_and_sending_to_it_is_no_error() -> None:
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one CPU: the call runs in this process")
    send, wait = forked.start_fed(lambda get: os._exit(7))
    with pytest.raises(forked.ChildFailed, match="exit status 7"):
        wait()
    send("late")  # the process is gone: nothing to do, nothing raised


def test_sending_does_not_wait_for_the_call_to_ask(tmp_path) -> None:
    """A send bigger than a pipe holds returns before the call reads it: the caller goes on
    (the report's tracking, while its plotter draws) instead of waiting for the call to ask."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one CPU: the call runs in this process")
    flag = tmp_path / "sent"

    def fed(get: object) -> tuple[bool, int]:
        for _ in range(1000):  # at most 10 s: the caller's send is back by then, or never
            if flag.exists():
                break
            time.sleep(0.01)
        return flag.exists(), len(get())  # type: ignore[operator]
    send, wait = forked.start_fed(fed)
    send(b"x" * (4 << 20))  # 4 MiB: a blocking send would wait for the call's get()
    flag.touch()
    asked_after_it_was_sent, size = wait()
    assert asked_after_it_was_sent and size == 4 << 20


def test_a_get_past_what_was_sent_is_an_error_not_a_hang() -> None:
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one CPU: the call runs in this process")
    send, wait = forked.start_fed(lambda get: [get(), get()])
    send(1)
    with pytest.raises(EOFError):
        wait()


def test_a_fed_call_hands_its_feed_on_to_one_it_started() -> None:
    """A fed process (nested: allowed processes of its own) starts another and relays what it
    is sent to it; both results come back, the second's from its own process."""
    def inner(get: object) -> tuple[int, list[object]]:
        return os.getpid(), [get(), get()]  # type: ignore[operator]

    def outer(get: object) -> tuple[int, int, list[object]]:
        give, wait = forked.start_fed(inner)
        relayed = forked.relay(get, give, 2)  # type: ignore[arg-type]
        relayed()
        pid, got = wait()
        return os.getpid(), pid, got
    send, wait = forked.start_fed(outer, nested=True)
    send("track")
    send(("spans", 3))
    me, it, got = wait()
    assert got == ["track", ("spans", 3)]
    if (os.cpu_count() or 1) > 1:
        assert len({me, it, os.getpid()}) == 3


def test_a_caller_that_fails_before_feeding_a_nested_call_does_not_hang(tmp_path) -> None:
    """The report's main process failing between its two sends: its exit ends the plotting
    process that waits for the second (and that one's own child), instead of waiting."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one CPU: the call runs in this process")
    code = (
        "from istrace.system import forked\n"
        "def inner(get):\n    return [get(), get()]\n"
        "def outer(get):\n"
        "    give, wait = forked.start_fed(inner)\n"
        "    forked.relay(get, give, 2)()\n"
        "    return wait()\n"
        "send, wait = forked.start_fed(outer, nested=True)\n"
        "send('track')\n"
        "raise SystemExit(3)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 3, r.stderr


def test_a_result_is_handed_on_as_it_comes_while_the_caller_goes_on() -> None:
    """The part handed on reaches its receiver while the caller is still busy (before the
    join); a failure hands part(None) on, so the receiver is not left waiting, and is raised
    by the join."""
    given: list[object] = []
    join = forked.hand_on(forked.start(lambda: ("trace", 42)), given.append,
                          lambda r: None if r is None else r[1])
    deadline = time.monotonic() + 20
    while not given:  # the caller, busy: the part arrives without a join
        assert time.monotonic() < deadline, "nothing handed on before the join"
        time.sleep(0.01)
    assert given == [42] and join() == ("trace", 42)

    def fails() -> None:
        raise ValueError("the tracer failed")
    given.clear()
    join = forked.hand_on(forked.start(fails), given.append, lambda r: "nothing" if r is None
                          else r)
    with pytest.raises(ValueError, match="the tracer failed"):
        join()
    assert given == ["nothing"]
