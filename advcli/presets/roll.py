"""ROLL (RLVR pipeline): ``rollout_dump_dir`` (an absolute path) →
``{dir}/rollout_dump_data.step_{N}.jsonl``, holding ONE JSON object whose values are column
lists: the dataset's columns (``id``, ``prompt``, ``ground_truth``, ...), ``responses``,
``scores`` and ``global_step``. A group is the rows of a step with the same dataset ``id``.
Errors name the row (the element of the lists), the whole step being one line.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from advcli.errors import DataError
from advcli.io import jsonl
from advcli.lazy_imports import np, pl
from advcli.presets.base import (
    Converted,
    Preset,
    PresetOptions,
    frame,
    need,
    number,
    step_of,
    to_json_text,
)


class Roll(Preset):
    name = "roll"
    convention = "roll"
    framework = "ROLL"
    switch = "rollout_dump_dir=/ABSOLUTE/PATH"
    writes = "DIR/rollout_dump_data.step_{N}.jsonl"
    patterns = ("rollout_dump_data.step_*.jsonl",)
    marks = (frozenset({"responses", "scores"}),)

    def convert(self, path: str, options: PresetOptions) -> Converted:
        data = jsonl.read_bytes(path)
        try:
            columns: Any = orjson.loads(data)
        except orjson.JSONDecodeError:
            try:
                columns = json.loads(data)
            except ValueError as exc:
                msg = f"{path}: not a JSON object ({exc}). Hint: ROLL writes one object of lists"
                raise DataError(msg) from None
        if not isinstance(columns, dict):
            msg = f"{path}: expected one JSON object of column lists, saw {type(columns).__name__}"
            raise DataError(msg + ". Hint: check the file and `from_`")
        need(path, set(columns), ["id", "scores"], self.framework)
        n = len(columns["scores"])
        rows = []
        for name, values in columns.items():
            if isinstance(values, list) and len(values) != n:
                msg = (
                    f"{path}: field '{name}' has {len(values)} values but 'scores' has {n}. "
                    "Hint: every column list has one value per rollout"
                )
                raise DataError(msg)
        for i in range(n):
            rows.append({k: v[i] if isinstance(v, list) else v for k, v in columns.items()})
        df = to_json_text(frame(rows))
        step = df["global_step"] if "global_step" in df.columns else None
        if step is None:
            step = pl.Series([step_of(path, r"step_(\d+)")] * n)
        scope = step.cast(pl.String) + ":"
        canonical = {
            "prompt_id": scope + df["id"].cast(pl.String),
            "rollout_id": scope + pl.Series(np.arange(n)).cast(pl.String),
            "reward": number(df, "scores", path, None),
        }
        table = df.drop([c for c in canonical if c in df.columns]).with_columns(
            **{k: v.alias(k) for k, v in canonical.items()}
        )
        return Converted(table.to_arrow())
