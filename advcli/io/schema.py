"""Column roles: which column of a log plays which part, found by name, alias or ``--col``.

A role is resolved to the canonical column name if the log has it, else to the first alias the
log has whose type fits. ``--col ROLE=COLUMN`` names it explicitly. Two fitting aliases and no
canonical column is ambiguous: an error asks for ``--col``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from advcli.errors import SchemaError, UsageError, columns_found, did_you_mean
from advcli.lazy_imports import pa, pl

# kind: what type a role's column must have.
#   key: string or integer scalar; num: numeric scalar; bool: boolean scalar;
#   ids: list of integers; mask: list of 0/1 integers or booleans; nums: list of numbers;
#   spans: list of {start, end, kind} structs, start and end integers.
ROLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "prompt_id": ("key", ("uid", "prompt", "group_id", "prompt_idx", "query_id", "task_id")),
    "rollout_id": ("key", ("sample_id", "trajectory_id", "traj_id", "episode_id")),
    "segment_index": ("key", ("segment", "segment_id", "segment_idx")),
    "input_ids": ("ids", ("token_ids", "tokens")),
    "action_mask": ("mask", ("loss_mask", "response_mask", "assistant_mask", "assistant_masks")),
    "spans": ("spans", ()),
    "reward": ("num", ("score", "outcome_reward", "rewards", "episode_scores")),
    "token_rewards": ("nums", ("token_level_rewards", "dense_rewards")),
    "values": ("nums", ("critic_values", "value_preds")),
    "completion_time": ("num", ("finish_time", "end_time", "completed_at")),
    "truncated": ("bool", ("is_truncated",)),
    # A rollout without a reward (every TRL reward function returned None): left out of its
    # group's statistics, advantage 0
    "unscored": ("bool", ()),
    # The rollouts trained together (a framework's step): batch statistics are per batch
    "batch": ("key", ()),
    "bootstrap_value": ("num", ("last_value",)),
    # ReMax: the reward of the greedy rollout of the same prompt
    "baseline_reward": ("num", ("reward_baseline", "greedy_reward")),
    # Process supervision: each step's reward, and the index of the token that ends it
    "step_rewards": ("nums", ("process_rewards",)),
    "step_ends": ("ids", ("step_end_positions",)),
    # Per-token log-probabilities of the sampled tokens: the sampler's (the inference engine's;
    # advcli's own `old_logprobs`, as in sample_data/), the trainer's recomputation of the same
    # tokens (verl's `old_log_probs`, one underscore from advcli's `old_logprobs`, is the
    # trainer's: docs/schema.md), a reference's (KL), a teacher's (OPD)
    "logprobs": ("nums", ("old_logprobs", "rollout_log_probs", "generation_logprobs")),
    "trainer_logprobs": ("nums", ("old_log_probs", "prev_logprobs", "log_probs")),
    "ref_logprobs": ("nums", ("ref_log_probs", "ref_log_prob")),
    "teacher_logprobs": ("nums", ("teacher_log_probs",)),
    # Multi-agent logs: the role that wrote a rollout, and the episode it took part in
    "agent": ("key", ("agent_name", "agent_role")),
    "episode": ("key", ()),
    # Agent steps (a rollout's segments): the reward of the step, and the observation it acted
    # on (text or a hash), which makes steps of one episode group comparable (GiGPO)
    "step_reward": ("num", ("step_score", "step_scores")),  # ROLL's step rows: step_scores
    "state": ("key", ("state_hash", "anchor_obs", "env_state_hash")),
    # Per-turn rewards in one row: one per action span, in order (read as token rewards on each
    # span's last token)
    "turn_rewards": ("nums", ("turn_scores", "per_turn_rewards")),
    # Per-token entropy of the sampling policy (--entropy-coef)
    "entropies": ("nums", ("entropy", "token_entropies")),
    # Staleness: the trainer step that trained on a rollout, and the policy version that
    # generated it (its oldest token's; ``last_version`` its newest's, where they differ)
    "step": ("num", ("global_step", "train_step")),
    "version": ("num", ("model_version", "policy_version", "weight_version")),
    "last_version": ("num", ("tail_version",)),
}

SPAN_KINDS = ("prompt", "action", "observation")

POLICY_LOGPROBS = "policy_logprobs"
"""Not a column's role but the first of :data:`POLICY_STREAMS` a log has: the policy's
log-probs that the KL penalty and distillation read (``Roles["policy_logprobs"]``)."""
POLICY_STREAMS = ("trainer_logprobs", "logprobs")
"""The trainer's stream first: verl's ``apply_kl_penalty`` and slime's KL and distillation
read the trainer's recomputed log-probs (``old_log_probs``, ``log_probs``), and the sampler's
only where the trainer reuses them (verl's bypass mode, slime's ``--use-rollout-logprobs``)."""


def role_shown(role: str) -> str:
    """A role as a table of what a log lacks names it: the policy's log-probs as the streams
    that give them."""
    return " or ".join(reversed(POLICY_STREAMS)) if role == POLICY_LOGPROBS else role


def _fits(kind: str, t: pa.DataType) -> bool:
    if kind == "key":
        return bool(pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t))
    if kind == "num":
        return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_timestamp(t))
    if kind == "bool":
        return bool(pa.types.is_boolean(t))
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return False
    inner = t.value_type
    if kind == "ids":
        return bool(pa.types.is_integer(inner))
    if kind == "mask":
        return bool(pa.types.is_integer(inner) or pa.types.is_boolean(inner))
    if kind == "nums":
        return bool(pa.types.is_integer(inner) or pa.types.is_floating(inner))
    if kind == "spans":
        fields = {f.name: f.type for f in inner} if pa.types.is_struct(inner) else {}
        return {"start", "end", "kind"} <= set(fields) and all(
            pa.types.is_integer(fields[name]) for name in ("start", "end")
        )
    return False


_KIND_TEXT = {
    "key": "a string or integer",
    "num": "a number",
    "bool": "a boolean",
    "ids": "a list of integers",
    "mask": "a list of 0/1",
    "nums": "a list of numbers",
    "spans": "a list of {start, end, kind} with integer start and end",
}


@dataclass(frozen=True)
class Roles:
    """The column that plays each role (None: the log has none)."""

    columns: dict[str, str | None]

    def __getitem__(self, role: str) -> str | None:
        if role == POLICY_LOGPROBS:
            return next((c for r in POLICY_STREAMS if (c := self.columns.get(r))), None)
        return self.columns.get(role)

    def column(self, role: str) -> str:
        """The column of a role the log is known to have (checked before with ``require``)."""
        col = self[role]
        assert col is not None, f"the log has no {role!r} column"
        return col

    @property
    def mask_source(self) -> str:
        """``action_mask``, ``spans``, or ``all`` (no mask: every token is an action)."""
        if self.columns.get("action_mask"):
            return "action_mask"
        return "spans" if self.columns.get("spans") else "all"


def parse_col_mapping(items: list[str] | None) -> dict[str, str]:
    """``["reward=score", ...]`` as ``{"reward": "score"}``, checking the role names."""
    mapping: dict[str, str] = {}
    for item in items or []:
        role, sep, column = item.partition("=")
        if not sep or not role or not column:
            msg = f"`col={[item]!r}`: expected ROLE=COLUMN, for example `col=['reward=score']`"
            raise UsageError(msg)
        if role not in ROLES:
            hint = did_you_mean(role, ROLES)
            msg = f"`col={[item]!r}`: unknown role '{role}'.{hint} Roles: {', '.join(ROLES)}"
            raise UsageError(msg)
        mapping[role] = column
    return mapping


def resolve_roles(schema: pa.Schema, mapping: dict[str, str], files: str) -> Roles:
    """Find the column of every role in ``schema``."""
    names = schema.names
    columns: dict[str, str | None] = {}
    for role, (kind, aliases) in ROLES.items():
        chosen: str | None
        if role in mapping:
            col = mapping[role]
            if col not in names:
                hint = did_you_mean(col, names)
                given = f"`col={[f'{role}={col}']!r}`"
                msg = f"{files}: {given}: no column '{col}'.{hint} {columns_found(names)}"
                raise UsageError(msg)
            chosen = col
        elif role in names:
            chosen = role
        else:
            fitting = [a for a in aliases if a in names and _fits(kind, schema.field(a).type)]
            if len(fitting) > 1:
                msg = (
                    f"{files}: columns {', '.join(repr(a) for a in fitting)} could each be "
                    f"'{role}'. Hint: choose one with `col={[f'{role}={fitting[0]}']!r}`"
                )
                raise SchemaError(msg)
            chosen = fitting[0] if fitting else None
        if chosen is not None and not _fits(kind, schema.field(chosen).type):
            msg = (
                f"{files}: column '{chosen}' ({role}) has type {schema.field(chosen).type}, "
                f"expected {_KIND_TEXT[kind]}. Hint: map another column with `col`"
            )
            raise SchemaError(msg)
        columns[role] = chosen
    taken: dict[str, str] = {}
    for role, column in columns.items():
        if column is not None and column in taken:
            msg = (
                f"{files}: column '{column}' is mapped to both '{taken[column]}' and '{role}'. "
                "Hint: fix the `col` options"
            )
            raise SchemaError(msg)
        if column is not None:
            taken[column] = role
    return Roles(columns)


def jsonl_dtypes(keys: list[str], mapping: dict[str, str], first: dict[str, Any]) -> dict[str, Any]:
    """Explicit polars dtypes for the role columns of a JSONL log, from ``first``: each key's
    first non-null value (None if it had none).

    Inference would give 64-bit lists, type a column of integer rewards as integers (so that a
    later 0.5 could not be read), and a column null on the first lines as null.
    """
    dtypes: dict[str, Any] = {}
    for role, (kind, aliases) in ROLES.items():
        candidates = [mapping[role]] if role in mapping else [role, *aliases]
        for col in candidates:
            dtype = _jsonl_dtype(kind, first[col]) if col in keys else None
            if dtype is not None:
                dtypes[col] = dtype
                break
    return dtypes


def _jsonl_dtype(kind: str, value: object) -> Any:
    """The dtype of a role's column from a value of it (None: let polars infer)."""
    if kind == "num" and (value is None or _is_number(value)):
        return pl.Float64
    if kind == "bool" and (value is None or isinstance(value, bool)):
        return pl.Boolean
    if value is not None and not isinstance(value, list):
        return None
    if any(isinstance(v, (list, dict)) for v in value or []):
        return None  # nested lists (a framework's wrapping): not this role's column
    if kind == "ids":
        return pl.List(pl.Int64)
    if kind == "mask":
        return pl.List(pl.Boolean if any(isinstance(v, bool) for v in value or []) else pl.Int64)
    if kind == "nums":
        return pl.List(pl.Float64)
    return None


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def describe_type(t: pa.DataType) -> str:
    return str(t).replace("large_list", "list").replace("large_string", "string")
