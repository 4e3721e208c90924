"""Reference fixtures for ROLL's agentic per-step credit estimators, computed by ROLL's own code.

Source
  repository : https://github.com/alibaba/ROLL
  commit     : 8eb27cc2dc34c4d1310b169d9b86d339004d811a   (pass it with --commit / ROLL_COMMIT;
               when --src is a git work tree the script reads HEAD itself and checks it matches)
  files      : roll/pipeline/agentic/utils.py   -- compute_discounted_returns, agentic_reward_norm,
                                                   build_state_group, compute_response_level_rewards,
                                                   get_agentic_response_level_mask,
                                                   compute_agentic_reinforce_return,
                                                   agentic_compute_advantage
               roll/utils/functionals.py        -- compute_token_reward, expand_to_token_level,
                                                   compute_reinforce_return, masked_whiten, masked_var
               roll/distributed/scheduler/protocol.py -- DataProto (group_by / concat / reorder)
               roll/pipeline/agentic/agentic_config.py -- AgenticConfig defaults, RewardNormalizationConfig
               roll/utils/kl_controller.py      -- get_kl_controller
  The modules are IMPORTED from the source tree, unchanged (no re-typed copy). The pipeline order
  is the one of AgenticPipeline.run() (roll/pipeline/agentic/agentic_pipeline.py, PHASE 10-13):
    compute_discounted_returns -> [adjust_batch: skipped, it only pads the batch to a multiple of the
    train batch size with random duplicates] -> [log-prob passes: not run, old/ref log-probs set to
    zeros, so KL = 0] -> get_agentic_response_level_mask -> compute_response_level_rewards ->
    compute_token_reward -> agentic_compute_advantage.
  AgenticConfig itself is not instantiated (its __post_init__ builds worker/cluster configs); a
  SimpleNamespace carries the fields the functions read, with defaults read from the AgenticConfig
  dataclass fields, and a real RewardNormalizationConfig (its __post_init__ derives the norm types).

Stubs (modules imported at module level but never used by these functions)
  ray            -- distributed runtime (protocol.py / transfer_backend.py / storage.py import it; the
                    stub gives ray.ObjectRef for annotations, ray.remote as identity decorator, and
                    ray.get/put/get_actor that raise)
  transfer_queue -- optional distributed transport (transfer_backend.py)
  imageio        -- GIF rendering of frames (dump_frames_as_gif)
  requests       -- roll/pipeline/rlvr/utils.py (HTTP helpers, unused)
  ROLL's logger writes a log file; ROLL_LOG_DIR is pointed at a temporary directory.

Venv (Python 3.11)
  python3 -m venv VENV
  VENV/bin/pip install "torch==2.13.0+cpu" "numpy<2.0a0,>=1.25" "tensordict>=0.10.0" \
      codetiming omegaconf          # resolved: torch 2.13.0+cpu, numpy 1.26.4, tensordict 0.15.3,
                                    #           codetiming 1.4.0, omegaconf 2.4.0
Source tree
  git clone https://github.com/alibaba/ROLL SRC && git -C SRC checkout <commit>
  (or: git archive <commit> roll | tar x -C SRC)
Run
  ROLL_COMMIT=<commit> VENV/bin/python make_roll.py --src SRC [--out DIR]
  (--src may also be given as ROLL_SRC; --out defaults to this script's directory)
Deterministic: no randomness is involved (adjust_batch, the only random step, is not run).
"""

import argparse
import atexit
import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import types

EXPECTED_COMMIT = "8eb27cc2dc34c4d1310b169d9b86d339004d811a"
REPO = "https://github.com/alibaba/ROLL"


# ----------------------------------------------------------------------------- stubs / import
def install_stubs():
    ray = types.ModuleType("ray")

    class ObjectRef:  # used only in type annotations
        pass

    def remote(*args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return lambda c: c

    def _unavailable(*a, **k):
        raise RuntimeError("ray stub: the distributed runtime is not available here")

    ray.ObjectRef = ObjectRef
    ray.remote = remote
    ray.get = ray.put = ray.get_actor = _unavailable
    sys.modules["ray"] = ray
    for name in ("transfer_queue", "imageio", "requests"):
        sys.modules[name] = types.ModuleType(name)


def load_roll(src):
    log_dir = tempfile.mkdtemp(prefix="roll_logs_")
    os.environ["ROLL_LOG_DIR"] = log_dir
    atexit.register(shutil.rmtree, log_dir, True)
    install_stubs()
    sys.path.insert(0, os.path.abspath(src))
    import logging

    import numpy as np
    import roll.pipeline.agentic.utils as U
    import roll.utils.functionals as F
    import torch
    from roll.distributed.scheduler.protocol import DataProto
    from roll.pipeline.agentic.agentic_config import AgenticConfig, RewardNormalizationConfig
    from roll.utils.kl_controller import get_kl_controller
    from tensordict import TensorDict

    logging.getLogger().setLevel(logging.ERROR)
    for h in list(logging.getLogger().handlers):
        h.setLevel(logging.ERROR)
    try:
        from roll.utils.logging import get_logger

        lg = get_logger()
        lg.setLevel(logging.ERROR)
    except Exception:
        pass
    return types.SimpleNamespace(
        np=np,
        torch=torch,
        TensorDict=TensorDict,
        U=U,
        F=F,
        DataProto=DataProto,
        AgenticConfig=AgenticConfig,
        RNC=RewardNormalizationConfig,
        get_kl_controller=get_kl_controller,
    )


# ----------------------------------------------------------------------------- config
CFG_KEYS = [
    "adv_estimator",
    "gamma",
    "lambd",
    "step_reward_gamma",
    "reward_clip",
    "advantage_clip",
    "whiten_advantages",
    "whiten_rewards",
    "episode_reward_weight",
    "step_reward_weight",
    "kl_penalty",
    "add_token_level_kl",
    "init_kl_coef",
    "target_kl",
    "kl_horizon",
]


def config_defaults(R):
    d = {}
    for f in dataclasses.fields(R.AgenticConfig):
        if f.name in CFG_KEYS:
            d[f.name] = f.default
    return d


def make_cfg(R, params):
    """params: authors' names; 'reward_normalization' is a dict of RewardNormalizationConfig fields."""
    d = config_defaults(R)
    rn = dict(params.get("reward_normalization", {}))
    for k, v in params.items():
        if k != "reward_normalization":
            assert k in d, k
            d[k] = v
    rnc = R.RNC(**rn)
    cfg = types.SimpleNamespace(
        **d,
        reward_normalization=rnc,
        is_pure_opd=False,
        use_opd=False,
        reference_configs={"default": None},
        enable_old_logprobs_recompute=True,
        max_len_mask=False,
    )
    eff = {k: d[k] for k in CFG_KEYS}
    eff["reward_normalization"] = {f.name: getattr(rnc, f.name) for f in dataclasses.fields(rnc)}
    return cfg, eff


# ----------------------------------------------------------------------------- batches
PROMPT = [11, 12]  # every step row: two prompt (observation) tokens, then the row's response tokens


def f32list(t):
    out = [float(x) for x in t.reshape(-1).tolist()]
    for x in out:
        if math.isnan(x) or math.isinf(x):
            raise ValueError("non-finite value in output")
    return out


def step_batch(R, rows, pad=1):
    """Per-step rows -> DataProto laid out like StepEnvManager.formulate_rollouts."""
    torch, np = R.torch, R.np
    rows = [
        dict({"token_ids": [7], "state": "", "reward": 0.0, "prompt_id": "g"}, **r) for r in rows
    ]  # unused fields
    for r in rows:
        r.setdefault("action_mask", [1] * len(r["token_ids"]))
    L = max(len(PROMPT) + len(r["token_ids"]) for r in rows) + pad
    n = len(rows)
    input_ids = torch.zeros(n, L, dtype=torch.long)
    attn = torch.zeros(n, L, dtype=torch.long)
    resp = torch.zeros(n, L, dtype=torch.bool)
    pmask = torch.zeros(n, L, dtype=torch.bool)
    scores = torch.zeros(n, L, dtype=torch.float)
    for i, r in enumerate(rows):
        toks = PROMPT + list(r["token_ids"])
        m = len(toks)
        input_ids[i, :m] = torch.tensor(toks)
        attn[i, :m] = 1
        resp[i, len(PROMPT) : m] = torch.tensor([bool(a) for a in r["action_mask"]])
        pmask[i, : len(PROMPT)] = True
        scores[i, m - 1] = r["step_reward"]
    pos = attn.cumsum(-1) - 1
    pos = pos * attn  # pad positions 0, as pad_to_length(position_ids, pad_value=0)
    td = R.TensorDict(
        {
            "input_ids": input_ids,
            "attention_mask": attn,
            "position_ids": pos,
            "response_mask": resp,
            "prompt_mask": pmask,
            "scores": scores,
            "old_log_probs": torch.zeros(n, L - 1),
            "ref_log_probs": torch.zeros(n, L - 1),
        },
        batch_size=n,
    )
    obj = lambda xs: np.array(xs, dtype=object)
    ntb = {
        "traj_group_id": obj([r["prompt_id"] for r in rows]),
        "traj_id": obj([r["rollout_id"] for r in rows]),
        "step": obj([int(r["segment_index"]) for r in rows]),
        "step_scores": obj([float(r["step_reward"]) for r in rows]),
        "episode_scores": obj([float(r["reward"]) for r in rows]),
        "state_hash": obj([r["state"] for r in rows]),
        "tags": obj(["env"] * n),
    }
    return R.DataProto(batch=td, non_tensor_batch=ntb, meta_info={}), len(PROMPT)


def traj_batch(R, rows, pad=1):
    """Whole-trajectory rows (TrajEnvManager layout): full sequence = [BOS] + row tokens, so the
    shifted tensors ([:, 1:]) line up exactly with the row's tokens."""
    torch, np = R.torch, R.np
    L = max(1 + len(r["token_ids"]) for r in rows) + pad
    n = len(rows)
    input_ids = torch.zeros(n, L, dtype=torch.long)
    attn = torch.zeros(n, L, dtype=torch.long)
    resp = torch.zeros(n, L, dtype=torch.bool)
    scores = torch.zeros(n, L, dtype=torch.float)
    tlr = torch.zeros(n, L - 1, dtype=torch.float)
    for i, r in enumerate(rows):
        toks = [1] + list(r["token_ids"])
        m = len(toks)
        input_ids[i, :m] = torch.tensor(toks)
        attn[i, :m] = 1
        resp[i, 1:m] = torch.tensor([bool(a) for a in r["action_mask"]])
        if "reward" in r:
            scores[i, m - 1] = r["reward"]
        if "token_rewards" in r:
            tlr[i, : m - 1] = torch.tensor(r["token_rewards"], dtype=torch.float)
    pos = (attn.cumsum(-1) - 1) * attn
    td = {
        "input_ids": input_ids,
        "attention_mask": attn,
        "position_ids": pos,
        "response_mask": resp,
        "scores": scores,
        "old_log_probs": torch.zeros(n, L - 1),
        "ref_log_probs": torch.zeros(n, L - 1),
    }
    if any("token_rewards" in r for r in rows):
        td["token_level_rewards"] = tlr
    obj = lambda xs: np.array(xs, dtype=object)
    ntb = {
        "traj_group_id": obj([r.get("prompt_id", "g") for r in rows]),
        "traj_id": obj([r.get("rollout_id", str(i)) for i, r in enumerate(rows)]),
        "tags": obj(["env"] * n),
    }
    if any("reward" in r for r in rows):
        ntb["episode_scores"] = obj([float(r["reward"]) for r in rows])
    return R.DataProto(batch=R.TensorDict(td, batch_size=n), non_tensor_batch=ntb, meta_info={}), 1


# ----------------------------------------------------------------------------- runners
def run_pipeline(R, rows, params, layout):
    """AgenticPipeline PHASE 10-13 on a batch; returns (effective params, per-row expected)."""
    cfg, eff = make_cfg(R, params)
    batch, off = (step_batch if layout == "step" else traj_batch)(R, rows)
    kl_ctrl = R.get_kl_controller(
        init_kl_coef=cfg.init_kl_coef, target_kl=cfg.target_kl, kl_horizon=cfg.kl_horizon
    )
    batch = R.U.compute_discounted_returns(batch, cfg.adv_estimator, cfg.step_reward_gamma)
    batch, _ = R.U.get_agentic_response_level_mask(batch, cfg)
    batch, _ = R.U.compute_response_level_rewards(batch=batch, pipeline_config=cfg)
    batch, _ = R.F.compute_token_reward(batch, cfg, kl_ctrl)
    batch = R.U.agentic_compute_advantage(
        data=batch,
        gamma=cfg.gamma,
        lambd=cfg.lambd,
        adv_estimator=cfg.adv_estimator,
        advantage_clip=cfg.advantage_clip,
        whiten_advantages=cfg.whiten_advantages,
        whiten_rewards=cfg.whiten_rewards,
        pipeline_config=cfg,
    )
    rl = batch.batch["response_level_rewards"]
    adv = batch.batch["advantages"]
    exp = []
    for i, r in enumerate(rows):
        n_tok = len(r["token_ids"])
        # shifted index of full-sequence position p is p-1; row token k sits at p = off + k
        exp.append(
            {
                "advantage": f32list(rl[i])[0],
                "advantages": f32list(adv[i, off - 1 : off - 1 + n_tok]),
            }
        )
    return eff, exp


def run_discounted(R, rows, params):
    batch, _ = step_batch(R, rows)
    gamma = params.get("gamma", 1.0)
    out = R.U.compute_discounted_returns(batch, params["adv_estimator"], gamma)
    has = "step_rewards" in out.batch.keys()  # noqa: SIM118 (a TensorDict: keys() is its API)
    exp = [
        {
            "advantage": (f32list(out.batch["step_rewards"][i])[0] if has else None),
            "advantages": None,
        }
        for i in range(len(rows))
    ]
    return {"adv_estimator": params["adv_estimator"], "gamma": gamma}, exp


def run_agentic_direct(R, rows, params):
    """agentic_compute_advantage(adv_estimator='agentic_reinforce') with the rows' token rewards as
    data.batch['token_level_rewards'] (i.e. what compute_token_reward would have left there)."""
    d = config_defaults(R)
    p = {
        "gamma": d["gamma"],
        "lambd": d["lambd"],
        "advantage_clip": d["advantage_clip"],
        "whiten_advantages": d["whiten_advantages"],
        "whiten_rewards": d["whiten_rewards"],
    }
    p.update(params)
    batch, off = traj_batch(R, rows)
    out = R.U.agentic_compute_advantage(
        data=batch,
        gamma=p["gamma"],
        lambd=p["lambd"],
        adv_estimator="agentic_reinforce",
        advantage_clip=p["advantage_clip"],
        whiten_advantages=p["whiten_advantages"],
        whiten_rewards=p["whiten_rewards"],
        response_mask=None,
        pipeline_config=None,
    )
    adv = out.batch["advantages"]
    exp = [
        {"advantage": None, "advantages": f32list(adv[i, : len(r["token_ids"])])}
        for i, r in enumerate(rows)
    ]
    return dict(adv_estimator="agentic_reinforce", **p), exp


# ----------------------------------------------------------------------------- data
def step_row(g, t, k, s, rew, toks, outcome=None):
    return {
        "prompt_id": g,
        "rollout_id": t,
        "segment_index": k,
        "state": s,
        "step_reward": rew,
        "reward": outcome,
        "token_ids": toks,
        "action_mask": [1] * len(toks),
    }


def trajs_to_rows(trajs):
    """trajs: list of (group, traj_id, [(state, step_reward, tokens)], outcome-or-None).
    outcome None -> ROLL's own definition: episode_scores = sum of the step rewards (env managers)."""
    rows = []
    for g, t, steps, outcome in trajs:
        ep = outcome if outcome is not None else round(float(sum(s[1] for s in steps)), 10)
        for k, (s, rew, toks) in enumerate(steps):
            rows.append(step_row(g, t, k, s, rew, toks, ep))
    return rows


# two groups, unequal lengths, repeated state inside t2, shared first state inside each group,
# a one-step trajectory (t3), negative and fractional rewards
DATA_A = [
    (
        "g0",
        "g0_t0",
        [("sA", 0.0, [101, 102, 103]), ("sB", 0.5, [104]), ("sC", 1.0, [105, 106])],
        None,
    ),
    ("g0", "g0_t1", [("sA", -0.2, [107, 108]), ("sD", 0.7, [109, 110, 111, 112])], None),
    (
        "g0",
        "g0_t2",
        [
            ("sA", 0.1, [113]),
            ("sB", 0.0, [114, 115]),
            ("sB", -0.3, [116, 117, 118]),
            ("sE", 2.0, [119]),
        ],
        None,
    ),
    ("g1", "g1_t3", [("sX", 1.5, [120, 121])], None),
    (
        "g1",
        "g1_t4",
        [("sX", 0.0, [122]), ("sY", -1.0, [123, 124, 125]), ("sZ", 0.25, [126, 127])],
        None,
    ),
]
# edge set: singleton group g2 (one trajectory), zero-variance group g3 (identical trajectories),
# group g4 whose state "sA" also occurs in g2 (ROLL's state groups ignore traj_group_id),
# singleton state groups, one-step trajectories
DATA_B = [
    ("g2", "g2_t0", [("sA", 0.3, [201, 202]), ("sQ", -0.6, [203])], None),
    ("g3", "g3_t0", [("sM", 1.0, [204]), ("sN", 1.0, [205, 206])], None),
    ("g3", "g3_t1", [("sM", 1.0, [207, 208]), ("sN", 1.0, [209])], None),
    ("g3", "g3_t2", [("sM", 1.0, [210]), ("sN", 1.0, [211])], None),
    ("g4", "g4_t0", [("sA", 0.9, [212])], None),
    ("g4", "g4_t1", [("sA", -0.4, [213, 214]), ("sR", 0.2, [215])], None),
    ("g4", "g4_t2", [("sS", 0.0, [216, 217, 218])], None),
]
# binary outcome that is NOT the sum of step rewards (the function reads episode_scores as given)
DATA_C = [
    ("h0", "h0_t0", [("u0", 0.1, [301]), ("u1", 0.2, [302, 303]), ("u2", 0.0, [304])], 1.0),
    ("h0", "h0_t1", [("u0", -0.1, [305, 306]), ("u3", 0.0, [307])], 0.0),
    (
        "h0",
        "h0_t2",
        [("u0", 0.05, [308]), ("u1", 0.4, [309]), ("u1", -0.2, [310, 311]), ("u4", 0.3, [312])],
        1.0,
    ),
    ("h1", "h1_t3", [("v0", 0.0, [313, 314])], 0.0),
    ("h1", "h1_t4", [("v0", 0.6, [315]), ("v1", -0.25, [316, 317])], 1.0),
]


def shuffled(rows):
    order = [7, 2, 11, 0, 5, 9, 3, 12, 1, 8, 4, 10, 6]
    assert sorted(order) == list(range(len(rows)))
    return [rows[i] for i in order]


# whole-trajectory rows for agentic_reinforce: obs tokens (mask 0) between action segments
def traj_row(g, t, segs, rewards_at=None, reward=None):
    """segs: list of ('o', n) observation / ('a', n) action token runs. rewards_at: {token_index: r}."""
    toks, mask = [], []
    nxt = 500 + 40 * (hash_stable(t) % 10)
    for kind, n in segs:
        for _ in range(n):
            toks.append(nxt)
            nxt += 1
            mask.append(1 if kind == "a" else 0)
    row = {"prompt_id": g, "rollout_id": t, "token_ids": toks, "action_mask": mask}
    if rewards_at is not None:
        tr = [0.0] * len(toks)
        for k, v in rewards_at.items():
            tr[k] = v
        row["token_rewards"] = tr
    if reward is not None:
        row["reward"] = reward
    return row


def hash_stable(s):
    return sum((i + 1) * ord(c) for i, c in enumerate(s))


def seg_end_rewards(segs, vals):
    """token index -> reward at the last token of each action segment, in order."""
    out, idx, j = {}, 0, 0
    for kind, n in segs:
        idx += n
        if kind == "a":
            out[idx - 1] = vals[j]
            j += 1
    return out


S1 = [("o", 2), ("a", 3)]
S2 = [("o", 2), ("a", 2), ("o", 3), ("a", 2)]
S3 = [("o", 1), ("a", 1), ("o", 2), ("a", 3), ("o", 1), ("a", 2)]
S3b = [
    ("a", 2),
    ("o", 1),
    ("a", 1),
    ("o", 2),
    ("a", 2),
    ("o", 2),
]  # starts with action, ends with obs

AR_ROWS = [
    traj_row("g0", "r1", S1, seg_end_rewards(S1, [0.8])),
    traj_row("g0", "r2", S2, seg_end_rewards(S2, [-0.5, 1.25])),
    traj_row("g0", "r3", S3, seg_end_rewards(S3, [0.3, 0.0, 2.0])),
    traj_row("g1", "r4", S3b, seg_end_rewards(S3b, [1.0, -0.7, 0.4])),
]
# rewards in places compute_agentic_reinforce_return does not read: mid-segment and on obs tokens
AR_ODD = [
    traj_row("g0", "q1", S2, {0: 5.0, 2: 0.9, 3: 0.1, 6: -3.0, 8: 0.6}),
    traj_row("g0", "q2", S3, {1: 0.0, 3: 0.7, 4: 0.2, 5: 0.5, 8: -1.0}),
    traj_row("g0", "q3", [("o", 1), ("a", 1)], {1: 1.5}),
    traj_row("g0", "q4", S1, {}),
]

ARP_ROWS = [  # pipeline: the outcome score lands on the row's last token
    traj_row("g0", "p0", S1, reward=1.0),
    traj_row("g0", "p1", S2, reward=0.25),
    traj_row("g0", "p2", S3, reward=-0.5),
    traj_row("g1", "p3", S2, reward=2.0),
    traj_row("g1", "p4", S3, reward=0.0),
]
ARP_EDGE = [
    traj_row("e0", "p5", S3, reward=0.7),  # singleton group
    traj_row("e1", "p6", S1, reward=1.0),  # zero-variance group
    traj_row("e1", "p7", S2, reward=1.0),
    traj_row("e2", "p8", S3b, reward=1.5),  # ends with observation tokens
    traj_row("e2", "p9", [("o", 1), ("a", 1)], reward=-1.0),  # one action token
    traj_row("e2", "p10", S2, reward=0.5),
]


# ----------------------------------------------------------------------------- cases
def build(R, commit):
    A, B, C = trajs_to_rows(DATA_A), trajs_to_rows(DATA_B), trajs_to_rows(DATA_C)
    files = {}

    def case(name, about, params, rows, runner):
        eff, exp = runner(rows, params)
        return {"name": name, "about": about, "params": eff, "rows": rows, "expected": exp}

    def header(path, function, about):
        return {
            "made_by": "make_roll.py",
            "repo": REPO,
            "commit": commit,
            "path": path,
            "function": function,
            "about": about,
            "cases": [],
        }

    step_rows_keys = (
        "prompt_id",
        "rollout_id",
        "segment_index",
        "state",
        "step_reward",
        "reward",
        "token_ids",
        "action_mask",
    )

    def strip(rows, keys):
        return [{k: r[k] for k in keys if k in r} for r in rows]

    # 1. compute_discounted_returns -------------------------------------------------------------
    disc = lambda rows, p: run_discounted(R, rows, p)
    dk = ("rollout_id", "segment_index", "step_reward")
    f = header(
        "roll/pipeline/agentic/utils.py",
        "compute_discounted_returns",
        "Per step row: G_t = sum_k gamma^k * step_scores[t+k] within traj_id, steps sorted by "
        "'step' (float32). Written to batch['step_rewards'] only when adv_estimator is 'gigpo' or "
        "'step_reinforce' (otherwise the batch is returned unchanged: advantage null). Function "
        "default gamma=1.0; the pipeline passes step_reward_gamma (AgenticConfig default 0.95).",
    )
    f["cases"] += [
        case(
            "default_gamma",
            "function default gamma=1.0: undiscounted reward-to-go",
            {"adv_estimator": "step_reinforce"},
            strip(A, dk),
            disc,
        ),
        case(
            "pipeline_default_gamma",
            "gamma=0.95 (AgenticConfig.step_reward_gamma default)",
            {"adv_estimator": "gigpo", "gamma": 0.95},
            strip(A, dk),
            disc,
        ),
        case(
            "gamma_half_shuffled",
            "gamma=0.5, rows delivered out of step order and interleaved across "
            "trajectories; output comes back in input order",
            {"adv_estimator": "step_reinforce", "gamma": 0.5},
            shuffled(strip(A, dk)),
            disc,
        ),
        case(
            "edge_set",
            "singleton/zero-variance groups, one-step trajectories; gamma=0.9",
            {"adv_estimator": "gigpo", "gamma": 0.9},
            strip(B, dk),
            disc,
        ),
        case(
            "other_estimator_noop",
            "adv_estimator='grpo': function returns the batch unchanged",
            {"adv_estimator": "grpo", "gamma": 0.95},
            strip(C, dk),
            disc,
        ),
    ]
    files["compute_discounted_returns"] = f

    # 2. step_reinforce pipeline ------------------------------------------------------------------
    pipe_step = lambda rows, p: run_pipeline(R, rows, p, "step")
    sk = ("prompt_id", "rollout_id", "segment_index", "step_reward", "token_ids", "action_mask")
    SR = lambda **kw: dict(adv_estimator="step_reinforce", **kw)
    f = header(
        "roll/pipeline/agentic/utils.py",
        "compute_discounted_returns -> compute_response_level_rewards -> "
        "roll/utils/functionals.py:compute_token_reward -> agentic_compute_advantage "
        "(adv_estimator='step_reinforce')",
        "step_reinforce as AgenticPipeline runs it on per-step rows (StepEnvManager layout: prompt "
        "tokens + the step's response tokens). 'advantage' = response_level_rewards = "
        "agentic_reward_norm(G_t) [then clamp to +-reward_clip], G_t from compute_discounted_returns "
        "with step_reward_gamma. That scalar is placed on the row's last valid token "
        "(expand_to_token_level), clamped again to +-reward_clip, then compute_reinforce_return "
        "(token-level reward-to-go with gamma over the whole sequence), optional masked_whiten, "
        "times response_mask, optional clamp to +-advantage_clip -> 'advantages' over the row's "
        "response tokens. Defaults: step_reward_gamma=0.95, gamma=1, grouping='batch', "
        "method='identity' (no normalisation), reward_clip=None, advantage_clip=None, "
        "whiten_advantages=False, whiten_rewards=False. KL term is 0 (add_token_level_kl=False).",
    )
    f["cases"] += [
        case(
            "defaults",
            "all defaults: advantage = discounted return (gamma 0.95), no normalisation; "
            "same value on every response token",
            SR(),
            strip(A, sk),
            pipe_step,
        ),
        case(
            "group_mean_std_gamma1",
            "grouping=traj_group_id, method=mean_std -> group mean / group std "
            "(unbiased) over the group's STEP rows; step_reward_gamma=1.0",
            SR(
                step_reward_gamma=1.0,
                reward_normalization={"grouping": "traj_group_id", "method": "mean_std"},
            ),
            strip(A, sk),
            pipe_step,
        ),
        case(
            "batch_mean_std_clips",
            "grouping=batch, method=mean_std (batch stats); reward_clip=0.8, "
            "advantage_clip=0.5 both bite; lambd=0.5 (unused by reinforce)",
            SR(
                reward_clip=0.8,
                advantage_clip=0.5,
                lambd=0.5,
                reward_normalization={"grouping": "batch", "method": "mean_std"},
            ),
            strip(A, sk),
            pipe_step,
        ),
        case(
            "batch_mean_group_std",
            "explicit norm_mean_type=batch, norm_std_type=group, grouping=traj_group_id",
            SR(
                reward_normalization={
                    "grouping": "traj_group_id",
                    "norm_mean_type": "batch",
                    "norm_std_type": "group",
                }
            ),
            strip(A, sk),
            pipe_step,
        ),
        case(
            "group_mean_token_gamma_whiten",
            "method=mean (group mean only), step_reward_gamma=0.5, token "
            "gamma=0.9 (advantage decays towards the start of the response), whiten_advantages=True "
            "(masked_whiten over all response tokens of the batch)",
            SR(
                step_reward_gamma=0.5,
                gamma=0.9,
                whiten_advantages=True,
                reward_normalization={"grouping": "traj_group_id", "method": "mean"},
            ),
            strip(A, sk),
            pipe_step,
        ),
        case(
            "whiten_rewards_tags",
            "whiten_rewards=True (masked_whiten of the token-level rewards, zeros "
            "included, before the reward-to-go); grouping=tags (one tag -> whole batch), method=mean_std",
            SR(
                whiten_rewards=True, reward_normalization={"grouping": "tags", "method": "mean_std"}
            ),
            strip(A, sk),
            pipe_step,
        ),
        case(
            "edge_group_mean_std",
            "singleton group g2 (-> 0), zero-variance group g3 (-> 0), one-step "
            "trajectories; grouping=traj_group_id, method=mean_std",
            SR(reward_normalization={"grouping": "traj_group_id", "method": "mean_std"}),
            strip(B, sk),
            pipe_step,
        ),
        case(
            "edge_group_mean_only",
            "same edge rows with method=mean (no std): singleton group -> 0, "
            "zero-variance group -> 0 by subtraction",
            SR(
                step_reward_gamma=1.0,
                reward_normalization={"grouping": "traj_group_id", "method": "mean"},
            ),
            strip(B, sk),
            pipe_step,
        ),
        case(
            "shuffled_rows",
            "rows out of order; group mean_std; gamma 0.95",
            SR(reward_normalization={"grouping": "traj_group_id", "method": "mean_std"}),
            shuffled(strip(A, sk)),
            pipe_step,
        ),
    ]
    files["step_reinforce"] = f

    # 3. gigpo pipeline --------------------------------------------------------------------------
    gk = step_rows_keys
    GG = lambda **kw: dict(adv_estimator="gigpo", **kw)
    f = header(
        "roll/pipeline/agentic/utils.py",
        "compute_discounted_returns -> compute_response_level_rewards (build_state_group, "
        "agentic_reward_norm) -> roll/utils/functionals.py:compute_token_reward -> "
        "agentic_compute_advantage (adv_estimator='gigpo')",
        "ROLL's GiGPO on per-step rows. 'advantage' = response_level_rewards = "
        "episode_reward_weight * agentic_reward_norm(episode_scores; reward_normalization: grouping, "
        "norm_mean_type, norm_std_type over STEP rows) + step_reward_weight * "
        "agentic_reward_norm(G_t; grouping='state_group_id' = state_hash across the WHOLE batch, "
        "norm types derived only from reward_normalization.method: identity->none, mean->group mean, "
        "mean_std/asym_clip->group mean & std), then clamp +-reward_clip. G_t = discounted "
        "step_scores with step_reward_gamma. Token placement/returns/whitening/advantage_clip as "
        "for step_reinforce. Defaults: episode_reward_weight=1, step_reward_weight=1, "
        "step_reward_gamma=0.95, gamma=1, grouping=batch, method=identity, clips None, whitening off. "
        "'reward' in a row = episode_scores (ROLL env managers set it to the sum of step rewards).",
    )
    f["cases"] += [
        case(
            "defaults",
            "all defaults (method identity): advantage = episode score + discounted return",
            GG(),
            strip(A, gk),
            pipe_step,
        ),
        case(
            "example_sokoban",
            "examples/.../agentic_val_sokoban_gigpo.yaml: grouping=traj_group_id, "
            "method=mean, advantage_clip=20",
            GG(
                advantage_clip=20.0,
                reward_normalization={"grouping": "traj_group_id", "method": "mean"},
            ),
            strip(A, gk),
            pipe_step,
        ),
        case(
            "group_mean_std_weights",
            "method=mean_std, grouping=traj_group_id, episode_reward_weight=0.7, "
            "step_reward_weight=0.3",
            GG(
                episode_reward_weight=0.7,
                step_reward_weight=0.3,
                reward_normalization={"grouping": "traj_group_id", "method": "mean_std"},
            ),
            strip(A, gk),
            pipe_step,
        ),
        case(
            "batch_mean_std_clips_binary_outcome",
            "episode_scores given as a 0/1 outcome (not the sum of "
            "steps); grouping=batch, method=mean_std; reward_clip=1.0, advantage_clip=0.8, "
            "step_reward_gamma=1.0",
            GG(
                reward_clip=1.0,
                advantage_clip=0.8,
                step_reward_gamma=1.0,
                reward_normalization={"grouping": "batch", "method": "mean_std"},
            ),
            strip(C, gk),
            pipe_step,
        ),
        case(
            "explicit_norm_types_identity_method",
            "grouping=traj_group_id, norm_mean_type=group, "
            "norm_std_type=group but method=identity: the episode term is normalised, the step term is NOT "
            "(its config is rebuilt from method only)",
            GG(
                reward_normalization={
                    "grouping": "traj_group_id",
                    "method": "identity",
                    "norm_mean_type": "group",
                    "norm_std_type": "group",
                }
            ),
            strip(A, gk),
            pipe_step,
        ),
        case(
            "edge_set_mean_std",
            "singleton group g2, zero-variance group g3, state 'sA' shared by g2 and g4 "
            "(ROLL pools it into one state group), singleton state groups, one-step trajectories; "
            "grouping=traj_group_id, method=mean_std",
            GG(reward_normalization={"grouping": "traj_group_id", "method": "mean_std"}),
            strip(B, gk),
            pipe_step,
        ),
        case(
            "edge_set_mean",
            "edge rows, method=mean, step_reward_gamma=0.8",
            GG(
                step_reward_gamma=0.8,
                reward_normalization={"grouping": "traj_group_id", "method": "mean"},
            ),
            strip(B, gk),
            pipe_step,
        ),
        case(
            "token_gamma_whiten_shuffled",
            "rows shuffled; gamma=0.9 on tokens, whiten_advantages=True, "
            "whiten_rewards=True, lambd=0.5 (unused); method=mean_std grouping=traj_group_id",
            GG(
                gamma=0.9,
                whiten_advantages=True,
                whiten_rewards=True,
                lambd=0.5,
                reward_normalization={"grouping": "traj_group_id", "method": "mean_std"},
            ),
            shuffled(strip(A, gk)),
            pipe_step,
        ),
    ]
    files["gigpo"] = f

    # 4. agentic_reinforce, token rewards given -------------------------------------------------
    ard = lambda rows, p: run_agentic_direct(R, rows, p)
    f = header(
        "roll/pipeline/agentic/utils.py",
        "agentic_compute_advantage (adv_estimator='agentic_reinforce') -> compute_agentic_reinforce_return",
        "Row = one whole trajectory (token_ids incl. observation tokens; action_mask = response_mask; "
        "token_rewards = token_level_rewards). Optional masked_whiten of token_rewards (whiten_rewards), "
        "then token_rewards * action_mask; each maximal run of 1s in action_mask is a segment; from the "
        "last segment backwards G_seg = token_reward[last token of seg] + gamma * G_next_seg (rewards on "
        "other tokens of a segment are ignored), constant over the segment, 0 on observation tokens; "
        "optional masked_whiten over all action tokens of the batch; times action_mask; optional clamp "
        "+-advantage_clip. Whitening is switched off when the batch has <= 1 action token. Defaults "
        "(PPOConfig): gamma=1, lambd=0.95 (unused), whiten_rewards=False, whiten_advantages=False, "
        "advantage_clip=None.",
    )
    f["cases"] += [
        case(
            "defaults",
            "1, 2 and 3 action segments with observation tokens between; rewards at segment ends; "
            "gamma=1",
            {},
            AR_ROWS,
            ard,
        ),
        case(
            "gamma_0_9",
            "gamma=0.9: discount is per segment (turn), not per token",
            {"gamma": 0.9},
            AR_ROWS,
            ard,
        ),
        case(
            "whiten_rewards",
            "whiten_rewards=True, gamma=0.8",
            {"whiten_rewards": True, "gamma": 0.8},
            AR_ROWS,
            ard,
        ),
        case(
            "whiten_adv_clip",
            "whiten_advantages=True, advantage_clip=0.5, lambd=0.3 (unused)",
            {"whiten_advantages": True, "advantage_clip": 0.5, "lambd": 0.3},
            AR_ROWS,
            ard,
        ),
        case(
            "rewards_off_segment_end",
            "rewards on observation tokens (zeroed by the mask) and inside "
            "segments (ignored); a row with all-zero rewards; a one-token action",
            {"gamma": 0.95},
            AR_ODD,
            ard,
        ),
        case(
            "single_token_whiten_disabled",
            "one action token in the whole batch: whitening requested but disabled by ROLL",
            {"whiten_advantages": True, "whiten_rewards": True},
            [traj_row("g0", "z1", [("o", 2), ("a", 1), ("o", 1)], {2: 0.6})],
            ard,
        ),
    ]
    files["compute_agentic_reinforce_return"] = f

    # 5. agentic_reinforce full pipeline ---------------------------------------------------------
    pipe_traj = lambda rows, p: run_pipeline(R, rows, p, "traj")
    AR = lambda **kw: dict(adv_estimator="agentic_reinforce", **kw)
    f = header(
        "roll/pipeline/agentic/utils.py",
        "compute_response_level_rewards -> roll/utils/functionals.py:compute_token_reward -> "
        "agentic_compute_advantage (adv_estimator='agentic_reinforce')",
        "agentic_reinforce as AgenticPipeline runs it on whole-trajectory rows (TrajEnvManager layout, "
        "scores tensor = episode score on the last token). 'advantage' = response_level_rewards = "
        "agentic_reward_norm(scores.sum(-1) = 'reward') [clamp +-reward_clip]; it is placed on the row's "
        "last token only (expand_to_token_level), so segment k from the end gets gamma^k * advantage "
        "(0 everywhere if the row ends with observation tokens). Then whitening/clip as in "
        "agentic_compute_advantage. Defaults: gamma=1, grouping=batch, method=identity, no clips, "
        "no whitening.",
    )
    ak = ("prompt_id", "rollout_id", "reward", "token_ids", "action_mask")
    f["cases"] += [
        case(
            "defaults",
            "defaults: every action token gets the raw episode score",
            AR(),
            strip(ARP_ROWS, ak),
            pipe_traj,
        ),
        case(
            "group_mean_std_gamma",
            "grouping=traj_group_id, method=mean_std, gamma=0.8",
            AR(gamma=0.8, reward_normalization={"grouping": "traj_group_id", "method": "mean_std"}),
            strip(ARP_ROWS, ak),
            pipe_traj,
        ),
        case(
            "batch_clips_whiten",
            "grouping=batch mean_std, reward_clip=0.9, whiten_advantages=True, "
            "advantage_clip=1.2, gamma=0.9",
            AR(
                gamma=0.9,
                reward_clip=0.9,
                whiten_advantages=True,
                advantage_clip=1.2,
                reward_normalization={"grouping": "batch", "method": "mean_std"},
            ),
            strip(ARP_ROWS, ak),
            pipe_traj,
        ),
        case(
            "edge",
            "singleton group, zero-variance group, row ending with observation tokens (all zeros), "
            "one-token action; grouping=traj_group_id, method=mean_std, gamma=0.9",
            AR(gamma=0.9, reward_normalization={"grouping": "traj_group_id", "method": "mean_std"}),
            strip(ARP_EDGE, ak),
            pipe_traj,
        ),
        case(
            "edge_mean_only",
            "edge rows, method=mean, whiten_rewards=True",
            AR(
                whiten_rewards=True,
                reward_normalization={"grouping": "traj_group_id", "method": "mean"},
            ),
            strip(ARP_EDGE, ak),
            pipe_traj,
        ),
    ]
    files["agentic_reinforce"] = f
    return files


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--src", default=os.environ.get("ROLL_SRC"), help="ROLL source tree (or ROLL_SRC)"
    )
    ap.add_argument(
        "--commit", default=os.environ.get("ROLL_COMMIT"), help="commit of --src (or ROLL_COMMIT)"
    )
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
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
        print(
            f"warning: commit {commit} differs from the one these fixtures were designed on "
            f"({EXPECTED_COMMIT})",
            file=sys.stderr,
        )
    R = load_roll(a.src)
    R.torch.manual_seed(0)
    files = build(R, commit)
    os.makedirs(a.out, exist_ok=True)
    for name, content in files.items():
        p = os.path.join(a.out, name + ".json")
        with open(p, "w") as fh:
            json.dump(content, fh, indent=1)
            fh.write("\n")
        print("wrote", p, len(content["cases"]), "cases")


if __name__ == "__main__":
    main()
