"""TRL's vLLM importance-sampling correction (``GRPOTrainer._generate_and_score_completions``)
run on the health log (``tests/fixtures/refs/health/log.parquet``, see ``health_inputs.py``): the
``importance_sampling_ratio`` its loss multiplies in and the ``sampling/...`` metrics it logs, for
its four ``vllm_importance_sampling_mode`` values, written to ``tests/fixtures/refs/health/trl.json``.

Source
  TRL 1.16.0 from PyPI (``pip install trl==1.16.0``; torch 2.13.0+cpu, accelerate 1.15.0,
  numpy 2.4.6, pyarrow 26.0.1, Python 3.11). The two blocks of
  ``trl/trainer/grpo_trainer.py`` that compute the correction and its metrics are taken out of the
  installed file with ``ast`` (the ``if self.use_vllm and self.vllm_importance_sampling_correction:``
  statements of ``_generate_and_score_completions``: the one that sets
  ``vllm_importance_sampling_ratio``, about lines 2660-2707, and the one that logs
  ``sampling/...``, about lines 2860-2896), their sha256 checked (another TRL release fails
  loudly) and written into the fixture, and exec'd unchanged with the locals they read:
  ``old_per_token_logps`` (the trainer's recompute, advcli ``trainer_logprobs``),
  ``sampling_per_token_logps`` (vLLM's, advcli ``logprobs``), ``completion_mask``, ``tool_mask``,
  ``device``, ``mode``, TRL's own ``nanmin`` / ``nanmax``, and ``self`` holding the four
  ``vllm_importance_sampling_*`` settings, a ``_metrics`` dict as the trainer's, and an
  accelerator whose ``gather`` returns its argument (one process). TRL's defaults are read from
  ``GRPOConfig`` (its dataclass fields: mode ``sequence_mask``, ``clip_max`` 3.0, ``clip_min``
  None; the class docstring calls ``token_truncate`` the default, the field says otherwise).

Layout (``health_rows.py``): TRL's completion tensors, right-padded (B, T) over the tokens after
the prompt: log-probs padded with 0.0 (as TRL pads ``sampling_per_token_logps``),
``completion_mask`` 1 on each row's response tokens (int64), and ``tool_mask`` (TRL's multi-turn
tool mask: 0 on a tool's reply, padded with 1) = the action mask over the response, so TRL's
``mask = completion_mask * tool_mask`` is the action mask; the rollout with no action token stays
in the batch.

Each case runs twice: ``float64`` (the log's float32 values cast exactly to float64; the suite
compares advcli with these at 1e-6) and ``float32`` (as TRL runs: ``torch.tensor`` of vLLM's floats).

Fixture per case: ``setting`` (TRL's names), ``advcli`` (mode and bounds), and per precision
``importance_sampling_ratio``: token modes a list per row over its action tokens, sequence modes
one value per row (TRL's (B, 1) tensor, which its loss broadcasts over the row's tokens), and
``metrics``: what the block appended to ``self._metrics['train']``, one value each.

Run (CI never runs it; needs the venv above)::

    /tmp/fw/trl/bin/python tools/refs/make_health_trl.py
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import math
import os
import sys
import textwrap
from collections import defaultdict
from types import SimpleNamespace

import torch
import trl
from trl.trainer import grpo_trainer
from trl.trainer.grpo_config import GRPOConfig
from trl.trainer.utils import nanmax, nanmin

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import health_rows  # noqa: E402

VERSION = "1.16.0"
BLOCK_SHA256 = {
    "correction": "9a91e46a49e803df3610df7d8cff9673501ec0909b769df060615fea8d3d8fc5",
    "metrics": "0a29a130fdb6b779874c48348a303c891ce417c8448b3b5a5c4c2a7bb5a480dd",
}
PRECISIONS = {"float64": torch.float64, "float32": torch.float32}
GUARD = "self.use_vllm and self.vllm_importance_sampling_correction"


def take_blocks():
    """The two ``if self.use_vllm and self.vllm_importance_sampling_correction:`` statements of
    ``_generate_and_score_completions``, by what each first does, as dedented source text."""
    path = inspect.getsourcefile(grpo_trainer)
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    trainer = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GRPOTrainer")
    method = next(
        n
        for n in trainer.body
        if isinstance(n, ast.FunctionDef) and n.name == "_generate_and_score_completions"
    )
    found = {}
    for node in ast.walk(method):
        if isinstance(node, ast.If) and ast.unparse(node.test) == GUARD:
            first = ast.unparse(node.body[0])
            if first.startswith("mask = completion_mask if tool_mask is None"):
                found["correction"] = node
            elif first.startswith(
                "delta = torch.abs(old_per_token_logps - sampling_per_token_logps)"
            ):
                found["metrics"] = node
    assert sorted(found) == ["correction", "metrics"], sorted(found)
    blocks, where = {}, {}
    for name, node in found.items():
        blocks[name] = textwrap.dedent("".join(lines[node.lineno - 1 : node.end_lineno]))
        sha = hashlib.sha256(blocks[name].encode()).hexdigest()
        assert sha == BLOCK_SHA256[name], f"TRL's {name} block changed: {sha}"
        where[name] = {"lines": [node.lineno, node.end_lineno], "sha256": sha}
    return blocks, where


class OneProcess:
    """``self.accelerator`` on one process: gathering a tensor returns it."""

    def gather(self, tensor):
        return tensor


def run_case(case, blocks, batch):
    out = {}
    for precision, dtype in PRECISIONS.items():
        trainer = SimpleNamespace(
            use_vllm=True,
            vllm_importance_sampling_correction=True,
            **case["setting"],
            accelerator=OneProcess(),
            _metrics={"train": defaultdict(list)},
        )
        scope = {
            "self": trainer,
            "torch": torch,
            "math": math,
            "nanmin": nanmin,
            "nanmax": nanmax,
            "device": torch.device("cpu"),
            "mode": "train",
            "old_per_token_logps": torch.tensor(batch.trainer, dtype=torch.float32).to(dtype),
            "sampling_per_token_logps": torch.tensor(batch.sampler, dtype=torch.float32).to(dtype),
            "completion_mask": torch.tensor(
                (batch.response_lengths[:, None] > range(batch.response_mask.shape[1])).astype(
                    "int64"
                )
            ),
            "tool_mask": tool_mask(batch),
        }
        exec(compile(blocks["correction"], "grpo_trainer.py:correction", "exec"), scope)
        exec(compile(blocks["metrics"], "grpo_trainer.py:metrics", "exec"), scope)
        ratio = scope["vllm_importance_sampling_ratio"].double().numpy()
        metrics = {}
        for key, values in trainer._metrics["train"].items():
            assert len(values) == 1, (key, values)
            metrics[key] = values[0]
        out[precision] = {
            "importance_sampling_ratio": [float(r) for r in ratio[:, 0]]
            if scope["sequence_level_is"]
            else health_rows.per_action_token(ratio, batch),
            "metrics": metrics,
        }
    return {**case, **out}


def tool_mask(batch):
    """The action mask over the response, padded with 1 as TRL pads ``tool_mask``."""
    mask = batch.response_mask.copy()
    width = mask.shape[1]
    for i, n in enumerate(batch.response_lengths):
        mask[i, n:width] = 1
    return torch.tensor(mask)


def case(mode, clip_max, clip_min=None):
    name = mode if clip_min is None else f"{mode}_clip_min"
    bounds = [0.0 if clip_min is None else clip_min, clip_max]
    setting = {
        "vllm_importance_sampling_mode": mode,
        "vllm_importance_sampling_clip_min": clip_min,
        "vllm_importance_sampling_clip_max": clip_max,
    }
    return {
        "name": name,
        "setting": setting,
        "advcli": {"correction": mode.replace("_", "-"), "correction_bounds": bounds},
    }


CASES = [
    case("token_truncate", 3.0),
    case("token_mask", 3.0),
    case("sequence_truncate", 3.0),
    case("sequence_mask", 3.0),
    case("token_truncate", 3.0, clip_min=0.5),
    case("token_mask", 3.0, clip_min=0.5),
    case("sequence_truncate", 3.0, clip_min=0.5),
    case("sequence_mask", 3.0, clip_min=0.5),
]


def main():
    assert trl.__version__ == VERSION, trl.__version__
    blocks, where = take_blocks()
    batch = health_rows.read_batch()
    defaults = GRPOConfig.__dataclass_fields__
    fixture = {
        "made_by": "tools/refs/make_health_trl.py",
        "framework": "trl",
        "version": VERSION,
        "path": "trl/trainer/grpo_trainer.py",
        "function": "GRPOTrainer._generate_and_score_completions",
        "blocks": where,
        "torch": torch.__version__,
        "log": "tests/fixtures/refs/health/log.parquet",
        "log_sha256": health_rows.log_sha256(),
        "about": (
            "TRL's vLLM IS correction on the health log. old_per_token_logps = trainer_logprobs, "
            "sampling_per_token_logps = logprobs (per-token diff = δ on action tokens, 0 "
            "elsewhere); sequence modes: ρ = exp(Σ δ over the row's action tokens), one per row "
            "(the rollout with no action token gets exp(0) = 1 and counts in the sequence "
            "metrics, which run over every row). Truncate modes clamp to [clip_min, clip_max] "
            "(no lower clamp when clip_min is None); mask modes set ρ outside [clip_min, "
            "clip_max] to 0. Metrics: sampling_logp_difference/{mean,max} of |δ| over action "
            "tokens; importance_sampling_ratio/{min,mean,max} over action tokens (token modes) or "
            "over rows (sequence modes), after truncation/masking. 'float64' = tensors float64 "
            "(compare at 1e-6), 'float32' = as TRL runs."
        ),
        "defaults": {
            name: defaults[name].default
            for name in (
                "vllm_importance_sampling_correction",
                "vllm_importance_sampling_mode",
                "vllm_importance_sampling_clip_min",
                "vllm_importance_sampling_clip_max",
            )
        },
        "rows": health_rows.row_records(batch),
        "prompt_length": batch.prompt_length,
        "cases": [run_case(c, blocks, batch) for c in CASES],
    }
    print(health_rows.write("trl.json", fixture))


if __name__ == "__main__":
    main()
