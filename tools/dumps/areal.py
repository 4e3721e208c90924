"""Write real AReaL 1.0.4 rollout dumps (``rollout.dump_to_file=True``) as test fixtures.

What runs unchanged (all from the ``areal==1.0.4`` wheel on PyPI):

* ``areal.infra.workflow_executor.WorkflowExecutor``: ``initialize``, ``submit``, ``wait``,
  its dispatcher threads, ``_create_workflow_task._execute_workflow`` and
  ``_dump_trajectory`` / ``_get_dump_dir`` (which calls ``StatsLogger.get_log_path``), the
  staleness manager and the task-id counter;
* ``areal.infra.remote_inf_engine.GroupedRolloutWorkflow`` (group_size 4) around
  ``areal.workflow.rlvr.RLVRWorkflow`` (chat template via ``areal.utils.hf_utils``,
  ``AsyncRewardWrapper`` running the reward function in AReaL's process pool);
* ``areal.utils.hf_utils.load_hf_tokenizer`` (the executor and the workflow both load the
  tokenizer from ``tokenizer_path``);
* for the truth file: ``areal.trainer.ppo.actor.PPOActor.compute_advantages`` (which calls
  ``areal.utils.data.batched_call`` / ``concat_batch`` / ``Normalization``) on each version's
  rollout batch, exactly as ``PPOTrainer.train`` calls it (``rl_trainer.py`` L702), with the
  actor settings of ``examples/math/gsm8k_grpo.yaml`` (tag v1.0.4): reward_scaling 10,
  reward_bias -0.5, kl_ctl 0, reward_norm group/group (group_size = n_samples = 4),
  adv_norm batch/batch, recompute_logprob + use_decoupled_loss.

What is stood in (not AReaL code):

* the inference engine: ``ScriptedEngine`` below has ``get_version`` and ``agenerate``, which
  returns scripted token ids (the k-th call for a prompt returns that prompt's k-th scripted
  completion, deterministic), logprobs and ``output_versions``; no model runs;
* the loggers ``areal.utils.stats_logger`` imports but a dump never uses (``swanlab``,
  ``trackio``, ``wandb``, ``tensorboardX``) are empty modules put into ``sys.modules``;
* ``PPOActor`` gets ``engine=None`` (``compute_advantages`` never touches the engine);
* the tokenizer is a word-level one built here (``tokenizers.models.WordLevel`` wrapped in
  ``transformers.PreTrainedTokenizerFast``), saved to a temporary folder whose path is
  ``rollout.tokenizer_path``.

Versions that ran: Python 3.11.7, areal 1.0.4 (wheel), torch 2.13.0+cpu (AReaL pins
torch<2.11; nothing used here depends on it), transformers 5.3.0, tokenizers 0.22.2,
aiofiles, torchdata, ray 2.60.0 (imported only).

How to run (venv outside the project, see the docstring above for what it holds)::

    python3 -m venv /tmp/fw/areal
    /tmp/fw/areal/bin/pip install torch==2.13.0
    /tmp/fw/areal/bin/pip install --no-deps areal==1.0.4
    /tmp/fw/areal/bin/pip install numpy transformers==5.3.0 aiofiles torchdata requests \
        aiohttp uvloop omegaconf==2.4.0.dev2 hydra-core==1.4.0.dev1 pydantic pyyaml packaging \
        orjson msgspec pybase64 psutil colorlog colorama tabulate rich tqdm tenacity flask \
        lark ray numba pillow einops openai
    /tmp/fw/areal/bin/python tools/dumps/areal.py OUTDIR      # e.g. tests/fixtures/real/areal

Each case folder ``OUTDIR/<case>/`` is the run's ``fileroot``: AReaL writes
``<case>/logs/<getpass.getuser()>/<experiment>/<trial>/{rollout|eval-rollout}/<version>/<task_id>.jsonl``
(on the machine that made the checked-in fixtures the user is ``root``). ``truth.json`` sits
beside ``logs/``. The script empties each case folder first, because AReaL opens dump files in
append mode.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import random
import shutil
import sys
import tempfile
import types
import zlib
from pathlib import Path

# This file is named areal.py: keep its own folder off sys.path so that `import areal` finds
# the installed package, not this script (once dumpkit, beside it, is imported).
sys.path.insert(0, str(Path(__file__).resolve().parent))
import dumpkit  # noqa: E402

dumpkit.leave_folder(__file__)

# --- loggers that areal.utils.stats_logger imports at module level but a dump never uses ---
for _name in ("swanlab", "trackio", "wandb", "tensorboardX"):
    if _name not in sys.modules:
        _m = types.ModuleType(_name)
        _m.__stub__ = True
        sys.modules[_name] = _m
sys.modules["tensorboardX"].SummaryWriter = type("SummaryWriter", (), {})

import torch  # noqa: E402

SEED = 1234
EXPERIMENT = "gsm8k-grpo"
TRIAL = "trial0"
GROUP_SIZE = 4
MAX_NEW_TOKENS = 12

# ---------------------------------------------------------------- tokenizer (built locally)
_WORDS_TEXT = (
    "what is one two three four five six seven eight nine ten zero plus minus times "
    "equals the answer so #### i think it , . ? lena has apples pages reads a day for "
    "days how many does she read step by and then get"
)
WORDS = _WORDS_TEXT.split()
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<|' + m['role'] + '|> ' + m['content'] + ' <eos> ' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


# ---------------------------------------------------------------- data and scripted outputs
# Each task: a one-message prompt, its answer word, and the 4 completions the stand-in engine
# returns for it (the k-th agenerate call for that prompt gets the k-th text). A trailing
# "<eos>" is an EOS-terminated completion; without it the stop reason is "length".
TRAIN_TASKS = {
    0: [  # version 0
        dict(
            q="what is two plus three ?",
            a="five",
            outs=[
                "two plus three equals five . #### five <eos>",
                "i think it is six . #### six <eos>",
                "two plus three is five <eos>",
                "i think step by step two plus three equals five and then get so",
            ],
        ),
        dict(
            q="what is four times two ?",
            a="eight",
            outs=[
                "four times two equals eight . #### eight <eos>",
                "#### eight <eos>",
                "four times two is eight . #### eight <eos>",
                "i think it is eight . #### eight <eos>",
            ],
        ),
        dict(
            q="lena reads two pages a day for three days . how many pages does she read ?",
            a="six",
            outs=[
                "two times three equals six . #### six <eos>",
                "two plus three equals five . #### five <eos>",
                "she reads six pages <eos>",
                "#### nine <eos>",
            ],
        ),
    ],
    1: [  # version 1
        dict(
            q="what is nine minus four ?",
            a="five",
            outs=[
                "nine minus four equals five . #### five <eos>",
                "#### four <eos>",
                "nine minus four equals three . #### three <eos>",
                "i think it is five <eos>",
            ],
        ),
        dict(
            q="lena has three apples and then get four . how many apples ?",
            a="seven",
            outs=[
                "three plus four equals seven . #### seven <eos>",
                "#### seven <eos>",
                "three plus four equals seven so the answer is seven . #### seven <eos>",
                "three plus four equals eight . #### eight <eos>",
            ],
        ),
        dict(
            q="what is ten minus ten ?",
            a="zero",
            outs=[
                "#### one <eos>",
                "ten minus ten equals one . #### one <eos>",
                "i think it is two . #### two <eos>",
                "ten minus ten equals ten <eos>",
            ],
        ),
    ],
}
EVAL_TASKS = {
    1: [  # evaluated with the version-1 weights
        dict(
            q="what is one plus one ?",
            a="two",
            outs=[
                "one plus one equals two . #### two <eos>",
                "#### two <eos>",
                "one plus one equals three . #### three <eos>",
                "i think it is two <eos>",
            ],
        ),
        dict(
            q="what is three times three ?",
            a="nine",
            outs=[
                "three times three equals nine . #### nine <eos>",
                "three times three equals six . #### six <eos>",
                "#### nine <eos>",
                "three times three is nine",
            ],
        ),
    ],
}
# One completion whose generation was interrupted by a weight update (AReaL's interruptible
# generation): its first tokens carry version 0, the rest version 1.
MIXED_VERSION = ("lena has three apples and then get four . how many apples ?", 2)


def reward_fn(prompt, completions, prompt_ids, completion_ids, answer, **kwargs):
    """gsm8k-style: 1 if '#### <answer>' is the final answer, 0.5 if the answer word appears
    without the '####' format, 0.1 for a formatted wrong answer, 0 otherwise. A run cut by
    the length limit (no <eos>) loses 0.2 (floored at 0)."""
    words = completions.replace("<eos>", " ").split()
    formatted = "####" in words
    final = (
        words[words.index("####") + 1]
        if formatted and words.index("####") + 1 < len(words)
        else None
    )
    if final == answer:
        r = 1.0
    elif answer in words and not formatted:
        r = 0.5
    elif formatted:
        r = 0.1
    else:
        r = 0.0
    if not completions.rstrip().endswith("<eos>"):
        r = max(0.0, r - 0.2)
    return r


class ScriptedEngine:
    """Stand-in for AReaL's RemoteInfEngine: just what WorkflowExecutor, StalenessManager and
    RLVRWorkflow call (get_version, agenerate)."""

    def __init__(self, tokenizer, script: dict[str, list[str]]):
        self.tokenizer = tokenizer
        self.script = script
        self.calls: dict[str, int] = {}
        self._version = 0

    def get_version(self) -> int:
        return self._version

    def set_version(self, v: int) -> None:
        self._version = v

    async def agenerate(self, req):
        from areal.api import ModelResponse

        prompt = self.tokenizer.decode(req.input_ids)
        key = next(q for q in self.script if q in prompt)
        k = self.calls.get(key, 0)
        self.calls[key] = k + 1
        text = self.script[key][k]
        out = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        out = out[: req.gconfig.max_new_tokens]
        stop_reason = "stop" if out and out[-1] == self.tokenizer.eos_token_id else "length"
        rng = random.Random(zlib.crc32(f"{key}|{k}".encode()))
        logprobs = [round(-rng.uniform(0.05, 2.5), 4) for _ in out]
        v = self._version
        versions = [v] * len(out)
        if (key, k) == MIXED_VERSION and v > 0:
            versions = [v - 1] * (len(out) // 2) + [v] * (len(out) - len(out) // 2)
        await asyncio.sleep(0)
        return ModelResponse(
            input_tokens=list(req.input_ids),
            output_tokens=out,
            output_logprobs=logprobs,
            output_versions=versions,
            stop_reason=stop_reason,
            tokenizer=self.tokenizer,
        )


def make_actor():
    from areal.api.cli_args import NormConfig, PPOActorConfig
    from areal.trainer.ppo.actor import PPOActor

    # actor section of examples/math/gsm8k_grpo.yaml at tag v1.0.4 (the keys that
    # _compute_advantages reads; the rest are defaults)
    cfg = PPOActorConfig(
        experiment_name=EXPERIMENT,
        trial_name=TRIAL,
        path="(none: no model is loaded)",
        reward_scaling=10.0,
        reward_bias=-0.5,
        kl_ctl=0.0,
        recompute_logprob=True,
        use_decoupled_loss=True,
        reward_norm=NormConfig(mean_level="group", std_level="group", group_size=GROUP_SIZE),
        adv_norm=NormConfig(mean_level="batch", std_level="batch"),
        max_new_tokens=MAX_NEW_TOKENS,
    )
    return PPOActor(cfg, engine=None), cfg


def run_case(case_dir: Path, tok_dir: str, tasks_by_version: dict, is_eval: bool) -> list:
    """Run AReaL's executor for each version; return [(version, trajectories)]."""
    from areal.api.cli_args import GenerationHyperparameters, InferenceEngineConfig
    from areal.infra.remote_inf_engine import GroupedRolloutWorkflow
    from areal.infra.workflow_executor import WorkflowExecutor
    from areal.utils import logging as alog
    from areal.utils.hf_utils import load_hf_tokenizer
    from areal.workflow.rlvr import RLVRWorkflow

    dumpkit.seed_all(SEED)
    tokenizer = load_hf_tokenizer(tok_dir)
    script = {t["q"]: t["outs"] for ts in tasks_by_version.values() for t in ts}
    engine = ScriptedEngine(tokenizer, script)
    n_per_version = max(len(ts) for ts in tasks_by_version.values())
    config = InferenceEngineConfig(
        experiment_name=EXPERIMENT,
        trial_name=TRIAL,
        fileroot=str(case_dir),
        max_concurrent_rollouts=n_per_version,
        consumer_batch_size=n_per_version,
        max_head_offpolicyness=2,
        tokenizer_path=tok_dir,
        dump_to_file=True,
    )
    executor = WorkflowExecutor(config, engine)
    executor.initialize()
    gconfig = GenerationHyperparameters(
        n_samples=GROUP_SIZE, max_new_tokens=MAX_NEW_TOKENS, temperature=1.0, greedy=False
    )
    workflow = GroupedRolloutWorkflow(
        RLVRWorkflow(reward_fn=reward_fn, gconfig=gconfig, tokenizer=tok_dir),
        GROUP_SIZE,
        alog.getLogger("GroupedRolloutWorkflow"),
    )
    batches = []
    try:
        for version, tasks in sorted(tasks_by_version.items()):
            engine.set_version(version)
            # AReaL's own counter hands out task ids at submit time, in this order
            for t in tasks:
                data = {"messages": [{"role": "user", "content": t["q"]}], "answer": t["a"]}
                executor.submit(data, workflow=workflow, is_eval=is_eval)
            batches.append((version, executor.wait(count=len(tasks), timeout=120)))
    finally:
        executor.destroy()
    return batches, tokenizer


def rel(p: Path, base: Path) -> str:
    return p.relative_to(base).as_posix()


def read_dump(case_dir: Path):
    rows = []
    for f in sorted(
        case_dir.rglob("*.jsonl"),
        key=lambda p: (p.parent.parent.name, int(p.parent.name), int(p.stem)),
    ):
        for n, line in enumerate(f.read_text().splitlines(), start=1):
            rows.append((f, n, json.loads(line)))
    return rows


def truth_advantages(batches, tokenizer):
    """AReaL's own PPOActor.compute_advantages on each version's batch: per-row advantage, keyed
    by (version, prompt text, sample_idx); the reward_norm step alone under the same key + "rn"."""
    actor, cfg = make_actor()
    out = {}
    for version, trajs in batches:
        adv = actor.compute_advantages([{k: v.clone() for k, v in t.items()} for t in trajs])
        for t, a in zip(trajs, adv, strict=True):
            for i in range(t["input_ids"].shape[0]):
                seqlen = int(t["attention_mask"][i].sum())
                lm = t["loss_mask"][i, :seqlen]
                prompt_ids = t["input_ids"][i, :seqlen][lm == 0].tolist()
                m = a["loss_mask"][i] > 0
                vals = a["advantages"][i][m]
                assert torch.allclose(vals, vals[0].expand_as(vals), atol=1e-6), vals
                out[(version, tokenizer.decode(prompt_ids, skip_special_tokens=False), i)] = float(
                    vals[0]
                )
        # the group step alone (reward_norm), also AReaL's code unchanged
        for t in trajs:
            r = t["rewards"].float()
            r = torch.clip(
                (r + cfg.reward_bias) * cfg.reward_scaling,
                max=cfg.reward_clip,
                min=-cfg.reward_clip,
            )
            rn = actor.reward_norm(r)
            seqlen0 = int(t["attention_mask"][0].sum())
            lm0 = t["loss_mask"][0, :seqlen0]
            p = tokenizer.decode(
                t["input_ids"][0, :seqlen0][lm0 == 0].tolist(), skip_special_tokens=False
            )
            for i in range(len(rn)):
                out[(version, p, i, "rn")] = float(rn[i])
    return out


def versions_info():
    dists = ("areal", "torch", "transformers", "tokenizers", "aiofiles", "torchdata")
    return {"python": sys.version.split()[0], **dumpkit.installed_versions(dists)}


def main(outdir: str) -> None:
    outdir = Path(outdir).resolve()
    user = getpass.getuser()
    tok_tmp = tempfile.mkdtemp(prefix="areal_tok_")
    dumpkit.save_chat_tokenizer(tok_tmp, SPECIALS, WORDS, CHAT_TEMPLATE)
    common = {
        "experiment_name": EXPERIMENT,
        "trial_name": TRIAL,
        "user": user,
        "group_size": GROUP_SIZE,
        "max_new_tokens": MAX_NEW_TOKENS,
        "workflow": "GroupedRolloutWorkflow(RLVRWorkflow, group_size=4)",
        "engine": "stand-in ScriptedEngine (scripted token ids), not an inference server",
        "line_numbers": "1-based",
        "reward_fn": reward_fn.__doc__.strip(),
    }
    cases = [
        (
            "default",
            TRAIN_TASKS,
            False,
            "2 policy versions x 3 tasks (prompts) x group_size 4, train rollouts "
            "(rollout/{version}/{task_id}.jsonl); each version folder is exactly one training "
            "batch here (in an asynchronous AReaL run a batch can mix tail versions). Task 1's "
            "four rewards are all 1.0 (reward_norm 0, yet the batch-level adv_norm moves its "
            "advantage off 0); task 5 has three equal rewards and one lower. Task 0 sample 3 "
            "and task 4 sample 2 stop at max_new_tokens (no <eos>); task 4 sample 2 was "
            "generated across a weight update (output versions 0 then 1). head_version is -1 "
            "on every line: RLVRWorkflow gives prompt tokens version -1 and _dump_trajectory "
            "takes the min over all tokens.",
        ),
        (
            "eval",
            EVAL_TASKS,
            True,
            "Evaluation rollouts (eval-rollout/{version}/{task_id}.jsonl) from a separate "
            "executor (the trainer's eval_rollout engine: its task ids restart at 0), 2 tasks x "
            "group_size 4 at version 1. Eval rollouts are not trained on: AReaL computes no "
            "advantage for them, so truth rows have none.",
        ),
    ]
    for case, tasks, is_eval, desc in cases:
        case_dir = outdir / case
        if case_dir.exists():
            shutil.rmtree(case_dir)
        case_dir.mkdir(parents=True)
        batches, tokenizer = run_case(case_dir, tok_tmp, tasks, is_eval)
        advs = {} if is_eval else truth_advantages(batches, tokenizer)
        rows = []
        for f, n, rec in read_dump(case_dir):
            row = {
                "file": rel(f, case_dir),
                "line": n,
                "task_id": rec["task_id"],
                "sample_idx": rec["sample_idx"],
                "reward": rec["reward"],
            }
            key = (rec["tail_version"], rec["prompt"], rec["sample_idx"])
            if not is_eval:
                row["advantage"] = advs[key]
                row["reward_norm"] = advs[key + ("rn",)]
            rows.append(row)
        sub = "eval-rollout" if is_eval else "rollout"
        settings = dict(
            common,
            is_eval=is_eval,
            fileroot="the case folder itself",
            dump_path=f"logs/{user}/{EXPERIMENT}/{TRIAL}/{sub}/<tail_version>/<task_id>.jsonl",
        )
        if not is_eval:
            settings["advantage"] = (
                "AReaL's own PPOActor.compute_advantages (areal/trainer/ppo/actor.py, run "
                "unchanged) on each version's rollout batch (3 trajectories of 4 rows, "
                "concatenated by batched_call), actor settings from examples/math/"
                "gsm8k_grpo.yaml @v1.0.4: reward_scaling=10, reward_bias=-0.5, reward_clip=20, "
                "kl_ctl=0, discount=1, gae_lambda=1, reward_norm={mean_level: group, "
                "std_level: group, group_size: 4, std_unbiased: true, eps: 1e-5}, "
                "adv_norm={mean_level: batch, std_level: batch, std_unbiased: true, eps: 1e-5}. "
                "'advantage' is the per-token advantage on the row's completion tokens (the "
                "same value on every one of them); the batch-level adv_norm is token-weighted "
                "(mean/std over all completion tokens of the version's batch), so it depends on "
                "completion lengths (seqlen - prompt_len). 'reward_norm' is the group step alone: "
                "Normalization(group, group) of clip((reward - 0.5) * 10), i.e. "
                "(r - mean_group) / (std_group_unbiased + 1e-5) on the scaled reward."
            )
        truth = {
            "made_by": "tools/dumps/areal.py",
            "framework": "AReaL 1.0.4",
            "versions": versions_info(),
            "case": case,
            "description": desc,
            "settings": settings,
            "rows": rows,
        }
        (case_dir / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
        print(f"{case}: {len(rows)} rows -> {case_dir}")
    shutil.rmtree(tok_tmp, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: areal.py OUTDIR")
    main(sys.argv[1])
    sys.stdout.flush()
    os._exit(0)  # AReaL's reward process pool and dispatcher threads: do not wait on atexit
