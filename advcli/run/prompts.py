"""A log's prompts: which prompt each group asks, matched across steps and logs, and a log
less the rows of some prompts (``--keep-prompts`` / ``--drop-prompts``).

Prompts are matched by their text (a prompt text column), else by their tokens (those before
the first action), else by their prompt ids: the first of these that both sides hold (ids are
often fresh at every step, as verl's uid is, so the text or the tokens come first). A group's
prompt is its first row's. Each prompt is a 64-bit key (a hash of the text, of the tokens or of
the id as text), the same within a run of advcli.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from advcli.core.ragged import (
    first_where_in,
    lengths,
    offsets_from_lengths,
    prefix_hashes,
    ranges,
)
from advcli.errors import AdvcliError, DataError, UsageError
from advcli.io import jsonl
from advcli.io.arrow import flat_list, list_array
from advcli.io.file_sources import open_source
from advcli.io.rollouts import Rows, extract_rows, row_columns
from advcli.io.sources import LogSource, Sources, is_parquet, prefetch
from advcli.io.split_tokens import SplitTokens
from advcli.io.tokens import extract_tokens, token_columns
from advcli.lazy_imports import np, pa, pl, pq
from advcli.run.logs import BATCH_ROWS, Log

BASES = {
    "text": "their prompt text",
    "tokens": "their prompt tokens (those before the first action)",
    "id": "their prompt ids",
}
"""How prompts are matched, first choice first, and how a summary says it."""

PROMPT_TEXT = ("prompt", "question", "query", "problem", "instruction", "input", "prompt_text",
               "messages")  # fmt: skip
"""Text columns that hold a rollout's prompt, the first found the one read."""


def prompt_text_column(log: Log) -> str | None:
    """The first :data:`PROMPT_TEXT` column the log has that is text and plays no role (a
    prompt id that is the text is shown already)."""
    schema, roles = log.source.schema, {c for c in log.roles.columns.values() if c}
    return next((c for c in PROMPT_TEXT if c in schema.names and c not in roles and (
        pa.types.is_string(schema.field(c).type) or pa.types.is_large_string(
            schema.field(c).type))), None)  # fmt: skip


def row_steps(log: Log) -> np.ndarray | None:
    """Each row's step (float64, NaN where null or infinite: on no step), from a ``step``
    column of numbers (the presets write the step each dump file belongs to); None without
    one."""
    if "step" not in log.source.schema.names:
        return None
    try:
        column = log.source.columns(["step"]).column("step").cast(pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None  # steps that are not numbers
    out: np.ndarray = column.to_numpy().astype(np.float64)  # nulls: NaN
    out[np.isinf(out)] = np.nan
    return out


def log_bases(log: Log) -> set[str]:
    """The ways the log can match its prompts (:data:`BASES`)."""
    out = {"id"}
    if prompt_text_column(log) is not None:
        out.add("text")
    if log.roles["input_ids"] is not None:
        out.add("tokens")
    return out


def first_rows(group_codes: np.ndarray, n_groups: int) -> np.ndarray:
    """Each group's first row (-1 for a group without rows)."""
    first_row = np.full(n_groups, -1, dtype=np.int64)
    first_row[group_codes[::-1]] = np.arange(len(group_codes))[::-1]
    return first_row


def rows_of_column(
    log: Log, column: str, wanted: np.ndarray, batch_rows: int
) -> Iterator[tuple[np.ndarray, pa.Array]]:
    """``column``'s values at the rows ``wanted`` (sorted), a batch at a time: (the
    positions in ``wanted``, the values)."""
    for row0, table in prefetch(log.source.batches([column], batch_rows)):
        lo, hi = np.searchsorted(wanted, [row0, row0 + table.num_rows])
        if hi > lo:
            at = pa.array(wanted[lo:hi] - row0)
            yield np.arange(lo, hi), table.column(column).combine_chunks().take(at)


def hashed_strings(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A 64-bit hash of each string (a null as the empty string; the same within a run)."""
    series = pl.Series(values.cast(pa.large_string())).fill_null("")
    out: np.ndarray = series.hash(seed=0).to_numpy()
    return out


@dataclass(frozen=True)
class PromptTokens:
    """The prompt tokens (those before the first action) of some rows: their hashes
    (:func:`~advcli.core.ragged.prefix_hashes`) and the tokens, flat with offsets."""

    hashes: np.ndarray  # uint64 per row
    values: np.ndarray  # int64
    offsets: np.ndarray  # int64, from 0

    def take(self, at: np.ndarray) -> PromptTokens:
        """Those of the rows ``at`` (positions), in that order."""
        lo, hi = self.offsets[at], self.offsets[at + 1]
        offsets = np.zeros(len(at) + 1, dtype=np.int64)
        np.cumsum(hi - lo, out=offsets[1:])
        return PromptTokens(self.hashes[at], self.values[ranges(lo, hi - lo)], offsets)

    def column(self) -> pa.Array:
        """The tokens as a list column, one list per row."""
        return list_array(self.values, self.offsets)


def prompt_tokens(log: Log, wanted: np.ndarray, batch_rows: int = BATCH_ROWS) -> PromptTokens:
    """The prompt tokens of the rows ``wanted`` (sorted), from one pass over the token ids and
    the action mask."""
    source, roles = log.source, log.roles
    ids_column = roles.column("input_ids")
    hashes = np.zeros(len(wanted), dtype=np.uint64)
    kept_values: list[np.ndarray] = []
    kept_lengths = np.zeros(len(wanted), dtype=np.int64)
    columns = token_columns(roles, values=False, ids=True)
    for row0, table in prefetch(source.batches(columns, batch_rows)):
        lo, hi = np.searchsorted(wanted, [row0, row0 + table.num_rows])
        if hi == lo:
            continue
        tok = extract_tokens(table, roles, source.sources, row0, values=False)
        ids = flat_list(table.column(ids_column))[0].to_numpy(zero_copy_only=False)
        at = wanted[lo:hi] - row0
        ends = first_where_in(tok.offsets, tok.mask, at)
        values = ids[ranges(tok.offsets[at], ends)].astype(np.int64)
        hashes[lo:hi] = prefix_hashes(values, offsets_from_lengths(ends), ends)
        kept_lengths[lo:hi] = ends
        kept_values.append(values)
    offsets = np.zeros(len(wanted) + 1, dtype=np.int64)
    np.cumsum(kept_lengths, out=offsets[1:])
    values = np.concatenate(kept_values) if kept_values else np.zeros(0, dtype=np.int64)
    return PromptTokens(hashes, values, offsets)


def group_prompt_tokens(log: Log, rows: Rows, batch_rows: int = BATCH_ROWS) -> PromptTokens:
    """Per group: the prompt tokens of its first row."""
    assert rows.group_codes is not None and rows.group_keys is not None
    first = first_rows(rows.group_codes, len(rows.group_keys))
    order = np.argsort(first, kind="stable")
    position = np.empty(len(first), dtype=np.int64)
    position[order] = np.arange(len(first))
    return prompt_tokens(log, first[order], batch_rows).take(position)


def group_identity(
    log: Log,
    rows: Rows,
    basis: str,
    batch_rows: int = BATCH_ROWS,
    token_hashes: np.ndarray | None = None,
) -> np.ndarray:
    """Per group: the 64-bit key of its prompt (its first row's), by ``basis``
    (:data:`BASES`). ``token_hashes``: each row's prompt-token hash where a pass made them
    already (else one is made here)."""
    assert rows.group_codes is not None and rows.group_keys is not None
    first = first_rows(rows.group_codes, len(rows.group_keys))
    if basis == "tokens":
        if token_hashes is None:
            return group_prompt_tokens(log, rows, batch_rows).hashes
        out: np.ndarray = token_hashes[first]
        return out
    if basis == "id":
        return hashed_strings(rows.group_keys.cast(pa.string()))
    column = prompt_text_column(log)
    assert column is not None
    order = np.argsort(first, kind="stable")
    keys = np.zeros(len(first), dtype=np.uint64)
    for at, values in rows_of_column(log, column, first[order], batch_rows):
        keys[order[at]] = hashed_strings(values)
    return keys


PROMPT_FILE_HINT = "give a file `prompts` wrote with its `out` (JSONL or Parquet)"


@dataclass(frozen=True)
class PromptList:
    """A file of prompts (what ``prompts --out`` writes): each prompt's key by every basis
    the file holds (``prompt``: text; ``prompt_tokens``; ``prompt_id``)."""

    path: str
    option: str  # keep_prompts or drop_prompts
    keys: dict[str, np.ndarray]  # basis -> uint64 per prompt of the file

    @property
    def keep(self) -> bool:
        return self.option == "keep_prompts"

    @property
    def n_prompts(self) -> int:
        return len(next(iter(self.keys.values())))


def read_prompt_list(path: str, option: str) -> PromptList:
    """The prompts of a file ``prompts --out`` wrote (``option``: the option that named it,
    for the messages); a file with none of its prompt columns is refused in one line, one
    without rows (an empty selection) lists no prompts."""
    if lists_nothing(path):
        return PromptList(path, option, {basis: np.zeros(0, np.uint64) for basis in BASES})
    try:
        source = open_source([path])
    except AdvcliError as exc:  # no such file, not a log
        raise type(exc)(f"`{option}`: {exc}") from None
    names = source.schema.names
    table = source.columns([c for c in ("prompt", "prompt_tokens", "prompt_id") if c in names])
    keys: dict[str, np.ndarray] = {}
    if "prompt" in names and table.column("prompt").null_count < table.num_rows:
        if not pa.types.is_string(table.schema.field("prompt").type) and not (
            pa.types.is_large_string(table.schema.field("prompt").type)
        ):
            raise UsageError(f"`{option}={path!r}`: its 'prompt' column is not text")
        keys["text"] = hashed_strings(table.column("prompt"))
    if "prompt_tokens" in names:
        flat, offsets = flat_list(table.column("prompt_tokens").fill_null([]))
        ids = flat.to_numpy(zero_copy_only=False).astype(np.int64)
        keys["tokens"] = prefix_hashes(ids, offsets, lengths(offsets))
    if "prompt_id" in names:
        keys["id"] = hashed_strings(table.column("prompt_id").cast(pa.string()))
    if not keys:
        msg = (
            f"`{option}={path!r}`: no 'prompt', 'prompt_tokens' or 'prompt_id' column. "
            f"Hint: {PROMPT_FILE_HINT}"
        )
        raise UsageError(msg)
    return PromptList(path, option, keys)


def lists_nothing(path: str) -> bool:
    """Whether ``path`` is a Parquet file without rows or a JSONL file without a line (what
    ``prompts --out`` writes when no prompt is selected)."""
    try:
        if is_parquet(path):
            return bool(pq.read_metadata(path).num_rows == 0)
        with jsonl.open_stream(path) as lines:
            return not any(line.strip() for line in lines)
    except (OSError, ValueError, pa.ArrowException, AdvcliError):
        return False  # its own error is the one to say, when it is opened


class KeptSources(Sources):
    """Where the rows of a log less some of its rows came from: a row is located as the row
    of the whole log it is."""

    def __init__(self, base: Sources, rows: np.ndarray, row_counts: list[int]):
        super().__init__(base.files, row_counts, base.stdin, None)
        self.base = base
        self.rows = rows  # per kept row: its row in the whole log

    def locate(self, row: int) -> tuple[str, int, bool]:
        return self.base.locate(int(self.rows[row]) if row < len(self.rows) else row)


class KeptRows(LogSource):
    """A log less some of its rows (``kept``: bool per row of ``base``, read once already:
    its files' rows are counted), in its order; a batch holds the kept rows of a batch of
    ``base``."""

    def __init__(self, base: LogSource, kept: np.ndarray):
        assert base.n_rows == len(kept), "the base log's rows are counted by a first read"
        self.base = base
        self.kept = kept
        self.schema = base.schema
        ends = np.cumsum(base.sources.row_counts, dtype=np.int64)
        counts = np.diff(np.r_[0, np.cumsum(kept)[ends - 1] if len(kept) else ends * 0])
        self.sources = KeptSources(base.sources, np.flatnonzero(kept), counts.tolist())

    def files_without(self, column: str) -> list[str]:
        return self.base.files_without(column)

    def keep_parsed(self) -> None:
        self.base.keep_parsed()

    def columns(self, names: list[str]) -> pa.Table:
        return self.base.columns(names).filter(pa.array(self.kept))

    def batches(self, names: list[str] | None, rows: int) -> Iterator[tuple[int, pa.Table]]:
        done = 0
        for row0, table in self.base.batches(names, rows):
            kept = self.kept[row0 : row0 + table.num_rows]
            if kept.any():
                yield done, table.filter(pa.array(kept))
                done += int(kept.sum())

    def file_batches(self, rows: int) -> Iterator[tuple[int, pa.Table]]:
        row0 = 0
        for i, table in self.base.file_batches(rows):
            kept = self.kept[row0 : row0 + table.num_rows]
            row0 += table.num_rows
            if kept.any():
                yield i, table.filter(pa.array(kept))


@dataclass(frozen=True)
class Removed:
    """What ``keep_prompts`` / ``drop_prompts`` removed from a log before anything was
    computed."""

    option: str
    path: str
    rows: int
    prompts: int  # the log's prompts removed
    matched_by: str

    def sentence(self) -> str:
        return (
            f"`{self.option}={self.path!r}`: {self.rows} rows of {self.prompts} prompts "
            f"removed before anything was computed (prompts matched by {self.matched_by})"
        )


def without_prompts(log: Log, chosen: PromptList, batch_rows: int = BATCH_ROWS) -> Removed:
    """Remove from ``log`` (in place: its source) the rows of the prompts ``chosen`` drops (or
    does not keep), matched by the first basis both hold; what was removed."""
    log.require({"prompt_id"}, what=f"`{chosen.option}`")
    source = log.source
    rows = extract_rows(source.columns(row_columns(log.roles)), log.roles, source.sources)
    basis = next(b for b in BASES if b in chosen.keys and b in log_bases(log))
    identity = group_identity(log, rows, basis, batch_rows)
    listed = np.isin(identity, chosen.keys[basis])
    kept_groups = listed if chosen.keep else ~listed
    assert rows.group_codes is not None
    kept = kept_groups[rows.group_codes]
    if not kept.any():
        msg = (
            f"`{chosen.option}={chosen.path!r}`: no row of {log.files} is left (prompts "
            f"matched by {BASES[basis]})"
        )
        raise DataError(msg)
    removed_prompts = len(np.unique(identity[~kept_groups]))
    if not chosen.n_prompts:
        log.warnings.append(f"`{chosen.option}={chosen.path!r}`: it lists no prompt")
    elif not np.isin(chosen.keys[basis], identity).any():
        log.warnings.append(
            f"`{chosen.option}={chosen.path!r}`: none of its {chosen.n_prompts} prompts is in "
            f"{log.files} (matched by {BASES[basis]})"
        )
    if isinstance(source, SplitTokens):  # kept outermost: annotate writes its layout
        log.source = SplitTokens(KeptRows(source.base, kept), source.per_token, source.spans)
    else:
        log.source = KeptRows(source, kept)
    return Removed(chosen.option, chosen.path, int((~kept).sum()), removed_prompts,
                   BASES[basis])  # fmt: skip
