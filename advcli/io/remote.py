"""Logs and outputs in object storage (``s3://``, ``gs://``, ``hf://``, …) through pyarrow's
filesystems.

A path with a scheme is opened with ``pyarrow.fs.FileSystem.from_uri`` (credentials from the
usual environment: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, …). For
``s3://`` an S3-compatible server other than AWS (MinIO, Ceph, R2, a test server) is named by
``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` (``http://host:port``), or in the URI itself
(``s3://bucket/key?endpoint_override=host:port&scheme=http``). Object stores have no rename: an
output object is written to a local temporary file first and committed by one upload at the
end, which completes or leaves nothing (atomic per object).
"""

from __future__ import annotations

import contextlib
import datetime
import fnmatch
import importlib.util
import os
import queue
import re
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from advcli import installed
from advcli.errors import AdvcliError, DependencyError, OutputError, UsageError
from advcli.io.checksum import stream_sha256
from advcli.io.interrupts import left_running
from advcli.lazy_imports import pafs

T = TypeVar("T")

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_remote(path: str) -> bool:
    """Whether ``path`` is a URI of a filesystem other than the local one."""
    return bool(_SCHEME.match(path)) and path[: len("file://")].lower() != "file://"


def local_file_path(path: str) -> str:
    """The local path a ``file://`` URI names (``file:///data/a%20b.parquet`` is
    ``/data/a b.parquet``); any other path as it is. A file URI of another host, or of no
    path, is refused."""
    if not _SCHEME.match(path):
        return path
    parts = urlsplit(path)
    if parts.scheme != "file":  # urlsplit gives the scheme in lower case
        return path
    if parts.netloc not in ("", "localhost") or not parts.path:
        msg = f"{path}: not a local file's URI (file:///PATH). Hint: give the file's path itself"
        raise UsageError(msg)
    return unquote(parts.path)


def _reason(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


TIMEOUT_SECONDS = float(os.environ.get("ADVCLI_REMOTE_TIMEOUT", "30"))
"""How long a request to object storage may take, retries included (``gs://`` retries for
minutes, and a closed endpoint or no network would otherwise look like a hang)."""


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem of ``uri`` and the path within it."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    parts = urlsplit(uri)
    if parts.scheme == "hf" and importlib.util.find_spec("fsspec") is None:
        raise _needs_fsspec(uri, parts.scheme)
    try:
        if parts.scheme in ("gs", "gcs") and not parts.query:
            # Its retries overrun their limit by up to a third (measured): half the timeout
            # lets it answer, with its own reason, before answered() gives up on it.
            limit = datetime.timedelta(seconds=TIMEOUT_SECONDS / 2)
            return pafs.GcsFileSystem(retry_time_limit=limit), f"{parts.netloc}{parts.path}"
        if parts.scheme == "s3" and endpoint and "endpoint_override" not in parts.query:
            server = urlsplit(endpoint)
            region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
            fs = pafs.S3FileSystem(
                endpoint_override=server.netloc, scheme=server.scheme or "https",
                region=region or "us-east-1", connect_timeout=TIMEOUT_SECONDS,
                request_timeout=TIMEOUT_SECONDS,
            )  # fmt: skip
            return fs, f"{parts.netloc}{parts.path}"
        if parts.scheme == "hf":  # through fsspec, as pyarrow >= 16 does (15 knows no hf://)
            import fsspec  # type: ignore[import-untyped]

            hub, path = fsspec.core.url_to_fs(uri)
            return pafs.PyFileSystem(pafs.FSSpecHandler(hub)), path
        found: tuple[pafs.FileSystem, str] = pafs.FileSystem.from_uri(uri)
        return found
    except ImportError:  # pyarrow reads hf:// (and fsspec+...://) through fsspec
        raise _needs_fsspec(uri, parts.scheme) from None
    except Exception as exc:  # pyarrow's, or fsspec's for hf://
        msg = (
            f"{uri}: cannot open this location ({_reason(exc)}). Hint: check the URI and the "
            "credentials in the environment (for S3: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
            "AWS_REGION, and AWS_ENDPOINT_URL for a server other than AWS)"
        )
        raise UsageError(msg) from None


def _needs_fsspec(uri: str, scheme: str) -> DependencyError:
    return DependencyError(
        f"{uri}: reading {scheme}:// needs fsspec and huggingface_hub. "
        f"Hint: {installed.pip_install('hf')}"
    )


def _uri_of(uri: str, path: str) -> str:
    """The URI of ``path`` on ``uri``'s filesystem (its query, if any, kept)."""
    parts = urlsplit(uri)
    return f"{parts.scheme}://{path}" + (f"?{parts.query}" if parts.query else "")


_UNANSWERED: set[str] = set()
"""The storages (scheme, bucket and query) that did not answer in time: asked again, each
request would wait out the timeout once more, and a new S3 client waits for the request
left running (pyarrow's lock), so a later request fails at once."""


def _storage(uri: str) -> str:
    parts = urlsplit(uri)
    return f"{parts.scheme}://{parts.netloc}?{parts.query}"


def answered(
    uri: str,
    doing: str,
    call: Callable[[pafs.FileSystem, str], T],
    error: type[AdvcliError] = UsageError,
) -> T:
    """``call(fs, path)``, a request to object storage about ``uri`` on its filesystem,
    bounded: no answer within :data:`TIMEOUT_SECONDS`, or an error of any kind from the
    storage's library (pyarrow's, or fsspec's and the HTTP client's under it for ``hf://``),
    is one line, ``uri: cannot DOING (reason)``, as ``error``. The filesystem is made on the
    request's thread too (pyarrow looks an S3 bucket's region up over the network). The
    request runs on a thread of its own, left behind where it does not answer (a library's
    own retries need not end in time)."""
    storage = _storage(uri)
    no_answer = (
        f"{uri}: cannot {doing} (no answer within {TIMEOUT_SECONDS:g} s). Hint: check the "
        "network and the URI; ADVCLI_REMOTE_TIMEOUT sets how long to wait"
    )
    if storage in _UNANSWERED:
        raise error(no_answer)
    done: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=1)

    def request() -> None:
        try:
            done.put((True, call(*filesystem(uri))))
        except BaseException as exc:  # handed to the caller
            done.put((False, exc))

    threading.Thread(target=request, daemon=True).start()
    try:
        ok, value = done.get(timeout=TIMEOUT_SECONDS)
    except queue.Empty:
        _UNANSWERED.add(storage)
        left_running(f"a request to {uri}")
        raise error(no_answer) from None
    if ok:
        return value
    if isinstance(value, (AdvcliError, KeyboardInterrupt)):
        raise value
    raise error(f"{uri}: cannot {doing} ({_reason(value)})") from None


def _info(uri: str) -> tuple[str, Any]:
    """The path of ``uri`` on its filesystem (no trailing slash) and what is there."""

    def info(fs: pafs.FileSystem, path: str) -> tuple[str, Any]:
        return path.rstrip("/"), fs.get_file_info(path.rstrip("/"))

    return answered(uri, "read this location", info)


def expand(pattern: str, wanted: Any) -> list[str]:
    """The files a URI names: a file, the files of a folder (a prefix), or a glob in the last
    part of the path (unless an object has that very name); ``wanted(name)`` keeps the log
    files. Sorted by name."""
    base, info = _info(pattern)
    parent, _, last = base.rpartition("/")
    if info.type == pafs.FileType.File:
        return [pattern]
    glob = any(ch in last for ch in "*?[") and info.type == pafs.FileType.NotFound
    if info.type == pafs.FileType.NotFound and not glob:
        raise UsageError(f"{pattern}: no such file or folder. Hint: check the URI")
    folder = parent if glob else base
    selector = pafs.FileSelector(folder, allow_not_found=True)
    listed = answered(pattern, "list this location", lambda fs, _: fs.get_file_info(selector))
    names = sorted(
        i.path
        for i in listed
        if i.type == pafs.FileType.File
        and wanted(i.base_name)
        and (not glob or fnmatch.fnmatch(i.base_name, last))
    )
    if not names:
        raise UsageError(f"{pattern}: no .parquet or .jsonl files here")
    return [_uri_of(pattern, name) for name in names]


def open_input(uri: str) -> Any:
    """A random-access file of ``uri`` (what pyarrow's Parquet reader takes)."""
    return answered(uri, "open this file", lambda fs, path: fs.open_input_file(path))


def sha256(uri: str) -> tuple[int, str]:
    """The size and sha256 of an object's bytes, read in 8 MiB chunks."""
    with open_input(uri) as fh:
        return stream_sha256(fh, 8 << 20)


def exists(uri: str) -> bool:
    return bool(_info(uri)[1].type != pafs.FileType.NotFound)


def upload(local: str, uri: str, *, force: bool) -> None:
    """Copy the finished local file ``local`` to ``uri`` in one upload: the object appears
    when the upload completes, or not at all."""
    if not force and exists(uri):
        raise OutputError(f"{uri}: appeared while writing. Hint: pass `force=True` to replace it")
    stream = answered(uri, "write this object", lambda fs, path: fs.open_output_stream(path),
                      OutputError)  # fmt: skip
    try:
        with open(local, "rb") as src, stream as dst:
            while block := src.read(8 << 20):
                dst.write(block)
    except Exception as exc:  # pyarrow's, or fsspec's and its HTTP client's
        if isinstance(exc, AdvcliError):
            raise
        msg = f"{uri}: the upload failed ({_reason(exc)}); nothing was written"
        raise OutputError(msg) from None


def check_output(uri: str, inputs: list[str], *, force: bool) -> None:
    """Refuse an output object that is one of the inputs, always; one that exists, unless
    ``force``; and a JSONL output (its metadata would be a second object, not committed with
    it)."""
    if uri.lower().endswith((".jsonl", ".ndjson")):
        msg = f"{uri}: JSONL outputs go to a local disk (they come with a metadata file)"
        raise UsageError(f"{msg}. Hint: write Parquet to object storage")
    if uri in inputs:
        msg = f"{uri}: this is one of the inputs; advcli never overwrites its input"
        raise OutputError(f"{msg}. Hint: choose another `out`")
    if not force and exists(uri):
        raise OutputError(f"{uri}: already exists. Hint: pass `force=True` to replace it")


def listing(uri: str) -> dict[str, int]:
    """The objects under the folder ``uri`` (a prefix), by name relative to it, with their
    sizes; empty when there are none."""

    def objects(fs: pafs.FileSystem, path: str) -> dict[str, int]:
        base = path.rstrip("/")
        selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
        infos = fs.get_file_info(selector)
        return {i.path[len(base) + 1 :]: i.size for i in infos if i.type == pafs.FileType.File}

    return answered(uri, "list this location", objects)


def child(uri: str, name: str) -> str:
    """The URI of ``name`` inside the folder ``uri`` (its query, if any, kept)."""
    parts = urlsplit(uri)
    path = f"{parts.netloc}{parts.path}".rstrip("/")
    return _uri_of(uri, f"{path}/{name}")


def delete(uri: str) -> None:
    def delete_if_there(fs: pafs.FileSystem, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            fs.delete_file(path)

    answered(uri, "delete this object", delete_if_there, OutputError)


@dataclass
class FolderOutput:
    """An output folder being written: ``folder`` is a local temporary folder, committed at
    the end; :meth:`place` names where a file of it is written directly, by another process (a
    Ray worker): a path in ``folder``, or an object of the output in object storage."""

    folder: Path
    uri: str | None = None  # the output, when it is in object storage
    placed: set[str] = field(default_factory=set)

    def place(self, name: str) -> str:
        if self.uri is None:
            return str(self.folder.resolve() / name)
        self.placed.add(name)
        return child(self.uri, name)


@contextmanager
def staged_folder(uri: str, *, force: bool, last: tuple[str, ...]) -> Iterator[FolderOutput]:
    """An output folder in object storage, committed by its manifest (object stores have no
    rename). Yields a local temporary folder; at the end its files are uploaded, then the
    objects of an earlier output there that this one lacks are deleted, then the names in
    ``last`` (the manifest) are uploaded after every other.

    With ``force`` over an earlier output, its manifest is deleted first: from then on the
    folder reads as incomplete until the new manifest lands. A run that fails deletes what it
    uploaded and writes no manifest.
    """
    before = listing(uri)
    if before and not force:
        raise OutputError(f"{uri}: already exists. Hint: pass `force=True` to replace it")
    for name in last:
        if name in before:
            delete(child(uri, name))
    with tempfile.TemporaryDirectory(prefix="advcli-") as tmp:
        out = FolderOutput(Path(tmp), uri)
        try:
            yield out
            files = sorted(p.relative_to(out.folder).as_posix() for p in out.folder.rglob("*")
                           if p.is_file())  # fmt: skip
            for name in (n for n in files if n not in last):
                upload(str(out.folder / name), out.place(name), force=True)
            for name in sorted(set(before) - out.placed - set(last)):
                delete(child(uri, name))
            for name in (n for n in last if n in files):
                upload(str(out.folder / name), child(uri, name), force=True)
        except BaseException:
            for name in out.placed:
                with contextlib.suppress(AdvcliError):
                    delete(child(uri, name))
            raise
