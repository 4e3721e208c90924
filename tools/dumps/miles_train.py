"""Write real miles `--dump-details` dumps of one rollout step: `rollout_data/{id}.pt` and one
`train_data/{id}_{rank}.pt` per training rank, as written by miles' own code.

Made from miles github.com/radixark/miles (the slime fork) @ COMMIT (recorded in each truth.json;
made at 31f1ca961a94cb860cec3b2dea34ec332bfa8f76, 2026-08-21), torch 2.13.0+cpu, numpy 2.4.6,
polars 2.1.0, pyyaml, packaging, httpx, requests, pydantic, psutil (what the imported miles modules
need), jinja2 (torch inductor's), Python 3.11, CPU only, offline. miles is not on PyPI: its
`miles/` package is extracted from the bare git dir that the search tool's `fetch
github:radixark/miles` returned.

Run (framework venv, never part of CI):

    /tmp/fw/miles-train/venv/bin/python tools/dumps/miles_train.py OUTDIR \
        --miles-src PATH/TO/miles.git [--scratch DIR] [CASE..]

(`--miles-src` may also come from $MILES_SRC.) The venv: `python3.11 -m venv
/tmp/fw/miles-train/venv && .../pip install torch numpy polars pyyaml packaging httpx requests
pydantic psutil jinja2` (CPU torch; here the torch-2.13.0+cpu wheel of the local wheel folder;
plain PyPI `torch` works too). Takes ~2 min on 2 cores (miles' `@torch.compile` entropy
`mul_reduce` and `compute_approx_kl` are compiled by inductor with gcc in the training processes).

Cases (CASES), one rollout step each (rollout_id 0), 2 prompts x 4 samples (PROMPTS/SCRIPTS): group
0 rewards 1.0/0.0/0.5/0.0 with a length-truncated sample and a multi-turn sample (4 tool tokens,
loss mask 0, rollout log-prob 0.0), group 1 all 1.0 (zero variance). The tokens are slime_train.py's
except that the tool response has 4 tokens, not 3: the multi-turn sample (total length 14) is then
the one whose CP rank 0 slice has two pieces (zigzag chunks 0 and 3):
- `default`: miles defaults (GRPO), TP=CP=1, DP=2 (ranks 0,1: two train files, one DP shard each);
- `reinforce_plus_plus_kl`: --advantage-estimator reinforce_plus_plus --kl-coef 0.05 --ref-load
  --use-rollout-entropy --normalize-advantages, DP=2;
- `context_parallel`: GRPO, CP=2, DP=2 (4 ranks; Megatron order tp-cp-ep-dp-pp, so ranks 0,1 are
  the two CP ranks of DP shard 0 and ranks 2,3 those of DP shard 1); every per-token field the
  actor computed (log_probs, rollout_log_probs, advantages, returns) is that rank's zigzag CP slice,
  cut by miles' own code (slice_log_prob_with_cp for rollout_log_probs, get_batch/slice_with_cp +
  get_responses/get_logits_and_tokens_offset_with_cp for the forward); tokens and loss_masks stay
  full length; the CP slice widths follow from total_length (prompt included), so CP rank 0 holds
  0-2 response tokens per sample here (sample 2: response positions 0 and 9), rank 1 the rest;
- `tensor_parallel_copies`: GRPO, TP=2, DP=2 (4 ranks; ranks 0,1 = the TP pair of DP shard 0, 2,3
  of shard 1): TP peers write identical copies of one shard (the vocab-parallel log-prob/entropy
  reductions run over a real 2-rank TP group).

`--miles-src` is a bare git clone (its HEAD's `miles/` is extracted into SCRATCH/src) or a folder
that already holds `miles/` (commit read from its COMMIT file). Each case runs with
`--dump-details SCRATCH/<case>`: miles then sets --save-debug-rollout-data
{d}/rollout_data/{rollout_id}.pt and --save-debug-train-data {d}/train_data/{rollout_id}_{rank}.pt
(miles/utils/arguments.py miles_validate_args, L3183-3187). Everything miles writes there
(rollout_data/0.pt, train_data/0_{rank}.pt, dashboard_columns/rollout_0.parquet) is copied
unchanged to OUTDIR/<case>/, with a truth.json beside it whose `samples` are what miles' own
`DumpReader.load_joined` (miles/dashboard/dump_reader.py) returns for that directory. Seeded: two
runs write byte-identical files.

The flow (one rollout process, then one process per training rank joined by a real gloo process
group on a file store, so every DP/CP/TP collective is torch's own):

  rollout side   RolloutManager.generate (asyncio) -> _get_rollout_data -> call_rollout_function
      (LegacyRolloutFnAdapter around the scripted rollout) -> postprocess_rollout_data
      -> save_debug_rollout_data (rollout_data/0.pt + dashboard_columns parquet)
      -> log_rollout_data -> convert_samples_to_train_data (-> _post_process_rewards: GRPO group
      normalisation by group_index) -> split_train_data_by_dp (rollout-side schedule:
      build_dp_schedule, _package_shards; RayObjectStore.put)
  train side     object_store.init_instance, init_gloo_group, create_indep_dp_group,
      create_megatron_parallel_state -> set_parallel_state, then MegatronTrainRayActor.train
      -> get_rollout_data (process_rollout_data, process_rollout_data_shard, slice_log_prob_with_cp)
      -> train_actor -> get_data_iterator -> [compute_log_prob "ref_"] -> compute_log_prob
      -> compute_advantages_and_returns -> log_rollout_data -> train -> save_debug_train_data
      (-> save_debug_train_data_for_rank: torch.save, one file per global rank, no gather)

miles' own code, run unchanged:
- imported from the extracted package: miles/utils/arguments.py (`get_miles_extra_args_provider`
  incl. the SGLang flags of miles/backends/sglang_utils/arguments.py, `miles_validate_args`: every
  default below is miles'), `function_registry` + `load_function`, RolloutDataSourceWithBuffer
  (group_index / index counters), miles/rollout/inference_rollout/compatibility.py
  (`load_rollout_function`, `LegacyRolloutFnAdapter`, `call_rollout_function`), `RolloutFn*` types,
  miles/rollout/generate_utils (`compute_request_payload`, `update_sample_from_response`,
  `update_sample_with_tool_responses`), `Sample` (`update_from_meta_info`, `to_dict`,
  `from_dict`), miles/utils/async_utils.py `run`, miles/ray/rollout/rollout_data_conversion.py,
  debug_data.py (`save_debug_rollout_data`, `save_dashboard_columns`), metrics.py
  `log_rollout_data`, train_data_conversion.py (`convert_samples_to_train_data`,
  `split_train_data_by_dp`, `process_rollout_data_shard`, ...), miles/utils/dp_schedule.py,
  object_store.py (RayObjectStore over the ray stub), miles/utils/data.py `process_rollout_data`,
  miles/backends/training_utils/ data.py (`get_rollout_data`, `get_data_iterator`, `DataIterator`,
  `get_batch`, `get_num_rollouts`), cp_utils.py, loss.py (`compute_advantages_and_returns`),
  loss_hub/ (advantages.py, math_utils.py: `get_grpo_returns`, `get_reinforce_plus_plus_returns`,
  `compute_approx_kl`, `calculate_log_probs_and_entropy`, `_VocabParallelEntropy`;
  logit_processors.py `get_log_probs_and_entropy`, `get_responses`), log_utils.py
  (`log_rollout_data`, `aggregate_forward_results`), parallel.py; miles/utils/distributed_utils.py
  (`init_gloo_group`, `distributed_masked_whiten`), miles/backends/megatron_utils/parallel.py
  `create_megatron_parallel_state`, ft/indep_dp.py `create_indep_dp_group`, miles/utils/timer.py,
  replay_base `all_replay_managers`, structured_log `with_logs`, event_logger
  `event_logger_context`, miles/utils/train_dump_utils.py, miles/dashboard/dump_reader.py
  (`DumpReader.load_joined`, for truth.json);
- taken out of miles/ray/rollout/rollout_manager.py with `ast` (that module imports ray/sglang and
  starts servers), the `RolloutManager` methods `generate`, `_get_rollout_data`,
  `_health_monitoring_resume`, attached unchanged to a stand-in object carrying the attributes
  `RolloutManager.__init__` sets for them (incl. `object_store.init_instance`);
- taken out of miles/backends/megatron_utils/actor.py with `ast`, the `MegatronTrainRayActor`
  methods `train`, `train_actor`, `compute_log_prob`, `_switch_model`, `_set_replay_stage`,
  `_use_rollout_replay` and the property `_enable_weight_backup`, attached unchanged to a stand-in
  actor object carrying the attributes `init` sets for them.

Stubbed (imported, unused on this path): `ray` (`put`/`get` are identity: the object store; the
rollout refs reach the train processes through torch.save/torch.load, as Ray would pickle them),
`ray.util.*`, `sglang.*` (ServerArgs with no flags, protocol/function-call classes),
`sglang_router.launch_router.RouterArgs` (no flags), `transformers`, `tokenizers`,
`huggingface_hub`, `openai.types.chat`, `pybase64` (no tokenizer or chat template is
loaded: --disable-rollout-global-dataset), `megatron.core.packed_seq_params`,
`megatron.core.utils.get_model_config`.

Stand-ins (not miles code):
- Megatron's parallel state (`megatron.core.mpu`): StandInMpu builds real gloo groups for TP, CP,
  DP, DP+CP, PP, EP, ETP with Megatron's rank order tp-cp-ep-dp-pp and answers mpu's getters from
  them; `megatron.training.global_vars.get_args` returns the run's args; Megatron's
  `fused_vocab_parallel_cross_entropy` is `standin_vocab_parallel_cross_entropy` (the same
  max / target-logit / sum-exp all-reduces over the TP group, unfused);
- Megatron argument values the path reads that miles' parser does not define (Megatron defaults or
  this run's layout): tensor/pipeline/context_parallel_size, virtual_pipeline_model_parallel_size,
  seq_length, vocab_size;
- the rollout function (`--rollout-function-path`, default InferenceRolloutFn, needs an SGLang
  server): `scripted_rollout`, registered in miles' `function_registry` under
  `miles_train.scripted_rollout`, fills the data-source groups from SCRIPTS through miles'
  `compute_request_payload` / `update_sample_from_response` with SGLang-shaped responses
  (meta_info output_token_logprobs, finish_reason stop/length, weight_version "default") and
  `update_sample_with_tool_responses` with `StandInTokenizer` (tool tokens 20-23), then the rule
  reward;
- the model (Megatron GPTModel): a bigram table `TinyPolicy` (vocab 24, seeded), sharded over the
  vocab for TP. Rollout log-probs ("SGLang") come from it in bf16; the train forward runs in fp32
  on the CP-sliced, padded token stream that miles' `get_batch` builds, giving [1, T_local,
  V/TP] logits that miles' `get_log_probs_and_entropy` consumes; the reference model (`--ref-load`)
  is a perturbed copy of the table. Megatron `forward_only` / `train` are stand-ins: forward_only
  walks miles' DataIterator over the scheduled micro-batches exactly as megatron_utils/model.py
  does (get_batch -> model -> f(logits, ...) -> aggregate_forward_results); train runs no
  optimizer step (it reads nothing back into rollout_data in miles);
- CPU in place of CUDA (only when CUDA is absent): `torch.cuda.current_device()` -> cpu,
  `Tensor.cuda()` -> self, `torch.cuda.synchronize()` -> no-op;
- weights backuper (tags actor[, ref]), profiler, heartbeat, weight updater: no-ops;
  `log_perf_data` (perf metrics, needs a model config): no-op.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import logging
import os
import shutil
import sys
import types
from pathlib import Path

# dumpkit is beside this file (on sys.path already when it runs as a script, not when imported)
sys.path.insert(0, str(Path(__file__).resolve().parent))
import dumpkit  # noqa: E402

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

MADE_BY = "miles_train.py"
ROLLOUT_ID = 0
VOCAB = 24
EOS = 2
N_SAMPLES = 4
ROLLOUT_FN_PATH = "miles_train.scripted_rollout"

# token ids only (no tokenizer). 1 = bos, 2 = eos.
PROMPTS = [[1, 5, 6, 7], [1, 8, 9]]
TOOL_TOKENS = [20, 21, 22, 23]
# per prompt, per sample: turns of (token ids, trainable), finish reason of the last turn, reward;
# a non-trainable turn is a tool response (miles: update_sample_with_tool_responses)
SCRIPTS = [
    [
        {"turns": [([10, 11, 12, EOS], True)], "finish": "stop", "reward": 1.0},
        {"turns": [([13, 14, 15, 16, 17, 18], True)], "finish": "length", "reward": 0.0},
        {
            "turns": [([10, 19, 3], True), (TOOL_TOKENS, False), ([11, 12, EOS], True)],
            "finish": "stop",
            "reward": 0.5,
        },
        {"turns": [([14, EOS], True)], "finish": "stop", "reward": 0.0},
    ],
    [  # zero-variance group
        {"turns": [([10, 12, EOS], True)], "finish": "stop", "reward": 1.0},
        {"turns": [([11, 10, 12, EOS], True)], "finish": "stop", "reward": 1.0},
        {"turns": [([12, EOS], True)], "finish": "stop", "reward": 1.0},
        {"turns": [([10, 11, 13, 12, EOS], True)], "finish": "stop", "reward": 1.0},
    ],
]

CASES = {
    "default": {
        "about": "miles defaults: --advantage-estimator grpo, rewards normalization and GRPO std "
        "normalization on, kl_coef 0, no ref model; actor log-probs recomputed by compute_log_prob "
        "(forward_only); DP=2, TP=CP=1: rank r holds DP shard r",
        "flags": [],
        "tp": 1,
        "cp": 1,
        "dp": 2,
    },
    "reinforce_plus_plus_kl": {
        "about": "--advantage-estimator reinforce_plus_plus --kl-coef 0.05 --use-rollout-entropy "
        "--normalize-advantages --ref-load: actor and ref log-probs (and entropy, ref_entropy) by "
        "compute_log_prob, k1 KL in the token rewards, discounted returns (gamma 1.0), no group "
        "normalization, advantages whitened over the loss-mask tokens of both DP ranks; DP=2",
        "flags": [
            "--advantage-estimator",
            "reinforce_plus_plus",
            "--kl-coef",
            "0.05",
            "--use-rollout-entropy",
            "--normalize-advantages",
        ],
        "ref": True,
        "tp": 1,
        "cp": 1,
        "dp": 2,
    },
    "context_parallel": {
        "about": "miles defaults (GRPO) with --context-parallel-size 2, DP=2: 4 ranks (Megatron "
        "order tp-cp-ep-dp-pp: rank = cp_rank + 2 * dp_rank); each rank file holds its DP "
        "shard with the per-token fields the actor produced (log_probs, rollout_log_probs, "
        "advantages, returns) as that rank's zigzag CP slice (thd); tokens / loss_masks full",
        "flags": [],
        "tp": 1,
        "cp": 2,
        "dp": 2,
    },
    "tensor_parallel_copies": {
        "about": "miles defaults (GRPO) with --tensor-model-parallel-size 2, DP=2: 4 ranks "
        "(rank = tp_rank + 2 * dp_rank); the two TP ranks of a DP shard write identical copies "
        "(log-probs from a vocab-parallel table over a real 2-rank TP group)",
        "flags": [],
        "tp": 2,
        "cp": 1,
        "dp": 2,
    },
}

RAN_UNCHANGED = [
    "miles/utils/arguments.py: get_miles_extra_args_provider (incl. SGLang flags), "
    "miles_validate_args",
    "miles/ray/rollout/rollout_manager.py RolloutManager.generate, _get_rollout_data, "
    "_health_monitoring_resume (ast)",
    "miles/rollout/data_source.py RolloutDataSourceWithBuffer; miles/utils/types.py Sample",
    "miles/rollout/inference_rollout/compatibility.py load_rollout_function, "
    "LegacyRolloutFnAdapter, call_rollout_function; miles/utils/misc.py function_registry",
    "miles/rollout/generate_utils: compute_request_payload, update_sample_from_response, "
    "update_sample_with_tool_responses",
    "miles/ray/rollout/rollout_data_conversion.py postprocess_rollout_data; debug_data.py "
    "save_debug_rollout_data, save_dashboard_columns; metrics.py log_rollout_data",
    "miles/ray/rollout/train_data_conversion.py convert_samples_to_train_data, "
    "_post_process_rewards, split_train_data_by_dp (rollout-side schedule), "
    "process_rollout_data_shard; miles/utils/dp_schedule.py build_dp_schedule; object_store",
    "miles/backends/megatron_utils/parallel.py create_megatron_parallel_state; ft/indep_dp.py "
    "create_indep_dp_group; miles/utils/distributed_utils.py init_gloo_group",
    "miles/backends/megatron_utils/actor.py MegatronTrainRayActor.train, train_actor, "
    "compute_log_prob, _switch_model, _set_replay_stage, _use_rollout_replay, "
    "_enable_weight_backup (ast)",
    "miles/backends/training_utils/data.py get_rollout_data, get_data_iterator, DataIterator, "
    "get_batch; cp_utils.py slice_log_prob_with_cp, slice_with_cp, "
    "get_logits_and_tokens_offset_with_cp, all_gather_with_cp",
    "miles/backends/training_utils/loss_hub/logit_processors.py get_log_probs_and_entropy; "
    "math_utils.py calculate_log_probs_and_entropy, _VocabParallelEntropy, compute_approx_kl, "
    "get_grpo_returns, get_reinforce_plus_plus_returns",
    "miles/backends/training_utils/loss.py compute_advantages_and_returns; loss_hub/advantages.py "
    "compute_advantages, normalize_advantages; distributed_utils.distributed_masked_whiten",
    "miles/backends/training_utils/log_utils.py log_rollout_data, aggregate_forward_results",
    "miles/utils/train_dump_utils.py save_debug_train_data, save_debug_train_data_for_rank "
    "(one torch.save per global rank)",
    "miles/dashboard/dump_reader.py DumpReader.load_joined (truth.json samples)",
]
STOOD_IN = [
    "SGLang rollout (scripted token ids in SGLang-shaped responses; rollout_log_probs from a bf16 "
    "bigram table; tool tokens through a stand-in tokenizer)",
    "Megatron model forward_only/train (fp32 bigram table, vocab-sharded for TP; ref = perturbed "
    "table); no optimizer step",
    "megatron.core.mpu (real gloo groups, Megatron rank order tp-cp-ep-dp-pp), "
    "fused_vocab_parallel_cross_entropy (unfused), Megatron arg values",
    "ray put/get identity; sglang/sglang_router/transformers/tokenizers/huggingface_hub/"
    "openai/pybase64 stubs; CPU in place of CUDA",
]
FORMULA = {
    "grpo": "rewards[i] = (r_i - mean_g) / (std_g + 1e-6) (std unbiased, torch.std; left "
    "un-divided when std_g == 0), group = samples sharing Sample.group_index (miles "
    "_normalize_rewards_by_rollout); advantages[i] = returns[i] = rewards[i] * "
    "ones(local response length), fp32, every response token (loss mask not applied); kl_coef "
    "not used",
    "reinforce_plus_plus": "token_rewards = -kl_coef * kl (k1: log_probs - ref_log_probs) on EVERY "
    "response token (miles does not multiply by loss_mask: tool tokens carry KL too), + raw "
    "reward at the last loss_mask=1 token; returns = discounted cumsum (gamma) from the end; "
    "advantages = returns whitened (--normalize-advantages): (x - mean) * rsqrt(var_unbiased + "
    "1e-8), mean/var over loss_mask=1 tokens of all DP ranks (distributed_masked_whiten over the "
    "DP group), applied to every token",
}


# --------------------------------------------------------------------------------------------------
# miles source, stubs


def _stub(name: str, **attrs) -> types.ModuleType:
    return dumpkit.stub_module(name, "__miles_dump_stub__", **attrs)


class _Unused:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("stub: not used on this path")


def standin_vocab_parallel_cross_entropy(
    vocab_parallel_logits, target, tp_group, label_smoothing=0.0
):
    """Stand-in for megatron.core.fusions.fused_cross_entropy.fused_vocab_parallel_cross_entropy:
    the same three all-reduces over the TP group (max, target logit, sum of exp), unfused."""
    import torch.distributed as dist

    logits = vocab_parallel_logits.float()
    rank, size = dist.get_rank(tp_group), dist.get_world_size(tp_group)
    part = logits.size(-1)
    start = rank * part
    logits_max = logits.max(dim=-1)[0]
    dist.all_reduce(logits_max, op=dist.ReduceOp.MAX, group=tp_group)
    logits = logits - logits_max.unsqueeze(-1)
    in_range = (target >= start) & (target < start + part)
    local_target = (target - start).clamp(0, part - 1)
    predicted = logits.gather(-1, local_target.unsqueeze(-1)).squeeze(-1) * in_range
    dist.all_reduce(predicted, op=dist.ReduceOp.SUM, group=tp_group)
    sum_exp = logits.exp().sum(dim=-1)
    dist.all_reduce(sum_exp, op=dist.ReduceOp.SUM, group=tp_group)
    del size
    return torch.log(sum_exp) - predicted


class StandInMpu:
    """megatron.core.mpu for this run: real gloo groups, Megatron's order tp-cp-ep-dp-pp (EP=PP=1),
    rank = tp_rank + TP * (cp_rank + CP * dp_rank)."""

    tp = cp = dp = 1
    rank = 0
    groups: dict = {}

    @classmethod
    def coords(cls, rank: int) -> tuple[int, int, int]:
        return rank % cls.tp, (rank // cls.tp) % cls.cp, rank // (cls.tp * cls.cp)

    @classmethod
    def build(cls, tp: int, cp: int, dp: int) -> None:
        import torch.distributed as dist

        cls.tp, cls.cp, cls.dp = tp, cp, dp
        cls.rank = dist.get_rank()
        world = tp * cp * dp
        assert world == dist.get_world_size()
        ranks = list(range(world))

        def partition(key):
            out: dict = {}
            for r in ranks:
                out.setdefault(key(*cls.coords(r)), []).append(r)
            return [out[k] for k in sorted(out)]

        layouts = {
            "tp": partition(lambda t, c, d: (c, d)),
            "cp": partition(lambda t, c, d: (t, d)),
            "dp": partition(lambda t, c, d: (t, c)),
            "dp_cp": partition(lambda t, c, d: (t,)),
            "pp": [[r] for r in ranks],
            "ep": [[r] for r in ranks],
        }
        cls.groups = {}
        for name, parts in layouts.items():  # every rank creates every group, same order
            for members in parts:
                g = dist.new_group(members, backend="gloo")
                if cls.rank in members:
                    cls.groups[name] = (g, members.index(cls.rank), len(members))
        cls.groups["etp"] = cls.groups["tp"]  # expert_tensor_parallel_size defaults to TP

    @classmethod
    def _g(cls, name, i):
        return cls.groups[name][i]

    @classmethod
    def module_attrs(cls) -> dict:
        def dp(i):
            return lambda with_context_parallel=False, **k: cls._g(
                "dp_cp" if with_context_parallel else "dp", i
            )

        return dict(
            is_pipeline_last_stage=lambda *a, **k: True,
            is_pipeline_first_stage=lambda *a, **k: True,
            get_tensor_model_parallel_rank=lambda: cls._g("tp", 1),
            get_tensor_model_parallel_world_size=lambda: cls._g("tp", 2),
            get_tensor_model_parallel_group=lambda *a, **k: cls._g("tp", 0),
            get_pipeline_model_parallel_rank=lambda: cls._g("pp", 1),
            get_pipeline_model_parallel_world_size=lambda: cls._g("pp", 2),
            get_pipeline_model_parallel_group=lambda *a, **k: cls._g("pp", 0),
            get_virtual_pipeline_model_parallel_world_size=lambda: None,
            get_context_parallel_rank=lambda: cls._g("cp", 1),
            get_context_parallel_world_size=lambda: cls._g("cp", 2),
            get_context_parallel_group=lambda *a, **k: cls._g("cp", 0),
            get_expert_model_parallel_rank=lambda: cls._g("ep", 1),
            get_expert_model_parallel_world_size=lambda: cls._g("ep", 2),
            get_expert_model_parallel_group=lambda *a, **k: cls._g("ep", 0),
            get_expert_tensor_parallel_rank=lambda: cls._g("etp", 1),
            get_expert_tensor_parallel_world_size=lambda: cls._g("etp", 2),
            get_expert_tensor_parallel_group=lambda *a, **k: cls._g("etp", 0),
            get_data_parallel_rank=dp(1),
            get_data_parallel_world_size=dp(2),
            get_data_parallel_group=dp(0),
            get_data_parallel_group_gloo=dp(0),
        )


class _MpuProxy(types.ModuleType):
    def __getattr__(self, name):
        attrs = StandInMpu.module_attrs()
        if name in attrs:
            return attrs[name]
        raise AttributeError(name)


_ARGS_HOLDER: dict = {}


def _cpu_in_place_of_cuda() -> None:
    if torch.cuda.is_available():
        return
    torch.cuda.current_device = lambda: torch.device("cpu")
    torch.cuda.synchronize = lambda *a, **k: None
    torch.Tensor.cuda = lambda self, *a, **k: self


def install_stubs(src: Path) -> None:
    if str(src) not in sys.path:
        sys.path.insert(0, str(src))
    sys.modules.setdefault("miles_train", sys.modules[__name__])
    _cpu_in_place_of_cuda()
    dumpkit.stub_ray_and_sglang("__miles_dump_stub__")
    _stub("ray.util")
    _stub("ray.util.scheduling_strategies", NodeAffinitySchedulingStrategy=_Unused)
    _stub("ray.util.state", list_nodes=lambda: [])
    _stub(
        "sglang.srt.constants",
        GPU_MEMORY_TYPE_CUDA_GRAPH="cuda_graph",
        GPU_MEMORY_TYPE_KV_CACHE="kv_cache",
        GPU_MEMORY_TYPE_WEIGHTS="weights",
    )
    _stub("sglang.srt.entrypoints")
    _stub("sglang.srt.entrypoints.openai", encoding_dsv4=None)
    _stub("sglang.srt.entrypoints.openai.protocol", Tool=_Unused, ChatCompletionRequest=_Unused)
    _stub("sglang.srt.function_call")
    _stub("sglang.srt.function_call.core_types", ToolCallItem=_Unused)
    _stub("sglang.srt.function_call.function_call_parser", FunctionCallParser=_Unused)
    _stub("openai")
    _stub("openai.types")
    _stub("openai.types.chat", ChatCompletionMessageToolCall=_Unused)
    _stub("pybase64", b64decode=None, b64encode=None)
    _stub("huggingface_hub", hf_hub_download=None)
    _stub("tokenizers", Tokenizer=_Unused)
    _stub(
        "transformers",
        AutoConfig=None,
        AutoModelForCausalLM=None,
        AutoProcessor=None,
        AutoTokenizer=None,
        PreTrainedTokenizerBase=_Unused,
        PretrainedConfig=_Unused,
        ProcessorMixin=_Unused,
    )
    _stub("transformers.utils")
    _stub("transformers.utils.chat_template_utils", render_jinja_template=None)
    _stub("transformers.models")
    _stub("transformers.models.auto")
    _stub("transformers.models.auto.configuration_auto", CONFIG_MAPPING_NAMES={})

    _stub("megatron")
    _stub("megatron.core")
    mpu = _MpuProxy("megatron.core.mpu")
    mpu.__dict__["__miles_dump_stub__"] = True
    sys.modules["megatron.core.mpu"] = mpu
    sys.modules["megatron.core"].mpu = mpu
    _stub("megatron.core.packed_seq_params", PackedSeqParams=dict)
    _stub("megatron.core.utils", get_model_config=lambda model: None)
    _stub("megatron.core.fusions")
    _stub(
        "megatron.core.fusions.fused_cross_entropy",
        fused_vocab_parallel_cross_entropy=standin_vocab_parallel_cross_entropy,
    )
    _stub("megatron.training")
    _stub("megatron.training.global_vars", get_args=lambda: _ARGS_HOLDER["args"])


def extract_module_function(path: Path, name: str, namespace: dict):
    """Exec the module-level function `name` from `path`, unchanged, in `namespace`."""
    source = path.read_text()
    node = next(
        n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == name
    )
    lines = source.splitlines(keepends=True)
    code = "\n" * (node.lineno - 1) + "".join(lines[node.lineno - 1 : node.end_lineno])
    local: dict = {}
    exec(compile(code, str(path), "exec"), namespace, local)
    return local[name]


# --------------------------------------------------------------------------------------------------
# arguments (miles' own parser and validation)


def case_flags(case: dict, dump_dir: Path, scratch: Path) -> tuple[list[str], list[str]]:
    world = case["tp"] * case["cp"] * case["dp"]
    flags = [
        "--rollout-batch-size",
        str(len(PROMPTS)),
        "--n-samples-per-prompt",
        str(N_SAMPLES),
        "--global-batch-size",
        str(len(PROMPTS) * N_SAMPLES),
        "--num-rollout",
        "1",
        "--rollout-max-response-len",
        "6",
        "--actor-num-nodes",
        "1",
        "--actor-num-gpus-per-node",
        str(world),
        "--rollout-num-gpus",
        "1",
        "--disable-rollout-global-dataset",
        "--rollout-function-path",
        ROLLOUT_FN_PATH,
        "--sglang-router-ip",
        "127.0.0.1",
        "--sglang-router-port",
        "30000",
        "--dump-details",
        str(dump_dir),
        *case["flags"],
    ]
    if case.get("ref"):
        ref = scratch / "ref_ckpt"
        ref.mkdir(parents=True, exist_ok=True)
        flags += ["--ref-load", str(ref)]
    # Megatron's flags (its parser is not loaded; StandInMpu and make_args read them)
    megatron_flags = [
        "--tensor-model-parallel-size",
        str(case["tp"]),
        "--context-parallel-size",
        str(case["cp"]),
        "--pipeline-model-parallel-size",
        "1",
    ]
    return flags, megatron_flags


def make_args(case: dict, dump_dir: Path, scratch: Path):
    import miles.utils.arguments as A
    from miles.utils.misc import function_registry

    flags, megatron_flags = case_flags(case, dump_dir, scratch)
    if function_registry.get(ROLLOUT_FN_PATH) is None:
        function_registry._register(ROLLOUT_FN_PATH, scripted_rollout)
    # miles' parser reads sys.argv once while it is built (add_user_provided_function_arguments)
    argv, sys.argv = sys.argv, [sys.argv[0], *flags]
    try:
        parser = argparse.ArgumentParser(allow_abbrev=False)
        parser = A.get_miles_extra_args_provider()(parser)
        args = parser.parse_args(flags)
    finally:
        sys.argv = argv
    # what miles' parse_args sets around miles_validate_args (Megatron branch)
    args.compress_ratios = None
    args.rank = 0
    args.world_size = args.actor_num_nodes * args.actor_num_gpus_per_node
    args.ci_enable_metrics_capture = False
    # Megatron argument values read on this path (Megatron defaults / this run's layout)
    m = dict(zip(megatron_flags[::2], megatron_flags[1::2], strict=True))
    args.tensor_model_parallel_size = int(m["--tensor-model-parallel-size"])
    args.context_parallel_size = int(m["--context-parallel-size"])
    args.pipeline_model_parallel_size = int(m["--pipeline-model-parallel-size"])
    args.virtual_pipeline_model_parallel_size = None
    args.seq_length = 64
    A.miles_validate_args(args)
    args.variable_seq_lengths = True  # miles parse_args, Megatron branch
    # SGLang ServerArgs flags read on this path (their parser is stubbed): SGLang's defaults
    args.sglang_speculative_algorithm = None
    args.vocab_size = VOCAB  # Megatron's --vocab-size; actor init sets it from the tokenizer
    return args, flags, megatron_flags


# --------------------------------------------------------------------------------------------------
# stand-ins: rollout engine / model


class TinyPolicy:
    """Bigram logits table standing in for the Megatron model and the SGLang engine."""

    def __init__(self, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.tables = {"actor": torch.randn(VOCAB, VOCAB, generator=g) * 1.5}
        self.tables["old_actor"] = self.tables["actor"]
        self.tables["ref"] = self.tables["actor"] + 0.3 * torch.randn(VOCAB, VOCAB, generator=g)
        self.active = "actor"
        self.tp_rank, self.tp_size = 0, 1

    def sglang_logprobs(self, context: list[int], new_tokens: list[int]) -> list[float]:
        """What the rollout engine reports: bf16 table, full vocab."""
        w = self.tables["actor"].to(torch.bfloat16)
        full = torch.as_tensor(context + new_tokens, dtype=torch.long)
        logits = w[full[len(context) - 1 : -1]].float()
        logp = torch.log_softmax(logits, dim=-1)
        target = full[len(context) :]
        return [float(x) for x in logp.gather(-1, target[:, None])[:, 0]]

    def __call__(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Megatron forward: [1, T] token stream -> [1, T, V/TP] fp32 vocab-parallel logits."""
        part = VOCAB // self.tp_size
        w = self.tables[self.active][:, self.tp_rank * part : (self.tp_rank + 1) * part]
        return w[input_ids.long()].float()


POLICY = TinyPolicy(seed=0)


class StandInTokenizer:
    """Just enough of a HF tokenizer for miles' tokenize_tool_responses / decode: the chat template
    renders each tool message as TOOL_TOKENS after a fixed base."""

    BASE = [1, 4]

    def apply_chat_template(self, messages, tokenize=True, add_generation_prompt=False, **kwargs):
        ids = list(self.BASE)
        for message in messages:
            if message.get("role") == "tool":
                ids += TOOL_TOKENS
        return ids

    def decode(self, ids):
        return "".join(f"<{int(i)}>" for i in ids)


def scripted_rollout(args, rollout_id, data_source, evaluation=False):
    """Stand-in for the SGLang rollout function (legacy signature, wrapped by miles'
    LegacyRolloutFnAdapter). Responses go through miles' own sample-update helpers."""
    from miles.rollout.generate_utils.generate_endpoint_utils import (
        compute_request_payload,
        update_sample_from_response,
    )
    from miles.rollout.generate_utils.tool_call_utils import update_sample_with_tool_responses
    from miles.utils.async_utils import run
    from miles.utils.types import Sample

    tokenizer = StandInTokenizer()
    sampling_params = dict(
        temperature=args.rollout_temperature,
        top_p=args.rollout_top_p,
        max_new_tokens=args.rollout_max_response_len,
    )
    groups = data_source.get_samples(args.rollout_batch_size)
    for g, group in enumerate(groups):
        for s, sample in enumerate(group):
            script = SCRIPTS[g][s]
            sample.prompt = f"prompt {g}"
            sample.label = "ok"
            sample.tokens = list(PROMPTS[g])
            turns = script["turns"]
            for t, (toks, trainable) in enumerate(turns):
                last = t == len(turns) - 1
                if trainable:
                    payload, halt = compute_request_payload(args, sample.tokens, sampling_params)
                    assert payload is not None, halt
                    lps = POLICY.sglang_logprobs(payload["input_ids"], toks)
                    output = {
                        "text": tokenizer.decode(toks),
                        "meta_info": {
                            "output_token_logprobs": [
                                [lp, tok, None] for lp, tok in zip(lps, toks, strict=True)
                            ],
                            "finish_reason": {"type": script["finish"] if last else "stop"},
                            "weight_version": "default",
                            "cached_tokens": 0,
                            "prompt_tokens": len(payload["input_ids"]),
                            "completion_tokens": len(toks),
                        },
                    }
                    run(
                        update_sample_from_response(
                            args, sample, payload=payload, output=output, update_loss_mask=True
                        )
                    )
                else:
                    tool_messages = [{"role": "tool", "content": "ok", "name": "lookup"}]
                    update_sample_with_tool_responses(sample, tool_messages, tokenizer=tokenizer)
            sample.reward = script["reward"]
            if sample.status == Sample.Status.PENDING:
                sample.status = Sample.Status.COMPLETED
    return groups


def standin_forward_only(
    f, args, model, data_iterator, num_microbatches, rollout_id, store_prefix=""
):
    """Stand-in for megatron_utils/model.py forward_only: same data path (get_batch, the logits
    callback, aggregate_forward_results), Megatron's pipeline engine replaced by a loop."""
    from functools import partial

    from miles.backends.training_utils.data import get_batch
    from miles.backends.training_utils.log_utils import aggregate_forward_results

    mpu = sys.modules["megatron.core.mpu"]
    for iterator in data_iterator:
        iterator.reset()

    def forward_step(data_iterator, model):
        batch = get_batch(
            data_iterator,
            [
                "tokens",
                "loss_masks",
                "multimodal_train_inputs",
                "total_lengths",
                "response_lengths",
                "max_seq_lens",
                "witness_ids",
            ],
            args.data_pad_size_multiplier,
            args.qkv_format,
            allgather_cp=args.allgather_cp,
        )
        output_tensor = model(batch["tokens"])
        return output_tensor, partial(
            f,
            args=args,
            unconcat_tokens=batch["unconcat_tokens"],
            total_lengths=batch["total_lengths"],
            response_lengths=batch["response_lengths"],
            with_entropy=args.use_rollout_entropy,
            max_seq_lens=batch.get("max_seq_lens", None),
        )

    forward_data_store = []
    for n in num_microbatches:
        for _ in range(n):
            with torch.no_grad():
                output_tensor, collect = forward_step(data_iterator[0], model[0])
                forward_data_store.append(collect(output_tensor, non_loss_data=True))
    rollout_data = {}
    if mpu.is_pipeline_last_stage():
        aggregated = aggregate_forward_results(
            forward_data_store, data_iterator[0], args, store_prefix=""
        )
        for key, value in aggregated.items():
            rollout_data[f"{store_prefix}{key}"] = value
    return rollout_data


def standin_train(
    rollout_id,
    model,
    optimizer,
    opt_param_scheduler,
    data_iterator,
    num_microbatches,
    num_rollouts,
    **kwargs,
):
    """Stand-in for megatron_utils/model.py train: no optimizer step. (miles' train reads the
    batches but writes nothing back into rollout_data.)"""
    from miles.backends.megatron_utils.ft.types import TrainStepOutcome

    return TrainStepOutcome.NORMAL


class StandInBackuper:
    def __init__(self, tags):
        self.backup_tags = list(tags)

    def backup(self, tag):
        pass

    def restore(self, tag):
        POLICY.active = tag


# --------------------------------------------------------------------------------------------------
# rollout side


def build_rollout_manager(src: Path, args, train_parallel_config: dict):
    import time

    from miles.dashboard import hooks as dashboard_hooks
    from miles.ray.rollout.debug_data import (
        RolloutDataInjectionUtil,
        load_debug_rollout_data,
        save_debug_rollout_data,
    )
    from miles.ray.rollout.metrics import log_rollout_data
    from miles.ray.rollout.rollout_data_conversion import postprocess_rollout_data
    from miles.ray.rollout.train_data_conversion import (
        ROLLOUT_DATA_VALUE_SPEC,
        convert_samples_to_train_data,
        split_train_data_by_dp,
    )
    from miles.rollout.base_types import (
        RolloutFnConstructorInput,
        RolloutFnTrainInput,
        call_rollout_fn,
    )
    from miles.rollout.inference_rollout.compatibility import (
        call_rollout_function,
        load_rollout_function,
    )
    from miles.utils import object_store
    from miles.utils.environ import use_legacy_rollout_v1
    from miles.utils.misc import load_function
    from miles.utils.timer import timer

    ns = {
        "__name__": "miles.ray.rollout.rollout_manager",
        "asyncio": asyncio,
        "time": time,
        "logger": logging.getLogger("miles.ray.rollout.rollout_manager"),
        "dashboard_hooks": dashboard_hooks,
        "RolloutDataInjectionUtil": RolloutDataInjectionUtil,
        "load_debug_rollout_data": load_debug_rollout_data,
        "save_debug_rollout_data": save_debug_rollout_data,
        "log_rollout_data": log_rollout_data,
        "postprocess_rollout_data": postprocess_rollout_data,
        "ROLLOUT_DATA_VALUE_SPEC": ROLLOUT_DATA_VALUE_SPEC,
        "convert_samples_to_train_data": convert_samples_to_train_data,
        "split_train_data_by_dp": split_train_data_by_dp,
        "RolloutFnTrainInput": RolloutFnTrainInput,
        "call_rollout_fn": call_rollout_fn,
        "call_rollout_function": call_rollout_function,
        "object_store": object_store,
        "timer": timer,
    }
    methods = dumpkit.extract_functions(
        src / "miles/ray/rollout/rollout_manager.py",
        "RolloutManager",
        ["generate", "_get_rollout_data", "_health_monitoring_resume"],
        ns,
    )
    mgr = type("RolloutManager", (), methods)()
    # what RolloutManager.__init__ sets for these methods
    mgr.args = args
    mgr.weight_version = None
    object_store.init_instance(args, contribute_segment=False)
    mgr.data_source = load_function(args.data_source_path)(args)
    mgr.use_legacy_rollout_v1 = use_legacy_rollout_v1()
    assert not mgr.use_legacy_rollout_v1
    mgr.generate_rollout = load_rollout_function(
        RolloutFnConstructorInput(args=args, data_source=mgr.data_source),
        args.rollout_function_path,
    )
    mgr.custom_reward_post_process_func = None
    mgr.custom_convert_samples_to_train_data_func = None
    mgr.servers = {}
    mgr.rollout_id = -1
    mgr._health_monitors = []
    mgr._rollout_ft_enabled = args.use_fault_tolerance and "rollout" in args.ft_components
    # set by the train actors (rank 0) via set_train_parallel_config
    mgr.train_parallel_config = train_parallel_config
    return mgr


# --------------------------------------------------------------------------------------------------
# train side (one process per rank)


def build_train_actor(src: Path, args, with_ref: bool):
    from contextlib import ExitStack

    import miles.backends.training_utils.log_utils as log_utils
    from miles.backends.megatron_utils.ft.types import TrainStepOutcome
    from miles.backends.training_utils.data import (
        DataIterator,
        get_data_iterator,
        get_num_rollouts,
        get_rollout_data,
    )
    from miles.backends.training_utils.loss import (
        compute_advantages_and_returns,
        get_log_probs_and_entropy,
        get_values,
        log_train_advantage_computation_event,
    )
    from miles.backends.training_utils.parallel import get_parallel_state
    from miles.backends.training_utils.replay_data import fill_replay_data
    from miles.utils import train_dump_utils
    from miles.utils.audit_utils.event_logger.logger import event_logger_context
    from miles.utils.multi_lora import is_multi_lora_enabled
    from miles.utils.ray_utils import Box
    from miles.utils.replay_base import all_replay_managers
    from miles.utils.timer import Timer, inverse_timer, timer
    from miles.utils.tracking_utils.structured_log import with_logs
    from miles.utils.types import RolloutBatch

    ns = {
        "__name__": "miles.backends.megatron_utils.actor",
        "os": os,
        "torch": torch,
        "ray": sys.modules["ray"],
        "logger": logging.getLogger("miles.backends.megatron_utils.actor"),
        "ExitStack": ExitStack,
        "Box": Box,
        "RolloutBatch": RolloutBatch,
        "DataIterator": DataIterator,
        "WitnessInfo": object,
        "get_data_iterator": get_data_iterator,
        "get_num_rollouts": get_num_rollouts,
        "get_rollout_data": get_rollout_data,
        "get_parallel_state": get_parallel_state,
        "compute_advantages_and_returns": compute_advantages_and_returns,
        "get_log_probs_and_entropy": get_log_probs_and_entropy,
        "get_values": get_values,
        "log_train_advantage_computation_event": log_train_advantage_computation_event,
        "log_rollout_data": log_utils.log_rollout_data,
        "fill_replay_data": fill_replay_data,
        "all_replay_managers": all_replay_managers,
        "train_dump_utils": train_dump_utils,
        "TrainStepOutcome": TrainStepOutcome,
        # module-level function of megatron_utils/initialize.py (that module imports Megatron)
        "is_first_replica_megatron_main_rank": extract_module_function(
            src / "miles/backends/megatron_utils/initialize.py",
            "is_first_replica_megatron_main_rank",
            {"get_parallel_state": get_parallel_state},
        ),
        "is_multi_lora_enabled": is_multi_lora_enabled,
        "Timer": Timer,
        "timer": timer,
        "inverse_timer": inverse_timer,
        "with_logs": with_logs,
        "event_logger_context": event_logger_context,
        # stand-ins
        "forward_only": standin_forward_only,
        "train": standin_train,
        "log_perf_data": lambda *a, **k: None,
    }
    methods = dumpkit.extract_functions(
        src / "miles/backends/megatron_utils/actor.py",
        "MegatronTrainRayActor",
        [
            "train",
            "train_actor",
            "compute_log_prob",
            "_switch_model",
            "_set_replay_stage",
            "_use_rollout_replay",
            "_enable_weight_backup",
        ],
        ns,
    )
    actor = type("MegatronTrainRayActor", (), methods)()
    # what TrainRayActor.init / MegatronTrainRayActor.init set for these methods
    actor.args = args
    actor.role = "actor"
    actor.with_ref = with_ref
    actor.with_opd_teacher = False
    actor.model = [POLICY]
    actor.optimizer = actor.opt_param_scheduler = None
    tags = (["actor"] if actor._enable_weight_backup else []) + (["ref"] if with_ref else [])
    actor.weights_backuper = StandInBackuper(tags)
    actor._active_model_tag = "actor"
    actor._asleep = False
    actor.rollout_data_postprocess = None
    actor.prof = types.SimpleNamespace(step=lambda **k: None)
    actor.weight_updater = types.SimpleNamespace(pop_metrics=lambda: {})
    actor._heartbeat = types.SimpleNamespace(bump=lambda: None)
    actor._ft_test_action_executor = None
    actor._multi_lora_pending_push = set()
    for m in all_replay_managers:
        m.enabled = getattr(args, f"use_{m.name}_replay", False)
    Timer().start("train_wait")  # init's @with_defer(lambda: Timer().start("train_wait"))
    return actor


def worker(rank: int, src: str, case_name: str, scratch: str) -> None:
    src_p, scratch_p = Path(src), Path(scratch)
    install_stubs(src_p)
    logging.basicConfig(level=logging.WARNING)
    dumpkit.seed_all(1234)
    import torch.distributed as dist

    case = CASES[case_name]
    world = case["tp"] * case["cp"] * case["dp"]
    args, _, _ = make_args(case, scratch_p / case_name, scratch_p)
    _ARGS_HOLDER["args"] = args  # megatron set_args(args) in initialize.init

    from miles.backends.megatron_utils.ft.indep_dp import create_indep_dp_group
    from miles.backends.megatron_utils.parallel import create_megatron_parallel_state
    from miles.backends.training_utils.parallel import get_parallel_state, set_parallel_state
    from miles.utils import object_store
    from miles.utils.distributed_utils import init_gloo_group
    from miles.utils.ft_utils.indep_dp import IndepDPInfo

    object_store.init_instance(args)  # TrainRayActor.__init__
    dist.init_process_group(
        "gloo", init_method=f"file://{scratch_p / ('pg_' + case_name)}", rank=rank, world_size=world
    )
    init_gloo_group()
    args.rank, args.world_size = dist.get_rank(), dist.get_world_size()
    StandInMpu.build(case["tp"], case["cp"], case["dp"])  # mpu.initialize_model_parallel
    indep_dp = create_indep_dp_group(
        store_addr=None,
        indep_dp_info=IndepDPInfo.create_trivial(),
        megatron_rank=dist.get_rank(),
        megatron_world_size=dist.get_world_size(),
    )
    set_parallel_state(create_megatron_parallel_state(indep_dp=indep_dp))
    ps = get_parallel_state()
    POLICY.tp_rank, POLICY.tp_size = ps.tp.rank, ps.tp.size

    pack = torch.load(scratch_p / f"refs_{case_name}.pt", weights_only=False)
    # MegatronTrainRayActor.init's train_parallel_config, sent to the rollout manager by rank 0
    config = {
        "dp_size": ps.intra_dp.size,
        "cp_size": ps.cp.size,
        "vpp_size": ps.vpp_size,
        "microbatch_group_size_per_vp_stage": ps.microbatch_group_size_per_vp_stage,
    }
    assert config == pack["train_parallel_config"], (config, pack["train_parallel_config"])
    with_ref = args.kl_coef != 0 or args.use_kl_loss  # miles/ray/placement_group.py
    actor = build_train_actor(src_p, args, with_ref)
    actor.train(ROLLOUT_ID, pack["rollout_data_pack"]["data_ref"], witness_info=None, attempt=0)
    layout = {
        "rank": rank,
        "tp_rank": ps.tp.rank,
        "cp_rank": ps.cp.rank,
        "dp_rank": ps.intra_dp.rank,
    }
    (scratch_p / f"layout_{case_name}_{rank}.json").write_text(json.dumps(layout))
    dist.barrier()
    dist.destroy_process_group()


# --------------------------------------------------------------------------------------------------
# truth (what miles' DumpReader.load_joined returns)


def joined_rows(dump: Path) -> list[dict]:
    from miles.dashboard.dump_reader import DumpReader

    joined = DumpReader(dump).load_joined(ROLLOUT_ID)
    rows = []
    for position, sample in enumerate(joined.samples):
        row = {
            "rollout_position": position,
            "sample_index": sample.index,
            "group_index": sample.group_index,
            "status": sample.status.value,
            "reward": sample.reward,
        }
        tr = joined.train_rows.get(sample.index)
        row["in_train_dump"] = tr is not None
        if tr is not None:
            row.update(
                dumped_rank=tr.rank,
                rewards=dumpkit.jsonable(tr.reward),
                raw_reward=dumpkit.jsonable(tr.raw_reward),
                response_length=dumpkit.jsonable(tr.response_length),
                total_length=dumpkit.jsonable(tr.total_length),
                truncated=dumpkit.jsonable(tr.truncated),
                alignment_failed=tr.alignment_failed,
            )
            for key in [
                "loss_mask",
                "advantages",
                "returns",
                "log_probs",
                "rollout_log_probs",
                "ref_log_probs",
                "entropy",
                "ref_entropy",
            ]:
                row[key] = dumpkit.jsonable(getattr(tr, key))
        rows.append(row)
    return rows


def file_layout(dump: Path) -> dict:
    out = {}
    for f in sorted((dump / "train_data").iterdir()):
        pack = torch.load(f, weights_only=False, map_location="cpu")
        rd = pack["rollout_data"]
        out[f"train_data/{f.name}"] = {
            "rank": pack["rank"],
            "cp_rank": pack["cp_rank"],
            "cp_size": pack["cp_size"],
            "qkv_format": pack["qkv_format"],
            "sample_indices": [int(x) for x in rd["sample_indices"]],
            "keys": sorted(rd),
            "per_token_lengths": {
                k: [len(x) for x in rd[k]]
                for k in sorted(rd)
                if isinstance(rd[k], list) and rd[k] and torch.is_tensor(rd[k][0])
            },
        }
    return out


def run_case(name: str, src: Path, commit: str, scratch: Path, outdir: Path) -> None:
    case = CASES[name]
    dumpkit.seed_all(1234)
    dump = scratch / name
    if dump.exists():
        shutil.rmtree(dump)
    for stale in scratch.glob(f"layout_{name}_*.json"):
        stale.unlink()
    args, flags, megatron_flags = make_args(case, dump, scratch)
    train_parallel_config = {
        "dp_size": case["dp"],
        "cp_size": case["cp"],
        "vpp_size": 1,
        "microbatch_group_size_per_vp_stage": None,
    }
    mgr = build_rollout_manager(src, args, train_parallel_config)
    rollout_data_pack = asyncio.run(mgr.generate(ROLLOUT_ID))
    torch.save(
        {"rollout_data_pack": rollout_data_pack, "train_parallel_config": train_parallel_config},
        scratch / f"refs_{name}.pt",
    )
    from miles.utils import object_store

    object_store._INSTANCE = None  # the rollout manager's store; the next case makes its own
    pg = scratch / f"pg_{name}"
    if pg.exists():
        pg.unlink()

    import torch.multiprocessing as mp

    world = case["tp"] * case["cp"] * case["dp"]
    mp.start_processes(
        worker, args=(str(src), name, str(scratch)), nprocs=world, start_method="spawn"
    )

    layouts = [json.loads((scratch / f"layout_{name}_{r}.json").read_text()) for r in range(world)]
    rows = joined_rows(dump)
    if args.advantage_estimator == "grpo":
        for row in rows:  # GRPO: one value broadcast over the response
            adv = row.get("advantages")
            row["advantage"] = adv[0] if adv else None

    case_out = outdir / name
    if case_out.exists():
        shutil.rmtree(case_out)
    files = []
    for path in sorted(dump.rglob("*")):
        if path.is_file():
            rel = path.relative_to(dump)
            (case_out / rel.parent).mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, case_out / rel)
            files.append(str(rel))
    keys = [
        "advantage_estimator",
        "rewards_normalization",
        "grpo_std_normalization",
        "kl_coef",
        "kl_loss_type",
        "use_kl_loss",
        "normalize_advantages",
        "use_rollout_logprobs",
        "use_rollout_entropy",
        "gamma",
        "lambd",
        "n_samples_per_prompt",
        "rollout_batch_size",
        "global_batch_size",
        "micro_batch_size",
        "use_dynamic_batch_size",
        "balance_data",
        "reward_key",
        "qkv_format",
        "allgather_cp",
        "object_store_backend",
        "delay_split_train_data_by_dp",
        "save_debug_rollout_data",
        "save_debug_train_data",
    ]
    settings = {k: getattr(args, k, None) for k in keys}
    for k in ["save_debug_rollout_data", "save_debug_train_data"]:
        settings[k] = settings[k].replace(str(dump), "{dump_details}")
    truth = {
        "made_by": MADE_BY,
        "framework": "miles",
        "repo": "https://github.com/radixark/miles",
        "commit": commit,
        "case": name,
        "about": case["about"],
        "files": files,
        "flags": [
            f.replace(str(dump), "{dump_details}").replace(str(scratch), "{scratch}") for f in flags
        ],
        "megatron_flags": megatron_flags,
        "settings": settings,
        "parallel": {
            "world_size": world,
            "dp_size": case["dp"],
            "tp_size": case["tp"],
            "pp_size": 1,
            "cp_size": case["cp"],
            "rank_order": "tp-cp-ep-dp-pp",
            "ranks": layouts,
            "writer": "every rank writes train_data/{rollout_id}_{rank}.pt (global rank)",
        },
        "train_files": file_layout(dump),
        "versions": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "numpy": np.__version__,
        },
        "ran_unchanged": RAN_UNCHANGED,
        "stood_in": STOOD_IN,
        "formula": FORMULA[args.advantage_estimator],
        "samples_from": "miles.dashboard.dump_reader.DumpReader(dump_dir).load_joined(0): one row "
        "per rollout-dump sample (rollout order); per-token fields are the full response as "
        "DumpReader returns them (CP slices reassembled with assemble_log_prob_from_cp, TP copies "
        "deduplicated); None where the run did not dump the field",
        "samples": rows,
    }
    (case_out / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    print(f"{name}: wrote {case_out}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("outdir", type=Path)
    p.add_argument("--miles-src", default=os.environ.get("MILES_SRC"))
    p.add_argument("--scratch", type=Path, default=Path("/tmp/fw/miles-train/scratch"))
    p.add_argument("cases", nargs="*", default=list(CASES))
    a = p.parse_intermixed_args()
    if not a.miles_src:
        p.error("--miles-src (or $MILES_SRC) is required")
    unknown = set(a.cases) - set(CASES)
    if unknown:
        p.error(f"unknown cases {sorted(unknown)}; known: {list(CASES)}")
    a.scratch.mkdir(parents=True, exist_ok=True)
    src, commit = dumpkit.prepare_source(a.miles_src, a.scratch, "miles")
    install_stubs(src)
    logging.basicConfig(level=logging.WARNING)
    for name in a.cases:
        run_case(name, src, commit, a.scratch, a.outdir)


if __name__ == "__main__":
    main()
