"""A command's run, resolved once on the way down: the :class:`Job` every command executes.

:func:`job` turns what a command was given into a job, checking each part before anything is
read: the log's inputs and how to read them (``--col``, ``--from`` and its options:
:class:`Reading`), the method and its parameters under the convention (``--method``,
``--convention``, the method's options), where the passes run (here, or on a Ray cluster:
:class:`OnRay`) and the rows a pass reads at a time. The layers below take the job and ask it;
none looks the method (which its :class:`Params` hold), the preset or the engine up again. With
``--from``, opening the log settles what the dump leaves out (:mod:`advcli.run.settling`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from advcli import methods, presets, progress
from advcli.core.correction import Correction
from advcli.errors import UsageError
from advcli.io.file_sources import ParquetSource
from advcli.io.retokenize import MAX_RETOKENIZE_MISMATCH, load_tokenizer
from advcli.io.sources import LogSource, expand_inputs
from advcli.methods import Method
from advcli.params import Params
from advcli.presets import SHARED_WITH_METHODS, Preset, PresetOptions
from advcli.run import correcting, settling
from advcli.run.accounting import CountTokens
from advcli.run.engine import Batch, Run, Scorer, plan_run
from advcli.run.logs import BATCH_ROWS, Log, Tokenizing, open_log
from advcli.run.prompts import PromptList, read_prompt_list, without_prompts

ENGINES = ("local", "ray")
"""Where ``--engine`` runs the passes: in this process, or on a Ray cluster."""


@dataclass(frozen=True)
class Reading:
    """How the log is read: ``--col ROLE=COLUMN`` and, with ``--from``, the framework's preset
    and its options."""

    col: tuple[str, ...] = ()
    preset: Preset | None = None
    options: PresetOptions = dataclasses.field(default_factory=PresetOptions)
    tokenizing: Tokenizing | None = None  # --tokenizer: a text log's token ids
    prompts: PromptList | None = None  # --keep-prompts / --drop-prompts: rows removed

    def files(self, paths: Sequence[str]) -> list[str]:
        """The files ``paths`` name (folders and globs expanded), as the log reads them."""
        if self.preset is not None:
            return self.preset.files(list(paths))
        return expand_inputs(list(paths))

    def open(self, paths: Sequence[str]) -> Log:
        """The log opened; with ``--from``, with what the dump leaves out settled from its
        logged advantages (which runs the framework's estimators on it); less the rows of the
        prompts ``--keep-prompts`` does not keep or ``--drop-prompts`` drops."""
        if self.preset is None:
            log = open_log(list(paths), list(self.col), tokenizing=self.tokenizing)
        else:
            preset = self.preset

            def open_with(options: PresetOptions) -> Log:
                return open_log(list(paths), list(self.col), preset=preset, options=options,
                                tokenizing=self.tokenizing)  # fmt: skip

            log = settling.settle(preset, self.options, open_with)
        if self.prompts is not None:
            log.prompts_removed = without_prompts(log, self.prompts).sentence()
        return log


class OnRay:
    """``--engine ray``: the cluster (``address``, else ``RAY_ADDRESS``, else a local Ray),
    connected when a pass first needs it, and the passes it runs. Ray is imported only here."""

    def __init__(self, address: str | None, batch_rows: int):
        self.address = address
        self.batch_rows = batch_rows

    @functools.cached_property
    def ray(self) -> Any:
        from advcli.on_ray import cluster

        return cluster.connect(self.address)

    def place(self, source: LogSource) -> LogSource:
        """Where the cluster's tasks read the log: Parquet files in place, any other log from
        Ray's object store (read into it here, first)."""
        if isinstance(source, ParquetSource):
            return source
        from advcli.on_ray import cluster

        with progress.stage("reading the log into Ray's object store"):
            return cluster.on_cluster(self.ray, source, self.batch_rows)

    @property
    def count(self) -> CountTokens:
        """Every row's tokens, counted by the cluster's tasks."""
        from advcli.on_ray import tasks

        return tasks.counted_on_ray(self.ray, self.batch_rows)

    @property
    def annotate(self) -> Callable[[Run], Iterator[Batch]]:
        """The final pass of a run, by the cluster's tasks, in log order."""
        from advcli.on_ray import tasks

        return tasks.annotated_on_ray(self.ray)


@dataclass(frozen=True)
class Job:
    """One command's run, resolved: the log's ``paths`` and how to read them, the ``method``
    and its ``params`` (None: the command runs none), where the passes run (``ray``; None:
    here), the rows a pass reads at a time and the rollout correction the final pass writes
    (None: none)."""

    paths: tuple[str, ...]
    reading: Reading
    method: Method[Any] | None
    params: Params | None
    ray: OnRay | None
    batch_rows: int = BATCH_ROWS
    correction: Correction | None = None

    @property
    def files(self) -> list[str]:
        """The log's files, as it will read them (for the checks made before reading)."""
        return self.reading.files(self.paths)

    def open(self, reading: Reading | None = None) -> Log:
        """The log opened (as ``reading`` says, default the job's), where the passes read it."""
        log = (reading or self.reading).open(self.paths)
        if self.ray is not None:
            log.source = self.ray.place(log.source)
        return log

    def plan(self, log: Log, scorer: Scorer | None = None) -> Run:
        """The method planned on ``log`` (its token passes run where the job runs them)."""
        assert self.method is not None and self.params is not None, "the job runs no method"
        measure = None
        if self.ray is not None:
            from advcli.on_ray import tasks

            measure = tasks.measured_on_ray(self.ray.ray)
        params = with_reward_columns(self.params, log.options)
        return plan_run(log, self.method, params, scorer=scorer, batch_rows=self.batch_rows,
                        measure=measure, correction=self.correction)  # fmt: skip


def with_reward_columns(params: Params, options: PresetOptions) -> Params:
    """``params`` with the reward columns (and their weights) the log's reader settled on
    (TRL's reward functions, found from its logged advantages), for a method that reads
    reward columns (gdpo) and was given none."""
    found = options.reward_columns
    if "reward_columns" not in params or params.reward_columns is not None or not found:
        return params
    values = {k: v for k, v in params.as_dict().items() if k not in ("method", "convention")}
    values["reward_columns"] = ",".join(found)
    if params.reward_weights is None and options.reward_weights:
        values["reward_weights"] = ",".join(f"{k}={w!r}" for k, w in options.reward_weights.items())
    return Params(params.estimator, params.convention, values)


def shared_with_reader(
    method: str | None, preset: Preset | None, options: PresetOptions | None
) -> dict[str, str]:
    """The method parameters given as reader options (``reward_columns`` for gdpo), as the
    method takes them: without a framework, they are the method's alone (refused where it
    takes none); with one, they serve its reader, and the method too where it takes them."""
    if options is None:
        return {}
    weights = ",".join(f"{name}={w!r}" for name, w in options.reward_weights.items())
    columns = ",".join(options.reward_columns) if options.reward_columns else None
    shared = {
        name: value
        for name, value in zip(SHARED_WITH_METHODS, (columns, weights or None), strict=True)
        if value is not None
    }
    if preset is None:
        return shared
    if method is None:  # nothing runs (report): they serve the framework's log alone
        return {}
    return {name: value for name, value in shared.items() if methods.takes(method, name)}


def job(
    paths: Sequence[str],
    *,
    col: Sequence[str] | None = None,
    preset: str | None = None,
    preset_options: PresetOptions | None = None,
    method: str | None = None,
    convention: str | None = None,
    params: dict[str, Any] | None = None,
    engine: str = "local",
    ray_address: str | None = None,
    batch_rows: int = BATCH_ROWS,
    correction: str | None = None,
    correction_bounds: str | None = None,
    tokenizer: str | os.PathLike[str] | None = None,
    max_retokenize_mismatch: float = MAX_RETOKENIZE_MISMATCH,
    keep_ids: bool = False,
    keep_prompts: str | os.PathLike[str] | None = None,
    drop_prompts: str | os.PathLike[str] | None = None,
) -> Job:
    """The job of a command given these options, each checked: an unknown framework, method,
    convention or engine, and a parameter the method does not take (or given without a
    method), are refused here, before anything is read. The convention is the one given, else
    the framework's own (``--from``), else advcli's, and it gives a rollout correction
    (``correction``, ``correction_bounds``) its framework's arithmetic. The reader's options
    that are the method's too (:func:`shared_with_reader`) reach the method, unless
    ``params`` names them. ``tokenizer``: a text log's token ids made from its text with it
    (:mod:`advcli.io.retokenize`); a log with ids keeps them where ``keep_ids``.
    ``keep_prompts`` / ``drop_prompts``: a file ``prompts`` wrote, whose prompts' rows alone
    are read, or are not (:mod:`advcli.run.prompts`)."""
    chosen_preset = presets.get(preset) if preset is not None else None
    if convention is None and chosen_preset is not None:
        convention = chosen_preset.convention
    given = {name: value for name, value in (params or {}).items() if value is not None}
    given = {**shared_with_reader(method, chosen_preset, preset_options), **given}
    chosen: Method[Any] | None = None
    p = None
    if method is not None:
        chosen = methods.get(method)
        p = methods.resolve(chosen, convention, **given)
    elif given:
        name = next(iter(given))
        raise UsageError(f"`{name}` is a method's parameter: add `method` (e.g. `method='grpo'`)")
    elif convention is not None:
        methods.check_convention(convention)
    if engine not in ENGINES:
        raise UsageError(f"`engine` {engine!r}: expected one of {', '.join(ENGINES)}")
    tokenizing = None
    if tokenizer is not None:
        tokenizing = Tokenizing(load_tokenizer(tokenizer), max_retokenize_mismatch, keep_ids)
    if keep_prompts is not None and drop_prompts is not None:
        raise UsageError("give `keep_prompts` or `drop_prompts`, not both")
    listed = None
    if keep_prompts is not None:
        listed = read_prompt_list(os.fspath(keep_prompts), "keep_prompts")
    elif drop_prompts is not None:
        listed = read_prompt_list(os.fspath(drop_prompts), "drop_prompts")
    reading = Reading(tuple(col or ()), chosen_preset, preset_options or PresetOptions(),
                      tokenizing, listed)  # fmt: skip
    ray = OnRay(ray_address, batch_rows) if engine == "ray" else None
    corrects = correcting.correction_of(correction, correction_bounds, convention)
    return Job(tuple(paths), reading, chosen, p, ray, batch_rows, corrects)
