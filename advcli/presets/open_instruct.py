"""open-instruct's GRPO rollout traces (``grpo_fast``, ``--save_traces``; open_instruct/rl_utils.py
``RolloutRecord``, main @e6c3044) → ``{rollouts_save_path}/{run_name}_rollouts_{shard:06d}.jsonl``
(a shard every 10,000 samples, a step never split), beside ``{run_name}_metadata.jsonl`` (the
run name, git commit and model: not rollouts, not read).

A line is one sample: ``step`` (the data-preparation step, from 0), ``sample_idx`` (its place in
the step's batch), ``prompt_idx`` (= sample_idx // num_samples_per_prompt_rollout: its group
among the step's groups kept), ``prompt_tokens``, ``response_tokens``, ``reward``, the
``advantage`` it was trained on (float64, unrounded), ``finish_reason``, ``dataset``,
``ground_truth``, ``request_info`` (tool statistics) and ``logprobs`` (per response token; a bare
``NaN`` for an empty completion). A group is run + step + prompt_idx; the rollout is the prompt
then the response, whose tokens are the actions. open-instruct writes no mask of the tool-output
tokens inside a response (``mask_tool_use``), so with tools they count as actions too (said).

The advantage (data_loader.py ``_data_preparation_loop``) is the reward minus the group's mean
(``advantage_normalization_type`` ``centered``, the default since 2026-03-20) or divided by the
group's population std + 1e-8 (``standard``, the default before): the ``open-instruct``
convention, and ``--scale group``. Groups of one reward (np.std == 0) are dropped before the
advantage and never written (``filter_zero_std_samples``, on by default).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from advcli.errors import DataError
from advcli.lazy_imports import np, pl
from advcli.presets.base import (
    Converted,
    Preset,
    PresetOptions,
    Setting,
    floats,
    frame,
    json_records,
    json_text,
    need,
    number,
    with_canonical,
)

TOOL_TOKENS = (
    "open-instruct writes no mask of the tool-output tokens inside a response "
    "(mask_tool_use): in rollouts that called a tool they count as action tokens here"
)


class OpenInstruct(Preset):
    name = "open-instruct"
    framework = "open-instruct"
    switch = "grpo_fast --save_traces --rollouts_save_path DIR"
    writes = "DIR/{run_name}_rollouts_{shard:06d}.jsonl"
    patterns = ("*_rollouts_[0-9][0-9][0-9][0-9][0-9][0-9].jsonl",)
    marks = (frozenset({"step", "sample_idx", "prompt_idx", "response_tokens", "advantage"}),)
    convention = "open-instruct"
    logged = "source_advantage"

    def convert(self, path: str, options: PresetOptions) -> Converted:
        records, lines = json_records(path)
        fields: set[str] = set().union(*records)
        need(path, fields, ["step", "sample_idx", "prompt_idx", "prompt_tokens",
                            "response_tokens", "reward"], self.framework)  # fmt: skip
        df = frame([{k: v for k, v in r.items() if k not in READ} for r in records])
        run = re.sub(r"_rollouts_\d+\.jsonl$", "", Path(path).name) + ":"
        group = run + df["step"].cast(pl.String) + ":" + df["prompt_idx"].cast(pl.String)
        canonical: dict[str, pl.Series] = {
            "prompt_id": group,
            "rollout_id": run + df["step"].cast(pl.String) + ":" + df["sample_idx"].cast(pl.String),
            "reward": number(df, "reward", path, lines),
            **tokens(path, records, lines),
        }
        if "advantage" in fields:
            logged = frame([{"advantage": r.get("advantage")} for r in records])
            canonical["source_advantage"] = number(logged, "advantage", path, lines)
        nested = {n: pl.Series([json_text(r.get(n)) for r in records], dtype=pl.String)
                  for n in NESTED if any(n in r for r in records)}  # fmt: skip
        out = with_canonical(df.with_columns(**nested), canonical)
        warnings = [TOOL_TOKENS] if any(_called_a_tool(r) for r in records) else []
        spans = out.group_by("prompt_id").agg(pl.col("reward").max() - pl.col("reward").min())
        if (spans["reward"] > 0).all():
            warnings.append(FILTERED)
        again = out["rollout_id"].is_duplicated() & ~out["rollout_id"].is_last_distinct()
        if again.any():  # a resumed run appends to the same file
            warnings.append(
                f"{path}: {int(again.sum())} sample(s) logged again under the same step and "
                "sample_idx (a resumed run appends to its trace file): the later line is read"
            )
            out, lines = out.filter(~again), lines[~again.to_numpy()]
        return Converted(out.to_arrow(), lines, warnings)

    def settings(self, names: list[str], options: PresetOptions) -> list[Setting]:
        return [
            Setting("grpo", own=True),
            Setting("grpo", (("scale", "group"),), note="advantage_normalization_type "
                    "standard, the default before 2026-03-20"),
        ]  # fmt: skip


FILTERED = (
    "open-instruct leaves out of its traces the groups whose rewards are all equal "
    "(filter_zero_std_samples, on by default): no group here is zero-variance, and audit "
    "cannot count the ones dropped"
)

NESTED = ("ground_truth", "request_info")
"""Fields kept as JSON text: the dataset's answer (any shape) and the tool statistics."""

READ = (*NESTED, "prompt_tokens", "response_tokens", "logprobs", "advantage")
"""Fields not passed through as they are: read into advcli's columns, or kept as JSON text."""


def tokens(path: str, records: list[dict[str, Any]], lines: np.ndarray) -> dict[str, pl.Series]:
    """Each sample's prompt then response as one sequence: the response's tokens the actions,
    its log-probabilities on them (NaN on the prompt)."""
    ids: list[list[int]] = []
    masks: list[list[int]] = []
    logprobs: list[list[float]] = []
    for record, line in zip(records, lines.tolist(), strict=True):
        prompt, response = record.get("prompt_tokens"), record.get("response_tokens")
        if not isinstance(prompt, list) or not isinstance(response, list):
            msg = (
                f"{path}: line {line}, column 'prompt_tokens': prompt_tokens and "
                "response_tokens must be lists of token ids. Hint: check the file"
            )
            raise DataError(msg)
        given = record.get("logprobs")
        if given is None:
            given = [np.nan] * len(response)
        if not isinstance(given, list) or len(given) != len(response):
            count = len(given) if isinstance(given, list) else "no list of"
            msg = (
                f"{path}: line {line}, column 'logprobs': {count} log-probabilities for "
                f"{len(response)} response tokens. Hint: check the file"
            )
            raise DataError(msg)
        values = floats(given, f"{path}: line {line}, column 'logprobs': a value")
        ids.append(prompt + response)
        masks.append([0] * len(prompt) + [1] * len(response))
        logprobs.append([np.nan] * len(prompt) + values)
    return {
        "input_ids": pl.Series(ids, dtype=pl.List(pl.Int32)),
        "action_mask": pl.Series(masks, dtype=pl.List(pl.Int8)),
        "logprobs": pl.Series(logprobs, dtype=pl.List(pl.Float32)),
    }


def _called_a_tool(record: dict[str, Any]) -> bool:
    info = record.get("request_info")
    return isinstance(info, dict) and bool(info.get("num_calls"))
