"""verl: ``trainer.rollout_data_dir`` (and ``validation_data_dir``) → ``{step}.jsonl``.

One line per rollout: ``input`` and ``output`` (decoded text), ``gts``, ``score`` (the reward),
``step``, and the reward function's extra fields. Two trainers write it:

- V1 (verl 0.9 on) adds ``uid`` = ``{prompt uuid}_{session}_{output}``: the group is the prompt
  uuid, the rollout ``{uuid}_{session}``, and the output number a segment of it (an agent loop
  that compacts its context writes several outputs, each with the final reward);
- the legacy trainer writes no uid: a group is the rows of one step with the same ``input``
  text (two dataset rows with the same prompt text then merge: a warning says so).

The legacy writer turns some numbers into text ("0.5") and writes NaN bare: both are read.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from advcli.errors import DataError, where
from advcli.presets.base import (
    Converted,
    Preset,
    PresetOptions,
    frame,
    json_records,
    need,
    number,
    step_of,
)

UID = r"^(.+)_(\d+)_(\d+)$"
TEXT = ("input", "output", "gts", "uid", "request_id")  # fields that are text, whatever they hold


def numbers_from_text(df: pl.DataFrame) -> pl.DataFrame:
    """The legacy writer's numbers written as text (``default=str``: "0.02") as numbers: every
    text field but the prompt, response and ids whose values all read as numbers."""
    out = {}
    for name in df.columns:
        column = df[name]
        if name in TEXT or column.dtype != pl.String:
            continue
        numbers = column.str.strip_chars().cast(pl.Float64, strict=False)
        if numbers.null_count() == column.null_count() and column.null_count() < len(column):
            out[name] = numbers
    return df.with_columns(**out) if out else df


class Verl(Preset):
    name = "verl"
    framework = "verl"
    switch = "trainer.rollout_data_dir=DIR (trainer.validation_data_dir=DIR for validation)"
    writes = "DIR/{step}.jsonl"
    patterns = ("*.jsonl", "*.jsonl.gz", "*.jsonl.zst")
    marks = (frozenset({"input", "output", "score", "step"}),)
    convention = "verl"

    def convert(self, path: str, options: PresetOptions) -> Converted:
        records, lines = json_records(path)
        df = numbers_from_text(frame(records))
        need(path, set(df.columns), ["score"], self.framework)
        step = (
            df["step"]
            if "step" in df.columns
            else pl.Series([step_of(path, r"(\d+)\.jsonl")] * df.height)
        )
        warnings = []
        if "uid" in df.columns:
            parts = df["uid"].cast(pl.String).str.extract_groups(UID)
            bad = parts.struct.field("1").is_null().to_numpy()
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                msg = (
                    f"{where(path, int(lines[row]), 'uid', line=True)}: {df['uid'][row]!r} is "
                    "not verl V1's {prompt uuid}_{session}_{output}. Hint: check the file"
                )
                raise DataError(msg)
            prompt = parts.struct.field("1")
            ids = {
                "prompt_id": prompt,
                "rollout_id": prompt + "_" + parts.struct.field("2"),
                "segment_index": parts.struct.field("3").cast(pl.Int64),
            }
        else:
            need(path, set(df.columns), ["input"], self.framework)
            scope = step.cast(pl.String) + ":"
            ids = {
                "prompt_id": scope + df["input"].cast(pl.String),
                "rollout_id": scope + pl.Series(lines).cast(pl.String),
            }
            warnings.append(
                "verl's legacy dump has no uid: a group is the rows of a step with the same "
                "prompt text, so two dataset rows with the same text count as one group"
            )
        canonical = {**ids, "reward": number(df, "score", path, lines), "step": step}
        table = df.drop([c for c in canonical if c in df.columns]).with_columns(
            **{k: v.alias(k) for k, v in canonical.items()}
        )
        return Converted(table.to_arrow(), lines, warnings)
