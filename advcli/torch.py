"""A ``collate_fn`` that pads shard rows into a batch of tensors the way the layout's trainer
pads its own (the ``advcli[torch]`` extra; torch is imported when a batch is made).

    import advcli.torch
    from datasets import load_dataset
    from torch.utils.data import DataLoader

    rows = load_dataset("parquet", data_dir="shards/", split="train")
    loader = DataLoader(rows, batch_size=8, collate_fn=advcli.torch.collate(layout="verl"))

Per layout (``advcli shard --layout``), a batch of B rows holds:

- ``advcli``: ``input_ids`` (B, T), right-padded with ``pad_token_id``; ``attention_mask``,
  ``loss_mask``, ``position_ids`` (from the stored ones for packed rows), ``advantages`` and
  ``returns`` (B, T), 0 on padding; with ``--correction``, ``is_weights`` and ``is_mask``
  (B, T), 0 on padding.
- ``verl`` (as verl's agent loop pads, ``verl/experimental/agent_loop/agent_loop.py``
  ``_agent_loop_postprocess``): ``prompts`` (B, P) left-padded, ``responses`` (B, R)
  right-padded, ``input_ids`` their concatenation, ``attention_mask`` (B, P + R),
  ``position_ids`` = ``clip(cumsum(attention_mask) - 1, 0)`` (verl's
  ``compute_position_id_with_mask``), and ``response_mask``, ``advantages``, ``returns``,
  ``old_log_probs`` (the trainer's log-probs, else the sampler's) and ``rollout_log_probs``
  (the sampler's) (B, R); with ``--correction``, ``rollout_is_weights`` (B, R), 0 on padding
  (verl's weights are multiplied by the response mask).
- ``trl`` (as ``GRPOTrainer._generate_and_score_completions`` pads): ``prompt_ids`` and
  ``prompt_mask`` (B, P) left-padded, ``completion_ids``, ``completion_mask`` (B, C) and
  ``tool_mask`` (B, C, padded with 1, as TRL does) right-padded, ``advantages`` (B,),
  ``old_per_token_logps`` (the trainer's log-probs, else the sampler's) and
  ``sampling_per_token_logps`` (the sampler's) (B, C); with ``--correction``,
  ``importance_sampling_ratio`` as TRL's loss multiplies it in: (B, C) for a token mode,
  padded with 1 (TRL's ratio of a padded position is exp(0)), (B, 1) for a sequence mode.

P, R (C) and T are the batch's longest unless ``prompt_length`` and ``response_length`` fix them
(verl pads to its ``rollout.prompt_length`` and ``rollout.response_length``). Token ids and masks
are int64, values float32. Any other column with a value per response token (per token, in the
advcli layout) is padded with 0 alongside; other numbers become a (B,) tensor, anything else a
list.

Every row is checked before a tensor is made; a problem raises
:class:`~advcli.errors.UsageError` naming the row of the batch and the column: a column a row
lacks, or holds None; token ids that are not integers from 0 within int64; a mask value other
than 0 or 1; a layout column without one value per token (``advantages`` one value short) or,
in the trl layout, without one number per row; text where numbers are due; a number float32
(int64, for a column of integers) cannot hold; ``advantages`` or ``returns`` not finite (NaN,
infinite, a null). A null among other numbers (a shard's log-probs off action tokens) is NaN.
``prompt_length``, ``response_length`` and the batch's longest row are at most
``ADVCLI_MAX_ROW_TOKENS`` tokens (:func:`~advcli.io.tokens.max_row_tokens`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from advcli.core.ragged import offsets_from_lengths, row_of
from advcli.core.ragged import positions as positions_in_row
from advcli.errors import UsageError
from advcli.io.rollouts import FLOAT32_MAX
from advcli.io.tokens import ROW_TOKENS_ENV, max_row_tokens
from advcli.lazy_imports import np

COLLATE_LAYOUTS = ("advcli", "verl", "trl")  # the shard layouts `collate` pads as their trainer
Rows = Sequence[Mapping[str, Any]]
INT64_MAX = 2**63 - 1
IDS, MASK, FLOATS = "token ids", "mask values (0 or 1)", "numbers"  # what a column holds
INTEGERS, FINITE = "integers", "finite numbers"  # advantages and returns: finite
# The columns each layout has with a value per token of its (right-padded) sequence column,
# and what they hold; the trl layout's advantages: one number per row.
PER_TOKEN = {
    "advcli": {"loss_mask": MASK, "advantages": FINITE, "returns": FINITE,
               "loss_weight": FLOATS, "is_weights": FLOATS, "is_mask": MASK},
    "verl": {"response_mask": MASK, "advantages": FINITE, "returns": FINITE,
             "old_log_probs": FLOATS, "rollout_log_probs": FLOATS, "rollout_is_weights": FLOATS},
    "trl": {"completion_mask": MASK, "tool_mask": MASK, "old_per_token_logps": FLOATS,
            "sampling_per_token_logps": FLOATS},
}  # fmt: skip
PER_ROW = {"trl": {"advantages": FINITE}}
IS_RATIO = "importance_sampling_ratio"  # the trl layout's correction weights: per token or row


def collate(
    layout: str = "advcli",
    *,
    pad_token_id: int = 0,
    prompt_length: int | None = None,
    response_length: int | None = None,
) -> Callable[[Rows], dict[str, Any]]:
    """A ``collate_fn`` for shard rows of ``layout`` (see the module's docstring)."""
    if layout not in COLLATE_LAYOUTS:
        msg = (
            f"layout {layout!r}: expected one of {', '.join(COLLATE_LAYOUTS)}. Hint: layout='verl'"
        )
        raise UsageError(msg)
    if layout == "advcli" and prompt_length is not None:
        msg = "prompt_length: the advcli layout has no prompt of its own. Hint: drop it"
        raise UsageError(msg)
    if not _is_int(pad_token_id) or not -INT64_MAX - 1 <= pad_token_id <= INT64_MAX:
        msg = f"pad_token_id={pad_token_id!r}: expected an integer within int64. Hint: the "
        raise UsageError(msg + "tokenizer's pad id")
    for option, length in (("prompt_length", prompt_length), ("response_length", response_length)):
        if length is not None and (not _is_int(length) or length < 0):
            msg = f"{option}={length!r}: expected a number of tokens, 0 or more. Hint: or None"
            raise UsageError(msg)
        if length is not None and length > max_row_tokens():
            msg = (
                f"{option}={length:,}: more than the {max_row_tokens():,} tokens a row may hold "
                f"(every row of a batch is padded to it). Hint: a smaller {option}, or raise "
                f"{ROW_TOKENS_ENV}"
            )
            raise UsageError(msg)
    return Collate(layout, pad_token_id, prompt_length, response_length)


@dataclass(frozen=True)
class Collate:
    """Picklable (a ``DataLoader`` with workers sends it to them)."""

    layout: str
    pad_token_id: int
    prompt_length: int | None
    response_length: int | None

    def __call__(self, rows: Rows) -> dict[str, Any]:
        if not rows:
            raise UsageError("collate: an empty batch. Hint: a DataLoader gives at least one row")
        batch = {"advcli": self._advcli, "verl": self._verl, "trl": self._trl}[self.layout](rows)
        import torch

        return {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v
                for k, v in batch.items()}  # fmt: skip

    def _advcli(self, rows: Rows) -> dict[str, np.ndarray | list[Any]]:
        ids = Padded.of(rows, "input_ids", self.response_length, "response_length")
        mask = ids.mask()
        out: dict[str, np.ndarray | list[Any]] = {
            "input_ids": ids.pad(self.pad_token_id, np.int64),
            "attention_mask": mask,
        }
        if "position_ids" in rows[0]:  # packed rows: positions restart at each sample
            out["position_ids"] = ids.like(rows, "position_ids", IDS).pad(0, np.int64)
        else:
            out["position_ids"] = positions(mask)
        return self._rest(rows, out, ids)

    def _verl(self, rows: Rows) -> dict[str, np.ndarray | list[Any]]:
        prompts = Padded.of(rows, "prompts", self.prompt_length, "prompt_length", left=True)
        responses = Padded.of(rows, "responses", self.response_length, "response_length")
        ids = [prompts.pad(self.pad_token_id, np.int64), responses.pad(self.pad_token_id, np.int64)]
        mask = np.concatenate([prompts.mask(), responses.mask()], axis=1)
        out: dict[str, np.ndarray | list[Any]] = {
            "prompts": ids[0],
            "responses": ids[1],
            "input_ids": np.concatenate(ids, axis=1),
            "attention_mask": mask,
            "position_ids": positions(mask),
        }
        return self._rest(rows, out, responses)

    def _trl(self, rows: Rows) -> dict[str, np.ndarray | list[Any]]:
        prompts = Padded.of(rows, "prompt_ids", self.prompt_length, "prompt_length", left=True)
        completions = Padded.of(rows, "completion_ids", self.response_length, "response_length")
        out: dict[str, np.ndarray | list[Any]] = {
            "prompt_ids": prompts.pad(self.pad_token_id, np.int64),
            "prompt_mask": prompts.mask(),
            "completion_ids": completions.pad(self.pad_token_id, np.int64),
            "tool_mask": completions.like(rows, "tool_mask", MASK).pad(1, np.int64),
        }
        if IS_RATIO in rows[0]:
            ratio = _column(rows, IS_RATIO)
            if all(_is_number(v) for v in ratio):  # a sequence mode: (B, 1)
                out[IS_RATIO] = _numbers(ratio, IS_RATIO, FLOATS)[:, None]
            else:
                out[IS_RATIO] = completions.like(rows, IS_RATIO, FLOATS).pad(1, np.float32)
        return self._rest(rows, out, completions)

    def _rest(
        self, rows: Rows, out: dict[str, np.ndarray | list[Any]], tokens: Padded
    ) -> dict[str, np.ndarray | list[Any]]:
        """The columns not made yet: the layout's per-token ones, and any other list of numbers
        with a value per token of ``tokens``, padded with 0 alongside (masks as int64, other
        numbers float32); the layout's per-row numbers and any other numbers as a (B,) array;
        anything else as a list."""
        skip = {*out, "attention_mask", "position_ids"}
        per_token, per_row = PER_TOKEN[self.layout], PER_ROW.get(self.layout, {})
        for name in rows[0]:
            if name in skip:
                continue
            values = _column(rows, name)
            if name in per_token:
                kind = per_token[name]
                out[name] = tokens.like(rows, name, kind).pad(0, DTYPES[kind])
            elif name in per_row:
                out[name] = _numbers(values, name, per_row[name])
            elif tokens.fits(values):
                out[name] = tokens.like(rows, name, FLOATS).pad(0, np.float32)
            elif all(_is_number(v) for v in values):
                out[name] = _numbers(values, name)
            else:
                out[name] = values
        return out


DTYPES: dict[str, Any] = {IDS: np.int64, MASK: np.int64, INTEGERS: np.int64,
                          FLOATS: np.float32, FINITE: np.float32}  # fmt: skip
KINDS = {IDS: "iu", MASK: "iub", INTEGERS: "iu", FLOATS: "iubf", FINITE: "iubf"}  # numpy's kinds
WHY = {  # what a tensor of each kind holds
    IDS: "token ids are integers from 0 within int64",
    MASK: "a mask holds only 0 and 1",
    INTEGERS: "beyond int64",
    FLOATS: "beyond float32's range",
    FINITE: "beyond float32's range",
}


def _refused(row: int, name: str, problem: str) -> UsageError:
    return UsageError(f"collate: row {row} of the batch, column {name!r}: {problem}. "
                      "Hint: rows as advcli shard wrote them")  # fmt: skip


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _column(rows: Rows, name: str) -> list[Any]:
    """Column ``name`` of every row; refused at a row without it."""
    for i, row in enumerate(rows):
        if name not in row:
            raise _refused(i, name, "missing, where row 0 has it")
    return [row[name] for row in rows]


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | np.number) and not isinstance(value, bool)


def _read(value: Any) -> np.ndarray | None:
    """``value`` as numpy reads it where it is a number or a flat list of numbers (a null among
    them too; an integer beyond 64 bits as a Python object), else None: text is never read as
    a number, nor a ragged list, nor anything numpy cannot read."""
    try:
        array = np.asarray(value)
    except (TypeError, ValueError, OverflowError):  # a ragged list, or not numbers
        return None
    if array.ndim > 1 or array.dtype.kind not in "iubfO":
        return None
    if array.dtype.kind == "O":
        allowed = (int, float, np.number, type(None)) if array.ndim else (int, float, np.number)
        if not all(issubclass(t, allowed) for t in set(map(type, array.reshape(-1)))):
            return None
    return array


def _as_array(row: int, name: str, value: Any, kind: str, *, per_row: bool = False) -> np.ndarray:
    """Row ``row``'s ``name``, a flat list of ``kind`` (``per_row``: one of them), as the array
    its tensor is made of: every value of a row comes through here. Refused naming the row and
    the column where it is not one, or holds a value that tensor cannot hold as it is. Numbers:
    a null is NaN, no value, as a shard holds the log-probs off action tokens."""
    array = _read(value)
    expected = "expected one number per row" if per_row else f"expected a list of {kind}"
    floats = DTYPES[kind] is np.float32
    allowed = KINDS[kind].replace("b", "") if per_row else KINDS[kind]  # a row's number: no bool

    def unheld(t: int, bad: Any, why: str) -> UsageError:
        where = _shown(value) if per_row else f"value {_shown(bad)} at token {t}"
        return _refused(row, name, f"{where}: {why}")

    if array is None or array.ndim != (0 if per_row else 1):
        raise _refused(row, name, f"{_shown(value)}, {expected}")
    if array.dtype.kind == "O":  # integers beyond 64 bits, or a null among numbers
        values = array.reshape(-1).tolist()
        if not floats and None in values:
            raise _refused(row, name, f"{_shown(value)}, {expected}")
        try:
            array = array.astype(np.float64 if floats else np.int64)
        except OverflowError:  # an integer beyond int64, or beyond float64 and so float32
            limit = sys.float_info.max if floats else INT64_MAX
            t = next(t for t, v in enumerate(values) if v is not None and abs(v) > limit)
            raise unheld(t, values[t], WHY[kind]) from None
    elif array.size and array.dtype.kind not in allowed:
        raise _refused(row, name, f"{_shown(value)}, {expected}")
    flat = array.reshape(-1)
    wrong = _wrong(flat, kind)
    if wrong.any():
        t = int(np.flatnonzero(wrong)[0])
        bad = flat[t].item()
        raise unheld(t, bad, WHY[kind] if np.isfinite(bad) else "not a finite number")
    return array.astype(DTYPES[kind])


def _wrong(values: np.ndarray, kind: str) -> np.ndarray:
    """Which of ``values`` a tensor of ``kind`` cannot hold as they are (``WHY``)."""
    if kind == IDS:
        return (values < 0) | (values > INT64_MAX)
    if kind == MASK:
        return (values != 0) & (values != 1)
    if kind == INTEGERS:
        return (values < -INT64_MAX - 1) | (values > INT64_MAX)
    beyond = np.isfinite(values) & (np.abs(values) > FLOAT32_MAX)
    return beyond | ~np.isfinite(values) if kind == FINITE else beyond


def _arrays(rows: Rows, name: str, kind: str) -> list[np.ndarray]:
    """Column ``name`` of every row as a flat array of ``kind``, each checked (row by row, its
    tokens at once)."""
    return [_as_array(i, name, value, kind) for i, value in enumerate(_column(rows, name))]


def _numbers(values: list[Any], name: str, kind: str | None = None) -> np.ndarray:
    """One number per row as a (B,) array of ``kind`` (None: float32 where any is a float,
    else int64), each checked."""
    if kind is None:
        kind = FLOATS if any(isinstance(v, float | np.floating) for v in values) else INTEGERS
    return np.asarray([_as_array(i, name, v, kind, per_row=True) for i, v in enumerate(values)],
                      dtype=DTYPES[kind])  # fmt: skip


def positions(attention_mask: np.ndarray) -> np.ndarray:
    """verl's ``compute_position_id_with_mask``: ``clip(cumsum(mask) - 1, 0)`` along a row."""
    out: np.ndarray = np.clip(np.cumsum(attention_mask, axis=1) - 1, 0, None).astype(np.int64)
    return out


class Padded:
    """One list column of a batch, padded to ``length`` on the left or the right."""

    def __init__(self, name: str, values: list[np.ndarray], length: int, *, left: bool):
        self.name, self.values, self.length, self.left = name, values, length, left
        self.lens = np.fromiter((len(v) for v in values), np.int64, len(values))

    @classmethod
    def of(
        cls, rows: Rows, name: str, length: int | None, option: str, *, left: bool = False
    ) -> Padded:
        """Token ids ``name`` of ``rows``, to pad to ``length`` (None: the batch's longest; the
        option that set it is ``option``)."""
        if name not in rows[0]:
            msg = (
                f"collate: the rows have no {name!r} column (they have "
                f"{', '.join(rows[0])}). Hint: the `layout` advcli shard wrote them in"
            )
            raise UsageError(msg)
        values = _arrays(rows, name, IDS)
        longest = max(len(v) for v in values)
        limit = max_row_tokens() if length is None else length
        if longest > limit:
            row = next(i for i, v in enumerate(values) if len(v) == longest)
            msg = f"collate: row {row} of the batch has {longest:,} {name} tokens, more than "
            if length is None:
                msg += f"the {limit:,} a row may hold. Hint: raise {ROW_TOKENS_ENV}"
            else:
                msg += f"{option}={length}. Hint: a larger {option}, or None (the batch's longest)"
            raise UsageError(msg)
        return cls(name, values, longest if length is None else length, left=left)

    def fits(self, values: list[Any]) -> bool:
        """Whether ``values`` are lists of numbers (nulls too) with one per token of this column
        on every row."""
        arrays = (_read(v) for v in values)
        return all(
            a is not None and a.shape == (n,) for a, n in zip(arrays, self.lens, strict=True)
        )

    def like(self, rows: Rows, name: str, kind: str) -> Padded:
        """Column ``name``, a list of ``kind`` with a value per token of this one, padded the
        same way."""
        values = _arrays(rows, name, kind)
        for i, (v, n) in enumerate(zip(values, self.lens, strict=True)):
            if len(v) != n:
                msg = (
                    f"collate: row {i} of the batch, column {name!r} does not have one value per "
                    f"{self.name} token ({len(v)} for {n}). Hint: rows as advcli shard wrote them"
                )
                raise UsageError(msg)
        return Padded(name, values, self.length, left=self.left)

    def _where(self) -> tuple[np.ndarray, np.ndarray]:
        offsets = offsets_from_lengths(self.lens)
        rows, cols = row_of(offsets), positions_in_row(offsets)
        if self.left:
            cols += np.repeat(self.length - self.lens, self.lens)
        return rows, cols

    def pad(self, value: float, dtype: type[np.number[Any]]) -> np.ndarray:
        out: np.ndarray = np.full((len(self.lens), self.length), value, dtype=dtype)
        if self.lens.sum():  # each row cast on its own: rows of two integer types stay exact
            out[self._where()] = np.concatenate([v.astype(dtype) for v in self.values])
        return out

    def mask(self) -> np.ndarray:
        """1 on the tokens, 0 on the padding (int64)."""
        out = np.zeros((len(self.lens), self.length), dtype=np.int64)
        out[self._where()] = 1
        return out
