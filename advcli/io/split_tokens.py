"""Logs whose token ids come split: ``prompt_ids`` and ``response_ids`` (a common layout of
trainers' dumps and agent loops), with an optional ``response_mask`` over the response (1: an
action token, 0: an observation, a tool's output).

Read as advcli's schema: the sequence is their concatenation (``input_ids``), the action mask
0 over the prompt and the response mask (all 1 without one) over the response
(``action_mask``). Both are columns of the log as :class:`SplitTokens` presents it, never
written: an annotated output keeps the user's layout, its per-token columns over the response
tokens only (:func:`response_only`), as ``response_ids`` holds them. A split log may give
``spans`` instead of a response mask: they index the whole sequence, prompt then response (an
action span over the prompt is refused: spans counted from the response's first token would
otherwise be read a prompt's length too early).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from advcli.core.ragged import lengths, offsets_from_lengths, positions, ranges, row_of
from advcli.errors import DataError, SchemaError, file_list
from advcli.io.arrow import flat_list, is_list, list_array
from advcli.io.rollouts import Checker
from advcli.io.schema import ROLES
from advcli.io.sources import DerivedColumns, LogSource
from advcli.io.tokens import check_ids, mask_flags, refuse_long_rows
from advcli.lazy_imports import np, pa, pc

PROMPT, RESPONSE, RESPONSE_MASK = "prompt_ids", "response_ids", "response_mask"
VIRTUAL = ("input_ids", "action_mask")
OUTPUTS = ("advantages", "returns", "is_weights", "is_mask")  # advcli's per-token outputs
NEUTRAL = {"is_weights": 1}  # an output's value off the actions, where it is not 0


def is_split(schema: pa.Schema, mapping: dict[str, str]) -> bool:
    """Whether a log is in the split layout: ``prompt_ids`` and ``response_ids`` list columns,
    and no sequence or mask of advcli's schema (nor ``--col`` naming them)."""
    names = set(schema.names)
    if {PROMPT, RESPONSE} - names or names & set(VIRTUAL) or set(mapping) & set(VIRTUAL):
        return False
    return all(is_list(schema.field(n).type) for n in (PROMPT, RESPONSE))


def spans_column(schema: pa.Schema, mapping: dict[str, str]) -> str | None:
    """The column of a split log's spans (``spans``, or the one ``--col spans=`` names)."""
    name = mapping.get("spans", "spans")
    return name if name in schema.names else None


class SplitTokens(DerivedColumns):
    """A split-layout log with the sequence and the action mask as columns of their own."""

    def __init__(self, base: LogSource, per_token: tuple[str, ...] = (), spans: str | None = None):
        self.base = base
        self.per_token = per_token  # read over the sequence
        self.spans = spans  # the spans column: it gives the action mask
        self.sources = base.sources
        if spans is not None and RESPONSE_MASK in base.schema.names:
            files = file_list(base.sources.files)
            msg = (
                f"{files}: both '{RESPONSE_MASK}' and '{spans}' say which response tokens are "
                "actions. Hint: keep one of the two columns"
            )
            raise SchemaError(msg)
        for name, kinds in ((PROMPT, "integer"), (RESPONSE, "integer"), (RESPONSE_MASK, "0/1")):
            if name in base.schema.names and not _holds_ints(base.schema.field(name).type):
                files = file_list(base.sources.files)
                shown = base.schema.field(name).type
                raise SchemaError(
                    f"{files}: column '{name}' is {shown}, expected a list of {kinds}"
                )
        prompt, response = (base.schema.field(n).type for n in (PROMPT, RESPONSE))
        self.ids_type = joined_ids_type(prompt.value_type, response.value_type)
        ids = (pa.large_list if pa.types.is_large_list(response) else pa.list_)(self.ids_type)
        mask = [] if spans is not None else [pa.field("action_mask", pa.list_(pa.int8()))]
        self.schema = pa.schema([*base.schema, pa.field("input_ids", ids), *mask])

    def _base_names(self, names: list[str] | None) -> list[str] | None:
        if names is None:
            return None
        wanted = [n for n in names if n not in VIRTUAL]
        if set(names) & set(self.per_token):
            wanted += [PROMPT, RESPONSE]
        if "input_ids" in names:
            wanted += [PROMPT, RESPONSE]
        if "action_mask" in names:
            masked = RESPONSE_MASK in self.base.schema.names
            wanted += [PROMPT, RESPONSE, *([RESPONSE_MASK] if masked else [])]
        if self.spans in names:
            wanted.append(PROMPT)  # to refuse an action span over it
        return list(dict.fromkeys(wanted))

    def _derive(self, table: pa.Table, names: list[str] | None, row0: int) -> pa.Table:
        over = [n for n in self.per_token if names is None or n in names]
        if self.spans is not None and (names is None or self.spans in names):
            self._refuse_prompt_actions(table, row0)
        if names is not None and not set(names) & set(VIRTUAL) and not over:
            return table.select(names)
        for name in (PROMPT, RESPONSE, RESPONSE_MASK):
            if name in table.column_names and table.column(name).null_count:
                row = row0 + int(np.flatnonzero(table.column(name).is_null().to_numpy(False))[0])
                raise DataError(f"{self.sources.at(row, name)}: null, expected a list of tokens")
        prompt, p_offsets = flat_list(table.column(PROMPT))
        response, r_offsets = flat_list(table.column(RESPONSE))
        p_len, r_len = lengths(p_offsets), lengths(r_offsets)
        offsets = np.zeros(len(p_len) + 1, dtype=np.int64)
        np.cumsum(p_len + r_len, out=offsets[1:])
        in_prompt = positions(offsets) < np.repeat(p_len, p_len + r_len)
        for name in over:
            if not _holds_numbers(table.column(name).type):
                continue  # not numbers: as given (where a role reads it, refused there)
            column = self._over_sequence(table.column(name), name, p_len, r_len, row0)
            table = table.set_column(table.schema.get_field_index(name), name, column)
        if names is not None and not set(names) & set(VIRTUAL):
            return table.select(names)
        check = Checker(table, self.sources, row0)
        refuse_long_rows(check, RESPONSE, p_len + r_len)
        check_ids(check, PROMPT, prompt, p_offsets)  # named in the user's columns
        check_ids(check, RESPONSE, response, r_offsets)
        ids = np.empty(int(offsets[-1]), dtype=self.ids_type.to_pandas_dtype())
        ids[in_prompt] = prompt.cast(self.ids_type).to_numpy(zero_copy_only=False)
        ids[~in_prompt] = response.cast(self.ids_type).to_numpy(zero_copy_only=False)
        joined = {"input_ids": list_array(ids, offsets)}
        if self.spans is None:
            mask = self._mask(check, table, in_prompt, r_len)
            joined["action_mask"] = list_array(mask, offsets)
        for name, column in joined.items():
            if names is None or name in names:
                table = table.append_column(name, column)
        return table if names is None else table.select(names)

    def _mask(
        self, check: Checker, table: pa.Table, in_prompt: np.ndarray, r_len: np.ndarray
    ) -> np.ndarray:
        """The action mask over the sequence: 0 over the prompt, the response mask (else 1)
        over the response."""
        mask = np.zeros(len(in_prompt), dtype=np.int8)
        mask[~in_prompt] = 1
        if RESPONSE_MASK in table.column_names:
            given, m_offsets = flat_list(table.column(RESPONSE_MASK))
            if len(misfit := np.flatnonzero(lengths(m_offsets) != r_len)):
                at = self.sources.at(check.row0 + int(misfit[0]), RESPONSE_MASK)
                raise DataError(f"{at}: {int(lengths(m_offsets)[misfit[0]])} values for "
                                f"{int(r_len[misfit[0]])} response tokens")  # fmt: skip
            mask[~in_prompt] = mask_flags(check, RESPONSE_MASK, given, m_offsets)
        return mask

    def _refuse_prompt_actions(self, table: pa.Table, row0: int) -> None:
        """An action span that starts inside the prompt, refused at its row."""
        assert self.spans is not None
        column = table.column(self.spans)
        if column.null_count:  # refused where the mask is read, naming its row
            return
        spans, span_offsets = flat_list(column)
        if not pa.types.is_struct(spans.type) or not pa.types.is_integer(spans.field("start").type):
            return  # refused where the mask is read
        p_len = lengths(flat_list(table.column(PROMPT))[1])
        rows = row_of(span_offsets)
        start = pc.fill_null(spans.field("start"), -1).to_numpy(zero_copy_only=False)
        kind = spans.field("kind").to_numpy(zero_copy_only=False)
        inside = (kind == "action") & (start >= 0) & (start < p_len[rows])
        if inside.any():
            i = int(np.flatnonzero(inside)[0])
            row = int(rows[i])
            msg = (
                f"{self.sources.at(row0 + row, self.spans)}: the action span starting at "
                f"{int(start[i])} lies in the prompt ({int(p_len[row])} tokens of "
                f"'{PROMPT}'): the spans of a split log index the whole sequence, "
                f"'{PROMPT}' then '{RESPONSE}'. Hint: count the spans from the prompt's first "
                "token"
            )
            raise DataError(msg)

    def _over_sequence(
        self, column: pa.ChunkedArray, name: str, p_len: np.ndarray, r_len: np.ndarray, row0: int
    ) -> pa.Array:
        """A per-token column over the sequence: a row with a value per response token gets 0
        over the prompt, one with a value per token stays as it is, a null row null."""
        values, v_offsets = flat_list(column)
        count = lengths(v_offsets)
        null = column.is_null().to_numpy(zero_copy_only=False)
        if len(misfit := np.flatnonzero(~null & (count != r_len) & (count != p_len + r_len))):
            row = int(misfit[0])
            raise DataError(
                f"{self.sources.at(row0 + row, name)}: {int(count[row])} values for "
                f"{int(r_len[row])} response tokens ({int(p_len[row] + r_len[row])} with the "
                "prompt). Hint: one value per response token"
            )
        short = count != p_len + r_len  # over the response only
        out = offsets_from_lengths(np.where(null, 0, p_len + r_len))
        of = row_of(out)
        prompt = short[of] & (positions(out) < p_len[of])
        # each output value's source: a given value (a null inside a list stays null, as
        # written back), or the 0 put after them for a prompt token
        source = np.full(int(out[-1]), len(values), dtype=np.int64)
        source[~prompt] = ranges(v_offsets[:-1][~null], count[~null])
        with_zero = pa.concat_arrays([values, pa.array([0], values.type)])
        lists = pa.LargeListArray if out[-1] >= 2**31 else pa.ListArray
        return lists.from_arrays(
            pa.array(out), with_zero.take(pa.array(source)), mask=pa.array(null)
        ).cast(column.type)

    def in_users_layout(self, table: pa.Table) -> pa.Table:
        """An annotated batch of this log as the user laid it out (:func:`response_only`): the
        columns advcli wrote, those it replaced (an annotated log annotated again) and those it
        read over the sequence."""
        added = set(table.column_names) - set(self.base.schema.names)
        return response_only(table, added | set(OUTPUTS) | set(self.per_token))


def stored_roles(source: LogSource, roles: dict[str, str | None]) -> dict[str, str]:
    """The roles played by columns the log stores (a split log's joined sequence and mask are
    not: an annotated copy records the layout that reads them again)."""
    virtual = VIRTUAL if isinstance(source, SplitTokens) else ()
    return {role: column for role, column in roles.items() if column and column not in virtual}


def joined(source: LogSource, mapping: dict[str, str]) -> LogSource:
    """``source`` as :class:`SplitTokens` where it is in the split layout; else itself."""
    if not is_split(source.schema, mapping):
        return source
    spans = spans_column(source.schema, mapping)
    return SplitTokens(source, per_token_columns(source.schema, mapping), spans)


def per_token_columns(schema: pa.Schema, mapping: dict[str, str]) -> tuple[str, ...]:
    """The list columns of a split log with a value per response token: advcli's outputs and
    the columns of the per-token roles (values, log-probs, token rewards)."""
    names = set(OUTPUTS)
    for role, (kind, aliases) in ROLES.items():
        if kind == "nums":
            names |= {mapping[role]} if role in mapping else {role, *aliases}
    return tuple(n for n in schema.names if n in names and is_list(schema.field(n).type))


def joined_ids_type(prompt: pa.DataType, response: pa.DataType) -> pa.DataType:
    """The type of the joined ids: the two columns' where they agree, else int64, which holds
    every id of either that advcli reads (ids beyond int64 are refused): no id is narrowed."""
    given = {t for t in (prompt, response) if not pa.types.is_null(t)}
    return given.pop() if len(given) == 1 else pa.int64()


def _holds_numbers(t: pa.DataType) -> bool:
    """A list of numbers (or of nulls)."""
    v = t.value_type
    return bool(pa.types.is_integer(v) or pa.types.is_floating(v) or pa.types.is_null(v))


def _holds_ints(t: pa.DataType) -> bool:
    """A list of integers or booleans (of nulls too: a null is refused at its row)."""
    if not is_list(t):
        return False
    v = t.value_type
    return bool(pa.types.is_integer(v) or pa.types.is_boolean(v) or pa.types.is_null(v))


def in_users_layout(
    source: SplitTokens, batches: Iterable[tuple[pa.Table, int]]
) -> Iterator[tuple[pa.Table, int]]:
    """Annotated ``(table, tokens)`` batches of a split-layout log as :func:`response_only`
    writes them, with the response tokens they hold."""
    for table, _ in batches:
        out = source.in_users_layout(table)
        yield out, int(lengths(flat_list(out.column(RESPONSE))[1]).sum())


def response_only(table: pa.Table, over_sequence: set[str]) -> pa.Table:
    """An annotated batch of a split-layout log in the user's layout: without the sequence
    and mask advcli joined, each per-token column ``over_sequence`` names over the response
    tokens only on the rows where it is 0 over the prompt (1 for ``is_weights``: advcli's
    outputs always are, a prompt token is no action; a row read over the response was given
    so); a row of a column
    the user gave over the whole sequence, with values over the prompt, stays whole."""
    prompt_len = lengths(flat_list(table.column(PROMPT))[1])
    sequence_len = prompt_len + lengths(flat_list(table.column(RESPONSE))[1])
    out = table.drop_columns([n for n in VIRTUAL if n in table.column_names])
    for name in over_sequence & set(out.column_names):
        column = out.column(name)
        if not is_list(column.type):
            continue  # a per-row column
        values, offsets = flat_list(column)
        count = lengths(offsets)
        of = row_of(offsets)
        over_prompt = positions(offsets) < prompt_len[of]
        if not _holds_numbers(column.type):
            continue  # not numbers: as given
        neutral = NEUTRAL.get(name, 0)  # what advcli writes on a token that is no action
        nonzero = pc.fill_null(pc.not_equal(values, neutral), True).to_numpy(zero_copy_only=False)
        given = np.bincount(of[over_prompt & nonzero], minlength=len(count)) > 0
        cut = (count == sequence_len) & ~given & ~column.is_null().to_numpy(zero_copy_only=False)
        keep = ~(over_prompt & cut[of])
        out_offsets = offsets_from_lengths(count - np.where(cut, prompt_len, 0))
        sliced = list_array(values.filter(pa.array(keep)), out_offsets)
        if column.null_count:
            sliced = pc.if_else(column.is_null(), pa.nulls(len(sliced), sliced.type), sliced)
        out = out.set_column(out.schema.get_field_index(name), name, sliced.cast(column.type))
    return out
