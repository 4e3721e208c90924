"""TRL (GRPOTrainer, 0.28 on): ``log_completions=True`` →
``{output_dir}/completions/completions_{step:05d}.parquet``.

A row per completion: ``step``, ``prompt``, ``completion`` (decoded text), one float column per
reward function, extra columns, and TRL's own ``advantage``. The reward TRL trained on is not
in the file: it is the NaN-skipping weighted sum of the reward functions' columns (weights
``reward_weights``, default 1), so ``--reward-columns`` and ``--reward-weights`` say which and
how (default: the float columns between ``completion`` and ``advantage``, weight 1). Groups are
contiguous blocks of ``num_generations`` rows (``--group-size``), or else runs of rows with the
same prompt. TRL's ``advantage`` is kept as ``source_advantage``.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from advcli.errors import DataError, UsageError
from advcli.presets.base import Converted, Preset, PresetOptions, need, step_of


class Trl(Preset):
    name = "trl"
    framework = "TRL"
    switch = "GRPOConfig(log_completions=True)"
    writes = "OUTPUT_DIR/completions/completions_{step:05d}.parquet"
    patterns = ("completions_*.parquet", "completions/completions_*.parquet")
    marks = (frozenset({"prompt", "completion", "advantage"}),)
    suffixes = (".parquet",)
    checks = ("grpo", "trl")

    def convert(self, path: str, options: PresetOptions) -> Converted:
        try:
            df = pl.from_arrow(pq.read_table(path))
        except Exception as exc:  # pyarrow raises several types for a bad file
            msg = f"{path}: not a readable Parquet file ({exc}). Hint: check the file"
            raise DataError(msg) from None
        assert isinstance(df, pl.DataFrame)
        need(path, set(df.columns), ["prompt", "completion"], self.framework)
        columns = reward_columns(path, df, options)
        weights = options.reward_weights
        unknown = sorted(set(weights) - set(columns))
        if unknown:
            msg = (
                f"--reward-weights {unknown[0]}: not a reward column of {path} (reward "
                f"columns: {', '.join(columns)}). Hint: name one of them"
            )
            raise UsageError(msg)
        terms = [(pl.col(c).cast(pl.Float64) * weights.get(c, 1.0)).fill_nan(None) for c in columns]
        reward = df.select(pl.sum_horizontal(terms).fill_null(0.0)).to_series()
        step = (
            df["step"]
            if "step" in df.columns
            else pl.Series([step_of(path, r"completions_(\d+)")] * df.height)
        )
        rows = np.arange(df.height)
        if options.group_size:
            if df.height % options.group_size:
                msg = (
                    f"{path}: {df.height} rows are not whole groups of --group-size "
                    f"{options.group_size}. Hint: give TRL's num_generations"
                )
                raise UsageError(msg)
            group = rows // options.group_size
        else:
            prompt = df["prompt"].cast(pl.String).to_numpy()
            group = np.cumsum(np.r_[False, prompt[1:] != prompt[:-1]]) if len(prompt) else rows
        scope = step.cast(pl.String) + ":"
        canonical = {
            "prompt_id": scope + pl.Series(group).cast(pl.String),
            "rollout_id": scope + pl.Series(rows).cast(pl.String),
            "reward": reward,
            "step": step,
        }
        if "advantage" in df.columns:
            df = df.rename({"advantage": "source_advantage"})
        table = df.drop([c for c in canonical if c in df.columns]).with_columns(
            **{k: v.alias(k) for k, v in canonical.items()}
        )
        return Converted(table.to_arrow())

    def reward_components(self, schema: pa.Schema, options: PresetOptions) -> list[str]:
        if options.reward_columns:
            return list(options.reward_columns)
        names = schema.names  # the dump's own order: completion, the rewards, its advantage
        if "completion" not in names:
            return []
        start = names.index("completion") + 1
        end = names.index("source_advantage") if "source_advantage" in names else len(names)
        return [n for n in names[start:end] if pa.types.is_floating(schema.field(n).type)]


def reward_columns(path: str, df: pl.DataFrame, options: PresetOptions) -> list[str]:
    """The reward functions' columns: ``--reward-columns``, or the float columns between
    ``completion`` and ``advantage``."""
    if options.reward_columns:
        missing = [c for c in options.reward_columns if c not in df.columns]
        if missing:
            msg = (
                f"--reward-columns {missing[0]}: {path} has no such column (columns: "
                f"{', '.join(df.columns)}). Hint: name the reward functions' columns"
            )
            raise UsageError(msg)
        return list(options.reward_columns)
    names = df.columns
    start = names.index("completion") + 1
    end = names.index("advantage") if "advantage" in names else len(names)
    found = [c for c in names[start:end] if df[c].dtype.is_float()]
    if not found:
        msg = (
            f"{path}: no float column between 'completion' and 'advantage' to take as a "
            "reward. Hint: name them with --reward-columns"
        )
        raise DataError(msg)
    return found
