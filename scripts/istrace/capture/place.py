"""Where an analysis writes what it derives from a capture directory: into the directory
itself when it can be written; else (an archive on a read-only share), or when asked to leave
it alone (`istrace compare`), into its cache directory (layout.cache_dir), which mirrors it.

The mirror holds a symbolic link to each of the capture's files (the pcaps, event streams,
meta.json, and what an earlier analysis left there: its decoded tables, merged.parquet, ...)
in folders of its own, so every step reads and writes the names it always does, and what it
writes replaces a link, never the file behind it. Refreshed at every run: links to files
that went are removed, links to new ones made; a table the cache made itself stays, judged
like any other (istrace.capture.stamps). Hidden names (scratch, locks) are not mirrored.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from istrace.capture import layout


def writable(d: Path) -> bool:
    """Whether a file can be made in d (tried: a read-only mount, a share's permissions,
    root's squashed rights all answer the same way)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".istrace-probe-", dir=d)
    except OSError:
        return False
    os.close(fd)
    os.unlink(name)
    return True


def analysis_dir(d: Path, into_capture: bool = True) -> tuple[Path, str | None]:
    """(the directory to analyse d in, the line that says where the derived files go when it
    is not d itself). OSError when the cache directory cannot be made."""
    if into_capture and writable(d):
        return d, None
    cache = layout.cache_dir(d)
    mirror(d, cache)
    why = "is not writable" if into_capture else "is left as it is"
    return cache, f"{d} {why}: derived files go to {cache}"


def mirror(d: Path, cache: Path) -> None:
    """cache/ made a mirror of d/ (see the module's docstring)."""
    src = d.resolve()
    cache.mkdir(parents=True, exist_ok=True)
    for top, dirs, files in os.walk(src):
        dirs[:] = [x for x in dirs if not x.startswith(".")]
        here = cache / Path(top).relative_to(src)
        if here.is_symlink():
            here.unlink()
        here.mkdir(exist_ok=True)
        for name in files:
            if name.startswith("."):
                continue
            link, target = here / name, Path(top) / name
            if link.is_symlink():
                if Path(os.readlink(link)) == target:
                    continue
                link.unlink()
            elif link.exists():
                continue  # made here by an earlier analysis: judged as any table is
            link.symlink_to(target)
    for top, _, files in os.walk(cache):
        for name in files:
            p = Path(top) / name
            if p.is_symlink() and not p.exists():
                p.unlink()  # its file went from the capture
