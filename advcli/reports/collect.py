"""What ``advcli report`` shows, gathered in the passes ``audit`` and ``annotate`` make.

Aggregates (overview, trends, distributions) cover every row: they are built from per-rollout
and per-group arrays, and the per-token advantages go through an unnamed temporary file (4 bytes
an action token) so that their histogram is exact in bounded memory. Per-rollout and per-token
detail is kept for a seeded sample of groups only, which always holds the worst ones: the
zero-variance and near-tie groups that spend the most action tokens.

The result is a plain dict of lists and numbers (what the page embeds as JSON); token arrays are
base64 of little-endian typed arrays, which the page reads with ``Float32Array`` and the like.
"""

from __future__ import annotations

import base64
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any, NoReturn

from advcli import installed, progress
from advcli.accounting import Audit, audit_log
from advcli.core import group as G
from advcli.core.audit import KINDS, NEAR_TIE, SIGNAL, SINGLETON
from advcli.core.audit import group_kinds as kinds_of_groups
from advcli.core.ragged import first_where, lengths, prefix_hashes
from advcli.engine import Run, room_in_tmpdir
from advcli.errors import DataError, UsageError
from advcli.io.arrow import flat_list
from advcli.io.sources import prefetch
from advcli.io.tokens import extract_tokens, token_columns
from advcli.lazy_imports import np, pa
from advcli.logs import BATCH_ROWS, Log
from advcli.params import check_option_file
from advcli.reports.options import ReportOptions

PROMPT, ACTION, OBSERVATION = 0, 1, 2  # what a token is, in the token view
TEXT_CHARS = (200, 4000)  # of each text column shown with a rollout: at least, at most
TEXT_BUDGET = 2_000_000  # characters of text the page holds in all (a page under 10 MB)
KEY_CHARS = 120  # of a prompt id shown in the groups table
MIN_TOKENS_SHOWN = 64  # per rollout, however many rollouts share the token budget
PROMPT_TAIL = 8  # the prompt tokens a rollout's token view keeps: its last ones


@dataclass(frozen=True)
class Gathered:
    """A log's collection: the page's payload, and what a comparison reads besides."""

    payload: dict[str, Any]
    log: Log
    found: Audit
    kinds: np.ndarray  # per group: an index into KINDS
    rollout_advantages: np.ndarray | None  # per rollout: mean over its action tokens (its
    # advantage, without token ids); NaN where it has none; None: no advantages
    prompt_hashes: np.ndarray | None  # per row: its prompt tokens' hash (with hash_prompts)


def collect(
    log: Log,
    options: ReportOptions,
    *,
    run: Run | None = None,
    reward_components: list[str] | None = None,
    batch_rows: int = BATCH_ROWS,
) -> dict[str, Any]:
    """Everything the page shows. ``run``: a method planned over ``log`` (its advantages are
    shown); without one, a log already annotated (an ``advantages`` or ``advantage`` column)
    shows those."""
    return gather(log, options, run=run, reward_components=reward_components,
                  batch_rows=batch_rows).payload  # fmt: skip


def gather(
    log: Log,
    options: ReportOptions,
    *,
    run: Run | None = None,
    reward_components: list[str] | None = None,
    batch_rows: int = BATCH_ROWS,
    hash_prompts: bool = False,
) -> Gathered:
    """:func:`collect`, keeping what a comparison needs (``hash_prompts``: each row's
    prompt tokens hashed, which match a prompt across logs without a prompt text column)."""
    with progress.stage("auditing the groups"):
        found = audit_log(log, tol=options.tol, near_tie=options.near_tie, batch_rows=batch_rows)
    rows = found.rows
    rewards = rows.rollout_rewards()
    codes = rows.rollout_groups()
    stats = found.stats
    hi, lo = (float(rewards.max()), float(rewards.min())) if len(rewards) else (0.0, 0.0)
    kinds = kinds_of_groups(stats, hi, lo, found.report.near_tie_std_below)
    lengths_ = found.action_tokens
    group_tokens = (
        np.bincount(codes, weights=lengths_, minlength=len(kinds)).astype(np.int64)
        if lengths_ is not None
        else None
    )
    listed, detail = choose_groups(kinds, group_tokens, stats.size, options)
    in_detail = np.zeros(len(kinds), dtype=bool)
    in_detail[detail] = True

    title = "reading advantages and the sampled rollouts"
    with run.final_pass(title) if run is not None else progress.stage(title):
        seen = _Walk(log, found, run, in_detail[codes], options, batch_rows,
                     hash_prompts=hash_prompts).walk()  # fmt: skip
    advantage_source = (
        f"{run.params.method} ({run.params.convention})" if run is not None else seen.logged_column
    )
    overview = found.as_dict()
    for key in ("reward_histogram", "files", "warnings"):
        overview.pop(key)
    warnings = [*found.warnings, *(run.warnings if run is not None else [])]
    payload: dict[str, Any] = {
        "files": found.files,
        "warnings": list(dict.fromkeys(warnings)),
        "overview": overview,
        "advantages_from": advantage_source,
        "kinds": list(KINDS),
        "trends": trends(log, found, kinds, lengths_),
        "distributions": {
            "rewards": histogram(rewards, options.bins),
            "advantages": seen.histogram(options.bins),
            "lengths": histogram(lengths_, options.bins, integers=True)
            if lengths_ is not None
            else None,
            "group_sizes": {str(k): v for k, v in found.report.group_sizes.items()},
            "components": components(log, found, reward_components or [], options.bins),
        },
        "groups": group_table(
            found,
            kinds,
            group_tokens,
            listed,
            listed_extras(log, found, seen, listed, in_detail, lengths_, batch_rows),
        ),  # fmt: skip
        "details": seen.details(found, codes, rewards, lengths_),
        "vocab": token_texts(options.tokenizer, seen, log) if options.tokenizer else None,
    }
    return Gathered(payload, log, found, kinds, seen.rollout_advantages(lengths_),
                    seen.prompt_hash)  # fmt: skip


def token_texts(path: str, seen: _Walk, log: Log) -> dict[str, str]:
    """The text of every token id the page shows, by id, from a local ``tokenizer.json``.

    The tokenizers library panics where a regular expression of the file exceeds its regex
    engine's retry limit (a ``PanicException``, no ``Exception``; its Rust code prints the
    panic on stderr itself): refused in one line naming the file, the token and its row."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        msg = f"--tokenizer needs the tokenizers package. Hint: {installed.pip_install('text')}"
        raise UsageError(msg) from None
    check_option_file("--tokenizer", path, "tokenizer.json")
    with _native_stderr_muted():
        try:
            tokenizer = Tokenizer.from_file(path)
        except _failures() as exc:  # the library raises its own (Rust) exceptions
            msg = f"--tokenizer {path}: not a tokenizer.json the tokenizers library reads ({exc})"
            raise UsageError(msg) from None
        shown = [part[0] for part in seen.tokens.values()]
        ids = np.unique(np.concatenate(shown)) if shown else np.zeros(0, np.int64)
        ids = ids[(ids >= 0) & (ids < tokenizer.get_vocab_size(with_added_tokens=True))]
        try:
            texts = tokenizer.decode_batch([[int(i)] for i in ids], skip_special_tokens=False)
        except _failures():
            _refuse_undecodable(path, tokenizer, ids, seen, log)
    return {str(int(i)): text for i, text in zip(ids, texts, strict=True)}


def _failures() -> tuple[type[BaseException], ...]:
    """What the tokenizers library raises: exceptions, and the panics of its Rust code
    (pyo3's PanicException derives from BaseException and is not importable by name)."""
    panics = [t for t in BaseException.__subclasses__() if t.__name__ == "PanicException"]
    return (Exception, *panics)


def _refuse_undecodable(
    path: str, tokenizer: Any, ids: np.ndarray, seen: _Walk, log: Log
) -> NoReturn:
    """The first id the tokenizer fails to decode, named with the first row it is on."""
    for token in ids.tolist():
        try:
            tokenizer.decode([token], skip_special_tokens=False)
        except _failures() as exc:
            row = min(r for r, part in seen.tokens.items() if (part[0] == token).any())
            at = log.sources.at(row, log.roles.column("input_ids"))
            problem = (str(exc).splitlines() or [type(exc).__name__])[0]
            msg = (
                f"--tokenizer {path}: {at}: token {token}: the tokenizers library fails to "
                f"decode it ({problem}). Hint: give another tokenizer.json, or leave "
                "--tokenizer out"
            )
            raise UsageError(msg) from None
    raise UsageError(f"--tokenizer {path}: the tokenizers library fails to decode the tokens")


@contextmanager
def _native_stderr_muted() -> Iterator[None]:
    """Standard error's file descriptor pointed at /dev/null: a panic in native code prints
    itself there (Rust's panic hook), beside the one line advcli says instead."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def choose_groups(
    kinds: np.ndarray, tokens: np.ndarray | None, sizes: np.ndarray, options: ReportOptions
) -> tuple[np.ndarray, np.ndarray]:
    """The groups the table lists and the groups whose rollouts the page holds, both sorted.
    Detail: up to half of ``detail_groups`` are the worst (zero-variance or near-tie, most
    action tokens first; most rollouts without token ids), the rest a seeded sample of the
    others. Listed: every group up to ``sample_groups``, else the detail groups and a seeded
    sample of the others."""
    n = len(kinds)
    rng = np.random.default_rng(options.seed)
    weight = tokens if tokens is not None else sizes
    worst_pool = np.flatnonzero((kinds != SIGNAL) & (kinds != SINGLETON))
    worst = worst_pool[np.argsort(-weight[worst_pool], kind="stable")][: options.detail_groups // 2]
    rest = np.setdiff1d(np.arange(n), worst)
    take = min(options.detail_groups - len(worst), len(rest))
    detail = np.sort(np.concatenate([worst, rng.choice(rest, take, replace=False)]))
    if n <= options.sample_groups:
        return np.arange(n), detail
    others = np.setdiff1d(np.arange(n), detail)
    take = max(0, min(options.sample_groups - len(detail), len(others)))
    listed = np.sort(np.concatenate([detail, rng.choice(others, take, replace=False)]))
    return listed, detail


def histogram(
    x: np.ndarray | None, bins: int, *, integers: bool = False
) -> dict[str, list[float]] | None:
    """Counts over equal bins from the lowest value to the highest (NaN left out); integers
    get bins of whole numbers."""
    if x is None:
        return None
    x = np.asarray(x, dtype=np.float64)
    x = x[~np.isnan(x)]
    if not len(x):
        return None
    lo, hi = float(x.min()), float(x.max())
    return _histogram_of(iter([x]), lo, hi, bins, integers=integers)


def _histogram_of(
    chunks: Iterator[np.ndarray], lo: float, hi: float, bins: int, *, integers: bool = False
) -> dict[str, list[float]]:
    if integers:
        step = max(1.0, float(np.ceil((hi - lo + 1) / bins)))
        edges = np.arange(lo, hi + step + 1, step) - 0.5
        edges = edges[: int(np.searchsorted(edges, hi, side="right")) + 1]
    else:
        edges = np.linspace(lo, hi, bins + 1) if hi > lo else np.array([lo - 0.5, hi + 0.5])
    counts = np.zeros(len(edges) - 1, dtype=np.int64)
    for chunk in chunks:
        counts += np.histogram(chunk, bins=edges)[0]
    return {"edges": edges.tolist(), "counts": counts.tolist()}


def trends(
    log: Log, found: Audit, kinds: np.ndarray, lengths_: np.ndarray | None
) -> dict[str, list[float]] | None:
    """Per step (a ``step`` column: the presets write the step each dump file belongs to): its
    rollouts, zero-variance share, mean reward and mean length in action tokens."""
    step_of_row = row_steps(log)
    if step_of_row is None:
        return None
    rows = found.rows
    step = step_of_row[rows.last_segment_row()]
    have = ~np.isnan(step)
    if not have.any():
        return None
    steps, at = np.unique(step[have], return_inverse=True)
    n = np.bincount(at, minlength=len(steps))
    codes = rows.rollout_groups()[have]
    zero_variance = found.stats.zero_variance[codes]
    out = {
        "step": steps.tolist(),
        "rollouts": n.tolist(),
        "zero_variance_share": (np.bincount(at, weights=zero_variance) / n).tolist(),
        "near_tie_share": (np.bincount(at, weights=kinds[codes] == NEAR_TIE) / n).tolist(),
        "mean_reward": (np.bincount(at, weights=rows.rollout_rewards()[have]) / n).tolist(),
    }
    if lengths_ is not None:
        out["mean_length"] = (np.bincount(at, weights=lengths_[have]) / n).tolist()
    return out


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


PROMPT_TEXT = ("prompt", "question", "query", "problem", "instruction", "input", "prompt_text",
               "messages")  # fmt: skip
"""Text columns that hold a rollout's prompt, the first found shown in the groups table."""
PROMPT_CHARS = 80  # of each listed group's prompt, in the page (what the search box searches)


def prompt_text_column(log: Log) -> str | None:
    """The first :data:`PROMPT_TEXT` column the log has that is text and plays no role (a
    prompt id that is the text is shown already)."""
    schema, roles = log.source.schema, {c for c in log.roles.columns.values() if c}
    return next((c for c in PROMPT_TEXT if c in schema.names and c not in roles and (
        pa.types.is_string(schema.field(c).type) or pa.types.is_large_string(
            schema.field(c).type))), None)  # fmt: skip


def first_rows(found: Audit) -> np.ndarray:
    """Each group's first row (-1 for a group without rows)."""
    codes = found.rows.group_codes
    assert codes is not None
    first_row = np.full(len(found.stats.size), -1, dtype=np.int64)
    first_row[codes[::-1]] = np.arange(len(codes))[::-1]
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


def group_texts(log: Log, found: Audit, listed: np.ndarray, batch_rows: int) -> list[str] | None:
    """The first :data:`PROMPT_CHARS` characters of each listed group's prompt (its first
    row's) from :func:`prompt_text_column`; None without one."""
    column = prompt_text_column(log)
    if column is None:
        return None
    wanted = first_rows(found)[listed]
    order = np.argsort(wanted, kind="stable")
    texts = [""] * len(listed)
    for at, values in rows_of_column(log, column, wanted[order], batch_rows):
        for i, value in zip(order[at].tolist(), values.to_pylist(), strict=True):
            texts[i] = _short(value or "", PROMPT_CHARS)
    return texts


def components(
    log: Log, found: Audit, names: list[str], bins: int
) -> dict[str, dict[str, list[float]] | None]:
    """A reward histogram per reward component column (TRL's reward functions, GDPO's
    rewards), over the rollouts (their last segment's value)."""
    if not names:
        return {}
    table = log.source.columns(names)
    last = found.rows.last_segment_row()
    out = {}
    for name in names:
        where = f"{found.files}: column '{name}' (named as a reward column)"
        x = _floats(table.column(name), where, "name the reward columns with --reward-columns")
        out[name] = histogram(x[last], bins)
    return out


def group_table(
    found: Audit,
    kinds: np.ndarray,
    tokens: np.ndarray | None,
    listed: np.ndarray,
    extra: dict[str, Any],
) -> dict[str, Any]:
    """The listed groups, one row each: group code, prompt id, size, mean, std, action tokens,
    kind (an index into ``kinds``), and the ``extra`` columns (None where the log has none)."""
    stats = found.stats
    keys = found.rows.group_keys
    assert keys is not None
    shown = [_short(k) for k in keys.take(pa.array(listed)).to_pylist()]
    std = np.where(np.isnan(stats.std[listed]), 0.0, stats.std[listed])
    table = {
        "code": listed.tolist(),
        "prompt": shown,
        "size": stats.size[listed].tolist(),
        "mean": stats.mean[listed].tolist(),
        "std": std.tolist(),
        "action_tokens": tokens[listed].tolist() if tokens is not None else None,
        "kind": kinds[listed].tolist(),
        **extra,
    }
    return {"total": len(kinds), "listed": len(listed), "columns": table}


def listed_extras(
    log: Log,
    found: Audit,
    seen: _Walk,
    listed: np.ndarray,
    in_detail: np.ndarray,
    lengths_: np.ndarray | None,
    batch_rows: int,
) -> dict[str, Any]:
    """The groups table's columns beyond the audit's: the prompt's first words, the step, the
    spread of the rollouts' advantages (max − min), whether the page holds its rollouts."""
    rows = found.rows
    codes, n = rows.rollout_groups(), len(found.stats.size)
    step_of_row = row_steps(log)
    step = None
    if step_of_row is not None:
        per_group = np.full(n, np.nan)
        per_group[codes[::-1]] = step_of_row[rows.last_segment_row()][::-1]  # the first's
        step = [None if np.isnan(x) else float(x) for x in per_group[listed]]
    spread = None
    if (mean := seen.rollout_advantages(lengths_)) is not None:
        width = G.spread(mean, codes, n)[listed]
        spread = np.where(np.isfinite(width), width, 0.0).tolist()
    return {
        "text": group_texts(log, found, listed, batch_rows),
        "step": step,
        "spread": spread,
        "detail": in_detail[listed].tolist(),
    }


LOGGED_HINT = "report a log annotated by advcli, or give --method"


def _floats(values: pa.Array | pa.ChunkedArray, where: str, hint: str) -> np.ndarray:
    """``values`` as float64 (nulls: NaN), or one line saying ``where`` holds no numbers."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    try:
        return np.asarray(values.cast(pa.float64()).to_numpy(zero_copy_only=False))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise DataError(f"{where} holds no numbers. Hint: {hint}") from None


def _short(key: object, chars: int = KEY_CHARS) -> str:
    text = str(key)
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _b64(x: np.ndarray) -> str:
    return base64.b64encode(
        np.ascontiguousarray(x).astype(x.dtype.newbyteorder("<")).tobytes()
    ).decode()


class _Walk:
    """One pass over the log's rows: every action token's advantage into the histogram file
    and each rollout's advantage sum; the tokens and text of the detail rows kept."""

    def __init__(
        self,
        log: Log,
        found: Audit,
        run: Run | None,
        detail_rollout: np.ndarray,
        options: ReportOptions,
        batch_rows: int,
        *,
        hash_prompts: bool = False,
    ):
        self.log, self.found, self.run = log, found, run
        self.roles = log.roles
        rows = found.rows
        self.detail_row = detail_rollout[rows.rollout_codes]
        n_detail = max(1, int(self.detail_row.sum()))
        self.cap = max(MIN_TOKENS_SHOWN, options.token_budget // n_detail)
        self.batch_rows = batch_rows
        names = log.source.schema.names
        self.logged_column: str | None = None
        if run is None:
            wanted = "advantages" if self.roles["input_ids"] is not None else "advantage"
            self.logged_column = wanted if wanted in names else None
        role_columns = {c for c in self.roles.columns.values() if c}
        self.text_columns = [
            f.name
            for f in log.source.schema
            if f.name not in role_columns
            and f.name != self.logged_column
            and (pa.types.is_string(f.type) or pa.types.is_large_string(f.type))
        ]
        share = TEXT_BUDGET // (n_detail * max(1, len(self.text_columns)))
        self.text_chars = min(max(share, TEXT_CHARS[0]), TEXT_CHARS[1])
        self.adv_sum = np.zeros(rows.n_rollouts)
        self.row_advantage: np.ndarray | None = None  # per row, a log without token ids
        self.adv_lo, self.adv_hi = np.inf, -np.inf
        self.adv_file: IO[bytes] | None = None  # the action tokens' advantages, float32
        self.room = f"{4 * (found.report.action_tokens or rows.n_rollouts):,} bytes"
        self.has_advantages = run is not None or self.logged_column is not None
        # per detail row: ids, kinds and advantages shown, its length, the prompt tokens folded
        self.tokens: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray | None, int, int]] = {}
        self.text: dict[int, dict[str, str]] = {}
        self.prompt_hash = (  # per row: the hash of its tokens before its first action
            np.zeros(rows.n_rows, dtype=np.uint64)
            if hash_prompts and self.roles["input_ids"] is not None
            else None
        )

    def walk(self) -> _Walk:
        if self.roles["input_ids"] is None:
            self._walk_rows()
        else:
            for row0, table, tokens, ids, adv in self._batches():
                self._add(row0, table, tokens, ids, adv)
        return self

    def _batches(self) -> Iterator[tuple[int, pa.Table, Any, np.ndarray, np.ndarray | None]]:
        ids_column = self.roles.column("input_ids")
        if self.run is not None:
            for row0, table, tok, columns in self.run.computed():
                ids = flat_list(table.column(ids_column))[0].to_numpy(zero_copy_only=False)
                yield row0, table, tok, ids, columns["advantages"]
            return
        source = self.log.source
        names = token_columns(self.roles, values=False, ids=True) + self.text_columns
        if self.logged_column is not None:
            names.append(self.logged_column)
        for row0, table in prefetch(source.batches(list(dict.fromkeys(names)), self.batch_rows)):
            tok = extract_tokens(table, self.roles, source.sources, row0, values=False)
            ids = flat_list(table.column(ids_column))[0].to_numpy(zero_copy_only=False)
            adv = None
            if self.logged_column is not None:
                adv = self._logged(table, row0, tok.offsets)
            yield row0, table, tok, ids, adv

    def _logged(self, table: pa.Table, row0: int, offsets: np.ndarray) -> np.ndarray:
        """The advantages an annotated log holds, one per token, checked."""
        name = self.logged_column
        assert name is not None
        column = table.column(name)
        if not pa.types.is_list(column.type) and not pa.types.is_large_list(column.type):
            msg = (
                f"{self.log.files}: column '{name}' is not a list of numbers, one per token. "
                f"Hint: {LOGGED_HINT}"
            )
            raise DataError(msg)
        flat, offs = flat_list(column.fill_null([]) if column.null_count else column)
        bad = lengths(offs) != lengths(offsets)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            msg = (
                f"{self.log.sources.at(row0 + row, name)}: {lengths(offs)[row]} advantages but "
                f"{lengths(offsets)[row]} tokens. Hint: {LOGGED_HINT}"
            )
            raise DataError(msg)
        return _floats(flat, f"{self.log.files}: column '{name}'", LOGGED_HINT)

    def _add(
        self, row0: int, table: pa.Table, tok: Any, ids: np.ndarray, adv: np.ndarray | None
    ) -> None:
        offsets, mask = tok.offsets, tok.mask
        n = len(offsets) - 1
        rollouts = self.found.rows.rollout_codes[row0 : row0 + n]
        if adv is not None:
            act = adv[mask]
            if len(act):
                self._keep_advantages(act)
                self.adv_lo = min(self.adv_lo, float(np.nanmin(act)))
                self.adv_hi = max(self.adv_hi, float(np.nanmax(act)))
            summed = np.zeros(len(adv) + 1)
            np.cumsum(np.where(mask, np.nan_to_num(adv), 0.0), out=summed[1:])
            np.add.at(self.adv_sum, rollouts, summed[offsets[1:]] - summed[offsets[:-1]])
        if self.prompt_hash is not None:
            prompt_ends = first_where(offsets, mask)
            self.prompt_hash[row0 : row0 + n] = prefix_hashes(ids, offsets, prompt_ends)
        ranks = self.found.rows.segment_rank[row0 : row0 + n]
        for i in np.flatnonzero(self.detail_row[row0 : row0 + n]):
            start, end = int(offsets[i]), int(offsets[i + 1])
            part = mask[start:end]
            first_action = int(np.argmax(part)) if part.any() else end - start
            kind = np.full(end - start, OBSERVATION, dtype=np.uint8)
            kind[:first_action] = PROMPT
            kind[part] = ACTION
            # the budget goes to the response: a rollout's prompt keeps its last few tokens
            folded = max(0, first_action - PROMPT_TAIL) if ranks[i] == 0 else 0
            begin = start + folded
            shown = min(end, begin + self.cap)
            self.tokens[row0 + int(i)] = (
                ids[begin:shown],
                kind[folded : shown - start],
                None if adv is None else adv[begin:shown].astype(np.float32),
                end - start,
                folded,
            )
            self._keep_text(table, int(i), row0)

    def _keep_advantages(self, x: np.ndarray) -> None:
        with room_in_tmpdir("the advantages for the report", self.room):
            if self.adv_file is None:
                self.adv_file = tempfile.TemporaryFile()  # noqa: SIM115 (closed by histogram())
            self.adv_file.write(x.astype(np.float32).tobytes())

    def _keep_text(self, table: pa.Table, i: int, row0: int) -> None:
        texts = {}
        for name in self.text_columns:
            if name in table.column_names and (value := table.column(name)[i].as_py()):
                texts[name] = _short(value, self.text_chars)
        if texts:
            self.text[row0 + i] = texts

    def _walk_rows(self) -> None:
        """A log without token ids: one advantage per row; the text of the detail rows."""
        rows = self.found.rows
        if self.run is not None:
            self.row_advantage = self.run.plan.columns["advantage"]
        elif self.logged_column is not None:
            name = self.logged_column
            column = self.log.source.columns([name]).column(name)
            where = f"{self.log.files}: column '{name}'"
            self.row_advantage = _floats(column, where, LOGGED_HINT)
        if self.row_advantage is not None:
            adv = self.row_advantage
            last = rows.last_segment_row()
            self.adv_sum = adv[last].astype(np.float64)
            finite = adv[last][~np.isnan(adv[last])]
            if len(finite):
                self._keep_advantages(finite)
                self.adv_lo, self.adv_hi = float(finite.min()), float(finite.max())
        if not self.text_columns or not self.detail_row.any():
            return
        source = self.log.source
        for row0, table in prefetch(source.batches(self.text_columns, self.batch_rows)):
            for i in np.flatnonzero(self.detail_row[row0 : row0 + table.num_rows]):
                self._keep_text(table, int(i), row0)

    def rollout_advantages(self, lengths_: np.ndarray | None) -> np.ndarray | None:
        """Per rollout: its advantages' mean over its action tokens (without token ids, its
        advantage); None where the walk saw no advantages."""
        if not self.has_advantages:
            return None
        if lengths_ is None:
            return self.adv_sum
        with np.errstate(invalid="ignore", divide="ignore"):
            out: np.ndarray = np.where(lengths_ > 0, self.adv_sum / lengths_, np.nan)
        return out

    def histogram(self, bins: int) -> dict[str, list[float]] | None:
        """The advantages' histogram over every action token (rollout, without token ids)."""
        kept = self.adv_file
        if kept is None or not self.adv_lo <= self.adv_hi:  # no finite advantage
            return None
        kept.seek(0)

        def chunks() -> Iterator[np.ndarray]:
            while block := kept.read(1 << 24):
                yield np.frombuffer(block, dtype=np.float32)

        with kept:
            return _histogram_of(chunks(), self.adv_lo, self.adv_hi, bins)

    def details(
        self, found: Audit, codes: np.ndarray, rewards: np.ndarray, lengths_: np.ndarray | None
    ) -> dict[str, list[dict[str, Any]]]:
        """Per detail group (by group code): its rollouts in log order, each with its reward,
        mean advantage over its action tokens, length, and its tokens and text where kept."""
        rows = found.rows
        keys = rows.rollout_keys
        out: dict[str, list[dict[str, Any]]] = {}
        by_rollout: dict[int, list[int]] = {}
        for row in np.flatnonzero(self.detail_row):
            by_rollout.setdefault(int(rows.rollout_codes[row]), []).append(int(row))
        for rollout, its_rows in by_rollout.items():
            its_rows.sort(key=lambda r: int(rows.segment_rank[r]))
            length = int(lengths_[rollout]) if lengths_ is not None else None
            advantage = None
            if self.has_advantages:
                if lengths_ is None:
                    advantage = float(self.adv_sum[rollout])
                elif length:
                    advantage = float(self.adv_sum[rollout] / length)
            entry: dict[str, Any] = {
                "id": str(keys[rollout].as_py()) if keys is not None else str(its_rows[0]),
                "reward": float(rewards[rollout]),
                "advantage": None if advantage is None or np.isnan(advantage) else advantage,
                "length": length,
                "segments": len(its_rows),
                "text": {k: v for r in its_rows for k, v in self.text.get(r, {}).items()},
            }
            per_row = self.run.plan.columns.get("advantage") if self.run is not None else None
            if per_row is not None and rows.segmented:  # each step's (segment's) own; a
                entry["steps"] = per_row[its_rows].tolist()  # per-token method has none
            if self.tokens:
                entry["tokens"] = self._token_view([self.tokens[r] for r in its_rows])
            out.setdefault(str(int(codes[rollout])), []).append(entry)
        return out

    def _token_view(
        self, parts: list[tuple[np.ndarray, np.ndarray, np.ndarray | None, int, int]]
    ) -> dict[str, Any]:
        ids = np.concatenate([p[0] for p in parts]).astype(np.int64)
        kind = np.concatenate([p[1] for p in parts])
        wide = ids.size and (ids.min() < 0 or ids.max() >= 2**32)
        view: dict[str, Any] = {
            "ids": _b64(ids.astype(np.float64 if wide else np.uint32)),
            "ids_type": "f8" if wide else "u4",
            "kind": _b64(kind),
            "shown": int(ids.size),
            "total": int(sum(p[3] for p in parts)),
            "folded": int(parts[0][4]),  # the prompt tokens before those shown
        }
        if parts[0][2] is not None:
            adv = np.concatenate([p[2] for p in parts if p[2] is not None])
            view["adv"] = _b64(adv.astype(np.float32))
        return view
