"""``--engine ray``: the local engine's passes, spread over a Ray cluster one input file a task.

The driver reads the per-row columns and plans the method exactly as the local engine does
(:func:`advcli.engine.plan_run`). A token pass (whitening statistics, segment chains, action
counts) is measured file by file on the cluster, each task running the local engine's measure
on its file's batches, the same batches a local pass reads (no batch spans two files); the
driver adds the results up in log order, so every statistic is bit-identical to the local
engine's. The final pass writes one Parquet part per input file, in a temporary folder beside
``--out``; the driver writes the manifest last and swaps the folder into place, so ``--out`` is
the complete output or absent. Ray is imported only here, and only when asked for.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from advcli import __version__
from advcli.engine import (
    BATCH_ROWS,
    Batch,
    Progress,
    Run,
    Summary,
    TokenCounts,
    measured_here,
    token_counts,
)
from advcli.errors import AdvcliError, DataError, DependencyError, OutputError, UsageError
from advcli.io import remote
from advcli.io.checksum import file_sha256
from advcli.io.schema import Roles
from advcli.io.sources import LogSource, OneFile, ParquetSource
from advcli.io.writers import TableWriter, atomic_folder
from advcli.methods import TokenPass

PART = "part-{:05d}.parquet"  # names that sort in input order
MANIFEST = "_advcli_manifest.json"  # pyarrow and polars skip names that begin with _
RETRIES = 2  # a task whose worker dies runs again this many times (Ray's task retries)
STORAGE_ENV = ("AWS_", "GOOGLE_", "HF_")  # settings of object stores the tasks get too


def ray_module() -> Any:
    """The ray package, or one line naming the extra."""
    try:
        import ray
    except ImportError:
        msg = "--engine ray needs Ray. Hint: pip install 'advcli[ray]'"
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
    try:
        ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        reason = " ".join(str(exc).split())[:300]
        msg = (
            f"cannot reach the Ray cluster at {address} ({reason}). Hint: check --ray-address "
            "or RAY_ADDRESS (host:port of the head node), or leave both unset for a local Ray"
        )
        raise UsageError(msg) from None
    return ray


def parquet_log(source: LogSource) -> ParquetSource:
    """The log as Parquet files: the work units of ``--engine ray``."""
    if not isinstance(source, ParquetSource):
        msg = (
            f"{source.sources.files[0] if source.sources.files else '<input>'}: --engine ray reads "
            "Parquet logs (one task a file). Hint: write the log as Parquet first "
            "(advcli annotate LOG.jsonl --method grpo --out LOG.parquet), or use --engine local"
        )
        raise UsageError(msg)
    return source


def _task(ray: Any, function: Any) -> Any:
    """``function`` as a Ray task: one CPU, retried when its worker dies, with this process's
    object-storage settings (the workers read the same ``s3://`` inputs)."""
    env = {k: v for k, v in os.environ.items() if k.startswith(STORAGE_ENV)}
    options: dict[str, Any] = {"num_cpus": 1, "max_retries": RETRIES}
    if env:
        options["runtime_env"] = {"env_vars": env}
    return ray.remote(**options)(function)


def _for_workers(source: LogSource) -> ParquetSource:
    """The log as the workers read it: local paths absolute (a worker's working folder is not
    this process's); messages still name the files as they were given."""
    log = copy.copy(parquet_log(source))
    log.files = [f if remote.is_remote(f) else os.path.abspath(f) for f in log.files]
    return log


def _one_file(run: Run, index: int) -> Run:
    assert isinstance(run.source, ParquetSource)
    return dataclasses.replace(run, source=OneFile(run.source, index))


def _measure_file(run: Run, token_pass: TokenPass[Any], index: int) -> list[tuple[int, Any]]:
    """A token pass measured over one file (a Ray task)."""
    return list(measured_here(_one_file(run, index), token_pass))


def _write_part(run: Run, index: int, path: str) -> tuple[int, int, Summary, str]:
    """The final pass over one file, written to ``path`` (a Ray task): rows, tokens, the
    advantages' summary and the part's sha256."""
    summary = Summary()
    rows = tokens = 0
    batches: Iterator[Batch] = _one_file(run, index).annotated()
    with TableWriter(path, "parquet", run.metadata(), force=True) as writer:  # a retry rewrites
        for table, n_tokens in summary.counted(batches):
            writer.write(table)
            rows += table.num_rows
            tokens += n_tokens
        writer.commit()
    return rows, tokens, summary, file_sha256(path)


def _results(ray: Any, futures: list[Any], units: list[str]) -> Iterator[Any]:
    """The tasks' results in order; a failed task is the error it raised (an advcli error as
    it is), or one line naming its work unit."""
    for future, unit in zip(futures, units, strict=True):
        try:
            yield ray.get(future)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, AdvcliError):
                raise cause from None
            reason = " ".join(str(cause or exc).split())[-300:]
            raise OutputError(f"{unit}: its Ray task failed ({reason})") from None
        except ray.exceptions.RayError as exc:
            reason = " ".join(str(exc).split())[:300]
            msg = f"{unit}: its Ray task did not finish after {RETRIES} retries ({reason})"
            raise OutputError(msg) from None


def measured_on_ray(ray: Any) -> Any:
    """A :data:`advcli.engine.Measure` that measures each file on the cluster."""
    remote = _task(ray, _measure_file)

    def measure(run: Run, token_pass: TokenPass[Any]) -> Iterator[tuple[int, Any]]:
        files = parquet_log(run.source).files
        shared = ray.put(dataclasses.replace(run, source=_for_workers(run.source)))
        futures = [remote.remote(shared, token_pass, i) for i in range(len(files))]
        for measured in _results(ray, futures, files):
            yield from measured

    return measure


def write_parts(
    ray: Any, run: Run, out: str, *, force: bool, progress: Progress | None = None
) -> tuple[int, int, Summary]:
    """The final pass on the cluster: ``out`` becomes a folder of one part per input file and
    the manifest; returns rows, tokens and the advantages' summary."""
    files = parquet_log(run.source).files
    remote = _task(ray, _write_part)
    summary = Summary()
    rows = tokens = 0
    parts = []
    with atomic_folder(Path(out), force=force) as folder:
        shared = ray.put(dataclasses.replace(run, source=_for_workers(run.source)))
        paths = [str(folder.resolve() / PART.format(i)) for i in range(len(files))]
        futures = [remote.remote(shared, i, path) for i, path in enumerate(paths)]
        for i, (n_rows, n_tokens, part, sha) in enumerate(_results(ray, futures, files)):
            rows += n_rows
            tokens += n_tokens
            summary.merge(part)
            parts.append({"part": PART.format(i), "input": files[i], "rows": n_rows,
                          "tokens": n_tokens, "sha256": sha})  # fmt: skip
            if progress:
                progress(rows, tokens)
        manifest = {
            "advcli_version": __version__,
            "engine": "ray",
            "parts": parts,
            "rows": rows,
            "tokens": tokens,
            "run": run.metadata(),
        }
        (folder / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return rows, tokens, summary


def _count_file(
    source: ParquetSource, roles: Roles, index: int, batch_rows: int
) -> tuple[np.ndarray, ...]:
    """Token and action counts of one file's rows (a Ray task)."""
    counts = token_counts(OneFile(source, index), roles, batch_rows=batch_rows)
    start = source.first_row(index)
    at = slice(start, start + source.sources.row_counts[index])
    return counts.tokens[at], counts.actions[at], counts.actions_within[at]


def counted_on_ray(ray: Any, batch_rows: int = BATCH_ROWS) -> Any:
    """A :data:`advcli.engine.CountTokens` that counts each file on the cluster."""
    remote = _task(ray, _count_file)

    def count(source: LogSource, roles: Roles) -> TokenCounts:
        log = _for_workers(source)
        shared = ray.put(log)
        futures = [remote.remote(shared, roles, i, batch_rows) for i in range(len(log.files))]
        parts = list(_results(ray, futures, log.files))
        return TokenCounts(*(np.concatenate([p[k] for p in parts]) for k in range(3)))

    return count


def verify_parts(folder: str) -> dict[str, Any]:
    """``advcli verify`` of a parts folder: every part the manifest lists is there, a plain
    file with the manifest's sha256 and row count; no other file; the totals add up."""
    root = Path(folder)
    mpath = root / MANIFEST
    regen = "Hint: write it again with advcli annotate --engine ray --force"
    try:
        manifest = json.loads(mpath.read_text())
        records = list(manifest["parts"])
        names = [str(r["part"]) for r in records]
    except (OSError, ValueError, KeyError, TypeError):
        raise DataError(f"{mpath}: not a manifest advcli can read. {regen}") from None
    rows = tokens = 0
    for name, rec in zip(names, records, strict=True):
        path = root / name
        if "/" in name or name.startswith(".") or path.is_symlink() or not path.is_file():
            raise DataError(f"{path}: a part the manifest lists is missing. {regen}")
        if file_sha256(path) != rec.get("sha256"):
            raise DataError(f"{path}: its bytes are not the ones written (sha256). {regen}")
        n = pq.read_metadata(path).num_rows
        if n != rec.get("rows"):
            raise DataError(f"{path}: {n} rows, the manifest says {rec.get('rows')}. {regen}")
        rows += n
        tokens += int(rec.get("tokens", 0))
    for path in sorted(root.iterdir()):
        if path.name not in {MANIFEST, *names}:
            raise DataError(f"{path}: a file the manifest does not list. {regen}")
    if rows != manifest.get("rows") or tokens != manifest.get("tokens"):
        raise DataError(f"{mpath}: the totals do not add up to the parts' counts. {regen}")
    return {"folder": folder, "ok": True, "parts": len(records), "rows": rows, "tokens": tokens}
