"""ROLL's step_reinforce and agentic_reinforce on multi-turn trajectories, and the same
trajectories as an agent logger writes them: every step row ENDS WITH THE ENVIRONMENT'S REPLY
(observation tokens, action_mask 0) after the action.

Why: in ROLL a step row is the step's prompt + response and nothing after it (the reply to the
action is the NEXT step's prompt; the reply to the last action is dropped), so the step's
scalar, which ROLL puts on the row's last token, lands on the last ACTION token. The same
step written as prompt + response + reply ends on a token that is not an action.

Source
  repository : https://github.com/alibaba/ROLL
  commit     : 8eb27cc2dc34c4d1310b169d9b86d339004d811a (checked as in make_roll.py)
  taken out unchanged with ``ast`` (source text of the method, exec'd in a namespace holding
  the names its module imports; its sha256 is written into every fixture):
    roll/pipeline/agentic/env_manager/step_env_manager.py : StepEnvManager.formulate_rollouts
    roll/pipeline/agentic/env_manager/traj_env_manager.py : TrajEnvManager.formulate_rollouts
    roll/pipeline/agentic/env_manager/base_env_manager.py : RolloutCache
  imported unchanged from the source tree (as make_roll.py, whose loader this script uses):
    roll/pipeline/agentic/utils.py  : compute_discounted_returns, get_agentic_response_level_mask,
                                      compute_response_level_rewards (agentic_reward_norm),
                                      agentic_compute_advantage (compute_agentic_reinforce_return)
    roll/utils/functionals.py       : pad_to_length, aggregate_metrics, compute_token_reward
                                      (expand_to_token_level), compute_reinforce_return, masked_whiten
    roll/distributed/scheduler/protocol.py : DataProto (concat, group_by, reorder)
  What the script plays itself, as ROLL's callers do: the env manager's rollout cache (history:
  one entry per step with prompt_ids, response_ids, reward, state_hash; a last entry holding
  the reply to the last action, which formulate_rollouts pops), the traj_group_id / traj_id
  strings of TrajEnvManager.run_rollout_loop, DataProto.concat of the trajectories (the
  scheduler's get_batch), old/ref log-probs of zeros (KL 0), then AgenticPipeline.run() PHASE
  10-13 in its order. adjust_batch (random padding duplicates) is not run.

Fixtures (tests/fixtures/refs/roll/, the format of make_roll.py's; rows are advcli's columns)
  step_reinforce_obs_tail.json      StepEnvManager rows, adv_estimator=step_reinforce
  agentic_reinforce_obs_tail.json   TrajEnvManager rows (one row per trajectory),
                                    adv_estimator=agentic_reinforce; advcli's rows are the
                                    trajectory's steps (segments), as advcli's agentic-reinforce
                                    reads a trajectory split into steps
  Each case: ``rows`` = the advcli log (prompt_id = ROLL's traj_group_id, rollout_id = traj_id,
  segment_index = ROLL's ``step``, step_reward = step_scores, reward = episode_scores,
  token_ids = prompt + response + reply, action_mask = 0 on prompt and reply, 1 on response);
  ``expected`` per row: ``advantage`` (ROLL's response_level_rewards of the row, or of its
  trajectory) and ``advantages`` per token of the advcli row: ROLL's on the prompt and response
  tokens, 0.0 on the reply (advcli writes 0 on non-action tokens; ROLL has no such token);
  ``roll``: ROLL's own rows (token ids, response_mask, the position expand_to_token_level put
  the scalar on, ROLL's per-token advantages) and ``layout``: which advcli rows end with a reply.

Venv: the one of make_roll.py (Python 3.11; torch 2.13.0+cpu, numpy 1.26.4, tensordict 0.15.3,
codetiming 1.4.0, omegaconf 2.4.0). Run
  ROLL_COMMIT=<commit> VENV/bin/python make_roll_obs_tail.py --src SRC [--out DIR]
Deterministic: the trajectories come from random.Random(SEED); ROLL's functions use no
randomness on this path. ``tests/methods/test_steps.py`` compares advcli with them.
"""

import argparse
import ast
import hashlib
import json
import os
import random
import subprocess
import sys
import textwrap
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_roll  # noqa: E402  (its loader, config and float helpers)

EXPECTED_COMMIT = make_roll.EXPECTED_COMMIT
REPO = make_roll.REPO
SEED = 20260519
SEQUENCE_LENGTH = 40  # pipeline_config.sequence_length: formulate_rollouts pads to it

ENV_MANAGERS = "roll/pipeline/agentic/env_manager/"
TAKEN = {
    "StepEnvManager.formulate_rollouts": (
        ENV_MANAGERS + "step_env_manager.py",
        "StepEnvManager",
        "formulate_rollouts",
    ),
    "TrajEnvManager.formulate_rollouts": (
        ENV_MANAGERS + "traj_env_manager.py",
        "TrajEnvManager",
        "formulate_rollouts",
    ),
    "RolloutCache": (ENV_MANAGERS + "base_env_manager.py", None, "RolloutCache"),
}


# ----------------------------------------------------------------------------- ROLL's code
def take(src, path, cls, name):
    """The source text of ``cls.name`` (or of the top-level ``name``) in ``path``, unchanged."""
    with open(os.path.join(src, path), encoding="utf-8") as fh:
        text = fh.read()
    tree = ast.parse(text)
    scope = tree.body
    if cls is not None:
        scope = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    node = next(
        n for n in scope if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name
    )
    start = node.decorator_list[0].lineno if getattr(node, "decorator_list", None) else node.lineno
    lines = text.splitlines(keepends=True)[start - 1 : node.end_lineno]
    return textwrap.dedent("".join(lines))


def load_env_managers(R, src):
    """ROLL's formulate_rollouts of both env managers, and RolloutCache, exec'd unchanged with the
    names their modules import (the modules themselves pull in gem, ray actors, transformers)."""
    import copy
    import typing
    from dataclasses import dataclass, field

    from roll.utils.functionals import aggregate_metrics, pad_to_length

    ns = {
        "copy": copy,
        "np": R.np,
        "torch": R.torch,
        "TensorDict": R.TensorDict,
        "DataProto": R.DataProto,
        "pad_to_length": pad_to_length,
        "aggregate_metrics": aggregate_metrics,
        "List": typing.List,  # noqa: UP006 (what ROLL's modules import)
        "Dict": typing.Dict,  # noqa: UP006
        "dataclass": dataclass,
        "field": field,
    }
    out, provenance = {}, {}
    for key in (
        "RolloutCache",
        "StepEnvManager.formulate_rollouts",
        "TrajEnvManager.formulate_rollouts",
    ):
        path, cls, name = TAKEN[key]
        code = take(src, path, cls, name)
        scope = dict(ns)
        exec(compile(code, f"{path}:{key}", "exec"), scope)
        out[key] = scope[name]
        if key == "RolloutCache":
            ns["RolloutCache"] = scope[name]
        provenance[key] = {"path": path, "sha256": hashlib.sha256(code.encode()).hexdigest()}
    return out, provenance


# ----------------------------------------------------------------------------- trajectories
TAG = "env"


def make_trajectories():
    """3 prompts (ROLL groups) x 4 trajectories, 2-5 steps each. Per step: prompt (template +
    the previous reply), response (the action) and reply (the environment's answer) token ids,
    and the env's reward. Reward styles per group: dense, sparse terminal, penalty + bonus."""
    rng = random.Random(SEED)
    trajs = []
    next_id = 1000
    for g in range(3):
        for j in range(4):
            n = rng.randint(2, 5)
            steps, prev_reply = [], None
            for k in range(n):
                template = [10 + g, 20 + k]
                if prev_reply is None:
                    prompt = template + list(range(next_id, next_id + rng.randint(1, 2)))
                    next_id += 10
                else:
                    prompt = template + prev_reply
                response = list(range(next_id, next_id + rng.randint(1, 4)))
                next_id += 10
                reply = list(range(next_id, next_id + rng.randint(1, 3)))
                next_id += 10
                if g == 0:
                    r = rng.choice([-0.5, 0.0, 0.25, 0.5, 1.0])
                elif g == 1:
                    r = float(rng.random() < 0.6) if k == n - 1 else 0.0
                else:
                    r = -0.1 + (rng.choice([0.0, 1.0, 2.0]) if k == n - 1 else 0.0)
                steps.append(
                    {"prompt": prompt, "response": response, "reply": reply, "reward": round(r, 6)}
                )
                prev_reply = reply
            env_id = 4 * g + j
            traj_group_id = f"{TAG}_{g}_0_0"  # f"{tag}_{group_id}_{episode_id}_{group_seed}"
            trajs.append(
                {
                    "group_id": g,
                    "env_id": env_id,
                    "traj_group_id": traj_group_id,
                    "traj_id": f"{traj_group_id}_{env_id}",
                    "steps": steps,
                }
            )
    return trajs


def ends_with_reply(layout, t_index, k, n):
    """Whether the advcli row of step k (of n) of trajectory t_index ends with the reply."""
    if layout == "obs_tail":
        return True
    # mixed: the last step of even trajectories and every third step end with the action
    return not ((k == n - 1 and t_index % 2 == 0) or (k + t_index) % 3 == 0)


def rollout_cache(EM, traj):
    """The env manager's cache at the end of an episode: one entry per step (the observation it
    saw, its prompt and response ids, the env's reward), then the entry made for the reply to the
    last action, which formulate_rollouts pops."""
    cache = EM["RolloutCache"](env_id=traj["env_id"], group_id=traj["group_id"], tag=TAG)
    for k, s in enumerate(traj["steps"]):
        cache.history.append(
            {
                "observation": f"obs {k}",
                "actions_left": len(traj["steps"]) - k,
                "messages": [],
                "prompt_ids": list(s["prompt"]),
                "response_ids": list(s["response"]),
                "reward": s["reward"],
                "llm_response": f"action {k}",
                "state_hash": f"{traj['traj_id']}/{k}",
                "metrics": {"action_is_valid": True},
            }
        )
    cache.history.append(
        {
            "observation": f"reply to action {len(traj['steps']) - 1}",
            "actions_left": 0,
            "messages": None,
        }
    )
    cache.step = len(traj["steps"])
    cache.terminated = True
    return cache


def formulate(R, EM, trajs, layout):
    """ROLL's batch: each trajectory through the env manager's formulate_rollouts, the ids that
    run_rollout_loop adds, and DataProto.concat (the scheduler's get_batch)."""
    method = EM[
        "StepEnvManager.formulate_rollouts"
        if layout == "step"
        else "TrajEnvManager.formulate_rollouts"
    ]
    parts = []
    for traj in trajs:
        cache = rollout_cache(EM, traj)
        manager = types.SimpleNamespace(
            rollout_cache=cache,
            pipeline_config=types.SimpleNamespace(sequence_length=SEQUENCE_LENGTH),
            tokenizer=types.SimpleNamespace(pad_token_id=0),
        )
        rollout = method(manager, cache)
        n = rollout.batch.batch_size[0]
        rollout.non_tensor_batch["traj_group_id"] = R.np.array(
            [traj["traj_group_id"]] * n, dtype=object
        )
        rollout.non_tensor_batch["traj_id"] = R.np.array([traj["traj_id"]] * n, dtype=object)
        parts.append(rollout)
    return R.DataProto.concat(parts)


def run_phases(R, batch, cfg):
    """AgenticPipeline.run() PHASE 10-13 (agentic_pipeline.py), KL 0."""
    torch = R.torch
    batch = R.U.compute_discounted_returns(batch, cfg.adv_estimator, cfg.step_reward_gamma)
    batch.batch["old_log_probs"] = torch.zeros_like(
        batch.batch["attention_mask"][:, 1:], dtype=torch.float
    )
    batch.batch["ref_log_probs"] = batch.batch["old_log_probs"].clone()
    kl_ctrl = R.get_kl_controller(
        init_kl_coef=cfg.init_kl_coef, target_kl=cfg.target_kl, kl_horizon=cfg.kl_horizon
    )
    batch, _ = R.U.get_agentic_response_level_mask(batch, cfg)
    batch, _ = R.U.compute_response_level_rewards(batch=batch, pipeline_config=cfg)
    batch, _ = R.F.compute_token_reward(batch, cfg, kl_ctrl)
    return R.U.agentic_compute_advantage(
        data=batch,
        gamma=cfg.gamma,
        lambd=cfg.lambd,
        adv_estimator=cfg.adv_estimator,
        advantage_clip=cfg.advantage_clip,
        whiten_advantages=cfg.whiten_advantages,
        whiten_rewards=cfg.whiten_rewards,
        pipeline_config=cfg,
    )


def roll_row(R, batch, i):
    """ROLL's row i: its tokens, response mask, where expand_to_token_level put the scalar, and
    the per-token advantages (token p's is advantages[p - 1]: the tensors are shifted by one)."""
    attn = batch.batch["attention_mask"][i]
    m = int(attn.sum())
    pos = batch.batch["position_ids"][i]
    eos = int(R.torch.argmax(pos * attn, dim=-1))  # expand_to_token_level's eos_mask_idx
    resp = [int(x) for x in batch.batch["response_mask"][i, :m].tolist()]
    adv = batch.batch["advantages"][i]
    tlr = batch.batch["token_level_rewards"][i]
    return {
        "token_ids": [int(x) for x in batch.batch["input_ids"][i, :m].tolist()],
        "response_mask": resp,
        "scalar_position": eos,
        "scalar_position_is_response": bool(resp[eos]),
        "last_response_position": max(p for p, x in enumerate(resp) if x),
        "token_level_rewards": [0.0] + make_roll.f32list(tlr[: m - 1]),
        "advantages": [0.0] + make_roll.f32list(adv[: m - 1]),
        "response_level_reward": make_roll.f32list(batch.batch["response_level_rewards"][i])[0],
    }


# ----------------------------------------------------------------------------- cases
def advcli_rows(trajs, layout):
    rows = []
    for t_index, traj in enumerate(trajs):
        n = len(traj["steps"])
        episode = round(sum(s["reward"] for s in traj["steps"]), 6)  # formulate_rollouts' own sum
        for k, s in enumerate(traj["steps"]):
            tail = s["reply"] if ends_with_reply(layout, t_index, k, n) else []
            tokens = s["prompt"] + s["response"] + tail
            rows.append(
                {
                    "prompt_id": traj["traj_group_id"],
                    "rollout_id": traj["traj_id"],
                    "segment_index": k,
                    "step_reward": s["reward"],
                    "reward": episode,
                    "token_ids": tokens,
                    "action_mask": [0] * len(s["prompt"])
                    + [1] * len(s["response"])
                    + [0] * len(tail),
                }
            )
    return rows


def run_case(R, EM, trajs, params, roll_layout, layout):
    cfg, eff = make_roll.make_cfg(R, params)
    batch = run_phases(R, formulate(R, EM, trajs, roll_layout), cfg)
    rows = advcli_rows(trajs, layout)
    expected, roll = [], []
    if roll_layout == "step":
        for i, row in enumerate(rows):
            rr = roll_row(R, batch, i)
            m = len(rr["token_ids"])
            assert rr["token_ids"] == row["token_ids"][:m]
            adv = rr["advantages"] + [0.0] * (len(row["token_ids"]) - m)
            expected.append({"advantage": rr["response_level_reward"], "advantages": adv})
            roll.append(rr)
    else:
        i = 0
        for t_index, traj in enumerate(trajs):
            rr = roll_row(R, batch, t_index)
            roll.append(rr)
            start = 0
            for s in traj["steps"]:
                row = rows[i]
                m = len(s["prompt"]) + len(s["response"])
                assert rr["token_ids"][start : start + m] == row["token_ids"][:m]
                adv = rr["advantages"][start : start + m] + [0.0] * (len(row["token_ids"]) - m)
                expected.append({"advantage": rr["response_level_reward"], "advantages": adv})
                start += m
                i += 1
            assert start == len(rr["token_ids"])
    layout_info = {
        "advcli_rows_ending_with_reply": sum(r["action_mask"][-1] == 0 for r in rows),
        "advcli_rows": len(rows),
        "roll_rows": len(roll),
        "roll_rows_scalar_on_response_token": sum(r["scalar_position_is_response"] for r in roll),
        "roll_scalar_on_last_response_token": all(
            r["scalar_position"] == r["last_response_position"] for r in roll
        ),
    }
    return eff, rows, expected, roll, layout_info


def build(R, EM, provenance, commit):
    trajs = make_trajectories()
    files = {}

    def header(function, about, roll_layout):
        return {
            "made_by": "make_roll_obs_tail.py",
            "repo": REPO,
            "commit": commit,
            "path": "roll/pipeline/agentic/utils.py",
            "function": function,
            "env_manager": provenance[
                ("StepEnvManager" if roll_layout == "step" else "TrajEnvManager")
                + ".formulate_rollouts"
            ],
            "taken": provenance,
            "seed": SEED,
            "about": about,
            "cases": [],
        }

    def case(f, name, about, params, roll_layout, layout="obs_tail"):
        eff, rows, exp, roll, info = run_case(R, EM, trajs, params, roll_layout, layout)
        f["cases"].append(
            {
                "name": name,
                "about": about,
                "params": eff,
                "layout": layout,
                "layout_counts": info,
                "rows": rows,
                "expected": exp,
                "roll": roll,
            }
        )

    SR = lambda **kw: dict(adv_estimator="step_reinforce", **kw)
    f = header(
        "StepEnvManager.formulate_rollouts -> compute_discounted_returns -> "
        "compute_response_level_rewards -> compute_token_reward -> agentic_compute_advantage "
        "(adv_estimator='step_reinforce')",
        "ROLL's step rows are prompt + response; the step's scalar (its normalised discounted "
        "return) goes on the row's last token, the last response token. advcli's rows are the "
        "same steps with the environment's reply appended (action_mask 0): expected = ROLL's "
        "advantages on the prompt and response tokens, 0 on the reply.",
        "step",
    )
    case(
        f,
        "defaults",
        "AgenticConfig defaults: step_reward_gamma 0.95, gamma 1, grouping batch, method identity",
        SR(),
        "step",
    )
    case(
        f,
        "group_mean_std",
        "grouping traj_group_id, method mean_std, step_reward_gamma 1",
        SR(
            step_reward_gamma=1.0,
            reward_normalization={"grouping": "traj_group_id", "method": "mean_std"},
        ),
        "step",
    )
    case(
        f,
        "example_rock_swe",
        "examples/agentic_demo/agent_rollout_rock_swe.yaml: grouping "
        "traj_group_id, method mean, step_reward_gamma 1, whiten_advantages, advantage_clip 0.2",
        SR(
            step_reward_gamma=1.0,
            whiten_advantages=True,
            advantage_clip=0.2,
            reward_normalization={"grouping": "traj_group_id", "method": "mean"},
        ),
        "step",
    )
    case(
        f,
        "example_gem_batch_mean_std",
        "examples/qwen3_agentic_gem/gem_rg_letter_counting.yaml: "
        "grouping batch, method mean_std, advantage_clip 20 (step_reward_gamma 0.95)",
        SR(advantage_clip=20.0, reward_normalization={"grouping": "batch", "method": "mean_std"}),
        "step",
    )
    case(
        f,
        "token_gamma_whiten_rewards",
        "step_reward_gamma 0.8, token gamma 0.9 (the advantage "
        "decays from the step's last response token backwards), whiten_rewards, reward_clip 1.0, "
        "grouping traj_group_id, method mean_std",
        SR(
            step_reward_gamma=0.8,
            gamma=0.9,
            whiten_rewards=True,
            reward_clip=1.0,
            reward_normalization={"grouping": "traj_group_id", "method": "mean_std"},
        ),
        "step",
    )
    case(
        f,
        "mixed_layout",
        "as group_mean_std (step_reward_gamma 0.9), but some advcli rows end "
        "with the action (no reply: the last step of even trajectories, every third step)",
        SR(
            step_reward_gamma=0.9,
            reward_normalization={"grouping": "traj_group_id", "method": "mean_std"},
        ),
        "step",
        layout="mixed",
    )
    files["step_reinforce_obs_tail"] = f

    AR = lambda **kw: dict(adv_estimator="agentic_reinforce", **kw)
    f = header(
        "TrajEnvManager.formulate_rollouts -> compute_response_level_rewards -> "
        "compute_token_reward -> agentic_compute_advantage (adv_estimator='agentic_reinforce')",
        "ROLL's row is the whole trajectory: prompt_0 response_0 prompt_1 response_1 ... "
        "response_n (the reply to the last action is popped); the episode score (sum of the "
        "step rewards) normalised goes on its last token, the last token of the last response; "
        "returns are discounted per action segment (turn) with gamma. advcli's rows are the "
        "trajectory's steps, each prompt + response + reply (action_mask 0): expected = ROLL's "
        "advantages on the step's prompt and response tokens, 0 on the reply.",
        "traj",
    )
    case(f, "defaults", "defaults: gamma 1, grouping batch, method identity", AR(), "traj")
    case(
        f,
        "group_mean_std_gamma",
        "grouping traj_group_id, method mean_std, gamma 0.9",
        AR(gamma=0.9, reward_normalization={"grouping": "traj_group_id", "method": "mean_std"}),
        "traj",
    )
    case(
        f,
        "batch_clips_whiten",
        "grouping batch, method mean_std, gamma 0.8, reward_clip 1.0, "
        "whiten_advantages, advantage_clip 1.5",
        AR(
            gamma=0.8,
            reward_clip=1.0,
            whiten_advantages=True,
            advantage_clip=1.5,
            reward_normalization={"grouping": "batch", "method": "mean_std"},
        ),
        "traj",
    )
    case(
        f,
        "mixed_layout",
        "as group_mean_std_gamma, some advcli rows end with the action "
        "(the last step of even trajectories, every third step)",
        AR(gamma=0.9, reward_normalization={"grouping": "traj_group_id", "method": "mean_std"}),
        "traj",
        layout="mixed",
    )
    files["agentic_reinforce_obs_tail"] = f

    return files


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--src", default=os.environ.get("ROLL_SRC"), help="ROLL source tree (or ROLL_SRC)"
    )
    ap.add_argument("--commit", default=os.environ.get("ROLL_COMMIT"), help="commit of --src")
    ap.add_argument(
        "--out",
        default=os.path.join(
            os.path.dirname(os.path.abspath(__file__)),
            "..",
            "..",
            "tests",
            "fixtures",
            "refs",
            "roll",
        ),
    )
    a = ap.parse_args()
    if not a.src:
        ap.error("--src or ROLL_SRC is required")
    commit = a.commit
    try:
        head = subprocess.run(
            ["git", "-C", a.src, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        if commit and commit != head:
            sys.exit(f"--commit {commit} does not match {a.src} HEAD {head}")
        commit = head
    except Exception:
        pass
    if not commit:
        sys.exit("give --commit / ROLL_COMMIT (the source tree is not a git checkout)")
    if commit != EXPECTED_COMMIT:
        print(f"warning: commit {commit} differs from {EXPECTED_COMMIT}", file=sys.stderr)
    R = make_roll.load_roll(a.src)
    EM, provenance = load_env_managers(R, a.src)
    files = build(R, EM, provenance, commit)
    os.makedirs(a.out, exist_ok=True)
    for name, content in files.items():
        p = os.path.normpath(os.path.join(a.out, name + ".json"))
        with open(p, "w") as fh:
            json.dump(content, fh, indent=1)
            fh.write("\n")
        print("wrote", p, len(content["cases"]), "cases")


if __name__ == "__main__":
    main()
