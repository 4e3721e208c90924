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
  ``returns`` (B, T), 0 on padding.
- ``verl`` (as verl's agent loop pads, ``verl/experimental/agent_loop/agent_loop.py``
  ``_agent_loop_postprocess``): ``prompts`` (B, P) left-padded, ``responses`` (B, R)
  right-padded, ``input_ids`` their concatenation, ``attention_mask`` (B, P + R),
  ``position_ids`` = ``clip(cumsum(attention_mask) - 1, 0)`` (verl's
  ``compute_position_id_with_mask``), and ``response_mask``, ``advantages``, ``returns``,
  ``old_log_probs`` (B, R).
- ``trl`` (as ``GRPOTrainer._generate_and_score_completions`` pads): ``prompt_ids`` and
  ``prompt_mask`` (B, P) left-padded, ``completion_ids``, ``completion_mask`` (B, C) and
  ``tool_mask`` (B, C, padded with 1, as TRL does) right-padded, ``advantages`` (B,),
  ``old_per_token_logps`` (B, C).

P, R (C) and T are the batch's longest unless ``prompt_length`` and ``response_length`` fix them
(verl pads to its ``rollout.prompt_length`` and ``rollout.response_length``). Token ids and masks
are int64, values float32. Any other column with a value per response token (per token, in the
advcli layout) is padded with 0 alongside; other numbers become a (B,) tensor, anything else a
list.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from advcli.core.ragged import offsets_from_lengths, row_of
from advcli.core.ragged import positions as positions_in_row
from advcli.errors import UsageError
from advcli.lazy_imports import np

LAYOUTS = ("advcli", "verl", "trl")
Rows = Sequence[Mapping[str, Any]]


def collate(
    layout: str = "advcli",
    *,
    pad_token_id: int = 0,
    prompt_length: int | None = None,
    response_length: int | None = None,
) -> Callable[[Rows], dict[str, Any]]:
    """A ``collate_fn`` for shard rows of ``layout`` (see the module's docstring)."""
    if layout not in LAYOUTS:
        msg = f"layout {layout!r}: expected one of {', '.join(LAYOUTS)}. Hint: layout='verl'"
        raise UsageError(msg)
    if layout == "advcli" and prompt_length is not None:
        msg = "prompt_length: the advcli layout has no prompt of its own. Hint: drop it"
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
            out["position_ids"] = ids.like(rows, "position_ids").pad(0, np.int64)
        else:
            out["position_ids"] = positions(mask)
        return self._rest(rows, out, ids, masks={"loss_mask"})

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
        return self._rest(rows, out, responses, masks={"response_mask"})

    def _trl(self, rows: Rows) -> dict[str, np.ndarray | list[Any]]:
        prompts = Padded.of(rows, "prompt_ids", self.prompt_length, "prompt_length", left=True)
        completions = Padded.of(rows, "completion_ids", self.response_length, "response_length")
        out: dict[str, np.ndarray | list[Any]] = {
            "prompt_ids": prompts.pad(self.pad_token_id, np.int64),
            "prompt_mask": prompts.mask(),
            "completion_ids": completions.pad(self.pad_token_id, np.int64),
            "tool_mask": completions.like(rows, "tool_mask").pad(1, np.int64),
        }
        return self._rest(rows, out, completions, masks={"completion_mask"})

    @staticmethod
    def _rest(
        rows: Rows,
        out: dict[str, np.ndarray | list[Any]],
        tokens: Padded,
        *,
        masks: set[str],
    ) -> dict[str, np.ndarray | list[Any]]:
        """The columns not made yet: those with a value per token of ``tokens`` padded with 0
        alongside (``masks`` as int64, other numbers float32), other numbers as a (B,) array,
        anything else as a list."""
        skip = {*out, "attention_mask", "position_ids"}
        for name in rows[0]:
            if name in skip:
                continue
            values = [row[name] for row in rows]
            if tokens.fits(values):
                dtype = np.int64 if name in masks else np.float32
                out[name] = tokens.like(rows, name).pad(0, dtype)
            elif all(_is_number(v) for v in values):
                floats = any(np.issubdtype(np.asarray(v).dtype, np.floating) for v in values)
                out[name] = np.asarray(values, dtype=np.float32 if floats else np.int64)
            else:
                out[name] = values
        return out


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | np.number) and not isinstance(value, bool)


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
        """Column ``name`` of ``rows``, to pad to ``length`` (None: the batch's longest; the
        option that set it is ``option``)."""
        if name not in rows[0]:
            msg = (
                f"collate: the rows have no {name!r} column (they have "
                f"{', '.join(rows[0])}). Hint: the layout advcli shard --layout wrote them in"
            )
            raise UsageError(msg)
        values = [np.asarray(row[name]) for row in rows]
        longest = max(len(v) for v in values)
        if length is not None and longest > length:
            row = next(i for i, v in enumerate(values) if len(v) == longest)
            msg = (
                f"collate: row {row} of the batch has {longest} {name} tokens, more than "
                f"{option}={length}. Hint: a larger {option}, or None (the batch's longest)"
            )
            raise UsageError(msg)
        return cls(name, values, longest if length is None else length, left=left)

    def fits(self, values: list[Any]) -> bool:
        """Whether ``values`` hold one number per token of this column on every row."""
        return all(np.ndim(v) == 1 and len(v) == n for v, n in zip(values, self.lens, strict=True))

    def like(self, rows: Rows, name: str) -> Padded:
        """Column ``name``, with a value per token of this one, padded the same way."""
        values = [np.asarray(row[name]) for row in rows]
        if not self.fits(values):
            msg = f"collate: column {name!r} does not have one value per {self.name} token"
            raise UsageError(msg + ". Hint: rows as advcli shard wrote them")
        return Padded(name, values, self.length, left=self.left)

    def _where(self) -> tuple[np.ndarray, np.ndarray]:
        offsets = offsets_from_lengths(self.lens)
        rows, cols = row_of(offsets), positions_in_row(offsets)
        if self.left:
            cols += np.repeat(self.length - self.lens, self.lens)
        return rows, cols

    def pad(self, value: float, dtype: type[np.number[Any]]) -> np.ndarray:
        out: np.ndarray = np.full((len(self.lens), self.length), value, dtype=dtype)
        if self.lens.sum():
            out[self._where()] = np.concatenate(self.values).astype(dtype)
        return out

    def mask(self) -> np.ndarray:
        """1 on the tokens, 0 on the padding (int64)."""
        out = np.zeros((len(self.lens), self.length), dtype=np.int64)
        out[self._where()] = 1
        return out
