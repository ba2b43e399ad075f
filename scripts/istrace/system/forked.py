"""A call run beside the caller in a forked process, its result brought back by a pipe.

The report's steps read the same tables and write different files; on a machine with a
second CPU the plots (matplotlib's rendering: half a report's CPU) and the Perfetto trace
run in processes of their own while the tracking and the diagnosis run here. A child shares
the parent's tables by fork (copy on write: nothing is pickled but the result, and what
`start_fed` sends it later: the tracker's result, whose samples stay in their file)."""

from __future__ import annotations

import multiprocessing
import os
import queue
import threading
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class ChildFailed(RuntimeError):
    """The forked process died, or raised what cannot be sent back (its traceback is the
    message)."""


def start(fn: Callable[[], T], nested: bool = False) -> Callable[[], T]:
    """Start fn() now, in a forked process when there is a CPU to run it on (else here, at
    once); the returned call waits for its result. What fn raised is raised by that call, as
    the same exception (the forked process's traceback added as a note): a caller handles
    an OSError the same wherever fn ran. `nested`: as start_fed's."""
    if not can_fork():
        try:
            value = fn()
        except Exception as exc:  # noqa: BLE001 - raised by the wait, as a forked one is
            error = exc

            def fail() -> T:
                raise error
            return fail
        return lambda: value
    return start_fed(lambda _get: fn(), nested)[1]


def start_fed(fn: Callable[[Callable[[], Any]], T], nested: bool = False
              ) -> tuple[Callable[[Any], None], Callable[[], T]]:
    """Start fn(get) now in a forked process, fed by the caller as it goes: (send, wait).
    `send(x)` hands x (pickled) to the process, where `get()` returns the next one; `wait()`
    returns fn's result as start's does. Without a second CPU, fn runs at `wait`, its gets
    answered by what was sent. `nested`: fn starts processes of its own (multiprocessing
    refuses children to a daemonic process: the process is daemonic to the caller, whose
    exit ends it, and not to itself)."""
    if not can_fork():
        sent: list[Any] = []
        return sent.append, lambda: fn(lambda: sent.pop(0))
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    inbox, feed = ctx.Pipe(duplex=False)

    def child() -> None:
        feed.close()
        if nested:
            multiprocessing.current_process().daemon = False
        try:
            send.send((True, fn(inbox.recv)))
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
            text = traceback.format_exc()
            try:
                send.send((False, (exc, text)))
            except Exception:  # noqa: BLE001 - an exception pickle cannot carry
                send.send((False, (None, text)))
        finally:
            send.close()

    proc = ctx.Process(target=child, daemon=True)  # never outlives a parent that failed
    proc.start()
    send.close()
    inbox.close()

    # what is sent goes by a thread of its own: a pipe holds 64 KiB, and the process reads
    # only when it asks (the plotter, once its first plots are drawn), so a send from here
    # stalled the caller until then (the report's tracking sat waiting on its plotter).
    # The thread closes the pipe after the last one: a get() past it is an EOFError there.
    outbox: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()

    def sender() -> None:
        gone = False
        while True:
            more, x = outbox.get()
            if not more:
                feed.close()
                return
            if not gone:
                try:
                    feed.send(x)
                except OSError:
                    gone = True  # the process is gone: its wait says why
    threading.Thread(target=sender, daemon=True).start()

    def give(x: Any) -> None:
        outbox.put((True, x))

    def wait() -> T:
        outbox.put((False, None))  # the result is read while what was sent is still going
        try:
            ok, value = recv.recv()
        except EOFError:
            proc.join()
            raise ChildFailed(f"the forked process died (exit status {proc.exitcode}) "
                              "before it gave its result") from None
        finally:
            recv.close()
        proc.join()
        if not ok:
            exc, text = value
            if isinstance(exc, Exception):
                exc.add_note(f"in the forked process:\n{text}")
                raise exc
            raise ChildFailed(f"in the forked process:\n{text}")
        return value
    return give, wait


def can_fork() -> bool:
    """Whether start() runs its call in a forked process (a second CPU, and fork), or here."""
    return (os.cpu_count() or 1) >= 2 and "fork" in multiprocessing.get_all_start_methods()


def relay(get: Callable[[], Any], give: Callable[[Any], None], count: int) -> Callable[[], None]:
    """Pass the next `count` things `get` returns to `give` as they come, by a thread (a fed
    process handing its feed on to one it started); the returned call waits until they are
    passed (or `get` had no more)."""
    def run() -> None:
        for _ in range(count):
            try:
                x = get()
            except (EOFError, OSError):
                return
            give(x)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t.join


def hand_on(wait: Callable[[], T], give: Callable[[Any], None],
            part: Callable[[T | None], Any]) -> Callable[[], T]:
    """wait() for a process's result by a thread, giving part(result) on as soon as it comes
    (part(None) if it failed: whoever waits on `give` is not left waiting), while the caller
    goes on; the returned call joins the thread and returns the result, or raises what wait
    raised."""
    got: dict[str, Any] = {}

    def run() -> None:
        try:
            got["value"] = wait()
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's join
            got["error"] = exc
        finally:
            give(part(got.get("value")))
    t = threading.Thread(target=run, daemon=True)
    t.start()

    def join() -> T:
        t.join()
        if "error" in got:
            raise got["error"]
        return got["value"]
    return join

