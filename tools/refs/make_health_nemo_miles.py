"""Reference rollout-correction figures and weights, computed by NeMo-RL's and miles' own code on
the two-stream log ``tests/fixtures/refs/health/log.parquet`` (``health_inputs.py``).

Sources (read from bare git clones; the commit is checked and written into each fixture)
  NeMo-RL  https://github.com/NVIDIA-NeMo/RL @ 7ea279abfbeb698b092856d0dab61e7cf39bc909
    nemo_rl/algorithms/loss/interfaces.py      LossType, MetricNormalizer, LossInputType,
                                               LossFunction
    nemo_rl/algorithms/utils.py                calculate_kl, masked_mean
    nemo_rl/algorithms/loss/loss_functions.py  ClippedPGLossConfig, ClippedPGLossFn
    nemo_rl/algorithms/grpo.py                 compute_and_apply_seq_logprob_error_masking
  miles    https://github.com/radixark/miles @ 31f1ca961a94cb860cec3b2dea34ec332bfa8f76
    miles/backends/training_utils/loss_hub/corrections.py  vanilla_tis_function, icepop_function
    miles/backends/training_utils/loss_hub/math_utils.py   compute_approx_kl
    miles/backends/training_utils/cp_utils.py              get_sum_of_sample_mean
    miles/backends/training_utils/loss_hub/losses.py       policy_loss_function: the statements
        from ``train_scored_log_probs = old_log_probs`` to the ``if rollout_old_log_probs:`` that
        computes both figures (found by their text)
    miles/backends/training_utils/log_utils.py             aggregate_train_losses: the division of
        the summed per-sample means by the step's sample count (statement asserted)
  slime    https://github.com/THUDM/slime @ 624b824a898ab0ec1fcb4d373004c7f3852bf515
    slime/backends/megatron_utils/loss.py      vanilla_tis_function, icepop_function;
        policy_loss_function: the statements from ``train_rollout_logprob_abs_diff = None`` to
        its ``if "rollout_log_probs" in batch ...`` (slime logs no ``train_rollout_kl``)
    slime/backends/megatron_utils/cp_utils.py  get_sum_of_sample_mean
    slime/observability/train_metric_utils.py  the same division as miles' (statement asserted)
  Each definition is taken out of its file with ``ast`` and compiled unchanged (line numbers kept,
  ``from __future__ import annotations`` on so that hints naming modules not loaded stay text).

How the batch is laid out
  NeMo-RL: one microbatch of the 24 rows, each the whole sequence (prompt included) padded to the
  longest; ``token_mask`` = the action mask (int64, as ``torch.ones_like(token_ids)`` makes it),
  ``sample_mask`` = 1; ``generation_logprobs`` = the sampler's log-probs on action tokens and 0
  elsewhere (``add_grpo_token_loss_masks_and_generation_logprobs`` zeroes messages it did not
  generate); ``prev_logprobs`` = the trainer's log-probs, 0 at position 0 and on padding (as the
  policy workers write them). Position t holds log p(token t), so the loss's ``[:, 1:]`` slices
  line up with ``next_token_logprobs`` = ``prev_logprobs[:, 1:]`` (the first micro-step, before
  any update: current = trainer). ``global_valid_seqs``/``global_valid_toks`` are the sums that
  ``nemo_rl/models/automodel/data.py`` makes (one rank). ``ClippedPGLossFn.__call__`` runs whole;
  the per-token weights it multiplies the loss by (``importance_weights_to_use``) and its masks
  (``token_kept_mask`` / ``seq_kept_mask``) are read from the call's frame as it returns. With a
  ``seq_logprob_error_threshold`` the masking function runs first and the loss sees its
  ``sample_mask``, as ``grpo_train`` orders them. ``reference_policy_kl_penalty`` = 0 (no
  reference model: it does not enter these figures).
  miles: one micro-batch of 24 samples; a sample's response is the row after its prompt (the
  first ``PROMPT_TOKENS`` tokens), ``loss_masks`` = the action mask there (0 on the observation
  span), ``log_probs`` = trainer, ``rollout_log_probs`` = sampler; context parallel size 1. The
  logged value of a metric is (Σ over samples of the per-sample mean over loss-mask tokens) /
  samples, or with ``calculate_per_token_loss`` Σ over tokens / Σ max(tokens, 1); both are saved.
  The TIS weights are what ``vanilla_tis_function`` / ``icepop_function`` multiply ``pg_loss`` by,
  read by passing ``pg_loss`` = 1; slime's own functions run too and must give the same weights.
  miles' ``train_rollout_kl`` goes through ``compute_approx_kl``, which casts to float32 itself.
  Not run: the rest of ``policy_loss_function`` (it needs a model's logits and Megatron's
  parallel groups), none of which feeds these figures.

Precision: every case is run twice, with the log's float32 log-probs as float32 tensors (what the
trainers compute in) and cast to float64; the fixtures hold both (``float32`` and ``float64``).

Venv: /tmp/fw/nemo (Python 3.11, torch 2.13.0+cpu, pydantic 2.14.4, numpy 2.4.6, pyarrow 26.0.1);
only torch, pydantic, numpy and pyarrow are imported. CI never runs this script; the suite reads
the JSON it writes (tests/core/test_health_refs_nemo_miles.py).

Run, from the repository root::

    /tmp/fw/nemo/bin/python tools/refs/make_health_nemo_miles.py \\
        --nemo-git NEMO_RL.git --miles-git MILES.git --slime-git SLIME.git

(each a bare clone of github.com/NVIDIA-NeMo/RL, radixark/miles, THUDM/slime at the commits above)

It writes tests/fixtures/refs/health/nemo_rl.json and miles.json. Deterministic (no randomness).
"""

from __future__ import annotations
import __future__

import argparse
import ast
import enum
import hashlib
import json
import subprocess
import sys
from argparse import Namespace
from collections.abc import Callable
from pathlib import Path
from typing import Any, NotRequired, Optional, Protocol, TypedDict, TypeVar

import numpy as np
import pyarrow.parquet as pq
import pydantic
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from health_inputs import PROMPT_TOKENS  # noqa: E402

REPO = HERE.parents[1]
LOG = REPO / "tests/fixtures/refs/health/log.parquet"
OUT = REPO / "tests/fixtures/refs/health"
MADE_BY = "tools/refs/make_health_nemo_miles.py"
NEMO_COMMIT = "7ea279abfbeb698b092856d0dab61e7cf39bc909"
MILES_COMMIT = "31f1ca961a94cb860cec3b2dea34ec332bfa8f76"
SLIME_COMMIT = "624b824a898ab0ec1fcb4d373004c7f3852bf515"
DTYPES = {"float32": torch.float32, "float64": torch.float64}


# --------------------------------------------------------------------------------------------------
# taking definitions out of a source file, unchanged


class Source:
    """One file of a bare git clone at its checked commit."""

    def __init__(self, git_dir: str, commit: str, rel: str) -> None:
        head = subprocess.run(
            ["git", "--git-dir", git_dir, "rev-parse", "HEAD"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        if head != commit:
            raise SystemExit(f"{git_dir}: HEAD is {head}, this script was made at {commit}")
        self.rel = rel
        self.text = subprocess.run(
            ["git", "--git-dir", git_dir, "show", f"{commit}:{rel}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        self.tree = ast.parse(self.text, filename=rel)
        self.lines: dict[str, str] = {}

    def node(self, name: str) -> ast.stmt:
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
                return node
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets
            ):
                return node
        raise SystemExit(f"{self.rel}: {name} not found")

    def define(self, names: list[str], ns: dict[str, Any]) -> None:
        nodes = [self.node(n) for n in names]
        for n, node in zip(names, nodes, strict=True):
            self.lines[n] = f"L{node.lineno}-{node.end_lineno}"
        run_nodes(nodes, self.rel, ns)

    def statements(self, fn: str, first: str, last: str) -> list[ast.stmt]:
        """The statements of function ``fn`` from the one whose text starts with ``first`` to the
        one starting with ``last`` (same block), as parsed."""
        body = self.node(fn).body
        texts = [ast.unparse(s) for s in body]
        i = next(k for k, t in enumerate(texts) if t.startswith(first))
        j = next(k for k, t in enumerate(texts) if k >= i and t.startswith(last))
        self.lines[f"{fn} block"] = f"L{body[i].lineno}-{body[j].end_lineno}"
        return body[i : j + 1]


def run_nodes(nodes: list[ast.stmt], filename: str, ns: dict[str, Any]) -> None:
    module = ast.Module(body=nodes, type_ignores=[])
    flags = __future__.annotations.compiler_flag
    exec(compile(module, filename, "exec", flags=flags, dont_inherit=True), ns)


def locals_at_return(fn: Callable[..., Any], code: Any, *args: Any) -> tuple[Any, dict[str, Any]]:
    """Call ``fn`` and keep the local variables of the frame running ``code`` as it returns."""
    seen: dict[str, Any] = {}

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "return" and frame.f_code is code:
            seen.update(frame.f_locals)

    sys.setprofile(profile)
    try:
        result = fn(*args)
    finally:
        sys.setprofile(None)
    return result, seen


# --------------------------------------------------------------------------------------------------
# the log


def read_log() -> list[dict[str, Any]]:
    rows = pq.read_table(LOG).to_pylist()
    for r in rows:
        if any(r["action_mask"][:PROMPT_TOKENS]):
            raise SystemExit("the log's prompt is no longer its first PROMPT_TOKENS tokens")
    return rows


def action_positions(row: dict[str, Any]) -> list[int]:
    return [t for t, m in enumerate(row["action_mask"]) if m]


def as_floats(x: torch.Tensor) -> list[float]:
    return [float(v) for v in x.detach().cpu().double().tolist()]


def plain(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v.item() if isinstance(v, torch.Tensor) else v for k, v in metrics.items()}


# --------------------------------------------------------------------------------------------------
# NeMo-RL


def load_nemo(git_dir: str) -> tuple[dict[str, Any], dict[str, dict[str, str]]]:
    ns: dict[str, Any] = {
        "__name__": "nemo_rl_extracted",
        "torch": torch,
        "enum": enum,
        "Any": Any,
        "Optional": Optional,
        "NotRequired": NotRequired,
        "TypedDict": TypedDict,
        "TypeVar": TypeVar,
        "Protocol": Protocol,
        "BaseModel": pydantic.BaseModel,
    }
    sys.modules["nemo_rl_extracted"] = type(sys)("nemo_rl_extracted")
    sources = [
        (
            "nemo_rl/algorithms/loss/interfaces.py",
            ["LossType", "MetricNormalizer", "LossInputType", "LossFunction"],
        ),
        ("nemo_rl/algorithms/utils.py", ["calculate_kl", "masked_mean"]),
        ("nemo_rl/algorithms/loss/loss_functions.py", ["ClippedPGLossConfig", "ClippedPGLossFn"]),
        ("nemo_rl/algorithms/grpo.py", ["compute_and_apply_seq_logprob_error_masking"]),
    ]
    lines: dict[str, dict[str, str]] = {}
    for rel, names in sources:
        src = Source(git_dir, NEMO_COMMIT, rel)
        src.define(names, ns)
        lines[rel] = src.lines
    sys.modules["nemo_rl_extracted"].__dict__.update(ns)  # pydantic resolves hints here
    ns["ClippedPGLossConfig"].model_rebuild()
    return ns, lines


def nemo_batch(rows: list[dict[str, Any]], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    width = max(len(r["input_ids"]) for r in rows)
    shape = (len(rows), width)
    input_ids = torch.zeros(shape, dtype=torch.int64)
    token_mask = torch.zeros(shape, dtype=torch.int64)
    generation = torch.zeros(shape, dtype=dtype)
    prev = torch.zeros(shape, dtype=dtype)
    for i, r in enumerate(rows):
        n = len(r["input_ids"])
        mask = torch.tensor(r["action_mask"], dtype=torch.int64)
        input_ids[i, :n] = torch.tensor(r["input_ids"])
        token_mask[i, :n] = mask
        # float32 values as the log holds them, then the dtype of the run
        sampler = torch.tensor(r["logprobs"], dtype=torch.float32).to(dtype)
        trainer = torch.tensor(r["trainer_logprobs"], dtype=torch.float32).to(dtype)
        generation[i, :n] = torch.where(mask.bool(), sampler, torch.zeros_like(sampler))
        prev[i, 1:n] = trainer[1:]
    return {
        "input_ids": input_ids,
        "token_mask": token_mask,
        "sample_mask": torch.ones(len(rows), dtype=dtype),
        "advantages": torch.zeros(shape, dtype=dtype),
        "generation_logprobs": generation,
        "prev_logprobs": prev,
    }


# (case, ClippedPGLossConfig settings, seq_logprob_error_threshold, advcli mode, bounds, note)
NEMO_CASES: list[tuple[str, dict[str, Any], float | None, str | None, list[float] | None, str]] = [
    ("metrics_k3", {}, None, None, None, "no correction; gen/policy KL as k3 (the default type)"),
    ("metrics_k1", {"reference_policy_kl_type": "k1"}, None, None, None, "KL figures as k1"),
    ("metrics_k2", {"reference_policy_kl_type": "k2"}, None, None, None, "KL figures as k2"),
    (
        "tis",
        {
            "truncated_importance_sampling_type": "tis",
            "truncated_importance_sampling_ratio": 2.0,
        },
        None,
        "token-truncate",
        [0.0, 2.0],
        "tis: clamp(ρ, min, max), min defaulting to 0",
    ),
    (
        "tis_min",
        {
            "truncated_importance_sampling_type": "tis",
            "truncated_importance_sampling_ratio": 2.0,
            "truncated_importance_sampling_ratio_min": 0.5,
        },
        None,
        "token-truncate",
        [0.5, 2.0],
        "tis with truncated_importance_sampling_ratio_min",
    ),
    (
        "icepop",
        {
            "truncated_importance_sampling_type": "icepop",
            "truncated_importance_sampling_ratio": 2.0,
            "truncated_importance_sampling_ratio_min": 0.5,
        },
        None,
        "token-mask",
        [0.5, 2.0],
        "icepop: ρ kept inside [min, max], 0 outside",
    ),
    (
        "seq_mask_tis",
        {
            "truncated_importance_sampling_type": "seq-mask-tis",
            "truncated_importance_sampling_ratio": 1.25,
            "truncated_importance_sampling_ratio_min": 0.8,
        },
        None,
        "seq-mask-tis",
        [0.8, 1.25],
        "seq-mask-tis: a row whose geometric-mean ratio exp(mean δ) is outside [min, max] is "
        "masked whole; kept rows carry their raw per-token ρ (not truncated)",
    ),
    (
        "seq_logprob_error_threshold",
        {
            "truncated_importance_sampling_type": "tis",
            "truncated_importance_sampling_ratio": 2.0,
        },
        1.5,
        "token-truncate",
        [0.0, 2.0],
        "grpo.seq_logprob_error_threshold = 1.5: rows whose mean exp(|δ|) exceeds it get "
        "sample_mask 0 before the loss (which then runs tis over the rows left)",
    ),
]


def nemo_case(
    nemo: dict[str, Any],
    rows: list[dict[str, Any]],
    settings: dict[str, Any],
    threshold: float | None,
    dtype: torch.dtype,
) -> dict[str, Any]:
    base = {"reference_policy_kl_penalty": 0.0}
    if settings.get("truncated_importance_sampling_type"):
        base["use_importance_sampling_correction"] = True
    cfg = nemo["ClippedPGLossConfig"](**base, **settings)
    loss_fn = nemo["ClippedPGLossFn"](cfg)
    data = nemo_batch(rows, dtype)
    rewards = torch.tensor([r["reward"] for r in rows], dtype=dtype)
    masking = nemo["compute_and_apply_seq_logprob_error_masking"]
    seq_metrics, seq_local = locals_at_return(
        lambda: masking(train_data=data, rewards=rewards, seq_logprob_error_threshold=threshold),
        masking.__code__,
    )
    seq_error = seq_local["seq_mult_prob_error"]
    sample_mask = data["sample_mask"]
    global_valid_seqs = torch.sum(sample_mask)
    global_valid_toks = torch.sum(data["token_mask"][:, 1:] * sample_mask.unsqueeze(-1))
    (loss, metrics), local = locals_at_return(
        loss_fn,
        type(loss_fn).__call__.__code__,
        data["prev_logprobs"][:, 1:].clone(),
        data,
        global_valid_seqs,
        global_valid_toks,
    )
    weights = local["importance_weights_to_use"]
    if weights.dim() == 1 or weights.shape[1] == 1:
        weights = weights.reshape(-1, 1).expand(-1, data["prev_logprobs"].shape[1] - 1)
    kind = settings.get("truncated_importance_sampling_type")
    masked = torch.zeros_like(weights, dtype=torch.bool)
    if kind == "icepop":
        masked = ~local["token_kept_mask"]
    elif kind == "seq-mask-tis":
        masked = (local["seq_kept_mask"] == 0).unsqueeze(-1).expand_as(weights)
    # the loss's column t-1 is token t (its [:, 1:] slices)
    cols = [[t - 1 for t in action_positions(r)] for r in rows]
    return {
        "is_weights": [[float(weights[i, c]) for c in cs] for i, cs in enumerate(cols)],
        "is_mask": [[int(masked[i, c]) for c in cs] for i, cs in enumerate(cols)],
        "sample_mask": as_floats(sample_mask),
        "seq_mult_prob_error": as_floats(seq_error),
        "metrics": plain(metrics),
        "seq_logprob_error_metrics": plain(seq_metrics),
        "loss": float(loss),
        "global_valid_seqs": float(global_valid_seqs),
        "global_valid_toks": float(global_valid_toks),
    }


def make_nemo(git_dir: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    nemo, lines = load_nemo(git_dir)
    cases = []
    for name, settings, threshold, mode, bounds, note in NEMO_CASES:
        runs = {k: nemo_case(nemo, rows, settings, threshold, d) for k, d in DTYPES.items()}
        cases.append(
            {
                "name": name,
                "note": note,
                "setting": {
                    "loss_fn": {"reference_policy_kl_penalty": 0.0, **settings},
                    "grpo": {"seq_logprob_error_threshold": threshold},
                },
                "advcli": {"correction": mode, "correction_bounds": bounds},
                **runs,
            }
        )
    return {
        "made_by": MADE_BY,
        "framework": "nemo-rl",
        "commit": NEMO_COMMIT,
        "source_lines": lines,
        "versions": versions(),
        **log_facts(rows),
        "about": (
            "One microbatch of all rows: NeMo's metrics are globally normalised per microbatch "
            "and summed by grpo.py, so here each is the whole batch's. Per precision "
            "('float64': tensors float64, compare at 1e-6; 'float32': as NeMo runs): "
            "is_weights / is_mask, one list per log row over its action tokens: the weight "
            "ClippedPGLossFn multiplies the token's loss by (importance_weights_to_use: 1 "
            "without a correction) and whether its truncated-IS type zeroed it (1 = masked: "
            "icepop's ~token_kept_mask, seq-mask-tis's 1 - seq_kept_mask; tis masks nothing). "
            "sample_mask per row, after seq_logprob_error_threshold (1 = kept; a row at 0 adds "
            "nothing to the loss or its metrics, whatever its weights). seq_mult_prob_error per "
            "row: its mean exp(|δ|), what the threshold compares (0 for a row with no action "
            "token, which the min/mean/max leave out). metrics: what ClippedPGLossFn returned; "
            "seq_logprob_error_metrics: what compute_and_apply_seq_logprob_error_masking "
            "returned (grpo_train logs its num_masked_seqs as "
            "num_masked_seqs_by_logprob_error). The seq_mask_tis case is advcli's mode "
            "seq-mask-tis."
        ),
        "cases": cases,
    }


# --------------------------------------------------------------------------------------------------
# miles (and slime)


class _GroupOfOne:
    size = 1
    rank = 0


class _ParallelState:
    """What miles' get_sum_of_sample_mean reads of the parallel state: context parallel of one."""

    cp = _GroupOfOne()


class _Mpu:
    """What slime's get_sum_of_sample_mean reads of megatron.core.mpu."""

    @staticmethod
    def get_context_parallel_world_size() -> int:
        return 1


TIS_FUNCTIONS = ["vanilla_tis_function", "icepop_function"]


def load_miles(miles_git: str, slime_git: str) -> dict[str, Any]:
    """miles' and slime's definitions, each in a namespace of its own, and the statements of their
    policy_loss_function that compute the two mismatch figures."""
    common = {"torch": torch, "Any": Any, "Namespace": Namespace, "Callable": Callable}
    miles = {**common, "__name__": "miles_extracted", "get_parallel_state": _ParallelState}
    slime = {**common, "__name__": "slime_extracted", "mpu": _Mpu}
    hub = "miles/backends/training_utils/loss_hub/"
    srcs = {
        "corrections": Source(miles_git, MILES_COMMIT, hub + "corrections.py"),
        "math_utils": Source(miles_git, MILES_COMMIT, hub + "math_utils.py"),
        "cp_utils": Source(miles_git, MILES_COMMIT, "miles/backends/training_utils/cp_utils.py"),
        "losses": Source(miles_git, MILES_COMMIT, hub + "losses.py"),
        "log_utils": Source(miles_git, MILES_COMMIT, "miles/backends/training_utils/log_utils.py"),
        "slime_loss": Source(slime_git, SLIME_COMMIT, "slime/backends/megatron_utils/loss.py"),
        "slime_cp": Source(slime_git, SLIME_COMMIT, "slime/backends/megatron_utils/cp_utils.py"),
        "slime_log": Source(slime_git, SLIME_COMMIT, "slime/observability/train_metric_utils.py"),
    }
    srcs["corrections"].define(TIS_FUNCTIONS, miles)
    srcs["math_utils"].define(
        ["_LOG_RATIO_EXP_CLAMP", "_safe_clamp_log_ratio", "compute_approx_kl"], miles
    )
    srcs["cp_utils"].define(["get_sum_of_sample_mean"], miles)
    srcs["slime_loss"].define(TIS_FUNCTIONS, slime)
    srcs["slime_cp"].define(["get_sum_of_sample_mean"], slime)
    miles_block = srcs["losses"].statements(
        "policy_loss_function",
        "train_scored_log_probs = old_log_probs",
        "if rollout_old_log_probs:",
    )
    slime_block = srcs["slime_loss"].statements(
        "policy_loss_function",
        "train_rollout_logprob_abs_diff = None",
        "if 'rollout_log_probs' in batch",
    )
    # the logged value: the micro-batches' summed values over the step's samples (or tokens)
    reduction = "value * cp_factor / num_samples_or_tokens"
    for key in ("log_utils", "slime_log"):
        if reduction not in srcs[key].text:
            raise SystemExit(f"{srcs[key].rel}: the reduction of the logged metrics changed")
        srcs[key].lines["reduction"] = reduction
    return {
        "miles": miles,
        "slime": slime,
        "miles_block": miles_block,
        "slime_block": slime_block,
        "lines": {s.rel: s.lines for s in srcs.values()},
    }


def miles_batch(rows: list[dict[str, Any]], dtype: torch.dtype) -> dict[str, Any]:
    """Each row's response (after its prompt) as a sample, in the lists miles' batch holds."""

    def response(values: list[Any], kind: torch.dtype) -> torch.Tensor:
        return torch.tensor(values[PROMPT_TOKENS:], dtype=kind)

    return {
        "log_probs": [response(r["trainer_logprobs"], torch.float32).to(dtype) for r in rows],
        "rollout_log_probs": [response(r["logprobs"], torch.float32).to(dtype) for r in rows],
        "loss_masks": [response(r["action_mask"], torch.int32) for r in rows],
        "response_lengths": [len(r["input_ids"]) - PROMPT_TOKENS for r in rows],
        "total_lengths": [len(r["input_ids"]) for r in rows],
    }


def miles_reducer(x: dict[str, Any], batch: dict[str, Any], per_token: bool) -> Any:
    return x["miles"]["get_sum_of_sample_mean"](
        batch["total_lengths"], batch["response_lengths"], batch["loss_masks"], per_token
    )


def slime_reducer(x: dict[str, Any], batch: dict[str, Any], per_token: bool) -> Any:
    return x["slime"]["get_sum_of_sample_mean"](
        batch["total_lengths"],
        batch["response_lengths"],
        batch["loss_masks"],
        calculate_per_token_loss=per_token,
    )


def mismatch_sums(x: dict[str, Any], batch: dict[str, Any], per_token: bool) -> dict[str, Any]:
    """The two figures as each framework's policy_loss_function sums them over a micro-batch."""
    masks = batch["loss_masks"]
    trainer = torch.cat(batch["log_probs"], dim=0)
    miles = {
        **x["miles"],
        "old_log_probs": trainer,
        "rollout_old_log_probs": batch["rollout_log_probs"],
        "active_tokens": torch.cat(masks, dim=0).bool(),
        "sum_of_sample_mean": miles_reducer(x, batch, per_token),
    }
    run_nodes(x["miles_block"], "losses.py", miles)
    slime = {
        **x["slime"],
        "batch": {"rollout_log_probs": batch["rollout_log_probs"]},
        "args": Namespace(use_rollout_logprobs=False),
        "log_probs": trainer,  # the current policy's; not read without --use-rollout-logprobs
        "old_log_probs": trainer,
        "sum_of_sample_mean": slime_reducer(x, batch, per_token),
    }
    run_nodes(x["slime_block"], "loss.py", slime)
    return {
        "miles": {
            "train_rollout_logprob_abs_diff": miles["train_rollout_logprob_abs_diff"],
            "train_rollout_kl": miles["train_rollout_kl"],
        },
        "slime": {"train_rollout_logprob_abs_diff": slime["train_rollout_logprob_abs_diff"]},
    }


def miles_case(
    x: dict[str, Any], rows: list[dict[str, Any]], tis: dict[str, Any] | None, dtype: torch.dtype
) -> dict[str, Any]:
    batch = miles_batch(rows, dtype)
    # loss.py's count the logged sums are divided by: samples, or tokens (each at least 1)
    divisors = {
        "": len(rows),
        "_per_token_loss": int(sum(torch.clamp_min(m.sum(), 1) for m in batch["loss_masks"])),
    }
    out: dict[str, Any] = {"samples": divisors[""], "tokens": divisors["_per_token_loss"]}
    weights = {}
    for suffix, divisor in divisors.items():
        per_token = suffix == "_per_token_loss"
        sums = mismatch_sums(x, batch, per_token)
        for fw, reducer in (("miles", miles_reducer), ("slime", slime_reducer)):
            if tis is not None:
                args = Namespace(tis_clip=tis["tis_clip"], tis_clip_low=tis["tis_clip_low"])
                ones = torch.ones(sum(batch["response_lengths"]), dtype=dtype)
                # pg_loss = 1: what comes back is the weight each token's loss is multiplied by
                weights[fw], _, tis_metrics = x[fw][tis["function"]](
                    args,
                    pg_loss=ones,
                    train_log_probs=batch["log_probs"],
                    rollout_log_probs=batch["rollout_log_probs"],
                    loss_masks=batch["loss_masks"],
                )
                sums[fw] |= {k: reducer(x, batch, per_token)(v) for k, v in tis_metrics.items()}
            key = ("metrics" if fw == "miles" else "slime_metrics") + suffix
            out[key] = {k: float(v) / divisor for k, v in sums[fw].items()}
    if tis is not None and not torch.equal(weights["miles"], weights["slime"]):
        raise SystemExit("slime's and miles' TIS weights differ")
    if tis is not None:
        start = 0
        for r in rows:
            w = weights["miles"][start : start + len(r["input_ids"]) - PROMPT_TOKENS]
            at = [t - PROMPT_TOKENS for t in action_positions(r)]
            out.setdefault("is_weights", []).append([float(w[t]) for t in at])
            pops = tis["function"] == "icepop_function"
            out.setdefault("is_mask", []).append([int(pops and w[t] == 0) for t in at])
            start += len(r["input_ids"]) - PROMPT_TOKENS
    return out


# (case, TIS settings under miles' names, advcli mode, bounds, note)
MILES_CASES: list[tuple[str, dict[str, Any] | None, str | None, list[float] | None, str]] = [
    (
        "metrics",
        None,
        None,
        None,
        "no TIS (--use-tis and --get-mismatch-metrics off): the two mismatch figures only",
    ),
    (
        "tis",
        {"function": "vanilla_tis_function", "tis_clip": 2.0, "tis_clip_low": 0.0},
        "token-truncate",
        [0.0, 2.0],
        "--use-tis --tis-clip 2 --tis-clip-low 0 (the defaults)",
    ),
    (
        "tis_low",
        {"function": "vanilla_tis_function", "tis_clip": 2.0, "tis_clip_low": 0.5},
        "token-truncate",
        [0.5, 2.0],
        "--use-tis --tis-clip 2 --tis-clip-low 0.5",
    ),
    (
        "icepop",
        {"function": "icepop_function", "tis_clip": 2.0, "tis_clip_low": 0.5},
        "token-mask",
        [0.5, 2.0],
        "--use-tis --custom-tis-function-path ...icepop_function: ρ kept inside "
        "[--tis-clip-low, --tis-clip], 0 outside",
    ),
]


def make_miles(miles_git: str, slime_git: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    x = load_miles(miles_git, slime_git)
    cases = []
    for name, tis, mode, bounds, note in MILES_CASES:
        # the two mismatch figures need only rollout_log_probs in the batch
        settings: dict[str, Any] = {"use_tis": False}
        if tis is not None:
            settings |= {"use_tis": True, "tis_clip": tis["tis_clip"]}
            settings["tis_clip_low"] = tis["tis_clip_low"]
            if tis["function"] != "vanilla_tis_function":
                settings["custom_tis_function_path"] = (
                    "miles.backends.training_utils.loss_hub.corrections." + tis["function"]
                )
        runs = {k: miles_case(x, rows, tis, d) for k, d in DTYPES.items()}
        cases.append(
            {
                "name": name,
                "note": note,
                "setting": settings,
                "advcli": {"correction": mode, "correction_bounds": bounds},
                **runs,
            }
        )
    return {
        "made_by": MADE_BY,
        "framework": "miles",
        "commit": MILES_COMMIT,
        "slime_commit": SLIME_COMMIT,
        "source_lines": x["lines"],
        "versions": versions(),
        **log_facts(rows),
        "about": (
            "A sample is a row's response (after its prompt_length tokens); its loss mask the "
            "action mask there. Per case and precision ('float64': tensors float64, compare at "
            "1e-6; 'float32': as miles runs): metrics, the logged values by default (Σ over "
            "samples of each sample's mean over its loss-mask tokens, a sample with none "
            "adding 0, / samples), and metrics_per_token_loss, with --calculate-per-token-loss "
            "(Σ over tokens / Σ max(tokens, 1)); samples and tokens are those divisors. "
            "slime_metrics*: the same from slime's code (slime logs no train_rollout_kl). "
            "train_rollout_kl per token: compute_approx_kl(rollout, trainer, 'low_var_kl') = "
            "exp(δ) − 1 − δ with δ = trainer − rollout clamped to ±20 first and the value to "
            "±10 after, in float32 (it casts with .float()) in both precisions. tis (ρ), "
            "tis_abs (|ρ − 1|) and tis_clipfrac (1 where the weight ≠ ρ) are reduced the "
            "same way. is_weights, one list per log row over its action tokens: what the TIS "
            "function multiplies pg_loss by; is_mask 1 where icepop zeroed it (vanilla TIS masks "
            "nothing). slime's TIS functions gave the same weights (checked)."
        ),
        "cases": cases,
    }


def log_facts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What names the log a fixture was computed on, and its rows as the fixtures count them."""
    return {
        "log": "tests/fixtures/refs/health/log.parquet",
        "log_sha256": hashlib.sha256(LOG.read_bytes()).hexdigest(),
        "prompt_length": PROMPT_TOKENS,
        "rows": [
            {
                "prompt_id": r["prompt_id"],
                "response_length": len(r["input_ids"]) - PROMPT_TOKENS,
                "action_tokens": sum(r["action_mask"]),
            }
            for r in rows
        ],
    }


def versions() -> dict[str, str]:
    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "pydantic": pydantic.__version__,
        "numpy": np.__version__,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nemo-git", required=True)
    ap.add_argument("--miles-git", required=True)
    ap.add_argument("--slime-git", required=True)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = read_log()
    for name, made in (
        ("nemo_rl.json", make_nemo(args.nemo_git, rows)),
        ("miles.json", make_miles(args.miles_git, args.slime_git, rows)),
    ):
        (args.out / name).write_text(json.dumps(made, indent=1) + "\n")
        print(f"wrote {args.out / name}")


if __name__ == "__main__":
    main()
