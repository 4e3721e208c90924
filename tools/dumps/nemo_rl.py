"""Write real NeMo-RL GRPO logs (`train_data_step{N}.jsonl`, `val_data_step{N}.jsonl`) as fixtures.

Made from NeMo-RL github.com/NVIDIA-NeMo/RL @ 7ea279abfbeb698b092856d0dab61e7cf39bc909 (2026-08-22),
torch 2.13.0+cpu, transformers 5.24.0, tokenizers 0.23.3, pydantic 2.14.4, omegaconf 2.3, numpy
2.4.6, Python 3.11, on CPU, offline. NeMo-RL is not on PyPI: its source comes from the bare git dir
that the search tool's `fetch github:NVIDIA-NeMo/RL` returned.

Run (from the repository root, with the framework venv, never as part of CI):

    /tmp/fw/src/bin/python tools/dumps/nemo_rl.py OUTDIR --nemo-src PATH [--fixtures DIR] [CASE ...]

PATH is a bare git clone of NVIDIA-NeMo/RL (`nemo_rl/` and `examples/`
are then extracted from its HEAD into OUTDIR/src) or a folder that already holds the extracted
`nemo_rl/` and `examples/` (the commit is then read from PATH/COMMIT if present). For each case
NeMo's own `Logger` (base dir OUTDIR/<case>/logs, experiment dir from NeMo's
`get_next_experiment_dir`) writes `exp_001/train_data_step{N}.jsonl` (and `val_data_step{N}.jsonl`);
that `exp_001/` folder is copied unchanged to `tests/fixtures/real/nemo-rl/<case>/exp_001/` with a
`truth.json` beside it. Two runs write identical files.

What is NeMo-RL's own code, unchanged:
- imported from the extracted tree as modules: `BatchedDataDict` (nemo_rl/distributed/
  batched_data_dict.py, incl. `repeat_interleave`, `make_microbatch_iterator`),
  `batched_message_log_to_flat_message`, `get_keys_from_message_log` (nemo_rl/data/
  llm_message_utils.py), `rl_collate_fn` (nemo_rl/data/collate_fn.py), `math_hf_data_processor`
  (nemo_rl/data/processors.py, the processor examples/configs/grpo_math_1B.yaml names, with its
  prompt file examples/prompts/cot.txt), `TaskDataSpec`, `EnvironmentReturn`,
  `RewardShapingConfig`, `Timer`;
- taken out of their files with `ast` (the parsed nodes compiled as they are, line numbers kept;
  only `from __future__ import annotations` is switched on so that type hints naming modules we do
  not load stay unevaluated): `calculate_baseline_and_std_per_prompt`,
  `get_gdpo_reward_component_keys` (algorithms/utils.py); `AdvEstimatorConfig`,
  `GRPOAdvantageEstimator` (algorithms/advantage_estimator.py); `LoggerInterface`, `Logger` (incl.
  `log_batched_dict_as_jsonl`), `get_next_experiment_dir`, `print_message_log_samples`
  (utils/logger.py); `RewardScalingConfig`, `AsyncGRPOConfig`, `GRPOConfig`, `scale_rewards`,
  `dynamic_sampling`, `extract_initial_prompt_messages`,
  `add_grpo_token_loss_masks_and_generation_logprobs`, `_apply_mask_sample_filter`,
  `compute_and_apply_seq_logprob_error_masking`, `_clip_grpo_advantages`,
  `_should_log_nemo_gym_responses`, `validate` (algorithms/grpo.py); `run_multi_turn_rollout`,
  `generate_responses`, `calculate_rewards` and the helpers they call (experience/rollouts.py);
  `should_use_async_rollouts` (models/generation/interfaces.py), `should_use_nemo_gym`
  (environments/nemo_gym.py); and two statement blocks of `grpo_train` itself, run as they are: the
  overlong-filtering block (`use_overlong_filtering = ...` and the `if` after it) and the
  "Log training data" block (`if not _should_log_nemo_gym_responses(master_config): ...`, which
  builds `log_data` and calls `logger.log_batched_dict_as_jsonl`).
- The order of the calls between them follows `grpo_train` (grpo.py L2845-3323, L3633-3655): repeat
  each prompt `num_generations_per_prompt` times (prompt-contiguous rows), flatten/pad with the pad
  id, roll out, scale rewards, baseline+std, dynamic sampling (off), prompt ids for the estimator,
  overlong filtering, token loss masks, flatten/pad again, prev logprobs, seq-logprob-error metrics,
  `GRPOAdvantageEstimator.compute_advantage`, clipping (off), log.

The detailed cases (added 2026-12: reinforce_pp, reinforce_pp_no_baseline, reinforce_pp_overlong,
no_loo_no_norm, dynamic_sampling, dynamic_sampling_partial_groups, reward_scaling,
clip_advantages) were made the same way, from the same commit, with the same package versions
(recorded in their truth.json), plus these of NeMo's, also taken out with `ast` unchanged:
`calculate_kl` (algorithms/utils.py), `GDPOAdvantageEstimator`,
`ReinforcePlusPlusAdvantageEstimator` (algorithms/advantage_estimator.py), `ClippedPGLossConfig`
(algorithms/loss/loss_functions.py; master_config.loss_fn is now one, as in NeMo's MasterConfig),
`_create_advantage_estimator` (algorithms/grpo.py; it picks the estimator from
grpo.adv_estimator.name as grpo_train does). Their rewards are scripted floats (the math stand-in
returns them in row order) and their truth.json adds per row the baseline/std/scalar the
estimator used, the advantage before `_clip_grpo_advantages`, the environment's reward, what the
`rewards` column holds, and per step the Reinforce++ whitening moments and every generation
batch dynamic sampling saw. With grpo.use_dynamic_sampling a step runs grpo_train's generation
loop over several dataloader batches (`dynamic_sampling` with the batch_cache and
dynamic_sampling_num_gen_batches carried over, `continue` until the batch is complete).
Not made: Reinforce++ with loss_fn.use_kl_in_reward=true. Its KL term needs
`reference_policy_logprobs`, which grpo_train's log block does not write (it writes
generation_logprobs and prev_logprobs only), so no dump can be checked against it.
The first cases' files are unchanged by these additions (their truth.json keeps its source list).

Stand-ins (not NeMo code):
- the generation backend (vLLM in grpo_math_1B.yaml): `generate()` returns scripted responses
  (word lists below, tokenized with the tokenizer, `<eos>` appended unless the response is longer
  than `max_new_tokens`, in which case it is cut and flagged `truncated`, as vLLM's
  finish_reason=length is), with `logprobs` = log p of each generated token under the tiny policy
  run in bfloat16;
- `policy.get_logprobs` for `prev_logprobs`: the same policy in float32 over the padded batch,
  position 0 = 0 and padding zeroed, as NeMo's workers do (models/automodel/train.py L759-789);
  so prev and generation logprobs differ only by the bf16/fp32 gap (no training step is taken);
- the math environment: a stand-in shaped like MathEnvironment.step (environments/
  math_environment.py L527-545): reward 1.0 when the last `\\boxed{X}` of the decoded response
  equals the ground truth, observation "Environment: correct"/"Environment: incorrect", done after
  one turn;
  its `step.remote` returns a plain object holding the result, which the `ray.get` stand-in
  unwraps (the only Ray call on this path, in `calculate_rewards`).
- the model and tokenizer: a word-level `tokenizers` model over the words used here plus `<pad>
  <eos> <bos> <unk> <|user|> <|assistant|>`, a two-line chat template, and a randomly initialised
  2-layer Qwen2 (seed 0). Nothing is downloaded.

Later NeMo-RL changes (not in the 7ea279a snapshot, nor in the stored source index), rebuilt from
the pull requests' own text and used only by the cases `rollout_identity` and `near_constant`:
- `build_rollout_group_ids` (#3882, open on main; on branch super-v3.5-posttraining via #3959 at
  fc1a3c193357ee7a64374141a7a0c5ec8e597ed0): GRPO groups = sampling groups, ids
  arange(num_groups).repeat_interleave(num_generations_per_prompt), handed to 7ea279a's unchanged
  `calculate_baseline_and_std_per_prompt`/`GRPOAdvantageEstimator` as one-column rows;
- `is_trivial_distribution` and `normalize_mask = (std > 0) & ~is_trivial_distribution` (#4158,
  merged; utils.py/advantage_estimator.py @ 3d2a8a64df19a86f858ce2a99895e156a1576e00).
Their truth.json also holds 7ea279a's own advantages for the same rollouts, for contrast; see
each case's `notes` and `later_prs`. The dump itself carries no group id in either case.
Besides the packages named above, importing the extracted tree needs requests, pillow, datasets.

Settings start from examples/configs/grpo_math_1B.yaml (resolved with omegaconf and validated with
NeMo's own `GRPOConfig`), changed only where a case says so: num_prompts_per_step 3,
num_generations_per_prompt 4, max_total_sequence_length 64, max_new_tokens 12,
make_sequence_length_divisible_by 1 (= tensor_parallel_size, as the yaml says).
"""

from __future__ import annotations
import __future__

import abc
import argparse
import ast
import copy
import gc
import glob
import json
import logging
import os
import re
import shutil
import sys
import types
import warnings
from pathlib import Path
from typing import Any, NotRequired, Optional, TypedDict, Union, cast

# This file is called nemo_rl.py: keep its own folder off sys.path so that `import nemo_rl` finds
# NeMo-RL's package (once dumpkit, beside it, is imported).
sys.path.insert(0, str(Path(__file__).resolve().parent))
import dumpkit  # noqa: E402

dumpkit.leave_folder(__file__)

dumpkit.offline_on_cpu()
os.environ.setdefault("NRL_LOG_LEVEL", "WARNING")
warnings.filterwarnings("ignore", message="register_new_resolver")

import numpy as np  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
MADE_BY = "tools/dumps/nemo_rl.py"

SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)

# (problem, ground truth, four scripted responses). Rows 0-5 are the train set (3 prompts a step),
# rows 6-7 the validation set.
PROBLEMS: list[tuple[str, str, list[str]]] = [
    (
        "What is 2 plus 3 ?",
        "5",
        [
            "2 plus 3 is 5 so \\boxed{5}",
            "2 plus 3 is 6 so \\boxed{6}",
            "\\boxed{5}",
            "let me think : 2 plus 3 is 5 and then I add 1 so it is 6",
        ],
    ),
    (
        "What is 4 times 2 ?",
        "8",
        ["4 times 2 is 8 so \\boxed{8}", "\\boxed{8}", "so \\boxed{8}", "it is 8 so \\boxed{8}"],
    ),
    (
        "What is 9 minus 7 ?",
        "2",
        [
            "9 minus 7 is 3 so \\boxed{3}",
            "\\boxed{1}",
            "9 minus 7 is 2 so \\boxed{2}",
            "\\boxed{3}",
        ],
    ),
    (
        "What is 3 plus 3 ?",
        "6",
        ["\\boxed{5}", "3 plus 3 is 9 so \\boxed{9}", "\\boxed{7}", "it is 3 so \\boxed{3}"],
    ),
    (
        "What is 5 times 2 ?",
        "10",
        ["5 times 2 is 10 so \\boxed{10}", "\\boxed{10}", "\\boxed{7}", "so \\boxed{10}"],
    ),
    (
        "What is 8 minus 1 ?",
        "7",
        [
            "\\boxed{7}",
            "8 minus 1 is 9 so \\boxed{9}",
            "\\boxed{6}",
            "8 minus 1 is 7 so \\boxed{7}",
        ],
    ),
    ("What is 1 plus 1 ?", "2", ["1 plus 1 is 2 so \\boxed{2}"]),
    ("What is 6 minus 2 ?", "4", ["\\boxed{3}"]),
]
ENV_WORDS = "Environment : correct incorrect"


# --------------------------------------------------------------------------------------------------
# NeMo-RL source


def _node_lines(node: ast.AST) -> tuple[int, int]:
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return start, node.end_lineno or node.lineno


def exec_nodes(nodes: list[ast.stmt], filename: str, ns: dict) -> None:
    """Compile NeMo's own parsed statements unchanged (line numbers kept) and run them in ns."""
    module = ast.Module(body=nodes, type_ignores=[])
    flags = __future__.annotations.compiler_flag
    exec(compile(module, filename, "exec", flags=flags, dont_inherit=True), ns)


def extract_defs(root: Path, rel: str, names: list[str], ns: dict) -> None:
    path = root / rel
    tree = ast.parse(path.read_text(), filename=str(path))
    found: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name in names:
                found[node.name] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name) and t.id in names:
                    found[t.id] = node
    missing = [n for n in names if n not in found]
    if missing:
        raise SystemExit(f"{rel}: not found: {missing}")
    exec_nodes([found[n] for n in names], str(path), ns)
    for n in names:
        start, end = _node_lines(found[n])
        SOURCE_LINES[f"{rel}:{n}"] = f"L{start}-{end}"


def grpo_train_block(root: Path, which: str) -> list[ast.stmt]:
    """Statements of grpo_train (the synchronous trainer) that the dump needs, as parsed."""
    rel = "nemo_rl/algorithms/grpo.py"
    tree = ast.parse((root / rel).read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "grpo_train")
    for parent in ast.walk(fn):
        for field in ("body", "orelse"):
            body = getattr(parent, field, None)
            if not isinstance(body, list):
                continue
            for i, stmt in enumerate(body):
                if which == "overlong" and isinstance(stmt, ast.Assign):
                    tgt = stmt.targets[0]
                    if isinstance(tgt, ast.Name) and tgt.id == "use_overlong_filtering":
                        block = [stmt, body[i + 1]]
                        SOURCE_LINES[f"{rel}:grpo_train overlong block"] = (
                            f"L{stmt.lineno}-{body[i + 1].end_lineno}"
                        )
                        return block
                if which == "log" and isinstance(stmt, ast.If):
                    src = ast.unparse(stmt.test)
                    if src == "not _should_log_nemo_gym_responses(master_config)":
                        SOURCE_LINES[f"{rel}:grpo_train log block"] = (
                            f"L{stmt.lineno}-{stmt.end_lineno}"
                        )
                        return [stmt]
    raise SystemExit(f"grpo_train: block {which!r} not found")


SOURCE_LINES: dict[str, str] = {}
# extracted for the detailed cases only (estimators beyond GRPO); the first cases' truth.json
# lists the source without them, as it did before they were added
DETAIL_ONLY_SOURCE = {
    "nemo_rl/algorithms/utils.py:calculate_kl",
    "nemo_rl/algorithms/advantage_estimator.py:GDPOAdvantageEstimator",
    "nemo_rl/algorithms/advantage_estimator.py:ReinforcePlusPlusAdvantageEstimator",
    "nemo_rl/algorithms/loss/loss_functions.py:ClippedPGLossConfig",
    "nemo_rl/algorithms/grpo.py:_create_advantage_estimator",
}


class _ObjectRef:
    """What the environment stand-in's `step.remote` returns in place of a Ray ObjectRef."""

    def __init__(self, value):
        self.value = value


class _RayStandIn:
    """`ray.get` on the environment stand-in's `step.remote` results: unwraps them."""

    @staticmethod
    def get(refs):
        return [r.value for r in refs] if isinstance(refs, list) else refs.value


def load_nemo(root: Path) -> types.ModuleType:
    sys.path.insert(0, str(root))
    from nemo_rl.algorithms.reward_functions import RewardShapingConfig
    from nemo_rl.data.collate_fn import rl_collate_fn
    from nemo_rl.data.interfaces import (
        DatumSpec,
        FlatMessagesType,
        LLMMessageLogType,
        TaskDataSpec,
    )
    from nemo_rl.data.llm_message_utils import (
        batched_message_log_to_flat_message,
        get_keys_from_message_log,
    )
    from nemo_rl.data.multimodal_utils import NATIVE_MULTIMODAL_KEYS, VLLM_MULTIMODAL_DATA_KEYS
    from nemo_rl.data.processors import math_hf_data_processor
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict
    from nemo_rl.environments.interfaces import EnvironmentReturn
    from nemo_rl.utils.timer import Timer
    from pydantic import BaseModel, Field, model_validator

    mod = types.ModuleType("nemo_rl_extracted")
    sys.modules[mod.__name__] = mod
    ns = mod.__dict__
    ns.update(
        {
            "torch": torch,
            "np": np,
            "os": os,
            "re": re,
            "glob": glob,
            "json": json,
            "gc": gc,
            "warnings": warnings,
            "copy": copy,
            "Any": Any,
            "Optional": Optional,
            "cast": cast,
            "BaseModel": BaseModel,
            "Field": Field,
            "model_validator": model_validator,
            "ray": _RayStandIn,
            "BatchedDataDict": BatchedDataDict,
            "batched_message_log_to_flat_message": batched_message_log_to_flat_message,
            "get_keys_from_message_log": get_keys_from_message_log,
            "EnvironmentReturn": EnvironmentReturn,
            "RewardShapingConfig": RewardShapingConfig,
            "Timer": Timer,
            "NATIVE_MULTIMODAL_KEYS": NATIVE_MULTIMODAL_KEYS,
            "VLLM_MULTIMODAL_DATA_KEYS": VLLM_MULTIMODAL_DATA_KEYS,
            # real modules, used by the code below
            "rl_collate_fn": rl_collate_fn,
            "math_hf_data_processor": math_hf_data_processor,
            "TaskDataSpec": TaskDataSpec,
            "DatumSpec": DatumSpec,
            "FlatMessagesType": FlatMessagesType,
            "LLMMessageLogType": LLMMessageLogType,
            "TypedDict": TypedDict,
            "NotRequired": NotRequired,
            "Union": Union,
        }
    )
    extract_defs(
        root,
        "nemo_rl/algorithms/utils.py",
        [
            "calculate_kl",
            "get_gdpo_reward_component_keys",
            "calculate_baseline_and_std_per_prompt",
        ],
        ns,
    )
    extract_defs(
        root,
        "nemo_rl/algorithms/advantage_estimator.py",
        [
            "AdvEstimatorConfig",
            "GRPOAdvantageEstimator",
            "GDPOAdvantageEstimator",
            "ReinforcePlusPlusAdvantageEstimator",
        ],
        ns,
    )
    extract_defs(root, "nemo_rl/algorithms/loss/loss_functions.py", ["ClippedPGLossConfig"], ns)
    from rich.logging import RichHandler

    ns["ABC"] = abc.ABC
    ns["abstractmethod"] = abc.abstractmethod
    ns["logging"] = logging
    ns["RichHandler"] = RichHandler
    extract_defs(
        root,
        "nemo_rl/utils/logger.py",
        [
            "LoggerInterface",
            "Logger",
            "_rich_logging_configured",
            "configure_rich_logging",
            "print_message_log_samples",
            "get_next_experiment_dir",
        ],
        ns,
    )
    extract_defs(
        root,
        "nemo_rl/models/generation/interfaces.py",
        [
            "ROUTED_EXPERTS_MISSING_ROUTE_SENTINEL",
            "GenerationDatumSpec",
            "GenerationOutputSpec",
            "should_use_async_rollouts",
        ],
        ns,
    )
    extract_defs(root, "nemo_rl/environments/nemo_gym.py", ["should_use_nemo_gym"], ns)
    from omegaconf import OmegaConf

    ns["OmegaConf"] = OmegaConf
    extract_defs(root, "nemo_rl/utils/config.py", ["register_omegaconf_resolvers"], ns)
    extract_defs(
        root,
        "nemo_rl/experience/rollouts.py",
        [
            "_add_multimodal_generation_payload",
            "_add_r3_fallback_metrics",
            "_attach_routed_experts_to_message_log_prefix",
            "_find_routed_experts_template",
            "_dummy_routed_experts_for_tokens",
            "backfill_missing_routed_experts",
            "generate_responses",
            "calculate_rewards",
            "run_multi_turn_rollout",
        ],
        ns,
    )
    extract_defs(
        root,
        "nemo_rl/algorithms/grpo.py",
        [
            "RewardScalingConfig",
            "AsyncGRPOConfig",
            "GRPOConfig",
            "dynamic_sampling",
            "scale_rewards",
            "extract_initial_prompt_messages",
            "add_grpo_token_loss_masks_and_generation_logprobs",
            "_apply_mask_sample_filter",
            "_should_log_nemo_gym_responses",
            "_clip_grpo_advantages",
            "_create_advantage_estimator",
            "compute_and_apply_seq_logprob_error_masking",
            "validate",
        ],
        ns,
    )
    ns["GRPOConfig"].model_rebuild(_types_namespace=ns)
    ns["AdvEstimatorConfig"].model_rebuild(_types_namespace=ns)
    ns["ClippedPGLossConfig"].model_rebuild(_types_namespace=ns)
    ns["OVERLONG_BLOCK"] = grpo_train_block(root, "overlong")
    ns["LOG_BLOCK"] = grpo_train_block(root, "log")
    ns["MathEnvStandIn"] = MathEnvStandIn
    grpo_file = str(root / "nemo_rl/algorithms/grpo.py")

    def exec_block(nodes: list[ast.stmt], local: dict) -> dict:
        """Run statements of grpo_train as they are, with its local variables in local."""
        scope = {**ns, **local}
        exec_nodes(nodes, grpo_file, scope)
        return scope

    ns["exec_block"] = exec_block
    return mod


# --------------------------------------------------------------------------------------------------
# Later NeMo-RL changes that the fetched snapshot (7ea279a, 2026-08-22) does not have. Their code is
# not in the snapshot nor in the stored source index (nemo_rl/algorithms/utils.py and
# advantage_estimator.py are stored only at older commits), so they are NOT NeMo's code: they are
# rebuilt here from the pull requests' own text (diff hunks quoted in review threads), as noted at
# each one, and used only by the cases that name them (`grouping`, `adv_rule`).


# PR #3882 "fix(grpo): group advantages by rollout identity" (open on main; backported to branch
# super-v3.5-posttraining by #3959 from source head fc1a3c193357ee7a64374141a7a0c5ec8e597ed0).
# nemo_rl/algorithms/utils.py @ fc1a3c19 (~L115-128, hunk quoted in the PR's review thread of
# 2026-08-31): the argument checks below are the hunk's; its last line is cut in the quote after
# `return torch.arange(`, and the reviewer states it returns
# `arange(start, start + num_groups).repeat_interleave(group_size)`.
def build_rollout_group_ids(batch_size: int, group_size: int, start_group_id: int = 0):
    if group_size <= 0:
        raise ValueError(f"group_size must be positive, got {group_size}")
    if batch_size < 0 or batch_size % group_size != 0:
        raise ValueError(
            f"batch_size={batch_size} must be non-negative and divisible by group_size={group_size}"
        )
    if start_group_id < 0:
        raise ValueError(f"start_group_id must be non-negative, got {start_group_id}")
    num_groups = batch_size // group_size
    return torch.arange(start_group_id, start_group_id + num_groups).repeat_interleave(group_size)


# PR #4158 "fix(LOO-Norm-Advantage): Fix spike in LOO normed advantage." (merged to main).
# calculate_baseline_and_std_per_prompt gains a third return value `is_trivial_distribution`
# (utils.py @ 3d2a8a64df19a86f858ce2a99895e156a1576e00 L111-221; triviality L196-207): per sample,
# True when the rewards feeding that sample's std (its leave-one-out peers, or the whole group
# without LOO) are all one value, by exact equality (computed on `std_rewards`); it stays True for
# a group with fewer than two valid samples (the early branch never writes it). The PR's test:
# rewards [0.0] + [0.95] * 7 -> is_trivial == [True] + [False] * 7. Rebuilt from that text:
def is_trivial_distribution_4158(
    prompts, rewards, valid_mask, leave_one_out_baseline=True, std_rewards=None
):
    if std_rewards is None:
        std_rewards = rewards
    flag = torch.ones(len(rewards), dtype=torch.bool)
    for row in torch.unique(prompts, dim=0):
        idx = torch.arange(len(prompts))[(prompts == row).all(1)]
        if valid_mask[idx].sum() <= 1:
            continue
        for i in idx.tolist():
            keep = (valid_mask[idx] > 0) & ((idx != i) if leave_one_out_baseline else True)
            peers = std_rewards[idx[keep]]
            flag[i] = bool((peers == peers[0]).all())
    return flag


# advantage_estimator.py GRPOAdvantageEstimator.compute_advantage after #4158 (hunk @ L117-124
# quoted in the review thread of 2026-09-19):
#     normalize_mask = (std > 0) & ~is_trivial_distribution
# replaces `non_zero_std_mask = std > 0`; the rest is 7ea279a's compute_advantage, and baseline and
# std come from 7ea279a's calculate_baseline_and_std_per_prompt (NeMo's code, as extracted).
def grpo_advantage_4158(nemo, estimator, prompt_ids, rewards, mask):
    baseline, std = nemo.calculate_baseline_and_std_per_prompt(
        prompt_ids,
        rewards,
        torch.ones_like(rewards),
        leave_one_out_baseline=estimator.use_leave_one_out_baseline,
    )
    is_trivial_distribution = is_trivial_distribution_4158(
        prompt_ids,
        rewards,
        torch.ones_like(rewards),
        leave_one_out_baseline=estimator.use_leave_one_out_baseline,
    )
    advantages = (rewards - baseline).unsqueeze(-1)
    if estimator.normalize_rewards:
        epsilon = 1e-6
        normalize_mask = (std > 0) & ~is_trivial_distribution
        advantages[normalize_mask] = advantages[normalize_mask] / (
            std.unsqueeze(-1)[normalize_mask] + epsilon
        )
    return advantages.expand(mask.shape), is_trivial_distribution, baseline, std


# --------------------------------------------------------------------------------------------------
# Tokenizer, policy, generation and environment stand-ins


def build_tokenizer_and_model(prompt_template: str):
    from tokenizers import decoders, pre_tokenizers
    from transformers import Qwen2Config, Qwen2ForCausalLM

    pre = pre_tokenizers.Whitespace()
    texts = [ENV_WORDS]
    for problem, answer, responses in PROBLEMS:
        texts += [prompt_template.format(problem), answer, *responses]
    words: list[str] = []
    for t in texts:
        for w, _ in pre.pre_tokenize_str(t):
            if w not in words and w not in SPECIAL:
                words.append(w)
    vocab = {tok: i for i, tok in enumerate(SPECIAL + sorted(words))}
    joins = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    tokenizer = dumpkit.word_level_tokenizer(
        vocab, SPECIAL, pre_tokenizer=pre, decoder=joins, padding_side="left"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    dumpkit.seed_all(0)
    config = dumpkit.tiny_model_config(
        Qwen2Config, vocab, max_position_embeddings=128, initializer_range=0.5
    )
    model = Qwen2ForCausalLM(config).eval()
    return tokenizer, model


def _token_logprobs(model, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """log p(ids[:, t] | ids[:, :t]) for t >= 1, shape [B, T-1]."""
    m = copy.deepcopy(model).to(dtype)
    with torch.no_grad():
        logits = m(input_ids=ids).logits.float()
    lp = torch.log_softmax(logits[:, :-1], dim=-1)
    return lp.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)


class GenerationStandIn:
    """Stand-in for the vLLM generation backend: scripted responses, the policy's bf16 logprobs."""

    cfg: dict = {"backend": "vllm"}

    def __init__(self, tokenizer, model, max_new_tokens: int):
        self.tokenizer = tokenizer
        self.model = model
        self.max_new_tokens = max_new_tokens
        self.queue: list[str] = []  # responses for the next generate() call, in row order

    def generate(self, data, greedy: bool = False):
        from nemo_rl.distributed.batched_data_dict import BatchedDataDict

        input_ids, input_lengths = data["input_ids"], data["input_lengths"]
        texts, self.queue = self.queue[: len(input_ids)], self.queue[len(input_ids) :]
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        rows, gen_lp, gen_len, truncated = [], [], [], []
        for i, text in enumerate(texts):
            prompt = input_ids[i, : int(input_lengths[i])]
            resp = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            cut = len(resp) + 1 > self.max_new_tokens
            resp = resp[: self.max_new_tokens] if cut else resp + [eos]
            full = torch.cat([prompt, torch.tensor(resp, dtype=prompt.dtype)])
            lp = _token_logprobs(self.model, full.unsqueeze(0), torch.bfloat16)[0]
            rows.append(full)
            gen_lp.append(lp[len(prompt) - 1 :])
            gen_len.append(len(resp))
            truncated.append(cut)
        width = max(len(r) for r in rows)
        output_ids = torch.full((len(rows), width), pad, dtype=input_ids.dtype)
        logprobs = torch.zeros((len(rows), width), dtype=torch.float32)
        for i, r in enumerate(rows):
            output_ids[i, : len(r)] = r
            start = int(input_lengths[i])
            logprobs[i, start : len(r)] = gen_lp[i]
        return BatchedDataDict(
            {
                "output_ids": output_ids,
                "logprobs": logprobs,
                "generation_lengths": torch.tensor(gen_len, dtype=torch.int32),
                "unpadded_sequence_lengths": input_lengths + torch.tensor(gen_len),
                "truncated": torch.tensor(truncated, dtype=torch.bool),
            }
        )


def policy_get_logprobs(model, input_ids: torch.Tensor, input_lengths: torch.Tensor):
    """What NeMo's policy workers return: fp32 logprobs, 0 at position 0, padding zeroed."""
    lp = _token_logprobs(model, input_ids, torch.float32)
    lp = torch.cat([torch.zeros_like(lp[:, :1]), lp], dim=1)
    mask = torch.zeros_like(lp, dtype=torch.bool)
    for i, n in enumerate(input_lengths):
        mask[i, : int(n)] = 1
    return lp * mask


class MathEnvStandIn:
    """Shaped like MathEnvironment.step (environments/math_environment.py L527-545)."""

    def __init__(self, EnvironmentReturn, scripted_rewards: list[float] | None = None):
        self.EnvironmentReturn = EnvironmentReturn
        self.step = types.SimpleNamespace(remote=lambda *a: _ObjectRef(self._step(*a)))
        # a case may script the rewards (row order) instead of verifying \boxed{X}
        self.scripted_rewards = list(scripted_rewards) if scripted_rewards is not None else None

    @staticmethod
    def verify(response: str, truth: str) -> float:
        found = re.findall(r"boxed \{ (\S+) \}", response)
        return 1.0 if found and found[-1] == truth else 0.0

    def _step(self, message_log_batch, metadata):
        results = []
        for log, info in zip(message_log_batch, metadata, strict=True):
            response = "".join(m["content"] for m in log if m["role"] == "assistant")
            results.append(self.verify(response, info["ground_truth"]))
        if self.scripted_rewards is not None:
            assert len(self.scripted_rewards) >= len(results)
            results = self.scripted_rewards[: len(results)]
            self.scripted_rewards = self.scripted_rewards[len(results) :]
        observations = [
            {
                "role": "environment",
                "content": "Environment: correct" if result else "Environment: incorrect",
            }
            for result in results
        ]
        rewards = torch.tensor(results).cpu()
        done = torch.ones_like(rewards).cpu()
        return self.EnvironmentReturn(
            observations=observations,
            metadata=metadata,
            next_stop_strings=[None] * len(message_log_batch),
            rewards=rewards,
            terminateds=done,
            answers=None,
        )


# --------------------------------------------------------------------------------------------------
# Config


class MasterConfigStandIn(types.SimpleNamespace):
    """master_config as grpo_train reads it: `.grpo` a GRPOConfig, the rest plain dicts."""


def load_master_config(nemo, root: Path, overrides: dict) -> MasterConfigStandIn:
    from omegaconf import OmegaConf

    nemo.register_omegaconf_resolvers()
    cfg = OmegaConf.load(root / "examples/configs/grpo_math_1B.yaml")
    cfg.grpo.num_prompts_per_step = 3
    cfg.grpo.num_generations_per_prompt = 4
    cfg.policy.max_total_sequence_length = 64
    cfg.policy.generation.max_new_tokens = 12
    for key, value in overrides.items():
        OmegaConf.update(cfg, key, value)
    c = OmegaConf.to_container(cfg, resolve=True)
    c["policy"]["make_sequence_length_divisible_by"] = c["policy"]["dtensor_cfg"][
        "tensor_parallel_size"
    ]
    return MasterConfigStandIn(
        grpo=nemo.GRPOConfig(**c["grpo"]),
        policy=c["policy"],
        env=c["env"],
        logger=c["logger"],
        data=c["data"],
        loss_fn=nemo.ClippedPGLossConfig(**c["loss_fn"]),
    )


# --------------------------------------------------------------------------------------------------
# The training loop, in grpo_train's order


def make_datum(nemo, tokenizer, task_spec, max_seq_len: int, idx: int) -> dict:
    problem, truth, _ = PROBLEMS[idx]
    datum = {
        "messages": [
            {"role": "user", "content": problem},
            {"role": "assistant", "content": truth},
        ],
        "task_name": "math",
    }
    return nemo.math_hf_data_processor(datum, task_spec, tokenizer, max_seq_len, idx)


def train_step(
    nemo,
    mc,
    env,
    gen,
    model,
    tokenizer,
    logger,
    gen_batches: list,
    total_steps: int,
    grouping: str = "prompt_tokens",
    adv_rule: str = "7ea279a",
    responses: list | None = None,
    detail: bool = False,
) -> dict:
    """One grpo_train step (grpo.py L2845-3323, L3633-3655) up to the train-data log.

    gen_batches: the dataloader batches this step generates from, in order: one, or with
    grpo.use_dynamic_sampling as many as grpo_train's loop takes before dynamic_sampling says the
    batch is complete (each later one is a `continue` of grpo_train's `for batch in
    wrapped_dataloader`, with batch_cache and dynamic_sampling_num_gen_batches carried over).
    responses: per generation batch, its groups of scripted responses (None: PROBLEMS').
    grouping "rollout_identity" and adv_rule "4158" follow the later PRs rebuilt above.
    detail: also return what the estimator used per row (for the truth.json of newer cases)."""
    ns = nemo.__dict__
    n = mc.grpo.num_generations_per_prompt
    timer = ns["Timer"]()
    batch_cache = None
    dynamic_sampling_num_gen_batches = 0
    # each generated row's origin, found again by object identity after dynamic sampling's
    # select_indices / from_batches / slice (which keep the message_log objects; the object is
    # held here so that its id is not reused)
    origin: dict[int, tuple] = {}
    gen_batch_info: list[dict] = []
    for g, batch in enumerate(gen_batches):
        # responses for the repeated batch, prompt-contiguous: prompt p's generations 0..n-1
        if responses is None or responses[g] is None:
            gen.queue = [PROBLEMS[i][2][j] for i in batch["idx"] for j in range(n)]
        else:
            gen.queue = [r for group in responses[g] for r in group]

        repeated_batch = batch.repeat_interleave(n)
        batched_flat, input_lengths = ns["batched_message_log_to_flat_message"](
            repeated_batch["message_log"], pad_value_dict={"token_ids": tokenizer.pad_token_id}
        )
        input_ids = batched_flat["token_ids"]
        dynamic_sampling_num_gen_batches += 1
        repeated_batch, rollout_metrics = nemo.run_multi_turn_rollout(
            policy_generation=gen,
            input_batch=repeated_batch,
            tokenizer=tokenizer,
            task_to_env={"math": env},
            max_seq_len=mc.policy["max_total_sequence_length"],
            max_rollout_turns=mc.grpo.max_rollout_turns,
            greedy=False,
        )
        env_rewards = repeated_batch["total_reward"].clone()
        for i, log in enumerate(repeated_batch["message_log"]):
            origin[id(log)] = (log, g, i, float(env_rewards[i]))
        repeated_batch = nemo.scale_rewards(repeated_batch, mc.grpo.reward_scaling)
        assert not mc.grpo.reward_shaping.enabled
        rewards = repeated_batch["total_reward"]
        if grouping == "rollout_identity":
            # #3882: the sampling group itself is the GRPO identity (ids as one-column rows, the
            # form 7ea279a's calculate_baseline_and_std_per_prompt compares row by row)
            rollout_group_ids = build_rollout_group_ids(repeated_batch.size, n, start_group_id=0)
            group_key = rollout_group_ids.unsqueeze(-1)
        else:
            group_key = input_ids
        baseline, std = nemo.calculate_baseline_and_std_per_prompt(
            group_key,
            rewards,
            torch.ones_like(rewards),
            leave_one_out_baseline=mc.grpo.use_leave_one_out_baseline,
            std_rewards=None,
        )
        gen_batch_info.append(
            {
                "dataset_idx": [int(i) for i in batch["idx"]],
                "env_rewards": env_rewards.tolist(),
                "rewards_after_scale_rewards": rewards.tolist(),
                "std_for_dynamic_sampling": std.tolist(),
            }
        )
        repeated_batch, is_batch_complete, batch_cache, ds_metrics = nemo.dynamic_sampling(
            repeated_batch,
            std,
            baseline,
            dynamic_sampling_num_gen_batches,
            mc,
            timer,
            batch_cache,
        )
        gen_batch_info[-1]["is_batch_complete"] = is_batch_complete
        gen_batch_info[-1]["dynamic_sampling_metrics"] = dict(ds_metrics)
        # as grpo_train: for DAPO the used rewards are the filtered ones
        rewards = (
            repeated_batch["total_reward"]
            if not mc.grpo.use_dynamic_sampling
            else repeated_batch["filtered_reward"]
        )
        if not is_batch_complete:
            continue
        break
    assert is_batch_complete and g == len(gen_batches) - 1, "gen_batches do not fit the step"
    initial_prompt_message_logs = nemo.extract_initial_prompt_messages(
        repeated_batch["message_log"], repeated_batch["length"]
    )
    prompt_batched_flat, _ = ns["batched_message_log_to_flat_message"](
        initial_prompt_message_logs, pad_value_dict={"token_ids": tokenizer.pad_token_id}
    )
    prompt_ids_for_adv = prompt_batched_flat["token_ids"]
    prompt_token_ids = prompt_ids_for_adv
    if grouping == "rollout_identity":
        prompt_ids_for_adv = rollout_group_ids.unsqueeze(-1)

    # grpo_train's own overlong-filtering statements
    scope = nemo.exec_block(
        nemo.OVERLONG_BLOCK, {"master_config": mc, "repeated_batch": repeated_batch}
    )
    repeated_batch = scope["repeated_batch"]
    nemo._apply_mask_sample_filter(repeated_batch)
    nemo.add_grpo_token_loss_masks_and_generation_logprobs(repeated_batch["message_log"])
    flat_messages, input_lengths = ns["batched_message_log_to_flat_message"](
        repeated_batch["message_log"],
        pad_value_dict={"token_ids": tokenizer.pad_token_id},
        make_sequence_length_divisible_by=mc.policy["make_sequence_length_divisible_by"],
    )
    train_data = ns["BatchedDataDict"](
        {
            "input_ids": flat_messages["token_ids"],
            "input_lengths": input_lengths,
            "generation_logprobs": flat_messages["generation_logprobs"],
            "token_mask": flat_messages["token_loss_mask"],
            "sample_mask": repeated_batch["loss_multiplier"],
        }
    )
    train_data["prev_logprobs"] = policy_get_logprobs(
        model, train_data["input_ids"], train_data["input_lengths"]
    )
    nemo.compute_and_apply_seq_logprob_error_masking(
        train_data=train_data,
        rewards=rewards,
        seq_logprob_error_threshold=mc.grpo.seq_logprob_error_threshold,
    )
    token_mask = train_data["token_mask"]
    sample_mask = train_data["sample_mask"]
    mask = token_mask * sample_mask.unsqueeze(-1)
    if detail:  # grpo_train's own choice of estimator (grpo.py _create_advantage_estimator)
        adv_estimator = nemo._create_advantage_estimator(mc)
    else:  # what the first cases ran (the same class for adv_estimator.name "grpo")
        adv_estimator = nemo.GRPOAdvantageEstimator(mc.grpo.adv_estimator, mc.loss_fn)
    # no reference policy runs here: the case that would need its log-probs (Reinforce++ with
    # loss_fn.use_kl_in_reward) is not made, as the dump would not hold them
    assert not (mc.loss_fn.use_kl_in_reward and mc.loss_fn.reference_policy_kl_penalty != 0)
    # 7ea279a's own estimator; in the later-PR cases it gives the contrast recorded in truth.json
    advantages_7ea279a = adv_estimator.compute_advantage(
        prompt_ids=prompt_ids_for_adv if adv_rule == "7ea279a" else prompt_token_ids,
        rewards=rewards,
        mask=mask,
        repeated_batch=repeated_batch,
        logprobs_policy=train_data["prev_logprobs"],
        logprobs_reference=None,
    )
    extra: dict[str, list] = {}
    if grouping == "rollout_identity":
        extra["rollout_group_id"] = rollout_group_ids.tolist()
        extra["advantage_if_grouped_by_prompt_tokens"] = adv_estimator.compute_advantage(
            prompt_ids=prompt_token_ids,
            rewards=rewards,
            mask=mask,
            repeated_batch=repeated_batch,
            logprobs_policy=train_data["prev_logprobs"],
            logprobs_reference=None,
        )[:, 0].tolist()
    if adv_rule == "4158":
        adv_4158, trivial, base, sd = grpo_advantage_4158(
            nemo, adv_estimator, prompt_ids_for_adv, rewards, mask
        )
        train_data["advantages"] = adv_4158
        extra["advantage_before_4158"] = advantages_7ea279a[:, 0].tolist()
        extra["is_trivial_distribution"] = [bool(t) for t in trivial]
        extra["baseline"] = base.tolist()
        extra["std"] = sd.tolist()
    else:
        train_data["advantages"] = advantages_7ea279a
    assert mc.grpo.invalid_tool_call_advantage is None
    assert mc.grpo.malformed_thinking_advantage is None
    estimator_advantages = train_data["advantages"]
    train_data["advantages"] = nemo._clip_grpo_advantages(train_data["advantages"], mc.grpo)

    # grpo_train's own "Log training data" statements
    local = {
        "master_config": mc,
        "repeated_batch": repeated_batch,
        "flat_messages": flat_messages,
        "rewards": rewards,
        "input_lengths": input_lengths,
        "train_data": train_data,
        "logger": logger,
        "total_steps": total_steps,
    }
    nemo.exec_block(nemo.LOG_BLOCK, local)

    step_info: dict[str, Any] = {}
    if detail:
        step_info, more = estimator_detail(
            nemo, mc, prompt_ids_for_adv, rewards, mask, estimator_advantages, train_data
        )
        extra.update(more)
        extra["advantage_before_clip"] = estimator_advantages[:, 0].tolist()
        extra["reward_from_environment"] = [
            origin[id(log)][3] for log in repeated_batch["message_log"]
        ]
        extra["generation_batch"] = [origin[id(log)][1] for log in repeated_batch["message_log"]]
        extra["generation_batch_row"] = [
            origin[id(log)][2] for log in repeated_batch["message_log"]
        ]
        # what the log's `rewards` column holds on this line (with dynamic sampling it is
        # repeated_batch["total_reward"], not the rewards used; see the case's notes)
        extra["rewards_column"] = repeated_batch["total_reward"].tolist()
        extra["response_tokens"] = [int(x) for x in mask.sum(dim=1).tolist()]
        step_info["generation_batches"] = gen_batch_info
        step_info["advantages_constant_over_tokens"] = bool(
            (train_data["advantages"] == train_data["advantages"][:, :1]).all()
        )

    # NeMo's own group: identical prompt token rows (what calculate_baseline_and_std_per_prompt
    # matches on), numbered in order of first appearance.
    groups: list[int] = []
    seen: dict[tuple, int] = {}
    for row in prompt_ids_for_adv.tolist():
        groups.append(seen.setdefault(tuple(row), len(seen)))
    return {
        "file": f"train_data_step{total_steps + 1}.jsonl",
        "rewards": rewards.tolist(),
        "advantage": train_data["advantages"][:, 0].tolist(),
        "sample_loss_mask": train_data["sample_mask"].tolist(),
        "truncated": [bool(t) for t in repeated_batch["truncated"]],
        "groups": groups,
        "extra": extra,
        "dataset_idx": list(repeated_batch["idx"]),
        "step_info": step_info,
    }


def estimator_detail(nemo, mc, prompt_ids, rewards, mask, advantages, train_data):
    """What the estimator used, per row and per step, for truth.json.

    Baselines and stds come from NeMo's calculate_baseline_and_std_per_prompt called as the
    estimator calls it. For reinforce_plus_plus the step's whitening moments are the estimator's
    own expressions (advantage_estimator.py L262-264) evaluated on the same tensors; the logged
    advantages are checked to equal (scalar - mean) * rsqrt(clamp(var, 1e-8)) bit for bit."""
    est = mc.grpo.adv_estimator
    step: dict[str, Any] = {"estimator": est.name}
    rows: dict[str, list] = {}
    if est.name == "grpo":
        baseline, std = nemo.calculate_baseline_and_std_per_prompt(
            prompt_ids,
            rewards,
            torch.ones_like(rewards),
            leave_one_out_baseline=est.use_leave_one_out_baseline,
        )
        rows["baseline"] = baseline.tolist()
        rows["std"] = std.tolist()
        rows["scalar_before_norm"] = (rewards - baseline).tolist()
    elif est.name == "reinforce_plus_plus":
        if est.minus_baseline:
            mean, _ = nemo.calculate_baseline_and_std_per_prompt(
                prompt_ids, rewards, torch.ones_like(rewards), leave_one_out_baseline=False
            )
            adv = rewards - mean
            rows["baseline"] = mean.tolist()
        else:
            adv = rewards
            rows["baseline"] = [0.0] * len(rewards)
        rows["scalar_before_norm"] = adv.tolist()
        adv = adv.unsqueeze(-1).expand(mask.shape)
        adv_mean = (adv * mask).sum() / mask.sum()
        adv_var = ((adv - adv_mean).pow(2) * mask).sum() / mask.sum()
        adv_rstd = adv_var.clamp(min=1e-8).rsqrt()
        assert torch.equal((adv - adv_mean) * adv_rstd, advantages), "whitening not reproduced"
        step.update(
            {
                "whiten_mean": adv_mean.item(),
                "whiten_var": adv_var.item(),
                "whiten_rstd": adv_rstd.item(),
                "whiten_tokens": mask.sum().item(),
                "whiten_mask": "token_loss_mask * sample_loss_mask (all T positions of the "
                "padded batch; prompt and padding positions have mask 0)",
            }
        )
    else:
        raise SystemExit(f"no detail for estimator {est.name}")
    return step, rows


CASES: dict[str, dict] = {
    "default": {
        "description": (
            "2 GRPO steps, 3 prompts x 4 generations, grpo_math_1B.yaml's GRPO settings "
            "(leave-one-out baseline, std normalisation, overlong filtering off). Step 1 prompt 0 "
            "generation 3 is truncated at max_new_tokens but stays in the loss (filtering off); "
            "step 1 prompt 1 and step 2 prompt 0 have zero reward std (advantage 0)."
        ),
        "steps": 2,
        "overrides": {},
        "val": False,
    },
    "overlong_filtered": {
        "description": (
            "1 GRPO step (the same rollouts as default's step 1) with grpo.overlong_filtering=true:"
            " "
            "the truncated sample (line idx 3, prompt 0 generation 3) gets sample_loss_mask 0 but "
            "stays in its prompt's baseline and std (the estimator passes torch.ones_like(rewards) "
            "as valid mask), so its own advantage is nonzero."
        ),
        "steps": 1,
        "overrides": {"grpo.overlong_filtering": True},
        "val": False,
    },
    "no_loo": {
        "description": (
            "1 GRPO step (default's step-1 rollouts) with use_leave_one_out_baseline=false: "
            "baseline = group mean, std = sample std (ddof 1) over the whole group."
        ),
        "steps": 1,
        "overrides": {"grpo.use_leave_one_out_baseline": False},
        "val": False,
    },
    "std_off": {
        "description": (
            "1 GRPO step (default's step-1 rollouts) with normalize_rewards=false: advantage = "
            "reward - leave-one-out baseline, no division by std."
        ),
        "steps": 1,
        "overrides": {"grpo.normalize_rewards": False},
        "val": False,
    },
    "validation": {
        "description": (
            "1 GRPO step (default's step-1 rollouts) followed by validation at step 1 "
            "(grpo.val_period=1) over 2 validation prompts, 1 generation each: NeMo's validate() "
            "writes val_data_step1.jsonl (content = list of {role, content} messages, rewards)."
        ),
        "steps": 1,
        "overrides": {"grpo.val_period": 1, "grpo.val_batch_size": 2, "grpo.max_val_samples": 2},
        "val": True,
    },
    # ---- cases for NeMo-RL changes after 7ea279a, rebuilt from PR text (see the section above)
    "rollout_identity": {
        "description": (
            "1 GRPO step whose batch holds dataset row 0 twice (two independent sampling groups "
            "with identical prompt tokens, as two images or environment states with the same text "
            "would be) and row 2: group A (lines 0-3) all wrong, rewards [0,0,0,0]; group B (lines "
            "4-7) rewards [1,1,0,1]; group C (lines 8-11) [0,0,1,0]. Advantages grouped by "
            "rollout identity as PR #3882 does (open on main; on branch super-v3.5-posttraining "
            "via #3959): group ids arange(3).repeat_interleave(4), one per sampling group, so A "
            "gets advantage 0. Grouping by equal prompt tokens (7ea279a, advcli today) would merge "
            "A and B into one 8-sample group; those advantages are kept as "
            "advantage_if_grouped_by_prompt_tokens."
        ),
        "steps": 1,
        "overrides": {},
        "val": False,
        "batches": [[0, 0, 2]],
        "responses": [
            [
                [
                    "2 plus 3 is 6 so \\boxed{6}",
                    "\\boxed{6}",
                    "\\boxed{3}",
                    "\\boxed{7}",
                ],
                [
                    "2 plus 3 is 5 so \\boxed{5}",
                    "\\boxed{5}",
                    "\\boxed{6}",
                    "so \\boxed{5}",
                ],
                PROBLEMS[2][2],
            ]
        ],
        "grouping": "rollout_identity",
        "notes": (
            "The train_data_step jsonl carries NO group field: grpo_train's 'Log training data' "
            "block writes a fixed key list (agent_ref when present, content, rewards, "
            "[filtered_rewards], input_lengths, token_ids, token_loss_mask, sample_loss_mask, "
            "advantages, generation_logprobs, prev_logprobs); #3882 pops its rollout_group_ids "
            "from the batch before that (prompt_ids_for_adv = repeated_batch.pop("
            "'rollout_group_ids')), and the NeMo-Gym coordinates of #3861 (_ng_group_id, "
            "_ng_group_attempt, _ng_rollout_index) go to Gym in the rollout request rows, not to "
            "this file. With #3882 a group is therefore a block of num_generations_per_prompt "
            "consecutive lines (line // n within the file; dynamic sampling keeps the blocks). "
            "group = rollout_group_id here; rollout_index = line % n and group_attempt = 0 are "
            "the coordinates a Gym row would carry (written by this script, not read from NeMo). "
            "advantage = the rollout-identity advantage that NeMo with #3882 writes (7ea279a's "
            "calculate_baseline_and_std_per_prompt and GRPOAdvantageEstimator, unchanged, fed the "
            "group ids as one-column rows); advantage_if_grouped_by_prompt_tokens = 7ea279a's "
            "own result on the same rollouts. Rewards from the math stand-in on scripted "
            "responses; logprobs from the random tiny Qwen2 as in the other cases."
        ),
        "later_prs": {
            "3882": "open on main; build_rollout_group_ids rebuilt from the hunk of "
            "nemo_rl/algorithms/utils.py @ fc1a3c193357ee7a64374141a7a0c5ec8e597ed0 quoted in "
            "the PR's review thread (2026-08-31) and the reviewer's statement of its return value",
            "3959": "merged 2026-09-02 into branch super-v3.5-posttraining: backport of #3882 at "
            "fc1a3c19",
            "3861": "merged 2026-08-27: Gym rows carry _ng_group_id/_ng_group_attempt/"
            "_ng_rollout_index (for GenRM cohorts); not written to train_data_step*.jsonl",
        },
    },
    "near_constant": {
        "description": (
            "1 GRPO step, 4 prompts x 4 generations (num_prompts_per_step=4), leave-one-out "
            "baseline and std normalisation on, rewards scripted (python floats, float32 in the "
            "reward tensor as NeMo's environments give them): group 0 exactly constant "
            "[0.11]*4, where 7ea279a's float32 std is 5.3e-5, not 0, so its estimator divides a "
            "1-ulp residue by it (advantage ~1.4e-4); group 1 'nearly constant' [0.11, "
            "0.11+1e-9, 0.11, 0.11+1e-9], which is the same float32 value four times (1e-9 is "
            "below half an ulp of 0.11), so it is group 0 again; group 2 [0, 1e-9, 0, 1e-9] "
            "(distinct in float32: a real, tiny std, normalised with epsilon 1e-6); group 3 "
            "[0, 0.11, 0.11, 0.11], PR #4158's spike case: line 12's leave-one-out peers are "
            "identical but their float32 std is 5.3e-5, so 7ea279a gives it about -2042. "
            "advantage = NeMo after #4158 (merged): normalise only where std > 0 and the sample's "
            "std comparison set is not one exact value; otherwise keep reward - baseline "
            "(-0.11 for line 12, the 1-ulp residue for groups 0-1). advantage_before_4158 = "
            "7ea279a's estimator."
        ),
        "steps": 1,
        "overrides": {"grpo.num_prompts_per_step": 4},
        "val": False,
        "scripted_rewards": (
            [0.11, 0.11, 0.11, 0.11]
            + [0.11, 0.11 + 1e-9, 0.11, 0.11 + 1e-9]
            + [0.0, 1e-9, 0.0, 1e-9]
            + [0.0, 0.11, 0.11, 0.11]
        ),
        "adv_rule": "4158",
        "notes": (
            "group = NeMo's own group (identical prompt-token rows, 7ea279a). reward = the "
            "float32 reward as logged; reward_scripted = the value the environment stand-in "
            "returned. advantage = NeMo's advantage after PR #4158, rebuilt from the PR's text "
            "(is_trivial_distribution: per sample, its leave-one-out peers, or the whole group "
            "without LOO, all exactly equal; True too for groups with < 2 valid samples; "
            "normalize_mask = (std > 0) & ~is_trivial_distribution; epsilon 1e-6 unchanged; no "
            "config key), with baseline and std from 7ea279a's calculate_baseline_and_std_per_"
            "prompt, which is NeMo's code. advantage_before_4158 = 7ea279a's "
            "GRPOAdvantageEstimator on the same rollouts. baseline, std, is_trivial_distribution "
            "per line as used. The file broadcasts the advantage over every token position."
        ),
        "later_prs": {
            "4158": "merged to main; rule from the PR description and the hunks quoted in its "
            "review threads: advantage_estimator.py L117-124 (normalize_mask), utils.py @ "
            "3d2a8a64df19a86f858ce2a99895e156a1576e00 L111-221 (third return value), the PR's "
            "test test_calculate_baseline_and_std_per_prompt_marks_trivial_leave_one_out_set",
            "4161": "closed, not merged: a 1e-3 STD_FLOOR instead (not used here)",
        },
    },
}

# ---- cases with float rewards and a detailed truth.json (estimators and settings beyond GRPO's
# defaults). Rewards are scripted (the math stand-in returns them in row order, across steps and
# generation batches); responses are PROBLEMS' own, of 5 to 12 generated tokens, so rows of one
# step differ in length.
R_STEP_A = [
    [0.9, 0.2, 0.55, 0.0],
    [1.0, 0.75, 0.75, 0.3],
    [0.1, 0.0, 0.65, 0.2],
    [0.4, 0.4, 0.4, 0.4],
]
R_STEP_B = [
    [0.35, 0.8, 0.05, 0.6],
    [0.0, 1.0, 0.5, 0.25],
    [0.7, 0.15, 0.95, 0.45],
    [0.2, 0.9, 0.3, 0.85],
]


def _flat(groups: list[list[float]]) -> list[float]:
    return [r for g in groups for r in g]


RPP_NOTES = (
    "reinforce_plus_plus (advantage_estimator.py ReinforcePlusPlusAdvantageEstimator."
    "compute_advantage, chosen by grpo.py _create_advantage_estimator): scalar s_i = r_i - "
    "mean of r over the rows with the same prompt tokens (calculate_baseline_and_std_per_prompt "
    "with leave_one_out_baseline=False and valid mask ones_like(rewards): every row of the group, "
    "sample_loss_mask 0 or not) when minus_baseline, else s_i = r_i; s_i is expanded over all T "
    "positions of the padded batch; with loss_fn.use_kl_in_reward false no KL term; then ONE "
    "whitening per step over the whole batch with mask = token_loss_mask * sample_loss_mask: "
    "mean = sum(s*mask)/sum(mask), var = sum((s-mean)^2*mask)/sum(mask) (population, token-"
    "weighted: each row counts once per generated token), A = (s - mean) * rsqrt(clamp(var, "
    "min=1e-8)) (no eps added), written on EVERY position (prompt and padding too, not zeroed). "
    "The file's `advantages` are exactly these (float32). steps[].whiten_mean/whiten_var/"
    "whiten_rstd/whiten_tokens = the step's moments; rows[].scalar_before_norm = s_i, "
    "rows[].baseline = the group mean subtracted (0 without minus_baseline)."
)
COLUMNS = {
    "content": "per message of the row, its content string (chat-templated prompt, decoded "
    "response, environment observation); roles not kept",
    "rewards": "repeated_batch['total_reward'] at the log block: the environment's reward after "
    "scale_rewards (and reward shaping, off here). Without dynamic sampling these are the rewards "
    "the estimator used. WITH use_dynamic_sampling it is overwritten by repeated_batch"
    "['total_reward'] of the filtered batch, which dynamic_sampling set to the UNFILTERED "
    "generation batch's rewards (filtered_repeated_batch['total_reward'] = total_rewards); "
    "from_batches concatenates those of the step's generation batches and slice(0, "
    "num_prompts_per_step*num_generations_per_prompt) keeps the first ones: line i then holds "
    "the i-th unfiltered reward of the step's first generation batch, NOT line i's reward",
    "filtered_rewards": "only with use_dynamic_sampling: `rewards` of grpo_train = repeated_batch"
    "['filtered_reward'], the kept rows' rewards, line-aligned: the rewards the estimator used",
    "input_lengths": "unpadded token count of the row (prompt + response + observation tokens)",
    "token_ids": "the row's tokens, right-padded with the pad id to the batch's longest row",
    "token_loss_mask": "1 on generated assistant tokens (eos included), 0 elsewhere",
    "sample_loss_mask": "loss_multiplier after overlong filtering, _apply_mask_sample_filter and "
    "seq-logprob-error masking (0 = sample left out of the loss)",
    "advantages": "train_data['advantages'] after _clip_grpo_advantages: GRPO writes its per-row "
    "scalar on every position; reinforce_plus_plus writes its whitened value on every position "
    "(see the case notes)",
    "generation_logprobs": "the generation backend's log-probs on generated tokens, 0 elsewhere",
    "prev_logprobs": "the policy's log-probs (position i = log p(token i)), 0 at position 0 and "
    "on padding",
    "idx": "the line number",
}
ROW_FIELDS = {
    "file, line": "where the row is (line = 0-based line of the jsonl, = its idx)",
    "group": "NeMo's own group: identical prompt-token rows, numbered per file",
    "reward": "the reward the estimator used (= filtered_rewards with dynamic sampling)",
    "advantage": "NeMo's logged advantage of the row (all positions hold this value here)",
    "advantage_before_clip": "the estimator's output before _clip_grpo_advantages",
    "baseline, std, scalar_before_norm": "what the estimator used for the row (GRPO: baseline "
    "and std from calculate_baseline_and_std_per_prompt as it calls it; scalar = reward - "
    "baseline; reinforce++: see the notes)",
    "reward_from_environment": "the math stand-in's (scripted) reward, before scale_rewards",
    "rewards_column": "what the file's `rewards` column holds on this line",
    "generation_batch, generation_batch_row": "which of the step's generation batches (and "
    "which row of it) the line comes from",
    "response_tokens": "sum of token_loss_mask * sample_loss_mask over the row",
}

CASES.update(
    {
        "reinforce_pp": {
            "description": (
                "2 steps, 4 prompts x 4 generations, grpo.adv_estimator.name="
                "reinforce_plus_plus with minus_baseline=true, loss_fn.use_kl_in_reward=false "
                "(the yaml's): Reinforce++-baseline. Float rewards; step 1 group 3 is constant "
                "(0.4 x4, its scalars are 0 but its whitened advantages are not); responses of "
                "5-12 tokens, so the token-weighted whitening differs from a per-row one; step "
                "1 line 3 and step 2 line 11 are truncated at max_new_tokens (filtering off: "
                "they stay)."
            ),
            "steps": 2,
            "overrides": {
                "grpo.num_prompts_per_step": 4,
                "grpo.adv_estimator.name": "reinforce_plus_plus",
                "grpo.adv_estimator.minus_baseline": True,
                "loss_fn.use_kl_in_reward": False,
            },
            "val": False,
            "batches": [[0, 1, 2, 3], [4, 5, 0, 2]],
            "scripted_rewards": _flat(R_STEP_A) + _flat(R_STEP_B),
            "detail": True,
            "notes": RPP_NOTES,
        },
        "reinforce_pp_no_baseline": {
            "description": (
                "reinforce_pp's rollouts with grpo.adv_estimator.minus_baseline=false (plain "
                "Reinforce++): the scalar is the reward itself, whitened over the step's masked "
                "tokens."
            ),
            "steps": 2,
            "overrides": {
                "grpo.num_prompts_per_step": 4,
                "grpo.adv_estimator.name": "reinforce_plus_plus",
                "grpo.adv_estimator.minus_baseline": False,
                "loss_fn.use_kl_in_reward": False,
            },
            "val": False,
            "batches": [[0, 1, 2, 3], [4, 5, 0, 2]],
            "scripted_rewards": _flat(R_STEP_A) + _flat(R_STEP_B),
            "detail": True,
            "notes": RPP_NOTES,
        },
        "reinforce_pp_overlong": {
            "description": (
                "reinforce_pp's rollouts with grpo.overlong_filtering=true: the truncated rows "
                "(step 1 line 3, step 2 line 11) get sample_loss_mask 0. They still count in "
                "their group's mean (valid mask ones_like(rewards)) but not in the step's "
                "whitening moments (mask = token_loss_mask * sample_loss_mask), and their own "
                "advantage is written, nonzero."
            ),
            "steps": 2,
            "overrides": {
                "grpo.num_prompts_per_step": 4,
                "grpo.adv_estimator.name": "reinforce_plus_plus",
                "grpo.adv_estimator.minus_baseline": True,
                "loss_fn.use_kl_in_reward": False,
                "grpo.overlong_filtering": True,
            },
            "val": False,
            "batches": [[0, 1, 2, 3], [4, 5, 0, 2]],
            "scripted_rewards": _flat(R_STEP_A) + _flat(R_STEP_B),
            "detail": True,
            "notes": RPP_NOTES,
        },
        "no_loo_no_norm": {
            "description": (
                "2 GRPO steps, 3 prompts x 4 generations, use_leave_one_out_baseline=false and "
                "normalize_rewards=false: advantage = reward - group mean (all 4 rows), no "
                "division. Float rewards; step 2 group 0 is constant (0.4 x4)."
            ),
            "steps": 2,
            "overrides": {
                "grpo.use_leave_one_out_baseline": False,
                "grpo.normalize_rewards": False,
            },
            "val": False,
            "scripted_rewards": _flat(R_STEP_A[:3]) + _flat([[0.4] * 4] + R_STEP_B[:2]),
            "detail": True,
            "notes": (
                "GRPOAdvantageEstimator with use_leave_one_out_baseline=false, normalize_rewards"
                "=false: baseline = calculate_baseline_and_std_per_prompt's group mean over all "
                "rows of the prompt (valid mask ones_like(rewards)); advantage = reward - "
                "baseline, written on every position."
            ),
        },
        "dynamic_sampling": {
            "description": (
                "2 GRPO steps (leave-one-out, std normalisation) with grpo.use_dynamic_sampling="
                "true, 3 prompts x 4 generations per generation batch. Step 1: generation batch "
                "0 (dataset rows 0,1,2) keeps 8 rows (row 1's group is 0.5 x4: std 0, dropped), "
                "so grpo_train draws generation batch 1 (rows 3,4,5, all kept); the cache's 20 "
                "rows are cut to 12: batch 0's two groups and batch 1's first, 8 valid rows "
                "discarded. Step 2: batch 0 (rows 1,3,5) keeps one group (0.0 x4 and 0.75 x4 "
                "dropped), batch 1 (rows 0,2,4) keeps two (0.25 x4 dropped): exactly 12. "
                "Constant groups use values whose float32 std is exactly 0 (see near_constant "
                "for values where it is not)."
            ),
            "steps": 2,
            "overrides": {"grpo.use_dynamic_sampling": True},
            "val": False,
            "gen_batches": [[[0, 1, 2], [3, 4, 5]], [[1, 3, 5], [0, 2, 4]]],
            "scripted_rewards": _flat(
                [
                    [0.9, 0.2, 0.55, 0.0],
                    [0.5] * 4,
                    [0.1, 0.0, 0.65, 0.2],
                    [0.35, 0.8, 0.05, 0.6],
                    [0.0, 1.0, 0.5, 0.25],
                    [0.7, 0.15, 0.95, 0.45],
                    [0.0] * 4,
                    [1.0, 0.75, 0.75, 0.3],
                    [0.75] * 4,
                    [0.2, 0.9, 0.3, 0.85],
                    [0.25] * 4,
                    [0.45, 1.0, 0.0, 0.8],
                ]
            ),
            "detail": True,
            "notes": (
                "dynamic_sampling (grpo.py) keeps the SAMPLES whose std from "
                "calculate_baseline_and_std_per_prompt (leave-one-out here: the std of the "
                "sample's peers) is != 0.0, caches them across generation batches "
                "(BatchedDataDict.from_batches) and, once there are >= num_prompts_per_step * "
                "num_generations_per_prompt, slices the first that many. The file's "
                "`filtered_rewards` are the rewards the estimator used (line-aligned). Its "
                "`rewards` column is repeated_batch['total_reward'], which dynamic_sampling set "
                "to each generation batch's UNFILTERED rewards; after from_batches and slice it "
                "holds the first 12 unfiltered rewards of the step's generation batches, i.e. "
                "generation batch 0's 12 rewards, dropped groups included, in batch order: "
                "line i's `rewards` is not line i's reward (rows[].rewards_column vs "
                "rows[].reward). The estimator recomputes baseline and std on the kept rows "
                "(prompt_ids_for_adv of the filtered batch); whole groups are kept here, so the "
                "kept groups' advantages equal what the unfiltered batch would give. "
                "steps[].generation_batches lists every generation batch: dataset rows, "
                "environment rewards, the std dynamic sampling tested, whether the batch was "
                "complete, dynamic_sampling_num_discarded_valid_samples."
            ),
        },
        "dynamic_sampling_partial_groups": {
            "description": (
                "As dynamic_sampling, but with groups where one sample's leave-one-out std is "
                "exactly 0: dynamic sampling filters SAMPLES, not groups, so such a sample is "
                "dropped and the rest of its group kept, and the final slice can cut a group. "
                "Step 1: batch 0 rows 0,1,2 (group [0.25,0.25,0.25,1.0] loses its 1.0 sample; "
                "0.5 x4 dropped) keeps 7, batch 1 rows 3,4,5 keeps 12; the first 12 of 19 are "
                "taken, leaving a 3-row group and a 1-row group (batch 1 row 4's first "
                "generation) in the file. Step 2 (binary rewards): [0,0,0,1] loses its only "
                "correct sample (its 3 wrong ones then get advantage 0), [1,1,1,0] its only "
                "wrong one, and the slice cuts batch 1's first group [1,0,0,0] (its 1 dropped) "
                "to 2 rows."
            ),
            "steps": 2,
            "overrides": {"grpo.use_dynamic_sampling": True},
            "val": False,
            "gen_batches": [[[0, 1, 2], [3, 4, 5]], [[1, 3, 5], [0, 2, 4]]],
            "scripted_rewards": _flat(
                [
                    [0.9, 0.2, 0.55, 0.0],
                    [0.5] * 4,
                    [0.25, 0.25, 0.25, 1.0],
                    [0.35, 0.8, 0.05, 0.6],
                    [0.0, 1.0, 0.5, 0.25],
                    [0.7, 0.15, 0.95, 0.45],
                    [0.0, 0.0, 0.0, 1.0],
                    [1.0, 1.0, 1.0, 0.0],
                    [0.0, 1.0, 0.0, 1.0],
                    [1.0, 0.0, 0.0, 0.0],
                    [0.0, 1.0, 1.0, 0.0],
                    [1.0, 1.0, 0.0, 1.0],
                ]
            ),
            "detail": True,
            "notes": (
                "See dynamic_sampling's notes for the two reward columns. Here dynamic sampling "
                "(grpo.py dynamic_sampling: non_zero_std_mask = std != 0.0 over samples, "
                "select_indices, from_batches, slice(0, 12)) leaves partial groups in the file: "
                "NeMo's estimator then computes the leave-one-out baseline and std over the rows "
                "left (a 1-row group gets baseline = reward, advantage 0). rows[].group is "
                "NeMo's group in the file (equal prompt tokens); generation_batch and "
                "generation_batch_row say which rows of the generation batch survived."
            ),
        },
        "reward_scaling": {
            "description": (
                "2 GRPO steps (leave-one-out, std normalisation), 3 prompts x 4 generations, "
                "grpo.reward_scaling enabled with source [0, 1] -> target [-0.5, 0.5]; some "
                "environment rewards lie outside [0, 1] (1.4, -0.3, 1.2) and are clamped before "
                "scaling."
            ),
            "steps": 2,
            "overrides": {
                "grpo.reward_scaling.enabled": True,
                "grpo.reward_scaling.source_min": 0.0,
                "grpo.reward_scaling.source_max": 1.0,
                "grpo.reward_scaling.target_min": -0.5,
                "grpo.reward_scaling.target_max": 0.5,
            },
            "val": False,
            "scripted_rewards": _flat(
                [
                    [1.4, 1.0, 0.2, -0.3],
                    [0.75, 0.3, 0.9, 0.1],
                    [0.6, 0.0, 1.2, 0.45],
                    [0.35, 0.8, 0.05, 0.6],
                    [-0.3, 1.0, 0.5, 0.25],
                    [0.7, 0.15, 0.95, 0.45],
                ]
            ),
            "detail": True,
            "notes": (
                "scale_rewards (grpo.py) runs right after the rollout and overwrites repeated_"
                "batch['total_reward'] with target_min + (clamp(r, source_min, source_max) - "
                "source_min) / (source_max - source_min) * (target_max - target_min); grpo_train "
                "then takes rewards = repeated_batch['total_reward'], so the file's `rewards` "
                "are the SCALED rewards, the ones the estimator used; the environment's rewards "
                "(rows[].reward_from_environment) are not in the file, nor is any trace of the "
                "scaling or the clamping (it prints a warning only)."
            ),
        },
        "clip_advantages": {
            "description": (
                "2 GRPO steps (leave-one-out, std normalisation), 3 prompts x 4 generations, "
                "grpo.advantage_clip_low=-1.0, advantage_clip_high=1.0: _clip_grpo_advantages "
                "clamps the estimator's advantages before they are logged; several rows reach "
                "beyond +-1 (float rewards)."
            ),
            "steps": 2,
            "overrides": {"grpo.advantage_clip_low": -1.0, "grpo.advantage_clip_high": 1.0},
            "val": False,
            "scripted_rewards": _flat(R_STEP_A[:3]) + _flat(R_STEP_B[:3]),
            "detail": True,
            "notes": (
                "grpo_train calls _clip_grpo_advantages(train_data['advantages'], grpo) after "
                "the estimator and before the log block: the file's `advantages` are clamped to "
                "[advantage_clip_low, advantage_clip_high]; nothing in the file says so. "
                "rows[].advantage = the logged (clipped) value, rows[].advantage_before_clip = "
                "GRPOAdvantageEstimator's."
            ),
        },
    }
)


def versions() -> dict[str, str]:
    import omegaconf
    import pydantic
    import tokenizers
    import transformers

    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "pydantic": pydantic.__version__,
        "omegaconf": omegaconf.__version__,
        "numpy": np.__version__,
    }


def run_case(nemo, root: Path, name: str, spec: dict, outdir: Path, fixtures: Path, commit: str):
    dumpkit.seed_all(42)
    mc = load_master_config(nemo, root, spec["overrides"])
    prompt_file = root / mc.data["default"]["prompt_file"]
    task_spec = nemo.TaskDataSpec(task_name="math", prompt_file=str(prompt_file))
    tokenizer, model = build_tokenizer_and_model(task_spec.prompt)
    gen = GenerationStandIn(tokenizer, model, mc.policy["generation"]["max_new_tokens"])
    env = nemo.MathEnvStandIn(nemo.EnvironmentReturn, spec.get("scripted_rewards"))

    base = outdir / name / "logs"
    if base.exists():
        shutil.rmtree(base)
    log_dir = nemo.get_next_experiment_dir(str(base))  # as examples/run_grpo.py L103 does
    logger_cfg = dict(mc.logger, log_dir=log_dir)
    for k in ("wandb_enabled", "swanlab_enabled", "tensorboard_enabled", "mlflow_enabled"):
        logger_cfg[k] = False
    logger_cfg["monitor_gpus"] = False
    logger = nemo.Logger(logger_cfg)

    max_seq = mc.policy["max_total_sequence_length"]
    data = [make_datum(nemo, tokenizer, task_spec, max_seq, i) for i in range(6)]
    p = mc.grpo.num_prompts_per_step
    rows = []
    steps_info = []
    for step in range(spec["steps"]):
        if "gen_batches" in spec:  # dynamic sampling: the dataloader batches the step draws
            batches = [
                nemo.rl_collate_fn([copy.deepcopy(data[i]) for i in gb])
                for gb in spec["gen_batches"][step]
            ]
        elif "batches" in spec:  # a case's own dataset rows for the step (a row may repeat)
            batches = [nemo.rl_collate_fn([copy.deepcopy(data[i]) for i in spec["batches"][step]])]
        else:
            batches = [nemo.rl_collate_fn(data[step * p : (step + 1) * p])]
        info = train_step(
            nemo,
            mc,
            env,
            gen,
            model,
            tokenizer,
            logger,
            batches,
            step,
            grouping=spec.get("grouping", "prompt_tokens"),
            adv_rule=spec.get("adv_rule", "7ea279a"),
            responses=[spec["responses"][step]] if "responses" in spec else None,
            detail=spec.get("detail", False),
        )
        if spec.get("detail"):
            steps_info.append({"file": f"{Path(log_dir).name}/{info['file']}", **info["step_info"]})
        n = mc.grpo.num_generations_per_prompt
        for line, g in enumerate(info["groups"]):
            row = {
                "file": f"{Path(log_dir).name}/{info['file']}",
                "line": line,
                "group": g,
                "dataset_idx": info["dataset_idx"][line],
                "reward": info["rewards"][line],
                "advantage": info["advantage"][line],
                "sample_loss_mask": info["sample_loss_mask"][line],
                "truncated": info["truncated"][line],
            }
            if "scripted_rewards" in spec and not spec.get("detail"):
                row["reward_scripted"] = spec["scripted_rewards"][step * len(info["groups"]) + line]
            if spec.get("grouping") == "rollout_identity":
                # the coordinates a NeMo-Gym row would carry (#3861); the dump has none of them
                row["rollout_index"] = line % n
                row["group_attempt"] = 0
            for key, values in info["extra"].items():
                row[key] = values[line]
            rows.append(row)
        if spec["val"]:
            val_data = [make_datum(nemo, tokenizer, task_spec, max_seq, i) for i in (6, 7)]
            val_batches = [nemo.rl_collate_fn(val_data)]
            gen.queue = [PROBLEMS[i][2][0] for i in (6, 7)]
            nemo.validate(gen, val_batches, tokenizer, {"math": env}, step + 1, mc, logger=logger)
            for line, i in enumerate((6, 7)):
                rows.append(
                    {
                        "file": f"{Path(log_dir).name}/val_data_step{step + 1}.jsonl",
                        "line": line,
                        "group": line,
                        "dataset_idx": i,
                        "reward": MathEnvStandIn.verify(
                            tokenizer.decode(
                                tokenizer(PROBLEMS[i][2][0], add_special_tokens=False)["input_ids"]
                            ),
                            PROBLEMS[i][1],
                        ),
                        "advantage": None,
                        "sample_loss_mask": None,
                        "truncated": False,
                    }
                )

    dest = fixtures / name
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    shutil.copytree(log_dir, dest / Path(log_dir).name)
    g = mc.grpo
    truth = {
        "made_by": MADE_BY,
        "framework": f"NeMo-RL @ {commit}",
        "case": name,
        "description": spec["description"],
        "settings": {
            "num_prompts_per_step": g.num_prompts_per_step,
            "num_generations_per_prompt": g.num_generations_per_prompt,
            "adv_estimator": g.adv_estimator.model_dump(),
            "use_leave_one_out_baseline": g.use_leave_one_out_baseline,
            "normalize_rewards": g.normalize_rewards,
            "overlong_filtering": g.overlong_filtering,
            "use_dynamic_sampling": g.use_dynamic_sampling,
            "reward_scaling": g.reward_scaling.model_dump(),
            "advantage_clip_low": g.advantage_clip_low,
            "advantage_clip_high": g.advantage_clip_high,
            "seq_logprob_error_threshold": g.seq_logprob_error_threshold,
            "max_total_sequence_length": mc.policy["max_total_sequence_length"],
            "max_new_tokens": mc.policy["generation"]["max_new_tokens"],
            "make_sequence_length_divisible_by": mc.policy["make_sequence_length_divisible_by"],
            "val_period": g.val_period,
            "pad_token_id": tokenizer.pad_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "prompt_file": mc.data["default"]["prompt_file"],
            "processor": mc.data["default"]["processor"],
        },
        "notes": (
            "group = NeMo's own group: identical prompt-token rows (prompt_ids_for_adv, what "
            "calculate_baseline_and_std_per_prompt matches on), numbered per file in order of "
            "first appearance. advantage = NeMo's advantage for the sample (the estimator's "
            "scalar, which "
            "the file broadcasts over every token position, prompt and padding included). "
            "Rewards come from a math-environment stand-in on scripted responses; logprobs from a "
            "random tiny Qwen2 (generation in bf16, prev in fp32). Validation lines have no "
            "advantage or loss mask."
        ),
        "source_lines": (
            SOURCE_LINES
            if spec.get("detail")
            else {k: v for k, v in SOURCE_LINES.items() if k not in DETAIL_ONLY_SOURCE}
        ),
        "rows": rows,
    }
    if "notes" in spec:  # the case's own notes (the later-PR cases and the detailed ones)
        truth["notes"] = spec["notes"]
    if "later_prs" in spec:  # only the later-PR cases: what is rebuilt from PR text, not run
        truth["later_prs"] = spec["later_prs"]
    if spec.get("detail"):
        lf = mc.loss_fn
        truth["settings"]["loss_fn"] = {
            "use_kl_in_reward": lf.use_kl_in_reward,
            "reference_policy_kl_penalty": lf.reference_policy_kl_penalty,
            "reference_policy_kl_type": lf.reference_policy_kl_type,
        }
        truth["settings"]["dynamic_sampling_max_gen_batches"] = g.dynamic_sampling_max_gen_batches
        truth["settings"]["batch_multiplier"] = g.batch_multiplier
        truth["versions"] = versions()
        truth["columns"] = COLUMNS
        truth["steps"] = steps_info
        truth["rows_fields"] = ROW_FIELDS
    (dest / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir", type=Path, help="scratch folder (extracted source, logger base dirs)")
    ap.add_argument("--nemo-src", required=True, help="fetched bare git dir or extracted tree")
    ap.add_argument("--fixtures", type=Path, default=REPO / "tests/fixtures/real/nemo-rl")
    ap.add_argument("cases", nargs="*", default=list(CASES))
    args = ap.parse_intermixed_args()
    args.outdir.mkdir(parents=True, exist_ok=True)
    # the folder holding nemo_rl/ and examples/
    root, commit = dumpkit.prepare_source(
        args.nemo_src, args.outdir.resolve(), "nemo_rl", "examples/configs", "examples/prompts"
    )
    nemo = load_nemo(root)
    for name in args.cases:
        dest = run_case(nemo, root, name, CASES[name], args.outdir, args.fixtures, commit)
        print(f"wrote {dest}")


if __name__ == "__main__":
    main()
