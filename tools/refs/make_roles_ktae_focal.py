"""Reference fixtures for four advantage estimators, computed by the authors' own code.

Sources (each read with `git show <commit>:<path>` from a git directory -- bare or not -- that
the caller names; nothing is re-typed):

1. prime-rl  https://github.com/PrimeIntellect-ai/prime-rl
   commit 559b44772e471d1538537b8805cc77f3824a5e64
   src/prime_rl/orchestrator/algo/hierarchical_grpo.py  HierarchicalGRPOAlgorithm.score_group
   src/prime_rl/orchestrator/algo/rae.py                RAEAlgorithm.score_group
   plus the real helpers they call: src/prime_rl/orchestrator/algo/base.py
   (iter_trainable_traces) and src/prime_rl/orchestrator/algo/routing.py (assign_advantages),
   and the defaults read (ast) from packages/prime-rl-configs/src/prime_rl/configs/algorithm.py.
   The trace objects: verifiers https://github.com/PrimeIntellect-ai/verifiers at the commit
   prime-rl pins as its deps/verifiers submodule, a60a606ecc4d309247edf9ff92c3eabca362781f;
   the properties the algorithms read (Trace.reward, Trace.has_error, Reward.value) are taken
   from verifiers/v1/trace.py with `ast` and bound onto light stand-in classes.
2. KTAE  https://github.com/xiaolizh1/KTAE  commit ea9fb77f366216d754e2368653911724e73a7376
   verl/trainer/ppo/core_algos.py  compute_ktae_outcome_advantage_and_keytokens
   verl/workers/actor/compute_key_tokens.py  ComputeKeyTokens (+ module helpers), imported
   as the module `verl.workers.actor.compute_key_tokens` exactly as the function imports it.
3. verl F-GRPO  https://github.com/verl-project/verl  PR #5334 head
   644e540fc237859e027d99a778d208f263b57844 (the requested 5b98636684f9e4881697a4ad46ddf5bf6f8f5fdc
   is not in any stored snapshot; the search index holds its core_algos.py, which has the same
   length, 92156 characters, and the same text at every 16000-character page checked, f_grpo
   included -- see the notes).
   verl/trainer/ppo/core_algos.py  compute_f_grpo_outcome_advantage (extracted with ast)
   verl/utils/groupwise.py  as_torch_index, group_mean_std (the whole module, loaded as
   `verl.utils.groupwise` with a stub `verl.utils.device`)

Stubs and why (none of them is on a computed path):
- prime-rl: `verifiers.v1` (only used for type annotations under `from __future__ import
  annotations`), `prime_rl.configs.algorithm` (pydantic config classes: imports renderers,
  verifiers, pydantic_config; only the annotation names are needed, the default `decay` is
  read from its source with ast and passed as a SimpleNamespace config), `prime_rl.utils.logger`
  (base.py imports get_logger for connect_frozen_pool, unused), `prime_rl.transports.rollouts`
  (routing.py imports TrainingSample for stamp_loss_routing, unused). The real
  `prime_rl.orchestrator.algo/__init__.py` imports every algorithm (opd/opsd: heavy), so the
  package is an empty stub and the four real modules are placed under it.
- KTAE: `transformers` (compute_key_tokens.py imports 9 names, never used) and
  `verl.utils.torch_functional` (core_algos.py imports it at top level; only other estimators use it).
  The function is extracted with ast and exec'd in the core_algos globals it needs
  (torch, numpy, defaultdict).
- verl: `verl.utils.device.get_device_name` (groupwise imports it; only used when no device
  is passed, and the function always passes device=scores.device). The decorator
  `@register_adv_est(...)` is dropped (registry only). `AlgoConfig` is bound to `dict`
  (annotation only); the trainer passes its AlgoConfig as `config=`, read through `.get`, so a
  plain dict with the yaml keys is passed.

venv (CPU only):
    python3.11 -m venv /tmp/fw/roles_ktae_focal/venv
    /tmp/fw/roles_ktae_focal/venv/bin/pip install "torch==2.13.0+cpu" "numpy==2.4.6"
    (python 3.11.7; torch 2.13.0+cpu from the local wheel dir, numpy 2.4.6)

run:
    venv/bin/python make_roles_ktae_focal.py \
        --prime-rl-git <prime-rl git dir> --verifiers-git <verifiers git dir> \
        --ktae-git <KTAE git dir> --verl-git <verl-project/verl git dir> [--out DIR]
    (or env PRIME_RL_GIT, VERIFIERS_GIT, KTAE_GIT, VERL_GIT; --out defaults to this file's folder)

Deterministic: no randomness anywhere; two runs write identical files.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import importlib
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

PRIME_RL_COMMIT = "559b44772e471d1538537b8805cc77f3824a5e64"
VERIFIERS_COMMIT = "a60a606ecc4d309247edf9ff92c3eabca362781f"
KTAE_COMMIT = "ea9fb77f366216d754e2368653911724e73a7376"
VERL_COMMIT = "644e540fc237859e027d99a778d208f263b57844"
VERL_REQUESTED_COMMIT = "5b98636684f9e4881697a4ad46ddf5bf6f8f5fdc"
QWEN_PAD = (
    151643  # <|endoftext|>: Qwen2.5 pad (and base-model eos) id; KTAE zeroes this id's weight
)


def git_show(gitdir: str, commit: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", gitdir, "show", f"{commit}:{path}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def extract_function(source: str, name: str, drop_decorators: bool = True) -> str:
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            if drop_decorators:
                node.decorator_list = []
            return ast.unparse(node)
    raise KeyError(name)


def extract_method(source: str, cls: str, name: str) -> str:
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    item.decorator_list = []
                    return ast.unparse(item)
    raise KeyError(f"{cls}.{name}")


def class_field_default(source: str, cls: str, field: str):
    """Default of `field: T = Field(<default>, ...)` or `field: T = <literal>` in class `cls`."""
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and getattr(item.target, "id", None) == field:
                    v = item.value
                    if v is None:
                        return "<required>"
                    if isinstance(v, ast.Call) and getattr(v.func, "id", None) == "Field":
                        if v.args:
                            return ast.literal_eval(v.args[0])
                        return "<required>"
                    return ast.literal_eval(v)
    raise KeyError(f"{cls}.{field}")


def clean(x):
    """float32 -> python float (exact value), nested lists."""
    if isinstance(x, torch.Tensor):
        return x.tolist()
    return x


# ----------------------------------------------------------------------------------------------
# prime-rl
# ----------------------------------------------------------------------------------------------


def load_prime_rl(prime_git: str, vf_git: str, tmp: Path):
    root = tmp / "prime_pkg"
    # stubs
    write(root, "verifiers/__init__.py", "")
    write(root, "verifiers/v1/__init__.py", "# stub: the algorithms use vf.* only in annotations\n")
    write(root, "prime_rl/__init__.py", "")
    write(root, "prime_rl/configs/__init__.py", "")
    write(
        root,
        "prime_rl/configs/algorithm.py",
        "# stub: names imported for annotations only\n"
        "ActionLossType = str\nAlgoConfig = object\nFrozenModelConfig = object\n"
        "HierarchicalGRPOAlgoConfig = object\nRAEAlgoConfig = object\n",
    )
    write(root, "prime_rl/utils/__init__.py", "")
    write(root, "prime_rl/utils/logger.py", "def get_logger():\n    raise RuntimeError('stub')\n")
    write(root, "prime_rl/transports/__init__.py", "")
    write(root, "prime_rl/transports/rollouts.py", "class TrainingSample:  # stub\n    pass\n")
    write(root, "prime_rl/orchestrator/__init__.py", "")
    write(
        root, "prime_rl/orchestrator/algo/__init__.py", "# stub: real one imports every algorithm\n"
    )
    # real modules
    for mod in ("base", "routing", "hierarchical_grpo", "rae"):
        rel = f"src/prime_rl/orchestrator/algo/{mod}.py"
        write(
            root, f"prime_rl/orchestrator/algo/{mod}.py", git_show(prime_git, PRIME_RL_COMMIT, rel)
        )
    sys.path.insert(0, str(root))
    hg = importlib.import_module("prime_rl.orchestrator.algo.hierarchical_grpo")
    rae = importlib.import_module("prime_rl.orchestrator.algo.rae")
    cfg_src = git_show(
        prime_git, PRIME_RL_COMMIT, "packages/prime-rl-configs/src/prime_rl/configs/algorithm.py"
    )
    defaults = {
        "decay": class_field_default(cfg_src, "RAEAlgoConfig", "decay"),
        "episode_agents": class_field_default(
            cfg_src, "HierarchicalGRPOAlgoConfig", "episode_agents"
        ),
    }
    # verifiers properties read by the algorithms, taken from the pinned verifiers source
    trace_src = git_show(vf_git, VERIFIERS_COMMIT, "verifiers/v1/trace.py")
    ns: dict = {}
    for cls, meth in (("Trace", "reward"), ("Trace", "has_error"), ("Reward", "value")):
        exec(extract_method(trace_src, cls, meth), ns)
    vf_props = {
        "Trace.reward": ns["reward"],
        "Trace.has_error": ns["has_error"],
        "Reward.value": ns["value"],
    }
    return hg, rae, defaults, vf_props


def make_vf_classes(props):
    class Reward:
        def __init__(self, score, weight=1.0):
            self.score, self.weight = score, weight

        value = property(props["Reward.value"])

    class Node:  # verifiers.v1.graph.MessageNode fields read by the code
        def __init__(self, token_ids, mask):
            self.token_ids, self.mask, self.advantages = token_ids, mask, None

    class Trace:
        def __init__(self, id, agent_name, trainable, ok, rewards, nodes):
            self.id = id
            self.agent = SimpleNamespace(
                name=agent_name, trainable=trainable
            )  # AgentInfo.name / .trainable
            self.ok = ok
            self.rewards = rewards
            self.nodes = nodes

        reward = property(props["Trace.reward"])
        has_error = property(props["Trace.has_error"])

    class Episode:
        def __init__(self, id, traces):
            self.id, self.traces = id, traces

    return Reward, Node, Trace, Episode


def rows_to_groups(rows, classes):
    """Consecutive rows with one prompt_id form one score_group call; within it, consecutive rows
    with one episode_id form one Episode (traces in row order)."""
    Reward, Node, Trace, Episode = classes
    calls, traces = [], []
    for r in rows:
        mask = [bool(m) for m in r.get("action_mask", [1, 1, 1])]
        tok = r.get("token_ids", list(range(11, 11 + len(mask))))
        t = Trace(
            id=r["rollout_id"],
            agent_name=r["agent"],
            trainable=r.get("trainable", True),
            ok=r.get("ok", True),
            rewards={"reward": Reward(r["reward"])},
            nodes=[Node(tok, mask)],
        )
        traces.append(t)
        if not calls or calls[-1][0] != r["prompt_id"]:
            calls.append((r["prompt_id"], []))
        eps = calls[-1][1]
        if not eps or eps[-1].id != r["episode_id"]:
            eps.append(Episode(r["episode_id"], []))
        eps[-1].traces.append(t)
    return [eps for _, eps in calls], traces


def trace_result(t):
    advs = [a for n in t.nodes for a in (n.advantages or [])]
    if all(n.advantages is None for n in t.nodes):
        return {"advantage": None, "advantages": None}
    assert len(set(advs)) <= 1
    return {"advantage": advs[0] if advs else None, "advantages": None}


def run_prime(algo_cls, params, rows, classes):
    algo = algo_cls(SimpleNamespace(**params), policy_pool=None)
    calls, traces = rows_to_groups(rows, classes)
    for episodes in calls:  # one algorithm instance per case: RAE baselines persist across calls
        asyncio.run(algo.score_group(episodes))
    return [trace_result(t) for t in traces]


def R(pid, eid, rid, agent, reward, **kw):
    d = {"prompt_id": pid, "episode_id": eid, "rollout_id": rid, "agent": agent, "reward": reward}
    d.update(kw)
    return d


def hierarchical_cases():
    P, S, V = "proposer", "solver", "verifier"
    return [
        {
            "name": "plain_proposer_solver",
            "about": "2 source tasks (score_group calls) x 2-3 proposed problems (episodes), 1 proposer + "
            "2-3 solvers each; solvers centred per episode, proposers per group. episode_agents=['solver'] "
            "(the documented setting; the field has no default).",
            "params": {"episode_agents": ["solver"]},
            "rows": [
                R("t0", "t0e0", "t0e0p", P, 0.6),
                R("t0", "t0e0", "t0e0s0", S, 1.0),
                R("t0", "t0e0", "t0e0s1", S, 1.0),
                R("t0", "t0e0", "t0e0s2", S, 0.0),
                R("t0", "t0e1", "t0e1p", P, 0.25),
                R("t0", "t0e1", "t0e1s0", S, 0.0),
                R("t0", "t0e1", "t0e1s1", S, 1.0),
                R("t1", "t1e0", "t1e0p", P, 0.9),
                R("t1", "t1e0", "t1e0s0", S, 1.0),
                R("t1", "t1e0", "t1e0s1", S, 0.0),
                R("t1", "t1e1", "t1e1p", P, 0.1),
                R("t1", "t1e1", "t1e1s0", S, 0.0),
                R("t1", "t1e1", "t1e1s1", S, 0.0),
                R("t1", "t1e1", "t1e1s2", S, 1.0),
                R("t1", "t1e2", "t1e2p", P, 0.35),
                R("t1", "t1e2", "t1e2s0", S, 1.0),
                R("t1", "t1e2", "t1e2s1", S, 1.0),
            ],
        },
        {
            "name": "lone_peers_zero_variance",
            "about": "a group of one episode (its proposer has no peer -> 0), an episode with one solver "
            "(-> 0), an episode whose solvers all scored 0.5 (zero variance -> 0); no std division anywhere.",
            "params": {"episode_agents": ["solver"]},
            "rows": [
                R("t0", "t0e0", "t0e0p", P, 0.7),
                R("t0", "t0e0", "t0e0s0", S, 1.0),
                R("t0", "t0e0", "t0e0s1", S, 0.0),
                R("t1", "t1e0", "t1e0p", P, 0.4),
                R("t1", "t1e0", "t1e0s0", S, 1.0),
                R("t1", "t1e1", "t1e1p", P, -0.2),
                R("t1", "t1e1", "t1e1s0", S, 0.5),
                R("t1", "t1e1", "t1e1s1", S, 0.5),
                R("t1", "t1e1", "t1e1s2", S, 0.5),
            ],
        },
        {
            "name": "three_roles_two_episode_scoped",
            "about": "roles proposer/solver/verifier, episode_agents=['solver','verifier'] (non-default list): "
            "solvers and verifiers each centred within their episode, proposers across the group; unequal "
            "sizes, negative and fractional rewards, interleaved role order inside episodes.",
            "params": {"episode_agents": ["solver", "verifier"]},
            "rows": [
                R("t0", "t0e0", "t0e0s0", S, 0.75),
                R("t0", "t0e0", "t0e0v0", V, -0.5),
                R("t0", "t0e0", "t0e0p", P, 1.25),
                R("t0", "t0e0", "t0e0s1", S, -0.3),
                R("t0", "t0e0", "t0e0v1", V, 0.2),
                R("t0", "t0e0", "t0e0s2", S, 0.1),
                R("t0", "t0e1", "t0e1p", P, -0.4),
                R("t0", "t0e1", "t0e1s0", S, 2.0),
                R("t0", "t0e1", "t0e1v0", V, 0.9),
                R("t0", "t0e2", "t0e2p", P, 0.05),
                R("t0", "t0e2", "t0e2s0", S, -1.5),
                R("t0", "t0e2", "t0e2s1", S, 0.6),
                R("t0", "t0e2", "t0e2v0", V, 0.3),
                R("t0", "t0e2", "t0e2v1", V, 0.3),
            ],
        },
        {
            "name": "proposer_episode_scoped",
            "about": "episode_agents=['proposer'] (the opposite choice): each proposer alone in its episode "
            "-> 0, solvers pooled across the whole group (all episodes).",
            "params": {"episode_agents": ["proposer"]},
            "rows": [
                R("t0", "t0e0", "t0e0p", P, 0.8),
                R("t0", "t0e0", "t0e0s0", S, 1.0),
                R("t0", "t0e0", "t0e0s1", S, 0.0),
                R("t0", "t0e1", "t0e1p", P, 0.3),
                R("t0", "t0e1", "t0e1s0", S, 1.0),
                R("t0", "t0e1", "t0e1s1", S, 1.0),
                R("t0", "t0e1", "t0e1s2", S, 0.25),
            ],
        },
        {
            "name": "skipped_traces",
            "about": "traces iter_trainable_traces skips get no advantage (null) and do not enter any mean: "
            "ok=false (Trace.has_error), trainable=false (AgentInfo.trainable), and a trace whose "
            "action_mask has no 1 (no sampled token). Extra row keys: ok, trainable, action_mask.",
            "params": {"episode_agents": ["solver"]},
            "rows": [
                R("t0", "t0e0", "t0e0p", P, 0.5),
                R("t0", "t0e0", "t0e0s0", S, 1.0),
                R("t0", "t0e0", "t0e0s1", S, 0.0, ok=False),
                R("t0", "t0e0", "t0e0s2", S, 0.0),
                R("t0", "t0e0", "t0e0s3", S, 1.0, action_mask=[0, 0, 0]),
                R("t0", "t0e1", "t0e1p", P, 0.9, trainable=False),
                R("t0", "t0e1", "t0e1s0", S, 0.4),
                R("t0", "t0e1", "t0e1s1", S, 0.1),
                R("t0", "t0e2", "t0e2p", P, 0.2),
                R("t0", "t0e2", "t0e2s0", S, 1.0),
            ],
        },
    ]


def rae_cases():
    A, B, C = "player0", "player1", "player2"
    return [
        {
            "name": "two_player_zero_sum_default_decay",
            "about": "kuhn-poker-like: 3 groups in arrival order, each of 2 episodes with one trace per player "
            "(zero-sum rewards); per-agent EMA baseline, starts at 0, decay 0.95 (RAEAlgoConfig default).",
            "params": {"decay": 0.95},
            "rows": [
                R("g0", "g0e0", "g0e0a", A, 1.0),
                R("g0", "g0e0", "g0e0b", B, -1.0),
                R("g0", "g0e1", "g0e1b", B, 2.0),
                R("g0", "g0e1", "g0e1a", A, -2.0),
                R("g1", "g1e0", "g1e0a", A, 1.0),
                R("g1", "g1e0", "g1e0b", B, -1.0),
                R("g1", "g1e1", "g1e1a", A, -1.0),
                R("g1", "g1e1", "g1e1b", B, 1.0),
                R("g2", "g2e0", "g2e0b", B, -2.0),
                R("g2", "g2e0", "g2e0a", A, 2.0),
            ],
        },
        {
            "name": "three_agents_interleaved_decay_half",
            "about": "decay=0.5; three agents interleaved unevenly (player2 first appears late, starting from "
            "baseline 0); fractional and negative rewards; one group holding several episodes.",
            "params": {"decay": 0.5},
            "rows": [
                R("g0", "g0e0", "r0", A, 0.3),
                R("g0", "g0e0", "r1", B, -0.7),
                R("g0", "g0e1", "r2", A, 0.9),
                R("g0", "g0e1", "r3", A, -0.1),
                R("g0", "g0e2", "r4", B, 0.25),
                R("g1", "g1e0", "r5", C, 1.5),
                R("g1", "g1e0", "r6", A, 0.4),
                R("g1", "g1e0", "r7", B, 0.0),
                R("g1", "g1e1", "r8", C, -0.5),
                R("g2", "g2e0", "r9", A, 0.6),
                R("g2", "g2e0", "r10", C, 0.75),
            ],
        },
        {
            "name": "single_agent_decay_zero",
            "about": "decay=0.0: the baseline becomes the previous trace's reward (REINFORCE with last-reward "
            "baseline); a single agent name 'agent' (AgentInfo default), groups of one episode.",
            "params": {"decay": 0.0},
            "rows": [
                R("g0", "g0e0", "r0", "agent", 0.5),
                R("g1", "g1e0", "r1", "agent", 1.0),
                R("g2", "g2e0", "r2", "agent", 0.2),
                R("g2", "g2e1", "r3", "agent", 0.2),
                R("g3", "g3e0", "r4", "agent", -0.4),
            ],
        },
        {
            "name": "skipped_traces_do_not_update",
            "about": "decay=0.9; an errored trace (ok=false), a non-trainable one and one without sampled "
            "tokens get no advantage and leave their agent's baseline untouched. Extra row keys: ok, "
            "trainable, action_mask.",
            "params": {"decay": 0.9},
            "rows": [
                R("g0", "g0e0", "r0", A, 1.0),
                R("g0", "g0e0", "r1", B, 0.0),
                R("g0", "g0e1", "r2", A, 5.0, ok=False),
                R("g0", "g0e1", "r3", B, 1.0),
                R("g1", "g1e0", "r4", A, 0.0, trainable=False),
                R("g1", "g1e0", "r5", B, 3.0, action_mask=[0, 0]),
                R("g1", "g1e1", "r6", A, 0.5),
                R("g1", "g1e1", "r7", B, -1.0),
            ],
        },
    ]


# ----------------------------------------------------------------------------------------------
# KTAE
# ----------------------------------------------------------------------------------------------


def load_ktae(ktae_git: str, tmp: Path):
    root = tmp / "ktae_pkg"
    write(
        root,
        "transformers/__init__.py",
        "# stub: compute_key_tokens.py imports these names and never uses them\n"
        + "".join(
            f"class {n}:\n    pass\n"
            for n in (
                "AutoModelForCausalLM",
                "AutoModelForSequenceClassification",
                "AutoTokenizer",
                "GenerationConfig",
                "PreTrainedModel",
                "PreTrainedTokenizerBase",
                "Trainer",
                "TrainerCallback",
            )
        )
        + "def is_wandb_available():\n    return False\n",
    )
    write(root, "verl/__init__.py", "")
    write(root, "verl/workers/__init__.py", "")
    write(root, "verl/workers/actor/__init__.py", "")
    write(
        root,
        "verl/workers/actor/compute_key_tokens.py",
        git_show(ktae_git, KTAE_COMMIT, "verl/workers/actor/compute_key_tokens.py"),
    )
    sys.path.insert(0, str(root))
    src = git_show(ktae_git, KTAE_COMMIT, "verl/trainer/ppo/core_algos.py")
    g = {"torch": torch, "np": np, "defaultdict": defaultdict, "__name__": "ktae_core_algos"}
    exec(extract_function(src, "compute_ktae_outcome_advantage_and_keytokens"), g)
    ckt = importlib.import_module("verl.workers.actor.compute_key_tokens")
    return g["compute_ktae_outcome_advantage_and_keytokens"], ckt


def pad_batch(rows):
    """verl layout: responses right-padded with the pad id, attention-mask-style response mask (int64),
    the outcome reward on the row's last action token (token_level_rewards.sum(-1) == reward)."""
    L = max(len(r["token_ids"]) for r in rows)
    n = len(rows)
    responses = torch.full((n, L), QWEN_PAD, dtype=torch.long)
    mask = torch.zeros((n, L), dtype=torch.long)
    tlr = torch.zeros((n, L), dtype=torch.float32)
    for i, r in enumerate(rows):
        k = len(r["token_ids"])
        responses[i, :k] = torch.tensor(r["token_ids"], dtype=torch.long)
        mask[i, :k] = torch.tensor(r["action_mask"], dtype=torch.long)
        last = max(j for j, m in enumerate(r["action_mask"]) if m)
        tlr[i, last] = r["reward"]
    index = np.array([r["prompt_id"] for r in rows], dtype=object)
    return tlr, responses, mask, index


def K(pid, rid, toks, reward, mask=None):
    return {
        "prompt_id": pid,
        "rollout_id": rid,
        "token_ids": toks,
        "action_mask": mask if mask is not None else [1] * len(toks),
        "reward": reward,
    }


def ktae_cases():
    E = QWEN_PAD
    return [
        {
            "name": "plain_two_groups",
            "about": "2 groups x 4 rollouts, binary rewards; token 7 only in correct rollouts, 9 only in wrong "
            "ones, 5 repeated inside rollouts, unequal lengths (right-padded with 151643, mask 0).",
            "params": {"epsilon": 1e-6},
            "rows": [
                K("q0", "q0r0", [5, 7, 5, 3, 4], 1.0),
                K("q0", "q0r1", [5, 7, 8], 1.0),
                K("q0", "q0r2", [5, 9, 9, 3], 0.0),
                K("q0", "q0r3", [6, 9, 4, 8, 8, 2], 0.0),
                K("q1", "q1r0", [10, 11, 12], 0.0),
                K("q1", "q1r1", [10, 13, 12, 13], 1.0),
                K("q1", "q1r2", [11, 11, 14], 0.0),
                K("q1", "q1r3", [10, 12, 14, 15, 11], 0.0),
            ],
        },
        {
            "name": "all_correct_all_wrong_fractional",
            "about": "an all-correct group (rewards 1, 0.5, 0.25: all > 0 -> 'correct'; no wrong rollout -> "
            "key-token weights 0, plain GRPO), an all-wrong zero-variance group (0, 0, 0 -> all zeros), and "
            "a mixed group with fractional/negative rewards (0.5 correct, 0 and -0.5 wrong).",
            "params": {"epsilon": 1e-6},
            "rows": [
                K("q0", "q0r0", [3, 4, 5], 1.0),
                K("q0", "q0r1", [3, 6], 0.5),
                K("q0", "q0r2", [4, 4, 7, 8], 0.25),
                K("q1", "q1r0", [3, 4], 0.0),
                K("q1", "q1r1", [5, 6, 7], 0.0),
                K("q1", "q1r2", [9], 0.0),
                K("q2", "q2r0", [20, 21, 22, 21], 0.5),
                K("q2", "q2r1", [20, 23, 24], 0.0),
                K("q2", "q2r2", [25, 21, 23, 23, 26], -0.5),
                K("q2", "q2r3", [20, 22], 0.5),
            ],
        },
        {
            "name": "singleton_and_masked_tokens",
            "about": "a singleton group (GRPO mean 0, std 1 -> A = R/(1+eps), key weights 0; it must be the "
            "longest row: its zeros() table has only max_token_num entries, so a padded singleton row "
            "would index out of range) next to a 3-rollout group whose rows contain action_mask=0 tokens "
            "in the middle (excluded from the statistics, advantage 0 there).",
            "params": {"epsilon": 1e-6},
            "rows": [
                K("q0", "q0r0", [30, 31, 32, 33, 34, 35, 36], 0.8),
                K("q1", "q1r0", [40, 41, 90, 91, 42], 1.0, [1, 1, 0, 0, 1]),
                K("q1", "q1r1", [40, 43, 90, 44], 0.0, [1, 1, 0, 1]),
                K("q1", "q1r2", [45, 41, 91, 91, 42, 46], 0.0, [1, 1, 0, 0, 1, 1]),
            ],
        },
        {
            "name": "eos_token_and_epsilon",
            "about": "epsilon=0.1 (non-default, a function argument; the trainer passes none); every rollout "
            "ends with the generated eos 151643 (mask 1), whose key weight the code forces to 0; 5 rollouts, "
            "2 correct, tokens shared by all rollouts, a token in 3 of 5.",
            "params": {"epsilon": 0.1},
            "rows": [
                K("q0", "q0r0", [2, 3, 4, E], 1.0),
                K("q0", "q0r1", [2, 3, 5, 5, E], 1.0),
                K("q0", "q0r2", [2, 6, 4, E], 0.0),
                K("q0", "q0r3", [2, 6, 6, 7, 8, E], 0.0),
                K("q0", "q0r4", [2, 3, 6, E], 0.0),
                K("q1", "q1r0", [2, 4, E], 0.0),
                K("q1", "q1r1", [2, 5, 8, E], 1.0),
            ],
        },
    ]


def run_ktae(fn, params, rows):
    tlr, responses, mask, index = pad_batch(rows)
    adv, ret = fn(
        token_level_rewards=tlr, responses=responses, eos_mask=mask, index=index, **params
    )
    assert torch.equal(adv, ret)
    out = []
    for i, r in enumerate(rows):
        out.append({"advantage": None, "advantages": clean(adv[i, : len(r["token_ids"])])})
    return out


def key_token_cases():
    return [
        {
            "name": "default_ctor",
            "about": "the values compute_ktae_outcome_advantage_and_keytokens passes",
            "params": {"alpha": 1.0, "beta_ig": 1.0, "gamma_tf": 1.0, "top": 1.0, "bottom": -1.0},
        },
        {
            "name": "script_beta_ig_2",
            "about": "beta_ig=2.0 as in the repo's run scripts (which never reach "
            "the advantage function)",
            "params": {"alpha": 1.0, "beta_ig": 2.0, "gamma_tf": 1.0, "top": 1.0, "bottom": -1.0},
        },
        {
            "name": "no_fisher",
            "about": "alpha=0: Fisher term off",
            "params": {"alpha": 0.0, "beta_ig": 1.0, "gamma_tf": 1.0, "top": 1.0, "bottom": -1.0},
        },
        {
            "name": "no_ig",
            "about": "beta_ig=0: information-gain term off",
            "params": {"alpha": 1.0, "beta_ig": 0.0, "gamma_tf": 1.0, "top": 1.0, "bottom": -1.0},
        },
        {
            "name": "no_tf_top_half",
            "about": "gamma_tf=0 (no BM25-tf ratio in x), top=0.5, bottom=-0.5 (unused)",
            "params": {"alpha": 1.0, "beta_ig": 1.0, "gamma_tf": 0.0, "top": 0.5, "bottom": -0.5},
        },
    ]


def run_key_tokens(ckt, params, rows):
    _, responses, mask, _ = pad_batch(rows)
    rewards = torch.tensor([r["reward"] for r in rows], dtype=torch.float32)
    comp = ckt.ComputeKeyTokens(
        responses_ids=responses,
        mask=mask,
        rewards=rewards,
        max_token_num=responses.max().item(),
        **params,
    )
    w = comp.get_key_tokens()
    return [{"advantage": None, "advantages": clean(w[torch.tensor(r["token_ids"])])} for r in rows]


# ----------------------------------------------------------------------------------------------
# verl F-GRPO
# ----------------------------------------------------------------------------------------------


def load_verl(verl_git: str, tmp: Path):
    root = tmp / "verl_pkg"
    for name in [m for m in sys.modules if m == "verl" or m.startswith("verl.")]:
        del sys.modules[name]  # KTAE's fork of verl was loaded under the same package name
    sys.path[:] = [p for p in sys.path if not p.endswith("ktae_pkg")]
    write(root, "verl/__init__.py", "")
    write(root, "verl/utils/__init__.py", "")
    write(root, "verl/utils/device.py", "def get_device_name():  # stub\n    return 'cpu'\n")
    write(
        root, "verl/utils/groupwise.py", git_show(verl_git, VERL_COMMIT, "verl/utils/groupwise.py")
    )
    sys.path.insert(0, str(root))
    gw = importlib.import_module("verl.utils.groupwise")
    src = git_show(verl_git, VERL_COMMIT, "verl/trainer/ppo/core_algos.py")
    g = {
        "torch": torch,
        "np": np,
        "Optional": __import__("typing").Optional,
        "AlgoConfig": dict,
        "as_torch_index": gw.as_torch_index,
        "group_mean_std": gw.group_mean_std,
        "__name__": "verl_core_algos",
    }
    exec(extract_function(src, "compute_f_grpo_outcome_advantage"), g)
    return g["compute_f_grpo_outcome_advantage"]


def F(pid, rid, reward, n=3, mask=None):
    return {
        "prompt_id": pid,
        "rollout_id": rid,
        "token_ids": list(range(100, 100 + n)),
        "action_mask": mask if mask is not None else [1] * n,
        "reward": reward,
    }


YAML_DEFAULTS = {
    "f_grpo_gamma": 1.0,
    "f_grpo_reward_correct": 1.0,
    "f_grpo_reward_wrong": 0.0,
    "norm_adv_by_std_in_grpo": True,
}


def fgrpo_cases():
    return [
        {
            "name": "plain_yaml_defaults",
            "about": "ppo_trainer.yaml defaults (gamma 1, R_c 1, R_w 0, std-normalised, eps 1e-6); binary "
            "rewards, unequal group sizes 4/3/5 and unequal lengths.",
            "params": dict(YAML_DEFAULTS),
            "rows": [
                F("p0", "p0r0", 1.0, 4),
                F("p0", "p0r1", 0.0, 2),
                F("p0", "p0r2", 0.0, 3),
                F("p0", "p0r3", 0.0, 5),
                F("p1", "p1r0", 1.0, 2),
                F("p1", "p1r1", 1.0, 3),
                F("p1", "p1r2", 0.0, 1),
                F("p2", "p2r0", 1.0, 3),
                F("p2", "p2r1", 0.0, 3),
                F("p2", "p2r2", 1.0, 4),
                F("p2", "p2r3", 0.0, 2),
                F("p2", "p2r4", 0.0, 3),
            ],
        },
        {
            "name": "gamma2_no_std",
            "about": "f_grpo_gamma=2, norm_adv_by_std_in_grpo=False (Dr.GRPO-style centred reward x focal weight).",
            "params": {**YAML_DEFAULTS, "f_grpo_gamma": 2.0, "norm_adv_by_std_in_grpo": False},
            "rows": [
                F("p0", "p0r0", 1.0),
                F("p0", "p0r1", 0.0),
                F("p0", "p0r2", 0.0),
                F("p0", "p0r3", 1.0),
                F("p0", "p0r4", 0.0),
                F("p1", "p1r0", 1.0),
                F("p1", "p1r1", 1.0),
                F("p1", "p1r2", 1.0),
                F("p1", "p1r3", 0.0),
            ],
        },
        {
            "name": "signed_rewards_clamp",
            "about": "R_c=1, R_w=-1 (f_grpo_reward_correct / f_grpo_reward_wrong), gamma 0.5; fractional "
            "rewards; a group whose mean is above R_c (mu_hat clamps to 1 -> weight 0) and one below R_w "
            "(clamps to 0 -> weight 1).",
            "params": {
                **YAML_DEFAULTS,
                "f_grpo_gamma": 0.5,
                "f_grpo_reward_correct": 1.0,
                "f_grpo_reward_wrong": -1.0,
            },
            "rows": [
                F("p0", "p0r0", 1.0),
                F("p0", "p0r1", -1.0),
                F("p0", "p0r2", 0.4),
                F("p0", "p0r3", -0.6),
                F("p1", "p1r0", 1.5),
                F("p1", "p1r1", 1.2),
                F("p1", "p1r2", 0.9),
                F("p2", "p2r0", -1.5),
                F("p2", "p2r1", -1.1),
                F("p2", "p2r2", -0.8),
            ],
        },
        {
            "name": "singleton_zero_variance_gamma0",
            "about": "gamma=0 (weight (1-mu)^0 = 1 everywhere, even at mu=1: plain GRPO); a singleton group "
            "(mean forced to 0, std 1 -> A = R/(1+eps)); zero-variance groups (std floored at sqrt(eps) "
            "inside group_mean_std: the float32 mean of 0.9,0.9,0.9 is off by 6e-8, which divided by 1e-3 leaves 6e-5, not 0); masked "
            "tokens inside a row.",
            "params": {**YAML_DEFAULTS, "f_grpo_gamma": 0.0},
            "rows": [
                F("p0", "p0r0", 0.7, 4),
                F("p1", "p1r0", 0.9),
                F("p1", "p1r1", 0.9),
                F("p1", "p1r2", 0.9),
                F("p2", "p2r0", 1.0),
                F("p2", "p2r1", 1.0),
                F("p3", "p3r0", 1.0, 4, [1, 0, 1, 1]),
                F("p3", "p3r1", 0.0, 3, [1, 1, 0]),
                F("p3", "p3r2", 0.5),
            ],
        },
        {
            "name": "singleton_focal_weight_and_epsilon",
            "about": "the singleton group's focal weight comes from the forced mean 0, not its reward: R_w=-0.5 "
            "so mu_hat=(0+0.5)/1.5; plus a zero-variance group and a mixed one; epsilon=0.01 passed as "
            "a keyword (the trainer never passes it). gamma 1.5, R_c 1.0.",
            "params": {
                **YAML_DEFAULTS,
                "f_grpo_gamma": 1.5,
                "f_grpo_reward_wrong": -0.5,
                "epsilon": 0.01,
            },
            "rows": [
                F("p0", "p0r0", 1.0, 2),
                F("p1", "p1r0", 0.25),
                F("p1", "p1r1", 0.25),
                F("p2", "p2r0", 1.0),
                F("p2", "p2r1", -0.5),
                F("p2", "p2r2", 0.0),
                F("p2", "p2r3", 0.75),
            ],
        },
    ]


def run_fgrpo(fn, params, rows):
    p = dict(params)
    eps = p.pop("epsilon", None)
    tlr, _, mask, index = pad_batch(rows)
    kw = {} if eps is None else {"epsilon": eps}
    adv, ret = fn(token_level_rewards=tlr, response_mask=mask, index=index, config=p, **kw)
    assert torch.equal(adv, ret)
    out = []
    for i, r in enumerate(rows):
        row_adv = adv[i, : len(r["token_ids"])]
        j = r["action_mask"].index(1)
        out.append({"advantage": row_adv[j].item(), "advantages": clean(row_adv)})
    return out


# ----------------------------------------------------------------------------------------------


def dump(out: Path, fname: str, obj: dict) -> None:
    (out / fname).write_text(json.dumps(obj, indent=1, ensure_ascii=False) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prime-rl-git", default=os.environ.get("PRIME_RL_GIT"))
    ap.add_argument("--verifiers-git", default=os.environ.get("VERIFIERS_GIT"))
    ap.add_argument("--ktae-git", default=os.environ.get("KTAE_GIT"))
    ap.add_argument("--verl-git", default=os.environ.get("VERL_GIT"))
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent))
    a = ap.parse_args()
    for k in ("prime_rl_git", "verifiers_git", "ktae_git", "verl_git"):
        if not getattr(a, k):
            ap.error(f"--{k.replace('_', '-')} (or env {k.upper()}) is required")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    made_by = Path(__file__).name

    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        hg, rae, defaults, vf_props = load_prime_rl(a.prime_rl_git, a.verifiers_git, tmp)
        classes = make_vf_classes(vf_props)
        assert defaults["decay"] == 0.95 and defaults["episode_agents"] == "<required>", defaults

        cases = []
        for c in hierarchical_cases():
            c["expected"] = run_prime(hg.HierarchicalGRPOAlgorithm, c["params"], c["rows"], classes)
            cases.append(c)
        dump(
            out,
            "hierarchical_grpo.json",
            {
                "made_by": made_by,
                "repo": "https://github.com/PrimeIntellect-ai/prime-rl",
                "commit": PRIME_RL_COMMIT,
                "path": "src/prime_rl/orchestrator/algo/hierarchical_grpo.py",
                "function": "HierarchicalGRPOAlgorithm.score_group",
                "about": "One score_group call per rollout group (consecutive rows with one prompt_id = the "
                "episodes of one source task; consecutive rows with one episode_id = one vf.Episode, "
                "Episode.id). Each row is one trace (trace.agent.name = 'agent', trace.reward = 'reward', "
                "a single Reward(score=reward, weight=1)). Peers are keyed (agent.name, episode.id if "
                "agent.name in episode_agents else None); A = reward - mean(peers' rewards), no std, a lone "
                "peer gives 0; the scalar is broadcast over the trace's sampled tokens. Skipped (no "
                "advantage, not in any mean): trace.ok false, agent.trainable false, no mask token. "
                "episode_agents has no default (required, min 1); docs use ['solver']. Row extra keys "
                "'episode_id', and in one case 'ok', 'trainable', 'action_mask'.",
                "cases": cases,
            },
        )

        cases = []
        for c in rae_cases():
            c["expected"] = run_prime(rae.RAEAlgorithm, c["params"], c["rows"], classes)
            cases.append(c)
        dump(
            out,
            "rae.json",
            {
                "made_by": made_by,
                "repo": "https://github.com/PrimeIntellect-ai/prime-rl",
                "commit": PRIME_RL_COMMIT,
                "path": "src/prime_rl/orchestrator/algo/rae.py",
                "function": "RAEAlgorithm.score_group",
                "about": "Rows in arrival order; one RAEAlgorithm instance per case, score_group called once per "
                "run of consecutive rows with one prompt_id (baselines persist across calls). Per trace, in "
                "order: A = reward - b[agent.name]; then b[agent.name] = decay*b + (1-decay)*reward. b starts "
                "at 0.0 (defaultdict(float)), keyed by agent name only (one instance per env). decay default "
                "0.95 (RAEAlgoConfig, 0 <= decay < 1). No normalisation. Skipped traces (ok false, not "
                "trainable, no mask token) get no advantage and do not update b.",
                "cases": cases,
            },
        )

        ktae_fn, ckt = load_ktae(a.ktae_git, tmp)
        cases = []
        for c in ktae_cases():
            c["expected"] = run_ktae(ktae_fn, c["params"], c["rows"])
            cases.append(c)
        dump(
            out,
            "compute_ktae_outcome_advantage_and_keytokens.json",
            {
                "made_by": made_by,
                "repo": "https://github.com/xiaolizh1/KTAE",
                "commit": KTAE_COMMIT,
                "path": "verl/trainer/ppo/core_algos.py",
                "function": "compute_ktae_outcome_advantage_and_keytokens",
                "about": "Per token: A_t = mask_t * [ (R - mean_g)/(std_g + epsilon) + w_g(token_t) ], std = "
                "torch.std (ddof 1), singleton group mean 0 std 1 and w = 0. w_g from ComputeKeyTokens with "
                "hard-coded alpha=1, beta_ig=1, gamma_tf=1, top=1 (bottom=-1 unused); the config argument is "
                "ignored, so algorithm.alpha/beta_ig/gamma_tf/top/bottom never reach it. Correct = reward > 0.0 "
                "(reward = sum of token_level_rewards); a group with no correct or no wrong rollout has w = 0. "
                "w(v) = (sigmoid(((alpha*F + beta*IG) * x)/(alpha+beta)) - 0.5)*2*top over the 2x2 "
                "rollout-appearance table of token v, w(151643) = 0. Inputs built verl-style: right padding "
                "with 151643 and mask 0 (rows must use ids < 151643 except the eos 151643), the reward on the "
                "last action token, index = prompt_id; expected advantages cover the row's own tokens. "
                "epsilon default 1e-6.",
                "cases": cases,
            },
        )

        # ComputeKeyTokens on its own, to pin its hyper-parameters (one group)
        group_rows = ktae_cases()[0]["rows"][:4] + [
            K("q0", "q0r4", [7, 3, 3, 2], 1.0),
            K("q0", "q0r5", [9, 9], -1.0),
        ]
        cases = []
        for c in key_token_cases():
            c = dict(c)
            c["rows"] = group_rows
            c["expected"] = run_key_tokens(ckt, c["params"], group_rows)
            cases.append(c)
        dump(
            out,
            "ComputeKeyTokens.get_key_tokens.json",
            {
                "made_by": made_by,
                "repo": "https://github.com/xiaolizh1/KTAE",
                "commit": KTAE_COMMIT,
                "path": "verl/workers/actor/compute_key_tokens.py",
                "function": "ComputeKeyTokens.get_key_tokens",
                "about": "The per-token key weight table of one group (all rows share one prompt_id), indexed by "
                "each row's token ids, unmasked: advantages[t] = key_token_result[token_ids[t]]. Constructor "
                "parameters alpha (Fisher weight), beta_ig (information-gain weight), gamma_tf (BM25-tf ratio "
                "on/off), top (output scale), bottom (unused); rewards > 0.0 are correct. Inputs padded with "
                "151643 as for the advantage function; max_token_num = responses.max().",
                "cases": cases,
            },
        )

        fg = load_verl(a.verl_git, tmp)
        cases = []
        for c in fgrpo_cases():
            c["expected"] = run_fgrpo(fg, c["params"], c["rows"])
            cases.append(c)
        dump(
            out,
            "compute_f_grpo_outcome_advantage.json",
            {
                "made_by": made_by,
                "repo": "https://github.com/verl-project/verl",
                "commit": VERL_COMMIT,
                "requested_commit": VERL_REQUESTED_COMMIT,
                "path": "verl/trainer/ppo/core_algos.py",
                "function": "compute_f_grpo_outcome_advantage",
                "about": "A = (1 - clamp((mean_g - R_w)/(R_c - R_w), 0, 1))^gamma * (R - mean_g)/(std_g + eps) "
                "(or R - mean_g when norm_adv_by_std_in_grpo is false), broadcast times response_mask. mean_g, "
                "std_g from verl.utils.groupwise.group_mean_std: std = sqrt(max(var_ddof1, eps)) in float32, "
                "singleton group mean 0 and std 1 (the forced mean 0 also feeds mu_hat). Params are the "
                "trainer's config keys (passed as config=dict): f_grpo_gamma, f_grpo_reward_correct, "
                "f_grpo_reward_wrong (ppo_trainer.yaml 1.0/1.0/0.0; AlgoConfig dataclass None -> ValueError), "
                "norm_adv_by_std_in_grpo (True); epsilon is a keyword (default 1e-6). reward = "
                "token_level_rewards.sum(-1), placed on the row's last action token; index = prompt_id. "
                "Requested commit 5b98636 is not in a stored snapshot; this is PR #5334's head, whose "
                "core_algos.py matches the indexed 5b98636 text.",
                "cases": cases,
            },
        )


if __name__ == "__main__":
    main()
