"""Write real slime rollout dumps (`rollout_data/{N}.pt`, `rollout_data/eval_{N}.pt`) as fixtures.

Made from slime github.com/THUDM/slime @ 624b824a898ab0ec1fcb4d373004c7f3852bf515 (2026-08-21),
torch 2.13.0+cpu, transformers 5.24.0, tokenizers 0.23.3, numpy 2.4.6, httpx, aiohttp, sympy,
pylatexenc, requests, omegaconf, pillow (what slime's rollout modules import), and for the
reinforce_pp_* cases megatron-core 0.16.1 (`pip install --no-deps`; the newest for Python 3.11:
slime's train side imports `megatron.core.mpu`), Python 3.11, on CPU, offline. slime is not on
PyPI (the PyPI `slime` is another project): its source comes from the bare git dir that the search
tool's `fetch github:THUDM/slime` returned.

Run (from the repository root, with the framework venv, never as part of CI):

    /tmp/fw/slime/bin/python tools/dumps/slime.py OUTDIR --slime-src PATH [--fixtures DIR] [CASE..]

PATH is a bare git clone of THUDM/slime (`slime/` is extracted from its
HEAD into OUTDIR/src) or a folder that already holds the extracted `slime/` package (commit from
PATH/COMMIT if present). Each case runs slime's rollout path with `--save-debug-rollout-data
OUTDIR/<case>/rollout_data/{rollout_id}.pt`; slime's own `save_debug_rollout_data` writes the files,
which are copied unchanged to `tests/fixtures/real/slime/<case>/rollout_data/`, with a `truth.json`
beside them. Two runs write identical files.

slime's own code, run unchanged (imported from the extracted package): the argument parser
(`get_slime_extra_args_provider`, the SGLang router/server flags of `add_sglang_arguments`,
`slime_validate_args`, `_resolve_eval_datasets`), `Dataset`, `RolloutDataSourceWithBuffer` (the
default `--data-source-path`: group_index/index counters), `generate_rollout` /
`generate_rollout_async` / `generate_and_rm_group` / `generate_and_rm` / `generate` / `eval_rollout`
(slime/rollout/sglang_rollout.py), `Sample` and `Sample.append_response_tokens` (status from
SGLang's finish_reason, prefix-cache info, weight versions), the rule-based rewards of
slime/rollout/rm_hub (`f1`, `math`), the tracing of slime/observability/trace_utils.py (it stores a
`trace` dict on each Sample that passes through generate_and_rm), `TrajectoryManager` / `TurnRecord`
(slime/agent/trajectory.py, the compaction path), `validate_rollout_id_annotated`,
`save_debug_rollout_data`, `log_rollout_data`, `log_eval_rollout_data`, `get_grpo_returns`; and,
taken out of slime/ray/rollout.py with `ast` (that module imports ray and sglang at the top): the
`RolloutManager` methods `generate`, `eval`, `health_monitoring_resume`, `_get_rollout_data`,
`_post_process_rewards` and `_convert_samples_to_train_data`, attached unchanged to a stand-in
object carrying the attributes `RolloutManager.__init__` sets for them (data source, rollout
functions, no custom hooks). So truth.json's `advantage` is slime's own GRPO advantage:
`_post_process_rewards`' output (group mean, std, 1e-6), which `get_grpo_returns` broadcasts over
the response tokens.

Stubbed (imported by those modules, unused on this path): `ray` (slime/utils/data.py imports it for
`process_rollout_data`), `wandb` (observability/logging_utils.py, off: use_wandb is False),
`sglang.srt.server_args.ServerArgs` and `sglang_router.launch_router.RouterArgs` (their
`add_cli_args` add nothing, so the SGLang server's own flags are absent; `sglang_dp_size` is set
to SGLang's default 1). `RolloutManager._split_train_data_by_dp` (DP scheduling after the dump) is
replaced by a function that keeps the train data (and, in the reinforce_pp_* cases, then calls
slime's own, below).

The reinforce_pp_* cases (`--advantage-estimator reinforce_plus_plus_baseline` or
`reinforce_plus_plus`, `--normalize-advantages`, which slime requires for both; 3 rollouts of 4
prompts x 4 samples) also run slime's train side for one data-parallel rank, so truth.json holds
slime's own per-token `advantages` for every response token: the RolloutManager methods
`set_train_parallel_config` and `_split_train_data_by_dp` (taken out of slime/ray/rollout.py with
`ast`, unchanged; they call `build_dp_schedule` and `tensorize_rollout_data_for_training`, `ray.put`
is the identity), `MegatronTrainRayActor._get_rollout_data` (taken out of
slime/backends/megatron_utils/actor.py with `ast`, unchanged: `process_rollout_data`,
`slice_log_prob_with_cp`; its device is the CPU), then `compute_advantages_and_returns`
(slime/backends/megatron_utils/loss.py, imported unchanged; it calls
`get_reinforce_plus_plus_baseline_advantages`, or `get_reinforce_plus_plus_returns` and
`chunked_discounted_returns`, then `distributed_masked_whiten`). Megatron-core's parallel state
is initialised with TP = PP = CP = 1 on a real gloo WORLD of size 1 (a FileStore in OUTDIR), so
the whitening all-reduces over
`mpu.get_data_parallel_group(with_context_parallel=True)`, a gloo group of one rank. Not run: the
policy and reference forward passes and the optimizer steps of `train_actor`; with `--kl-coef 0`
(slime's default, used here) the advantages read only the log-probs' shape (kl = zeros shaped like
them, here the rollout_log_probs). These cases' scripts use only words of the other cases'
vocabulary (checked), so the other fixtures stay byte-identical.

Stand-ins (not slime code):
- the SGLang server behind `post(url, payload)` / `get(.../workers)` (patched into slime's
  sglang_rollout and http_utils modules): scripted responses (SCRIPTS below) tokenized with the
  tokenizer, `<eos>` appended on a finished last turn, cut at `max_new_tokens` with finish_reason
  "length" otherwise, `output_token_logprobs` = log p of each token under the tiny policy in bf16,
  `cached_tokens` from a prefix cache, `weight_version` "default", fixed `e2e_latency`;
- the custom hooks in module `slime_dump_hooks` (passed by dotted path, as users do): a dict-valued
  reward function (`--custom-rm-path`), a multi-turn generate function written like slime's
  examples/search-r1 (tool output appended with `append_response_tokens(trainable=False)`), and a
  compaction generate function that feeds three turns of one session into slime's
  `TrajectoryManager` (the third turn's prompt is a compacted history) and returns its samples,
  decoded as slime's agent adapter `finish_session` does;
- determinism: `uuid.uuid4` (session ids, trace ids, span ids) and `time.time` (trace timestamps) in
  sglang_rollout and trace_utils draw from a seeded generator and a fake clock;
- the tokenizer and model: a word-level `tokenizers` model (Metaspace pre-tokenizer, so decoding
  gives back the text) over the words used here plus `<pad> <eos> <bos> <unk> <|user|>
  <|assistant|> <|tool|>`, a chat template, a randomly initialised 2-layer Qwen2 (seed 0), saved
  with `save_pretrained`; the tokenizer's folder is `--hf-checkpoint`. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import copy
import itertools
import json
import logging
import os
import random
import re
import shutil
import sys
import time
import types
import uuid
from pathlib import Path

# This file is called slime.py: keep its own folder off sys.path so that `import slime` finds
# slime's package (once dumpkit, beside it, is imported).
sys.path.insert(0, str(Path(__file__).resolve().parent))
import dumpkit  # noqa: E402

dumpkit.leave_folder(__file__)

dumpkit.offline_on_cpu()

import numpy as np  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
MADE_BY = "tools/dumps/slime.py"

SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<|user|>", "<|assistant|>", "<|tool|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
N_SAMPLES = 4
MAX_RESPONSE_LEN = 16

# (problem, label). 0-5 train prompts (3 a rollout), 6-7 eval prompts.
PROBLEMS = [
    ("What is 2 plus 3 ?", "5"),
    ("What is 4 times 2 ?", "8"),
    ("What is 9 minus 7 ?", "2"),
    ("What is 3 plus 3 ?", "6"),
    ("What is 5 times 2 ?", "10"),
    ("What is 8 minus 1 ?", "7"),
    ("What is 1 plus 1 ?", "2"),
    ("What is 6 minus 2 ?", "4"),
]

# Scripted responses: SCRIPTS[key][problem] = one list of turns per sample (a single-turn sample
# has one turn). f1 rewards of these against the label are fractions of 1 or 0.
SINGLE = {
    0: [["5"], ["the answer is 5"], ["2 plus 3 is 6"], ["it is 5 so 5"]],
    1: [["8"], ["8"], ["8"], ["8"]],
    2: [["2"], ["9 minus 7 is 2"], ["3"], ["the answer is 1"]],
    3: [["6"], ["it is 9"], ["3 plus 3 is 6"], ["6"]],
    4: [["10"], ["the answer is 10"], ["7"], ["5 times 2 is 10 so 10"]],
    5: [["7"], ["8 minus 1 is 9"], ["6"], ["it is 7"]],
}
TRUNCATED = dict(SINGLE)
TRUNCATED[0] = [
    ["5"],
    ["the answer is 5"],
    ["let me think 2 plus 3 is 5 and then I add 1 and 1 so it is 7 and"],
    ["it is 5 so 5"],
]
MULTI_TURN = {
    0: [["calc 2 plus 3", "so 5"], ["5"], ["calc 2 times 3", "so 6"], ["calc 2 plus 3", "5"]],
    1: [["calc 4 times 2", "so 8"], ["8"], ["calc 4 plus 2", "so 6"], ["it is 8"]],
    2: [["2"], ["calc 9 minus 7", "so 2"], ["calc 9 minus 7", "the answer is 2"], ["3"]],
}
# compaction: turn 1 calls the tool, turn 2 answers, the session is then compacted and turn 3
# answers again from the summary (a new segment of the same rollout)
COMPACTION = {  # rollout 1 of mixed_compaction: prompts 3-5
    3: [["calc 3 plus 3", "so 6", "6"], ["calc 3 times 3", "so 9", "9"]] * 2,
    4: [["calc 5 times 2", "so 10", "10"], ["calc 5 plus 2", "so 7", "10"]] * 2,
    5: [["calc 8 minus 1", "so 7", "7"], ["calc 8 plus 1", "so 9", "9"]] * 2,
}
EVAL = {6: [["\\boxed{2}"], ["1 plus 1 is \\boxed{3}"]], 7: [["so \\boxed{4}"], ["\\boxed{4}"]]}
SUMMARY = "summary : the tool said {result} ."

# The REINFORCE++ cases (reinforce_pp_*): 4 prompts a rollout (--rollout-batch-size 4) over the 6
# train prompts, so rollout 0 holds prompts 0-3, rollout 1 prompts 4, 5, 0, 1 (the data source
# wraps to its second epoch) and rollout 2 prompts 2-5; each rollout has a script of its own.
# Their words are all in the vocabulary that all_texts() builds (checked), which these scripts
# leave unchanged so the other cases' token ids stay the same.
RPP_SINGLE = [
    {  # rollout 0; group 1 has equal rewards (0 before the whitening, not after)
        0: [["5"], ["the answer is 5"], ["2 plus 3 is 5 so 5"], ["it is 6"]],
        1: [["8"], ["8"], ["8"], ["8"]],
        2: [
            ["9 minus 7 is 2"],
            ["2"],
            ["it is 3"],
            ["let me think 9 minus 7 is 2 so the answer is 2"],
        ],
        3: [["6"], ["3 plus 3 is 6"], ["it is 9"], ["6 so 6"]],
    },
    {  # rollout 1
        4: [["10"], ["5 times 2 is 10"], ["the answer is 12"], ["10 so 10"]],
        5: [["8 minus 1 is 7"], ["7"], ["7"], ["it is 9 so 9"]],
        0: [["the answer is 5"], ["so 5"], ["5"], ["it is 5"]],
        1: [["4 times 2 is 8"], ["the answer is 6"], ["8"], ["let me think"]],
    },
    {  # rollout 2
        2: [["2"], ["2"], ["the answer is 2"], ["3"]],
        3: [["it is 6"], ["6"], ["3 times 3 is 9"], ["so the answer is 6"]],
        4: [["10"], ["10"], ["10"], ["it is 10"]],
        5: [["7"], ["the answer is 8"], ["8 minus 1 is 7 so 7"], ["it is 7"]],
    },
]
# Multi-turn (slime_dump_hooks.multi_turn_generate): a "calc" turn gets the tool's output
# appended with loss_mask 0. A sample of three turns whose first two call the tool fills the
# 16-token budget with its second tool output: the third turn gets max_new_tokens 0 (finish
# "length", status truncated) and the response ends on masked tool tokens.
RPP_MULTI_TURN = [
    {  # rollout 0
        0: [
            ["calc 2 plus 3", "so 5"],
            ["5"],
            ["calc 2 times 3", "calc 6 minus 1", "so 5"],
            ["the answer is 5"],
        ],
        1: [["calc 4 times 2", "so 8"], ["8"], ["calc 4 plus 2", "so 6"], ["it is 8"]],
        2: [["2"], ["calc 9 minus 7", "so 2"], ["calc 9 minus 7", "the answer is 2"], ["3"]],
        3: [["calc 3 plus 3", "6"], ["calc 3 times 3", "so 9"], ["6"], ["it is 6"]],
    },
    {  # rollout 1
        4: [
            ["calc 5 times 2", "so 10"],
            ["10"],
            ["calc 5 plus 2", "so 7"],
            ["calc 5 times 2", "10"],
        ],
        5: [["7"], ["calc 8 minus 1", "so 7"], ["calc 8 plus 1", "it is 9"], ["it is 7"]],
        0: [
            ["5"],
            ["calc 2 plus 3", "5"],
            ["the answer is 5"],
            ["calc 2 minus 3", "calc 3 plus 2", "5"],
        ],
        1: [["calc 4 times 2", "so 8"], ["calc 4 times 2", "8"], ["8"], ["it is 6"]],
    },
    {  # rollout 2
        2: [["calc 9 minus 7", "2"], ["2"], ["it is 2"], ["calc 9 plus 7", "so 16"]],
        3: [["6"], ["calc 3 plus 3", "so 6"], ["calc 3 minus 3", "so 0"], ["the answer is 6"]],
        4: [["calc 5 times 2", "the answer is 10"], ["10"], ["so 10"], ["calc 5 plus 2", "7"]],
        5: [["calc 8 minus 1", "so 7"], ["7"], ["calc 8 minus 1", "it is 7"], ["9"]],
    },
]


def tool(text: str) -> str | None:
    m = re.search(r"calc (\d+) (plus|minus|times) (\d+)", text)
    if not m:
        return None
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    result = {"plus": a + b, "minus": a - b, "times": a * b}[op]
    return f" tool : {result} ."


# --------------------------------------------------------------------------------------------------
# slime source and stubs


def _stub(name: str, **attrs) -> types.ModuleType:
    return dumpkit.stub_module(name, "__slime_dump_stub__", **attrs)


def install_stubs() -> None:
    dumpkit.stub_ray_and_sglang("__slime_dump_stub__")
    _stub("wandb")


class SeededIds:
    """uuid.uuid4 / time.time stand-ins for sglang_rollout and trace_utils (determinism only)."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.t = 1_780_000_000.0

    def uuid4(self) -> uuid.UUID:
        return uuid.UUID(int=self.rng.getrandbits(128), version=4)

    def time(self) -> float:
        self.t += 0.001
        return round(self.t, 3)


# --------------------------------------------------------------------------------------------------
# Tokenizer and model


def all_texts() -> list[str]:
    texts = [SUMMARY.format(result=r) for r in range(20)]
    texts += [f"tool : {r} ." for r in range(-10, 40)]
    texts += ["calc plus minus times so"]
    for problem, label in PROBLEMS:
        texts += [problem, label]
    for script in (SINGLE, TRUNCATED, MULTI_TURN, COMPACTION, EVAL):
        for samples in script.values():
            for turns in samples:
                texts += turns
    return texts


def build_model(folder: Path) -> tuple[Path, Path]:
    """Save the tokenizer alone into folder/hf (the --hf-checkpoint) and the model into
    folder/model (read by the SGLang stand-in only). A tokenizer folder without config.json:
    transformers 5's AutoTokenizer would otherwise build Qwen2's BPE tokenizer for model_type
    qwen2 and ignore tokenizer.json's word-level model."""
    from tokenizers import decoders, pre_tokenizers
    from transformers import Qwen2Config, Qwen2ForCausalLM

    pre = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    words: set[str] = {"▁"}  # a space before a special token
    for t in all_texts():
        for chunk in re.split(r"<\|\w+\|>|<\w+>", t):
            if chunk.strip():
                words.update(w for w, _ in pre.pre_tokenize_str(chunk))
                words.update(w for w, _ in pre.pre_tokenize_str(" " + chunk.strip()))
    vocab = {tok: i for i, tok in enumerate(SPECIAL + sorted(words))}
    decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer = dumpkit.word_level_tokenizer(
        vocab, SPECIAL, pre_tokenizer=pre, decoder=decoder, padding_side="left"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    dumpkit.seed_all(0)
    config = dumpkit.tiny_model_config(
        Qwen2Config, vocab, max_position_embeddings=256, initializer_range=0.5
    )
    model = Qwen2ForCausalLM(config)
    for sub in ("hf", "model"):
        if (folder / sub).exists():
            shutil.rmtree(folder / sub)
    model.save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "hf")
    return folder / "hf", folder / "model"


# --------------------------------------------------------------------------------------------------
# SGLang stand-in


class FakeSGLang:
    """Answers slime's `/generate` posts like an SGLang router would, from the scripts."""

    def __init__(self, tokenizer, model):
        self.tokenizer = tokenizer
        self.model = copy.deepcopy(model).to(torch.bfloat16).eval()
        self.script: dict[int, list[list[str]]] = {}
        self.counter: dict[int, int] = {}
        self.sessions: dict[str, list[int]] = {}
        self.cache: list[tuple[int, ...]] = []
        self.n_requests = 0

    def reset(self, script: dict[int, list[list[str]]]) -> None:
        self.script, self.counter, self.sessions = script, {}, {}

    def _problem(self, ids: list[int]) -> int:
        text = " ".join(self.tokenizer.decode(ids, skip_special_tokens=True).split())
        hits = [i for i, (p, _) in enumerate(PROBLEMS) if p in text]
        if not hits:
            raise ValueError(f"fake SGLang: no scripted problem in {text!r}")
        return hits[0]

    def _logprobs(self, ids: list[int], n_out: int) -> list[float]:
        x = torch.tensor([ids])
        with torch.no_grad():
            logits = self.model(input_ids=x).logits.float()
        lp = torch.log_softmax(logits[0, :-1], dim=-1).gather(-1, x[0, 1:, None])[:, 0]
        return [float(v) for v in lp[len(ids) - 1 - n_out :]]

    def respond(self, ids: list[int], sampling_params: dict, session: str | None) -> dict:
        if session is not None and session in self.sessions:
            p, j, t = self.sessions[session]
            t += 1
        else:
            p = self._problem(ids)
            j = self.counter.get(p, 0)
            self.counter[p] = j + 1
            t = 0
        if session is not None:
            self.sessions[session] = [p, j, t]
        turns = self.script[p][j]
        eos = self.tokenizer.eos_token_id
        out = self.tokenizer(turns[t], add_special_tokens=False)["input_ids"]
        last = t == len(turns) - 1
        max_new = sampling_params["max_new_tokens"]
        if len(out) + int(last) > max_new:
            out = out[:max_new]
            finish = {"type": "length", "length": max_new}
        elif last:
            out = out + [eos]
            finish = {"type": "stop", "matched": eos}
        else:  # a tool call: SGLang stopped at a stop string
            finish = {"type": "stop", "matched": "\n"}
        cached = max((len(os.path.commonprefix([list(c), ids])) for c in self.cache), default=0)
        self.cache.append(tuple(ids + out))
        lps = self._logprobs(ids + out, len(out))
        self.n_requests += 1
        meta = {
            "id": f"{self.n_requests:032x}",
            "finish_reason": finish,
            "prompt_tokens": len(ids),
            "weight_version": "default",
            "completion_tokens": len(out),
            "cached_tokens": cached,
            "e2e_latency": 0.05,
            "output_token_logprobs": [[lp, tid, None] for lp, tid in zip(lps, out, strict=True)],
        }
        skip = sampling_params.get("skip_special_tokens", False)
        return {"text": self.tokenizer.decode(out, skip_special_tokens=skip), "meta_info": meta}

    async def post(self, url, payload, max_retries=60, headers=None, **kwargs):
        assert url.endswith("/generate"), url
        ids = payload.get("input_ids")
        if ids is None:
            ids = self.tokenizer(payload["text"], add_special_tokens=False)["input_ids"]
        session = (headers or {}).get("X-SMG-Routing-Key")
        return self.respond(list(ids), payload["sampling_params"], session)

    async def get(self, url, **kwargs):
        assert url.endswith("/workers"), url
        return {"workers": []}


# --------------------------------------------------------------------------------------------------
# Custom hooks, passed to slime by dotted path


def make_hooks_module(server: FakeSGLang) -> types.ModuleType:
    from slime.agent.trajectory import TrajectoryManager, TurnRecord
    from slime.rollout.rm_hub.f1 import f1_score
    from slime.rollout.sglang_rollout import GenerateState
    from slime.utils.types import Sample

    async def dict_rm(args, sample: Sample, **kwargs):
        """A reward model that returns a dict (as remote reward servers do); --reward-key score."""
        f1, precision, recall = f1_score(sample.response, sample.label)
        return {
            "score": float(f1),
            "precision": float(precision),
            "acc": sample.label in sample.response,
        }

    async def multi_turn_generate(args, sample: Sample, sampling_params) -> Sample:
        """A tool-calling rollout written like examples/search-r1/generate_with_search.py."""
        state = GenerateState(args)
        url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}/generate"
        prompt_ids = state.tokenizer(sample.prompt, add_special_tokens=False)["input_ids"]
        sample.tokens = list(prompt_ids)
        headers = {"X-SMG-Routing-Key": sample.session_id}
        for _turn in range(3):
            params = dict(sampling_params)
            params["max_new_tokens"] = args.rollout_max_response_len - sample.response_length
            payload = {
                "input_ids": sample.tokens,
                "sampling_params": params,
                "return_logprob": True,
            }
            output = await server.post(url, payload, headers=headers)
            meta = output["meta_info"]
            sample.append_response_tokens(
                args,
                tokens=[item[1] for item in meta["output_token_logprobs"]],
                log_probs=[item[0] for item in meta["output_token_logprobs"]],
                trainable=True,
                meta_info=meta,
                text=output["text"],
            )
            if meta["finish_reason"]["type"] != "stop":
                break
            obs = tool(output["text"])
            if obs is None:
                break
            obs_ids = state.tokenizer(obs, add_special_tokens=False)["input_ids"]
            sample.append_response_tokens(args, tokens=obs_ids, trainable=False, text=obs)
        return sample

    async def compaction_generate(args, sample: Sample, sampling_params) -> list[Sample]:
        """One agent session in three turns, the third after a context compaction; the turns go
        through slime's TrajectoryManager (as its agent adapters do) and come back as segments."""
        state = GenerateState(args)
        tok = state.tokenizer
        url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}/generate"
        manager = TrajectoryManager()
        sid = sample.session_id
        headers = {"X-SMG-Routing-Key": sid}
        problem = next(p for p, _ in PROBLEMS if p in sample.prompt)
        messages = [{"role": "user", "content": problem}]
        answer = ""
        for turn in range(3):
            if turn == 2:  # compaction: the history is replaced by a summary
                result = re.search(r"tool : (-?\d+)", " ".join(m["content"] for m in messages))
                summary = SUMMARY.format(result=result.group(1) if result else "nothing")
                messages = [{"role": "user", "content": f"{summary} {problem}"}]
            prompt_ids = tok.apply_chat_template(
                messages, tokenize=True, add_generation_prompt=True
            )
            if isinstance(prompt_ids, dict) or hasattr(prompt_ids, "keys"):
                prompt_ids = prompt_ids["input_ids"]
            params = dict(sampling_params)
            payload = {"input_ids": list(prompt_ids), "sampling_params": params}
            output = await server.post(url, payload, headers=headers)
            meta = output["meta_info"]
            out_ids = [item[1] for item in meta["output_token_logprobs"]]
            response_message = {"role": "assistant", "content": output["text"]}
            manager.record_turn(
                sid,
                turn=TurnRecord(
                    prompt_ids=list(prompt_ids),
                    output_ids=out_ids,
                    finish_reason=meta["finish_reason"]["type"],
                    output_log_probs=[item[0] for item in meta["output_token_logprobs"]],
                ),
                prompt_messages=[dict(m) for m in messages],
                response_message=response_message,
            )
            messages = [*messages, response_message]
            answer = output["text"]
            obs = tool(output["text"]) if turn == 0 else None
            if obs is not None:
                messages.append({"role": "tool", "content": obs.strip()})
        reward = float(f1_score(answer, sample.label)[0])
        samples = manager.get_trajectory(sid, base_sample=sample, reward=reward)
        for s in samples:  # as slime.agent.adapters.common.AdapterBase.finish_session does
            rlen = int(s.response_length or 0)
            s.response = (
                tok.decode(s.tokens[-rlen:], skip_special_tokens=False) if rlen and s.tokens else ""
            )
        return samples

    mod = types.ModuleType("slime_dump_hooks")
    mod.dict_rm = dict_rm  # type: ignore[attr-defined]
    mod.multi_turn_generate = multi_turn_generate  # type: ignore[attr-defined]
    mod.compaction_generate = compaction_generate  # type: ignore[attr-defined]
    sys.modules[mod.__name__] = mod
    return mod


# --------------------------------------------------------------------------------------------------
# RolloutManager methods, taken out of slime/ray/rollout.py unchanged

MANAGER_METHODS = [
    "generate",
    "eval",
    "health_monitoring_resume",
    "_get_rollout_data",
    "_post_process_rewards",
    "_convert_samples_to_train_data",
]
SOURCE_LINES: dict[str, str] = {}
# the train side's (reinforce_pp_* cases): slime/ray/rollout.py's DP split, the actor's
# _get_rollout_data (slime/backends/megatron_utils/actor.py)
SPLIT_METHODS = ["set_train_parallel_config", "_split_train_data_by_dp"]
TRAIN_SOURCE_LINES: dict[str, str] = {}


def manager_class(root: Path) -> type:
    import slime.observability.rollout_data_utils as rdu
    from slime.observability.rollout_metrics import log_eval_rollout_data, log_rollout_data
    from slime.rollout.base_types import call_rollout_fn
    from slime.rollout.sample_hooks import set_current_rollout_id
    from slime.utils.data import get_source
    from slime.utils.misc import load_function
    from slime.utils.types import Sample

    path = root / "slime/ray/rollout.py"
    tree = ast.parse(path.read_text(), filename=str(path))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RolloutManager")
    nodes = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    ns = {
        "__name__": "slime_rollout_manager_extracted",
        "time": time,
        "itertools": itertools,
        "torch": torch,
        "logging": logging,
        "logger": logging.getLogger("slime.ray.rollout"),
        "Sample": Sample,
        "load_function": load_function,
        "call_rollout_fn": call_rollout_fn,
        "set_current_rollout_id": set_current_rollout_id,
        "get_source": get_source,
        "log_rollout_data": log_rollout_data,
        "log_eval_rollout_data": log_eval_rollout_data,
        "save_debug_rollout_data": rdu.save_debug_rollout_data,
        "load_debug_rollout_data": rdu.load_debug_rollout_data,
        "validate_rollout_id_annotated": rdu.validate_rollout_id_annotated,
        "validate_rollout_routed_experts_for_replay": (
            rdu.validate_rollout_routed_experts_for_replay
        ),
    }
    body = [nodes[name] for name in MANAGER_METHODS]
    for node in body:
        SOURCE_LINES[f"slime/ray/rollout.py:RolloutManager.{node.name}"] = (
            f"L{node.lineno}-{node.end_lineno}"
        )
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), ns)

    # The DP split that the train side reads (the reinforce_pp_* cases only), unchanged, in a
    # namespace of its own so that the stand-in below keeps its name for the other cases.
    from slime.observability.rollout_data_utils import tensorize_rollout_data_for_training
    from slime.utils.dp_schedule import build_dp_schedule
    from slime.utils.misc import Box

    split_ns = {
        "__name__": "slime_rollout_manager_split_extracted",
        "ray": sys.modules["ray"],
        "Box": Box,
        "build_dp_schedule": build_dp_schedule,
        "tensorize_rollout_data_for_training": tensorize_rollout_data_for_training,
    }
    split_body = [nodes[name] for name in SPLIT_METHODS]
    for node in split_body:
        TRAIN_SOURCE_LINES[f"slime/ray/rollout.py:RolloutManager.{node.name}"] = (
            f"L{node.lineno}-{node.end_lineno}"
        )
    exec(compile(ast.Module(body=split_body, type_ignores=[]), str(path), "exec"), split_ns)

    class RolloutManagerStandIn:
        """Carries what RolloutManager.__init__ (slime/ray/rollout.py L370-409) sets for these
        methods; no servers (the SGLang stand-in answers), no health monitors."""

        def __init__(self, args):
            self.args = args
            data_source_cls = load_function(self.args.data_source_path)
            self.data_source = data_source_cls(args)
            self.generate_rollout = load_function(self.args.rollout_function_path)
            self.eval_generate_rollout = load_function(self.args.eval_function_path)
            self.custom_reward_post_process_func = None
            self.custom_convert_samples_to_train_data_func = None
            self.rollout_id = -1
            self._health_monitors: list = []
            self.train_data: dict[int, dict] = {}
            self.train_parallel_config: dict | None = None

        def _split_train_data_by_dp(self, data):
            """Keep the train data; then, once the train side has given its parallel config
            (set_train_parallel_config, as slime's train actors do), run slime's own
            RolloutManager._split_train_data_by_dp on it and return its per-rank Boxes."""
            self.train_data[self.rollout_id] = data
            if self.train_parallel_config is None:
                return data
            return split_ns["_split_train_data_by_dp"](self, data)

    for name in MANAGER_METHODS:
        setattr(RolloutManagerStandIn, name, ns[name])
    RolloutManagerStandIn.set_train_parallel_config = split_ns["set_train_parallel_config"]
    return RolloutManagerStandIn


# --------------------------------------------------------------------------------------------------
# The train side (reinforce_pp_* cases): slime's Megatron actor with one data-parallel rank


def _def_lines(root: Path, rel: str, qualname: str) -> str:
    """`L{first}-{last}` of a top-level function or Class.method of slime's file `rel`."""
    tree = ast.parse((root / rel).read_text())
    body = tree.body
    *outer, name = qualname.split(".")
    for cls_name in outer:
        body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == cls_name).body
    node = next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)
    return f"L{node.lineno}-{node.end_lineno}"


TRAIN_FUNCTIONS = [  # run unchanged on the train side, as imported from slime's package
    ("slime/utils/dp_schedule.py", "build_dp_schedule"),
    ("slime/observability/rollout_data_utils.py", "tensorize_rollout_data_for_training"),
    ("slime/utils/data.py", "process_rollout_data"),
    ("slime/backends/megatron_utils/cp_utils.py", "slice_log_prob_with_cp"),
    ("slime/backends/megatron_utils/loss.py", "compute_advantages_and_returns"),
    ("slime/utils/ppo_utils.py", "get_reinforce_plus_plus_baseline_advantages"),
    ("slime/utils/ppo_utils.py", "get_reinforce_plus_plus_returns"),
    ("slime/utils/ppo_utils.py", "chunked_discounted_returns"),
    ("slime/utils/distributed_utils.py", "distributed_masked_whiten"),
]


class SlimeTrainSide:
    """What slime's train actor (MegatronTrainRayActor.train -> train_actor, actor.py) does with
    one rollout's data before its first optimizer step, for one data-parallel rank:
    `_get_rollout_data` (taken out of actor.py with `ast`, unchanged; it calls slime's
    `process_rollout_data`) and then `compute_advantages_and_returns` (loss.py, imported
    unchanged), whose `distributed_masked_whiten` all-reduces over
    `mpu.get_data_parallel_group(with_context_parallel=True)`: Megatron-core's own parallel
    state, initialised with TP = PP = CP = 1 on a real gloo WORLD of size 1 (a FileStore in the
    scratch folder). Not run: the policy/ref forward passes of train_actor (with --kl-coef 0,
    slime's default, the advantages read only the shape of the log-probs: kl is zeros shaped
    like them, here the rollout_log_probs) and the optimizer steps; the GPU device of
    `_get_rollout_data` is the CPU."""

    def __init__(self, root: Path, outdir: Path):
        import torch.distributed as dist
        from megatron.core import mpu

        store = outdir / "gloo_store"
        if store.exists():
            store.unlink()
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
        mpu.initialize_model_parallel(
            tensor_model_parallel_size=1, pipeline_model_parallel_size=1, context_parallel_size=1
        )
        import slime.backends.megatron_utils.loss as loss
        from slime.backends.megatron_utils.cp_utils import slice_log_prob_with_cp
        from slime.utils.data import process_rollout_data
        from slime.utils.misc import Box
        from slime.utils.types import RolloutBatch

        self.dist, self.mpu, self.loss = dist, mpu, loss
        rel = "slime/backends/megatron_utils/actor.py"
        path = root / rel
        tree = ast.parse(path.read_text(), filename=str(path))
        cls = next(
            n
            for n in tree.body
            if isinstance(n, ast.ClassDef) and n.name == "MegatronTrainRayActor"
        )
        node = next(
            n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_get_rollout_data"
        )
        TRAIN_SOURCE_LINES[f"{rel}:MegatronTrainRayActor._get_rollout_data"] = (
            f"L{node.lineno}-{node.end_lineno}"
        )
        ns = {
            "__name__": "slime_megatron_actor_extracted",
            "torch": torch,
            "mpu": mpu,
            "process_rollout_data": process_rollout_data,
            "slice_log_prob_with_cp": slice_log_prob_with_cp,
            "accelerator": types.SimpleNamespace(current_device=lambda: "cpu"),
            "Box": Box,
            "RolloutBatch": RolloutBatch,
        }
        exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), ns)
        self._get_rollout_data = types.MethodType(ns["_get_rollout_data"], self)
        for rel, name in TRAIN_FUNCTIONS:
            TRAIN_SOURCE_LINES[f"{rel}:{name}"] = _def_lines(root, rel, name)
        self.args = None

    def parallel_config(self) -> dict:
        """train_parallel_config as MegatronTrainRayActor.init computes it (no VPP)."""
        mpu = self.mpu
        return {
            "dp_size": mpu.get_data_parallel_world_size(with_context_parallel=False),
            "cp_size": mpu.get_context_parallel_world_size(),
            "vpp_size": mpu.get_virtual_pipeline_model_parallel_world_size() or 1,
            "microbatch_group_size_per_vp_stage": 1,
        }

    def process_group(self) -> dict:
        group = self.mpu.get_data_parallel_group(with_context_parallel=True)
        return {
            "backend": str(self.dist.get_backend(group)),
            "world_size": self.dist.get_world_size(group),
            "from": "megatron.core.mpu.get_data_parallel_group(with_context_parallel=True)",
        }

    def advantages(self, args, rollout_data_ref) -> dict:
        """One rollout's train data on rank 0 with slime's advantages and returns."""
        self.args = args
        rollout_data = self._get_rollout_data(rollout_data_ref)
        self.loss.compute_advantages_and_returns(args, rollout_data)
        return rollout_data

    def close(self) -> None:
        self.mpu.destroy_model_parallel()
        self.dist.destroy_process_group()


def check_vocabulary(tokenizer, scripts: list[dict]) -> None:
    """The reinforce_pp_* scripts must not grow the vocabulary (the other cases' token ids)."""
    unk = tokenizer.unk_token_id
    for script in scripts:
        for samples in script.values():
            for turns in samples:
                for turn in turns:
                    ids = tokenizer(turn, add_special_tokens=False)["input_ids"]
                    assert unk not in ids, f"word outside the vocabulary in {turn!r}"


def versions() -> dict:
    from importlib.metadata import version

    out = {"python": sys.version.split()[0]}
    for dist_name in ("torch", "transformers", "tokenizers", "numpy", "megatron-core"):
        out[dist_name] = version(dist_name)
    return out


# --------------------------------------------------------------------------------------------------
# Cases

CASES: dict[str, dict] = {
    "default": {
        "description": (
            "2 rollouts (0.pt, 1.pt), 3 groups x 4 samples, slime's default single-turn "
            "generate, rule-based f1 reward (--rm-type f1): floats, or the int 0 that slime's "
            "f1_score returns when nothing overlaps. Group 1 of rollout 0 has equal rewards "
            "(advantage 0)."
        ),
        "rollouts": [("train", SINGLE, None), ("train", SINGLE, None)],
        "flags": ["--rm-type", "f1"],
    },
    "dict_reward": {
        "description": (
            "1 rollout, 3 groups x 4, rewards are dicts from a custom reward function "
            "(--custom-rm-path): {score, precision, acc}; --reward-key score picks the reward."
        ),
        "rollouts": [("train", SINGLE, None)],
        "flags": ["--custom-rm-path", "slime_dump_hooks.dict_rm", "--reward-key", "score"],
        "reward_key": "score",
    },
    "multi_turn": {
        "description": (
            "1 rollout, 3 groups x 4, a multi-turn tool-calling generate function "
            "(--custom-generate-function-path): the tool's output tokens sit inside the response "
            "with loss_mask 0 (and rollout_log_probs 0.0); f1 reward on the whole response text."
        ),
        "rollouts": [("train", MULTI_TURN, "slime_dump_hooks.multi_turn_generate")],
        "flags": ["--rm-type", "f1"],
    },
    "truncated": {
        "description": (
            "1 rollout, 3 groups x 4, group 0 sample 2 runs past --rollout-max-response-len 16: "
            "SGLang's finish_reason length makes its status 'truncated' (slime keeps its f1 "
            "reward)."
        ),
        "rollouts": [("train", TRUNCATED, None)],
        "flags": ["--rm-type", "f1"],
    },
    "mixed_compaction": {
        "description": (
            "One run, rollouts 0-2; the folder keeps 1.pt and 2.pt. Rollout 1 used a compaction "
            "generate function: each of the 12 rollouts is 2 samples (segments before and after "
            "the context compaction) sharing rollout_id (= the base sample's index) and "
            "group_index, both carrying the rollout's reward, so 1.pt holds 24 samples. Rollout 2 "
            "is a plain single-turn rollout (rollout_id None). slime's _post_process_rewards "
            "reshapes rewards to (-1, n_samples_per_prompt) only when their count equals "
            "n_samples_per_prompt * rollout_batch_size; 24 != 12, so for 1.pt it normalises over "
            "the whole batch as one group (truth.json's advantage is what slime computed)."
        ),
        "rollouts": [
            ("train", SINGLE, None),
            ("train", COMPACTION, "slime_dump_hooks.compaction_generate"),
            ("train", SINGLE, None),
        ],
        "keep": ["1.pt", "2.pt"],
        "flags": ["--rm-type", "f1"],
    },
    "eval": {
        "description": (
            "Eval before training (eval_0.pt: 2 prompts x 2 samples, --eval-config dataset with "
            "rm_type math: int rewards 1/0; no group_index: eval samples get only an index) "
            "then train rollout 0 (0.pt, as default's)."
        ),
        "rollouts": [("eval", EVAL, None), ("train", SINGLE, None)],
        "flags": ["--rm-type", "f1"],
        "eval": True,
    },
    "reinforce_pp_baseline": {
        "description": (
            "--advantage-estimator reinforce_plus_plus_baseline --normalize-advantages: 3 "
            "rollouts (0.pt, 1.pt, 2.pt), 4 groups x 4 samples each, slime's default "
            "single-turn generate, f1 rewards (floats, int 0 when nothing overlaps), responses "
            "of 2 to 14 tokens. --global-batch-size 8: 2 training steps a rollout, whitened "
            "together. Rollout 0's group 1 has equal rewards (0 before the whitening, not after)."
        ),
        "rollouts": [("train", script, None) for script in RPP_SINGLE],
        "flags": [
            "--rm-type",
            "f1",
            "--advantage-estimator",
            "reinforce_plus_plus_baseline",
            "--normalize-advantages",
            "--rollout-batch-size",
            "4",
            "--global-batch-size",
            "8",
        ],
        "train": True,
    },
    "reinforce_pp_baseline_multi_turn": {
        "description": (
            "--advantage-estimator reinforce_plus_plus_baseline --normalize-advantages: 3 "
            "rollouts, 4 groups x 4 each, the multi-turn tool-calling generate function: the "
            "tool's output tokens sit inside the response with loss_mask 0; a sample whose "
            "second tool output fills the 16-token budget ends on masked tokens (status "
            "truncated). f1 reward on the whole response text. --global-batch-size 16."
        ),
        "rollouts": [
            ("train", script, "slime_dump_hooks.multi_turn_generate") for script in RPP_MULTI_TURN
        ],
        "flags": [
            "--rm-type",
            "f1",
            "--advantage-estimator",
            "reinforce_plus_plus_baseline",
            "--normalize-advantages",
            "--rollout-batch-size",
            "4",
            "--global-batch-size",
            "16",
        ],
        "train": True,
    },
    "reinforce_pp": {
        "description": (
            "--advantage-estimator reinforce_plus_plus --normalize-advantages, --kl-coef 0 and "
            "--gamma 1 (slime's defaults): the rollouts of reinforce_pp_baseline (same scripts "
            "and rewards). No group baseline: the raw reward is the return of every response "
            "token up to the last one with loss_mask 1, then whitened. --global-batch-size 16."
        ),
        "rollouts": [("train", script, None) for script in RPP_SINGLE],
        "flags": [
            "--rm-type",
            "f1",
            "--advantage-estimator",
            "reinforce_plus_plus",
            "--normalize-advantages",
            "--rollout-batch-size",
            "4",
            "--global-batch-size",
            "16",
        ],
        "train": True,
    },
    "reinforce_pp_multi_turn_gamma": {
        "description": (
            "--advantage-estimator reinforce_plus_plus --normalize-advantages --gamma 0.9 "
            "(--kl-coef 0): the rollouts of reinforce_pp_baseline_multi_turn. slime puts the "
            "reward on the last loss_mask-1 token and discounts over every response token, the "
            "masked tool tokens included; tokens after the last trained one get return 0. "
            "--global-batch-size 8."
        ),
        "rollouts": [
            ("train", script, "slime_dump_hooks.multi_turn_generate") for script in RPP_MULTI_TURN
        ],
        "flags": [
            "--rm-type",
            "f1",
            "--advantage-estimator",
            "reinforce_plus_plus",
            "--normalize-advantages",
            "--gamma",
            "0.9",
            "--rollout-batch-size",
            "4",
            "--global-batch-size",
            "8",
        ],
        "train": True,
    },
}


NOTES = (
    "advantage = slime's GRPO advantage for the sample: RolloutManager._post_process_rewards run"
    " unchanged on the rollout's samples (the raw reward, picked by --reward-key when it is a dict,"
    " minus the mean of its block, divided by the block's std (torch.std, ddof 1) + 1e-6). A block"
    " is n_samples_per_prompt consecutive samples of the flattened list when the file holds exactly"
    " n_samples_per_prompt * rollout_batch_size samples, else the whole file: slime groups by"
    " position, not by group_index. get_grpo_returns broadcasts it over every response token"
    " (advantage_tokens_equal). raw_reward is slime's train_data raw_reward. Eval files have no"
    " advantage."
)


NOTES_TRAIN = (
    "advantages = slime's own per-token advantages of the sample's response tokens "
    "(rollout_data['advantages'] after compute_advantages_and_returns, float32), as its train "
    "actor computes them for one rollout id (one rollout_data/{N}.pt) before the first training "
    "step. Rewards: RolloutManager._post_process_rewards gives reward_post_processed = raw reward "
    "minus the mean of its block of n_samples_per_prompt consecutive samples "
    "(reinforce_plus_plus_baseline; no std division), or the raw reward (reinforce_plus_plus). "
    "returns = slime's unwhitened per-token values (rollout_data['returns']): "
    "reinforce_plus_plus_baseline: reward_post_processed on every response token (kl_coef 0); "
    "reinforce_plus_plus: token rewards 0 except the raw reward on the last token whose loss_mask "
    "is 1, discounted G_t = r_t + gamma * G_{t+1} over all response tokens (masked ones included). "
    "Whitening (--normalize-advantages, distributed_masked_whiten, shift_mean True, epsilon 1e-8): "
    "over the tokens with loss_mask 1 of every sample of the rollout (all its training steps "
    "together, all-reduced over the data-parallel group): mean = sum(x*m)/sum(m), var = "
    "(sum(x^2*m)/sum(m) - mean^2) * n/(n-1) with n = sum(m) (unbiased when n >= 2), advantage = "
    "(x - mean) * rsqrt(var + 1e-8), applied to every response token, masked ones included (their "
    "values are never trained on). loss_mask is what slime trained on (None in the dump = all 1). "
    "files[*].whiten_reference: n, mean and unbiased std recomputed in float64 from returns and "
    "loss_mask, for reference only."
)


def write_data(folder: Path) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    train = folder / "train.jsonl"
    with train.open("w") as f:
        for problem, label in PROBLEMS[:6]:
            f.write(json.dumps({"prompt": problem, "label": label}) + "\n")
    evalp = folder / "eval.jsonl"
    with evalp.open("w") as f:
        for problem, label in PROBLEMS[6:]:
            f.write(json.dumps({"prompt": problem, "label": label}) + "\n")
    return train, evalp


def make_args(model_dir: Path, train: Path, evalp: Path, dump: Path, case: dict):
    import slime.utils.arguments as A
    from slime.backends.sglang_utils.arguments import add_sglang_arguments

    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser = A.get_slime_extra_args_provider()(parser)
    parser = add_sglang_arguments(parser)
    flags = [
        "--hf-checkpoint",
        str(model_dir),
        "--prompt-data",
        str(train),
        "--input-key",
        "prompt",
        "--label-key",
        "label",
        "--apply-chat-template",
        "--rollout-batch-size",
        "3",
        "--n-samples-per-prompt",
        str(N_SAMPLES),
        "--global-batch-size",
        "12",
        "--num-rollout",
        "3",
        "--rollout-max-response-len",
        str(MAX_RESPONSE_LEN),
        "--rollout-temperature",
        "1.0",
        "--rollout-skip-special-tokens",
        "--rollout-num-gpus",
        "1",
        "--sglang-router-ip",
        "127.0.0.1",
        "--sglang-router-port",
        "30000",
        "--save-debug-rollout-data",
        str(dump / "rollout_data" / "{rollout_id}.pt"),
        *case["flags"],
    ]
    if case.get("eval"):
        cfg = dump / "eval_config.yaml"
        cfg.write_text(
            "eval:\n  datasets:\n"
            f"    - name: toy_math\n      path: {evalp}\n      rm_type: math\n"
            "      n_samples_per_eval_prompt: 2\n      input_key: prompt\n      label_key: label\n"
        )
        flags += ["--eval-config", str(cfg), "--eval-interval", "1"]
    args = parser.parse_args(flags)
    argv, sys.argv = sys.argv, sys.argv[:1]
    try:
        for key, value in vars(A._pre_parse_mode()).items():
            setattr(args, key, value)
    finally:
        sys.argv = argv
    A.slime_validate_args(args)
    args.sglang_dp_size = 1  # SGLang's own --dp-size default (its flags are stubbed out)
    return args


def run_case(name: str, spec: dict, root: Path, outdir: Path, fixtures: Path, commit: str, ctx):
    import slime.observability.trace_utils as trace_utils
    import slime.rollout.sglang_rollout as sr
    import slime.utils.http_utils as http_utils
    from slime.utils.misc import SingletonMeta
    from slime.utils.ppo_utils import get_grpo_returns

    dumpkit.seed_all(42)
    ids = SeededIds(1234)
    sr.uuid = types.SimpleNamespace(uuid4=ids.uuid4)
    trace_utils.uuid = types.SimpleNamespace(uuid4=ids.uuid4)
    trace_utils.time = types.SimpleNamespace(time=ids.time)
    SingletonMeta._instances.clear()
    sr.EVAL_PROMPT_DATASET.clear()
    server: FakeSGLang = ctx["server"]
    server.cache.clear()
    server.n_requests = 0
    for m in (sr, http_utils):
        m.post = server.post
        m.get = server.get

    dump = outdir / name
    if dump.exists():
        shutil.rmtree(dump)
    dump.mkdir(parents=True)
    args = make_args(ctx["model_dir"], ctx["train"], ctx["eval"], dump, spec)
    manager = ctx["manager_cls"](args)
    train_side = None
    if spec.get("train"):
        check_vocabulary(server.tokenizer, [script for _, script, _ in spec["rollouts"]])
        if "train_side" not in ctx:
            ctx["train_side"] = SlimeTrainSide(root, outdir)
        train_side = ctx["train_side"]
        manager.set_train_parallel_config(train_side.parallel_config())
    trained: dict[int, dict] = {}
    rows = []
    rollout_id = 0
    for kind, script, gen_path in spec["rollouts"]:
        server.reset(script)
        args.custom_generate_function_path = gen_path
        if kind == "eval":
            manager.eval(rollout_id)
            continue
        refs = manager.generate(rollout_id)
        if train_side is not None:
            trained[rollout_id] = train_side.advantages(args, refs)
        rollout_id += 1

    files = sorted((dump / "rollout_data").iterdir())
    files_info: dict[str, dict] = {}
    keep = spec.get("keep")
    dest = fixtures / name
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "rollout_data").mkdir(parents=True)
    for f in files:
        if keep and f.name not in keep:
            continue
        shutil.copy2(f, dest / "rollout_data" / f.name)
        data = torch.load(f, weights_only=True)
        evaluation = f.name.startswith("eval_")
        n = data["rollout_id"]
        if not evaluation:
            train_data = manager.train_data[n]
            kl = [torch.zeros(r) for r in train_data["response_lengths"]]
            returns = get_grpo_returns(torch.tensor(train_data["rewards"]), kl)
        if train_side is not None:
            rows += train_rows(f, data, manager.train_data[n], trained[n], files_info)
            continue
        for i, s in enumerate(data["samples"]):
            row = {
                "file": f"rollout_data/{f.name}",
                "row": i,
                "group_index": s["group_index"],
                "index": s["index"],
                "rollout_id": s["rollout_id"],
                "reward": s["reward"],
                "status": s["status"],
                "advantage": None,
            }
            if not evaluation:
                assert train_data["sample_indices"][i] == s["index"]
                row["raw_reward"] = train_data["raw_reward"][i]
                row["advantage"] = train_data["rewards"][i]
                row["advantage_tokens_equal"] = bool(
                    torch.all(returns[i] == returns[i][0]).item() if len(returns[i]) else True
                )
            rows.append(row)
    truth = {
        "made_by": MADE_BY,
        "framework": f"slime @ {commit}",
        "case": name,
        "description": spec["description"],
        "settings": {
            "advantage_estimator": args.advantage_estimator,
            "rewards_normalization": args.rewards_normalization,
            "grpo_std_normalization": args.grpo_std_normalization,
            "normalize_advantages": args.normalize_advantages,
            "n_samples_per_prompt": args.n_samples_per_prompt,
            "rollout_batch_size": args.rollout_batch_size,
            "rollout_max_response_len": args.rollout_max_response_len,
            "rm_type": args.rm_type,
            "custom_rm_path": args.custom_rm_path,
            "reward_key": args.reward_key,
            "rollout_skip_special_tokens": args.rollout_skip_special_tokens,
            "apply_chat_template": args.apply_chat_template,
            "generate_functions": [g for _, _, g in spec["rollouts"]],
            "eps": 1e-6,
        },
        "notes": NOTES,
        "source_lines": SOURCE_LINES,
        "rows": rows,
    }
    if train_side is not None:
        settings = truth["settings"]
        del settings["eps"]  # GRPO's std eps: not used by these estimators
        settings.update(
            {
                "kl_coef": args.kl_coef,
                "gamma": args.gamma,
                "global_batch_size": args.global_batch_size,
                "micro_batch_size": args.micro_batch_size,
                "use_dynamic_batch_size": args.use_dynamic_batch_size,
                "balance_data": args.balance_data,
                "use_rollout_logprobs": args.use_rollout_logprobs,
                "train_parallel_config": train_side.parallel_config(),
                "whiten": {
                    "function": "slime.utils.distributed_utils.distributed_masked_whiten",
                    "shift_mean": True,
                    "epsilon": 1e-8,
                    "process_group": train_side.process_group(),
                },
            }
        )
        truth = {
            **{k: truth[k] for k in ("made_by", "framework", "case", "description", "settings")},
            "versions": versions(),
            "notes": NOTES_TRAIN,
            "source_lines": {**SOURCE_LINES, **TRAIN_SOURCE_LINES},
            "files": files_info,
            "rows": rows,
        }
    (dest / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    return dest


def train_rows(f: Path, data: dict, train_data: dict, rd: dict, files_info: dict) -> list[dict]:
    """truth.json rows of one rollout file from slime's train-side rollout_data (rank 0, its
    samples in DP-partition order, mapped back to the file's order by rollout_data['partition'])."""
    samples = data["samples"]
    partition = list(rd["partition"])
    assert sorted(partition) == list(range(len(samples))), "every sample is trained on"
    where = {pos: k for k, pos in enumerate(partition)}
    rows = []
    for i, s in enumerate(samples):
        k = where[i]
        assert train_data["sample_indices"][i] == s["index"] == rd["sample_indices"][k]
        mask = [int(v) for v in rd["loss_masks"][k].tolist()]
        advantages = [float(v) for v in rd["advantages"][k].tolist()]
        assert len(mask) == len(advantages) == s["response_length"]
        rows.append(
            {
                "file": f"rollout_data/{f.name}",
                "row": i,
                "group_index": s["group_index"],
                "index": s["index"],
                "rollout_id": s["rollout_id"],
                "reward": s["reward"],
                "status": s["status"],
                "response_length": s["response_length"],
                "raw_reward": train_data["raw_reward"][i],
                "reward_post_processed": train_data["rewards"][i],
                "loss_mask": mask,
                "returns": [float(v) for v in rd["returns"][k].tolist()],
                "advantages": advantages,
            }
        )
    x = np.concatenate([np.asarray(r["returns"], dtype=np.float64) for r in rows])
    m = np.concatenate([np.asarray(r["loss_mask"], dtype=np.float64) for r in rows])
    n = m.sum()
    mean = (x * m).sum() / n
    var = ((x - mean) ** 2 * m).sum() / (n - 1)
    files_info[f"rollout_data/{f.name}"] = {
        "rollout_id": data["rollout_id"],
        "samples": len(samples),
        "training_steps": len(rd["num_microbatches"]),
        "dp_partition_rank0": partition,
        "whiten_reference": {"n": int(n), "mean": float(mean), "std": float(np.sqrt(var))},
    }
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir", type=Path, help="scratch folder (source, model, per-case dumps)")
    ap.add_argument("--slime-src", required=True, help="fetched bare git dir or extracted tree")
    ap.add_argument("--fixtures", type=Path, default=REPO / "tests/fixtures/real/slime")
    ap.add_argument("cases", nargs="*", default=list(CASES))
    a = ap.parse_intermixed_args()
    outdir = a.outdir.resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    root, commit = dumpkit.prepare_source(a.slime_src, outdir, "slime")
    sys.path.insert(0, str(root))
    install_stubs()
    logging.basicConfig(level=logging.WARNING)
    from transformers import AutoTokenizer, Qwen2ForCausalLM

    hf_dir, model_dir = build_model(outdir / "checkpoint")
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    model = Qwen2ForCausalLM.from_pretrained(model_dir)
    server = FakeSGLang(tokenizer, model)
    make_hooks_module(server)
    train, evalp = write_data(outdir / "data")
    ctx = {
        "server": server,
        "model_dir": hf_dir,
        "train": train,
        "eval": evalp,
        "manager_cls": manager_class(root),
    }
    for name in a.cases:
        dest = run_case(name, CASES[name], root, outdir, a.fixtures, commit, ctx)
        print(f"wrote {dest}")
    if "train_side" in ctx:
        ctx["train_side"].close()
    asyncio.set_event_loop(None)


if __name__ == "__main__":
    main()
