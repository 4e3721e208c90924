#!/usr/bin/env python3
"""Generate the prime-rl GRPO length-penalty fixture (2 groups x 4 rollouts).

What runs UNCHANGED (source text read from the prime-rl git history with
`git show <commit>:<path>`, top-level definitions picked out with `ast`, and
exec'd as-is; not a single line of their bodies is edited):

  Efficiency shaping (correctness-gated), commit EFF_COMMIT
  (efeddae6bbbd..., 2026-06-18, the last main commit before #2702 replaced it;
  the advantage.py / utils.py blobs are identical to f6563ff0e, #2639):
    src/prime_rl/orchestrator/advantage.py
        AdvantageInputs, AdvantageOutputs, default_advantage_fn, _efficiency_shaping
    src/prime_rl/orchestrator/utils.py
        get_model_completion_len, get_tool_response_len
    packages/prime-rl-configs/src/prime_rl/configs/orchestrator.py
        TokensLengthPenaltyConfig, TurnsLengthPenaltyConfig

  Linear length penalty (the formula AT 559b4477, main HEAD 2026-08-21):
    src/prime_rl/orchestrator/algo/grpo.py      GRPOAlgorithm (score_group)
    src/prime_rl/orchestrator/algo/base.py      iter_trainable_traces
    packages/prime-rl-configs/src/prime_rl/configs/algorithm.py
                                                LinearLengthPenaltyConfig

Stand-ins (plumbing only, documented in truth.json):
  * BaseConfig -> a pydantic.BaseModel subclass with extra="forbid" (prime-rl's
    BaseConfig comes from the external `pydantic_config` package).
  * `vf` (verifiers) is only used in annotations; `from __future__ import
    annotations` is applied when compiling, as in the original modules.
  * HEAD: `Algorithm` base -> minimal class storing config; `assign_advantages`
    -> records the scalar on the trace; traces -> SimpleNamespace objects
    exposing exactly the attributes score_group reads (reward,
    num_output_tokens, num_total_tokens, num_turns, has_error, agent.trainable,
    nodes[].mask).

Usage:
  /tmp/fw/prime-len/venv/bin/python prime_rl_length.py \
      --git-dir PATH/TO/prime-rl.git \
      --out tests/fixtures/real/prime-rl/length_penalty
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import hashlib
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

# dumpkit is beside this file (on sys.path already when it runs as a script, not when imported)
sys.path.insert(0, str(Path(__file__).resolve().parent))
import dumpkit  # noqa: E402

EFF_COMMIT = "efeddae6bbbda9cba8076e542163c917e90d6a79"
HEAD_COMMIT = "559b44772e471d1538537b8805cc77f3824a5e64"

EFF_FILES = {
    "src/prime_rl/orchestrator/advantage.py": [
        "AdvantageInputs",
        "AdvantageOutputs",
        "default_advantage_fn",
        "_efficiency_shaping",
    ],
    "src/prime_rl/orchestrator/utils.py": ["get_model_completion_len", "get_tool_response_len"],
    "packages/prime-rl-configs/src/prime_rl/configs/orchestrator.py": [
        "TokensLengthPenaltyConfig",
        "TurnsLengthPenaltyConfig",
    ],
}
HEAD_FILES = {
    "packages/prime-rl-configs/src/prime_rl/configs/algorithm.py": ["LinearLengthPenaltyConfig"],
    "src/prime_rl/orchestrator/algo/base.py": ["iter_trainable_traces"],
    "src/prime_rl/orchestrator/algo/grpo.py": ["GRPOAlgorithm"],
}


def extract(source: str, names: list[str]) -> tuple[str, dict]:
    """Return the exact source text of the named top-level defs (with decorators)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    found: dict[str, tuple[int, int]] = {}
    chunks = []
    for node in tree.body:
        if (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and node.name in names
        ):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            end = node.end_lineno
            found[node.name] = (start, end)
            chunks.append("".join(lines[start - 1 : end]))
    missing = set(names) - set(found)
    if missing:
        raise SystemExit(f"definitions not found: {sorted(missing)}")
    return "\n\n".join(chunks), found


def build_namespace():
    from collections.abc import Callable
    from dataclasses import dataclass
    from typing import Annotated, Any, ClassVar, Literal, TypeAlias

    import torch
    from jaxtyping import Float, Int
    from pydantic import BaseModel, ConfigDict, Field
    from torch import Tensor

    class BaseConfig(BaseModel):  # stand-in for pydantic_config.BaseConfig
        model_config = ConfigDict(extra="forbid")

    import types

    mod = types.ModuleType("prime_rl_extracted")  # dataclasses needs a real module
    sys.modules[mod.__name__] = mod
    ns = mod.__dict__
    ns.update(
        {
            "torch": torch,
            "Tensor": Tensor,
            "Float": Float,
            "Int": Int,
            "dataclass": dataclass,
            "Annotated": Annotated,
            "Any": Any,
            "Callable": Callable,
            "ClassVar": ClassVar,
            "Literal": Literal,
            "TypeAlias": TypeAlias,
            "Field": Field,
            "BaseConfig": BaseConfig,
            "TYPE_CHECKING": False,
        }
    )
    return ns


def exec_defs(ns: dict, code: str, filename: str) -> None:
    import __future__

    compiled = compile(
        code, filename, "exec", flags=__future__.annotations.compiler_flag, dont_inherit=True
    )
    exec(compiled, ns)


# ---------------------------------------------------------------------------
# Fixture data: 2 groups x 4 rollouts.
# completion_per_turn: model-sampled tokens per trajectory step (turn).
# tool_response_tokens: value of the harness metric `rlm_total_tool_response_tokens`
#   (None -> metric absent -> get_tool_response_len returns 0).
# prompt_tokens: initial prompt tokens (only used by the HEAD linear penalty's
#   input term: num_total_tokens = prompt + tool + completion for an append-only
#   single-branch trace, num_input = total - output).
# ---------------------------------------------------------------------------
GROUPS = [
    {
        "example_id": 0,
        "rollouts": [
            {
                "reward": 1.0,
                "completion_per_turn": [40, 50, 30],
                "tool_response_tokens": 300,
                "prompt_tokens": 100,
            },
            {
                "reward": 1.0,
                "completion_per_turn": [60],
                "tool_response_tokens": 50,
                "prompt_tokens": 100,
            },
            {
                "reward": 0.0,
                "completion_per_turn": [50, 50, 50, 50],
                "tool_response_tokens": None,
                "prompt_tokens": 100,
            },
            {
                "reward": 1.0,
                "completion_per_turn": [45, 45],
                "tool_response_tokens": 120,
                "prompt_tokens": 100,
            },
        ],
    },
    {
        "example_id": 1,
        "rollouts": [
            {
                "reward": 0.8,
                "completion_per_turn": [20, 20],
                "tool_response_tokens": 10,
                "prompt_tokens": 80,
            },
            {
                "reward": 0.8,
                "completion_per_turn": [25, 25, 25, 25],
                "tool_response_tokens": 200,
                "prompt_tokens": 80,
            },
            {
                "reward": 0.3,
                "completion_per_turn": [30],
                "tool_response_tokens": 0,
                "prompt_tokens": 80,
            },
            {
                "reward": 0.0,
                "completion_per_turn": [50, 50, 50],
                "tool_response_tokens": 80,
                "prompt_tokens": 80,
            },
        ],
    },
]


def rollout_output(spec: dict) -> dict:
    """Minimal pre-v1 verifiers RolloutOutput dict as read by the extracted code."""
    traj = []
    tok = 1000
    for n in spec["completion_per_turn"]:
        traj.append({"tokens": {"completion_ids": list(range(tok, tok + n))}})
        tok += n
    metrics = {}
    if spec["tool_response_tokens"] is not None:
        metrics["rlm_total_tool_response_tokens"] = spec["tool_response_tokens"]
    return {"reward": spec["reward"], "trajectory": traj, "metrics": metrics}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--git-dir", default=os.environ.get("PRIME_RL_GIT", "prime-rl.git"))
    ap.add_argument("--out", default="tests/fixtures/real/prime-rl/length_penalty")
    args = ap.parse_args()

    import torch

    provenance = {}
    ns = build_namespace()
    for commit, files in ((EFF_COMMIT, EFF_FILES), (HEAD_COMMIT, HEAD_FILES)):
        for path, names in files.items():
            src = dumpkit.git_file(args.git_dir, commit, path)
            code, spans = extract(src, names)
            if path.endswith("algo/grpo.py"):
                # plumbing stand-ins needed by GRPOAlgorithm's module scope
                class Algorithm:
                    def __init__(self, config, policy_pool):
                        self.config = config

                def assign_advantages(trace, values):
                    trace.advantage = values

                ns["Algorithm"] = Algorithm
                ns["assign_advantages"] = assign_advantages
                ns["GRPOAlgoConfig"] = object
            exec_defs(ns, code, f"{commit[:9]}:{path}")
            provenance[f"{commit[:12]}:{path}"] = {
                "commit": commit,
                "blob": dumpkit.git_blob(args.git_dir, commit, path),
                "definitions": {k: f"lines {a}-{b}" for k, (a, b) in spans.items()},
                "extracted_sha256": hashlib.sha256(code.encode()).hexdigest(),
            }

    AdvantageInputs = ns["AdvantageInputs"]
    default_advantage_fn = ns["default_advantage_fn"]
    Tokens = ns["TokensLengthPenaltyConfig"]
    Turns = ns["TurnsLengthPenaltyConfig"]
    get_cl = ns["get_model_completion_len"]
    get_tl = ns["get_tool_response_len"]
    Linear = ns["LinearLengthPenaltyConfig"]
    GRPOAlgorithm = ns["GRPOAlgorithm"]

    configs = {
        "none": None,
        "tokens_c1.0_t0.5": Tokens(completion_weight=1.0, tool_response_weight=0.5),
        "turns": Turns(),
    }
    head_cfg = Linear()  # defaults: 0.25 / 0.1 / 0.1

    groups_out = []
    for g in GROUPS:
        rollouts = [rollout_output(r) for r in g["rollouts"]]
        adv = {
            name: default_advantage_fn(
                AdvantageInputs(rollouts=rollouts), length_penalty=cfg
            ).advantages
            for name, cfg in configs.items()
        }
        # HEAD (559b4477) linear penalty via GRPOAlgorithm.score_group, unchanged.
        traces = []
        for spec, ro in zip(g["rollouts"], rollouts, strict=True):
            out_tok = get_cl(ro)
            tool = get_tl(ro)
            traces.append(
                SimpleNamespace(
                    reward=spec["reward"],
                    num_output_tokens=out_tok,
                    num_total_tokens=spec["prompt_tokens"] + tool + out_tok,
                    num_turns=len(ro["trajectory"]),
                    has_error=False,
                    agent=SimpleNamespace(trainable=True),
                    nodes=[SimpleNamespace(mask=[True])],
                    advantage=None,
                )
            )
        algo = GRPOAlgorithm(SimpleNamespace(length_penalty=head_cfg), None)
        asyncio.run(algo.score_group([SimpleNamespace(traces=[t]) for t in traces]))
        algo_none = GRPOAlgorithm(SimpleNamespace(length_penalty=None), None)
        traces_none = [SimpleNamespace(**{**vars(t), "advantage": None}) for t in traces]
        asyncio.run(algo_none.score_group([SimpleNamespace(traces=[t]) for t in traces_none]))

        rows = []
        for j, (spec, ro) in enumerate(zip(g["rollouts"], rollouts, strict=True)):
            rows.append(
                {
                    "rollout_idx": j,
                    "reward": spec["reward"],
                    "completion_tokens": get_cl(ro),
                    "tool_response_tokens": get_tl(ro),
                    "tool_response_metric_present": spec["tool_response_tokens"] is not None,
                    "turns": len(ro["trajectory"]),
                    "prompt_tokens": spec["prompt_tokens"],
                    "num_total_tokens": traces[j].num_total_tokens,
                    "advantage": {
                        "efficiency@efeddae6/none": adv["none"][j],
                        "efficiency@efeddae6/tokens"
                        "(completion_weight=1.0,tool_response_weight=0.5)": adv["tokens_c1.0_t0.5"][
                            j
                        ],
                        "efficiency@efeddae6/turns": adv["turns"][j],
                        "linear@559b4477/defaults(0.25,0.1,0.1)": traces[j].advantage,
                        "linear@559b4477/none": traces_none[j].advantage,
                    },
                    "rollout_output": ro,
                }
            )
        groups_out.append({"example_id": g["example_id"], "rollouts": rows})

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "rollouts.json").write_text(json.dumps({"groups": groups_out}, indent=1) + "\n")
    truth = {
        "repo": "PrimeIntellect-ai/prime-rl",
        "efficiency_commit": EFF_COMMIT,
        "efficiency_commit_note": (
            "last main commit (2026-06-18) carrying default_advantage_fn + _efficiency_shaping; "
            "advantage.py/utils.py blobs identical to f6563ff0e (#2639, 2026-06-01). Replaced on "
            "main by 7f777138 (#2702, 2026-06-19). NOT the formula at 559b4477."
        ),
        "head_commit": HEAD_COMMIT,
        "head_commit_note": (
            "main 2026-08-21 (#3337); GRPO length penalty here is the linear one (#2901, #3297)."
        ),
        "configs": {
            "efficiency/tokens": {
                "type": "tokens",
                "completion_weight": 1.0,
                "tool_response_weight": 0.5,
            },
            "efficiency/turns": {"type": "turns"},
            "linear": head_cfg.model_dump(),
        },
        "formulas": {
            "efficiency": (
                "correct = R >= max(R); if max(R) <= 0 or mean_correct_cost <= 0: A = R - mean(R); "
                "else bonus = clamp(1 - cost/mean(cost[correct]), 0, 1); S = R*(1+bonus*correct); "
                "A = S - mean(S). tokens cost = w_c*sum(len(step.tokens.completion_ids)) + "
                "w_t*metrics['*total_tool_response_tokens']; turns cost = len(trajectory)"
            ),
            "linear": (
                "in = total - out; P = w_out*out/max(max(out),1) + w_in*in/max(max(in),1) + "
                "w_turns*turns/max(max(turns),1); S = R - mean(R)*P; A = S - mean(S)"
            ),
        },
        "ran_unchanged": provenance,
        "stand_ins": [
            "BaseConfig = pydantic.BaseModel subclass with extra='forbid' "
            "(real one: pydantic_config.BaseConfig)",
            "GRPOAlgorithm: Algorithm base -> minimal __init__(config, pool); assign_advantages -> "
            "stores scalar; GRPOAlgoConfig name bound to object (annotation only)",
            "traces for 559b4477 are SimpleNamespace with reward/num_output_tokens/"
            "num_total_tokens/num_turns/has_error/agent.trainable/nodes[].mask",
            "compiled with `from __future__ import annotations` like the source modules",
        ],
        "runtime": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "dtype": "float32",
        },
        "generator": "tools/dumps/prime_rl_length.py",
    }
    (out / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    print(json.dumps([[r["advantage"] for r in g["rollouts"]] for g in groups_out], indent=1))


if __name__ == "__main__":
    main()
