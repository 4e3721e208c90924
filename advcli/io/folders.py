"""An output folder as ``advcli verify`` reads it: on the local disk, or in object storage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from advcli.io import remote
from advcli.io.checksum import file_sha256
from advcli.lazy_imports import pa


class Folder:
    """The files of a folder (hidden ones and those in sub-folders too), by name relative to it.

    ``kind(name)`` is "file", "symlink", "missing" or "other" (a folder, a device); object
    storage has only files.
    """

    def __init__(self, location: str):
        self.location = location
        self.remote = remote.is_remote(location)
        self.root = Path(location)
        self._objects: dict[str, int] | None = None

    def objects(self) -> dict[str, int]:
        if self._objects is None:
            self._objects = remote.listing(self.location)
        return self._objects

    def path(self, name: str) -> str:
        """``name`` as messages show it."""
        return remote.child(self.location, name) if self.remote else str(self.root / name)

    def exists(self) -> bool:
        return bool(self.objects()) if self.remote else self.root.is_dir()

    def kind(self, name: str) -> str:
        if self.remote:
            return "file" if name in self.objects() else "missing"
        path = self.root / name
        if path.is_symlink():
            return "symlink"
        if path.is_file():
            return "file"
        return "other" if path.exists() else "missing"

    def files(self) -> list[str]:
        """Every file's name, symlinks included, sorted."""
        if self.remote:
            return sorted(self.objects())
        return sorted(
            p.relative_to(self.root).as_posix()
            for p in self.root.rglob("*")
            if p.is_symlink() or p.is_file()
        )

    def size(self, name: str) -> int:
        return self.objects()[name] if self.remote else (self.root / name).stat().st_size

    def open(self, name: str) -> Any:
        """A random-access binary file of pyarrow's own (what its Parquet reader takes; a
        Python file object would be read back through the interpreter from its threads)."""
        if self.remote:
            return remote.open_input(self.path(name))
        return pa.OSFile(str(self.root / name), "rb")

    def read_text(self, name: str) -> str:
        with self.open(name) as fh:
            return bytes(fh.read()).decode(errors="replace")

    def sha256(self, name: str) -> str:
        if not self.remote:
            return file_sha256(self.root / name)
        return remote.sha256(self.path(name))[1]
