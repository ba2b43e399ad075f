"""The LUN test pattern of docs/schema.md §5: little-endian 64-bit word `w` holds `w`.

Any block read back can be checked against this rule alone, without the backing file.
"""

from __future__ import annotations

import os

import numpy as np

WORD = 8
_CHUNK_WORDS = 1 << 20  # 8 MiB per write keeps memory flat for any LUN size


def _words(first: int, count: int) -> np.ndarray:
    return np.arange(first, first + count, dtype="<u8")


def expected(offset: int, length: int) -> bytes:
    """The `length` pattern bytes that start at byte `offset` of the LUN."""
    if offset < 0 or length < 0:
        raise ValueError("offset and length must be >= 0")
    if length == 0:
        return b""
    first = offset // WORD
    last = (offset + length + WORD - 1) // WORD
    raw = _words(first, last - first).tobytes()
    skip = offset - first * WORD
    return raw[skip : skip + length]


def check(offset: int, data: bytes) -> int | None:
    """Absolute byte offset of the first byte of `data` that breaks the pattern, or None."""
    want = np.frombuffer(expected(offset, len(data)), dtype=np.uint8)
    got = np.frombuffer(bytes(data), dtype=np.uint8)
    bad = np.flatnonzero(want != got)
    return None if bad.size == 0 else offset + int(bad[0])


def fill(path: str | os.PathLike[str], size_bytes: int) -> None:
    """Write a pattern file of exactly `size_bytes` bytes at `path` (replacing it)."""
    if size_bytes < 0:
        raise ValueError("size must be >= 0")
    total_words = (size_bytes + WORD - 1) // WORD
    with open(path, "wb") as out:
        written = 0
        for first in range(0, total_words, _CHUNK_WORDS):
            chunk = _words(first, min(_CHUNK_WORDS, total_words - first)).tobytes()
            chunk = chunk[: size_bytes - written]
            out.write(chunk)
            written += len(chunk)
