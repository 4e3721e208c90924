"""Write real verl 0.9.1 rollout dumps made with the DAPO reward manager (overlong penalty).

Same machinery, versions and venv as tools/dumps/verl.py (read its docstring first); this script
imports that file's helpers (by path, as a module of its own name) and adds the DAPO cases.

Made with verl 0.9.1 (PyPI, `pip install --no-deps verl==0.9.1`), torch 2.13.0+cpu, transformers
5.10.4, tokenizers 0.22.2, tensordict 0.15.3, numpy 2.4.6, TransferQueue 0.1.11, Python 3.11, on
CPU, offline; the recipe cases also need verl-recipe (GitHub verl-project/verl-recipe, commit
48ea0a797fa29867ea0ad92aff7d284eec7d4be3; its dapo/dapo_ray_trainer.py last changed in
e477deff97b15d067f8b4e71f75b80ae58ad64c4), read from a checkout given by --recipe.

Run (from the repository root, with the framework venv, never as part of CI):

    git clone https://github.com/verl-project/verl-recipe /tmp/fw/verl-recipe
    git -C /tmp/fw/verl-recipe checkout 48ea0a797fa29867ea0ad92aff7d284eec7d4be3
    /tmp/fw/verl/bin/python tools/dumps/verl_dapo.py OUTDIR [--fixtures DIR] [--cases a,b]
        [--recipe /tmp/fw/verl-recipe]

Every case is written under OUTDIR/<case>/ by verl's own writer and copied unchanged to
`tests/fixtures/real/verl/<case>/` with a `truth.json` beside it (same layout as the other verl
cases: "rows" in file order with verl's trained reward as "score" and verl's "grpo_advantage").
Two runs write identical files (seeded uuid4, numpy, torch, random; one-thread executor).

The DAPO reward manager that verl 0.9.1's trainers run is the reward loop's
`verl/experimental/reward_loop/reward_manager/dapo.py` (`DAPORewardManager.run_single`), chosen by
`reward.reward_manager.name=dapo` through `RewardLoopWorker._init_reward_fn` ->
`verl.trainer.ppo.reward.load_reward_manager` -> `resolve_reward_manager_cls` (registry of
`verl.experimental.reward_loop.reward_manager`). The older `verl/workers/reward_manager/dapo.py`
is still in the wheel but no trainer code of 0.9.1 imports it (only the reward loop's
`limited.py` imports that package's `register`). The overlong settings are the recipe's
`+reward.reward_kwargs.overlong_buffer_cfg.{enable,len,penalty_factor,log}` and
`+reward.reward_kwargs.max_resp_len` (verl-recipe dapo/*.sh); with no custom reward function,
`load_reward_manager` gives the manager verl's `default_compute_score`, which sends
data_source "math_dapo" to `verl.utils.reward_score.math_dapo.compute_score` (a dict
{score: 1.0 or -1.0, acc: bool, pred: str}) and "openai/gsm8k" to `gsm8k.compute_score` (a
number, made float by default_compute_score).

What is verl's own code, unchanged: everything listed in tools/dumps/verl.py (dataset,
agent loop, reward loop worker, `RayPPOTrainer._balance_batch`, `extract_reward`,
`compute_advantage`, `_log_rollout_data` -> `_dump_generations` -> `_write_generations`; V1:
`AgentLoopWorkerTQ`, `PPOTrainer._compute_advantage`, `PPOTrainer._log_rollout_data`), plus the
DAPO reward manager and verl's math_dapo / gsm8k scorers. For the `recipe_*` cases, the whole
`RayDAPOTrainer.fit` of verl-recipe (dapo/dapo_ray_trainer.py) runs unchanged, on verl 0.9.1.

Stand-ins (not verl's code) and why, beyond those of tools/dumps/verl.py:
- `DapoScriptedLLM` (a subclass of verl.py's ScriptedLLM) scripts responses of varied length
  (2 to 26 filler words, then "answer : N" for math_dapo prompts or "#### N" for gsm8k prompts,
  right, wrong or no answer, chosen by a seeded rng) so that many rows fall in the overlong
  buffer and some are cut at max_response_length;
- `compute_score_fmt` below is ours (a dict reward {score, acc, fmt} built on verl's math_dapo),
  for the control case with extra keys and no overlong buffer;
- recipe cases only: the actor worker calls are replaced: `_compute_old_log_prob` returns zero
  log-probs and entropies, `_update_actor` records the batch it is given (the advantages verl
  trains on, in the dumped order) and returns empty metrics; `_load_checkpoint`,
  `checkpoint_manager.{update_weights,sleep_replicas}` and the profiler hooks do nothing;
  `resource_pool_manager.get_n_gpus` returns 2; the agent-loop manager's `generate_sequences`
  (auto_await) runs on our event loop, as in verl.py's validation case; verl's own
  `_balance_batch` is wrapped only to record where each row went (a temporary row-number
  column, removed again), which gives truth.json's `extra_columns_from_line`; the dataloader is
  built as `RayPPOTrainer._create_dataloader` builds it (batches of data.gen_batch_size).

Every case asserts, row by row, the relation between what the file holds and verl's numbers
(`check_dump`) and that verl's trained reward is exactly float32(raw score + overlong_reward)
with the manager's own formula (`checked_row`); a run that breaks one of them stops.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
# tools/dumps holds a file called verl.py: never let it shadow the real `verl` package.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _HERE]

import argparse  # noqa: E402
import copy  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402

# --------------------------------------------------------------------------------------------
# Reward function (loaded by verl through reward.custom_reward_function.path = this file).
# It must stay importable without side effects: verl executes this file as a module.
# --------------------------------------------------------------------------------------------


def compute_score_fmt(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Dict reward {score, acc, fmt} on top of verl's math_dapo: score 1.0 right, 0.1 an answer
    in the 'answer : N' format but wrong, 0.0 no answer; acc bool; fmt 1.0 / 0.0 (format found)."""
    from verl.utils.reward_score import math_dapo

    res = math_dapo.compute_score(solution_str, ground_truth)
    fmt = res["pred"] != "[INVALID]"
    score = 1.0 if res["acc"] else (0.1 if fmt else 0.0)
    return {"score": score, "acc": bool(res["acc"]), "fmt": 1.0 if fmt else 0.0}


# --------------------------------------------------------------------------------------------
# Everything below runs only as a script.
# --------------------------------------------------------------------------------------------

SEED = 4321
RECIPE_COMMIT = "48ea0a797fa29867ea0ad92aff7d284eec7d4be3"
RECIPE_FILE_COMMIT = "e477deff97b15d067f8b4e71f75b80ae58ad64c4"
N = 4  # rollout.n
PROMPTS_PER_STEP = 6  # data.train_batch_size
STEPS = 2
MAX_RESPONSE_LENGTH = 24  # data.max_response_length = rollout.response_length = max_resp_len
OVERLONG = {"enable": True, "len": 12, "penalty_factor": 1.0}  # expected_len = 24 - 12 = 12
# the control case: verl-recipe dapo/config/dapo_trainer.yaml's defaults (buffer off)
OVERLONG_OFF = {"enable": False, "len": 0, "penalty_factor": 0.0, "log": False}

FILLER = ["let", "me", "think", "hmm", "i", "guess", "so", "the", "is", "ok", "sure", "it"]

# 12 questions, answers within the tokenizer's numbers 0..40 (wrong answers are +-1 or 2).
QUESTIONS = [
    (3, "plus", 4),
    (9, "minus", 5),
    (6, "times", 3),
    (12, "plus", 7),
    (8, "minus", 2),
    (5, "times", 4),
    (14, "plus", 9),
    (7, "times", 2),
    (20, "minus", 8),
    (11, "plus", 13),
    (4, "times", 6),
    (30, "minus", 12),
]
# the recipe's dynamic-sampling case: data.gen_batch_size = 3 x train_batch_size (as in
# verl-recipe dapo/run_dapo_qwen2.5_32b.sh), 2 steps of one generation batch of 18 prompts each
GEN_BATCH_FILTER = 3 * PROMPTS_PER_STEP
QUESTIONS_FILTER = QUESTIONS + [
    (2, "plus", 9),
    (15, "minus", 6),
    (3, "times", 9),
    (16, "plus", 5),
    (19, "minus", 4),
    (2, "times", 13),
    (10, "plus", 10),
    (25, "minus", 9),
    (5, "times", 5),
    (17, "plus", 6),
    (33, "minus", 14),
    (6, "times", 6),
    (13, "plus", 2),
    (27, "minus", 20),
    (3, "times", 11),
    (18, "plus", 11),
    (38, "minus", 5),
    (4, "times", 8),
    (21, "plus", 3),
    (40, "minus", 13),
    (9, "times", 3),
    (8, "plus", 22),
    (29, "minus", 26),
    (7, "times", 5),
]

CASES = [
    "dapo_dict_logged",
    "dapo_dict_unlogged",
    "dapo_float_logged",
    "dapo_float_unlogged",
    "dapo_dict_extra_keys",
    "v1_dapo_dict_logged",
    "recipe_dapo_dict_logged",
    "recipe_dapo_filter_groups",
]

CASE_SPECS = {
    "dapo_dict_logged": dict(
        trainer="legacy",
        data_source="math_dapo",
        reward_fn=None,
        overlong={**OVERLONG, "log": True},
    ),
    "dapo_dict_unlogged": dict(
        trainer="legacy",
        data_source="math_dapo",
        reward_fn=None,
        overlong={**OVERLONG, "log": False},
    ),
    "dapo_float_logged": dict(
        trainer="legacy",
        data_source="openai/gsm8k",
        reward_fn=None,
        overlong={**OVERLONG, "log": True},
    ),
    "dapo_float_unlogged": dict(
        trainer="legacy",
        data_source="openai/gsm8k",
        reward_fn=None,
        overlong={**OVERLONG, "log": False},
    ),
    "dapo_dict_extra_keys": dict(
        trainer="legacy",
        data_source="math_dapo",
        reward_fn="compute_score_fmt",
        overlong=OVERLONG_OFF,
    ),
    "v1_dapo_dict_logged": dict(
        trainer="v1", data_source="math_dapo", reward_fn=None, overlong={**OVERLONG, "log": True}
    ),
    "recipe_dapo_dict_logged": dict(
        trainer="recipe",
        data_source="math_dapo",
        reward_fn=None,
        overlong={**OVERLONG, "log": True},
        filter_groups=None,
        gen_batch_size=PROMPTS_PER_STEP,
    ),
    "recipe_dapo_filter_groups": dict(
        trainer="recipe",
        data_source="math_dapo",
        reward_fn=None,
        overlong={**OVERLONG, "log": True},
        filter_groups={"enable": True, "metric": "acc", "max_num_gen_batches": 10},
        gen_batch_size=GEN_BATCH_FILTER,
    ),
}


def load_helpers():
    """tools/dumps/verl.py, imported by path under another module name (it is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "advcli_verl_dump_helpers", os.path.join(_HERE, "verl.py")
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def make_rows(H, questions, data_source):
    """verl-style parquet rows; the prompt asks for the answer format the scorer parses."""
    fmt = "#### then the number" if data_source == "openai/gsm8k" else "answer : then the number"
    rows = []
    for i, (a, op, b) in enumerate(questions):
        rows.append(
            {
                "data_source": data_source,
                "prompt": [
                    {"role": "system", "content": H.SYSTEM},
                    {"role": "user", "content": f"what is {a} {op} {b} ? answer with {fmt} ."},
                ],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(H.OPS[op](a, b))},
                "extra_info": {"split": "train", "index": i},
            }
        )
    return rows


def make_llm_class(H):
    class DapoScriptedLLM(H.ScriptedLLM):
        """Responses of 2..26 filler words then the answer: lengths spread over the buffer."""

        def _answer(self, text, k):
            m = re.search(r"what is (\d+) (plus|minus|times) (\d+)", text)
            right = H.OPS[m.group(2)](int(m.group(1)), int(m.group(3)))
            rng = random.Random(f"{self.seed}|{self.step}|{text}|{k}")
            kind = rng.choice(["right", "right", "right", "wrong", "wrong", "none"])
            n_fill = rng.randint(2, 26)
            words = [rng.choice(FILLER) for _ in range(n_fill)]
            ans = right if kind == "right" else right + rng.choice([-2, -1, 1, 2])
            if kind != "none":
                words += (["####"] if "####" in text else ["answer", ":"]) + [str(ans)]
            return " ".join(words)

    return DapoScriptedLLM


def setup(H, case, work, seed, spec, *, train_bs=PROMPTS_PER_STEP):
    from omegaconf import OmegaConf, open_dict
    from transformers import AutoTokenizer

    H.seed_all(seed)
    loop = H.new_loop()
    model_dir = H.build_model_dir(os.path.join(work, "model"))
    tok_dir = os.path.join(model_dir, "tokenizer")
    cfg = H.make_config(
        model_dir, tok_dir, case=case, n=N, train_bs=train_bs,
        use_v1=spec["trainer"] == "v1", response_length=MAX_RESPONSE_LENGTH,
    )  # fmt: skip
    with open_dict(cfg):
        # the DAPO recipe's reward settings (verl-recipe dapo/*.sh)
        cfg.reward.reward_manager.name = "dapo"
        cfg.reward.reward_kwargs = OmegaConf.create(
            {"overlong_buffer_cfg": dict(spec["overlong"]), "max_resp_len": MAX_RESPONSE_LENGTH}
        )
        if spec["reward_fn"] is None:  # verl's default_compute_score (math_dapo / gsm8k)
            cfg.reward.custom_reward_function.path = None
        else:
            cfg.reward.custom_reward_function.path = os.path.abspath(__file__)
            cfg.reward.custom_reward_function.name = spec["reward_fn"]
    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    llm = make_llm_class(H)(tokenizer, seed)
    return loop, cfg, tokenizer, llm


def _raw_scores(batch):
    """What compute_score returned, as verl keeps it in the batch (reward_extra_info):
    the dict's 'score' key, or 'acc' (the manager copies a float result there)."""
    nt = batch.non_tensor_batch
    return [float(x) for x in (nt["score"] if "score" in nt else nt["acc"])]


def _resp_lengths(batch):
    return [int(x) for x in batch.batch["response_mask"].sum(-1)]


# ----------------------------------------------------------------------------- legacy trainer


async def legacy_step(H, tr, it, llm, step, rollout_dir, spec):
    batch, red, timing_raw, order_before = await H.legacy_batch(tr, it, llm, step)
    adv = H.grpo_and_rloo(batch, tr.config)
    tr._log_rollout_data(batch, red, timing_raw, rollout_dir)
    tr._shutdown_dump_executor()
    tr._init_dump_executor()
    rows = _rows_from_batch(batch, adv["grpo"], adv["rloo"], spec)
    extra = {
        "reward_extra_info_dtypes": {k: str(v.dtype) for k, v in red.items()},
    }
    return rows, extra


def overlong_reward(spec, length):
    """DAPORewardManager.run_single's penalty, the same torch operations on the same types
    (valid_response_length is a 0-dim int64 tensor there; the result a float32 tensor or int 0)."""
    import torch

    ob = spec["overlong"]
    if not ob["enable"]:
        return None
    exceed_len = torch.tensor(length) - (MAX_RESPONSE_LENGTH - ob["len"])
    return min(-exceed_len / ob["len"] * ob["penalty_factor"], 0)


def checked_row(spec, u, trained, raw, length, grpo, rloo):
    """One truth row; asserts that verl's trained reward is float32(raw + overlong_reward)."""
    import torch

    row = {"uid": u, "score": trained, "raw_score": raw, "response_length": length}
    pen = overlong_reward(spec, length)
    if pen is None:
        expect = torch.tensor([raw], dtype=torch.float32)
    else:
        row["overlong_reward"] = float(pen)
        expect = torch.tensor([raw + pen], dtype=torch.float32)  # as _postprocess builds rm_scores
    assert float(expect[0]) == trained, (u, raw, pen, trained)
    row["grpo_advantage"] = grpo
    row["rloo_advantage"] = rloo
    return row


def _rows_from_batch(batch, grpo, rloo, spec):
    uids = list(batch.non_tensor_batch["uid"])
    scores = [float(x) for x in batch.batch["token_level_scores"].sum(-1)]
    return [
        checked_row(spec, u, s, r, n, g, lo)
        for u, s, r, n, g, lo in zip(
            uids, scores, _raw_scores(batch), _resp_lengths(batch), grpo, rloo, strict=True
        )
    ]


def run_legacy(H, case, work, seed, spec):
    loop, cfg, tokenizer, llm = setup(H, case, work, seed, spec)
    reward_handles, workers = H.build_workers(cfg, llm)
    mgr = H.make_rollout_manager(cfg, llm, reward_handles, workers)
    rows_in = make_rows(H, QUESTIONS, spec["data_source"])
    dl = H.make_dataloader(cfg, rows_in, tokenizer, work, "train")
    tr = H.legacy_trainer(cfg, tokenizer, mgr)
    out_dir = os.path.join(work, "out")
    it = iter(dl)
    rows, extras = [], {}
    for step in range(1, STEPS + 1):
        step_rows, extra = loop.run_until_complete(
            legacy_step(H, tr, it, llm, step, os.path.join(out_dir, "rollout"), spec)
        )
        assert len(H.lines_of(os.path.join(out_dir, "rollout", f"{step}.jsonl"))) == len(step_rows)
        for i, r in enumerate(step_rows):
            rows.append({"file": f"rollout/{step}.jsonl", "line": i + 1, **r})
        extras[step] = extra
    loop.close()
    return cfg, out_dir, rows, extras


# ----------------------------------------------------------------------------- V1 trainer


def run_v1(H, case, work, seed, spec):
    import torch
    import verl.trainer.ppo.v1.agent_loop_tq as agent_loop_tq

    loop, cfg, tokenizer, llm = setup(H, case, work, seed, spec)
    fake_tq = H.FakeTQ()
    fake_tq.install()
    worker_cls = agent_loop_tq.AgentLoopWorkerTQ.__ray_actor_class__
    reward_handles, workers = H.build_workers(cfg, llm, worker_cls=worker_cls)
    mgr = H.LocalTQManager(workers, loop)
    dl = H.make_dataloader(cfg, make_rows(H, QUESTIONS, spec["data_source"]), tokenizer, work,
                           "train")  # fmt: skip
    tr = H.v1_trainer(cfg, tokenizer, mgr, dl)
    rloo_cfg = copy.deepcopy(cfg)
    rloo_cfg.algorithm.adv_estimator = "rloo"
    out_dir = os.path.join(work, "out")
    rows, extras = [], {}
    real_clear = fake_tq.kv_clear
    for step in range(1, STEPS + 1):
        kept = {}

        def keep_then_clear(keys, partition_id, _kept=kept):
            # before v1_step clears the step's samples: the fields verl's reward loop stored
            for k in [keys] if isinstance(keys, str) else keys:
                _kept[k] = dict(fake_tq.data.get(partition_id, {}).get(k, {}))
            real_clear(keys, partition_id)

        fake_tq.kv_clear = keep_then_clear
        keys, score, adv = H.v1_step(
            tr, fake_tq, llm, step, os.path.join(out_dir, "rollout"), rloo_cfg
        )
        fake_tq.kv_clear = real_clear
        lines = H.lines_of(os.path.join(out_dir, "rollout", f"{step}.jsonl"))
        assert len(lines) == len(keys)
        for i, line in enumerate(lines):
            key = json.loads(line)["uid"]
            f = kept[key]
            info = f["extra_fields"]["reward_extra_info"]  # where AgentLoopWorkerTQ keeps it
            raw = info["score"] if "score" in info else info["acc"]
            row = checked_row(
                spec, key, score[key], float(raw), int(torch.as_tensor(f["response_mask"]).sum()),
                adv["grpo"][key], adv["rloo"][key],
            )  # fmt: skip
            row["prompt_uid"] = key.rsplit("_", 2)[0]
            rows.append({"file": f"rollout/{step}.jsonl", "line": i + 1, **row})
        extras[step] = {
            "reward_extra_info_keys": sorted(
                next(iter(kept.values()))["extra_fields"]["reward_extra_info"].keys()
            ),
        }
    loop.close()
    return cfg, out_dir, rows, extras


# ----------------------------------------------------------------------------- recipe trainer


def load_recipe_trainer(recipe_root):
    path = os.path.join(recipe_root, "dapo", "dapo_ray_trainer.py")
    spec = importlib.util.spec_from_file_location("verl_recipe_dapo_ray_trainer", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod.RayDAPOTrainer


def gen_dataloader(H, cfg, rows, tokenizer, tmp):
    """RayPPOTrainer._create_dataloader: batches of data.gen_batch_size (or train_batch_size)."""
    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler
    from verl.utils.dataset.rl_dataset import collate_fn

    path = H.write_parquet(rows, os.path.join(tmp, "train.parquet"))
    ds = create_rl_dataset([path], cfg.data, tokenizer, None, is_train=True)
    return StatefulDataLoader(
        dataset=ds,
        batch_size=cfg.data.get("gen_batch_size", None) or cfg.data.train_batch_size,
        num_workers=cfg.data["dataloader_num_workers"],
        drop_last=True,
        collate_fn=collate_fn,
        sampler=create_rl_sampler(cfg.data, ds),
    )


class _NoCheckpointEngine:
    def update_weights(self, *args, **kwargs):
        return None

    def sleep_replicas(self, *args, **kwargs):
        return None


class _Pool:
    def get_n_gpus(self):
        return 2


def run_recipe(H, case, work, seed, spec, recipe_root):
    """verl-recipe's RayDAPOTrainer.fit itself, 2 training steps, on stand-in actor workers."""
    import numpy as np
    import torch
    from omegaconf import OmegaConf, open_dict
    from verl import DataProto

    RayDAPOTrainer = load_recipe_trainer(recipe_root)
    fg = spec["filter_groups"]
    loop, cfg, tokenizer, llm = setup(H, case, work, seed, spec)
    out_dir = os.path.join(work, "out")
    with open_dict(cfg):
        cfg.algorithm.filter_groups = OmegaConf.create(
            fg or {"enable": False, "metric": None, "max_num_gen_batches": 0}
        )
        cfg.data.gen_batch_size = spec["gen_batch_size"]  # dapo_trainer.yaml: train_batch_size
        t = cfg.trainer
        t.rollout_data_dir = os.path.join(out_dir, "rollout")
        t.val_before_train = False
        t.test_freq = -1
        t.save_freq = -1
        t.total_epochs = 1
        t.critic_warmup = 0
        cfg.algorithm.use_kl_in_reward = False
    reward_handles, workers = H.build_workers(cfg, llm)
    mgr = H.make_rollout_manager(cfg, llm, reward_handles, workers)
    real_generate = type(mgr).generate_sequences.__wrapped__
    generations = []

    def generate(prompts):  # auto_await from sync fit: run on our loop, fixed order
        llm.new_step(len(generations) + 1)  # a new script per generation batch
        out = loop.run_until_complete(real_generate(mgr, prompts))
        generations.append(len(out))
        return out

    mgr.generate_sequences = generate
    questions = QUESTIONS_FILTER if fg else QUESTIONS
    dl = gen_dataloader(H, cfg, make_rows(H, questions, spec["data_source"]), tokenizer, work)

    tr = RayDAPOTrainer.__new__(RayDAPOTrainer)
    tr.config = cfg
    tr.tokenizer = tokenizer
    tr.async_rollout_manager = mgr
    tr.train_dataloader = dl
    tr.total_training_steps = STEPS
    tr.use_rm = False
    tr.use_critic = False
    tr.use_reference_policy = False
    tr.ref_in_actor = False
    tr.actor_rollout_wg = None
    tr.checkpoint_manager = _NoCheckpointEngine()
    tr.resource_pool_manager = _Pool()
    tr._get_dp_size = lambda worker_group, role: 2
    tr._load_checkpoint = lambda: None
    tr._start_profiling = lambda do_profile: None
    tr._stop_profiling = lambda do_profile, run_command=False: None
    tr._init_dump_executor()

    def old_log_prob(batch):
        z = torch.zeros_like(batch.batch["response_mask"], dtype=torch.float32)
        return DataProto.from_dict(tensors={"old_log_probs": z, "entropys": z.clone()}), 0.0

    updates = []

    def update_actor(batch):  # the batch verl trains on, after its compute_advantage
        updates.append(copy.deepcopy(batch))
        return DataProto.from_single_dict(data={}, meta_info={"metrics": {}})

    tr._compute_old_log_prob = old_log_prob
    tr._update_actor = update_actor
    real_balance = tr._balance_batch  # verl's RayPPOTrainer._balance_batch, bound
    perms = []

    def balance(batch, metrics, **kwargs):  # verl's, observed: which row went where
        batch.non_tensor_batch["__row_before_balance__"] = np.arange(len(batch))
        real_balance(batch, metrics=metrics, **kwargs)
        perms.append([int(i) for i in batch.non_tensor_batch.pop("__row_before_balance__")])

    tr._balance_batch = balance
    tr.fit()
    tr._shutdown_dump_executor()
    loop.close()

    rows, extras = [], {}
    for step, batch in enumerate(updates, start=1):
        grpo = H._row_scalar(batch.batch["advantages"], batch.batch["response_mask"])
        again = H.grpo_and_rloo(batch, cfg)
        assert again["grpo"] == grpo, "recomputed GRPO differs from the trainer's"
        step_rows = _rows_from_batch(batch, grpo, again["rloo"], spec)
        lines = H.lines_of(os.path.join(out_dir, "rollout", f"{step}.jsonl"))
        assert len(lines) == len(step_rows)
        perm = perms[step - 1]  # dumped line i holds the row that was at perm[i] before balancing
        extras_written = "acc" in json.loads(lines[0])
        for i, r in enumerate(step_rows):
            row = {"file": f"rollout/{step}.jsonl", "line": i + 1, **r}
            if extras_written:
                # the extra columns of line i were taken before _balance_batch: they belong to the
                # row that was at position i then, now at line perm.index(i) + 1 (1-based)
                row["extra_columns_from_line"] = perm.index(i) + 1
            rows.append(row)
        extras[step] = {"row_before_balance_batch_per_line": perm}
    extras["generation_batches_sizes"] = generations
    return cfg, out_dir, rows, extras


# ----------------------------------------------------------------------------- truth


def describe(case, spec):
    ob = spec["overlong"]
    if ob["enable"]:
        pen = (
            f"overlong buffer on: max_resp_len={MAX_RESPONSE_LENGTH}, len={ob['len']}, "
            f"penalty_factor={ob['penalty_factor']}, log={ob['log']}; expected_len="
            f"{MAX_RESPONSE_LENGTH - ob['len']}, overlong_reward = min(-(L - "
            f"{MAX_RESPONSE_LENGTH - ob['len']}) / {ob['len']} * {ob['penalty_factor']}, 0) for a "
            f"response of L tokens (the <|im_end|> counted, cut at {MAX_RESPONSE_LENGTH})"
        )
    else:
        pen = "overlong buffer off (enable=False): trained reward = compute_score's score"
    return pen


def versions(H, spec):
    v = H.versions()
    if spec["trainer"] == "recipe":
        v["verl-recipe"] = RECIPE_COMMIT
        v["verl-recipe dapo/dapo_ray_trainer.py last changed in"] = RECIPE_FILE_COMMIT
    return v


def run_case(H, case, work, seed, recipe_root):
    spec = CASE_SPECS[case]
    if spec["trainer"] == "legacy":
        cfg, out_dir, rows, extras = run_legacy(H, case, work, seed, spec)
    elif spec["trainer"] == "v1":
        cfg, out_dir, rows, extras = run_v1(H, case, work, seed, spec)
    else:
        cfg, out_dir, rows, extras = run_recipe(H, case, work, seed, spec, recipe_root)
    files = sorted({r["file"] for r in rows}, key=lambda f: int(os.path.basename(f).split(".")[0]))
    dumped = check_dump(case, spec, out_dir, rows)
    penalised = sum(1 for r in rows if r.get("overlong_reward", 0) < 0)
    settings = {
        "trainer": spec["trainer"],
        "reward_manager": "dapo (verl/experimental/reward_loop/reward_manager/dapo.py)",
        "compute_score": (
            "verl.utils.reward_score.default_compute_score -> "
            + (
                "math_dapo.compute_score"
                if spec["data_source"] == "math_dapo"
                else "gsm8k.compute_score"
            )
            if spec["reward_fn"] is None
            else f"tools/dumps/verl_dapo.py:{spec['reward_fn']}"
        ),
        "data_source": spec["data_source"],
        "reward_kwargs": {
            "overlong_buffer_cfg": dict(spec["overlong"]),
            "max_resp_len": MAX_RESPONSE_LENGTH,
        },  # fmt: skip
        "max_response_length": MAX_RESPONSE_LENGTH,
        "overlong_penalty": describe(case, spec),
        "n": N,
        "train_batch_size": PROMPTS_PER_STEP,
        "steps": STEPS,
        "balance_batch": True,
        "dp_size": 2,
        "agent_loop_workers": 2,
        "adv_estimator": "grpo",
        "grpo": {"epsilon": 1e-6, "norm_adv_by_std_in_grpo": True},
        "prompt_length": 40,
    }
    if spec["trainer"] == "recipe":
        settings["filter_groups"] = spec["filter_groups"] or {"enable": False}
        settings["gen_batch_size"] = spec["gen_batch_size"]
    truth = {
        "made_by": "tools/dumps/verl_dapo.py",
        "framework": "verl 0.9.1" + (" + verl-recipe dapo" if spec["trainer"] == "recipe" else ""),
        "versions": versions(H, spec),
        "case": case,
        "description": DESCRIPTIONS[case],
        "row_fields": ROW_FIELDS,
        "settings": settings,
        "seed": seed,
        "files": {
            f: {
                "lines": len(H.lines_of(os.path.join(out_dir, f))),
                "json_types": H.json_types(os.path.join(out_dir, f)),
            }
            for f in files
        },
        "rows_penalised": penalised,
        "dumped_score_is": dumped["score"],
        "rows": rows,
        "verl_internals_per_step": {str(k): v for k, v in extras.items()},
    }
    return out_dir, truth


ROW_FIELDS = {
    "score": "verl's trained reward: token_level_scores.sum(-1) (rm_scores, float32) of the row, "
    "what compute_advantage used",
    "raw_score": "what compute_score returned, as verl kept it in the batch: the dict's 'score' "
    "(math_dapo, compute_score_fmt) or the float (copied to 'acc' by the DAPO manager)",
    "response_length": "response_mask.sum(): the L of the overlong formula (DAPORewardManager "
    "counts attention_mask over the response, the same tokens)",
    "grpo_advantage": "verl's compute_advantage, adv_estimator=grpo, norm_adv_by_std_in_grpo=True, "
    "grouped by verl's uid (first response token's value)",
    "rloo_advantage": "the same with adv_estimator=rloo",
}


def _d(text):
    """A description written as a wrapped paragraph, stored as one line."""
    return " ".join(text.split())


_COMMON_TEXT = (
    "2 steps x 6 prompts x n=4 (24 rows per file), balance_batch=True with 2 DP ranks (rows of a "
    "prompt scattered through the file, no uid in the legacy dump: truth.json has verl's uid per "
    "line). reward.reward_manager.name=dapo, max_response_length=24; responses of 4 to 24 tokens "
    "(the <|im_end|> counted; truth.json response_length), longer ones cut at 24."
)
_PEN_TEXT = (
    "Overlong buffer on (len=12, penalty_factor=1.0, max_resp_len=24): verl trains on "
    "rm_scores = float32(score + overlong_reward), overlong_reward = min(-(L - 12) / 12, 0) for a "
    "response of L tokens (a float32 0-dim tensor when L >= 12, the int 0 otherwise)."
)

DESCRIPTIONS = {
    "dapo_dict_logged": _d(
        f"""Legacy trainer (RayPPOTrainer fit replayed), verl's math_dapo.compute_score through
        default_compute_score (data_source 'math_dapo'): {{score: 1.0 / -1.0, acc: bool, pred:
        str}}. {_PEN_TEXT} overlong_buffer_cfg.log=true, so the manager adds 'overlong_reward'
        (float) and 'overlong' (bool) to reward_extra_info. _write_generations lets every extra
        key overwrite the base columns, so the file's 'score' is math_dapo's UNPENALISED score
        (float, always 1.0 or -1.0), not what verl trained on: trained reward =
        float32(score + overlong_reward) exactly, on every row. {_COMMON_TEXT}"""
    ),
    "dapo_dict_unlogged": _d(
        f"""Same rollouts as dapo_dict_logged (same seed and script) with
        overlong_buffer_cfg.log=false: the penalty is applied to the trained reward but written
        nowhere. The file's 'score' is math_dapo's unpenalised score (overwritten by the dict's
        'score' key), 'acc' bool and 'pred' str; no 'overlong_reward' / 'overlong' columns. The
        trained reward can only be rebuilt from the response's token count, which the dump does
        not hold (only its text). {_PEN_TEXT} {_COMMON_TEXT}"""
    ),
    "dapo_float_logged": _d(
        f"""Legacy trainer, verl's gsm8k.compute_score through default_compute_score
        (data_source 'openai/gsm8k'): a number (1.0 right after '####', else 0), made float by
        default_compute_score. The DAPO manager stores a non-dict result as reward_extra_info
        'acc' (float, the raw score), so no 'score' extra overwrites the base column: the file's
        'score' is token_level_scores.sum(-1), the PENALISED reward verl trained on; 'acc' holds
        the raw score, 'overlong_reward' (float) and 'overlong' (bool) the penalty: score ==
        float32(acc + overlong_reward). {_PEN_TEXT} {_COMMON_TEXT}"""
    ),
    "dapo_float_unlogged": _d(
        f"""As dapo_float_logged (same rollouts) with overlong_buffer_cfg.log=false: 'score' is
        the penalised trained reward, 'acc' the raw gsm8k score, no overlong columns.
        {_PEN_TEXT} {_COMMON_TEXT}"""
    ),
    "dapo_dict_extra_keys": _d(
        f"""Control: reward_manager=dapo with the overlong buffer OFF (the recipe yaml's
        defaults enable=False, len=0, penalty_factor=0.0, log=False), and our compute_score_fmt
        returning {{score, acc, fmt}} (score 1.0 right, 0.1 format but wrong, 0.0 no answer;
        acc bool; fmt 1.0/0.0). The file's 'score' is the dict's score (Python float, e.g. 0.1),
        the trained reward is float32 of the same number (0.10000000149011612): equal up to
        float32 rounding. Same rollouts as dapo_dict_logged. {_COMMON_TEXT}"""
    ),
    "v1_dapo_dict_logged": _d(
        f"""V1 trainer (trainer.use_v1=true, sync), the same DAPO settings as dapo_dict_logged
        (math_dapo dict, log=true). PPOTrainer._log_rollout_data writes only input, output, gts,
        score = rm_scores.sum() (the PENALISED trained reward), step and uid
        ('{{prompt uuid}}_{{session}}_{{index}}', rows sorted by it); the reward extras (score,
        acc, pred, overlong_reward, overlong) stay in TransferQueue and are not dumped.
        {_PEN_TEXT} 2 steps x 6 prompts x n=4."""
    ),
    "recipe_dapo_dict_logged": _d(
        f"""verl-recipe's DAPO trainer (RayDAPOTrainer.fit of dapo/dapo_ray_trainer.py, run
        unchanged on verl 0.9.1), filter_groups off, gen_batch_size = train_batch_size = 6,
        math_dapo dict, log=true. The recipe takes reward_extra_infos_dict from extract_reward
        BEFORE _balance_batch reorders the batch, and passes that dict to _log_rollout_data: the
        extra columns (score, acc, pred, overlong_reward, overlong) are written in the
        pre-balance (generation) order while input/output/gts are in the balanced order. So the
        file's 'score' of line i is the unpenalised math_dapo score of ANOTHER line's response
        (truth.json 'extra_columns_from_line'), and 'acc'/'pred'/'overlong_reward' of line i do not
        describe line i's output either. truth.json 'score' is what verl trained on for the
        row's own response. {_PEN_TEXT} {_COMMON_TEXT}"""
    ),
    "recipe_dapo_filter_groups": _d(
        f"""verl-recipe's RayDAPOTrainer.fit with dynamic sampling as in the recipe's scripts:
        algorithm.filter_groups.enable=true, metric=acc, data.gen_batch_size = 3 x
        train_batch_size (18 prompts x n=4 = 72 rows generated per step, groups whose acc is all
        equal dropped, the kept rows cut to 6 x 4 = 24). reward_extra_infos_dict still has 72
        entries per key, and _write_generations keeps an extra only when its length equals the
        row count: all extras are dropped. The file holds input, output, gts, score = the
        PENALISED trained reward (token_level_scores.sum(-1), aligned with its row) and step;
        the penalty is nowhere. {_PEN_TEXT} {_COMMON_TEXT}"""
    ),
}


def check_dump(case, spec, out_dir, rows):
    """The relation between each written line and verl's numbers for that row, asserted."""
    import numpy as np

    def f32(x):
        return float(np.float32(x))

    kinds = {}
    for r in rows:
        with open(os.path.join(out_dir, r["file"])) as fh:
            d = json.loads(fh.read().splitlines()[r["line"] - 1])
        if case == "recipe_dapo_dict_logged":
            same_file = [x for x in rows if x["file"] == r["file"]]
            src = same_file[r["extra_columns_from_line"] - 1]
            assert d["score"] == src["raw_score"] and d["overlong_reward"] == src["overlong_reward"]
            assert f32(f32(d["score"]) + f32(d["overlong_reward"])) == src["score"]
            kinds["score"] = "another line's unpenalised score (extra_columns_from_line)"
        elif spec["trainer"] in ("v1",) or "filter_groups" in case:
            assert d["score"] == r["score"] and "acc" not in d and "overlong_reward" not in d
            kinds["score"] = "trained reward (penalised)"
        elif "acc" in d and not isinstance(d["acc"], bool):  # float compute_score
            assert d["score"] == r["score"] and d["acc"] == r["raw_score"]
            kinds["score"] = "trained reward (penalised); acc = raw score"
        else:  # dict compute_score: its 'score' key overwrote the column
            assert d["score"] == r["raw_score"] and f32(d["score"]) == f32(r["raw_score"])
            kinds["score"] = (
                "compute_score's score (unpenalised; trained = float32 of it + penalty)"
            )
        if "overlong_reward" in d and case != "recipe_dapo_dict_logged":
            assert d["overlong_reward"] == r["overlong_reward"]
            assert d["overlong"] == (r["overlong_reward"] < 0)
            base = d["acc"] if not isinstance(d["acc"], bool) else d["score"]
            assert f32(f32(base) + f32(d["overlong_reward"])) == r["score"]
    return kinds


def write_fixture(case, out_dir, truth, dest_root):
    dest = os.path.join(dest_root, case)
    if os.path.exists(dest):
        shutil.rmtree(dest)
    for f in truth["files"]:
        os.makedirs(os.path.dirname(os.path.join(dest, f)), exist_ok=True)
        shutil.copyfile(os.path.join(out_dir, f), os.path.join(dest, f))
    # the layout of the other verl truth.json files, with one line per row to keep it small
    text = json.dumps({**truth, "rows": "@ROWS@"}, indent=1)
    rows = "[\n" + ",\n".join("  " + json.dumps(r) for r in truth["rows"]) + "\n ]"
    with open(os.path.join(dest, "truth.json"), "w") as fh:
        fh.write(text.replace('"@ROWS@"', rows) + "\n")


def main():
    ap = argparse.ArgumentParser(description="Write real verl 0.9.1 DAPO dumps as advcli fixtures.")
    ap.add_argument("outdir", help="scratch folder; each case runs in OUTDIR/<case>")
    ap.add_argument(
        "--fixtures",
        default=os.path.join(
            os.path.dirname(os.path.dirname(_HERE)), "tests", "fixtures", "real", "verl"
        ),
    )
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--recipe", default="/tmp/fw/verl-recipe", help="verl-recipe checkout")
    args = ap.parse_args()
    H = load_helpers()
    for case in args.cases.split(","):
        work = os.path.join(args.outdir, case)
        if os.path.exists(work):
            shutil.rmtree(work)
        os.makedirs(work)
        out_dir, truth = run_case(H, case, work, SEED, args.recipe)  # same script everywhere
        write_fixture(case, out_dir, truth, args.fixtures)
        print(
            f"[verl_dapo.py] {case}: "
            + ", ".join(f"{f} ({v['lines']} lines)" for f, v in truth["files"].items())
            + f", {truth['rows_penalised']} of {len(truth['rows'])} rows penalised"
        )


if __name__ == "__main__":
    main()
