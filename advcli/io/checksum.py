"""File checksums (standard library only: the critic imports this on machines without polars)."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO


def stream_sha256(fh: BinaryIO, chunk_bytes: int = 1 << 20) -> tuple[int, str]:
    """The size and sha256 of what is left to read in ``fh``, read ``chunk_bytes`` at a time."""
    import hashlib  # here, not at the top: it loads OpenSSL (4 ms), and --help imports this

    digest, size = hashlib.sha256(), 0
    while chunk := fh.read(chunk_bytes):
        digest.update(chunk)
        size += len(chunk)
    return size, digest.hexdigest()


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's bytes."""
    with open(path, "rb") as fh:
        return stream_sha256(fh)[1]
