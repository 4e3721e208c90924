"""The cluster, and the log as its tasks read it: the connection (:func:`connect`), a log the
workers cannot read in place staged in Ray's object store (:func:`staged`), and the work units a
pass over the log is cut into (:func:`work_units`). Ray is imported only when used
(:func:`ray_module`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import socket
from collections.abc import Iterator
from typing import Any

from advcli import installed, progress, versions
from advcli.errors import DependencyError, UsageError
from advcli.io import jsonl
from advcli.io.file_sources import FileRows, ParquetSource
from advcli.io.jsonl import STDIN, is_jsonl
from advcli.io.sources import LogSource, Sources
from advcli.lazy_imports import np, pa

PIECE_BYTES = 64 << 20  # a staged log goes into Ray's object store about this much at a time


def ray_module() -> Any:
    """The ray package, or one line naming the extra (or the version needed)."""
    try:
        versions.check_optional("ray", installed.version("ray"), "ray")
        import ray
    except (ImportError, installed.NotInstalled):
        msg = f"`engine='ray'` needs Ray. Hint: {installed.pip_install('ray')}"
        raise DependencyError(msg) from None
    return ray


def connect(address: str | None) -> Any:
    """Join the cluster at ``address`` (or ``RAY_ADDRESS``); with neither, start a local Ray on
    every core of this machine."""
    ray = ray_module()
    if ray.is_initialized():
        return ray
    address = address or os.environ.get("RAY_ADDRESS") or None
    # A failed task is reported once, by the driver, as one line: not again by Ray's logger.
    os.environ.setdefault("RAY_IGNORE_UNHANDLED_ERRORS", "1")
    options: dict[str, Any] = {"log_to_driver": False, "logging_level": "ERROR"}
    if address is None:
        options["include_dashboard"] = False
    else:
        _probe(address)
    try:
        ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        reason = " ".join(str(exc).split())[:300]
        msg = (
            f"cannot reach the Ray cluster at {address} ({reason}). Hint: check `ray_address` "
            "or RAY_ADDRESS (host:port of the head node), or leave both unset for a local Ray"
        )
        raise UsageError(msg) from None
    return ray


PROBE_SECONDS = 10.0  # to open a TCP connection to the cluster's head before Ray tries


def _probe(address: str) -> None:
    """Refuse, in one line and seconds, a head that nothing answers at: Ray itself retries
    for minutes and prints its own C++ lines meanwhile. (``auto``, ``local`` and names
    without a port are left to Ray.)"""
    found = re.fullmatch(r"(?:ray://)?\[?([^\]/]+?)\]?:(\d+)/?", address)
    if found is None:
        return
    host, port = found.group(1), int(found.group(2))
    try:
        with socket.create_connection((host, port), timeout=PROBE_SECONDS):
            return
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
    msg = (
        f"cannot reach the Ray cluster at {address} ({reason}; waited up to {PROBE_SECONDS:g} s). "
        "Hint: check `ray_address` or RAY_ADDRESS (host:port of the head node), or leave both "
        "unset for a local Ray"
    )
    raise UsageError(msg)


@dataclasses.dataclass(frozen=True)
class Piece:
    """Consecutive batches of one input file in Ray's object store: their table (``ref``), the
    global row of its first row, and the rows of each batch."""

    ref: Any
    file: int
    row0: int
    batches: tuple[int, ...]


class StagedSource(LogSource):
    """A log that is not Parquet files the workers can read in place (JSONL, a framework's
    dump read with ``--from``, struct fields lifted by ``--col``, stdin), read once by this
    process into Ray's object store in the batches a local pass reads (:func:`staged`); the
    tasks read their units from there, on any node."""

    def __init__(self, schema: pa.Schema, sources: Sources, pieces: list[Piece], rows: int):
        self.schema, self.sources, self.pieces, self.batch_rows = schema, sources, pieces, rows

    def first_row(self, index: int) -> int:
        return sum(self.sources.row_counts[:index])

    def starts(self, index: int) -> np.ndarray:
        """Where file ``index``'s pieces start (its rows): the places a unit may begin."""
        first = self.first_row(index)
        return np.array([p.row0 - first for p in self.pieces if p.file == index], dtype=np.int64)

    def within(self, index: int, start: int, stop: int) -> StagedSource:
        """Rows ``[start, stop)`` of file ``index`` (``start`` where a piece begins)."""
        first = self.first_row(index)
        pieces = [p for p in self.pieces
                  if p.file == index and start <= p.row0 - first < stop]  # fmt: skip
        return StagedSource(self.schema, self.sources, pieces, self.batch_rows)

    def _tables(self, names: list[str] | None) -> Iterator[tuple[Piece, pa.Table]]:
        ray = ray_module()
        for piece in self.pieces:
            table = ray.get(piece.ref)
            yield piece, table if names is None else table.select(names)

    def columns(self, names: list[str]) -> pa.Table:
        return pa.concat_tables(table for _, table in self._tables(names))

    def batches(self, names: list[str] | None, rows: int) -> Iterator[tuple[int, pa.Table]]:
        assert rows == self.batch_rows, "a staged log is read in the batches it was staged in"
        for piece, table in self._tables(names):
            at = 0
            for n in piece.batches:
                yield piece.row0 + at, table.slice(at, n)
                at += n
            progress.read(piece.row0 + at, (piece.row0 + at) / self.n_rows)


def staged(ray: Any, source: LogSource, batch_rows: int) -> StagedSource:
    """``source`` read once, every column, into Ray's object store: a piece of whole batches
    (of one file, :data:`PIECE_BYTES` or so) at a time. The rows of a JSONL file are located by
    their lines, counted here: the workers need not see the file to name a line."""
    pieces: list[Piece] = []
    held: list[pa.Table] = []
    file = row = held_bytes = 0

    def put() -> None:
        if held:
            table = pa.concat_tables(held).combine_chunks()  # its own buffers, no more
            sizes = tuple(t.num_rows for t in held)
            pieces.append(Piece(ray.put(table), file, row - table.num_rows, sizes))
            held.clear()

    for i, table in source.file_batches(batch_rows):
        if i != file or held_bytes >= PIECE_BYTES:
            put()
            file, held_bytes = i, 0
        held.append(table)
        row += table.num_rows
        held_bytes += table.nbytes
    put()
    given = source.sources
    sources = Sources(files=given.files, row_counts=given.row_counts, lines=_row_lines(given))
    return StagedSource(source.schema, sources, pieces, batch_rows)


def _row_lines(sources: Sources) -> list[np.ndarray | None]:
    """The line of each row of the log's JSONL files (None for files whose rows are rows)."""
    if sources.lines is not None:
        return sources.lines
    return [
        None if not is_jsonl(f)
        else jsonl.row_lines([(1, sources.stdin or b"")] if f == STDIN else jsonl.chunks(f))
        for f in sources.files
    ]  # fmt: skip


ClusterLog = ParquetSource | StagedSource
"""A log as ``--engine ray`` reads it: Parquet files in place, or staged (:func:`staged`)."""


def on_cluster(ray: Any, source: LogSource, batch_rows: int) -> ClusterLog:
    """The log as the cluster reads it: Parquet files in place, any other log staged."""
    if isinstance(source, (ParquetSource, StagedSource)):
        return source
    return staged(ray, source, batch_rows)


def batch_cuts(log: ClusterLog, index: int, batch_rows: int) -> np.ndarray:
    """Where a unit of file ``index`` may begin: a row group's start rounded down to a whole
    batch (Parquet), a piece's start (staged)."""
    if isinstance(log, StagedSource):
        return log.starts(index)
    return np.cumsum([0, *log.row_group_rows[index]])[:-1] // batch_rows * batch_rows


@dataclasses.dataclass(frozen=True)
class Unit:
    """A work unit: rows ``[start, stop)`` of input file ``file``."""

    file: int
    start: int
    stop: int

    def source(self, log: ClusterLog) -> LogSource:
        if isinstance(log, StagedSource):
            return log.within(self.file, self.start, self.stop)
        whole = self.start == 0 and self.stop == log.sources.row_counts[self.file]
        return FileRows(log, self.file, None if whole else (self.start, self.stop))

    def name(self, log: ClusterLog) -> str:
        """The unit in messages: its file, and its rows when it is not the whole file."""
        f = log.sources.files[self.file]
        whole = self.start == 0 and self.stop == log.sources.row_counts[self.file]
        return f if whole else f"{f} (rows {self.start}-{self.stop - 1})"


def work_units(log: ClusterLog, batch_rows: int, wanted: int) -> list[Unit]:
    """The log's work units: a file each, files larger than a ``wanted``-th of the log (the
    cluster's workers) cut into ranges, so that no unit holds much more than that share.

    The cuts fall where rows ``target, 2·target, …`` of the log would (``target`` = rows /
    ``wanted``), moved to the nearest start of a row group rounded down to a multiple of
    ``batch_rows`` (of a piece, for a staged log): a range reads little more than its own row
    groups, and the same batches as a pass over its whole file (so the statistics add up bit
    for bit). A file of one row group is not cut.
    """
    counts = log.sources.row_counts
    target = math.ceil(sum(counts) / wanted)  # rows a unit, ideally
    units = []
    for i, n in enumerate(counts):
        starts = batch_cuts(log, i, batch_rows)
        if not len(starts):  # a file without rows
            continue
        first = log.first_row(i)
        ideal = [k * target - first for k in range(first // target + 1, (first + n) // target + 1)]
        snapped = {int(starts[np.abs(starts - b).argmin()]) for b in ideal if 0 < b < n}
        bounds = [0, *sorted(snapped - {0}), n]
        units += [Unit(i, a, b) for a, b in zip(bounds, bounds[1:], strict=False)]
    return units
