"""Write real verl 0.9.1 rollout and validation dumps (`{dir}/{step}.jsonl`) as test fixtures.

Made with verl 0.9.1 (PyPI, `pip install --no-deps verl==0.9.1`), torch 2.13.0+cpu, transformers
5.10.4, tokenizers 0.22.2, tensordict 0.15.3, numpy 2.4.6, TransferQueue 0.1.11 (only imported; its
store is replaced, see below), Python 3.11, on CPU, offline, no Ray cluster, no model download.

Run (from the repository root, with the framework venv, never as part of CI):

    /tmp/fw/verl/bin/python tools/dumps/verl.py OUTDIR [--fixtures DIR]

The venv: `python3 -m venv /tmp/fw/verl; /tmp/fw/verl/bin/pip install torch==2.13.0;
pip install --no-deps verl==0.9.1 TransferQueue==0.1.11; pip install tensordict ray omegaconf
codetiming torchdata orjson pillow peft cachetools uvicorn fastapi datasets hydra-core aiohttp
pyzmq msgspec prometheus_client "transformers>=5.5.3,<5.11,!=5.6.0"`.

Every case is written under OUTDIR/<case>/ by verl's own writer and copied unchanged to
`tests/fixtures/real/verl/<case>/` (or `--fixtures DIR/<case>/`) with a `truth.json` beside it.
Two runs write identical files (uuid4 seeded, numpy, torch, python random seeded; the agent-loop
event loop uses a one-thread default executor so the order of awaits is fixed).

What is verl's own code, unchanged (imported from the installed wheel):
- the dataset path: a parquet file read by `RLHFDataset` (verl.utils.dataset.rl_dataset), batched by
  `StatefulDataLoader` with verl's `collate_fn` and `create_rl_sampler` (shuffle, seeded) as
  `RayPPOTrainer._create_dataloader` does;
- generation: `AgentLoopManager.generate_sequences` → `AgentLoopWorker.generate_sequences` →
  `SingleTurnAgentLoop.run` (chat template, Continuous Token builder) → `_agent_loop_postprocess`
  (padding, masks, position ids) → `_compute_score` → `_postprocess` (rm_scores, reward extra info
  arrays, `DataProto`) and `DataProto.concat` over the two agent-loop workers. For V1 the
  `AgentLoopWorkerTQ` class (verl/trainer/ppo/v1/agent_loop_tq.py) runs instead: its
  `generate_sequences`/`_run_prompt`/`_agent_loop_postprocess` build the `{uid}_{session}_{index}`
  keys and copy the final reward onto every output of a multi-output loop;
- reward: `RewardLoopWorker.compute_score` (verl/experimental/reward_loop/reward_loop.py) with the
  reward manager that `load_reward_manager` picks for `reward.reward_manager.name=naive`, i.e. the
  reward-loop `NaiveRewardManager.run_single`, calling the `compute_score_*` functions of THIS file
  through `reward.custom_reward_function.path/name` (verl's `get_custom_reward_fn`);
- legacy trainer (`trainer.use_v1=false`, verl/trainer/ppo/ray_trainer.py): the body of `fit` is
  replayed step by step with verl's functions (`DataProto.from_single_dict`, uid per prompt,
  `_get_gen_batch`, `repeat(n, interleave=True)`, `union`, `compute_response_mask`,
  `RayPPOTrainer._balance_batch`, `extract_reward`, `compute_advantage`), then
  `RayPPOTrainer._log_rollout_data` → `_dump_generations` → `_write_generations` write the file;
  validation is `RayPPOTrainer._validate` itself, unchanged, called on the same object;
- V1 trainer (verl/trainer/ppo/v1/trainer_base.py): `PPOTrainer._compute_advantage` (→
  `compute_advantage_for_multi_trajectories`) and `PPOTrainer._log_rollout_data` →
  `_dump_generations` → `_write_generations`;
- advantages in truth.json: verl's `compute_advantage` (legacy) / `PPOTrainer._compute_advantage`
  (V1), which call `core_algos.compute_grpo_outcome_advantage` (epsilon 1e-6,
  norm_adv_by_std_in_grpo=True) and `compute_rloo_outcome_advantage`, grouped by verl's uid.

Stand-ins (not verl's code) and why:
- the trainer objects are made with `RayPPOTrainer.__new__` / `PPOTrainerSync.__new__` and carry
  only the attributes the called methods read (config, tokenizer, global_steps, dump executor,
  dataloader, rollout manager); `_get_dp_size` returns 2 (two data-parallel actor ranks, so
  `_balance_batch` really reorders rows); there are no actor/critic workers (no log-probs, no
  update);
- the LLM server: `ScriptedLLM.generate` returns scripted token ids (answers chosen by a seeded rng
  from the prompt text and the how-many-th request for it), in place of vLLM;
- Ray: agent-loop and reward-loop worker handles are in-process objects whose `.remote(...)`
  pickles arguments and results (as Ray would) and awaits the real method;
- TransferQueue (V1 only): an in-memory dict replaces `tq.init/kv_batch_put/async_kv_put/
  async_kv_batch_put/kv_batch_get/kv_clear`; fetched fields are packed with TransferQueue's own
  `AsyncSimpleStorageManager._pack_field_values` (nested jagged tensors / NonTensorStack); the
  replay buffer's `sample` is replaced by taking all keys of the step in put order (what
  `ReplayBuffer._materialize_batch` returns when every rollout finished);
- AgentLoopManagerTQ.generate_sequences `ray.get`s its workers: `LocalTQManager` chunks the batch
  the same way and awaits verl's `AgentLoopWorkerTQ` methods in process;
- model and tokenizer: built in code, never downloaded: a word-level `tokenizers` tokenizer (about
  80 words and numbers, `<pad> <eos> <bos> <unk> <|im_start|> <|im_end|>`, a two-line chat
  template) and a tiny `LlamaConfig` (no weights: nothing runs the model);
- the multi-output agent loop of `v1_compaction` (`CompactionAgentLoop` below) is ours: verl 0.9.1
  ships none; it returns two `AgentLoopOutput`s per rollout (before and after a "compaction").
"""

from __future__ import annotations

import os
import sys

# This file is called verl.py: never let it shadow the real `verl` package (its folder comes off
# sys.path once dumpkit, beside it, is imported).
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import dumpkit  # noqa: E402

dumpkit.leave_folder(__file__)

import argparse  # noqa: E402
import asyncio  # noqa: E402
import concurrent.futures  # noqa: E402
import copy  # noqa: E402
import json  # noqa: E402
import pickle  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import uuid  # noqa: E402
from decimal import Decimal  # noqa: E402

import numpy as np  # noqa: E402

# --------------------------------------------------------------------------------------------
# Reward functions (loaded by verl through reward.custom_reward_function.path = this file).
# They must stay importable without side effects: verl executes this file as a module.
# --------------------------------------------------------------------------------------------

_NUM = re.compile(r"-?\d+")


def _last_number(text: str):
    found = _NUM.findall(text or "")
    return found[-1] if found else None


def compute_score_float(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Float reward: 1.0 right answer after '####', 0.1 right number without '####', else 0."""
    pred = _last_number(solution_str)
    if pred is None or pred != str(ground_truth):
        return 0.0
    return 1.0 if "####" in solution_str else 0.1


def compute_score_dict(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Dict reward ({"score", "acc", "pred"} plus two optional extras).

    - score: Decimal for a parsed answer (a grader that rounds with `decimal`), float 0.0 when no
      number was found. numpy keeps Decimals as objects, so the legacy writer's `default=str`
      turns these scores into strings ("0.02"); the float 0.0 rows stay numbers.
    - acc: Python bool. pred: str or None.
    - conf: numpy float32 or None (object column -> legacy writes "0.5" strings).
    - len_ratio: Python float or None (object column of plain floats -> stays numbers).
    """
    pred = _last_number(solution_str)
    n_words = len((solution_str or "").split())
    if pred is None:
        return {"score": 0.0, "acc": False, "pred": None, "conf": None, "len_ratio": None}
    right = pred == str(ground_truth)
    raw = (1.0 if right else 0.02) - (0.01 * max(0, n_words - 6))
    score = Decimal(str(round(raw, 2))).quantize(Decimal("0.01"))
    conf = np.float32(0.5 if "hmm" in solution_str else 0.75) if right else None
    return {"score": score, "acc": right, "pred": pred, "conf": conf, "len_ratio": n_words / 8.0}


def compute_score_val(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Validation reward: dict with plain Python types (score float, acc bool, pred str)."""
    pred = _last_number(solution_str)
    right = pred is not None and pred == str(ground_truth)
    return {"score": 1.0 if right else 0.0, "acc": right, "pred": pred if pred is not None else ""}


# --------------------------------------------------------------------------------------------
# Everything below runs only as a script.
# --------------------------------------------------------------------------------------------

SEED = 1234
WORDS_TEXT = (
    "system user assistant you are a helpful math tutor . what is plus minus times ? answer "
    "with #### then the number . let me think hmm i guess so the is ok sure it summary :"
)
WORDS = WORDS_TEXT.split()
NUMBERS = [str(i) for i in range(0, 41)]
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }} {{ m['content'] }}<|im_end|> {% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant {% endif %}"
)
SYSTEM = "you are a helpful math tutor ."

CASES = [
    "legacy",
    "legacy_dict_scores",
    "legacy_repeated_prompt",
    "v1",
    "v1_compaction",
    "validation",
    "actor_batch",
]


def seeded_uuid4_factory(seed):
    rng = random.Random(seed)

    def _uuid4():
        return uuid.UUID(int=rng.getrandbits(128), version=4)

    return _uuid4


def seed_all(seed):
    dumpkit.seed_all(seed)
    uuid.uuid4 = seeded_uuid4_factory(seed)


def build_model_dir(path):
    """Tiny Llama config in `path` (no weights: nothing here runs the model) and a word-level
    tokenizer in `path/tokenizer` (its own folder: with a config.json of a model type that has its
    own tokenizer class beside it, transformers 5 would rebuild it as that class). Llama, not
    Qwen2: for model_type qwen2 verl picks its Qwen Continuous Token builder, which needs "\n" to
    be one token; the word-level tokenizer drops whitespace, so the generic builder is used."""
    from transformers import LlamaConfig

    vocab = {tok: i for i, tok in enumerate(SPECIALS + list(dict.fromkeys(WORDS + NUMBERS)))}
    fast = dumpkit.word_level_tokenizer(vocab, SPECIALS, padding_side="left")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(os.path.join(path, "tokenizer"))
    cfg = dumpkit.tiny_model_config(
        LlamaConfig, vocab, max_position_embeddings=256, architectures=["LlamaForCausalLM"]
    )
    cfg.save_pretrained(path)
    return path


OPS = {"plus": lambda a, b: a + b, "minus": lambda a, b: a - b, "times": lambda a, b: a * b}


def make_rows(questions, split):
    rows = []
    for i, (a, op, b) in enumerate(questions):
        rows.append(
            {
                "data_source": "toy_math",
                "prompt": [
                    {"role": "system", "content": SYSTEM},
                    {
                        "role": "user",
                        "content": f"what is {a} {op} {b} ? answer with #### then the number .",
                    },
                ],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(OPS[op](a, b))},
                "extra_info": {"split": split, "index": i},
            }
        )
    return rows


def write_parquet(rows, path):
    import pandas as pd

    pd.DataFrame(rows).to_parquet(path)
    return path


# ----------------------------------------------------------------------------- config


def make_config(
    model_dir,
    tok_dir,
    *,
    case,
    n,
    train_bs,
    val_n=1,
    use_v1=False,
    balance_batch=True,
    shuffle=True,
    score_fn="compute_score_float",
    agent_loop="single_turn_agent",
    adv="grpo",
    response_length=16,
):
    import verl
    from omegaconf import OmegaConf, open_dict
    from verl.experimental.reward_loop.reward_loop import migrate_legacy_reward_impl

    base = os.path.join(
        os.path.dirname(verl.__file__), "trainer/config/_generated_ppo_trainer.yaml"
    )
    cfg = OmegaConf.load(base)
    with open_dict(cfg):
        m = cfg.actor_rollout_ref.model
        m.path = model_dir
        m.tokenizer_path = tok_dir
        r = cfg.actor_rollout_ref.rollout
        r.name = "vllm"
        r.n = n
        r.prompt_length = 40
        r.response_length = response_length
        r.calculate_log_probs = False
        r.agent.num_workers = 2
        r.agent.default_agent_loop = agent_loop
        r.val_kwargs.n = val_n
        r.val_kwargs.do_sample = val_n > 1
        r.val_kwargs.temperature = 1.0 if val_n > 1 else 0
        d = cfg.data
        d.train_files = None
        d.val_files = None
        d.max_prompt_length = 40
        d.max_response_length = response_length
        d.train_batch_size = train_bs
        d.shuffle = shuffle
        d.seed = SEED
        d.dataloader_num_workers = 0
        d.return_raw_chat = True
        cfg.custom_reward_function.path = os.path.abspath(__file__)
        cfg.custom_reward_function.name = score_fn
        cfg.reward.num_workers = 1
        cfg.algorithm.adv_estimator = adv
        cfg.algorithm.norm_adv_by_std_in_grpo = True
        t = cfg.trainer
        t.balance_batch = balance_batch
        t.use_v1 = use_v1
        t.logger = ["console"]
        t.n_gpus_per_node = 2
        t.device = "cpu"
        t.project_name = "advcli_fixtures"
        t.experiment_name = case
    cfg = migrate_legacy_reward_impl(cfg)
    return cfg


# ----------------------------------------------------------------------------- stand-ins


def _ray_copy(obj):
    """What a trip through Ray's object store does to arguments and results: a pickled copy."""
    return pickle.loads(pickle.dumps(obj))


class _RemoteMethod:
    def __init__(self, fn):
        self._fn = fn

    def remote(self, *args, **kwargs):
        async def call():
            out = await self._fn(*_ray_copy(args), **_ray_copy(kwargs))
            return _ray_copy(out)

        return call()


class LocalActor:
    """In-process stand-in for a Ray actor handle: `handle.method.remote(...)` awaits the method."""

    def __init__(self, obj):
        self._obj = obj

    def __getattr__(self, name):
        return _RemoteMethod(getattr(self._obj, name))


class ScriptedLLM:
    """Stand-in for verl's LLM server client: returns scripted response token ids.

    The answer for a request depends only on the prompt text, how many requests for that prompt
    came before in this step, and the seed, so reruns give the same file.
    """

    def __init__(self, tokenizer, seed, log_probs=False):
        self.tokenizer = tokenizer
        self.seed = seed
        self.log_probs = log_probs  # also return a (scripted) log-prob per token
        self.counts = {}
        self.step = 0

    def new_step(self, step):
        self.step = step
        self.counts = {}

    def _answer(self, text, k):
        m = re.search(r"what is (\d+) (plus|minus|times) (\d+)", text)
        right = OPS[m.group(2)](int(m.group(1)), int(m.group(3))) if m else 0
        rng = random.Random(f"{self.seed}|{self.step}|{text}|{k}")
        wrong = right + rng.choice([-2, -1, 1, 2])
        kind = rng.choice(
            ["right", "right", "right_noformat", "wrong", "wrong", "none", "hmm_right"]
        )
        if "summary" in text:  # second segment of a compacted rollout
            kind = rng.choice(["right", "wrong", "right"])
        return {
            "right": f"let me think . #### {right}",
            "right_noformat": f"the answer is {right} .",
            "wrong": f"i guess #### {wrong}",
            "none": "hmm i guess so",
            "hmm_right": f"hmm let me think . it is ok . #### {right}",
        }[kind]

    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        text = self.tokenizer.decode(prompt_ids, skip_special_tokens=True)
        k = self.counts.get(text, 0)
        self.counts[text] = k + 1
        ids = self.tokenizer.encode(self._answer(text, k), add_special_tokens=False)
        ids = ids + [self.tokenizer.convert_tokens_to_ids("<|im_end|>")]
        log_probs = None
        if self.log_probs:
            rng = random.Random(f"{self.seed}|{self.step}|{text}|{k}|logprobs")
            log_probs = [round(-3.0 * rng.random(), 4) for _ in ids]
        return TokenOutput(
            token_ids=ids, log_probs=log_probs, stop_reason="completed", num_preempted=0
        )


def build_workers(cfg, llm, worker_cls=None):
    """Reward-loop worker and two agent-loop workers (verl's classes) behind LocalActor handles."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    reward_worker = RewardLoopWorker(cfg, None)
    reward_handles = [LocalActor(reward_worker)]
    cls = worker_cls or AgentLoopWorker
    workers = [
        cls(cfg, llm, None, reward_handles)
        for _ in range(cfg.actor_rollout_ref.rollout.agent.num_workers)
    ]
    return reward_handles, workers


def make_rollout_manager(cfg, llm, reward_handles, workers):
    from verl.experimental.agent_loop.agent_loop import AgentLoopManager

    mgr = AgentLoopManager(cfg, llm, None, reward_handles)
    mgr.agent_loop_workers = [LocalActor(w) for w in workers]
    return mgr


def make_dataloader(cfg, rows, tokenizer, tmp, name, train=True):
    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler
    from verl.utils.dataset.rl_dataset import collate_fn

    path = write_parquet(rows, os.path.join(tmp, f"{name}.parquet"))
    ds = create_rl_dataset([path], cfg.data, tokenizer, None, is_train=train)
    if train:
        sampler = create_rl_sampler(cfg.data, ds)
        return StatefulDataLoader(
            dataset=ds,
            batch_size=cfg.data.train_batch_size,
            num_workers=0,
            drop_last=True,
            collate_fn=collate_fn,
            sampler=sampler,
        )
    return StatefulDataLoader(
        dataset=ds,
        batch_size=len(ds),
        num_workers=0,
        shuffle=False,
        drop_last=False,
        collate_fn=collate_fn,
    )


# ----------------------------------------------------------------------------- legacy trainer


def legacy_trainer(cfg, tokenizer, rollout_manager, val_dataloader=None):
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    tr = RayPPOTrainer.__new__(RayPPOTrainer)
    tr.config = cfg
    tr.tokenizer = tokenizer
    tr.async_rollout_manager = rollout_manager
    tr.val_dataloader = val_dataloader
    tr.use_rm = False
    tr.global_steps = 0
    tr._get_dp_size = lambda worker_group, role: 2  # two actor DP ranks
    tr.actor_rollout_wg = None
    tr._init_dump_executor()
    return tr


def grpo_and_rloo(batch, cfg, n=None):
    """verl's own `compute_advantage` (ray_trainer), GRPO and RLOO, on copies of the batch."""
    from verl.trainer.ppo.ray_trainer import compute_advantage

    out = {}
    for est in ("grpo", "rloo"):
        b = copy.deepcopy(batch)
        b = compute_advantage(
            b,
            adv_estimator=est,
            gamma=cfg.algorithm.gamma,
            lam=cfg.algorithm.lam,
            num_repeat=n or cfg.actor_rollout_ref.rollout.n,
            norm_adv_by_std_in_grpo=True,
            config=cfg.algorithm,
        )
        out[est] = _row_scalar(b.batch["advantages"], b.batch["response_mask"])
    return out


def _row_scalar(adv, mask):
    import torch

    first = mask.argmax(dim=1)
    vals = adv[torch.arange(adv.shape[0]), first]
    return [float(v) for v in vals]


async def legacy_batch(tr, dataloader_iter, llm, step):
    """The body of RayPPOTrainer.fit for one step, up to the reward (no actor/critic): the
    batch, its reward extras, the timings and the uid order before _balance_batch."""
    import torch
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import compute_response_mask, extract_reward

    cfg = tr.config
    tr.global_steps = step
    llm.new_step(step)
    metrics, timing_raw = {}, {}
    batch_dict = next(dataloader_iter)
    batch = DataProto.from_single_dict(batch_dict)
    batch.meta_info["temperature"] = cfg.actor_rollout_ref.rollout.temperature
    batch.non_tensor_batch["uid"] = np.array(
        [str(uuid.uuid4()) for _ in range(len(batch.batch))], dtype=object
    )
    gen_batch = tr._get_gen_batch(batch)
    gen_batch.meta_info["global_steps"] = step
    n = cfg.actor_rollout_ref.rollout.n
    gen_batch_output = gen_batch.repeat(repeat_times=n, interleave=True)
    gen_out = await tr.async_rollout_manager.generate_sequences(gen_batch_output)
    gen_out.meta_info.pop("timing", None)
    batch = batch.repeat(repeat_times=n, interleave=True)
    batch = batch.union(gen_out)
    if "response_mask" not in batch.batch.keys():  # noqa: SIM118 (as fit writes it)
        batch.batch["response_mask"] = compute_response_mask(batch)
    order_before = list(batch.non_tensor_batch["uid"])
    if cfg.trainer.balance_batch:
        tr._balance_batch(batch, metrics=metrics)
    batch.meta_info["global_token_num"] = torch.sum(batch.batch["attention_mask"], dim=-1).tolist()
    reward_tensor, reward_extra_infos_dict = extract_reward(batch)
    batch.batch["token_level_scores"] = reward_tensor
    if reward_extra_infos_dict:
        batch.non_tensor_batch.update({k: np.array(v) for k, v in reward_extra_infos_dict.items()})
    batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
    return batch, reward_extra_infos_dict, timing_raw, order_before


async def legacy_step(tr, dataloader_iter, llm, step, rollout_dir):
    """The body of RayPPOTrainer.fit for one step, up to the rollout dump (no actor/critic)."""
    batch, reward_extra_infos_dict, timing_raw, order_before = await legacy_batch(
        tr, dataloader_iter, llm, step
    )
    adv = grpo_and_rloo(batch, tr.config)
    tr._log_rollout_data(batch, reward_extra_infos_dict, timing_raw, rollout_dir)
    tr._shutdown_dump_executor()
    tr._init_dump_executor()
    uids = list(batch.non_tensor_batch["uid"])
    scores = [float(x) for x in batch.batch["token_level_scores"].sum(-1)]
    rows = [
        {"uid": u, "score": s, "grpo_advantage": g, "rloo_advantage": r}
        for u, s, g, r in zip(uids, scores, adv["grpo"], adv["rloo"], strict=True)
    ]
    extra = {
        "uid_order_before_balance_batch": order_before,
        "reward_extra_info_dtypes": {k: str(v.dtype) for k, v in reward_extra_infos_dict.items()},
    }
    return rows, extra


# ----------------------------------------------------------------------------- V1 trainer


class FakeTQ:
    """In-memory stand-in for the TransferQueue calls verl's V1 code makes (one process, no Ray).

    Samples are stored per key as {field: value}; `kv_batch_get` packs the selected fields with
    TransferQueue's own `AsyncSimpleStorageManager._pack_field_values`, as its SimpleStorage does.
    """

    def __init__(self):
        self.data = {}  # partition -> {key: {field: value}}
        self.tags = {}  # partition -> {key: tag}

    def install(self):
        import transfer_queue as tq

        for name in (
            "init",
            "kv_batch_put",
            "kv_put",
            "async_kv_put",
            "async_kv_batch_put",
            "kv_batch_get",
            "kv_clear",
        ):
            setattr(tq, name, getattr(self, name))

    def init(self, conf=None):
        return None

    @staticmethod
    def _split(fields, n):
        import torch

        per = [dict() for _ in range(n)]
        if fields is None:
            return per
        for k in list(fields.keys()):
            v = fields.get(k)
            if isinstance(v, torch.Tensor):
                vals = list(v.unbind()) if v.is_nested else [v[i] for i in range(n)]
            else:
                vals = v.tolist()
            for i in range(n):
                per[i][k] = vals[i]
        return per

    def _put(self, keys, partition_id, fields, tags):
        from transfer_queue import KVBatchMeta

        data = self.data.setdefault(partition_id, {})
        tagd = self.tags.setdefault(partition_id, {})
        per = self._split(fields, len(keys))
        for i, key in enumerate(keys):
            data.setdefault(key, {}).update(per[i])
            tagd.setdefault(key, {}).update((tags[i] if tags else None) or {})
        return KVBatchMeta(
            keys=list(keys),
            tags=[dict(tagd[k]) for k in keys],
            partition_id=partition_id,
            fields=list(fields.keys()) if fields is not None else None,
        )

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        return self._put(keys, partition_id, fields, tags)

    def kv_put(self, key, partition_id, fields=None, tag=None):
        return self._put([key], partition_id, None, [tag])

    async def async_kv_put(self, key, partition_id, fields=None, tag=None):
        return self._put([key], partition_id, None, [tag])

    async def async_kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        return self._put(keys, partition_id, fields, tags)

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        from tensordict import TensorDict
        from transfer_queue.storage.managers.simple_storage_manager import AsyncSimpleStorageManager

        rows = [self.data[partition_id][k] for k in keys]
        fields = select_fields or list(rows[0].keys())
        out = {}
        for f in fields:
            if all(
                f in r for r in rows
            ):  # fields no worker wrote (old_log_probs, values...) are absent
                out[f] = AsyncSimpleStorageManager._pack_field_values([r[f] for r in rows])
        return TensorDict(out, batch_size=len(keys))

    def kv_clear(self, keys, partition_id):
        for k in [keys] if isinstance(keys, str) else keys:
            self.data.get(partition_id, {}).pop(k, None)
            self.tags.get(partition_id, {}).pop(k, None)

    def sample_keys(self, partition_id, uids):
        """ReplayBuffer._materialize_batch: the sample keys of the chosen prompts, in put order."""
        from transfer_queue import KVBatchMeta

        keys = [k for k in self.data[partition_id] if k.split("_")[0] in set(uids) and "_" in k]
        return KVBatchMeta(
            partition_id=partition_id,
            keys=keys,
            tags=[dict(self.tags[partition_id][k]) for k in keys],
        )


class LocalTQManager:
    """Stand-in for AgentLoopManagerTQ.generate_sequences (which ray.get()s its workers): chunk the
    prompts as it does, run verl's AgentLoopWorkerTQ.generate_sequences on each chunk, and wait
    for the background agent loops they spawn."""

    def __init__(self, workers, loop):
        self.workers = workers
        self.loop = loop

    def generate_sequences(self, prompts):
        chunks = prompts.chunk(len(self.workers))

        async def go():
            await asyncio.gather(
                *[
                    w.generate_sequences(_ray_copy(c))
                    for w, c in zip(self.workers, chunks, strict=False)
                ]
            )
            while any(w.background_tasks for w in self.workers):
                await asyncio.gather(*[t for w in self.workers for t in list(w.background_tasks)])

        self.loop.run_until_complete(go())


def define_compaction_loop():
    """A multi-output agent loop (ours; verl 0.9.1 has none): the rollout is generated in two
    segments; after the first, the context is "compacted" to the question plus a summary line,
    and the second segment answers from there. Returns both outputs; verl's AgentLoopWorkerTQ
    writes them as `{uid}_{session}_0` and `{uid}_{session}_1` and gives both the final reward."""
    from uuid import uuid4

    from verl.experimental.agent_loop.agent_loop import (
        AgentLoopBase,
        AgentLoopOutput,
        _agent_loop_registry,
    )

    class CompactionAgentLoop(AgentLoopBase):
        async def run(self, sampling_params, **kwargs):
            messages = list(kwargs["raw_prompt"])
            outputs = []
            for segment in range(2):
                prompt_ids = await self.ct_build_initial_tokens(messages)
                out = await self.server_manager.generate(
                    request_id=uuid4().hex, prompt_ids=prompt_ids, sampling_params=sampling_params
                )
                outputs.append(
                    AgentLoopOutput(
                        prompt_ids=prompt_ids,
                        response_ids=out.token_ids[: self.rollout_config.response_length],
                        response_mask=[1]
                        * len(out.token_ids[: self.rollout_config.response_length]),
                        num_turns=2,
                        metrics={},
                        extra_fields={"turn_scores": [], "tool_rewards": []},
                    )
                )
                if segment == 0:
                    text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
                    messages = messages[:2] + [
                        {"role": "user", "content": "summary : " + " ".join(text.split()[:3])}
                    ]
            return outputs

    CompactionAgentLoop.__module__ = __name__
    CompactionAgentLoop.__qualname__ = "CompactionAgentLoop"
    globals()["CompactionAgentLoop"] = CompactionAgentLoop
    _agent_loop_registry["compaction_agent"] = {"_target_": f"{__name__}.CompactionAgentLoop"}


def v1_trainer(cfg, tokenizer, manager, dataloader):
    from verl.trainer.ppo.v1.trainer_sync import (
        PPOTrainerSync,
    )  # trainer.v1.trainer_mode=sync (default)

    tr = PPOTrainerSync.__new__(PPOTrainerSync)
    tr.config = cfg
    tr.tokenizer = tokenizer
    tr.agent_loop_manager = manager
    tr.train_dataloader = dataloader
    tr.train_dataloader_it = None
    tr.trainer_mode = "sync"
    tr.global_steps = 0
    tr._init_dump_executor()
    return tr


def v1_step(tr, fake_tq, llm, step, rollout_dir, rloo_cfg):
    """PPOTrainer.fit/step/_step_once for one step, as far as the dump (no actor/critic)."""
    import torch

    tr.global_steps = step
    llm.new_step(step)
    batch = tr._next_train_batch()  # dataloader batch + uuid4 per prompt
    uids = list(batch["uid"])
    tr._submit_batch_to_rollout(batch)  # kv_batch_put of the prompts, then the agent loops
    kv = fake_tq.sample_keys("train", uids)  # ReplayBuffer.sample
    n = tr.config.actor_rollout_ref.rollout.n
    sessions = {k.rsplit("_", 1)[0] for k in kv.keys}
    assert len(sessions) == n * len(uids), (
        f"agent loops failed: {len(sessions)} sessions for {len(uids)} prompts"
    )
    metrics, timing_raw = {}, {}
    adv = {}
    for name, c in (("grpo", tr.config), ("rloo", rloo_cfg)):
        saved = tr.config
        tr.config = c
        tr._compute_advantage(kv, metrics=metrics)
        tr.config = saved
        got = fake_tq.kv_batch_get(kv.keys, "train", ["advantages"])["advantages"]
        adv[name] = {k: float(a[0]) for k, a in zip(kv.keys, got.unbind(), strict=True)}
    data = fake_tq.kv_batch_get(kv.keys, "train", ["rm_scores"])["rm_scores"]
    score = {
        k: float(torch.as_tensor(t).sum()) for k, t in zip(kv.keys, data.unbind(), strict=True)
    }
    tr._log_rollout_data(kv, timing_raw, rollout_dir)
    tr._shutdown_dump_executor()
    tr._init_dump_executor()
    fake_tq.kv_clear(kv.keys, "train")
    return kv.keys, score, adv


# ----------------------------------------------------------------------------- driver


def new_loop():
    loop = asyncio.new_event_loop()
    loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=1))
    asyncio.set_event_loop(loop)
    return loop


QUESTIONS = [
    (3, "plus", 4),
    (9, "minus", 5),
    (6, "times", 3),
    (12, "plus", 7),
    (8, "minus", 2),
    (5, "times", 4),
    (14, "plus", 9),
    (7, "times", 2),
]
REPEATED = [
    (3, "plus", 4),
    (3, "plus", 4),
    (9, "minus", 5),
    (6, "times", 3),
    (12, "plus", 7),
    (8, "minus", 2),
    (5, "times", 4),
    (14, "plus", 9),
]
VAL_QUESTIONS = [(2, "plus", 2), (10, "minus", 3), (4, "times", 4), (11, "plus", 5)]


def setup(case, work, seed, **cfg_kwargs):
    from transformers import AutoTokenizer

    seed_all(seed)
    loop = new_loop()
    model_dir = build_model_dir(os.path.join(work, "model"))
    tok_dir = os.path.join(model_dir, "tokenizer")
    cfg = make_config(model_dir, tok_dir, case=case, **cfg_kwargs)
    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    llm = ScriptedLLM(tokenizer, seed)
    return loop, cfg, tokenizer, llm


def lines_of(path):
    with open(path) as f:
        return f.read().splitlines()


def run_legacy_case(case, work, seed, *, score_fn, questions, shuffle=True, n=4, bs=4, steps=2):
    loop, cfg, tokenizer, llm = setup(
        case, work, seed, n=n, train_bs=bs, shuffle=shuffle, score_fn=score_fn
    )
    reward_handles, workers = build_workers(cfg, llm)
    mgr = make_rollout_manager(cfg, llm, reward_handles, workers)
    dl = make_dataloader(cfg, make_rows(questions, "train"), tokenizer, work, "train")
    tr = legacy_trainer(cfg, tokenizer, mgr)
    out_dir = os.path.join(work, "out")
    it = iter(dl)
    rows, extras = [], {}
    for step in range(1, steps + 1):
        step_rows, extra = loop.run_until_complete(
            legacy_step(tr, it, llm, step, os.path.join(out_dir, "rollout"))
        )
        assert len(lines_of(os.path.join(out_dir, "rollout", f"{step}.jsonl"))) == len(step_rows)
        for i, r in enumerate(step_rows):
            rows.append({"file": f"rollout/{step}.jsonl", "line": i + 1, **r})
        extras[step] = extra
    loop.close()
    return cfg, out_dir, rows, extras


def run_v1_case(case, work, seed, *, agent_loop, n=4, bs=4, steps=2):
    import verl.trainer.ppo.v1.agent_loop_tq as agent_loop_tq

    loop, cfg, tokenizer, llm = setup(
        case, work, seed, n=n, train_bs=bs, use_v1=True, agent_loop=agent_loop
    )
    fake_tq = FakeTQ()
    fake_tq.install()
    worker_cls = agent_loop_tq.AgentLoopWorkerTQ.__ray_actor_class__  # the class under @ray.remote
    reward_handles, workers = build_workers(cfg, llm, worker_cls=worker_cls)
    mgr = LocalTQManager(workers, loop)
    dl = make_dataloader(cfg, make_rows(QUESTIONS, "train"), tokenizer, work, "train")
    tr = v1_trainer(cfg, tokenizer, mgr, dl)
    rloo_cfg = copy.deepcopy(cfg)
    rloo_cfg.algorithm.adv_estimator = "rloo"
    out_dir = os.path.join(work, "out")
    rows, extras = [], {}
    for step in range(1, steps + 1):
        keys, score, adv = v1_step(
            tr, fake_tq, llm, step, os.path.join(out_dir, "rollout"), rloo_cfg
        )
        lines = lines_of(os.path.join(out_dir, "rollout", f"{step}.jsonl"))
        assert len(lines) == len(keys)
        for i, line in enumerate(lines):
            key = json.loads(line)["uid"]
            rows.append(
                {
                    "file": f"rollout/{step}.jsonl",
                    "line": i + 1,
                    "uid": key,
                    "prompt_uid": key.rsplit("_", 2)[0],
                    "score": score[key],
                    "grpo_advantage": adv["grpo"][key],
                    "rloo_advantage": adv["rloo"][key],
                }
            )
        extras[step] = {"keys_in_put_order": list(keys)}
    loop.close()
    return cfg, out_dir, rows, extras


def run_validation_case(case, work, seed, *, val_n=2, steps=(0, 2)):
    """Legacy `RayPPOTrainer._validate` itself, at step 0 (val_before_train) and at step 2."""
    import torch
    from verl import DataProto

    loop, cfg, tokenizer, llm = setup(
        case, work, seed, n=4, train_bs=4, val_n=val_n, score_fn="compute_score_val"
    )
    out_dir = os.path.join(work, "out")
    cfg.trainer.validation_data_dir = os.path.join(out_dir, "validation")
    cfg.trainer.log_val_generations = 0
    reward_handles, workers = build_workers(cfg, llm)
    mgr = make_rollout_manager(cfg, llm, reward_handles, workers)
    captured = []
    # AgentLoopManager.generate_sequences is @auto_await: called from the sync _validate it would
    # asyncio.run() a fresh loop; run the same coroutine on our loop instead (one-thread executor,
    # fixed order) and record what it returned.
    real = type(mgr).generate_sequences.__wrapped__

    def generate_and_record(prompts):
        out = loop.run_until_complete(real(mgr, prompts))
        captured.append(
            (
                list(prompts.non_tensor_batch["uid"]),
                out.batch["rm_scores"].clone(),
                out.batch["response_mask"].clone(),
            )
        )
        return out

    mgr.generate_sequences = generate_and_record
    val_dl = make_dataloader(
        cfg, make_rows(VAL_QUESTIONS, "test"), tokenizer, work, "val", train=False
    )
    tr = legacy_trainer(cfg, tokenizer, mgr, val_dataloader=val_dl)
    rows, extras = [], {}
    for step in steps:
        tr.global_steps = step
        llm.new_step(step)
        captured.clear()
        metrics = tr._validate()
        tr._shutdown_dump_executor()
        tr._init_dump_executor()
        uids = [u for c in captured for u in c[0]]
        rm = torch.cat([c[1] for c in captured])
        mask = torch.cat([c[2] for c in captured])
        b = DataProto.from_dict(
            tensors={"token_level_rewards": rm, "response_mask": mask},
            non_tensors={"uid": np.array(uids, dtype=object)},
        )
        adv = grpo_and_rloo(b, cfg, n=val_n)
        lines = lines_of(os.path.join(out_dir, "validation", f"{step}.jsonl"))
        assert len(lines) == len(uids)
        for i in range(len(uids)):
            rows.append(
                {
                    "file": f"validation/{step}.jsonl",
                    "line": i + 1,
                    "uid": uids[i],
                    "score": float(rm[i].sum()),
                    "grpo_advantage": adv["grpo"][i],
                    "rloo_advantage": adv["rloo"][i],
                }
            )
        extras[step] = {"val_metric_names": sorted(metrics)}
    loop.close()
    return cfg, out_dir, rows, extras


# ----------------------------------------------------------------------------- cases and truth


def versions():
    dists = (
        "verl",
        "torch",
        "transformers",
        "tokenizers",
        "tensordict",
        "numpy",
        "TransferQueue",
        "omegaconf",
        "datasets",
        "pandas",
        "pyarrow",
    )
    return {**dumpkit.installed_versions(dists), "python": platform.python_version()}


def json_types(path):
    """Which JSON types each key takes in a written file (to check e.g. that scores are strings)."""
    names = {
        str: "string",
        bool: "bool",
        int: "int",
        float: "float",
        type(None): "null",
        list: "list",
        dict: "object",
    }
    seen = {}
    for line in lines_of(path):
        for k, v in json.loads(line).items():
            seen.setdefault(k, set()).add(names[type(v)])
    return {k: sorted(v) for k, v in seen.items()}


def _d(text):
    """A description written as a wrapped paragraph, stored as one line."""
    return " ".join(text.split())


COMMON = {
    "reward_loop": "reward.reward_manager.name=naive (reward-loop NaiveRewardManager), "
    "custom_reward_function = tools/dumps/verl.py:<reward_fn>",
    "agent_loop_workers": 2,
    "dp_size": 2,
    "grpo": {"epsilon": 1e-6, "norm_adv_by_std_in_grpo": True},
    "prompt_length": 40,
    "response_length": 16,
}

CASE_SPECS = {
    "legacy": dict(
        kind="legacy",
        score_fn="compute_score_float",
        questions="QUESTIONS",
        shuffle=True,
        description=_d(
            """Legacy trainer (trainer.use_v1=false): 2 steps, 4 prompts x n=4, balance_batch=True
            with 2 DP ranks, so each step's 16 rows are reordered by verl's _balance_batch and a
            prompt's rows are scattered through the file. compute_score returns a float (1.0
            right with '####', 0.1 right number without '####', 0 otherwise); the reward manager
            adds it as extra 'acc'. The dump has no uid: truth.json gives verl's uid per line.
            'score' is token_level_scores.sum(-1) of a float32 tensor, so 0.1 is written as
            0.10000000149011612 while 'acc' (float64) is 0.1."""
        ),
    ),
    "legacy_dict_scores": dict(
        kind="legacy",
        score_fn="compute_score_dict",
        questions="QUESTIONS",
        shuffle=True,
        description=_d(
            """Legacy trainer, compute_score returns a dict {score, acc, pred, conf, len_ratio}.
            Every key becomes a column and the returned 'score' overwrites the file's score
            column. The score is a decimal.Decimal (rounded to 0.01) when a number was parsed
            and the float 0.0 otherwise, so numpy makes an object array that keeps the Decimals
            and the legacy writer's json default=str writes them as strings ("0.02", "1.00",
            "0.95"), the 0.0 rows as numbers. 'conf' is numpy.float32 or None: object dtype,
            written as strings ("0.75") and null. 'len_ratio' is a Python float or None: also
            object dtype, but plain floats stay JSON numbers. 'acc' bool, 'pred' str or null.
            verl's own reward (rm_scores, what GRPO used) is float32(Decimal): truth.json
            'score'."""
        ),
    ),
    "legacy_repeated_prompt": dict(
        kind="legacy",
        score_fn="compute_score_float",
        questions="REPEATED",
        shuffle=False,
        description=_d(
            """Legacy trainer, data.shuffle=False, step 1 holds two dataset rows with the same
            prompt text (rows 0 and 1: 'what is 3 plus 4'). verl gives each row its own uuid, so
            GRPO sees two groups of 4; the dump has no uid, so grouping by the 'input' text
            merges them into one group of 8. balance_batch=True. Step 2 has 4 distinct prompts."""
        ),
    ),
    "v1": dict(
        kind="v1",
        agent_loop="single_turn_agent",
        description=_d(
            """V1 trainer (trainer.use_v1=true, trainer_mode=sync): 2 steps, 4 prompts x n=4,
            single-output agent loop (SingleTurnAgentLoop). PPOTrainer._log_rollout_data writes
            uid = '{prompt uuid}_{session}_{index}' and sorts the rows by (uuid string,
            int(session), int(index)), so the file order is the uuid's lexical order, not the
            dataset order. score = rm_scores.sum(). No reward-extra columns in the V1 rollout
            dump."""
        ),
    ),
    "v1_compaction": dict(
        kind="v1",
        agent_loop="compaction_agent",
        description=_d(
            """V1 trainer with a multi-output agent loop (CompactionAgentLoop in
            tools/dumps/verl.py, ours: two segments per rollout, the second after the context
            was replaced by the question plus a summary line). verl's AgentLoopWorkerTQ writes
            each output as its own row, '{uuid}_{session}_0' and '{uuid}_{session}_1', and
            copies the final reward onto both, so both rows carry the final score. verl's V1
            GRPO (compute_advantage_for_multi_trajectories) uses only each session's last output
            (index 1) per prompt group and broadcasts the advantage to index 0. RLOO is not
            GRPO: verl passes it to compute_advantage over all rows, so each segment counts as a
            sample (group of 8 per prompt, leave-one-out over 7)."""
        ),
    ),
    "validation": dict(
        kind="validation",
        description=_d(
            """Validation dump of the LEGACY trainer (RayPPOTrainer._validate run unchanged):
            trainer.validation_data_dir, val_kwargs.n=2, 4 validation prompts, at global step 0
            (val_before_train) and step 2. Rows keep verl's interleaved order (2 consecutive
            rows per prompt, no balance_batch). compute_score returns {score, acc, pred}; the
            file has 'reward' (duplicate of score) then the extras; no uid (truth.json has it).
            verl computes no advantages in validation: grpo/rloo in truth.json are verl's
            compute_advantage applied to the validation batch grouped by its uid."""
        ),
    ),
    "actor_batch": dict(
        kind="actor_batch",
        description=_d(
            """The batch the legacy trainer's actor update reads, after verl's
            compute_advantage (GRPO, epsilon 1e-6, std-normalised, grouped by uid): one step of
            4 prompts x n=4, balance_batch=True, rollout.response_length=10 so the longer
            answers are cut, and a scripted log-prob per response token (the agent loop pads
            them into rollout_log_probs). batch.npz holds verl's tensors as numpy arrays
            (prompts left-padded to rollout.prompt_length=40 with the tokenizer's pad id,
            responses right-padded to 10; input_ids, attention_mask, position_ids,
            response_mask, advantages, returns, rollout_log_probs), their torch dtypes in
            'dtypes'. rollouts.jsonl holds the same rows in the same order, unpadded, as our
            script took them out of the batch (verl writes no token ids in its dumps)."""
        ),
    ),
}


ACTOR_KEYS = (
    "prompts",
    "responses",
    "input_ids",
    "attention_mask",
    "position_ids",
    "response_mask",
    "advantages",
    "returns",
    "rollout_log_probs",
)


def run_actor_batch_case(case, work, seed):
    """One legacy-trainer step up to verl's compute_advantage (GRPO): the batch's tensors as
    the actor update reads them (batch.npz) and the same rows, unpadded, as a split-layout log
    (rollouts.jsonl: uid, prompt_ids, response_ids, response_mask, rollout_log_probs, reward)."""
    from verl.trainer.ppo.ray_trainer import compute_advantage

    response_length = 10
    loop, cfg, tokenizer, llm = setup(case, work, seed, n=4, train_bs=4,
                                      response_length=response_length)  # fmt: skip
    llm.log_probs = True
    reward_handles, workers = build_workers(cfg, llm)
    mgr = make_rollout_manager(cfg, llm, reward_handles, workers)
    dl = make_dataloader(cfg, make_rows(QUESTIONS, "train"), tokenizer, work, "train")
    tr = legacy_trainer(cfg, tokenizer, mgr)
    batch, _, _, _ = loop.run_until_complete(legacy_batch(tr, iter(dl), llm, 1))
    loop.close()
    batch = compute_advantage(
        batch,
        adv_estimator="grpo",
        gamma=cfg.algorithm.gamma,
        lam=cfg.algorithm.lam,
        num_repeat=cfg.actor_rollout_ref.rollout.n,
        norm_adv_by_std_in_grpo=True,
        config=cfg.algorithm,
    )
    tensors = {k: batch.batch[k] for k in ACTOR_KEYS}
    out_dir = os.path.join(work, "out")
    os.makedirs(out_dir)
    np.savez(os.path.join(out_dir, "batch.npz"), **{k: v.numpy() for k, v in tensors.items()})
    prompt_length = cfg.actor_rollout_ref.rollout.prompt_length
    with open(os.path.join(out_dir, "rollouts.jsonl"), "w") as fh:
        for i, uid in enumerate(batch.non_tensor_batch["uid"]):
            real = tensors["attention_mask"][i].bool()
            in_response = real[prompt_length:]
            row = {
                "uid": str(uid),
                "prompt_ids": tensors["prompts"][i][real[:prompt_length]].tolist(),
                "response_ids": tensors["responses"][i][in_response].tolist(),
                "response_mask": tensors["response_mask"][i][in_response].tolist(),
                "rollout_log_probs": tensors["rollout_log_probs"][i][in_response].tolist(),
                "reward": float(batch.batch["token_level_scores"][i].sum()),
            }
            fh.write(json.dumps(row) + "\n")
    truth = {
        "made_by": "tools/dumps/verl.py",
        "framework": "verl 0.9.1",
        "versions": versions(),
        "case": case,
        "description": CASE_SPECS[case]["description"],
        "settings": {
            **COMMON,
            "trainer": "legacy",
            "n": 4,
            "train_batch_size": 4,
            "steps": 1,
            "balance_batch": True,
            "response_length": response_length,
            "reward_fn": "compute_score_float",
        },
        "seed": seed,
        "pad_token_id": tokenizer.pad_token_id,
        "prompt_length": prompt_length,
        "response_length": response_length,
        "dtypes": {k: str(v.dtype) for k, v in tensors.items()},
        "files": {"rollouts.jsonl": {"lines": len(batch)}, "batch.npz": {"lines": 0}},
    }
    return out_dir, truth


def run_case(case, work, seed):
    spec = CASE_SPECS[case]
    if spec["kind"] == "actor_batch":
        return run_actor_batch_case(case, work, seed)
    if spec["kind"] == "legacy":
        cfg, out_dir, rows, extras = run_legacy_case(
            case,
            work,
            seed,
            score_fn=spec["score_fn"],
            questions=globals()[spec["questions"]],
            shuffle=spec["shuffle"],
        )
        settings = {
            "trainer": "legacy",
            "n": 4,
            "train_batch_size": 4,
            "steps": 2,
            "balance_batch": True,
            "shuffle": spec["shuffle"],
            "reward_fn": spec["score_fn"],
            **COMMON,
        }
    elif spec["kind"] == "v1":
        cfg, out_dir, rows, extras = run_v1_case(case, work, seed, agent_loop=spec["agent_loop"])
        settings = {
            "trainer": "v1",
            "trainer_mode": "sync",
            "n": 4,
            "train_batch_size": 4,
            "steps": 2,
            "agent_loop": spec["agent_loop"],
            "outputs_per_rollout": 2 if "compaction" in case else 1,
            "shuffle": True,
            "reward_fn": "compute_score_float",
            **COMMON,
        }
    else:
        cfg, out_dir, rows, extras = run_validation_case(case, work, seed)
        settings = {
            "trainer": "legacy",
            "dump": "validation",
            "val_n": 2,
            "val_prompts": 4,
            "global_steps": [0, 2],
            "reward_fn": "compute_score_val",
            **COMMON,
        }
    files = sorted(
        {r["file"] for r in rows},
        key=lambda f: (os.path.dirname(f), int(os.path.basename(f).split(".")[0])),
    )
    truth = {
        "made_by": "tools/dumps/verl.py",
        "framework": "verl 0.9.1",
        "versions": versions(),
        "case": case,
        "description": spec["description"],
        "settings": settings,
        "seed": seed,
        "files": {
            f: {
                "lines": len(lines_of(os.path.join(out_dir, f))),
                "json_types": json_types(os.path.join(out_dir, f)),
            }
            for f in files
        },
        "rows": rows,
        "verl_internals_per_step": {str(k): v for k, v in extras.items()},
    }
    return out_dir, truth


def write_fixture(case, out_dir, truth, dest_root):
    dest = os.path.join(dest_root, case)
    if os.path.exists(dest):
        shutil.rmtree(dest)
    for f in truth["files"]:
        os.makedirs(os.path.dirname(os.path.join(dest, f)), exist_ok=True)
        shutil.copyfile(os.path.join(out_dir, f), os.path.join(dest, f))
    with open(os.path.join(dest, "truth.json"), "w") as fh:
        json.dump(truth, fh, indent=1)
        fh.write("\n")


def main():
    ap = argparse.ArgumentParser(description="Write real verl 0.9.1 dumps as advcli test fixtures.")
    ap.add_argument("outdir", help="scratch folder; each case runs in OUTDIR/<case>")
    ap.add_argument(
        "--fixtures",
        default=os.path.join(
            os.path.dirname(os.path.dirname(_HERE)), "tests", "fixtures", "real", "verl"
        ),
    )
    ap.add_argument("--cases", default=",".join(CASES))
    args = ap.parse_args()
    define_compaction_loop()
    for case in args.cases.split(","):
        work = os.path.join(args.outdir, case)
        if os.path.exists(work):
            shutil.rmtree(work)
        os.makedirs(work)
        out_dir, truth = run_case(case, work, SEED + CASES.index(case))
        write_fixture(case, out_dir, truth, args.fixtures)
        print(
            f"[verl.py] {case}: "
            + ", ".join(f"{f} ({v['lines']} lines)" for f, v in truth["files"].items())
        )


if __name__ == "__main__":
    main()
