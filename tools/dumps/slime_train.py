"""Write real slime debug dumps of one rollout step: `rollout_data/{id}.pt` and the train-side
`train_data/{id}.pt` (format_version 2), as written by slime's own code.

Made from slime github.com/THUDM/slime @ 624b824a898ab0ec1fcb4d373004c7f3852bf515 (2026-08-21),
torch 2.13.0+cpu, numpy 2.4.6, pyyaml, httpx, requests, packaging (what the imported slime modules
need), Python 3.11, CPU only, offline. slime is not on PyPI (the PyPI `slime` is another project):
its `slime/` package is extracted from the bare git dir that the search tool's
`fetch github:THUDM/slime` returned.

Run (framework venv, never part of CI):

    /tmp/fw/slime-train/venv/bin/python tools/dumps/slime_train.py OUTDIR \
        --slime-src PATH/TO/slime.git [--scratch DIR] [CASE..]

The venv: `python3.11 -m venv /tmp/fw/slime-train/venv && .../pip install torch numpy pyyaml httpx
requests packaging` (CPU torch). Takes ~1 min on 2 cores (the second case compiles slime's
`@torch.compile` compute_approx_kl with inductor/gcc). Cases (CASES): `default` (slime defaults,
GRPO) and `reinforce_plus_plus_kl` (reinforce_plus_plus, kl_coef 0.05, ref model, entropy,
--normalize-advantages). The batch (PROMPTS/SCRIPTS): 2 prompts x 4 samples; group 0 rewards
1.0/0.0/0.5/0.0 with a truncated sample and a multi-turn sample (3 tool tokens, loss mask 0), group
1 all 1.0 (zero variance).

`--slime-src` is a bare git clone (its HEAD's `slime/` is extracted into SCRATCH/src) or a folder
that already holds `slime/` (commit read from its COMMIT file). Each case runs with `--dump-details
SCRATCH/<case>` (slime then sets --save-debug-rollout-data {d}/rollout_data/{rollout_id}.pt and
--save-debug-train-data {d}/train_data/{rollout_id}.pt, slime/utils/arguments.py L1890-1892); the
two files slime writes are copied unchanged to OUTDIR/<case>/, with a truth.json beside them.
Seeded: two runs write byte-identical files.

The flow, one rollout step (rollout_id 0), 2 prompts x 4 samples, data-parallel size 2 (two real
processes joined by a gloo process group on loopback, so the DP gather is torch's own):

  rollout side (one process)   RolloutManager.generate -> _get_rollout_data -> call_rollout_fn
      -> save_debug_rollout_data (writes rollout_data/0.pt) -> log_rollout_data
      -> _convert_samples_to_train_data (-> _post_process_rewards: GRPO group normalisation)
      -> _split_train_data_by_dp (build_dp_schedule, tensorize_rollout_data_for_training, Box)
  train side (each DP rank)     MegatronTrainRayActor.train -> _get_rollout_data
      (process_rollout_data, slice_log_prob_with_cp) -> train_actor -> [compute_log_prob]
      -> compute_advantages_and_returns -> train (log-prob capture) -> save_debug_train_data
      (restore_context_parallel_fields_to_cpu, gather_object to DP rank 0, _build_dump_payload,
      torch.save -> train_data/0.pt)

slime's own code, run unchanged:
- imported from the extracted package: slime/utils/arguments.py (`get_slime_extra_args_provider`,
  `_pre_parse_mode`, `slime_validate_args`: every default below is slime's), the SGLang flags of
  slime/backends/sglang_utils/arguments.py, `Sample` (+ `append_response_tokens`, `to_dict`),
  `RolloutDataSourceWithBuffer` (group_index / index counters), `call_rollout_fn`,
  `set_current_rollout_id`, slime/observability/rollout_data_utils.py (`save_debug_rollout_data`,
  `tensorize_rollout_data_for_training`, `validate_rollout_id_annotated`), rollout_metrics
  `log_rollout_data`, `build_dp_schedule`, `Box`, `get_source`, slime/utils/data.py
  `process_rollout_data`, slime/backends/megatron_utils/cp_utils.py (`slice_log_prob_with_cp`,
  `all_gather_with_cp`), megatron_utils/data.py (`get_data_iterator`, `DataIterator`),
  megatron_utils/loss.py (`compute_advantages_and_returns`, `enable_log_prob_capture`,
  `_maybe_capture_log_probs`, `drain_captured_log_probs`), slime/utils/ppo_utils.py
  (`get_grpo_returns`, `get_reinforce_plus_plus_returns`, `chunked_discounted_returns`,
  `compute_approx_kl`), slime/observability/timer.py, slime/observability/train_data_utils.py
  (`save_debug_train_data`, `restore_context_parallel_fields_to_cpu`, `_build_dump_payload`);
- taken out of slime/ray/rollout.py with `ast` (that module imports ray/sglang at the top), the
  `RolloutManager` methods `generate`, `health_monitoring_resume`, `_get_rollout_data`,
  `_post_process_rewards`, `_convert_samples_to_train_data`, `_split_train_data_by_dp`, attached
  unchanged to a stand-in object carrying the attributes `RolloutManager.__init__` sets for them;
- taken out of slime/backends/megatron_utils/actor.py with `ast`, the `MegatronTrainRayActor`
  methods `train`, `train_actor`, `_get_rollout_data`, `_switch_model`, `compute_log_prob`,
  attached unchanged to a stand-in actor object.

Stubbed (imported, unused on this path): `ray` (`put`/`get` are identity: the object store),
`wandb`, `sglang.srt.server_args.ServerArgs` / `sglang_router.launch_router.RouterArgs` (no flags),
`transformers` / `PIL` (slime/utils/processing_utils.py; no tokenizer is loaded: no --prompt-data),
`megatron.core.mpu` (a module answering the parallel layout of this run: TP=PP=CP=1, DP=2, this
process's DP rank; its DP gloo group is torch's default gloo group), `PackedSeqParams`.

Stand-ins (not slime code):
- the rollout function (`--rollout-function-path`, default slime.rollout.sglang_rollout, needs an
  SGLang server): `scripted_rollout` takes slime's data-source groups and fills them from SCRIPTS
  with `Sample.append_response_tokens` (tool output `trainable=False`, SGLang-like meta_info with
  finish_reason stop/length, weight_version "default") and the rule reward;
- the model (Megatron): a bigram table `TinyPolicy` (vocab 24, seeded). Rollout log-probs ("SGLang")
  are computed from it in bf16, train-side log-probs/entropy in fp32; the reference model
  (`--ref-load`, only when kl_coef != 0 or --use-kl-loss) is a perturbed copy of the table. Megatron
  `forward_only` and `train` are stand-ins that walk slime's DataIterator over the scheduled
  micro-batches and call slime's `_maybe_capture_log_probs` as the policy loss does; no optimizer;
- `accelerator.current_device()` -> cpu; weights backuper/profiler/weight updater: no-ops;
  `train_metric_utils.log_rollout_data` / `log_perf_data` (metrics only, read-only): no-ops.
"""

from __future__ import annotations

import argparse
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

import numpy as np  # noqa: E402
import torch  # noqa: E402

MADE_BY = "tools/dumps/slime_train.py"
ROLLOUT_ID = 0
DP_SIZE = 2
VOCAB = 24
EOS = 2
N_SAMPLES = 4

# token ids only (no tokenizer). 1 = bos, 2 = eos.
PROMPTS = [[1, 5, 6, 7], [1, 8, 9]]
# per prompt, per sample: turns of (token ids, trainable), finish reason of the last turn, reward
SCRIPTS = [
    [
        {"turns": [([10, 11, 12, EOS], True)], "finish": "stop", "reward": 1.0},
        {"turns": [([13, 14, 15, 16, 17, 18], True)], "finish": "length", "reward": 0.0},
        {
            "turns": [([10, 19, 3], True), ([20, 21, 22], False), ([11, 12, EOS], True)],
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
        "about": "slime defaults: --advantage-estimator grpo, rewards normalization and GRPO std "
        "normalization on, kl_coef 0, no ref model; one training step per rollout, so the actor "
        "log-probs are captured from the training forward (can_reuse_log_probs_in_loss)",
        "flags": [],
    },
    "reinforce_plus_plus_kl": {
        "about": "--advantage-estimator reinforce_plus_plus --kl-coef 0.05 --use-rollout-entropy "
        "--normalize-advantages (slime requires it for reinforce_plus_plus) --ref-load: actor and "
        "ref log-probs recomputed by compute_log_prob (with entropy), k1 KL in the token rewards, "
        "discounted returns (gamma 1.0), no group normalization, advantages whitened over the "
        "loss-mask tokens of both DP ranks",
        "flags": [
            "--advantage-estimator",
            "reinforce_plus_plus",
            "--kl-coef",
            "0.05",
            "--use-rollout-entropy",
            "--normalize-advantages",
        ],
        "ref": True,
    },
}


RAN_UNCHANGED = [
    "slime/utils/arguments.py: get_slime_extra_args_provider, _pre_parse_mode, slime_validate_args",
    "slime/ray/rollout.py RolloutManager.generate, _get_rollout_data, _post_process_rewards, "
    "_convert_samples_to_train_data, _split_train_data_by_dp, health_monitoring_resume (ast)",
    "slime/rollout/data_source.py RolloutDataSourceWithBuffer; slime/utils/types.py Sample",
    "slime/observability/rollout_data_utils.py save_debug_rollout_data, "
    "tensorize_rollout_data_for_training",
    "slime/utils/dp_schedule.py build_dp_schedule",
    "slime/backends/megatron_utils/actor.py MegatronTrainRayActor.train, train_actor, "
    "_get_rollout_data, _switch_model, compute_log_prob (ast)",
    "slime/utils/data.py process_rollout_data",
    "slime/backends/megatron_utils/loss.py compute_advantages_and_returns, log-prob capture",
    "slime/utils/ppo_utils.py get_grpo_returns, get_reinforce_plus_plus_returns, "
    "compute_approx_kl; slime/utils/distributed_utils.py distributed_masked_whiten",
    "slime/observability/train_data_utils.py save_debug_train_data, _build_dump_payload "
    "(real torch.distributed gloo gather_object over 2 DP ranks)",
]
STOOD_IN = [
    "SGLang rollout (scripted token ids; rollout_log_probs from a bf16 bigram table)",
    "Megatron model forward/train (fp32 bigram table; ref = perturbed table); no optimizer step",
    "megatron.core.mpu (TP=PP=CP=1, DP=2), ray put/get identity, wandb/sglang/transformers stubs",
]
FORMULA = {
    "grpo": "rewards[i] = (r_i - mean_g) / (std_g + 1e-6), std unbiased (torch.std), group = "
    "n_samples_per_prompt consecutive samples of the rollout batch (reshape(-1, n)); "
    "advantages[i] = returns[i] = rewards[i] * ones(response_length), fp32, every response "
    "token (loss mask not applied); kl_coef not used",
    "reinforce_plus_plus": "token_rewards = -kl_coef * kl * loss_mask, + raw reward at the last "
    "loss_mask=1 token; returns = discounted cumsum (gamma) from the end; advantages = returns "
    "whitened (--normalize-advantages): (x - mean) * rsqrt(var_unbiased + 1e-8), mean/var over "
    "loss_mask=1 tokens of all DP ranks, applied to every token",
}


# --------------------------------------------------------------------------------------------------
# slime source, stubs


def _stub(name: str, **attrs) -> types.ModuleType:
    return dumpkit.stub_module(name, "__slime_dump_stub__", **attrs)


class _Layout:
    """What megatron.core.mpu answers in this run: TP = PP = CP = 1, DP = DP_SIZE."""

    dp_rank = 0


def install_stubs(src: Path) -> None:
    sys.path.insert(0, str(src))
    dumpkit.stub_ray_and_sglang("__slime_dump_stub__")
    _stub("wandb")
    _stub("PIL", Image=types.SimpleNamespace())
    _stub("PIL.Image")
    _stub(
        "transformers",
        AutoProcessor=None,
        AutoTokenizer=None,
        PreTrainedTokenizerBase=object,
        ProcessorMixin=object,
    )

    def dp_world(**kwargs):
        return DP_SIZE

    mpu = dict(
        is_pipeline_last_stage=lambda *a, **k: True,
        is_pipeline_first_stage=lambda *a, **k: True,
        get_tensor_model_parallel_rank=lambda: 0,
        get_tensor_model_parallel_world_size=lambda: 1,
        get_pipeline_model_parallel_rank=lambda: 0,
        get_pipeline_model_parallel_world_size=lambda: 1,
        get_virtual_pipeline_model_parallel_world_size=lambda: None,
        get_context_parallel_rank=lambda: 0,
        get_context_parallel_world_size=lambda: 1,
        get_context_parallel_group=lambda: None,
        get_data_parallel_rank=lambda **k: _Layout.dp_rank,
        get_data_parallel_world_size=dp_world,
        get_data_parallel_src_rank=lambda **k: 0,
        get_data_parallel_group=lambda **k: None,  # the default (gloo) group
        get_data_parallel_group_gloo=lambda **k: None,
    )
    _stub("megatron")
    _stub("megatron.core")
    _stub("megatron.core.mpu", **mpu)
    _stub("megatron.core.packed_seq_params", PackedSeqParams=dict)


# --------------------------------------------------------------------------------------------------
# arguments (slime's own parser and validation)


def make_args(case: dict, dump_dir: Path, scratch: Path):
    import slime.utils.arguments as A
    from slime.backends.sglang_utils.arguments import add_sglang_arguments

    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser = A.get_slime_extra_args_provider()(parser)
    parser = add_sglang_arguments(parser)
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
        "--rollout-num-gpus",
        "1",
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
    args = parser.parse_args(flags)
    argv, sys.argv = sys.argv, sys.argv[:1]
    try:
        for key, value in vars(A._pre_parse_mode()).items():
            setattr(args, key, value)
    finally:
        sys.argv = argv
    A.slime_validate_args(args)
    args.sglang_dp_size = 1  # SGLang's own --dp-size default (its flags are stubbed out)
    # Megatron flags read on this path (Megatron's parser is not loaded); Megatron's defaults
    args.seq_length = 64
    args.qkv_format = "thd"
    args.data_pad_size_multiplier = 128
    args.allgather_cp = False
    return args, flags


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

    def response_logprobs(
        self, tokens, response_length: int, *, table: str | None = None, bf16=False
    ):
        w = self.tables[table or self.active]
        if bf16:
            w = w.to(torch.bfloat16)
        tokens = torch.as_tensor(tokens, dtype=torch.long)
        prompt_length = len(tokens) - response_length
        logits = w[tokens[prompt_length - 1 : -1]].float()
        logp = torch.log_softmax(logits, dim=-1)
        target = tokens[prompt_length:]
        lp = logp.gather(-1, target[:, None])[:, 0]
        entropy = -(logp.exp() * logp).sum(-1)
        return lp, entropy


POLICY = TinyPolicy(seed=0)


def scripted_rollout(args, rollout_id, data_source, evaluation=False):
    """Stand-in for slime.rollout.sglang_rollout.generate_rollout (needs an SGLang server)."""
    from slime.utils.types import Sample

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
                    full = sample.tokens + toks
                    lp, _ = POLICY.response_logprobs(full, len(toks), table="actor", bf16=True)
                    meta = {
                        "finish_reason": {"type": script["finish"] if last else "stop"},
                        "weight_version": "default",
                        "cached_tokens": 0,
                        "prompt_tokens": len(sample.tokens),
                    }
                    sample.append_response_tokens(
                        args,
                        tokens=toks,
                        log_probs=[float(x) for x in lp],
                        trainable=True,
                        meta_info=meta,
                    )
                else:
                    sample.append_response_tokens(args, tokens=toks, trainable=False)
            sample.reward = script["reward"]
            if sample.status == Sample.Status.PENDING:
                sample.status = Sample.Status.COMPLETED
    return groups


def standin_forward_only(
    f, args, model, data_iterator, num_microbatches, store_prefix="", **kwargs
):
    """Stand-in for megatron_utils/model.py forward_only: per-sample log-probs (+entropy)."""
    for it in data_iterator:
        it.reset()
    out = {"log_probs": []}
    if args.use_rollout_entropy:
        out["entropy"] = []
    for n in num_microbatches:
        for _ in range(n):
            batch = data_iterator[0].get_next(["tokens", "total_lengths", "response_lengths"])
            for tokens, response_length in zip(
                batch["tokens"], batch["response_lengths"], strict=True
            ):
                lp, ent = model[0].response_logprobs(tokens, response_length)
                out["log_probs"].append(lp)
                if args.use_rollout_entropy:
                    out["entropy"].append(ent)
    return {f"{store_prefix}{k}": v for k, v in out.items()}


def standin_train(
    rollout_id, model, optimizer, opt_param_scheduler, data_iterator, num_microbatches, gbs
):
    """Stand-in for megatron_utils/model.py train: the policy-loss forward's log-prob capture."""
    from slime.backends.megatron_utils import loss as L

    for it in data_iterator:
        it.reset()
    keys = ["tokens", "total_lengths", "response_lengths", "partition"]
    for n in num_microbatches:
        for _ in range(n):
            batch = data_iterator[0].get_next(keys)
            log_probs = [
                model[0].response_logprobs(t, r)[0]
                for t, r in zip(batch["tokens"], batch["response_lengths"], strict=True)
            ]
            L._maybe_capture_log_probs(batch, log_probs)


class StandInBackuper:
    def __init__(self, tags):
        self.backup_tags = list(tags)

    def backup(self, tag):
        pass

    def restore(self, tag):
        POLICY.active = tag


# --------------------------------------------------------------------------------------------------
# rollout side


def build_rollout_manager(src: Path, args):
    import itertools
    import time

    import slime.utils.dp_schedule as dps
    from slime.observability import rollout_data_utils as rdu
    from slime.observability.rollout_metrics import log_eval_rollout_data, log_rollout_data
    from slime.rollout.base_types import call_rollout_fn
    from slime.rollout.data_source import RolloutDataSourceWithBuffer
    from slime.rollout.sample_hooks import set_current_rollout_id
    from slime.utils.data import get_source
    from slime.utils.misc import Box, load_function
    from slime.utils.types import Sample

    ns = {
        "__name__": "slime.ray.rollout",
        "Any": object,
        "itertools": itertools,
        "time": time,
        "torch": torch,
        "ray": sys.modules["ray"],
        "logger": logging.getLogger("slime.ray.rollout"),
        "Sample": Sample,
        "Box": Box,
        "load_function": load_function,
        "get_source": get_source,
        "build_dp_schedule": dps.build_dp_schedule,
        "call_rollout_fn": call_rollout_fn,
        "set_current_rollout_id": set_current_rollout_id,
        "log_rollout_data": log_rollout_data,
        "log_eval_rollout_data": log_eval_rollout_data,
        "load_debug_rollout_data": rdu.load_debug_rollout_data,
        "save_debug_rollout_data": rdu.save_debug_rollout_data,
        "tensorize_rollout_data_for_training": rdu.tensorize_rollout_data_for_training,
        "validate_rollout_id_annotated": rdu.validate_rollout_id_annotated,
        "validate_rollout_routed_experts_for_replay": (
            rdu.validate_rollout_routed_experts_for_replay
        ),
    }
    methods = dumpkit.extract_functions(
        src / "slime/ray/rollout.py",
        "RolloutManager",
        [
            "generate",
            "health_monitoring_resume",
            "_get_rollout_data",
            "_post_process_rewards",
            "_convert_samples_to_train_data",
            "_split_train_data_by_dp",
        ],
        ns,
    )
    mgr_cls = type("RolloutManager", (), methods)
    mgr = mgr_cls()
    # what RolloutManager.__init__ sets for these methods
    mgr.args = args
    mgr.data_source = RolloutDataSourceWithBuffer(args)
    mgr.generate_rollout = scripted_rollout
    mgr.custom_reward_post_process_func = None
    mgr.custom_convert_samples_to_train_data_func = None
    mgr._health_monitors = []
    mgr.rollout_id = -1
    # set by the train actors via set_train_parallel_config
    mgr.train_parallel_config = {
        "dp_size": DP_SIZE,
        "cp_size": 1,
        "vpp_size": 1,
        "microbatch_group_size_per_vp_stage": 1,
    }
    return mgr


# --------------------------------------------------------------------------------------------------
# train side (one process per DP rank)


def build_train_actor(src: Path, args, rank: int):
    import slime.backends.megatron_utils.data as mdata
    import slime.backends.megatron_utils.loss as L
    import slime.observability.train_data_utils as train_data_utils
    from slime.backends.megatron_utils.cp_utils import slice_log_prob_with_cp
    from slime.observability.timer import Timer, inverse_timer, timer
    from slime.utils.data import process_rollout_data
    from slime.utils.misc import Box
    from slime.utils.types import RolloutBatch

    ns = {
        "__name__": "slime.backends.megatron_utils.actor",
        "os": os,
        "torch": torch,
        "mpu": sys.modules["megatron.core.mpu"],
        "logger": logging.getLogger("slime.backends.megatron_utils.actor"),
        "Box": Box,
        "RolloutBatch": RolloutBatch,
        "DataIterator": mdata.DataIterator,
        "get_data_iterator": mdata.get_data_iterator,
        "process_rollout_data": process_rollout_data,
        "slice_log_prob_with_cp": slice_log_prob_with_cp,
        "Timer": Timer,
        "timer": timer,
        "inverse_timer": inverse_timer,
        "compute_advantages_and_returns": L.compute_advantages_and_returns,
        "enable_log_prob_capture": L.enable_log_prob_capture,
        "drain_captured_log_probs": L.drain_captured_log_probs,
        "get_log_probs_and_entropy": L.get_log_probs_and_entropy,
        "get_values": L.get_values,
        "train_data_utils": train_data_utils,
        # stand-ins
        "accelerator": types.SimpleNamespace(current_device=lambda: torch.device("cpu")),
        "forward_only": standin_forward_only,
        "train": standin_train,
        "train_metric_utils": types.SimpleNamespace(
            log_rollout_data=lambda *a, **k: None, log_perf_data=lambda *a, **k: None
        ),
        "RoutingReplay": types.SimpleNamespace(
            clear_all=lambda: None, clear_all_forward=lambda: None
        ),
        "is_megatron_main_rank": lambda: rank == 0,
    }
    methods = dumpkit.extract_functions(
        src / "slime/backends/megatron_utils/actor.py",
        "MegatronTrainRayActor",
        ["train", "train_actor", "_get_rollout_data", "_switch_model", "compute_log_prob"],
        ns,
    )
    actor = type("MegatronTrainRayActor", (), methods)()
    with_ref = args.kl_coef != 0 or args.use_kl_loss  # slime/ray/placement_group.py
    actor.args = args
    actor.role = "actor"
    actor.model = [POLICY]
    actor.optimizer = actor.opt_param_scheduler = None
    actor.weights_backuper = StandInBackuper(["actor", "ref"] if with_ref else ["actor"])
    actor._active_model_tag = "actor"
    actor.rollout_data_postprocess = None
    actor.prof = types.SimpleNamespace(step=lambda **k: None)
    actor.weight_updater = types.SimpleNamespace(pop_metrics=lambda: {})
    actor.wake_up = actor.sleep = lambda: None
    Timer().start("train_wait")  # what init's @with_defer(lambda: Timer().start("train_wait")) does
    return actor


def worker(rank: int, src: str, case_name: str, scratch: str) -> None:
    src_p, scratch_p = Path(src), Path(scratch)
    install_stubs(src_p)
    _Layout.dp_rank = rank
    dumpkit.seed_all(1234)
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"file://{scratch_p / ('pg_' + case_name)}",
        rank=rank,
        world_size=DP_SIZE,
    )
    case = CASES[case_name]
    args, _ = make_args(case, scratch_p / case_name, scratch_p)
    refs = torch.load(scratch_p / f"refs_{case_name}.pt", weights_only=False)
    actor = build_train_actor(src_p, args, rank)

    # capture the per-rank rollout_data the actor trains on (for truth.json)
    seen = {}
    real_save = sys.modules["slime.observability.train_data_utils"].save_debug_train_data

    def spy(args, *, rollout_id, rollout_data):
        seen["rollout_data"] = {k: v for k, v in rollout_data.items()}
        return real_save(args, rollout_id=rollout_id, rollout_data=rollout_data)

    actor.train_actor.__globals__["train_data_utils"] = types.SimpleNamespace(
        save_debug_train_data=spy
    )
    actor.train(ROLLOUT_ID, refs)
    rd = seen["rollout_data"]
    rows = []
    for i, pos in enumerate(rd["partition"]):
        row = {
            "rollout_position": pos,
            "sample_index": rd["sample_indices"][i],
            "data_parallel_rank": rank,
        }
        for key in [
            "rewards",
            "local_raw_reward",
            "response_lengths",
            "total_lengths",
            "truncated",
        ]:
            row[key] = dumpkit.jsonable(rd[key][i])
        for key in [
            "loss_masks",
            "advantages",
            "returns",
            "kl",
            "log_probs",
            "ref_log_probs",
            "entropy",
        ]:
            if key in rd:
                row[key] = dumpkit.jsonable(rd[key][i])
        rows.append(row)
    (scratch_p / f"rows_{case_name}_{rank}.json").write_text(json.dumps(rows))
    dist.barrier()
    dist.destroy_process_group()


# --------------------------------------------------------------------------------------------------


def run_case(name: str, src: Path, commit: str, scratch: Path, outdir: Path) -> None:
    case = CASES[name]
    dumpkit.seed_all(1234)
    dump = scratch / name
    if dump.exists():
        shutil.rmtree(dump)
    args, flags = make_args(case, dump, scratch)
    mgr = build_rollout_manager(src, args)
    refs = mgr.generate(ROLLOUT_ID)
    torch.save(refs, scratch / f"refs_{name}.pt")
    pg = scratch / f"pg_{name}"
    if pg.exists():
        pg.unlink()

    import torch.multiprocessing as mp

    mp.start_processes(
        worker, args=(str(src), name, str(scratch)), nprocs=DP_SIZE, start_method="spawn"
    )

    rows = []
    for r in range(DP_SIZE):
        rows += json.loads((scratch / f"rows_{name}_{r}.json").read_text())
    rows.sort(key=lambda row: row["rollout_position"])
    rollout = torch.load(dump / "rollout_data" / f"{ROLLOUT_ID}.pt", weights_only=False)
    for row in rows:
        s = rollout["samples"][row["rollout_position"]]
        row["group_index"] = s["group_index"]
        row["raw_reward"] = s["reward"]
        row["status"] = s["status"]
        if args.advantage_estimator == "grpo":
            row["advantage"] = row["advantages"][0]  # GRPO: one value broadcast over the response

    case_out = outdir / name
    if case_out.exists():
        shutil.rmtree(case_out)
    files = []
    for sub in ["rollout_data", "train_data"]:
        (case_out / sub).mkdir(parents=True)
        for f in sorted((dump / sub).iterdir()):
            shutil.copy2(f, case_out / sub / f.name)
            files.append(f"{sub}/{f.name}")
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
        "save_debug_rollout_data",
        "save_debug_train_data",
    ]
    settings = {k: getattr(args, k, None) for k in keys}
    for k in ["save_debug_rollout_data", "save_debug_train_data"]:
        settings[k] = settings[k].replace(str(dump), "{dump_details}")
    truth = {
        "made_by": MADE_BY,
        "framework": "slime",
        "repo": "https://github.com/THUDM/slime",
        "commit": commit,
        "case": name,
        "about": case["about"],
        "files": files,
        "flags": [
            f.replace(str(dump), "{dump_details}").replace(str(scratch), "{scratch}") for f in flags
        ],
        "settings": settings,
        "parallel": {
            "dp_size": DP_SIZE,
            "tp_size": 1,
            "pp_size": 1,
            "cp_size": 1,
            "writer_rank": 0,
        },
        "versions": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "numpy": np.__version__,
        },
        "ran_unchanged": RAN_UNCHANGED,
        "stood_in": STOOD_IN,
        "formula": FORMULA[args.advantage_estimator],
        "samples": rows,
    }
    (case_out / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    print(f"{name}: wrote {case_out}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("outdir", type=Path)
    p.add_argument("--slime-src", required=True)
    p.add_argument("--scratch", type=Path, default=Path("/tmp/fw/slime-train/scratch"))
    p.add_argument("cases", nargs="*", default=list(CASES))
    a = p.parse_intermixed_args()
    a.scratch.mkdir(parents=True, exist_ok=True)
    src, commit = dumpkit.prepare_source(a.slime_src, a.scratch, "slime")
    install_stubs(src)
    logging.basicConfig(level=logging.WARNING)
    for name in a.cases:
        run_case(name, src, commit, a.scratch, a.outdir)


if __name__ == "__main__":
    main()
