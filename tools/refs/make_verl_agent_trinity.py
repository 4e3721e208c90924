"""Reference fixtures for agent per-step credit: GiGPO (verl-agent) and GiGPO / step-wise GRPO (Trinity-RFT).

Every expected number in the JSON files is produced by the authors' own code, imported unchanged
from their source files; nothing below re-implements a formula.

Sources
-------
1. verl-agent (GiGPO authors)
   repository : https://github.com/langfengQ/verl-agent
   commit     : d0b97244c50f17fb43a6ef0a15bca0e95a044ff7  (2025-10-15, "code adjustment & fix prompt
                agent bug (#183)"). The upstream repository could not be fetched here; the fork
                https://github.com/vanzll/verl-agent has exactly this upstream commit as its HEAD, and
                the tree was taken from it.
   files      : gigpo/core_gigpo.py
                    compute_step_discounted_returns, compute_gigpo_outcome_advantage (and through it
                    episode_norm_reward, build_step_group, step_norm_reward, are_similar, to_hashable);
                    episode_norm_reward is also called directly for its own fixture (it has the
                    parameter compute_mean_std_cross_steps that compute_gigpo_outcome_advantage never
                    passes).
                agent_system/reward_manager/episode.py
                    EpisodeRewardManager.__call__ (puts the episode reward on the last valid response
                    token of every step row -> token_level_scores).
                verl/trainer/ppo/ray_trainer.py
                    compute_response_mask, apply_invalid_action_penalty (taken out of the file with
                    `ast`; the module imports ray, hydra, the whole verl trainer).
   The pipeline order is RayPPOTrainer.fit() at that commit: compute_step_discounted_returns(batch,
   gamma=algorithm.gamma) -> batch['step_rewards']; compute_response_mask; reward_fn
   (EpisodeRewardManager) -> token_level_scores; apply_invalid_action_penalty (coef 0.1, every action
   valid here, so a no-op); use_kl_in_reward False -> token_level_rewards = token_level_scores;
   compute_advantage(...) -> core_gigpo.compute_gigpo_outcome_advantage with the same keyword mapping
   as ray_trainer.compute_advantage (epsilon is not passed there, so training always uses 1e-6).
   Not run: the rollout loop (needs an environment). Its bookkeeping is reproduced as data:
   rows are trajectory-major (gather_rollout_data appends env 0's steps, then env 1's, ...),
   uid = episode group, traj_uid = trajectory, anchor_obs = state, rewards = env step reward,
   active_masks = True, episode_rewards = float32 running sum of the step rewards
   (rollout_loop.py: `episode_rewards[active_masks] += rewards`), episode_lengths = step count.
   adjust_batch (random duplication to a divisible size) and balance_batch (reordering) are not run.

2. Trinity-RFT
   repository : https://github.com/agentscope-ai/Trinity-RFT  (the snapshot is 1.5 GB, over the fetch
                limit), so the code is the upstream release on PyPI:
                trinity-rft==0.6.0, trinity_rft-0.6.0-py3-none-any.whl,
                sha256 51ac0d789ccedbdd0578372dc45fd1480c6e5dfe53632ffd451feed827d0a6da
   files      : trinity/algorithm/advantage_fn/gigpo_advantage.py   GiGPOAdvantageFn.process
                trinity/algorithm/advantage_fn/multi_step_grpo_advantage.py
                                                                  StepWiseGRPOAdvantageFn.process
                trinity/common/experience.py                        Experience, EID, group_by
   Commits the wheel files were compared with (see the notes): gigpo_advantage.py is text-identical
   to pan-x-c/Trinity-RFT@bf07e640f39fc399e1fd5a8afdc1b19089292a35 and code-identical (docstrings
   only differ) to agentscope-ai/Trinity-RFT@0fcd37e9497b977e56053e256ddbb36964084e0a;
   multi_step_grpo_advantage.py equals agentscope-ai/Trinity-RFT v0.5.2
   (eedef4b5a1f9ce205b12c6fdc64b9467fce98013) except the metrics helper import.
   The classes are looked up through the registry (ADVANTAGE_FN.get("gigpo" / "step_wise_grpo")).

Stubs
-----
  verl      : only `verl.DataProto` is imported by core_gigpo.py and episode.py. The real one needs
              ray, tensordict, pandas, transformers (verl/__init__ and verl/utils/__init__). The stub
              holds `batch` (dict of tensors), `non_tensor_batch` (dict of numpy arrays), `meta_info`,
              len(), and data[i] -> an item whose batch/non_tensor_batch hold row i -- the only parts
              the four verl-agent functions touch.
  tokenizer : EpisodeRewardManager decodes prompt/response only for printing (num_examine=0 here);
              a stub decode joins the ids.
  ray       : trinity/utils/log.py imports ray and uses it only for logging inside Ray actors; an
              empty module stands in.

Venv (Python 3.11)
------------------
  python3 -m venv /tmp/fw/verl_agent_trinity/venv
  /tmp/fw/verl_agent_trinity/venv/bin/pip install "torch==2.13.0+cpu" "numpy<2" safetensors omegaconf
      # resolved: torch 2.13.0+cpu, numpy 1.26.4, safetensors 0.8.0, omegaconf 2.4.0
Source trees
  verl-agent : git clone https://github.com/langfengQ/verl-agent SRC_VA && git -C SRC_VA checkout \
               d0b97244c50f17fb43a6ef0a15bca0e95a044ff7   (or git archive of that commit)
  Trinity    : pip download trinity-rft==0.6.0 --no-deps && unzip trinity_rft-0.6.0-py3-none-any.whl \
               'trinity/*' -d SRC_TR
Run
  /tmp/fw/verl_agent_trinity/venv/bin/python tools/refs/make_verl_agent_trinity.py \
      --verl-agent-src SRC_VA --trinity-src SRC_TR [--out DIR]
  (or VERL_AGENT_SRC / TRINITY_SRC in the environment; --out defaults to this script's folder).
  The script checks the git blob hash of every source file it runs and stops on a mismatch.
Deterministic: token ids come from a seeded random.Random; uuid4 labels made by build_step_group and
Trinity's EID suffixes never reach the output (group labels in "trace" are renamed g0, g1, ... in order
of first appearance). Two runs write identical files.
"""

import argparse
import ast
import hashlib
import importlib.util
import json
import os
import random
import sys
import types

import numpy as np
import torch

VA_REPO = "https://github.com/langfengQ/verl-agent"
VA_COMMIT = "d0b97244c50f17fb43a6ef0a15bca0e95a044ff7"
VA_BLOBS = {
    "gigpo/core_gigpo.py": "116dab941157c4236d4228de39346273694a0695",
    "agent_system/reward_manager/episode.py": "96040d5a8b548f4e38784213d35fe9712db6cce0",
    "verl/trainer/ppo/ray_trainer.py": "b7a367b259597636e0aba4e6488cf611d42f7a6d",
}
TR_REPO = "https://github.com/agentscope-ai/Trinity-RFT"
TR_RELEASE = (
    "PyPI trinity-rft==0.6.0 (trinity_rft-0.6.0-py3-none-any.whl, sha256 "
    "51ac0d789ccedbdd0578372dc45fd1480c6e5dfe53632ffd451feed827d0a6da)"
)
TR_BLOBS = {
    "trinity/algorithm/advantage_fn/gigpo_advantage.py": "a08ef472025fcc323530e9483cad6f683ab5ae1c",
    "trinity/algorithm/advantage_fn/multi_step_grpo_advantage.py": "80b4d568c52f47d7f7001bc3b1a2598f171c08d2",
    "trinity/common/experience.py": "ef6c91429f77004dbdf269b068cd96098bd81641",
}
TR_GIGPO_COMMIT = "0fcd37e9497b977e56053e256ddbb36964084e0a"
TR_STEPWISE_COMMIT = "eedef4b5a1f9ce205b12c6fdc64b9467fce98013"
PROMPT_TOKENS = [1, 2]
MADE_BY = "make_verl_agent_trinity.py"


def blob_sha(path):
    with open(path, "rb") as f:
        data = f.read()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def check_blobs(root, blobs):
    for rel, want in blobs.items():
        got = blob_sha(os.path.join(root, rel))
        if got != want:
            sys.exit(f"{rel}: git blob {got}, expected {want} -- wrong source tree")


# --------------------------------------------------------------------------------------------- #
# Stubs
# --------------------------------------------------------------------------------------------- #
class _Item:
    def __init__(self, batch, non_tensor_batch):
        self.batch = batch
        self.non_tensor_batch = non_tensor_batch


class DataProto:
    """Stand-in for verl.DataProto: the attributes the verl-agent functions read."""

    def __init__(self, batch, non_tensor_batch, meta_info=None):
        self.batch = batch
        self.non_tensor_batch = non_tensor_batch
        self.meta_info = meta_info or {}

    def __len__(self):
        return len(next(iter(self.batch.values())))

    def __getitem__(self, i):
        return _Item(
            {k: v[i] for k, v in self.batch.items()},
            {k: v[i] for k, v in self.non_tensor_batch.items()},
        )


class StubTokenizer:
    def decode(self, ids, skip_special_tokens=False):
        return " ".join(str(int(t)) for t in ids)


def load_file_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def extract_functions(path, names, namespace):
    with open(path) as f:
        tree = ast.parse(f.read(), filename=path)
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    assert sorted(n.name for n in nodes) == sorted(names), names
    exec(compile(ast.Module(body=nodes, type_ignores=[]), path, "exec"), namespace)  # noqa: S102
    return {n: namespace[n] for n in names}


def load_verl_agent(src):
    check_blobs(src, VA_BLOBS)
    verl = types.ModuleType("verl")
    verl.DataProto = DataProto
    sys.modules["verl"] = verl
    core = load_file_module("gigpo.core_gigpo", os.path.join(src, "gigpo/core_gigpo.py"))
    episode = load_file_module(
        "agent_system.reward_manager.episode",
        os.path.join(src, "agent_system/reward_manager/episode.py"),
    )
    fns = extract_functions(
        os.path.join(src, "verl/trainer/ppo/ray_trainer.py"),
        ["compute_response_mask", "apply_invalid_action_penalty"],
        {"torch": torch, "np": np, "DataProto": DataProto},
    )
    return core, episode, fns


def load_trinity(src):
    check_blobs(src, TR_BLOBS)
    sys.modules.setdefault("ray", types.ModuleType("ray"))
    sys.path.insert(0, src)
    from trinity.algorithm.advantage_fn import ADVANTAGE_FN
    from trinity.common.experience import EID, Experience

    return ADVANTAGE_FN, EID, Experience


# --------------------------------------------------------------------------------------------- #
# Row sets (one row per agent step; trajectory-major, steps in order)
# --------------------------------------------------------------------------------------------- #
def make_rows(spec, seed, masks=None):
    """spec: list of (prompt_id, rollout_id, [(state, step_reward), ...])."""
    rng = random.Random(seed)
    rows = []
    for prompt_id, rollout_id, steps in spec:
        total = np.float32(0.0)
        for _, r in steps:  # the rollout loop's float32 running sum
            total = np.float32(total + np.float32(r))
        for t, (state, r) in enumerate(steps):
            n = rng.randint(2, 4)
            toks = [rng.randint(10, 99) for _ in range(n)]
            rows.append(
                {
                    "prompt_id": prompt_id,
                    "rollout_id": rollout_id,
                    "segment_index": t,
                    "state": state,
                    "step_reward": r,
                    "reward": round(float(total), 6),
                    "token_ids": toks,
                    "action_mask": [1] * n,
                }
            )
    if masks:
        for i, m in masks.items():
            n = len(rows[i]["token_ids"])
            rows[i]["action_mask"] = (m + [1] * n)[:n]
    return rows


PLAIN = [
    ("p0", "r0", [("s0", 0.0), ("s1", 0.5), ("s2", 1.0)]),
    ("p0", "r1", [("s0", -0.2), ("s3", 0.0)]),
    ("p0", "r2", [("s0", 0.1), ("s1", 0.0), ("s4", 0.0), ("s5", 2.0)]),
    ("p1", "r0", [("t0", 0.0), ("t1", 1.0)]),
    ("p1", "r1", [("t0", 0.3), ("t2", -0.5), ("t1", 0.25)]),
]
EDGE = [
    # singleton episode group, 3 steps
    ("pA", "rA", [("a0", 0.2), ("a1", -0.4), ("a2", 1.3)]),
    # zero-variance episode group (all returns 1.0), unequal lengths, shared first state
    ("pB", "r0", [("b0", 0.0), ("b1", 1.0)]),
    ("pB", "r1", [("b0", 0.5), ("b2", 0.5)]),
    ("pB", "r2", [("b0", 0.25), ("b1", 0.25), ("b3", 0.5)]),
    # singleton episode group, one step
    ("pC", "rC", [("c0", -0.7)]),
    # repeated state within a trajectory, a one-step trajectory, unequal lengths
    ("pD", "r0", [("d0", 0.2), ("d1", -0.1), ("d0", 0.4), ("d2", 0.0)]),
    ("pD", "r1", [("d0", 0.9)]),
    ("pD", "r2", [("d0", -0.3), ("d1", 0.6)]),
]
CROSS = [
    ("q0", "r0", [("start", 0.0), ("mid", 1.0)]),
    ("q0", "r1", [("start", -0.5), ("end", 0.0)]),
    ("q1", "r0", [("start", 0.4), ("mid", 0.2)]),
    ("q1", "r1", [("other", 0.0), ("start", 0.8)]),
]
K0 = "You are in the kitchen. On the counter 1 you see a mug, a knife, and an apple."
K1 = "You are in the kitchen. On the counter 1 you see a mug, a knife, and an apple!"
K2 = "You are in the kitchen. On the counter 2 you see a cup, a spoon, and a bread."
H0 = "You are in the hallway. There is a door to the north and a lamp on a table."
G0 = "You are in the garden. A hose lies next to a red bucket and a blue rake."
G1 = "You are in the garden. A hose lies next to a red bucket and a blue rake!"
SIM = [
    ("g0", "r0", [(K0, 0.0), (H0, 1.0)]),
    ("g0", "r1", [(K1, 0.5), (H0, 0.0)]),
    ("g0", "r2", [(K2, -0.25), (H0, 0.75)]),
    ("g1", "r0", [(G0, 0.3)]),
    ("g1", "r1", [(G1, 1.0), (H0, -0.5)]),
]
CA, CB, CC, CX = "at desk: lamp off", "at desk: lamp on!", "at desk: fan on!!", "hall: door locked"
CHAIN = [
    ("h0", "r0", [(CA, 0.0), (CX, 1.0)]),
    ("h0", "r1", [(CB, 0.5), (CX, 0.2)]),
    ("h0", "r2", [(CC, -0.3), (CX, 0.9)]),
    ("h1", "r0", [(CX, 0.4)]),
    ("h1", "r1", [(CB, 0.1), (CA, 0.6)]),
]

ROWSETS = {
    "plain": make_rows(PLAIN, 11),
    "edge": make_rows(EDGE, 12),
    "cross": make_rows(CROSS, 13),
    "sim": make_rows(SIM, 14),
    "chain_abc": make_rows(CHAIN, 15),
    "chain_cba": make_rows([CHAIN[2], CHAIN[1], CHAIN[0], CHAIN[3], CHAIN[4]], 15),
    # a zero in the action mask (e.g. a tool-output token inside the step's response)
    "edge_masked": make_rows(EDGE, 12, masks={1: [1, 0], 5: [0, 1], 9: [1, 1, 0]}),
}


def scalar_from_tokens(adv_tokens, mask):
    """The row's scalar: the value on its first policy token (all policy tokens carry the same one)."""
    vals = [a for a, m in zip(adv_tokens, mask, strict=True) if m]
    assert vals and all(v == vals[0] for v in vals), (adv_tokens, mask)
    return vals[0]


def relabel(labels):
    seen = {}
    return [seen.setdefault(x, f"g{len(seen)}") for x in labels]


# --------------------------------------------------------------------------------------------- #
# verl-agent
# --------------------------------------------------------------------------------------------- #
def build_verl_batch(rows):
    n = len(rows)
    L = max(len(r["token_ids"]) for r in rows)
    P = len(PROMPT_TOKENS)
    responses = torch.zeros(n, L, dtype=torch.long)
    resp_mask = torch.zeros(n, L, dtype=torch.long)
    for i, r in enumerate(rows):
        k = len(r["token_ids"])
        responses[i, :k] = torch.tensor(r["token_ids"])
        resp_mask[i, :k] = (
            1  # verl-agent responses are right-padded; every real token is the policy's
        )
        assert all(r["action_mask"]), "verl-agent rows carry no masked tokens"
    prompts = torch.tensor([PROMPT_TOKENS] * n, dtype=torch.long)
    attention_mask = torch.cat([torch.ones(n, P, dtype=torch.long), resp_mask], dim=1)
    # episode totals and lengths, as the rollout loop accumulates them (float32)
    ep_rew, ep_len = {}, {}
    for r in rows:
        ep_rew[r["rollout_id"], r["prompt_id"]] = np.float32(
            ep_rew.get((r["rollout_id"], r["prompt_id"]), np.float32(0.0))
            + np.float32(r["step_reward"])
        )
        ep_len[r["rollout_id"], r["prompt_id"]] = (
            ep_len.get((r["rollout_id"], r["prompt_id"]), 0) + 1
        )
    traj = [f"{r['prompt_id']}/{r['rollout_id']}" for r in rows]
    batch = DataProto(
        batch={
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention_mask,
        },
        non_tensor_batch={
            "uid": np.array([r["prompt_id"] for r in rows], dtype=object),
            "traj_uid": np.array(traj, dtype=object),
            "anchor_obs": np.array([r["state"] for r in rows], dtype=object),
            "rewards": np.array([r["step_reward"] for r in rows], dtype=object),
            "active_masks": np.array([True] * n, dtype=object),
            "is_action_valid": np.ones(n, dtype=bool),
            "data_source": np.array(["fixture"] * n, dtype=object),
            "episode_rewards": np.array(
                [ep_rew[r["rollout_id"], r["prompt_id"]] for r in rows], dtype=np.float32
            ),
            "episode_lengths": np.array(
                [ep_len[r["rollout_id"], r["prompt_id"]] for r in rows], dtype=np.float32
            ),
        },
    )
    return batch


def verl_pipeline(va, rows, gamma):
    """compute_step_discounted_returns -> response_mask -> EpisodeRewardManager -> invalid-action
    penalty -> token_level_rewards, in RayPPOTrainer.fit() order."""
    core, episode, fns = va
    batch = build_verl_batch(rows)
    batch.batch["step_rewards"] = core.compute_step_discounted_returns(batch=batch, gamma=gamma)
    batch.batch["response_mask"] = fns["compute_response_mask"](batch)
    reward_fn = episode.EpisodeRewardManager(tokenizer=StubTokenizer(), num_examine=0)
    batch.batch["token_level_scores"] = reward_fn(batch)
    batch, _ = fns["apply_invalid_action_penalty"](batch, invalid_action_penalty_coef=0.1)
    batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
    return batch


def per_row(rows, adv):
    out = []
    for i, r in enumerate(rows):
        toks = adv[i, : len(r["token_ids"])].tolist()
        out.append({"advantage": scalar_from_tokens(toks, r["action_mask"]), "advantages": toks})
    return out


def run_verl_gigpo(va, rows, params):
    core = va[0]
    batch = verl_pipeline(va, rows, params["gamma"])
    nt = batch.non_tensor_batch
    adv, ret = core.compute_gigpo_outcome_advantage(
        token_level_rewards=batch.batch["token_level_rewards"],
        step_rewards=batch.batch["step_rewards"],
        response_mask=batch.batch["response_mask"],
        anchor_obs=nt["anchor_obs"],
        index=nt["uid"],
        traj_index=nt["traj_uid"],
        epsilon=params["epsilon"],
        step_advantage_w=params["step_advantage_w"],
        mode=params["mode"],
        enable_similarity=params["enable_similarity"],
        similarity_thresh=params["similarity_thresh"],
    )
    assert torch.equal(adv, ret)
    groups = core.build_step_group(
        nt["anchor_obs"], nt["uid"], params["enable_similarity"], params["similarity_thresh"]
    )
    trace = {
        "step_rewards_discounted": batch.batch["step_rewards"].tolist(),
        "episode_score": batch.batch["token_level_rewards"].sum(dim=-1).tolist(),
        "step_group": relabel(list(groups)),
    }
    return per_row(rows, adv), trace


def run_verl_episode_norm(va, rows, params):
    core = va[0]
    batch = verl_pipeline(va, rows, 1.0)
    nt = batch.non_tensor_batch
    adv = core.episode_norm_reward(
        batch.batch["token_level_rewards"],
        batch.batch["response_mask"],
        nt["uid"],
        nt["traj_uid"],
        epsilon=params["epsilon"],
        remove_std=params["remove_std"],
        compute_mean_std_cross_steps=params["compute_mean_std_cross_steps"],
    )
    return per_row(rows, adv), {
        "episode_score": batch.batch["token_level_rewards"].sum(dim=-1).tolist()
    }


# --------------------------------------------------------------------------------------------- #
# Trinity-RFT
# --------------------------------------------------------------------------------------------- #
def trinity_exps(tr, rows):
    _, EID, Experience = tr
    exps = []
    for r in rows:
        info = {"env_state_hash": r["state"]}
        if "step_reward" in r:
            info["step_reward"] = r["step_reward"]
        exps.append(
            Experience(
                eid=EID(batch=0, task=r["prompt_id"], run=r["rollout_id"], step=r["segment_index"]),
                tokens=PROMPT_TOKENS + r["token_ids"],
                prompt_length=len(PROMPT_TOKENS),
                action_mask=r["action_mask"],
                reward=r["reward"],
                info=info,
            )
        )
    return exps


def run_trinity(tr, key, rows, params):
    registry = tr[0]
    fn = registry.get(key)(**params)
    exps = trinity_exps(tr, rows)
    out, metrics = fn(exps)
    returned = {id(e) for e in out}
    res = []
    for r, e in zip(rows, exps, strict=True):
        if id(e) not in returned:
            assert e.advantages is None
            res.append({"advantage": None, "advantages": None})
            continue
        toks = e.advantages.tolist()
        assert len(toks) == len(r["token_ids"])
        res.append({"advantage": scalar_from_tokens(toks, r["action_mask"]), "advantages": toks})
    keep = {k: v for k, v in sorted(metrics.items()) if isinstance(v, (int, float))}
    return res, {"metrics": keep}


# --------------------------------------------------------------------------------------------- #
# Cases
# --------------------------------------------------------------------------------------------- #
VA_DEFAULT = {
    "gamma": 1.0,
    "step_advantage_w": 1.0,
    "mode": "mean_norm",
    "enable_similarity": False,
    "similarity_thresh": 0.95,
    "epsilon": 1e-6,
}
VA_CASES = [
    (
        "defaults",
        "plain",
        {},
        (
            "verl-agent defaults (ppo_trainer.yaml: gamma 1.0, gigpo.mode mean_norm, "
            "step_advantage_w 1.0, exact anchor grouping); two episode groups of unequal-length trajectories."
        ),
    ),
    (
        "mean_std_norm_gamma095",
        "plain",
        {"mode": "mean_std_norm", "gamma": 0.95},
        "mode mean_std_norm and gamma 0.95 (the examples/gigpo_trainer/run_alfworld.sh settings).",
    ),
    (
        "edge_defaults",
        "edge",
        {},
        (
            "defaults on edge groups: singleton group with a 3-step trajectory (episode stats over its 3 step "
            "rows: mean = R, so A^E = 0), zero-variance group, singleton group with a one-step trajectory "
            "(one score: mean 0, so A^E = R), a state repeated inside one trajectory, singleton anchor states."
        ),
    ),
    (
        "edge_mean_std_norm_w05_gamma09",
        "edge",
        {"mode": "mean_std_norm", "step_advantage_w": 0.5, "gamma": 0.9},
        "mean_std_norm, step_advantage_w 0.5, gamma 0.9 on the edge groups (std = 0 gives 0/(0+eps) = 0).",
    ),
    (
        "epsilon_05_mean_std_norm",
        "plain",
        {"mode": "mean_std_norm", "epsilon": 0.5},
        "epsilon 0.5 (added to the ddof-1 std in both levels) with mean_std_norm.",
    ),
    (
        "shared_state_across_groups",
        "cross",
        {"mode": "mean_std_norm"},
        (
            "the same state string in two episode groups: verl-agent builds anchor groups inside each episode "
            "group only, so they stay apart."
        ),
    ),
    (
        "exact_grouping_on_text",
        "sim",
        {"mode": "mean_std_norm", "gamma": 0.95},
        "text observations, exact grouping (enable_similarity False): near-duplicates are separate groups.",
    ),
    (
        "similarity_095",
        "sim",
        {
            "mode": "mean_std_norm",
            "gamma": 0.95,
            "enable_similarity": True,
            "similarity_thresh": 0.95,
        },
        (
            "similarity grouping at the default threshold 0.95: observations differing in one character "
            "(SequenceMatcher ratio 0.987) join, a reworded one (0.85) does not."
        ),
    ),
    (
        "similarity_080_order_abc",
        "chain_abc",
        {"enable_similarity": True, "similarity_thresh": 0.8},
        (
            "threshold 0.8, chain A~B (0.88), B~C (0.82), A!~C (0.71): in batch order A,B,C the clusters are "
            "{A,B},{C} (a step joins the first cluster whose representative = first member matches)."
        ),
    ),
    (
        "similarity_080_order_cba",
        "chain_cba",
        {"enable_similarity": True, "similarity_thresh": 0.8},
        (
            "same rows with trajectories in the order C,B,A: clusters {C,B},{A} -- the grouping depends on "
            "batch order."
        ),
    ),
]
VA_EP_CASES = [
    (
        "cross_steps_mean_std",
        "plain",
        {"epsilon": 1e-6, "remove_std": False, "compute_mean_std_cross_steps": True},
        (
            "the default used by compute_gigpo_outcome_advantage: mean/std over every STEP row of the group "
            "(a trajectory of k steps counts k times), mean_std_norm."
        ),
    ),
    (
        "per_trajectory_mean_std",
        "plain",
        {"epsilon": 1e-6, "remove_std": False, "compute_mean_std_cross_steps": False},
        (
            "compute_mean_std_cross_steps False: one score per (uid, traj_uid), the first row of each "
            "trajectory in batch order."
        ),
    ),
    (
        "cross_steps_mean_edge",
        "edge",
        {"epsilon": 1e-6, "remove_std": True, "compute_mean_std_cross_steps": True},
        "mean only, over step rows, on the edge groups.",
    ),
    (
        "per_trajectory_mean_edge",
        "edge",
        {"epsilon": 1e-6, "remove_std": True, "compute_mean_std_cross_steps": False},
        (
            "mean only, over trajectories, on the edge groups (the 3-step singleton group now has one score: "
            "mean 0, A^E = R)."
        ),
    ),
]
TG_DEFAULT = {"omega": 1.0, "gamma": 1.0, "fnorm": "none", "epsilon": 1e-6}
TG_CASES = [
    (
        "defaults",
        "plain",
        {},
        "Trinity GiGPO defaults (default_args / GiGPOAlgorithm: omega 1, gamma 1, fnorm none, epsilon 1e-6).",
    ),
    ("std_gamma095", "plain", {"fnorm": "std", "gamma": 0.95}, "fnorm std, gamma 0.95."),
    (
        "edge_defaults_masked",
        "edge_masked",
        {},
        (
            "edge groups (singleton 3-step and 1-step groups: A^E = R/(1+eps); zero-variance group; repeated "
            "state; singleton anchors get A^S = 0), with some action-mask zeros."
        ),
    ),
    (
        "edge_std_omega05_gamma09",
        "edge",
        {"fnorm": "std", "omega": 0.5, "gamma": 0.9},
        "fnorm std, omega 0.5, gamma 0.9 on the edge groups.",
    ),
    ("epsilon_05_std", "plain", {"fnorm": "std", "epsilon": 0.5}, "epsilon 0.5 with fnorm std."),
    (
        "shared_state_across_groups",
        "cross",
        {"fnorm": "std"},
        (
            "the same state string in two episode groups: Trinity buckets anchors over the whole batch, so "
            "they are pooled across groups."
        ),
    ),
    (
        "text_states_exact_hash",
        "sim",
        {"fnorm": "std", "gamma": 0.95},
        "text observations: Trinity has no similarity grouping (exact string of env_state_hash).",
    ),
    (
        "sparse_fallback",
        "plain_sparse",
        {"gamma": 0.95},
        (
            "no step_reward in info: r_t = 0 except the last step, which takes exp.reward (the outcome); "
            "rows carry no step_reward."
        ),
    ),
]
TS_DEFAULT = {
    "epsilon": 1e-6,
    "enable_step_norm": False,
    "std_cal_level": "group",
    "std_threshold": None,
}
TS_CASES = [
    (
        "defaults",
        "plain",
        {},
        (
            "defaults (epsilon 1e-6, enable_step_norm False, std_cal_level group, "
            "std_threshold None): (R_last - mean)/(std+eps) over the last steps of the runs, on every step."
        ),
    ),
    (
        "step_norm",
        "plain",
        {"enable_step_norm": True},
        "enable_step_norm: divided by the run's step count.",
    ),
    (
        "batch_std",
        "plain",
        {"std_cal_level": "batch"},
        "std_cal_level batch: mean per task group, std over the last-step rewards of the whole batch.",
    ),
    (
        "edge_defaults",
        "edge",
        {},
        "edge groups: singleton groups (mean 0, std 1: R/(1+eps)), zero-variance group (0).",
    ),
    (
        "edge_std_threshold_0",
        "edge",
        {"std_threshold": 0.0},
        "std_threshold 0: singleton and zero-std groups are skipped (dropped from the output: null).",
    ),
    (
        "std_threshold_1",
        "plain",
        {"std_threshold": 1.0, "enable_step_norm": True},
        "std_threshold 1.0: group p1 (std 0.67) is skipped, p0 (std 1.19) kept; with step norm.",
    ),
    ("epsilon_05_masked", "edge_masked", {"epsilon": 0.5}, "epsilon 0.5; some action-mask zeros."),
]


def case_rows(name):
    if name == "plain_sparse":
        rows = [dict(r) for r in ROWSETS["plain"]]
        for r in rows:
            del r["step_reward"]
        return rows
    return [dict(r) for r in ROWSETS[name]]


def write(out_dir, fname, obj):
    with open(os.path.join(out_dir, fname), "w") as f:
        json.dump(obj, f, indent=1, sort_keys=False)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--verl-agent-src", default=os.environ.get("VERL_AGENT_SRC"))
    ap.add_argument("--trinity-src", default=os.environ.get("TRINITY_SRC"))
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    a = ap.parse_args()
    if not a.verl_agent_src or not a.trinity_src:
        sys.exit("need --verl-agent-src and --trinity-src (or VERL_AGENT_SRC / TRINITY_SRC)")
    torch.manual_seed(0)
    va = load_verl_agent(a.verl_agent_src)
    tr = load_trinity(a.trinity_src)

    cases = []
    for name, rs, over, about in VA_CASES:
        params = dict(VA_DEFAULT, **over)
        rows = case_rows(rs)
        exp, trace = run_verl_gigpo(va, rows, params)
        cases.append(
            {
                "name": name,
                "about": about,
                "params": params,
                "rows": rows,
                "expected": exp,
                "trace": trace,
            }
        )
    write(
        a.out,
        "compute_gigpo_outcome_advantage.json",
        {
            "made_by": MADE_BY,
            "repo": VA_REPO,
            "commit": VA_COMMIT,
            "path": "gigpo/core_gigpo.py",
            "function": "compute_gigpo_outcome_advantage",
            "about": (
                "verl-agent GiGPO. Inputs built by the trainer's own steps (compute_step_discounted_returns "
                "-> step_rewards, EpisodeRewardManager -> episode reward on the last token of every step row, "
                "apply_invalid_action_penalty with all actions valid). A = A^E + step_advantage_w * A^S per "
                "step row, broadcast over response_mask. A^E: score = sum of the row's token_level_rewards "
                "(= the trajectory's summed step rewards); mean (and ddof-1 std for mean_std_norm) over all "
                "STEP rows of the episode group (uid); a group with a single row: mean 0, std 1. A^S: the "
                "discounted return of the step, normalised within anchor groups built per episode group "
                "(exact anchor_obs, or SequenceMatcher ratio >= similarity_thresh against each cluster's "
                "first member, first match wins); a singleton anchor group: mean = itself, std 1 -> 0. "
                "(x - mean)/(std + epsilon) for mean_std_norm, x - mean for mean_norm. Defaults "
                "(ppo_trainer.yaml): gamma 1.0, mode mean_norm, step_advantage_w 1.0, enable_similarity "
                "False, similarity_thresh 0.95; epsilon 1e-6 (not configurable). 'trace' holds the "
                "discounted step returns, the per-row episode score and the anchor groups (relabelled)."
            ),
            "cases": cases,
        },
    )

    cases = []
    for name, rs, params, about in VA_EP_CASES:
        rows = case_rows(rs)
        exp, trace = run_verl_episode_norm(va, rows, params)
        cases.append(
            {
                "name": name,
                "about": about,
                "params": params,
                "rows": rows,
                "expected": exp,
                "trace": trace,
            }
        )
    write(
        a.out,
        "episode_norm_reward.json",
        {
            "made_by": MADE_BY,
            "repo": VA_REPO,
            "commit": VA_COMMIT,
            "path": "gigpo/core_gigpo.py",
            "function": "episode_norm_reward",
            "about": (
                "verl-agent GiGPO's episode-level part alone (A^E), to show compute_mean_std_cross_steps, "
                "which compute_gigpo_outcome_advantage never passes (so training always uses True: group "
                "statistics over step rows). False: one score per (uid, traj_uid). remove_std True = "
                "mode mean_norm. Inputs from the same trainer steps as compute_gigpo_outcome_advantage.json."
            ),
            "cases": cases,
        },
    )

    cases = []
    for name, rs, over, about in TG_CASES:
        params = dict(TG_DEFAULT, **over)
        rows = case_rows(rs)
        exp, trace = run_trinity(tr, "gigpo", rows, params)
        cases.append(
            {
                "name": name,
                "about": about,
                "params": params,
                "rows": rows,
                "expected": exp,
                "trace": trace,
            }
        )
    write(
        a.out,
        "GiGPOAdvantageFn.json",
        {
            "made_by": MADE_BY,
            "repo": TR_REPO,
            "commit": TR_GIGPO_COMMIT,
            "ran_from": TR_RELEASE + "; its gigpo_advantage.py is code-identical to this commit "
            "(docstrings differ) and text-identical to pan-x-c/Trinity-RFT@bf07e640f39fc399e1fd5a8afdc1b19089292a35",
            "path": "trinity/algorithm/advantage_fn/gigpo_advantage.py",
            "function": "GiGPOAdvantageFn.process",
            "about": (
                "Trinity-RFT GiGPO (advantage_fn 'gigpo'). Experiences: eid.task = prompt_id, eid.run = "
                "rollout_id, eid.step = segment_index, info.step_reward = step_reward, info.env_state_hash = "
                "state, reward = outcome, action_mask over the response tokens. A^E: per task, one return per "
                "run R = sum of the run's step rewards (sorted by eid.step), (R - mean)/(denom + epsilon) "
                "over runs, denom = ddof-1 std (fnorm std) or 1 (fnorm none), a single run: mean 0, denom 1. "
                "A^S: discounted return R_t, bucketed by exact str(env_state_hash) over the WHOLE batch "
                "(across tasks), same normalisation, buckets of one get 0. A = A^E + omega * A^S, times "
                "action_mask. Defaults: omega 1, gamma 1, fnorm none, epsilon 1e-6. 'trace' holds the "
                "function's numeric metrics."
            ),
            "cases": cases,
        },
    )

    cases = []
    for name, rs, over, about in TS_CASES:
        params = dict(TS_DEFAULT, **over)
        rows = case_rows(rs)
        exp, trace = run_trinity(tr, "step_wise_grpo", rows, params)
        cases.append(
            {
                "name": name,
                "about": about,
                "params": params,
                "rows": rows,
                "expected": exp,
                "trace": trace,
            }
        )
    write(
        a.out,
        "StepWiseGRPOAdvantageFn.json",
        {
            "made_by": MADE_BY,
            "repo": TR_REPO,
            "commit": TR_STEPWISE_COMMIT,
            "ran_from": TR_RELEASE
            + "; its multi_step_grpo_advantage.py equals this commit (v0.5.2) except "
            "the metrics helper (gather_metrics -> aggregate_metrics)",
            "path": "trinity/algorithm/advantage_fn/multi_step_grpo_advantage.py",
            "function": "StepWiseGRPOAdvantageFn.process",
            "about": (
                "Trinity-RFT step-wise GRPO (advantage_fn 'step_wise_grpo', algorithm multi_step_grpo). Per "
                "task, the LAST experience of each run in input order supplies exp.reward; score = (reward - "
                "mean)/(ddof-1 std + epsilon) over those runs (std_cal_level batch: std over all last-step "
                "rewards of the batch); a single run: mean 0, std 1. Every step of the run gets "
                "action_mask * score (divided by the run's number of steps with enable_step_norm). With "
                "std_threshold set, a task with one run or std <= threshold is dropped from the output "
                "(advantage null). Defaults: epsilon 1e-6, enable_step_norm False, std_cal_level group, "
                "std_threshold None. 'trace' holds the function's numeric metrics."
            ),
            "cases": cases,
        },
    )


if __name__ == "__main__":
    main()
