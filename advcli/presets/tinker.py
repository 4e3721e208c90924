"""tinker-cookbook's RL loop (``tinker_cookbook/rl/train.py``, always on) →
``{log_path}/iteration_{NNNNNN}/{base_name}_rollout_summaries.jsonl``: ``train`` for the
rollouts trained on, ``eval_{name}`` for an evaluator's.

A line is one trajectory (schema_version 1): ``iteration``, ``group_idx`` (its group among the
iteration's groups), ``traj_idx``, ``total_reward`` (the steps' rewards plus the group's
``final_reward``) and ``steps[]`` (``step_idx``, ``ob_len``, ``ac_len``, ``reward``, ...). No
tokens and no advantages: tinker's own advantage is ``total_reward`` minus its group's mean
(``rl/data_processing.py compute_advantages``), the ``tinker`` convention.

Read as agent steps: one row per step, a segment of its trajectory (``segment_index``: its
place in ``steps``), its ``step_reward`` the step's reward (the last step's plus the
``final_reward``, which arrives after it, so a trajectory's step rewards add up to its total);
``reward`` is ``total_reward`` on every row, and the outcome methods take it once per
trajectory. A trajectory without steps is one row. A folder is searched for the ``train``
files; an ``eval_*`` file is read when named.
"""

from __future__ import annotations

from typing import Any

from advcli.errors import DataError
from advcli.lazy_imports import np, pl
from advcli.presets.base import (
    Converted,
    Preset,
    PresetOptions,
    frame,
    json_records,
    json_text,
    need,
    number,
    with_canonical,
)

AS_STEPS = (
    "tinker's trajectories are read one row per step (step_reward: the step's reward, the "
    "final_reward on the last); the outcome methods take total_reward once per trajectory, as "
    "tinker's compute_advantages does"
)
STEP_FIELDS = ("step_idx", "ob_len", "ac_len", "episode_done", "stop_reason")  # as they are
STEP_NESTED = ("metrics", "logs")  # as JSON text, prefixed ``step_``


class Tinker(Preset):
    name = "tinker"
    framework = "tinker-cookbook"
    switch = "always on (the RL loop's log_path)"
    writes = "LOG_PATH/iteration_{NNNNNN}/train_rollout_summaries.jsonl (and eval_{NAME}_...)"
    patterns = (
        "iteration_*/train_rollout_summaries.jsonl",
        "train_rollout_summaries.jsonl",
    )
    marks = (frozenset({"group_idx", "traj_idx", "total_reward", "steps"}),)
    convention = "tinker"

    def convert(self, path: str, options: PresetOptions) -> Converted:
        records, lines = json_records(path)
        need(path, set(frame(records[:1]).columns) if records else set(),
             ["iteration", "group_idx", "traj_idx", "total_reward"], self.framework)  # fmt: skip
        rows, row_lines = [], []
        for record, line in zip(records, lines.tolist(), strict=True):
            found = step_rows(path, int(line), record)
            rows += found
            row_lines += [line] * len(found)
        df = frame(rows)
        at = np.array(row_lines, dtype=np.int64)
        split = df["split"].cast(pl.String) if "split" in df.columns else pl.lit("train")
        group = df.select(
            pl.format("{}:{}:{}", pl.col("iteration"), split, pl.col("group_idx")).alias("g")
        )["g"]
        canonical = {
            "prompt_id": group,
            "rollout_id": group + ":" + df["traj_idx"].cast(pl.String),
            "segment_index": df["segment_index"].cast(pl.Int64),
            "reward": number(df, "total_reward", path, at),
            "step_reward": df["step_reward"].cast(pl.Float64),
            "step": df["iteration"].cast(pl.Int64),
        }
        return Converted(with_canonical(df, canonical).to_arrow(), at, [AS_STEPS])


def step_rows(path: str, line: int, record: dict[str, Any]) -> list[dict[str, Any]]:
    """A trajectory's rows, one per step: its own fields (nested ones as JSON text: a dict
    with no keys is a struct Parquet cannot write), then the step's."""
    steps = record.get("steps")
    rewards = step_rewards(path, line, steps if steps is not None else [])
    trajectory = {k: v for k, v in record.items() if k != "steps"}
    trajectory["trajectory_metrics"] = json_text(record.get("trajectory_metrics"))
    final = record.get("final_reward")
    final = final if isinstance(final, int | float) and not isinstance(final, bool) else 0.0
    if not rewards:
        return [{**trajectory, "segment_index": 0, "step_reward": None}]
    out = []
    for k, (step, reward) in enumerate(zip(steps or [], rewards, strict=True)):
        if k == len(rewards) - 1 and final:
            reward = (reward or 0.0) + float(final)
        out.append({
            **trajectory,
            "segment_index": k,
            "step_reward": reward,
            **{name: step.get(name) for name in STEP_FIELDS},
            **{f"step_{name}": json_text(step.get(name)) for name in STEP_NESTED},
        })  # fmt: skip
    return out


def step_rewards(path: str, line: int, steps: object) -> list[float | None]:
    """The ``reward`` of each of a trajectory's steps (None where a step has none)."""
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        raise DataError(f"{path}: line {line}, column 'steps': expected a list of steps")
    out: list[float | None] = []
    for s in steps:
        reward = s.get("reward")
        if reward is not None and (isinstance(reward, bool) or
                                   not isinstance(reward, int | float)):  # fmt: skip
            msg = (
                f"{path}: line {line}, column 'steps': step {s.get('step_idx')}'s reward "
                f"{reward!r} is not a number"
            )
            raise DataError(msg)
        out.append(None if reward is None else float(reward))
    return out
