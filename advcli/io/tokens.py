"""Validate the token columns of a batch of rows and turn them into flat numpy arrays: the
per-token half of :mod:`advcli.io.rollouts` (read a batch at a time, where the per-row columns
are read for the whole log), with its checks of token ids, action masks and spans.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from advcli.core.ragged import lengths, row_of
from advcli.core.steps import turn_counts, turn_ends
from advcli.errors import SchemaError, UsageError, file_list
from advcli.io.arrow import flat_list
from advcli.io.rollouts import FLOAT32_MAX, Checker, first_index, numeric
from advcli.io.schema import SPAN_KINDS, Roles
from advcli.io.sources import Sources
from advcli.lazy_imports import np, pa, pc


@dataclass
class Tokens:
    """The token columns of a batch of rows, validated."""

    offsets: np.ndarray  # int64 token offsets, from 0
    mask: np.ndarray  # bool per token: the policy sampled it
    values: np.ndarray | None  # float32 or float64 per token (NaN allowed off actions)
    token_rewards: np.ndarray | None  # float64 per token
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # float32/64 per token, by role
    # (TOKEN_FLOATS, or policy_logprobs: the first policy stream the log has, see
    # advcli.io.schema.POLICY_LOGPROBS): finite on action tokens, anything elsewhere

    def action_counts(self) -> np.ndarray:
        """Action tokens per row."""
        return np.diff(np.searchsorted(np.flatnonzero(self.mask), self.offsets)).astype(np.int64)


# per-token, read when asked
TOKEN_FLOATS = ("logprobs", "trainer_logprobs", "ref_logprobs", "teacher_logprobs")
MAX_ROW_TOKENS = 1 << 25  # the default bound on one row's tokens
ROW_TOKENS_ENV = "ADVCLI_MAX_ROW_TOKENS"


def max_row_tokens() -> int:
    """The most tokens one row may hold: ``ADVCLI_MAX_ROW_TOKENS``, default 2^25 (33,554,432),
    at most 2^31 - 1 (shards number positions in int32). A length a dump or a caller declares
    (a response length, a collator's padding) would otherwise allocate its memory before a
    token is read."""
    given = os.environ.get(ROW_TOKENS_ENV)
    if given is None:
        return MAX_ROW_TOKENS
    limit = int(given) if given.strip().isdigit() else 0
    if not 1 <= limit < 2**31:
        msg = (
            f"{ROW_TOKENS_ENV}={given!r}: expected a number of tokens from 1 to {2**31 - 1:,}. "
            f"Hint: unset it for the default, {MAX_ROW_TOKENS:,}"
        )
        raise UsageError(msg)
    return limit


def refuse_long_rows(check: Checker, column: str, n_tokens: np.ndarray) -> None:
    """Refuse the longest row where it holds more than :func:`max_row_tokens`."""
    if len(n_tokens) and (longest := int(n_tokens.max())) > max_row_tokens():
        problem = f"{longest:,} tokens, more than the {max_row_tokens():,} a row may hold"
        hint = f"raise {ROW_TOKENS_ENV} if the row is meant to be that long"
        check.fail(first_index(n_tokens == longest), column, problem, hint)


def token_columns(
    roles: Roles, *, values: bool = True, extra: tuple[str, ...] = (), ids: bool = True
) -> list[str]:
    """The list columns :func:`extract_tokens` reads (``values=False``: not the values;
    ``extra``: per-token roles of :data:`TOKEN_FLOATS`; ``ids=False``: not the token ids)."""
    names = [*(["input_ids"] if ids else []), "action_mask", "spans", "token_rewards"]
    names += ["turn_rewards"]
    names += ["values"] if values else []
    return list(dict.fromkeys(c for r in (*names, *extra) if (c := roles[r]) is not None))


def extract_tokens(
    table: pa.Table,
    roles: Roles,
    sources: Sources,
    row0: int = 0,
    *,
    values: bool = True,
    extra: tuple[str, ...] = (),
    ids: bool = True,
) -> Tokens:
    """Validate the token columns of a batch whose first row is global row ``row0``
    (``extra``: per-token roles of :data:`TOKEN_FLOATS` to read too). ``ids=False``: the
    token ids are not read, the action mask's lists give the rows' lengths (a pass before the
    final one, which reads and checks the ids; see :func:`~advcli.io.rollouts.needs_ids`)."""
    check = Checker(table, sources, row0)
    ids_col = roles.column("input_ids" if ids else "action_mask")  # the rows' lengths
    check.no_nulls(ids_col, "token list")
    token_ids, offsets = flat_list(table.column(ids_col))
    n_tokens = lengths(offsets)
    refuse_long_rows(check, ids_col, n_tokens)
    if ids:
        check_ids(check, ids_col, token_ids, offsets)

    def token_list(role: str) -> pa.Array | None:
        col = roles[role]
        if col is None:
            return None
        check.no_nulls(col, f"'{col}' list")
        flat, offs = flat_list(table.column(col))
        bad = lengths(offs) != n_tokens
        if bad.any():
            row = first_index(bad)
            check.fail(
                row,
                col,
                f"{lengths(offs)[row]} entries but '{ids_col}' has {n_tokens[row]} tokens",
                "every per-token column needs one entry per token",
            )
        return flat

    mask = _mask(check, roles, table, offsets, token_list("action_mask"))
    floats: dict[str, np.ndarray] = {}
    for role in extra:
        if (flat_floats := token_list(role)) is not None:
            x = numeric(flat_floats, floats=True)  # widened later, only at the action tokens
            if not (np.abs(x[mask]) <= FLOAT32_MAX).all():  # off actions: anything
                at_actions = np.flatnonzero(mask)
                check.finite(roles.column(role), x[at_actions], offsets, at_actions)
            floats[role] = x
    token_rewards = vals = None
    if (tr := token_list("token_rewards")) is not None:
        token_rewards = numeric(tr)
        check.finite(roles.column("token_rewards"), token_rewards, offsets)
    if (col := roles["turn_rewards"]) is not None:
        if token_rewards is not None:
            msg = (
                f"{file_list(sources.files)}: the log has both token rewards "
                f"('{roles['token_rewards']}') and turn rewards ('{col}'). Hint: give one of them"
            )
            raise SchemaError(msg)
        token_rewards = _turn_rewards(check, col, table, mask, offsets)
    if values and (flat := token_list("values")) is not None:
        vals = numeric(flat, floats=True)  # widened later, only at the action steps
        if not (np.abs(vals) <= FLOAT32_MAX).all():  # any value off actions is allowed
            at_actions = np.flatnonzero(mask)
            check.finite(roles.column("values"), vals[at_actions], offsets, at_actions)
    return Tokens(
        offsets=offsets, mask=mask, values=vals, token_rewards=token_rewards, extra=floats
    )


def _turn_rewards(
    check: Checker, col: str, table: pa.Table, mask: np.ndarray, offsets: np.ndarray
) -> np.ndarray:
    """Per token: a row's turn rewards, one per action span in order, each on its span's last
    token (where ROLL and verl put a turn's reward); a null reward is 0 (a turn not scored),
    a null list a row without turn rewards."""
    column = table.column(col)
    rewards, reward_offsets = flat_list(column)
    turns = turn_counts(mask, offsets)
    given = ~column.is_null().to_numpy(zero_copy_only=False)
    bad = given & (lengths(reward_offsets) != turns)
    if bad.any():
        row = first_index(bad)
        problem = f"{lengths(reward_offsets)[row]} turn rewards but the row has {turns[row]} turns"
        check.fail(row, col, problem, "give one reward per action span (turn), in order")
    r = numeric(rewards, fill=0.0)
    check.finite(col, r, reward_offsets)
    out = np.zeros(len(mask))
    out[turn_ends(mask, offsets) & given[row_of(offsets)]] = r[given[row_of(reward_offsets)]]
    return out


def check_ids(check: Checker, column: str, ids: pa.Array, offsets: np.ndarray) -> None:
    """Token ids are vocabulary indices: none null, none negative, none beyond int64 (what a
    critic takes)."""
    if not len(ids):
        return
    bad = None
    if ids.null_count:
        bad = first_index(ids.is_null().to_numpy(zero_copy_only=False))
        problem = "token id null"
    elif pa.types.is_signed_integer(ids.type) and pc.min(ids).as_py() < 0:
        bad = first_index(np.asarray(ids.to_numpy(zero_copy_only=False)) < 0)
        problem = f"token id {ids[bad].as_py()} is negative"
    elif pa.types.is_uint64(ids.type) and pc.max(ids).as_py() > np.iinfo(np.int64).max:
        bad = first_index(np.asarray(ids.to_numpy(zero_copy_only=False)) > np.iinfo(np.int64).max)
        problem = f"token id {ids[bad].as_py()} is beyond int64"
    if bad is not None:
        row = int(np.searchsorted(offsets, bad, side="right")) - 1
        at = f"{problem} at token {bad - int(offsets[row])}"
        check.fail(row, column, at, "token ids are vocabulary indices, 0 or more")


def _mask(
    check: Checker, roles: Roles, table: pa.Table, offsets: np.ndarray, mask_values: pa.Array
) -> np.ndarray:
    n = int(offsets[-1])
    if mask_values is not None:
        return mask_flags(check, roles.column("action_mask"), mask_values, offsets)
    if roles["spans"] is None:
        return np.ones(n, dtype=bool)
    return _spans_mask(check, roles["spans"], table, offsets)


def mask_flags(check: Checker, column: str, values: pa.Array, offsets: np.ndarray) -> np.ndarray:
    """A mask column's flat values as booleans: each 0 or 1 (or a boolean), none null; the
    first other value is refused at its row and token, whatever the integer type holds."""
    if values.null_count:
        i = first_index(values.is_null().to_numpy(zero_copy_only=False))
        row = int(row_of(offsets)[i])
        check.fail(row, column, f"mask value null at token {i - offsets[row]}", "use 0 or 1")
    if pa.types.is_boolean(values.type):
        flags: np.ndarray = values.to_numpy(zero_copy_only=False).astype(bool)
        return flags
    m: np.ndarray = values.to_numpy(zero_copy_only=False)
    bad = (m != 0) & (m != 1)
    if bad.any():
        i = first_index(bad)
        row = int(row_of(offsets)[i])
        check.fail(
            row,
            column,
            f"mask value {m[i]} at token {i - offsets[row]}; a mask holds only 0 and 1",
            "1 marks a token the policy sampled, 0 any other token",
        )
    return m.astype(bool)


def _spans_mask(check: Checker, col: str, table: pa.Table, offsets: np.ndarray) -> np.ndarray:
    """The action mask from spans [start, end) of kind prompt | action | observation."""
    check.no_nulls(col, "spans list")
    spans, span_offsets = flat_list(table.column(col))
    rows = row_of(span_offsets)
    start = numeric(spans.field("start"), fill=-1).astype(np.int64)
    end = numeric(spans.field("end"), fill=-1).astype(np.int64)
    kind = spans.field("kind")
    n_tokens = lengths(offsets)[rows]
    bad = (start < 0) | (end < start) | (end > n_tokens)
    if bad.any():
        i = first_index(bad)
        check.fail(
            int(rows[i]),
            col,
            f"span [{start[i]}, {end[i]}) is out of range for {n_tokens[i]} tokens",
            "spans are [start, end) token positions with end exclusive",
        )
    known = pc.is_in(kind, value_set=pa.array(SPAN_KINDS)).to_numpy(zero_copy_only=False)
    if not known.all():
        i = first_index(~known)
        check.fail(
            int(rows[i]),
            col,
            f"span kind {kind[i].as_py()!r}",
            f"a span's kind is one of {', '.join(SPAN_KINDS)}",
        )
    order = np.lexsort((start, rows))
    s, e, r = start[order], end[order], rows[order]
    overlap = (r[1:] == r[:-1]) & (s[1:] < e[:-1])
    if overlap.any():
        i = first_index(overlap)
        check.fail(
            int(r[i]),
            col,
            f"spans [{s[i]}, {e[i]}) and [{s[i + 1]}, {e[i + 1]}) overlap",
            "each token belongs to at most one span",
        )
    is_action = (kind.to_numpy(zero_copy_only=False) == "action") & (end > start)
    base = offsets[rows[is_action]]
    n = int(offsets[-1])
    edges = np.bincount(base + start[is_action], minlength=n + 1)
    edges -= np.bincount(base + end[is_action], minlength=n + 1)
    return np.cumsum(edges[:n]) > 0
