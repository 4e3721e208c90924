"""The log to shard: opened (and its method planned, for a raw log), and measured.

A sample is one row of the annotated log: a rollout, or a segment of one when the log is
segmented (each segment is its own training sample, as in ``--segments compaction``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from advcli import progress
from advcli.errors import AdvcliError, DataError, UsageError, file_list
from advcli.io import jsonl, remote
from advcli.io.jsonl import STDIN, is_jsonl
from advcli.io.outputs import existing_metadata, metadata_path
from advcli.io.rollouts import Rows, extract_rows, row_columns
from advcli.io.schema import ROLES, Roles
from advcli.io.sources import LogSource, Sources, expand_inputs, prefetch
from advcli.io.tokens import extract_tokens, token_columns
from advcli.io.writers import read_metadata
from advcli.lazy_imports import np, pa, pq
from advcli.run.accounting import CountTokens, token_counts
from advcli.run.engine import Batch, Run
from advcli.run.jobs import Job
from advcli.run.logs import BATCH_ROWS


@dataclass
class Input:
    """The log to shard: where it streams from, and how its annotated rows come about."""

    source: LogSource
    roles: Roles
    rows: Rows  # the per-row columns of every input row, validated
    run: Run | None  # the method, planned (a raw log); None: the log is annotated already
    metadata: dict[str, Any]  # method, params, roles (advcli metadata of the annotation)
    dropped_by_method: dict[str, int]
    warnings: list[str]
    annotate: Callable[[Run], Iterator[Batch]] | None = None  # the final pass run elsewhere
    prompts_removed: str | None = None  # by keep_prompts / drop_prompts

    @property
    def annotated_input(self) -> bool:
        return self.run is None

    @property
    def sources(self) -> Sources:
        return self.source.sources

    @property
    def correction(self) -> dict[str, Any] | None:
        """The rollout correction the annotated rows carry (its mode, bounds and flavour)."""
        if self.run is not None:
            return self.run.metadata().get("correction")
        return self.metadata.get("correction")

    @property
    def added(self) -> dict[str, np.ndarray]:
        """The per-row columns the method adds (or replaces) in the annotated log."""
        return self.run.plan.columns if self.run is not None else {}

    def columns(self) -> list[str]:
        """The columns of the annotated log that ``--keep`` may name."""
        return list(dict.fromkeys([*self.source.schema.names, *self.added]))

    def kept_rows(self) -> np.ndarray:
        """The input row of every sample (the method may drop rows)."""
        kept = self.run.plan.kept if self.run is not None else None
        if kept is None:
            return np.arange(self.rows.n_rows, dtype=np.int64)
        return np.flatnonzero(kept)

    def annotated_batches(
        self, extra: list[str], batch_rows: int = BATCH_ROWS
    ) -> Iterator[tuple[pa.Table, np.ndarray]]:
        """The annotated log's rows in order, batch by batch, with their action masks (a log
        annotated already: only the columns shards take, and the ``--keep`` columns ``extra``)."""
        if self.run is not None:
            batches = self.annotate(self.run) if self.annotate else self.run.annotated()
            for batch in batches:
                assert batch.mask is not None  # shards need token ids
                yield batch.table, batch.mask
            return
        roles, schema = self.roles, self.source.schema.names
        ids = ("prompt_id", "rollout_id", "segment_index")
        names = [c for r in ids if (c := roles[r]) is not None]
        names += token_columns(roles, values=False)
        own = ("advantages", "returns", "is_weights", "is_mask")
        names += [n for n in own if n in schema] + extra
        for row0, table in prefetch(self.source.batches(list(dict.fromkeys(names)), batch_rows)):
            yield table, extract_tokens(table, roles, self.sources, row0, values=False).mask


def _file_metadata(path: str) -> dict[str, Any] | None:
    if path == STDIN:
        return None
    try:
        return read_metadata(path)
    except (OSError, ValueError, pa.ArrowException):
        return None  # not readable: open_log() reports it properly


def _same_run(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (a.get("method"), a.get("params")) == (b.get("method"), b.get("params"))


def _recorded_roles(path: str, meta: dict[str, Any]) -> dict[str, str]:
    """The roles advcli's metadata of an annotated log records; a broken record is the data's
    fault, not a flag's."""
    recorded: Any = meta.get("roles") or {}
    if not isinstance(recorded, dict) or any(
        r not in ROLES or not isinstance(c, str) or not c for r, c in recorded.items()
    ):
        shown = orjson.dumps(recorded).decode()[:80]
        msg = f"{_metadata_of(path)}: its 'roles' are not roles advcli knows ({shown})"
        raise DataError(f"{msg}. Hint: annotate the raw log again")
    columns = _columns(path)
    for role, column in recorded.items():
        if columns is not None and column.partition(".")[0] not in columns:
            msg = f"{_metadata_of(path)}: its 'roles' name a column the log lacks ({role}={column})"
            raise DataError(f"{msg}. Hint: annotate the raw log again")
    return recorded


def _metadata_of(path: str) -> str:
    if is_jsonl(path):
        return str(existing_metadata(path) or metadata_path(path))
    return f"{path} (its advcli metadata)"


def _columns(path: str) -> set[str] | None:
    """The columns of a log's file, from its footer or first line (None where they cannot be
    read here: opening the log says why)."""
    try:
        if is_jsonl(path):
            with jsonl.open_stream(path) as lines:
                first = jsonl.head(lines, 1)
            return set(orjson.loads(first)) if first.strip() else None
        return set(
            pq.read_schema(remote.open_input(path) if remote.is_remote(path) else path).names
        )
    except (OSError, ValueError, pa.ArrowException, AdvcliError):
        return None


def open_input(job: Job) -> Input:
    """Open the job's log; plan its method on it unless advcli annotated it already (the job's
    method is what ``--method`` said, None when not given)."""
    preset = job.reading.preset
    files = list(job.paths) if preset is not None else expand_inputs(list(job.paths))
    metas = [None if preset is not None else _file_metadata(f) for f in files]
    marked = [m for m in metas if m and m.get("method")]
    if marked and len(marked) != len(metas):
        raw = files[next(i for i, m in enumerate(metas) if not (m and m.get("method")))]
        msg = (
            f"{raw}: a raw log among logs annotated by advcli; shard them as one kind. "
            "Hint: annotate the raw log first, or shard the raw logs with `method`"
        )
        raise UsageError(msg)
    # Here every input is annotated, or none is.
    other = next((i for i, m in enumerate(marked) if not _same_run(m, marked[0])), None)
    if other is not None:
        msg = (
            f"{files[other]}: annotated with method {marked[other].get('method')!r} or "
            f"parameters other than {files[0]}'s. Hint: shard logs of one annotation run"
        )
        raise UsageError(msg)
    user_cols = list(job.reading.col)
    if marked:  # the roles the annotation used, unless --col says otherwise
        given = {c.partition("=")[0] for c in user_cols}
        recorded = _recorded_roles(files[0], marked[0])
        user_cols += [f"{r}={c}" for r, c in sorted(recorded.items()) if r not in given]
    with progress.stage("reading"):
        log = job.open(dataclasses.replace(job.reading, col=tuple(user_cols)))
    source, roles = log.source, log.roles
    hint = "annotate writes per-row advantages for such a log (grpo, rloo, batch-mean)"
    log.require({"input_ids"}, what="shard", without_tokens=hint)
    if marked and "advantages" in source.schema.names:
        meta = marked[0]
        if job.method is not None and job.method.name != meta["method"]:
            msg = (
                f"{files[0]}: already annotated with method {meta['method']!r}, not "
                f"{job.method.name!r}. "
                "Hint: drop `method`, or shard the raw log"
            )
            raise UsageError(msg)
        with progress.stage("reading per-row columns"):
            rows = extract_rows(source.columns(row_columns(roles)), roles, source.sources)
        info: dict[str, Any] = {k: meta.get(k) for k in ("method", "params")}
        for key in ("correction", "tokenizer_sha256"):  # what the annotation recorded
            if key in meta:
                info[key] = meta[key]
        info["roles"] = {k: v for k, v in roles.columns.items() if v}
        return Input(
            source, roles, rows, None, info, {}, log.warnings, prompts_removed=log.prompts_removed
        )
    if job.method is None:
        msg = (
            f"{file_list(files)}: a raw log (no advcli annotation), so shard needs a method. "
            "Hint: pass `method='grpo'` (or another method), or annotate the log first"
        )
        raise UsageError(msg)
    run = job.plan(log)
    info = {k: v for k, v in run.metadata().items()
            if k in ("method", "params", "roles", "tokenizer_sha256")}  # fmt: skip
    return Input(source, roles, run.rows, run, info, dict(run.plan.dropped), run.warnings,
                 prompts_removed=log.prompts_removed)  # fmt: skip


def check_keep(inp: Input, keep: list[str]) -> list[str]:
    """The ``--keep`` columns, each once; every one a column of the annotated log."""
    columns = inp.columns()
    for name in keep:
        if name not in columns:
            msg = (
                f"`keep={[name]!r}`: no such column. Columns: {', '.join(columns)}. "
                "Hint: `keep` takes a column name of the log"
            )
            raise UsageError(msg)
    return list(dict.fromkeys(keep))


@dataclass
class Samples:
    """What the plan needs of every sample (a row of the annotated log), as per-row arrays."""

    tokens: np.ndarray  # int64 tokens
    actions: np.ndarray  # int64 action tokens
    kept_actions: np.ndarray  # action tokens among the first --pack tokens (all without --pack)
    group: np.ndarray | None  # group code (prompt id), in order of first appearance
    group_keys: pa.Array | None  # the prompt id of each group code
    source_row: np.ndarray  # int64: the sample's row in the input log
    flags: dict[str, np.ndarray]  # zero_variance / singleton, where the annotated log has them

    @property
    def n_rows(self) -> int:
        return len(self.tokens)


def first_appearance(codes: np.ndarray, keys: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """Dense codes numbered in order of first appearance, and the key of each."""
    uniq, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    by_first = np.argsort(first)
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[by_first] = np.arange(len(uniq))
    return rank[inverse.reshape(-1)], keys.take(pa.array(uniq[by_first]))


def measure(
    inp: Input, pack: int | None, batch_rows: int = BATCH_ROWS, count: CountTokens | None = None
) -> Samples:
    """Every sample's token and action counts (a pass over the token columns but the ids,
    which the pass that writes reads and checks); ``count`` counts them elsewhere."""
    if count is None:
        counts = token_counts(inp.source, inp.roles, ids=False, within=pack, batch_rows=batch_rows)
    else:
        counts = count(inp.source, inp.roles, ids=False, within=pack)
    rows = inp.kept_rows()
    group = keys = None
    if inp.rows.group_codes is not None:
        assert inp.rows.group_keys is not None
        group, keys = first_appearance(inp.rows.group_codes[rows], inp.rows.group_keys)
    flags: dict[str, np.ndarray] = {}
    for name in ("zero_variance", "singleton"):
        if name in inp.added:
            flags[name] = np.asarray(inp.added[name]).astype(bool)[rows]
        elif name in inp.source.schema.names:
            column = inp.source.columns([name]).column(0).combine_chunks().fill_null(False)
            flags[name] = column.to_numpy(zero_copy_only=False).astype(bool)[rows]
    return Samples(
        counts.tokens[rows],
        counts.actions[rows],
        counts.actions_within[rows],
        group,
        keys,
        rows,
        flags,
    )
