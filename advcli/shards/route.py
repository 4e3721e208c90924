"""Routing: the annotated rows, streamed once, each appended to its bucket's temporary file with
its position in the output (rows reach the buckets in any order; a bucket is put in order when
it is written)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from advcli.core.ragged import lengths
from advcli.errors import DataError, OutputError, UsageError
from advcli.io.arrow import fast_ipc, flat_list, is_list, list_array
from advcli.io.sources import Sources
from advcli.lazy_imports import np, pa
from advcli.methods import PARAMETERS
from advcli.run.logs import BATCH_ROWS
from advcli.shards.inputs import Input, Samples
from advcli.shards.layout import Layout
from advcli.shards.trainers import (
    LOGPROB_STREAMS,
    MASKED,
    REJECTED,
    SEQUENCE_WEIGHT,
    WEIGHTS,
    one_per_sequence,
    one_weight_per_sequence,
)

POSITION = "__advcli_position__"  # a bucket row's position in the output
SPARE_FILES = 64  # open files besides the buckets: inputs, shards, the interpreter's own


def per_token(column: pa.ChunkedArray, n_tokens: np.ndarray) -> pa.Array | None:
    """The flat values of a list column without nulls and with one value per token, else None."""
    if not is_list(column.type) or column.null_count:
        return None
    values, offsets = flat_list(column)
    return values if np.array_equal(lengths(offsets), n_tokens) else None


def _not_per_token(
    column: pa.ChunkedArray,
    name: str,
    n_tokens: np.ndarray,
    rows: np.ndarray,
    sources: Sources,
    hint: str | None = None,
) -> DataError:
    """The error for a column :func:`per_token` refused (``advantages``, ``returns``, the
    log-probs); ``hint`` replaces the hints for an annotated log's columns."""
    if is_list(column.type) and not column.null_count:
        count = lengths(flat_list(column)[1])
        row = int(np.flatnonzero(count != n_tokens)[0])
        msg = (
            f"{sources.at(int(rows[row]), name)}: {count[row]} values but {n_tokens[row]} "
            f"tokens. Hint: {hint or 'an annotated log has one value per token'}"
        )
        return DataError(msg)
    at = 0 if not column.null_count else int(np.flatnonzero(column.is_null().to_numpy(False))[0])
    msg = (
        f"{sources.at(int(rows[at]), name)}: expected a list of numbers without nulls, saw "
        f"{column.type}. Hint: {hint or 'annotate the raw log again'}"
    )
    return DataError(msg)


def sample_table(
    table: pa.Table,
    mask: np.ndarray,
    inp: Input,
    extra: list[str],
    rows: np.ndarray,
    taken: dict[str, str] | None = None,
) -> pa.Table:
    """A batch of annotated rows under the shards' column names, with the ``--keep`` columns
    ``extra`` and the columns a trainer layout takes (``taken``: its name for each, the log's
    column) (``rows``: their input rows)."""
    roles = inp.roles
    ids = table.column(roles.column("input_ids"))
    offsets = flat_list(ids)[1]
    n_tokens = lengths(offsets)
    cols: dict[str, pa.Array | pa.ChunkedArray] = {}
    for role in ("prompt_id", "rollout_id", "segment_index"):
        if roles[role] is not None:
            cols[role] = table.column(roles[role])
    if "rollout_id" not in cols:
        cols["rollout_id"] = pa.array(rows)
    cols["input_ids"] = ids
    cols["loss_mask"] = list_array(mask.astype(np.int8), offsets)
    for name, kind in (("advantages", pa.float32()), ("returns", pa.float32()),
                       (WEIGHTS, pa.float32()), (MASKED, pa.int8())):  # fmt: skip
        if name in table.column_names:
            values = per_token(table.column(name), n_tokens)
            if values is None:
                raise _not_per_token(table.column(name), name, n_tokens, rows, inp.sources)
            cols[name] = list_array(values.cast(kind), offsets)
    for name in extra:
        cols[name] = table.column(name)
    for name, column in (taken or {}).items():
        if name in LOGPROB_STREAMS:
            values = per_token(table.column(column), n_tokens)
            if values is None:
                hint = "one log-prob per token (of the response in a prompt_ids + response_ids log)"
                raise _not_per_token(table.column(column), column, n_tokens, rows, inp.sources,
                                     hint)  # fmt: skip
            cols[name] = list_array(values.cast(pa.float32()), offsets)
        elif name == REJECTED:  # the tokens a rejection mode masked
            cols[name] = cols[MASKED]
        elif name == SEQUENCE_WEIGHT:  # a sequence mode's one weight per sequence
            weights = flat_list(cols[WEIGHTS])[0].to_numpy(zero_copy_only=False)
            cols[name] = pa.array(one_weight_per_sequence(weights, mask, offsets))
        else:  # the one advantage per sequence, from the advantages
            flat = flat_list(cols["advantages"])[0].to_numpy(zero_copy_only=False)
            cols[name], varies = one_per_sequence(flat, mask, offsets)
            if varies is not None:
                raise _varies(inp, int(rows[varies]), flat[offsets[varies] : offsets[varies + 1]],
                              mask[offsets[varies] : offsets[varies + 1]])  # fmt: skip
    return pa.table(cols)


def _varies(inp: Input, row: int, advantages: np.ndarray, mask: np.ndarray) -> UsageError:
    """The error for a row whose advantages vary along its action tokens, in a layout with one
    advantage per sequence: the run that gave them, and the layout that takes them."""
    on_actions = advantages[mask]
    msg = (
        f"{inp.sources.at(row, 'advantages')}: `layout='trl'` holds one advantage per sequence, "
        f"and {run_options(inp.metadata)} gives advantages that vary along the row's action "
        f"tokens (from {on_actions.min():g} to {on_actions.max():g}). Hint: `layout='verl'`, which "
        "takes per-token advantages, or `layout='advcli'`"
    )
    return UsageError(msg)


def run_options(metadata: dict[str, Any]) -> str:
    """The run an annotation records, as its options: the method and every option set away
    from its default (`` `method='grpo'` `entropy_coef=0.1` ``), in a message's terms."""
    params = metadata.get("params") or {}
    words = [f"`method={metadata.get('method')!r}`"]
    for name, value in sorted(params.items()):
        param = PARAMETERS.get(name)
        if param is not None and not param.conventional and value != param.default:
            words.append(f"`{name}={value!r}`")
    return " ".join(words)


def allow_open_files(n_buckets: int, target: str) -> None:
    """Routing keeps every bucket file open (rows reach them in any order). Raise this
    process's soft limit on open files (``ulimit -n``, often 1024: a ~8 B-token log) up to
    its hard limit if needed; fail before writing anything if even that is too low."""
    try:
        import resource
    except ImportError:  # not a Unix: no such limit to raise
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = n_buckets + SPARE_FILES
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        msg = (
            f"{target}: sharding this log keeps {n_buckets:,} temporary bucket files open at "
            f"once, but this process may open at most {hard:,} files. "
            f"Hint: raise the limit (ulimit -n {need}) and run again"
        )
        raise OutputError(msg)
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def _identity(order: np.ndarray, n: int) -> bool:
    """Whether ``order`` is 0, 1, ..., n - 1 (a take that would copy every row as it is)."""
    return len(order) == n and bool((order == np.arange(n)).all())


def bucket_path(folder: Path, j: int) -> Path:
    return folder / f"bucket-{j:06d}.arrow"


def arrive_in_order(lay: Layout) -> bool:
    """Whether the samples arrive in output order (no shuffle, one split): every bucket is
    then complete when the next one begins, and can be written without a temporary file."""
    kept = lay.position[lay.position >= 0]
    return bool((np.diff(kept) > 0).all())


def route(
    inp: Input,
    samples: Samples,
    lay: Layout,
    extra: list[str],
    folder: Path | None,
    batch_rows: int = BATCH_ROWS,
    *,
    taken: dict[str, str] | None = None,
    complete: Callable[[int, pa.Table], None] | None = None,
) -> set[str]:
    """Append every sample, with the ``--keep`` columns ``extra`` and a trainer layout's
    ``taken`` ones, to its bucket's file in ``folder``, with its position; or, where they
    :func:`arrive_in_order`, hand each bucket to ``complete`` (its number, its rows) as soon as
    it is whole, and write no file.

    Returns the columns that are per-token: ``--keep`` columns that are lists without nulls
    whose lengths equal the token counts on every row, and the log-probs a layout takes.
    """
    if folder is not None:
        folder.mkdir()
    taken = taken or {}
    per_token_columns = set(extra)
    starts = lay.bucket_positions[:-1]
    writers: dict[int, pa.ipc.RecordBatchStreamWriter] = {}
    held: list[pa.Table] = []  # the rows of bucket ``holding`` so far (``complete``)
    holding = 0
    done = 0
    with contextlib.ExitStack() as stack:
        read = list(dict.fromkeys([*extra, *taken.values()]))
        for table, mask in inp.annotated_batches(read, batch_rows):
            n = table.num_rows
            rows = samples.source_row[done : done + n]
            position = lay.position[done : done + n]
            done += n
            batch = sample_table(table, mask, inp, extra, rows, taken)
            n_tokens = lengths(flat_list(batch.column("input_ids"))[1])
            per_token_columns -= {
                k for k in per_token_columns if per_token(batch.column(k), n_tokens) is None
            }
            take = np.flatnonzero(position >= 0)
            bucket = np.searchsorted(starts, position[take], side="right") - 1
            by_bucket = np.argsort(bucket, kind="stable")
            order = take[by_bucket]
            batch = batch.append_column(POSITION, pa.array(position))
            if not _identity(order, n):  # rows leave in input order unless shuffled or dropped
                batch = batch.take(order)
            bucket = bucket[by_bucket]
            cuts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1], True])
            for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
                j = int(bucket[a])
                if complete is not None:
                    if j != holding:
                        complete(holding, pa.concat_tables(held))
                        held, holding = [], j
                    held.append(batch.slice(a, b - a))
                    continue
                assert folder is not None
                if j not in writers:
                    writers[j] = stack.enter_context(
                        pa.ipc.new_stream(bucket_path(folder, j), batch.schema, options=fast_ipc())
                    )
                writers[j].write_table(batch.slice(a, b - a))
    if complete is not None and held:
        complete(holding, pa.concat_tables(held))
    return per_token_columns | ({*LOGPROB_STREAMS, REJECTED} & set(taken))  # checked per token
