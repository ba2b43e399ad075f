"""A call run beside the caller in a forked process, its result brought back by a pipe.

The report's steps after tracking read the same tables and write different files; on a
machine with a second CPU the plots (matplotlib's rendering: a quarter of a report) run
there while the diagnosis and the Perfetto trace run here. The child shares the parent's
tables by fork (copy on write: nothing is pickled but the result)."""

from __future__ import annotations

import multiprocessing
import os
import traceback
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class ChildFailed(RuntimeError):
    """The forked process died, or raised what cannot be sent back (its traceback is the
    message)."""


def start(fn: Callable[[], T]) -> Callable[[], T]:
    """Start fn() now, in a forked process when there is a CPU to run it on (else here, at
    once); the returned call waits for its result. What fn raised is raised by that call, as
    the same exception (the forked process's traceback added as a note): a caller handles
    an OSError the same wherever fn ran."""
    if (os.cpu_count() or 1) < 2 or "fork" not in multiprocessing.get_all_start_methods():
        try:
            value = fn()
        except Exception as exc:  # noqa: BLE001 - raised by the wait, as a forked one is
            error = exc

            def fail() -> T:
                raise error
            return fail
        return lambda: value
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)

    def child() -> None:
        try:
            send.send((True, fn()))
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

    def wait() -> T:
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
        return value  # type: ignore[no-any-return]
    return wait
