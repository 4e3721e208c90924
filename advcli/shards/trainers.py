"""Trainer layouts (``shard --layout``): the columns a trainer's update reads, one row per sample,
unpadded (:mod:`advcli.torch` pads a batch as the trainer does).

- ``advcli``: the sequence as one row (``input_ids``, ``loss_mask``, ``advantages``, ...).
- ``verl``: what verl's actor update reads of a ``DataProto``: the sequence split at its first
  action token into ``prompts`` and ``responses``; ``response_mask`` (1 on action tokens),
  ``advantages`` and ``returns`` (``advantages`` where the method has none, as verl's outcome
  estimators return them), ``old_log_probs`` (the trainer's log-probs where the log has them,
  else the sampler's: what verl's bypass mode puts there) and ``rollout_log_probs`` (the
  sampler's, where the log has them) over the response; ``attention_mask`` and
  ``position_ids`` over the whole sequence.
- ``trl``: what TRL's ``GRPOTrainer._compute_loss`` reads: ``prompt_ids`` and ``completion_ids``
  split at the first action token, ``completion_mask`` (1 on every completion token: attention),
  ``tool_mask`` (1 on action tokens: the loss is ``completion_mask * tool_mask``), one
  ``advantages`` value per sequence (refused where the advantages vary along a sequence's
  action tokens: :func:`one_per_sequence`), ``old_per_token_logps`` (the trainer's log-probs,
  else the sampler's) and ``sampling_per_token_logps`` (the sampler's, the name
  ``_generate_and_score_completions`` gives vLLM's; where the log has them).

With ``--correction``, the weights and masks go under each trainer's name: ``advcli``:
``is_weights`` and ``is_mask`` per token; ``verl``: ``rollout_is_weights`` over the response (its
batch key, which its policy loss multiplies in), and a rejection mode's masked tokens also
dropped from ``response_mask``, as verl's ``rollout_rs`` drops them (a truncate or mask mode
leaves ``response_mask`` as it is: its masked tokens weigh 0, as verl's ``rollout_is`` leaves
them); ``trl``: ``importance_sampling_ratio``, as TRL's loss reads it: per completion token for a
token mode, one number per sequence for a sequence mode.

A ``--keep`` column with a value per token covers the response (the completion) in the verl and
trl layouts, as the trainers' own per-token fields do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

from advcli.core.ragged import first_where, lengths, offsets_from_lengths, positions, row_of
from advcli.errors import UsageError
from advcli.io.arrow import flat_list, list_array
from advcli.lazy_imports import np, pa

# Columns a routed sample carries for a trainer layout, besides advcli's own.
# log-probs over the whole sequence: the policy's (the trainer's where the log has them, else
# the sampler's; advcli.io.schema.POLICY_STREAMS) and the sampler's
LOGPROBS = "__advcli_logprobs__"
SAMPLER_LOGPROBS = "__advcli_sampler_logprobs__"
LOGPROB_STREAMS = (LOGPROBS, SAMPLER_LOGPROBS)
SEQUENCE_ADVANTAGE = "__advcli_advantage__"  # the one advantage of each sequence
REJECTED = "__advcli_rejected__"  # the tokens a rejection mode masked (verl's response_mask)
SEQUENCE_WEIGHT = "__advcli_weight__"  # the one correction weight of each sequence (trl)
WEIGHTS, MASKED = "is_weights", "is_mask"  # advcli's names of the correction's columns
IDS = ("prompt_id", "rollout_id", "segment_index")

Columns: TypeAlias = "dict[str, pa.Array]"


@dataclass(frozen=True)
class TrainerLayout:
    """How one trainer's columns come from advcli's (a sample's ``input_ids``, ``loss_mask``,
    ``advantages``, ``returns``, the routed extras), and how ``verify`` counts them."""

    name: str
    columns: tuple[str, ...]  # the columns it writes (besides the ids; some only when logged)
    tokens: tuple[str, ...]  # list columns whose lengths add up to a sample's tokens
    actions: str  # the column whose sum is its action tokens
    sequence_advantage: bool  # holds one advantage per sequence (refused where they vary)
    convert: Callable[[Columns, set[str], bool], Columns]

    def count(self, table: pa.Table) -> tuple[int, int]:
        """A table's tokens and action tokens."""
        tokens = sum(len(flat_list(table.column(c))[0]) for c in self.tokens)
        mask = flat_list(table.column(self.actions))[0]
        return tokens, int(np.asarray(mask).astype(np.int64).sum())


@dataclass
class Cut:
    """Rows cut in two at a position each: ``first[i]`` tokens in the head, the rest in the
    tail."""

    offsets: np.ndarray
    first: np.ndarray
    large: bool

    def __post_init__(self) -> None:
        self.in_head = positions(self.offsets) < np.repeat(self.first, lengths(self.offsets))
        self._head = pa.array(self.in_head)
        self._tail = pa.array(~self.in_head)

    def head(self, values: pa.Array) -> pa.Array:
        return list_array(values.filter(self._head), offsets_from_lengths(self.first),
                          large=self.large)  # fmt: skip

    def tail(self, values: pa.Array) -> pa.Array:
        rest = lengths(self.offsets) - self.first
        return list_array(values.filter(self._tail), offsets_from_lengths(rest), large=self.large)


def _split(cols: Columns, large: bool) -> tuple[pa.Array, pa.Array, Cut]:
    """The token ids, the action mask and the cut at each row's first action token."""
    ids, offsets = flat_list(cols["input_ids"])
    mask = flat_list(cols["loss_mask"])[0]
    return ids, mask, Cut(offsets, first_where(offsets, np.asarray(mask) != 0), large)


def _extras(cols: Columns, per_token: set[str], cut: Cut, out: Columns) -> Columns:
    """The ``--keep`` columns after the layout's own: per-token ones over the tail."""
    for name, column in cols.items():
        if name in out or name.startswith("__advcli_") or name in ADVCLI_COLUMNS:
            continue
        out[name] = cut.tail(flat_list(column)[0]) if name in per_token else column
    return out


def _ids(cols: Columns) -> Columns:
    return {name: cols[name] for name in IDS if name in cols}


def _ones(offsets: np.ndarray, large: bool) -> pa.Array:
    return list_array(np.ones(int(offsets[-1]), dtype=np.int8), offsets, large=large)


def _verl(cols: Columns, per_token: set[str], large: bool) -> Columns:
    ids, mask, cut = _split(cols, large)
    advantages = flat_list(cols["advantages"])[0]
    returns = flat_list(cols["returns"])[0] if "returns" in cols else advantages
    out = _ids(cols)
    out["prompts"] = cut.head(ids)
    out["responses"] = cut.tail(ids)
    if REJECTED in cols:  # verl's rollout_rs takes them out of the response mask
        rejected = np.asarray(flat_list(cols[REJECTED])[0], dtype=np.int8)
        mask = pa.array(np.asarray(mask, dtype=np.int8) * (1 - rejected))
    out["response_mask"] = cut.tail(mask)
    out["attention_mask"] = _ones(cut.offsets, large)
    out["position_ids"] = list_array(positions(cut.offsets).astype(np.int32), cut.offsets,
                                     large=large)  # fmt: skip
    out["advantages"] = cut.tail(advantages)
    out["returns"] = cut.tail(returns)
    out = _logprobs(cols, cut, out, VERL_LOGPROBS)
    if WEIGHTS in cols:
        out["rollout_is_weights"] = cut.tail(flat_list(cols[WEIGHTS])[0])
    return _extras(cols, per_token, cut, out)


def _trl(cols: Columns, per_token: set[str], large: bool) -> Columns:
    ids, mask, cut = _split(cols, large)
    out = _ids(cols)
    out["prompt_ids"] = cut.head(ids)
    out["completion_ids"] = cut.tail(ids)
    completion = offsets_from_lengths(lengths(cut.offsets) - cut.first)
    out["completion_mask"] = _ones(completion, large)
    out["tool_mask"] = cut.tail(mask)
    out["advantages"] = cols[SEQUENCE_ADVANTAGE].cast(pa.float32())
    out = _logprobs(cols, cut, out, TRL_LOGPROBS)
    if SEQUENCE_WEIGHT in cols:
        out["importance_sampling_ratio"] = cols[SEQUENCE_WEIGHT]
    elif WEIGHTS in cols:
        out["importance_sampling_ratio"] = cut.tail(flat_list(cols[WEIGHTS])[0])
    return _extras(cols, per_token, cut, out)


VERL_LOGPROBS = {LOGPROBS: "old_log_probs", SAMPLER_LOGPROBS: "rollout_log_probs"}
TRL_LOGPROBS = {LOGPROBS: "old_per_token_logps", SAMPLER_LOGPROBS: "sampling_per_token_logps"}


def _logprobs(cols: Columns, cut: Cut, out: Columns, names: dict[str, str]) -> Columns:
    """``out`` with the log-prob streams the log has, over the response, under the trainer's
    ``names``."""
    for stream, name in names.items():
        if stream in cols:
            out[name] = cut.tail(flat_list(cols[stream])[0])
    return out


def one_per_sequence(
    advantages: np.ndarray, mask: np.ndarray, offsets: np.ndarray
) -> tuple[np.ndarray, int | None]:
    """Each row's one advantage, the value on its action tokens (0 where it has none), and the
    first row whose action tokens hold two different values (None: every row holds one), for
    a layout with one advantage per sequence: whatever the method, only its advantages show
    whether one per sequence says what they say."""
    first = first_where(offsets, mask)
    acting = first < lengths(offsets)
    value = np.zeros(len(first), dtype=advantages.dtype)
    value[acting] = advantages[offsets[:-1][acting] + first[acting]]
    rows = row_of(offsets)
    varies = mask & (advantages != value[rows])
    return value, int(rows[np.flatnonzero(varies)[0]]) if varies.any() else None


def one_weight_per_sequence(
    weights: np.ndarray, mask: np.ndarray, offsets: np.ndarray
) -> np.ndarray:
    """Each row's sequence-mode weight (float32): the one on its action tokens, 1 where it has
    none (no correction applies)."""
    first = first_where(offsets, mask)
    acting = first < lengths(offsets)
    value = np.ones(len(first), dtype=np.float32)
    value[acting] = weights[offsets[:-1][acting] + first[acting]]
    return value


def _advcli(cols: Columns, per_token: set[str], large: bool) -> Columns:
    return cols


ADVCLI_COLUMNS = ("input_ids", "loss_mask", "advantages", "returns", WEIGHTS, MASKED)
LAYOUTS = {
    layout.name: layout
    for layout in (
        TrainerLayout("advcli", (), ("input_ids",), "loss_mask", False, _advcli),
        TrainerLayout(
            "verl",
            (
                "prompts",
                "responses",
                "response_mask",
                "attention_mask",
                "position_ids",
                "advantages",
                "returns",
                *VERL_LOGPROBS.values(),
                "rollout_is_weights",
            ),
            ("prompts", "responses"),
            "response_mask",
            False,
            _verl,
        ),
        TrainerLayout(
            "trl",
            (
                "prompt_ids",
                "completion_ids",
                "completion_mask",
                "tool_mask",
                "advantages",
                *TRL_LOGPROBS.values(),
                "importance_sampling_ratio",
            ),
            ("prompt_ids", "completion_ids"),
            "tool_mask",
            True,
            _trl,
        ),
    )
}
DEFAULT = "advcli"


def get(name: str | None) -> TrainerLayout:
    """The layout of that name (``advcli`` for None: manifests older than ``--layout``)."""
    if name is None:
        return LAYOUTS[DEFAULT]
    if name not in LAYOUTS:
        msg = (
            f"`layout={name!r}`: expected one of {', '.join(LAYOUTS)}. "
            "Hint: `layout='verl'` writes what verl's actor update reads"
        )
        raise UsageError(msg)
    return LAYOUTS[name]
