"""Write real tinker-cookbook RL rollout summaries (``*_rollout_summaries.jsonl``) as test fixtures.

tinker-cookbook's RL loop runs on a CPU client and sends sampling / training to the Tinker
service. Here the whole client-side loop runs unchanged and only the service is stood in.

What runs unchanged (all from the ``tinker-cookbook==0.6.1`` wheel on PyPI, with
``tinker==0.38.0``):

* ``tinker_cookbook.rl.train.main`` with ``Config`` defaults except the fields set in
  ``make_config`` below: ``ml_log.setup_logging`` (``JsonLogger`` -> ``TrainingRunStore`` over
  ``LocalStorage``), ``checkpoint_utils.get_last_checkpoint`` / ``CheckpointManager``,
  ``RLTestSetEvaluator`` for the builder's test set (name ``"test"``), ``do_sync_training``
  (the default execution mode), ``do_group_rollout_and_filter_constant_reward`` ->
  ``do_group_rollout`` -> ``FailFast`` strategy -> ``rollout_runner.run_rollout`` (the loop that
  builds ``Transition`` / ``Trajectory`` / ``TrajectoryGroup``), ``TinkerTokenCompleter``,
  ``_maybe_export_rollout_summary_jsonl`` -> ``rl/rollout_logging.py
  serialize_rollout_summaries_from_groups`` -> ``TrainingRunStore.write_rollouts`` (which writes
  the files), ``prepare_minibatch`` -> ``rl/data_processing.py compute_advantages`` and
  ``assemble_training_data``, ``train_step``,
  ``compute_full_batch_metrics_and_get_sampling_client``, logtree, and the final
  ``save_final_async``;
* the environment is a tinker-cookbook ``Env`` / ``EnvGroupBuilder`` / ``RLDataset`` /
  ``RLDatasetBuilder`` written here, the way a cookbook user writes one (a multi-turn
  "tiny math" env: up to 3 turns per episode; see ``TinyMathEnv``).

What is stood in (not tinker code):

* the Tinker service: ``tinker.ServiceClient`` is replaced by ``StubServiceClient``, whose
  training client answers ``forward_backward`` (returning the sampling logprobs as the
  training logprobs), ``optim_step``, ``save_state``, ``save_weights_for_sampler`` and
  ``save_weights_and_get_sampling_client``, and whose sampling client's ``sample`` returns
  scripted token ids: it reads the question from the prompt and answers right with a
  per-question probability, drawing from an RNG seeded by (SEED, sampler version, prompt ids,
  how many times that prompt was already sampled) — deterministic, no model runs;
* ``tinker_cookbook.rl.train.get_tokenizer`` returns a word-level tokenizer built here
  (``tokenizers.models.WordLevel`` wrapped in ``transformers.PreTrainedTokenizerFast``);
* ``tinker_cookbook.rl.train.fetch_model_pricing`` returns ``None`` (it would download a
  pricing file; ``None`` is what it returns for an unlisted model);
* two recorders wrap (and call) ``train.compute_advantages`` and
  ``train._maybe_export_rollout_summary_jsonl`` so that ``truth.json`` can name, for each
  line, the advantage tinker's own ``compute_advantages`` gave that trajectory.

Versions that ran: Python 3.11.7, tinker-cookbook 0.6.1, tinker 0.38.0, chz, torch 2.13.0+cpu,
transformers, tokenizers (see ``versions`` in each truth.json). tinker-cookbook 0.6.1 asks for
``tml-renderers>=0.4.1``, which PyPI here does not have; nothing on this path imports it.
``rl/rollout_logging.py`` in 0.6.1 is identical to GitHub thinking-machines-lab/tinker-cookbook
at 9dfcc3a2cf44432d621a01005073dc6d76a1e87a (2026-08-19).

How to run::

    python3 -m venv /tmp/fw/tinker
    /tmp/fw/tinker/bin/pip install --no-deps tinker-cookbook==0.6.1
    /tmp/fw/tinker/bin/pip install tinker==0.38.0 chz torch==2.13.0 pillow termcolor \
        transformers tokenizers blobfile datasets cloudpickle pyrage tiktoken rich aiohttp \
        anyio safetensors
    /tmp/fw/tinker/bin/python tools/dumps/tinker.py OUTDIR     # e.g. tests/fixtures/real/tinker

Each case folder ``OUTDIR/<case>/`` is the run's ``log_path``. tinker writes
``iteration_{i:06d}/train_rollout_summaries.jsonl`` for each training iteration ``i`` and
``iteration_{i:06d}/eval_test_rollout_summaries.jsonl`` where the test-set evaluator ran (before
the training step of iteration 0, since ``i % eval_every == 0``, and once more after the last
step, in ``iteration_{num_batches:06d}``, which then holds only the eval file), plus
``iteration_*/{train,eval_test}_logtree.json`` / ``{train,eval_test}.html`` (decoded text for
``num_groups_to_log`` groups, with wall-clock stamps and absolute paths; ~0.7 MB each),
``metrics.jsonl``, ``timing_spans.jsonl`` (if any), ``config.json``, ``code.diff``, ``logs.log``
and ``checkpoints.jsonl``. The fixture keeps the rollout summaries and ``checkpoints.jsonl``;
the rest (wall-clock timings, absolute paths, size) is removed (listed in truth.json
``removed``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

# this file is itself named tinker.py: keep its folder off sys.path so that ``import tinker``
# finds the Tinker SDK, not this script (once dumpkit, beside it, is imported)
sys.path.insert(0, str(Path(__file__).resolve().parent))
import dumpkit  # noqa: E402

dumpkit.leave_folder(__file__)

import chz  # noqa: E402
import tinker  # noqa: E402
import torch  # noqa: E402
from tinker_cookbook.rl import train  # noqa: E402
from tinker_cookbook.rl.types import (  # noqa: E402
    Env,
    EnvGroupBuilder,
    RLDataset,
    RLDatasetBuilder,
    StepResult,
)

SEED = 20260902
MODEL = "Qwen/Qwen3-4B-Instruct-2507"  # a non-Inkling name: FailFast, no termination policy
MAX_TURNS = 3
MAX_TOKENS = 16

# ---------------------------------------------------------------- tokenizer (built locally)
NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
_WORDS_TEXT = (
    "what is plus minus times equals the answer so #### i think it , . ? no try again "
    "you are a helpful assistant put after not"
)
WORDS = NUMBERS + _WORDS_TEXT.split()
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<|' + m['role'] + '|> ' + m['content'] + ' <eos> ' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)
SYSTEM = "you are a helpful assistant . put the answer after ####"
RETRY = "no , try again"
_TOKENIZER = None


def build_tokenizer(folder: str):
    return dumpkit.save_chat_tokenizer(folder, SPECIALS, WORDS, CHAT_TEMPLATE)


def tok():
    assert _TOKENIZER is not None
    return _TOKENIZER


def encode(text: str) -> list[int]:
    return tok().encode(text, add_special_tokens=False)


# ---------------------------------------------------------------- the environment (user code)
# reward modes:
#   "per_step":   every turn is rewarded: +1.0 right, -0.2 wrong, -0.5 no "####" answer;
#   "final_step": 0.0 on every turn but the last, which gets 1.0 if right else 0.0;
#   "group":      0.0 on every turn; EnvGroupBuilder.compute_group_rewards gives 1.0 to each
#                 trajectory that ended right (tinker's ``final_reward``), else 0.0.


class TinyMathEnv(Env):
    def __init__(self, question: str, answer: str, mode: str):
        self.question = question
        self.answer = answer
        self.mode = mode
        self.turn = 0
        self.solved = False
        self.context: list[int] = []

    async def initial_observation(self):
        msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": self.question}]
        ids = tok().apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        self.context = list(ids)
        return tinker.ModelInput.from_ints(self.context), [tok().eos_token_id]

    async def step(self, action, *, extra=None) -> StepResult:
        self.turn += 1
        text = tok().decode(action, skip_special_tokens=True)
        m = re.search(r"####\s*(\w+)", text)
        pred = m.group(1) if m else None
        correct = pred == self.answer
        done = correct or self.turn >= MAX_TURNS
        self.solved = correct
        if self.mode == "per_step":
            reward = 1.0 if correct else (-0.5 if pred is None else -0.2)
        elif self.mode == "final_step":
            reward = (1.0 if correct else 0.0) if done else 0.0
        else:
            reward = 0.0
        metrics: dict = {"correct": float(correct), "format": float(pred is not None)}
        if done:
            metrics["stop/" + ("completed" if correct else "max_turns")] = 1.0
        logs = {"turn": self.turn, "prediction": pred or "", "answer": self.answer}
        if done:
            next_ob = tinker.ModelInput.empty()
        else:
            self.context = (
                self.context + list(action) + encode(f"<|user|> {RETRY} <eos> <|assistant|>")
            )
            next_ob = tinker.ModelInput.from_ints(self.context)
        return StepResult(
            reward=reward,
            episode_done=done,
            next_observation=next_ob,
            next_stop_condition=[tok().eos_token_id],
            metrics=metrics,
            logs=logs,
        )


@dataclass(frozen=True)
class TinyMathGroupBuilder(EnvGroupBuilder):
    question: str
    answer: str
    mode: str
    group_size: int

    async def make_envs(self) -> Sequence[Env]:
        return [TinyMathEnv(self.question, self.answer, self.mode) for _ in range(self.group_size)]

    async def compute_group_rewards(self, trajectory_group, env_group):
        if self.mode != "group":
            return [(0.0, {}) for _ in trajectory_group]
        return [(1.0 if e.solved else 0.0, {"group_correct": float(e.solved)}) for e in env_group]

    def logging_tags(self) -> list[str]:
        return ["tiny_math", self.mode]


class TinyMathDataset(RLDataset):
    def __init__(self, batches: list[list[TinyMathGroupBuilder]]):
        self.batches = batches

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        return self.batches[index]

    def __len__(self) -> int:
        return len(self.batches)


def q(a: int, b: int) -> tuple[str, str]:
    return f"what is {NUMBERS[a]} plus {NUMBERS[b]} ?", NUMBERS[a + b]


# (question, answer, mode); per batch 3 groups of 4
TRAIN_BATCHES = [
    [(*q(2, 3), "per_step"), (*q(1, 4), "final_step"), (*q(3, 3), "group")],
    [(*q(1, 1), "per_step"), (*q(4, 2), "final_step"), (*q(2, 5), "group")],
]
TEST_BATCHES = [[(*q(3, 4), "per_step"), (*q(5, 1), "final_step")]]
GROUP_SIZE = 4
TEST_GROUP_SIZE = 2
# the stand-in policy's chance of answering each question right (per turn)
SKILL = {
    q(2, 3)[0]: 0.45,
    q(1, 4)[0]: 0.3,
    q(3, 3)[0]: 0.5,
    q(1, 1)[0]: 1.0,  # always right on turn 1: a group whose four total rewards are equal
    q(4, 2)[0]: 0.35,
    q(2, 5)[0]: 0.4,
    q(3, 4)[0]: 0.5,
    q(5, 1)[0]: 0.5,
}


def _builders(batches, group_size):
    return [[TinyMathGroupBuilder(qq, a, m, group_size) for qq, a, m in b] for b in batches]


@chz.chz
class TinyMathDatasetBuilder(RLDatasetBuilder):
    name: str = "tiny_math"

    async def __call__(self):
        return (
            TinyMathDataset(_builders(TRAIN_BATCHES, GROUP_SIZE)),
            TinyMathDataset(_builders(TEST_BATCHES, TEST_GROUP_SIZE)),
        )


# ---------------------------------------------------------------- stand-in Tinker service
class _Done:
    """An already-resolved future (awaitable, with ``.result()``) like tinker's APIFuture."""

    def __init__(self, value):
        self.value = value

    def __await__(self):
        if False:  # pragma: no cover - makes this a generator
            yield
        return self.value

    def result(self, timeout=None):
        return self.value


class StubSamplingClient:
    def __init__(self, version: int, log: list):
        self.version = version
        self.seen: dict[tuple, int] = {}
        self.log = log

    async def sample(self, prompt, num_samples, sampling_params, **kwargs):
        assert num_samples == 1
        ids = tuple(prompt.to_ints())
        n = self.seen.get(ids, 0)
        self.seen[ids] = n + 1
        key = f"{SEED}|{self.version}|{','.join(map(str, ids))}|{n}"
        rng = random.Random(hashlib.sha256(key.encode()).hexdigest())
        text = tok().decode(list(ids), skip_special_tokens=False)
        m = re.findall(r"what is (\w+) plus (\w+) \?", text)
        a, b = m[-1]
        truth = NUMBERS[NUMBERS.index(a) + NUMBERS.index(b)]
        question = f"what is {a} plus {b} ?"
        filler = rng.choice(["", "so", "i think", "i think it is"])
        u = rng.random()
        if u < SKILL[question]:
            words = f"{filler} the answer is #### {truth}"
        elif u < SKILL[question] + 0.15:
            words = f"{filler} i think it is {rng.choice(NUMBERS)}"  # no "####": format miss
        else:
            wrong = rng.choice([w for w in NUMBERS if w != truth])
            words = f"{filler} the answer is #### {wrong}"
        tokens = encode(words.strip()) + [tok().eos_token_id]
        assert len(tokens) <= sampling_params.max_tokens
        logprobs = [round(-rng.uniform(0.01, 2.5), 4) for _ in tokens]
        seq_id = f"v{self.version}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
        self.log.append(seq_id)
        seq = tinker.SampledSequence(
            stop_reason="stop", sequence_id=seq_id, _tokens_list=tokens, _logprobs_list=logprobs
        )
        return tinker.SampleResponse(sequences=[seq], prompt_cache_hit_tokens=0)


class StubTrainingClient:
    def __init__(self):
        self.version = -1
        self.sample_log: list = []
        self.fwd_bwd_advantages: list[list[float]] = []

    async def save_weights_and_get_sampling_client(self, record_stability_info=False, **kw):
        self.version += 1
        return StubSamplingClient(self.version, self.sample_log)

    def create_sampling_client(self, path, record_stability_info=False, **kw):
        self.version += 1
        return _Done(StubSamplingClient(self.version, self.sample_log))

    def forward_backward(self, data, loss_fn, loss_fn_config=None, **kw):
        outs = []
        for d in data:
            self.fwd_bwd_advantages.append(d.loss_fn_inputs["advantages"].tolist())
            outs.append({"logprobs": d.loss_fn_inputs["logprobs"]})
        return _Done(
            tinker.ForwardBackwardOutput(
                loss_fn_output_type="ArrayRecord", loss_fn_outputs=outs, metrics={}
            )
        )

    def optim_step(self, adam_params, **kw):
        return _Done(tinker.OptimStepResponse(metrics={}))

    def save_state(self, name, ttl_seconds=None, **kw):
        return _Done(SimpleNamespace(path=f"tinker://stub-session/weights/{name}"))

    def save_weights_for_sampler(self, name, ttl_seconds=None, **kw):
        return _Done(SimpleNamespace(path=f"tinker://stub-session/sampler_weights/{name}"))


class StubServiceClient:
    last_training_client: StubTrainingClient | None = None

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    async def create_lora_training_client(self, base_model, rank=32, **kw):
        StubServiceClient.last_training_client = StubTrainingClient()
        return StubServiceClient.last_training_client


# ---------------------------------------------------------------- recorders (call the originals)
class Recorder:
    def __init__(self):
        self.adv_by_group: dict[int, list[float]] = {}  # id(TrajectoryGroup) -> advantages
        self.exports: list[tuple[str, int, list]] = []  # (base_name, iteration, groups)
        self.keep: list = []

    def install(self):
        orig_adv = train.compute_advantages
        orig_export = train._maybe_export_rollout_summary_jsonl

        def compute_advantages(trajectory_groups_P):
            out = orig_adv(trajectory_groups_P)
            for g, a in zip(trajectory_groups_P, out, strict=True):
                self.adv_by_group[id(g)] = [float(x) for x in a.tolist()]
                self.keep.append(g)
            return out

        def export(*, config, base_name, split, iteration, groups_P, store):
            self.exports.append((base_name, iteration, [g.trajectory_group for g in groups_P]))
            return orig_export(
                config=config,
                base_name=base_name,
                split=split,
                iteration=iteration,
                groups_P=groups_P,
                store=store,
            )

        train.compute_advantages = compute_advantages
        train._maybe_export_rollout_summary_jsonl = export
        return orig_adv, orig_export


def make_config(log_path: Path, **overrides) -> train.Config:
    return train.Config(
        learning_rate=1e-5,
        dataset_builder=TinyMathDatasetBuilder(),
        model_name=MODEL,
        recipe_name="tiny_math_rl",
        max_tokens=MAX_TOKENS,
        log_path=str(log_path),
        **overrides,
    )


REMOVED = [
    "metrics.jsonl",
    "timing_spans.jsonl",
    "config.json",
    "code.diff",
    "logs.log",
    "*.html",
    "*_logtree.json",
]


def run_case(case_dir: Path, overrides: dict) -> tuple[Recorder, StubTrainingClient]:
    rec = Recorder()
    saved = rec.install()
    saved_sc = tinker.ServiceClient
    tinker.ServiceClient = StubServiceClient
    train.get_tokenizer = lambda name: tok()
    train.fetch_model_pricing = lambda name, **kw: None
    random.seed(SEED)
    torch.manual_seed(SEED)
    try:
        asyncio.run(train.main(make_config(case_dir, **overrides)))
    finally:
        tinker.ServiceClient = saved_sc
        train.compute_advantages, train._maybe_export_rollout_summary_jsonl = saved
    # keep only deterministic, relative-path-free files
    for pat in REMOVED:
        for p in case_dir.rglob(pat):
            p.unlink()
    assert StubServiceClient.last_training_client is not None
    return rec, StubServiceClient.last_training_client


def stop_from_metrics(metrics: dict) -> str | None:
    """Trajectory.stop_reason as rollout_runner mirrors it: the one-hot ``stop/<reason>``."""
    hits = [k.removeprefix("stop/") for k, v in metrics.items() if k.startswith("stop/") and v]
    return hits[0] if len(hits) == 1 else None


def step_rewards(traj) -> list[float]:
    return [t.reward for t in traj.transitions]


def versions_info() -> dict:
    out = {"python": sys.version.split()[0]}
    for pkg in ["tinker-cookbook", "tinker", "chz", "torch", "transformers", "tokenizers"]:
        out[pkg] = metadata.version(pkg)
    return out


CASES = {
    "default": (
        {},
        "train.main with Config defaults (sync training, eval_every=20, save_every=20, "
        "remove_constant_reward_groups=False, loss_fn importance_sampling), 2 iterations x 3 "
        "groups x 4 trajectories, multi-turn env (up to 3 turns). Group modes: per_step "
        "(reward every turn), final_step (reward on the last turn only), group (0 per turn, "
        "compute_group_rewards -> final_reward). Iteration 1 group 0 is always right on turn 1: "
        "its four total rewards are equal (advantage 0). The test-set evaluator ('test', 2 "
        "groups x 2) runs before iteration 0's training step (weights v0) and after the last "
        "step (iteration_000002, weights v2).",
    ),
    "remove-constant": (
        {"remove_constant_reward_groups": True},
        "as default but remove_constant_reward_groups=True: the equal-reward group is still "
        "written to train_rollout_summaries.jsonl (the export runs before the filter) but is "
        "not trained on, so tinker computes no advantage for it (advantage null in truth.json).",
    ),
}


def main(outdir: str) -> None:
    global _TOKENIZER
    outdir = Path(outdir).resolve()
    tok_tmp = tempfile.mkdtemp(prefix="tinker_tok_")
    _TOKENIZER = build_tokenizer(tok_tmp)
    for case, (overrides, desc) in CASES.items():
        case_dir = outdir / case
        if case_dir.exists():
            shutil.rmtree(case_dir)
        case_dir.mkdir(parents=True)
        rec, tc = run_case(case_dir, overrides)
        rows = []
        for base_name, iteration, groups in rec.exports:
            f = f"iteration_{iteration:06d}/{base_name}_rollout_summaries.jsonl"
            lines = [json.loads(x) for x in (case_dir / f).read_text().splitlines()]
            k = 0
            for gi, g in enumerate(groups):
                adv = rec.adv_by_group.get(id(g))
                for ti, traj in enumerate(g.trajectories_G):
                    line = lines[k]
                    k += 1
                    assert (line["group_idx"], line["traj_idx"]) == (gi, ti)
                    total = g.get_total_rewards()[ti]
                    assert line["total_reward"] == total
                    assert [s["reward"] for s in line["steps"]] == step_rewards(traj)
                    rows.append(
                        {
                            "file": f,
                            "line": k,
                            "split": line["split"],
                            "iteration": iteration,
                            "group_idx": gi,
                            "traj_idx": ti,
                            "total_reward": total,
                            "final_reward": g.final_rewards_G[ti],
                            "step_rewards": step_rewards(traj),
                            "stop_reason": traj.stop_reason,
                            "advantage": None if adv is None else adv[ti],
                        }
                    )
            assert k == len(lines)
        # the eval files are written by RLTestSetEvaluator (not through the wrapped export)
        for f in sorted(case_dir.glob("iteration_*/eval_*_rollout_summaries.jsonl")):
            for n, line in enumerate(f.read_text().splitlines(), 1):
                r = json.loads(line)
                rows.append(
                    {
                        "file": str(f.relative_to(case_dir)),
                        "line": n,
                        "split": r["split"],
                        "iteration": r["iteration"],
                        "group_idx": r["group_idx"],
                        "traj_idx": r["traj_idx"],
                        "total_reward": r["total_reward"],
                        "final_reward": r["final_reward"],
                        "step_rewards": [s["reward"] for s in r["steps"]],
                        "stop_reason": stop_from_metrics(r["steps"][-1]["metrics"]),
                        "advantage": None,
                    }
                )
        # cross-check: the advantages tinker sent to forward_backward are the recorded ones
        trained = sorted(round(r["advantage"], 6) for r in rows if r["advantage"] is not None)
        sent = sorted(round(max(a, key=abs), 6) if any(a) else 0.0 for a in tc.fwd_bwd_advantages)
        assert sent == trained, (sent, trained)
        truth = {
            "made_by": "tools/dumps/tinker.py",
            "framework": "tinker-cookbook 0.6.1 (PyPI), Tinker service stood in",
            "versions": versions_info(),
            "case": case,
            "description": desc,
            "settings": {
                "model_name": MODEL,
                "max_tokens": MAX_TOKENS,
                "max_turns": MAX_TURNS,
                "group_size": GROUP_SIZE,
                "test_group_size": TEST_GROUP_SIZE,
                "overrides": overrides,
                "advantage": (
                    "tinker_cookbook/rl/data_processing.py compute_advantages, run unchanged: "
                    "per TrajectoryGroup, A = R - mean(R) over the group's trajectories, R = "
                    "TrajectoryGroup.get_total_rewards() = sum of per-step rewards + final_reward; "
                    "no std division; computed as torch.tensor(rewards) (float32), so advantages "
                    "are float32 values. The same A goes on every action token of the "
                    "trajectory (all turns). Eval trajectories are not trained: no advantage."
                ),
                "line_numbers": "1-based",
            },
            "removed": REMOVED,
            "rows": rows,
        }
        (case_dir / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
        print(f"{case}: {len(rows)} rows -> {case_dir}")
    shutil.rmtree(tok_tmp, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tinker.py OUTDIR")
    main(sys.argv[1])
