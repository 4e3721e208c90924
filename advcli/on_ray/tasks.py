"""The work of ``--engine ray`` on the cluster: the tasks of each pass over the work units
(measured, counted, annotated, scored, the critic loaded on the workers), their results gathered
in log order, and the folder of parts the final pass writes: its manifest, what ``--force`` may
replace, and ``verify``. Importing this module imports no Ray.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from advcli import progress
from advcli._version import __version__
from advcli.critic.options import CriticOptions
from advcli.critic.scorer import CriticScorer, scored_batches
from advcli.errors import AdvcliError, DataError, OutputError, UsageError
from advcli.io import manifests, remote
from advcli.io.file_sources import ParquetSource
from advcli.io.folders import Folder
from advcli.io.outputs import output_folder
from advcli.io.schema import Roles
from advcli.io.sources import LogSource, Sources
from advcli.io.writers import METADATA_KEY, write_batches
from advcli.lazy_imports import np, pa, pq
from advcli.methods import TokenPass
from advcli.on_ray.cluster import ClusterLog, StagedSource, Unit, batch_cuts, ray_module, work_units
from advcli.results import Verification
from advcli.run.accounting import CountTokens, TokenCounts, token_counts
from advcli.run.engine import Batch, Measure, Run, ValueCache, measured_here
from advcli.run.logs import BATCH_ROWS
from advcli.run.summary import Summary

PART = "part-{:05d}.parquet"  # names that sort in input order
RETRIES = 2  # a task whose worker dies runs again this many times (Ray's task retries)
STORAGE_ENV = ("AWS_", "GOOGLE_", "HF_")  # settings of object stores the tasks get too


def cluster_log(source: LogSource) -> ClusterLog:
    assert isinstance(source, (ParquetSource, StagedSource)), "on_cluster() made it so"
    return source


def _cluster_workers(ray: Any, resource: str) -> int:
    return max(1, int(ray.cluster_resources().get(resource, 1)))


def _task(ray: Any, function: Any, *, gpus: float = 0) -> Any:
    """``function`` as a Ray task: one CPU (and ``gpus``), retried when its worker dies, with
    this process's object-storage settings (the workers read the same ``s3://`` inputs)."""
    env = {k: v for k, v in os.environ.items() if k.startswith(STORAGE_ENV)}
    options: dict[str, Any] = {"num_cpus": 1, "max_retries": RETRIES}
    if gpus:
        options["num_gpus"] = gpus
    if env:
        options["runtime_env"] = {"env_vars": env}
    return ray.remote(**options)(function)


def _for_workers(source: LogSource) -> ClusterLog:
    """The log as the workers read it: local paths absolute (a worker's working folder is not
    this process's); messages still name the files as they were given."""
    log = cluster_log(source)
    if isinstance(log, StagedSource):
        return log
    log = copy.copy(log)
    log.files = [f if remote.is_remote(f) else os.path.abspath(f) for f in log.files]
    return log


def _results(
    ray: Any, futures: list[Any], units: list[str], running: list[Any] | None = None
) -> Iterator[Any]:
    """The tasks' results in order; a failed task is the error it raised (an advcli error as
    it is), or one line naming its work unit. Before that error is raised, the tasks still
    ``running`` (default: ``futures``) are cancelled and waited for: one that failed after
    this process had gone would make Ray print a line of its own."""
    for future, unit in zip(futures, units, strict=True):
        try:
            yield ray.get(future)
        except ray.exceptions.RayError as exc:
            _settle(ray, futures if running is None else running)
            cause = getattr(exc, "cause", None)
            if isinstance(cause, AdvcliError):
                raise cause from None
            if isinstance(exc, ray.exceptions.RayTaskError):
                reason = " ".join(str(cause or exc).split())[-300:]
                raise OutputError(f"{unit}: its Ray task failed ({reason})") from None
            reason = " ".join(str(exc).split())[:300]
            msg = f"{unit}: its Ray task did not finish after {RETRIES} retries ({reason})"
            raise OutputError(msg) from None


def _settle(ray: Any, futures: list[Any], timeout: float = 30) -> None:
    """Cancel the tasks of ``futures`` (None: taken already) and wait until they have ended."""
    pending = [f for f in futures if f is not None]
    for future in pending:
        with contextlib.suppress(Exception):  # a task that has ended cannot be cancelled
            ray.cancel(future)
    with contextlib.suppress(Exception):
        ray.wait(pending, num_returns=len(pending), timeout=timeout)


def _on_unit(run: Run, unit: Unit) -> Run:
    return dataclasses.replace(run, source=unit.source(cluster_log(run.source)))


def _measure_unit(run: Run, token_pass: TokenPass[Any], unit: Unit) -> list[tuple[int, Any]]:
    """A token pass measured over one work unit (a Ray task)."""
    return list(measured_here(_on_unit(run, unit), token_pass))


def measured_on_ray(ray: Any) -> Measure:
    """A :data:`advcli.run.engine.Measure` that measures each work unit on the cluster."""

    def measure(run: Run, token_pass: TokenPass[Any]) -> Iterator[tuple[int, Any]]:
        log = cluster_log(run.source)
        gpus = _run_gpus(ray, run)
        task = _task(ray, _measure_unit, gpus=gpus)
        units = work_units(log, run.batch_rows, _cluster_workers(ray, "GPU" if gpus else "CPU"))
        shared = ray.put(dataclasses.replace(run, source=_for_workers(log)))
        futures = [task.remote(shared, token_pass, unit) for unit in units]
        for measured in _results(ray, futures, [u.name(log) for u in units]):
            yield from measured

    return measure


def _count_unit(
    source: ClusterLog, roles: Roles, unit: Unit, batch_rows: int, options: dict[str, Any]
) -> tuple[np.ndarray, ...]:
    """Token and action counts of one work unit's rows (a Ray task)."""
    counts = token_counts(unit.source(source), roles, batch_rows=batch_rows, **options)
    start = source.first_row(unit.file)
    at = slice(start + unit.start, start + unit.stop)
    return counts.tokens[at], counts.actions[at], counts.actions_within[at]


def counted_on_ray(ray: Any, batch_rows: int = BATCH_ROWS) -> CountTokens:
    """A :class:`advcli.run.accounting.CountTokens` that counts each work unit on the cluster."""
    task = _task(ray, _count_unit)

    def count(
        source: LogSource, roles: Roles, *, ids: bool = True, within: int | None = None
    ) -> TokenCounts:
        log = _for_workers(source)
        units = work_units(log, batch_rows, _cluster_workers(ray, "CPU"))
        shared = ray.put(log)
        options = {"ids": ids, "within": within}
        futures = [task.remote(shared, roles, unit, batch_rows, options) for unit in units]
        parts = list(_results(ray, futures, [u.name(log) for u in units]))
        return TokenCounts(*(np.concatenate([p[k] for p in parts]) for k in range(3)))

    return count


def _annotated_unit(run: Run, unit: Unit) -> list[Batch]:
    """The final pass over one work unit, its batches returned (a Ray task)."""
    return list(_on_unit(run, unit).annotated())


def annotated_on_ray(ray: Any) -> Callable[[Run], Iterator[Batch]]:
    """The final pass of a run, each work unit (a row group, where the files have several)
    annotated on the cluster; its batches come back in log order (at most a unit per worker
    ahead of the one being read), for ``shard``, which writes them here."""
    task = _task(ray, _annotated_unit)

    def annotated(run: Run) -> Iterator[Batch]:
        log = cluster_log(run.source)
        workers = _cluster_workers(ray, "CPU")
        # Units of a row group (a piece) each, where the files allow: the rows this process
        # holds at once, a unit a worker ahead, stay a few row groups' worth.
        groups = sum(len(batch_cuts(log, i, run.batch_rows)) for i in range(len(log.sources.files)))
        units = work_units(log, run.batch_rows, max(workers, groups))
        shared = ray.put(dataclasses.replace(run, source=_for_workers(log)))
        names = [u.name(log) for u in units]
        futures: list[Any] = []
        for i in range(len(units)):
            while len(futures) < min(len(units), i + workers + 1):
                futures.append(task.remote(shared, units[len(futures)]))
            yield from next(_results(ray, [futures[i]], [names[i]], running=futures))
            futures[i] = None  # its batches are read: let Ray free them

    return annotated


def _write_part(
    dest: str, metadata: dict[str, Any], batches: Iterable[tuple[pa.Table, int]]
) -> tuple[int, int, str]:
    """One part at ``dest`` (a path, or an object): its rows, tokens and sha256. A retried task
    writes it again."""
    rows, tokens, sha, _ = write_batches(
        dest, "parquet", metadata, batches, force=True, digest=True
    )
    assert sha is not None
    return rows, tokens, sha


def _annotate_unit(run: Run, unit: Unit, dest: str) -> tuple[int, int, str, Summary]:
    """The final pass over one work unit, written to ``dest`` (a Ray task), and the summary
    of the advantages it wrote."""
    summary = Summary()
    batches: Iterator[Batch] = _on_unit(run, unit).annotated()
    return (*_write_part(dest, run.metadata(), summary.counted(batches)), summary)


@dataclasses.dataclass(frozen=True)
class ScoreJob:
    """What every task of ``score --engine ray`` shares (the critic's bytes travel apart)."""

    log: ClusterLog
    roles: Roles
    critic: CriticOptions
    column: str
    metadata: dict[str, Any]
    batch_rows: int


def _loaded_critic(opts: CriticOptions, model: bytes, sources: Sources, roles: Roles) -> Any:
    """The critic loaded from ``model`` (its file's bytes) on this worker's device."""
    with tempfile.TemporaryDirectory(prefix="advcli-critic-") as folder:
        local = Path(folder) / Path(opts.path).name
        local.write_bytes(model)
        scorer = CriticScorer(dataclasses.replace(opts, path=str(local)), sources, roles)
    scorer.metadata["critic"]["file"] = opts.path
    return scorer


class WorkerCritic:
    """``annotate --critic`` on the cluster: each worker process loads the critic once (from
    its file's bytes, which travel with the tasks) and scores the batches of its units. Loaded
    here first, so a bad critic file is one line before any task, and for the metadata."""

    loaded: dict[tuple[str, CriticOptions], CriticScorer] = {}  # this process's critics

    def __init__(self, ray: Any, opts: CriticOptions, sources: Sources, roles: Roles):
        here = CriticScorer(opts, sources, roles)
        self.metadata, self.sha256 = here.metadata, here.critic.sha256
        self.opts, self.sources, self.roles = opts, sources, roles
        self.model = ray.put(Path(opts.path).read_bytes())

    def __call__(self, row0: int, table: pa.Table, tokens: Any) -> np.ndarray:
        key = (self.sha256, self.opts)
        if key not in self.loaded:
            model = ray_module().get(self.model)
            self.loaded[key] = _loaded_critic(self.opts, model, self.sources, self.roles)
        values: np.ndarray = self.loaded[key](row0, table, tokens)
        return values


def _critic_gpus(ray: Any, opts: CriticOptions | None) -> float:
    """GPUs a task running the critic asks for: one where the cluster has GPUs and ``--device``
    is not cpu (``cuda`` insists on them)."""
    if opts is None or opts.device == "cpu":
        return 0
    gpus = ray.cluster_resources().get("GPU", 0)
    if opts.device == "cuda" and not gpus:
        msg = "`device='cuda'`: the Ray cluster has no GPUs. Hint: `device='auto'` or cpu"
        raise UsageError(msg)
    return 1 if gpus else 0


def _run_gpus(ray: Any, run: Run) -> float:
    """GPUs a task of ``run`` asks for: those of its critic (``annotate --critic``), if any."""
    scorer = run.scorer.scorer if isinstance(run.scorer, ValueCache) else run.scorer
    return _critic_gpus(ray, scorer.opts if isinstance(scorer, WorkerCritic) else None)


def _score_unit(job: ScoreJob, model: bytes, unit: Unit, dest: str) -> tuple[Any, ...]:
    """One work unit scored by the critic (loaded from ``model``, its file's bytes, on this
    worker's device) and written to ``dest`` (a Ray task)."""
    scorer = _loaded_critic(job.critic, model, job.log.sources, job.roles)
    batches = scored_batches(unit.source(job.log), job.roles, scorer, job.column, job.batch_rows)
    rows, tokens, sha = _write_part(dest, {**scorer.metadata, **job.metadata}, batches)
    return rows, tokens, sha, scorer.critic.provider, scorer.seconds, scorer.truncated_rows


def _commit_parts(
    ray: Any,
    out: str,
    log: ClusterLog,
    units: list[Unit],
    submit: Callable[[Unit, str], Any],
    *,
    force: bool,
    manifest: dict[str, Any],
) -> list[tuple[Any, ...]]:
    """Run ``submit(unit, part)`` for every unit, each writing its part; then the manifest,
    last; ``out`` is committed as a whole (:func:`~advcli.io.outputs.output_folder`). Returns
    the tasks' results."""
    results, parts = [], []
    rows = tokens = 0
    with output_folder(out, force=force, last=manifests.NAMES) as folder:
        futures = [submit(unit, folder.place(PART.format(i))) for i, unit in enumerate(units)]
        for i, result in enumerate(_results(ray, futures, [u.name(log) for u in units])):
            results.append(result)
            n_rows, n_tokens, sha = result[:3]
            rows += n_rows
            tokens += n_tokens
            unit = units[i]
            parts.append({"part": PART.format(i), "input": log.sources.files[unit.file],
                          "input_rows": [unit.start, unit.stop], "rows": n_rows,
                          "tokens": n_tokens, "sha256": sha})  # fmt: skip
            progress.advance(rows, tokens)
        record = {"advcli_version": __version__, "engine": "ray", "parts": parts, "rows": rows,
                  "tokens": tokens, **manifest}  # fmt: skip
        manifests.write(folder.folder, record, folder.place(PART.format(0)))
    return results


def write_parts(ray: Any, run: Run, out: str, *, force: bool) -> tuple[int, int, int, Summary]:
    """``annotate``'s final pass on the cluster: ``out`` becomes a folder of one part per work
    unit and the manifest; returns parts, rows, tokens and the advantages' summary."""
    log = cluster_log(run.source)
    gpus = _run_gpus(ray, run)
    units = work_units(log, run.batch_rows, _cluster_workers(ray, "GPU" if gpus else "CPU"))
    task = _task(ray, _annotate_unit, gpus=gpus)
    shared = ray.put(dataclasses.replace(run, source=_for_workers(log)))
    results = _commit_parts(
        ray, out, log, units, lambda unit, dest: task.remote(shared, unit, dest),
        force=force, manifest={"run": run.metadata()},
    )  # fmt: skip
    summary = Summary()
    for result in results:
        summary.merge(result[3])
    rows, tokens = sum(r[0] for r in results), sum(r[1] for r in results)
    return len(units), rows, tokens, summary


def score_parts(
    ray: Any,
    job: ScoreJob,
    out: str,
    *,
    force: bool,
) -> dict[str, Any]:
    """``score`` on the cluster: a task per work unit, on a GPU each where the cluster has
    GPUs and ``--device`` is not cpu (``cuda`` insists on them)."""
    gpus = _critic_gpus(ray, job.critic)
    log = job.log
    units = work_units(log, job.batch_rows, _cluster_workers(ray, "GPU" if gpus else "CPU"))
    task = _task(ray, _score_unit, gpus=gpus)
    model = ray.put(Path(job.critic.path).read_bytes())
    shared = ray.put(dataclasses.replace(job, log=_for_workers(log)))
    results = _commit_parts(
        ray, out, log, units, lambda unit, dest: task.remote(shared, model, unit, dest),
        force=force, manifest={"run": job.metadata},
    )  # fmt: skip
    seconds = sum(r[4] for r in results)
    tokens = sum(r[1] for r in results)
    return {
        "parts": len(units),
        "rows": sum(r[0] for r in results),
        "tokens": tokens,
        "provider": ", ".join(sorted({r[3] for r in results})),
        "gpus": int(ray.cluster_resources().get("GPU", 0)) if gpus else 0,
        "tokens_per_second": round(tokens / seconds) if seconds else None,
        "truncated_rows": sum(r[5] for r in results),
    }


def is_parts_manifest(manifest: Any) -> bool:
    """Whether a folder's manifest is a parts folder's (not a shard folder's)."""
    return isinstance(manifest, dict) and manifest.get("engine") == "ray"


def listed_parts(folder: Folder) -> set[str] | None:
    """The files a parts folder's manifest names (itself too). A run cut short leaves its
    parts and no manifest (it is uploaded last): then every file, if each is a Parquet part
    carrying advcli's metadata. None where neither holds."""
    read = manifests.read_json(folder)
    if read is not None and is_parts_manifest(read[1]):
        try:
            return {*read[0].files, *(str(r["part"]) for r in read[1]["parts"])}
        except (TypeError, KeyError):
            pass
    for name in folder.files():
        try:
            with folder.open(name) as fh:
                if METADATA_KEY not in (pq.read_metadata(fh).metadata or {}):
                    return None
        except (OSError, pa.ArrowException, AdvcliError):
            return None
    return set(folder.files())


def verify_parts(location: str) -> Verification:
    """``advcli verify`` of a parts folder (local or in object storage): every part the
    manifest lists is there, a plain file with the manifest's sha256 and row count; no other
    file; the totals add up."""
    folder = Folder(location)
    regen = "Hint: write it again with `engine='ray'` `force=True`"
    read = manifests.read_json(folder)
    mpath = folder.path(read[0].where if read is not None else manifests.NAME)
    if read is not None and read[0].recorded is not None and not read[0].sha256_matches():
        raise DataError(f"{mpath}: edited after advcli wrote it (its sha256 differs). {regen}")
    unreadable = DataError(f"{mpath}: not a manifest advcli can read. {regen}")
    if read is None or not is_parts_manifest(read[1]):
        raise unreadable
    manifest = read[1]
    try:
        records = list(manifest["parts"])
        names = [str(r["part"]) for r in records]
    except (KeyError, TypeError):
        raise unreadable from None
    rows = tokens = 0
    for name, rec in zip(names, records, strict=True):
        path = folder.path(name)
        if "/" in name or name.startswith(".") or folder.kind(name) != "file":
            raise DataError(f"{path}: a part the manifest lists is missing. {regen}")
        if folder.sha256(name) != rec.get("sha256"):
            raise DataError(f"{path}: its bytes are not the ones written (sha256). {regen}")
        with folder.open(name) as fh:
            n = pq.read_metadata(fh).num_rows
        if n != rec.get("rows"):
            raise DataError(f"{path}: {n} rows, the manifest says {rec.get('rows')}. {regen}")
        rows += n
        tokens += int(rec.get("tokens", 0))
    for name in folder.files():
        if name not in {*read[0].files, *names}:
            raise DataError(f"{folder.path(name)}: a file the manifest does not list. {regen}")
    if rows != manifest.get("rows") or tokens != manifest.get("tokens"):
        raise DataError(f"{mpath}: the totals do not add up to the parts' counts. {regen}")
    return Verification(folder=location, ok=True, parts=len(records), rows=rows, tokens=tokens)
