"""Opening a log: the files read as one log (as advcli writes it, or as a framework did with
``--from``), the column that plays each role, and the warnings about it; the batch size of
every pass over it.

A log that looks like a framework's dump but is read without ``--from`` opens, with a warning
naming the preset; a column it lacks is then an error that says to use ``--from``. Opening reads
and checks the log and runs no estimator: what a dump leaves out is settled from its logged
advantages by the job (:mod:`advcli.run.settling`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass

from advcli import presets
from advcli.errors import (
    AdvcliError,
    DataError,
    SchemaError,
    UsageError,
    file_list,
)
from advcli.io import jsonl, remote
from advcli.io.file_sources import open_source
from advcli.io.jsonl import STDIN
from advcli.io.retokenize import (
    MAX_RETOKENIZE_MISMATCH,
    Retokenized,
    TextTokenizer,
    retokenized,
)
from advcli.io.rollouts import (
    Rows,
    require,
)
from advcli.io.schema import ROLES, Roles, parse_col_mapping, resolve_roles
from advcli.io.sources import (
    LogSource,
    NestedFields,
    Sources,
    expand_inputs,
    is_parquet,
    nested_paths,
)
from advcli.io.split_tokens import joined
from advcli.io.writers import read_metadata
from advcli.lazy_imports import np, pa, pq

BATCH_ROWS = 512  # rows per record batch: ~1M tokens of typical rollouts


@dataclass
class Log:
    """A log opened: where its rows come from, the column of each role, and warnings about it.

    ``looks_like`` is the preset of the framework whose dump the log looks like when it was
    opened without one: a missing column is then an error that says to use ``--from``.
    """

    source: LogSource
    roles: Roles
    looks_like: presets.Preset | None = None
    warnings: list[str] = dataclasses.field(default_factory=list)
    preset: presets.Preset | None = None  # --from
    options: presets.PresetOptions = dataclasses.field(default_factory=presets.PresetOptions)
    settled: str | None = None  # what was found from the logged advantages (TRL's group size)
    mapped: bool = False  # --col named some of its columns
    set_aside: int = 0  # rows the preset's options made it skip or relabel (TRL's evaluation
    # rows and cut groups)
    reward_doubt: str | None = None  # why its reward may not be what the framework trained on
    # (an error where a reward is read, until --col reward= names the column)
    retokenized: Retokenized | None = None  # its token ids were made from its text
    prompts_removed: str | None = None  # the rows `keep_prompts` or
    # `drop_prompts` removed before anything was computed (:mod:`advcli.run.prompts`)

    def trust_reward(self) -> None:
        """Refuse to read the reward while it is in doubt (:attr:`reward_doubt`)."""
        if self.reward_doubt is not None:
            raise DataError(self.reward_doubt)

    @property
    def sources(self) -> Sources:
        return self.source.sources

    @property
    def files(self) -> str:
        return file_list(self.sources.files)

    def require(self, needs: set[str], *, what: str = "this", without_tokens: str = "") -> None:
        """A clear error when the log has no column for a role in ``needs``, or looks like a
        framework's dump whose group key advcli would take from another column than
        ``prompt_id`` (an alias: verl's ``uid``, TRL's ``prompt``) or not find, unless ``--col``
        named its columns."""
        hint = None
        if self.looks_like is not None:
            p = self.looks_like
            hint = f"it looks like {p.framework}'s rollout dump: read it with `from_={p.name!r}`"
            if not self.mapped and self.roles["prompt_id"] != "prompt_id":
                msg = (
                    f"{self.files}: advcli's own column names would misread its groups, "
                    f"rewards and tokens. Hint: {hint} (or name its columns with `col` to read "
                    "it as it is)"
                )
                raise SchemaError(msg)
        require(self.roles, self.source.schema.names, self.sources, needs, what=what,
                without_tokens=without_tokens, hint=hint)  # fmt: skip


@dataclass(frozen=True)
class Tokenizing:
    """``--tokenizer``: token ids made from a text log's prompt and completion; a log with ids
    already keeps them where ``keep_ids`` (the report decodes them), and is refused otherwise."""

    tokenizer: TextTokenizer
    max_mismatch: float = MAX_RETOKENIZE_MISMATCH
    keep_ids: bool = False

    def applied(
        self, source: LogSource, mapping: dict[str, str]
    ) -> tuple[LogSource, Retokenized | None]:
        """``source`` with ``input_ids`` and ``action_mask`` made from its text."""
        names = set(source.schema.names)
        ids = mapping.get("input_ids") or next(
            (c for c in ("input_ids", *ROLES["input_ids"][1]) if c in names), None
        )
        if ids is not None and ids in names:
            if self.keep_ids:
                return source, None
            msg = (
                f"{file_list(source.sources.files)}: the log has token ids ('{ids}'), and "
                "`tokenizer` makes them from a text log. Hint: leave `tokenizer` out"
            )
            raise UsageError(msg)
        return retokenized(source, self.tokenizer, max_mismatch=self.max_mismatch)


def open_log(
    inputs: list[str],
    col: list[str] | None = None,
    *,
    preset: presets.Preset | None = None,
    options: presets.PresetOptions | None = None,
    tokenizing: Tokenizing | None = None,
) -> Log:
    """A log to read in passes (as ``preset``'s framework wrote it, with its ``options``, if
    given), and the column that plays each role (``--col ROLE=COLUMN``); ``tokenizing``: a
    text log's token ids made from its text."""
    mapping = parse_col_mapping(col)
    done = None
    if preset is not None:
        given = options or presets.PresetOptions()
        converted = presets.PresetSource(preset, inputs, given)
        lifted: LogSource = _lift_nested(converted, mapping)
        if tokenizing is not None:
            lifted, done = tokenizing.applied(lifted, mapping)
        roles = resolve_roles(lifted.schema, mapping, file_list(lifted.sources.files))
        doubt = converted.reward_doubt if "reward" not in mapping else None
        said = [done.sentence()] if done else []
        return Log(lifted, roles, warnings=[*converted.warnings, *said], preset=preset,
                   options=given, reward_doubt=doubt, set_aside=converted.set_aside,
                   retokenized=done)  # fmt: skip
    try:
        source = joined(_lift_nested(open_source(inputs, mapping), mapping), mapping)
        if tokenizing is not None:
            source, done = tokenizing.applied(source, mapping)
        roles = resolve_roles(source.schema, mapping, file_list(source.sources.files))
    except DataError as exc:  # a framework's dump read as advcli's own format
        p = presets.looks_like(first_fields(inputs))
        if p is None:
            raise
        msg = f"{exc}. It looks like {p.framework}'s rollout dump: read it with `from_={p.name!r}`"
        raise type(exc)(msg) from None
    for role, column in roles.columns.items():
        lacking = source.files_without(column) if column is not None else []
        if lacking:
            msg = (
                f"{lacking[0]}: no '{column}' column ({role}), which other files of the log "
                "have. Hint: give every file the column, or read the files separately"
            )
            raise SchemaError(msg)
    looks_like = presets.looks_like(set(source.schema.names))
    if looks_like is not None and written_by_advcli(source.sources.files):
        looks_like = None  # advcli's output, annotated from such a dump: read as advcli wrote it
    log = Log(source, roles, looks_like, mapped=bool(mapping), retokenized=done)
    if done is not None:
        log.warnings.append(done.sentence())
    if looks_like is not None:
        p = looks_like
        log.warnings.append(
            f"{log.files}: this looks like {p.framework}'s rollout dump; `from_={p.name!r}` reads "
            f"it as {p.framework} writes it (its groups, rewards and tokens)"
        )
    return log


def written_by_advcli(files: list[str]) -> bool:
    """Whether the log is an output of advcli's (its first file carries advcli's metadata)."""
    if not files or files[0] == STDIN:
        return False
    try:
        return read_metadata(files[0]) is not None
    except (OSError, ValueError, pa.ArrowException, DataError):
        return False


def first_fields(inputs: list[str]) -> set[str]:
    """The fields of the first input's first row (Python's json: it reads bare NaN); none
    where the file cannot be read (its own error is the one to report)."""
    try:
        files = expand_inputs(inputs)
        if not files or files[0] == STDIN:
            return set()
        if is_parquet(files[0]):
            return set(pq.read_schema(files[0]).names)
        with jsonl.open_stream(files[0]) as fh:
            for line in fh:
                if line.strip():
                    obj = json.loads(line)
                    return set(obj) if isinstance(obj, dict) else set()
    except (OSError, ValueError, RecursionError, pa.ArrowException, AdvcliError):
        return set()
    return set()


def _lift_nested(source: LogSource, mapping: dict[str, str]) -> LogSource:
    """``source`` with the struct fields ``--col`` names (``prompt_id=group.id``) as columns."""
    paths = nested_paths(source.schema, list(mapping.values()))
    return NestedFields(source, paths) if paths else source


def group_warnings(log: Log, rows: Rows) -> list[str]:
    """Signs that the group key is not the prompt: every group a single rollout, or groups of
    sizes other than the common one (singletons aside: they are flagged and counted anyway).
    None for a framework's dump: its reader groups rows as the framework did."""
    if rows.group_keys is None or rows.n_rollouts < 2 or log.preset is not None:
        return []
    sizes = np.bincount(rows.rollout_groups(), minlength=len(rows.group_keys))
    column = log.roles["prompt_id"]
    if (sizes == 1).all():
        return [
            f"every group has a single rollout: is '{column}' really the prompt? (a key unique "
            "to each rollout gives no group signal). Hint: name the group key's column with "
            "`col`, or read a framework's dump with `from_`"
        ]
    groups = sizes[sizes > 1]
    values, counts = np.unique(groups, return_counts=True)
    common = int(values[np.argmax(counts)])
    other = int((groups != common).sum())
    if other:
        return [
            f"{other} of {len(groups)} groups do not have the common size of {common} rollouts "
            f"(sizes {', '.join(map(str, values.tolist()))}): check that '{column}' keys one "
            "prompt per group"
        ]
    return []


LogPaths = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
"""Parquet or JSONL files, folders or globs (``-``: JSONL on stdin), read as one log."""


def input_paths(inputs: LogPaths) -> list[str]:
    """``inputs`` as a list of path strings (a ``file://`` URI as the local path it names)."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    return [remote.local_file_path(os.fspath(i)) for i in inputs]
