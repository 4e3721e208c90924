"""verl's rollout correction (``verl/trainer/ppo/rollout_corr_helper.py``) run on the health
log (``tests/fixtures/refs/health/log.parquet``, see ``health_inputs.py``): the importance
weights, the rejection mask and the metrics verl's trainer logs, for every ``rollout_is`` /
``rollout_rs`` option, written to ``tests/fixtures/refs/health/verl.json``.

Source
  verl 0.9.1 from PyPI (``pip install verl==0.9.1``; torch 2.13.0+cpu, numpy 2.4.6, pyarrow 26.0.1,
  Python 3.11). The wheel carries no commit; the sha256 of the installed
  ``rollout_corr_helper.py`` is checked below and written into the fixture, so another release
  fails loudly. Imported unchanged: ``compute_rollout_correction_and_rejection_mask`` (what
  ``compute_rollout_correction_and_add_to_batch`` calls in ``ray_trainer.py``'s decoupled mode,
  whose metrics go to the logger as ``metrics.update(is_metrics)``: the keys it returns, with
  their ``rollout_corr/`` prefix, are the names verl logs), ``compute_offpolicy_metrics`` (the
  same figures unprefixed) and ``compute_rollout_corr_metrics_from_logprobs`` (bypass mode).

Layout (``health_rows.py``): verl's response tensors, right-padded (B, T) over the tokens after
the prompt: ``old_log_prob`` = the trainer's recompute (advcli ``trainer_logprobs``),
``rollout_log_prob`` = the sampler's (advcli ``logprobs``), both padded with 0.0 as the agent
loop pads ``rollout_log_probs``; ``response_mask`` int64 (as the agent loop makes it) = the action
mask over the response: 0 on group p4's observation spans and on padding; the rollout with no
action token stays in the batch with a row of zeros.

Each case runs twice: ``float64`` (the log's float32 values cast exactly to float64 tensors; the
suite compares advcli with these at 1e-6; verl's ``masked_mean`` still divides by the int64 mask's
count + 1e-8 in float32, exact for these counts) and ``float32`` (as the trainer runs).

Fixture per case: ``setting`` (verl's keyword arguments under its names), ``advcli`` (the mode and
bounds advcli spells for it), and per precision ``rollout_is_weights`` (null without
``rollout_is``) and ``response_mask`` (verl's modified mask, 1 kept, 0 rejected), each a list per
row over the row's action tokens in order, and ``metrics`` exactly as the function returned them.

Run (CI never runs it; needs the venv above)::

    /tmp/fw/verl/bin/python tools/refs/make_health_verl.py
"""

from __future__ import annotations

import hashlib
import inspect
import os
import sys

import torch
import verl
from verl.trainer.config.algorithm import RolloutCorrectionConfig
from verl.trainer.ppo import rollout_corr_helper as helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import health_rows  # noqa: E402

VERSION = "0.9.1"
HELPER_SHA256 = "763158342551bc4077805a8a009d959a7a2043c4d43b772fe6045f4a40932f3e"
PRECISIONS = {"float64": torch.float64, "float32": torch.float32}


def is_case(name, rollout_is, threshold, mode, bounds, normalize=False):
    setting = {
        "rollout_is": rollout_is,
        "rollout_is_threshold": threshold,
        "rollout_is_batch_normalize": normalize,
    }
    return {
        "name": name,
        "setting": setting,
        "advcli": {"correction": mode, "correction_bounds": bounds},
    }


def rs_case(option, threshold, bounds):
    mode = ",".join(o.replace("_", "-") for o in option.split(","))
    setting = {"rollout_is": None, "rollout_rs": option, "rollout_rs_threshold": threshold}
    return {
        "name": option,
        "setting": setting,
        "advcli": {"correction": mode, "correction_bounds": bounds},
    }


# verl's `*_k1` bounds are ratio bounds on k1 = -log ρ: kept where log LO <= -log ρ <= log HI.
# The other k* take an upper bound only (the statistic is >= 0): advcli's LO is 0 there.
CASES = [
    is_case("token_tis", "token", "2.0", "token-truncate", [0.0, 2.0]),
    is_case("token_icepop", "token", "0.5_2.0", "token-mask", [0.5, 2.0]),
    is_case("sequence_tis", "sequence", "2.0", "sequence-truncate", [0.0, 2.0]),
    is_case("sequence_icepop", "sequence", "0.5_2.0", "sequence-mask", [0.5, 2.0]),
    is_case(
        "token_tis_batch_normalize", "token", "2.0", "token-truncate", [0.0, 2.0], normalize=True
    ),
    rs_case("token_k1", "0.5_2.0", [0.5, 2.0]),
    rs_case("token_k2", "0.5", [0.0, 0.5]),
    rs_case("token_k3", "0.5", [0.0, 0.5]),
    rs_case("seq_sum_k1", "0.5_2.0", [0.5, 2.0]),
    rs_case("seq_sum_k2", "2.0", [0.0, 2.0]),
    rs_case("seq_sum_k3", "2.0", [0.0, 2.0]),
    rs_case("seq_mean_k1", "0.8_1.5", [0.8, 1.5]),
    rs_case("seq_mean_k2", "0.1", [0.0, 0.1]),
    rs_case("seq_mean_k3", "0.1", [0.0, 0.1]),
    rs_case("seq_max_k2", "0.5", [0.0, 0.5]),
    rs_case("seq_max_k3", "0.5", [0.0, 0.5]),
    rs_case("token_k1,seq_mean_k3", "0.5_2.0,0.1", None),
]


def tensors(batch, dtype):
    return {
        "old_log_prob": torch.tensor(batch.trainer, dtype=torch.float32).to(dtype),
        "rollout_log_prob": torch.tensor(batch.sampler, dtype=torch.float32).to(dtype),
        "response_mask": torch.tensor(batch.response_mask, dtype=torch.int64),
    }


def run_case(case, batch):
    out = {}
    for precision, dtype in PRECISIONS.items():
        args = tensors(batch, dtype)
        weights, mask, metrics = helper.compute_rollout_correction_and_rejection_mask(
            **args, **case["setting"]
        )
        out[precision] = {
            "rollout_is_weights": None
            if weights is None
            else health_rows.per_action_token(
                weights.batch["rollout_is_weights"].double().numpy(), batch
            ),
            "response_mask": health_rows.per_action_token(mask.numpy(), batch, int),
            "metrics": metrics,
        }
    return {**case, "function": "compute_rollout_correction_and_rejection_mask", **out}


def no_correction(batch):
    """The figures logged with neither ``rollout_is`` nor ``rollout_rs`` (metrics only), and the
    two functions that return them directly."""
    case = {
        "name": "no_correction",
        "function": "compute_rollout_correction_and_rejection_mask",
        "setting": {"rollout_is": None, "rollout_rs": None},
        "advcli": {"correction": None, "correction_bounds": None},
    }
    for precision, dtype in PRECISIONS.items():
        args = tensors(batch, dtype)
        _, mask, metrics = helper.compute_rollout_correction_and_rejection_mask(
            **args, rollout_is=None, rollout_rs=None
        )
        case[precision] = {
            "rollout_is_weights": None,
            "response_mask": health_rows.per_action_token(mask.numpy(), batch, int),
            "metrics": metrics,
            "compute_offpolicy_metrics": helper.compute_offpolicy_metrics(**args),
            "compute_rollout_corr_metrics_from_logprobs": helper.compute_rollout_corr_metrics_from_logprobs(
                log_prob=args["old_log_prob"],
                rollout_log_prob=args["rollout_log_prob"],
                response_mask=args["response_mask"],
            ),
        }
    return case


def main():
    assert verl.__version__ == VERSION, verl.__version__
    with open(inspect.getsourcefile(helper), "rb") as fh:
        sha = hashlib.sha256(fh.read()).hexdigest()
    assert sha == HELPER_SHA256, f"rollout_corr_helper.py is not verl {VERSION}'s: {sha}"
    batch = health_rows.read_batch()
    defaults = RolloutCorrectionConfig()
    fixture = {
        "made_by": "tools/refs/make_health_verl.py",
        "framework": "verl",
        "version": VERSION,
        "path": "verl/trainer/ppo/rollout_corr_helper.py",
        "sha256": sha,
        "torch": torch.__version__,
        "log": "tests/fixtures/refs/health/log.parquet",
        "log_sha256": health_rows.log_sha256(),
        "about": (
            "verl's rollout correction on the health log. old_log_prob = trainer_logprobs, "
            "rollout_log_prob = logprobs (log_ratio = old - rollout = δ), response tensors "
            "right-padded with 0.0, response_mask (int64) = action_mask after the prompt. "
            "Per-row lists hold each row's action tokens in order (the rollout with no action "
            "token: an empty list; verl still counts it where a mean runs over rows: e.g. its "
            "per-sequence masked_mean is 0/(0+1e-8) = 0, so training_ppl adds exp(0) = 1 for it, "
            "and its sequence log-ratio sum 0 enters rollout_is_max/min and the sequence "
            "fractions). 'float64' = tensors float64 (compare at 1e-6), 'float32' = as the "
            "trainer runs."
        ),
        "metric_prefix": "rollout_corr/",
        "logged_as": (
            "ray_trainer.py (decoupled mode): batch, is_metrics = "
            "compute_rollout_correction_and_add_to_batch(batch, rollout_corr_config); "
            "metrics.update(is_metrics) -- the returned keys, already prefixed 'rollout_corr/'"
        ),
        "defaults": {
            "rollout_is": defaults.rollout_is,
            "rollout_is_threshold": defaults.rollout_is_threshold,
            "rollout_is_batch_normalize": defaults.rollout_is_batch_normalize,
            "rollout_rs": defaults.rollout_rs,
            "rollout_rs_threshold": defaults.rollout_rs_threshold,
            "safety_bound": helper.SAFETY_BOUND,
        },
        "rows": health_rows.row_records(batch),
        "prompt_length": batch.prompt_length,
        "cases": [no_correction(batch)] + [run_case(case, batch) for case in CASES],
    }
    print(health_rows.write("verl.json", fixture))


if __name__ == "__main__":
    main()
