"""tinker-cookbook's RL loop (``tinker_cookbook/rl/train.py``, always on) →
``{log_path}/iteration_{NNNNNN}/{base_name}_rollout_summaries.jsonl``: ``train`` for the
rollouts trained on, ``eval_{name}`` for an evaluator's.

A line is one trajectory (schema_version 1): ``iteration``, ``group_idx`` (its group among the
iteration's groups), ``traj_idx``, ``total_reward`` (the steps' rewards plus the group's
``final_reward``) and ``steps[]`` (``step_idx``, ``ob_len``, ``ac_len``, ``reward``, ...). No
tokens and no advantages: tinker's own advantage is ``total_reward`` minus its group's mean
(``rl/data_processing.py compute_advantages``), the ``tinker`` convention. The per-step rewards
are kept as ``step_rewards``; the outcome methods take ``total_reward``. A folder is searched for
the ``train`` files; an ``eval_*`` file is read when named.
"""

from __future__ import annotations

import polars as pl

from advcli.errors import DataError
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

STEP_REWARDS = (
    "tinker's per-step rewards are kept as 'step_rewards'; the outcome methods take "
    "total_reward (their sum plus the group's final_reward), as tinker's compute_advantages does"
)


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
        df = frame(records)
        need(path, set(df.columns), ["iteration", "group_idx", "traj_idx", "total_reward"],
             self.framework)  # fmt: skip
        split = df["split"].cast(pl.String) if "split" in df.columns else pl.lit("train")
        group = df.select(
            pl.format("{}:{}:{}", pl.col("iteration"), split, pl.col("group_idx")).alias("g")
        )["g"]
        canonical = {
            "prompt_id": group,
            "rollout_id": group + ":" + df["traj_idx"].cast(pl.String),
            "reward": number(df, "total_reward", path, lines),
            "step": df["iteration"].cast(pl.Int64),
        }
        warnings = []
        if "steps" in df.columns:
            rewards = [step_rewards(path, int(line), r.get("steps")) for r, line in
                       zip(records, lines.tolist(), strict=True)]  # fmt: skip
            canonical["step_rewards"] = pl.Series(rewards, dtype=pl.List(pl.Float64))
            warnings.append(STEP_REWARDS)
        nested = [n for n in ("trajectory_metrics", "steps") if n in df.columns]  # as JSON text:
        df = df.with_columns(**{  # a dict with no keys is a struct Parquet cannot write
            n: pl.Series([json_text(r.get(n)) for r in records], dtype=pl.String) for n in nested
        })  # fmt: skip
        return Converted(with_canonical(df, canonical).to_arrow(), lines, warnings)


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
