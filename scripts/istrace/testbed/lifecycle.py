"""What every testbed kind shares: `with Kind(cfg) as tb:` brings it up and always down."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class UpDown:
    """A testbed used as a context manager; subclasses give up() and down()."""

    def up(self) -> None:
        raise NotImplementedError

    def down(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.up()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.down()
