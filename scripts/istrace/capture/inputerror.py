"""A capture's input damaged past what an analysis may skip: one line for the user, naming the
file, the place and what to do (the command line prints it and exits 2, no traceback)."""

from __future__ import annotations

from pathlib import Path


class InputError(Exception):
    """`path` (and `line`, when known) is damaged: `what` it is and what to do. Not a
    ValueError: the steps that degrade on a ValueError (a table unreadable, a merge failed)
    must not swallow it and go on without the file."""

    def __init__(self, path: str | Path, line: int | None, what: str) -> None:
        super().__init__(str(path), line, what)
        self.path, self.line, self.what = Path(path), line, what

    def __str__(self) -> str:
        place = f": line {self.line}" if self.line is not None else ""
        return f"{self.path}{place}: {self.what}"
