"""Fixture writers: the same rollouts written as each framework writes its dumps.

Each writer follows the framework's dump code as described in docs/frameworks.md (fields,
types, wrapping, row order, file names). ``reference_log`` writes the same rollouts in advcli's
own schema, so a test can check that a preset gives the numbers advcli gives on its own format.
"""

from __future__ import annotations

import io
import json
import pickle
import random
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


@dataclass
class Rollout:
    step: int
    prompt: int  # the prompt's number within its step
    sample: int  # its number within the prompt's group
    prompt_text: str
    completion: str
    prompt_ids: list[int]
    completion_ids: list[int]
    reward: float

    @property
    def uuid(self) -> str:
        return f"{self.step:04d}aaaa-{self.prompt:04d}-4bbb-8ccc-000000000000"

    @property
    def tokens(self) -> list[int]:
        return self.prompt_ids + self.completion_ids

    @property
    def mask(self) -> list[int]:
        return [0] * len(self.prompt_ids) + [1] * len(self.completion_ids)


def rollouts(steps: int = 2, prompts: int = 3, group: int = 4, seed: int = 0) -> list[Rollout]:
    """Rollouts of ``steps`` steps, ``prompts`` prompts each, ``group`` samples per prompt; the
    first prompt of each step has all rewards equal (a zero-variance group). Prompt texts repeat
    across steps (a key unique only within a step)."""
    rng = np.random.default_rng(seed)
    out = []
    for step in range(1, steps + 1):
        for p in range(prompts):
            prompt_ids = [int(t) for t in rng.integers(1, 30000, 3 + p)]
            for s in range(group):
                reward = 1.0 if p == 0 else float(rng.integers(0, 3) / 2)
                out.append(Rollout(
                    step=step,
                    prompt=p,
                    sample=s,
                    prompt_text=f"user\nQuestion {p}: what is {p} + {p}?\nassistant\n",
                    completion=f"answer {s} for {p} #### {2 * p + s % 2}",
                    prompt_ids=prompt_ids,
                    completion_ids=[int(t) for t in rng.integers(1, 30000, 2 + (s + p) % 4)],
                    reward=reward,
                ))  # fmt: skip
    return out


def write_lines(path: Path, records: list[dict], *, python_json: bool = False) -> Path:
    """JSON lines; ``python_json``: as Python's json writes them (bare NaN)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False, allow_nan=python_json) + "\n")
    return path


def reference_log(
    path: Path, rs: list[Rollout], *, tokens: bool, key: str = "uuid", batch: bool = False
) -> Path:
    """The rollouts in advcli's own schema (rows in the order given); ``batch``: each step a
    batch (the rows whitened together)."""
    rows = []
    for r in rs:
        row = {
            "prompt_id": r.uuid if key == "uuid" else f"{r.step}:{r.prompt}",
            "rollout_id": f"{r.step}:{r.prompt}:{r.sample}",
            "reward": r.reward,
            **({"batch": str(r.step)} if batch else {}),
        }
        if tokens:
            row.update(input_ids=r.tokens, action_mask=r.mask)
        rows.append(row)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


# --------------------------------------------------------------------------- verl


def verl_v1(folder: Path, rs: list[Rollout]) -> Path:
    """verl's V1 trainer: ``{step}.jsonl``, rows sorted by uid ``{uuid}_{session}_{output}``."""
    for step in sorted({r.step for r in rs}):
        records = [
            {"input": r.prompt_text, "output": r.completion, "gts": str(2 * r.prompt),
             "score": r.reward, "step": step, "uid": f"{r.uuid}_{r.sample}_0"}
            for r in rs if r.step == step
        ]  # fmt: skip
        write_lines(folder / f"{step}.jsonl", sorted(records, key=lambda x: x["uid"]))
    return folder


def verl_legacy(folder: Path, rs: list[Rollout]) -> Path:
    """verl's legacy trainer: no uid, rows reordered by batch balancing (shuffled), extra
    reward info (``acc``), numbers the writer turned into text, a bare NaN."""
    rng = random.Random(1)
    for step in sorted({r.step for r in rs}):
        records = [
            {"input": r.prompt_text, "output": r.completion, "gts": str(2 * r.prompt),
             "score": str(r.reward) if i % 5 == 0 else r.reward, "step": step,
             "acc": float("nan") if i == 1 else r.reward > 0}
            for i, r in enumerate(x for x in rs if x.step == step)
        ]  # fmt: skip
        rng.shuffle(records)
        write_lines(folder / f"{step}.jsonl", records, python_json=True)
    return folder


# --------------------------------------------------------------------------- TRL


def trl_advantages(rewards: np.ndarray, group: int) -> np.ndarray:
    """TRL's GRPO advantage: (r - mean) / (std + 1e-4), std with Bessel's correction."""
    g = rewards.reshape(-1, group)
    return ((g - g.mean(1, keepdims=True)) / (g.std(1, ddof=1, keepdims=True) + 1e-4)).ravel()


def trl(folder: Path, rs: list[Rollout], group: int = 4) -> Path:
    """``completions/completions_{step:05d}.parquet``: step, prompt, completion, one column per
    reward function (accuracy NaN where the function returned None), advantage."""
    out = folder / "completions"
    out.mkdir(parents=True, exist_ok=True)
    for step in sorted({r.step for r in rs}):
        part = [r for r in rs if r.step == step]
        accuracy = np.array([r.reward for r in part])
        fmt = np.array([0.5 if r.sample % 2 else 0.0 for r in part])
        accuracy_logged = accuracy.copy()
        accuracy_logged[1] = np.nan  # the function returned None: nansum counts it as 0
        total = np.nan_to_num(accuracy_logged) + 2.0 * fmt
        table = pa.table({
            "step": pa.array([step] * len(part), pa.int64()),
            "prompt": pa.array([r.prompt_text for r in part], pa.large_string()),
            "completion": pa.array([r.completion for r in part], pa.large_string()),
            "accuracy_reward": accuracy_logged,
            "format_reward": fmt,
            "advantage": trl_advantages(total, group),
        })  # fmt: skip
        pq.write_table(table, out / f"completions_{step:05d}.parquet")
    return folder


def trl_rewards(rs: list[Rollout]) -> list[float]:
    """The reward TRL trained on for the rows ``trl`` writes (weights 1 and 2)."""
    out = []
    for step in sorted({r.step for r in rs}):
        for i, r in enumerate(x for x in rs if x.step == step):
            accuracy = 0.0 if i == 1 else r.reward
            out.append(accuracy + 2.0 * (0.5 if r.sample % 2 else 0.0))
    return out


# --------------------------------------------------------------------------- OpenRLHF


def openrlhf(path: Path, rs: list[Rollout]) -> Path:
    """``batch_inference --eval_task rm``: prompts * best_of_n order (interleaved)."""
    ordered = sorted(rs, key=lambda r: (r.sample, r.step, r.prompt))
    records = [
        {"input": f"{r.step} {r.prompt_text}", "output": r.completion, "reward": r.reward}
        for r in ordered
    ]
    return write_lines(path, records)


# --------------------------------------------------------------------------- NeMo-RL


def nemo_rl_advantages(rewards: np.ndarray, group: int) -> np.ndarray:
    """NeMo-RL's GRPO advantage: leave-one-out baseline, std of the others (ddof 1); no
    division where that std is 0."""
    g = rewards.reshape(-1, group)
    n = group
    others = (g.sum(1, keepdims=True) - g) / (n - 1)
    sq = ((g**2).sum(1, keepdims=True) - g**2) / (n - 1)
    with np.errstate(invalid="ignore"):
        std = np.nan_to_num(np.sqrt((sq - others**2) * ((n - 1) / (n - 2))))
    adv = g - others
    return np.where(std > 0, adv / (std + 1e-6), adv).ravel()


def nemo_rl(folder: Path, rs: list[Rollout], group: int = 4) -> Path:
    """``train_data_step{N}.jsonl``: every value a one-element list, token lists padded to the
    batch's longest row, the advantage broadcast over every position."""
    for step in sorted({r.step for r in rs}):
        part = [r for r in rs if r.step == step]
        width = max(len(r.tokens) for r in part)
        adv = nemo_rl_advantages(np.array([r.reward for r in part]), group)
        records = []
        for idx, (r, a) in enumerate(zip(part, adv, strict=True)):
            pad = width - len(r.tokens)
            records.append({
                "content": [[r.prompt_text, r.completion]],
                "rewards": [r.reward],
                "input_lengths": [len(r.tokens)],
                "token_ids": [r.tokens + [0] * pad],
                "token_loss_mask": [r.mask + [0] * pad],
                "sample_loss_mask": [1.0],
                "advantages": [[float(a)] * width],
                "generation_logprobs": [[0.0] * len(r.prompt_ids) + [-0.5] * len(r.completion_ids)
                                        + [0.0] * pad],
                "prev_logprobs": [[0.0] + [-0.4] * (len(r.tokens) - 1) + [0.0] * pad],
                "idx": idx,
            })  # fmt: skip
        write_lines(folder / "exp_001" / f"train_data_step{step}.jsonl", records, python_json=True)
    return folder


# --------------------------------------------------------------------------- AReaL, SkyRL, ROLL


def areal(folder: Path, rs: list[Rollout]) -> Path:
    """``rollout/{version}/{task_id}.jsonl``: one file per prompt's group; task ids restart."""
    for r in rs:
        path = folder / "rollout" / str(r.step) / f"{r.prompt}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"task_id": r.prompt, "sample_idx": r.sample, "seqlen": len(r.tokens),
                  "prompt_len": len(r.prompt_ids), "head_version": r.step - 1,
                  "tail_version": r.step, "reward": r.reward, "prompt": r.prompt_text,
                  "completion": r.completion}  # fmt: skip
        with open(path, "a") as fh:
            fh.write(json.dumps(record) + "\n")
    return folder


def skyrl(folder: Path, rs: list[Rollout]) -> Path:
    """``dumped_evals/global_step_{N}_evals/{data_source}.jsonl`` plus aggregated results."""
    for step in sorted({r.step for r in rs}):
        evals = folder / "dumped_evals" / f"global_step_{step}_evals"
        records = [
            {"input_prompt": r.prompt_text, "output_response": r.completion,
             "score": [0.0, r.reward] if r.sample == 3 else r.reward, "stop_reason": "stop",
             "env_class": "gsm8k", "env_extras": {"data_source": "openai/gsm8k"},
             "data_source": "openai/gsm8k"}
            for r in rs if r.step == step
        ]  # fmt: skip
        write_lines(evals / "openai_gsm8k.jsonl", records)
        write_lines(evals / "aggregated_results.jsonl", [{"pass_at_1": 0.5}])
    return folder


def roll(folder: Path, rs: list[Rollout]) -> Path:
    """``rollout_dump_data.step_{N}.jsonl``: one JSON object of column lists."""
    folder.mkdir(parents=True, exist_ok=True)
    for step in sorted({r.step for r in rs}):
        part = [r for r in rs if r.step == step]
        columns = {
            "id": [f"gsm8k-{r.prompt}" for r in part],
            "prompt": [r.prompt_text for r in part],
            "responses": [r.completion for r in part],
            "scores": [r.reward for r in part],
            "sampling_params": [json.dumps({"temperature": 1.0})] * len(part),
            "global_step": [step] * len(part),
        }
        (folder / f"rollout_dump_data.step_{step}.jsonl").write_text(json.dumps(columns) + "\n")
    return folder


# --------------------------------------------------------------------------- slime / miles


def torch_save(obj: object, path: Path) -> Path:
    """What ``torch.save`` writes for plain values: a zip of ``{name}/data.pkl`` (protocol 2)
    and its small records, stored uncompressed."""
    name = path.stem
    buf = io.BytesIO()
    pickle.Pickler(buf, protocol=2).dump(obj)
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr(f"{name}/data.pkl", buf.getvalue())
        z.writestr(f"{name}/.format_version", "1")
        z.writestr(f"{name}/.storage_alignment", "64")
        z.writestr(f"{name}/byteorder", "little")
        z.writestr(f"{name}/version", "3\n")
        z.writestr(f"{name}/.data/serialization_id", "0123456789")
    return path


def slime(folder: Path, rs: list[Rollout], *, split_last: bool = False) -> Path:
    """``rollout_data/{rollout_id}.pt``: ``{"rollout_id": N, "samples": [Sample.to_dict()]}``.
    ``split_last``: the last sample of each step is split into two samples sharing a
    ``rollout_id`` (both with the final reward)."""
    index = 0
    for step in sorted({r.step for r in rs}):
        samples = []
        for group_index, r in enumerate(x for x in rs if x.step == step):
            sample = {
                "group_index": (step - 1) * 100 + r.prompt, "index": index, "rollout_id": None,
                "prompt": [{"role": "user", "content": r.prompt_text}], "tokens": r.tokens,
                "response": r.completion, "response_length": len(r.completion_ids),
                "label": str(2 * r.prompt), "reward": {"acc": r.reward, "fmt": 0.0},
                "loss_mask": [1] * len(r.completion_ids), "weight_versions": ["v1"],
                "rollout_log_probs": [-0.25] * len(r.completion_ids), "remove_sample": False,
                "teacher_log_probs": [-0.5] * len(r.completion_ids),
                "status": "truncated" if r.sample == 3 else "completed",
                "metadata": {"turns": 1, "group": group_index},
            }  # fmt: skip
            index += 1
            samples.append(sample)
        torch_save({"rollout_id": step, "samples": samples}, folder / "rollout_data" / f"{step}.pt")
    return folder


# --------------------------------------------------------------------------- prime-rl


def prime_rl(folder: Path, rs: list[Rollout]) -> Path:
    """``rollouts/step_{N}/train/effective/traces.jsonl``: one verifiers episode per line; the
    prompt and the completion are two nodes of one path; the advantage, on the sampled tokens,
    is the reward minus the group's mean (prime-rl's GRPO)."""
    means: dict[str, list[float]] = {}
    for r in rs:
        means.setdefault(r.uuid, []).append(r.reward)
    for step in sorted({r.step for r in rs}):
        episodes = []
        for r in (x for x in rs if x.step == step):
            advantage = r.reward - float(np.mean(means[r.uuid]))
            nodes = [
                {"parent": None, "message": {"role": "user", "content": r.prompt_text},
                 "sampled": False, "token_ids": r.prompt_ids,
                 "mask": [False] * len(r.prompt_ids)},
                {"parent": 0, "message": {"role": "assistant", "content": r.completion},
                 "sampled": True, "token_ids": r.completion_ids,
                 "mask": [True] * len(r.completion_ids),
                 "logprobs": [-0.3] * len(r.completion_ids),
                 "advantages": [advantage] * len(r.completion_ids)},
            ]  # fmt: skip
            episodes.append({
                "id": f"ep-{step}-{r.prompt}-{r.sample}", "env": {"id": "e", "name": "gsm8k"},
                "task": {"type": "qa", "key": f"q{r.prompt}"}, "group": {"id": r.uuid},
                "run": {"type": "train", "id": "run-1", "work": {"type": "rollout", "step": step}},
                "ok": True, "errors": [],
                "traces": [{"rewards": {"correct": {"score": r.reward, "weight": 1.0},
                                        "format": {"score": 1.0, "weight": 0.0}},
                            "nodes": nodes}],
            })  # fmt: skip
        write_lines(folder / "rollouts" / f"step_{step}" / "train" / "effective" / "traces.jsonl",
                    episodes)  # fmt: skip
    return folder
