"""Frameworks that dump decoded text, a JSON line per rollout, with an explicit reward:
OpenRLHF's ``batch_inference``, AReaL's rollout dump and SkyRL's evaluation dump. Their logs
have no token ids: the outcome methods, ``audit`` and ``schema`` work on them.
"""

from __future__ import annotations

from pathlib import Path

from advcli.errors import DataError, where
from advcli.lazy_imports import np, pl
from advcli.presets.base import (
    Converted,
    Preset,
    PresetOptions,
    frame,
    json_records,
    need,
    number,
    repeated_prompts,
    step_of,
    to_json_text,
    with_canonical,
)


class OpenRlhf(Preset):
    """OpenRLHF writes nothing per rollout while training; ``python -m
    openrlhf.cli.batch_inference --eval_task rm`` (through v0.9) wrote ``{input, output,
    reward}`` lines, ``best_of_n`` samples per prompt: a group is the rows with the same
    ``input``."""

    name = "openrlhf"
    convention = "openrlhf"
    framework = "OpenRLHF"
    switch = "openrlhf.cli.batch_inference --eval_task rm (through v0.9)"
    writes = "the --output_path JSONL"
    patterns = ("*.jsonl",)
    marks = (frozenset({"input", "output", "reward"}),)

    def convert(self, path: str, options: PresetOptions) -> Converted:
        records, lines = json_records(path)
        df = to_json_text(frame(records))
        need(path, set(df.columns), ["input", "output"], self.framework)
        canonical = {
            "prompt_id": df["input"].cast(pl.String),
            "rollout_id": Path(path).name + ":" + pl.Series(lines).cast(pl.String),
        }
        if "reward" in df.columns:
            canonical["reward"] = number(df, "reward", path, lines)
        return Converted(with_canonical(df, canonical).to_arrow(), lines)


class Areal(Preset):
    """AReaL: ``rollout.dump_to_file=True`` → ``.../rollout/{version}/{task_id}.jsonl``, one
    file per prompt (its ``group_size`` samples). A group is the task in its version folder:
    ``task_id`` counts per executor, so it is unique only there."""

    name = "areal"
    convention = "areal"
    framework = "AReaL"
    switch = "rollout.dump_to_file=True"
    writes = "FILEROOT/logs/USER/EXPERIMENT/TRIAL/rollout/{version}/{task_id}.jsonl"
    patterns = ("*.jsonl", "*/*.jsonl", "**/rollout/*/*.jsonl")  # any folder above rollout/
    marks = (frozenset({"task_id", "sample_idx", "reward", "completion"}),)

    def convert(self, path: str, options: PresetOptions) -> Converted:
        records, lines = json_records(path)
        df = to_json_text(frame(records))
        need(path, set(df.columns), ["task_id", "sample_idx", "reward"], self.framework)
        scope = Path(path).parent.name + "/"
        task = scope + df["task_id"].cast(pl.String)
        canonical = {
            "prompt_id": task,
            "rollout_id": task + "-" + df["sample_idx"].cast(pl.String),
            "reward": number(df, "reward", path, lines),
        }
        canonical.update(areal_versions(df, Path(path).parent.name))
        warnings = [AREAL_TRAINS]
        if "original_reward" in df.columns:
            before = number(df, "original_reward", path, lines).to_numpy()
            if (np.abs(canonical["reward"].to_numpy() - before) > 1e-12).any():
                warnings.append(AREAL_NORMALISED)
        return Converted(with_canonical(df, canonical).to_arrow(), lines, warnings)


def areal_versions(df: pl.DataFrame, folder: str) -> dict[str, pl.Series]:
    """The step (the version folder the trainer took the rollout in) and the policy versions
    of its output tokens: ``head_version`` the oldest, ``tail_version`` the newest. AReaL
    before #1408 stamps the prompt's tokens -1 and takes the minimum over every token, so a
    negative head is unknown: the tail stands for it."""
    out: dict[str, pl.Series] = {}
    if folder.isdigit():
        out["step"] = pl.Series([int(folder)] * len(df), dtype=pl.Int64)
    if {"head_version", "tail_version"} <= set(df.columns):
        head, tail = df["head_version"].cast(pl.Int64), df["tail_version"].cast(pl.Int64)
        out["version"] = pl.Series(np.where(head.to_numpy() < 0, tail.to_numpy(), head.to_numpy()))
        out["last_version"] = tail
    return out


AREAL_TRAINS = (
    "AReaL's dump holds rewards, not the advantages it trained on: its actor also scales the "
    "rewards (reward_scaling, reward_bias, reward_clip) before the group norm and whitens the "
    "advantages over the batch's tokens (adv_norm), settings of its config; advcli's areal "
    "convention is the group norm alone (AReaL's reward_norm, to eps / reward_scaling)"
)

AREAL_NORMALISED = (
    "AReaL's workflow normalised these rewards in their group already (reward_normalization: "
    "reward = (original_reward - mean) / (std + 1e-8), the raw reward kept as "
    "original_reward), and its actor trains on reward as it is: `scale='none'` gives that; the "
    "areal convention's group norm would normalise them twice"
)

STEP = r"global_step_(\d+)"  # SkyRL's folder of a step's evaluation

SKYRL_APART = (
    "SkyRL scored as separate groups (its uid, which its eval dump leaves out). Hint: pass "
    "`merge_repeated_prompts=True` to score them as one group (not SkyRL's numbers)"
)


def refuse_step_wise(path: str, lines: np.ndarray, prompts: pl.Series) -> None:
    """Refuse a step-wise dump (``generator.step_wise_trajectories``: a row per turn, a later
    turn's prompt the earlier turns' conversation): SkyRL gives every turn of a trajectory
    the GRPO advantage of its last turn, and the dump does not say which turns make one. A
    prompt that continues another's tells (two adjacent ones in sorted order do, if any)."""
    texts = sorted(set(prompts.drop_nulls().to_list()))
    for before, text in zip(texts[:-1], texts[1:], strict=True):
        if text.startswith(before):
            row = prompts.to_list().index(text)
            first = prompts.to_list().index(before)
            msg = (
                f"{where(path, int(lines[row]), 'input_prompt', line=True)}: its prompt "
                f"continues line {int(lines[first])}'s conversation: a step-wise dump "
                "(generator.step_wise_trajectories, a row per turn), whose trajectories it does "
                "not say, and SkyRL gives every turn its trajectory's last-turn advantage. "
                "Hint: this dump cannot give SkyRL's advantages; dump without step-wise "
                "trajectories"
            )
            raise DataError(msg)


class SkyRl(Preset):
    """SkyRL: ``trainer.dump_eval_results=True`` (the default) →
    ``{export_path}/dumped_evals/global_step_{N}_evals/{data_source}.jsonl``: evaluation
    rollouts only, repeats of a prompt contiguous. SkyRL groups by its uid, a dataset row of
    one data source, which the dump leaves out: a group is the rows of a file (a step's data
    source) with the same ``input_prompt``, and a file whose prompt texts come in other row
    counts than its common one (eval_n_samples_per_prompt) is refused: two dataset rows with
    one text (``--merge-repeated-prompts`` merges them), or a step-wise dump (a row per turn,
    ``generator.step_wise_trajectories``). A list ``score`` (token-level rewards) counts by
    its sum."""

    name = "skyrl"
    convention = "skyrl"
    framework = "SkyRL"
    switch = "trainer.dump_eval_results=True (the default)"
    writes = "EXPORT_PATH/dumped_evals/global_step_{N}_evals/{data_source}.jsonl"
    patterns = ("*_evals/*.jsonl", "dumped_evals/*/*.jsonl", "*.jsonl")
    marks = (frozenset({"input_prompt", "output_response", "score"}),)

    def files(self, inputs: list[str]) -> list[str]:
        return [f for f in super().files(inputs) if Path(f).name != "aggregated_results.jsonl"]

    def convert(self, path: str, options: PresetOptions) -> Converted:
        records, lines = json_records(path)
        df = frame(records)
        need(path, set(df.columns), ["input_prompt", "score"], self.framework)
        df = to_json_text(df)
        scores = [r.get("score") for r in records]
        if any(isinstance(v, list) for v in scores):  # token-level rewards: their sum
            total = [sum(v) if isinstance(v, list) else v for v in scores]
            reward = number(pl.DataFrame({"score": total}), "score", path, lines)
        else:
            reward = number(df, "score", path, lines)
        scope = f"{step_of(path, STEP)}:{Path(path).name}:"
        prompt = scope + df["input_prompt"].cast(pl.String)
        refuse_step_wise(path, lines, df["input_prompt"].cast(pl.String))
        merged = repeated_prompts(path, lines, prompt, df["input_prompt"], within="",
                                  column="input_prompt", apart=SKYRL_APART,
                                  merge=options.merge_repeated_prompts)  # fmt: skip
        canonical = {
            "prompt_id": prompt,
            "rollout_id": f"{scope}{Path(path).name}:" + pl.Series(lines).cast(pl.String),
            "reward": reward,
        }
        return Converted(with_canonical(df, canonical).to_arrow(), lines, merged)
