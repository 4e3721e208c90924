"""Write prime-rl rollout dumps (the orchestrator's file monitor) as test fixtures.

prime-rl is not on PyPI and its orchestrator needs vLLM, an env server and a trainer, so it does
not run here. What does run:

* verifiers 0.4.0 (PyPI; prime-rl's episode schema), unchanged: ``Episode``, ``Trace``,
  ``MessageNode`` (built by ``verifiers.v1.graph.prepare_turn`` / ``PendingTurn.commit``, the
  graph builder a real rollout uses), ``TraceTask`` / ``Task.key`` / ``Task.hash``,
  ``verifiers.v1.clients.train.response_from_generate`` (the renderer train client's response
  parser), ``Trace.record_reward`` / ``record_metric`` / ``record_error`` / ``stop``,
  ``Episode.to_record()``; the prompt is rendered by ``renderers.DefaultRenderer`` (renderers
  0.1.12, verifiers' dependency) over a word-level tokenizer built here;
* prime-rl's own functions, taken out of its source at commit ``PRIME_RL_COMMIT`` with ``ast`` and
  executed unchanged (the source is read with ``git show`` from a bare clone of
  PrimeIntellect-ai/prime-rl named by ``$PRIME_RL_GIT``):
  ``orchestrator/algo/base.py: iter_trainable_traces``, ``orchestrator/algo/grpo.py:
  GRPOAlgorithm.score_group`` (length_penalty None, the default), ``orchestrator/algo/routing.py:
  assign_advantages, scalar_advantage, is_trainable``, ``orchestrator/metrics.py: TraceRecord,
  _records, EpisodeCollection, TrainEpisodes`` (``effective``, ``vf_episodes``: stamps
  ``trace.info["advantage"]``), ``orchestrator/train_sink.py: _prune_zero_advantages,
  payload_tokens, TrainSink.process_batch`` (``filter_zero_advantages`` True, the default) and
  ``monitors/file.py: FileMonitor.log_episodes`` (which writes the files, with orjson).

What the script does itself, following prime-rl's code (not prime-rl running): the dispatcher's
stamping of each episode (``dispatcher.py emit_episode``: ``env.name``, ``group.id`` =
``str(uuid4())`` per group, ``run`` = ``TrainRunInfo(id=uuid4().hex, work=TrainWorkInfo(step,
policy=PolicySpan))``); the order episodes arrive in; which step's ``all`` file an episode lands
in (``orchestrator.main_loop``: the batch window being collected, ``progress.step``, 1-based);
``TrainSink.process_group`` (score the group once all ``group_size`` episodes are in, one
training sample per trainable trace, in arrival order); ``trace_to_samples`` is stood in by a
one-sample-per-branch record carrying ``mask`` and ``advantages`` (prime-rl HEAD's version reads
``Branch.multi_modal_data``, which verifiers 0.4.0 does not have). The model is stood in by
scripted completions and logprobs; uuids come from a seeded RNG, timestamps from a fixed clock.
So the advantages in ``effective`` are this script's, computed by prime-rl's GRPO code, not
prime-rl's own run. ``effective`` is written in the order prime-rl's ``process_batch`` iterates
a Python ``set`` of trace ids, which depends on the string hash seed: the script re-executes
itself with ``PYTHONHASHSEED=0`` so that the order is reproducible.

Versions that ran: Python 3.11.7, verifiers 0.4.0, renderers 0.1.12, transformers 5.24.0,
tokenizers 0.23.3, pydantic 2.14.4, torch 2.13.0+cpu, orjson.

How to run::

    python3 -m venv /tmp/fw/prime
    /tmp/fw/prime/bin/pip install verifiers==0.4.0 torch==2.13.0 orjson
    /tmp/fw/prime/bin/python tools/dumps/prime_rl.py OUTDIR     # e.g. tests/fixtures/real/prime-rl

Each case folder ``OUTDIR/<case>/`` is the orchestrator's ``output_dir``:
``rollouts/step_{N}/train/{all,effective}/traces.jsonl``, plus ``truth.json``.
"""

from __future__ import annotations

import os
import sys

if os.environ.get("PYTHONHASHSEED") != "0":
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable, *sys.argv])

import ast  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import textwrap  # noqa: E402
import uuid  # noqa: E402
from collections import defaultdict  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402

# dumpkit is beside this file (on sys.path already when it runs as a script, not when imported)
sys.path.insert(0, str(Path(__file__).resolve().parent))
import dumpkit  # noqa: E402

PRIME_RL_COMMIT = "559b44772e471d1538537b8805cc77f3824a5e64"
PRIME_RL_GIT = os.environ.get("PRIME_RL_GIT", "")  # a bare clone of PrimeIntellect-ai/prime-rl
SEED = 20260821
GROUP_SIZE = 4
BATCH_SIZE = 12  # traces per training step (3 groups x 4)
ENV_NAME = "tiny-math"
MODEL = "tiny-qwen"
CLOCK0 = 1_787_000_000.0  # fixed wall clock for timestamps

# ---------------------------------------------------------------- tokenizer (built locally)
_WORDS_TEXT = (
    "what is one two three four five six seven eight nine ten zero plus minus times "
    "equals the answer so #### i think it , . ? no try again you are a helpful assistant "
    "put after not"
)
WORDS = _WORDS_TEXT.split()
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<|' + m['role'] + '|> ' + m['content'] + ' <eos> ' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)
SYSTEM = "you are a helpful assistant . put the answer after ####"


def build_tokenizer(folder: str):
    return dumpkit.save_chat_tokenizer(folder, SPECIALS, WORDS, CHAT_TEMPLATE)


# ---------------------------------------------------------------- prime-rl code, unchanged
def _git_show(path: str) -> str:
    if not PRIME_RL_GIT:
        sys.exit("set PRIME_RL_GIT to a bare git clone of PrimeIntellect-ai/prime-rl")
    return dumpkit.git_file(PRIME_RL_GIT, PRIME_RL_COMMIT, path)


def load_prime_rl(ns: dict) -> list[dict]:
    """exec prime-rl's own definitions (source text unchanged) into ``ns``; return where each
    came from (file, qualified name, first and last line)."""
    wanted = [
        ("src/prime_rl/orchestrator/algo/base.py", ["iter_trainable_traces"]),
        (
            "src/prime_rl/orchestrator/algo/routing.py",
            ["assign_advantages", "scalar_advantage", "is_trainable"],
        ),
        ("src/prime_rl/orchestrator/algo/grpo.py", ["GRPOAlgorithm.score_group"]),
        (
            "src/prime_rl/orchestrator/metrics.py",
            ["TraceRecord", "_records", "EpisodeCollection", "TrainEpisodes"],
        ),
        (
            "src/prime_rl/orchestrator/train_sink.py",
            ["payload_tokens", "_prune_zero_advantages", "TrainSink.process_batch"],
        ),
        ("src/prime_rl/monitors/file.py", ["FileMonitor.log_episodes"]),
    ]
    where = []
    for path, names in wanted:
        src = _git_show(path)
        tree = ast.parse(src)
        for qual in names:
            parts = qual.split(".")
            body = tree.body
            node = None
            for part in parts:
                node = next(n for n in body if getattr(n, "name", None) == part)
                body = getattr(node, "body", [])
            start = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])
            seg = "\n".join(src.splitlines()[start - 1 : node.end_lineno])
            code = "from __future__ import annotations\n" + textwrap.dedent(seg)
            exec(compile(code, f"prime-rl@{PRIME_RL_COMMIT[:9]}:{path}", "exec"), ns)
            if len(parts) > 1:  # a method: keep it under its qualified name
                ns[qual] = ns.pop(parts[-1])
            where.append({"file": path, "name": qual, "lines": [start, node.end_lineno]})
    return where


# ---------------------------------------------------------------- tasks and scripted outputs
# reward = correct_answer (weight 1.0) + format (weight 0.5): '#### <word>' present -> format 1.
# Each completion: text, and an optional follow-up (a second turn after a user nudge).
STEPS = {
    1: [  # dispatched at step 1 with policy v0; all arrive in the step-1 window
        dict(
            q="what is two plus three ?",
            a="five",
            dispatch_step=1,
            policy=(0, 0),
            outs=[
                "two plus three equals five . #### five",
                "two plus three is five",
                "i think it is six . #### six",
                "it is six",
            ],
        ),
        dict(
            q="what is four times two ?",
            a="eight",
            dispatch_step=1,
            policy=(0, 0),
            outs=[
                "four times two equals eight . #### eight",
                "#### eight",
                "four times two is eight . #### eight",
                "i think it is eight . #### eight",
            ],
        ),
        dict(
            q="what is nine minus four ?",
            a="five",
            dispatch_step=1,
            policy=(0, 0),
            outs=[
                "nine minus four is five",
                "#### four",
                "nine minus four equals three",
                "#### three",
            ],
        ),
    ],
    2: [  # the first group was dispatched at step 1 and finished after the v1 update
        dict(
            q="what is ten minus ten ?",
            a="zero",
            dispatch_step=1,
            policy=(0, 1),
            outs=[
                "ten minus ten equals zero . #### zero",
                "ten minus ten equals one",
                "#### one",
                "i think it is ten",
            ],
        ),
        dict(
            q="what is one plus one ?",
            a="two",
            dispatch_step=2,
            policy=(1, 1),
            outs=[
                "one plus one equals three",
                "#### three",
                ("i think it is three", "no , try again", "one plus one equals two . #### two"),
                "one plus one is two",
            ],
        ),
        dict(
            q="what is three times three ?",
            a="nine",
            dispatch_step=2,
            policy=(1, 1),
            outs=[
                "three times three equals six",
                "i think it is six",
                "three times three is eight",
                "it is ten",
            ],
        ),
    ],
}
ALL_ONLY = {
    1: [
        dict(
            q="what is six minus two ?",
            a="four",
            dispatch_step=1,
            policy=(0, 0),
            outs=[
                "six minus two equals four . #### four",
                "#### four",
                "six minus two is three",
                "ERROR",
            ],
        ),
        dict(
            q="what is five plus four ?",
            a="nine",
            dispatch_step=1,
            policy=(0, 0),
            outs=[
                "five plus four equals nine . #### nine",
                "five plus four is nine",
                "#### eight",
                "i think it is ten",
            ],
        ),
    ],
}


def score(completion_words: list[str], answer: str) -> tuple[float, float]:
    formatted = "####" in completion_words
    final = None
    if formatted:
        i = completion_words.index("####")
        final = completion_words[i + 1] if i + 1 < len(completion_words) else None
    correct = (
        1.0 if (final == answer or (not formatted and answer in completion_words[-1:])) else 0.0
    )
    return correct, 1.0 if formatted else 0.0


class Ids:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def hex(self) -> str:
        return uuid.UUID(int=self.rng.getrandbits(128), version=4).hex

    def uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))


def make_episode(
    vf, tok, renderer, task_cls, data_cls, spec, k, idx, ids, clock, run_id, policy_now
):
    """One verifiers episode for task ``spec``, sample ``k``, built the way a SingleAgentEnv
    rollout with the renderer train client builds it."""
    from verifiers.v1 import graph
    from verifiers.v1.clients.train import response_from_generate
    from verifiers.v1.dialects.chat import message_to_wire
    from verifiers.v1.errors import ProviderError

    task = task_cls(data_cls(idx=idx, prompt=spec["q"], system_prompt=SYSTEM, answer=spec["a"]))
    trace_task = vf.TraceTask(
        type=type(task).__name__, data=task.data, key=task.key, hash=task.hash
    )
    t0 = clock()
    trace = vf.Trace(
        id=ids.hex(),
        task=trace_task,
        agent=vf.AgentInfo(config=vf.AgentConfig()),
        timing=vf.Timing(start=t0),
    )
    trace.timing.agent.start = t0 + 0.01
    out = spec["outs"][k]
    turns = [out] if isinstance(out, str) else [out[0], out[2]]
    nudges = [] if isinstance(out, str) else [out[1]]
    messages = [vf.SystemMessage(content=SYSTEM), vf.UserMessage(content=spec["q"])]
    rng = random.Random(f"{spec['q']}|{k}")
    if out == "ERROR":
        # the inference server failed mid-rollout: verifiers records the error on the trace
        # the first model call failed: the interception server records the exchange with its
        # error and no node (the turn is abandoned), then the rollout records the failure
        err = ProviderError("upstream /inference/v1/generate returned 503", status_code=503)
        started = clock()
        trace.calls.append(
            vf.ModelCall(
                node=None,
                model=MODEL,
                sampling=vf.Sampling(temperature=1.0, max_tokens=16),
                endpoint="/chat/completions",
                time=vf.TimeSpan(start=started, end=clock()),
                error=vf.Error(
                    type=type(err).__name__, message=str(err), status_code=503, traceback=None
                ),
            )
        )
        trace.record_error(err)
        trace.timing.agent.end = t0 + 0.2
        trace.split_agent_time()
        ep_ok = False
    else:
        for n, text in enumerate(turns):
            turn = graph.prepare_turn(trace, list(messages))
            rendered = renderer.render(
                [message_to_wire(m) for m in messages], add_generation_prompt=True
            )
            comp = tok(text + " <eos>", add_special_tokens=False)["input_ids"]
            result = {
                "request_id": ids.hex(),
                "content": text,
                "finish_reason": "stop",
                "prompt_ids": rendered.token_ids,
                "completion_ids": comp,
                "completion_logprobs": [round(-rng.uniform(0.01, 2.0), 6) for _ in comp],
                "prompt_attribution": rendered,
            }
            response = response_from_generate(result, MODEL)
            started = clock()
            node = turn.commit(response)
            trace.calls.append(
                vf.ModelCall(
                    node=node,
                    model=MODEL,
                    sampling=vf.Sampling(temperature=1.0, max_tokens=16),
                    endpoint="/chat/completions",
                    finish_reason=response.finish_reason,
                    usage=response.usage,
                    time=vf.TimeSpan(start=started, end=clock()),
                )
            )
            messages.append(response.message)
            if n < len(nudges):
                messages.append(vf.UserMessage(content=nudges[n]))
        for i, nd in enumerate(trace.nodes):  # deterministic node stamps
            nd.timestamp = t0 + 0.01 * (i + 1)
        words = turns[-1].split()
        correct, fmt = score(words, spec["a"])
        trace.timing.agent.end = clock()
        trace.split_agent_time()
        trace.stop("agent_completed")
        trace.timing.scoring.start = clock()
        trace.record_reward("correct_answer", correct, weight=1.0)
        trace.record_reward("format", fmt, weight=0.5)
        trace.record_metric("num_words", len(words))
        trace.timing.scoring.end = clock()
        trace.ok = True
        ep_ok = True
    trace.is_completed = True
    episode = vf.Episode(
        id=ids.hex(), env=vf.EnvInfo(id=ENV_NAME), task=trace_task, traces=[trace], ok=ep_ok
    )
    # dispatcher.emit_episode stamps provenance
    episode.env.name = ENV_NAME
    episode.group = vf.GroupInfo(id=spec["_gid"])
    policy = vf.PolicySpan(start=spec["policy"][0], end=spec["policy"][1])
    episode.record_run(
        vf.TrainRunInfo(
            id=run_id, name=None, work=vf.TrainWorkInfo(step=spec["dispatch_step"], policy=policy)
        )
    )
    return episode


async def run_case(
    case_dir: Path, steps: dict, with_effective: bool, ns: dict, tok, renderer, seed: int
):
    import verifiers.v1 as vf

    class MathTaskData(vf.TaskData):
        answer: str

    class MathTask(vf.Task[MathTaskData]):
        pass

    ids = Ids(seed)
    t = [CLOCK0]

    def clock() -> float:
        t[0] += 0.125
        return t[0]

    run_id = ids.hex()
    monitor = SimpleNamespace(output_dir=case_dir)
    log_episodes = ns["FileMonitor.log_episodes"]
    score_group = ns["GRPOAlgorithm.score_group"]
    algo = SimpleNamespace(length_penalty=None)
    idx = 0
    truth_rows = []
    # TrainSink state (train_sink.py __init__), carried across steps
    sink = SimpleNamespace(
        pending_batch={},
        batch_size=BATCH_SIZE,
        token_batch_size=None,
        episode_by_trace={},
        pending_episodes=ns["TrainEpisodes"](),
        config=SimpleNamespace(train=SimpleNamespace(filter_zero_advantages=True)),
    )
    sink._trace = lambda trace_id: next(
        tr for tr in sink.episode_by_trace[trace_id].traces if tr.id == trace_id
    )
    order_rng = random.Random(seed + 1)
    for step, specs in sorted(steps.items()):
        episodes = []
        for spec in specs:
            spec["_gid"] = ids.uuid()
            for k in range(GROUP_SIZE):
                episodes.append(
                    make_episode(
                        vf,
                        tok,
                        renderer,
                        MathTask,
                        MathTaskData,
                        spec,
                        k,
                        idx,
                        ids,
                        clock,
                        run_id,
                        step,
                    )
                )
            idx += 1
        # completion order: rollouts of different groups finish interleaved
        arrival = episodes[:]
        order_rng.shuffle(arrival)
        # every group must still complete in dispatch order for this toy schedule
        pending_groups: dict[str, list] = defaultdict(list)
        all_file = case_dir / "rollouts" / f"step_{step}" / "train" / "all" / "traces.jsonl"
        batch = None
        for ep in arrival:
            # orchestrator.main_loop: every arrival goes to the `all` file of the current window
            await log_episodes(monitor, [ep], step, "train", "all")
            truth_rows.append(dict(file=all_file.relative_to(case_dir).as_posix(), episode=ep))
            if not with_effective:
                continue
            # TrainSink.add -> process_group once group_size episodes are in
            gid = ep.group.id
            pending_groups[gid].append(ep)
            if len(pending_groups[gid]) < GROUP_SIZE:
                continue
            group = pending_groups.pop(gid)
            survivors = [tr for _, tr in ns["iter_trainable_traces"](group)]
            if survivors:
                await score_group(algo, group)
            samples_by_trace = {}
            for tr in survivors:
                samples_by_trace[tr.id] = [sample_of(tr)]
            sink.pending_episodes.extend(
                group, sampled_trace_ids=set(samples_by_trace), admitted=True
            )
            sink.pending_batch.update(samples_by_trace)
            for e in group:
                for tr in e.traces:
                    if tr.id in samples_by_trace:
                        sink.episode_by_trace[tr.id] = e
            if len(sink.pending_batch) >= sink.batch_size:
                batch = ns["TrainSink.process_batch"](sink)
        if with_effective:
            assert batch is not None, "the step's groups did not fill a batch"
            # orchestrator.finalize_train_batch: log the effective (shipped) cohort
            effective = batch.cohort.effective
            await log_episodes(monitor, effective.vf_episodes, step, "train", "effective")
    if not with_effective:  # what GRPO would assign (prime-rl's code), for the truth file only
        groups = defaultdict(list)
        for r in truth_rows:
            groups[r["episode"].group.id].append(r["episode"])
        for group in groups.values():
            if any(True for _ in ns["iter_trainable_traces"](group)):
                await score_group(algo, group)
    return truth_rows


@dataclass
class TrainingSampleStandIn:
    """The fields of prime_rl.transports.rollouts.TrainingSample that TrainSink reads."""

    token_ids: list[int]
    mask: list[bool]
    advantages: list[float] | None
    rl_weights: list[float] | None = None
    ce_weights: list[float] | None = None
    ref_kl_weights: list[float] | None = None
    temperatures: list[float] = field(default_factory=list)


def sample_of(trace) -> TrainingSampleStandIn:
    """trace_to_samples for a one-branch trace without loss-weight streams: one sample."""
    (branch,) = trace.branches
    return TrainingSampleStandIn(
        token_ids=branch.token_ids, mask=branch.sampled_mask, advantages=branch.advantages
    )


def truth_for(case_dir: Path, rows, ns, case: str, description: str, with_effective: bool) -> dict:
    # the advantage each episode's trace got (full precision; the file rounds per-token values)
    by_id = {}
    for r in rows:
        ep = r["episode"]
        (tr,) = ep.traces
        adv = ns["scalar_advantage"](tr)
        by_id[ep.id] = dict(
            group_id=ep.group.id,
            reward=tr.reward if tr.ok else None,
            advantage=adv,
            trace_id=tr.id,
            ok=ep.ok,
            n_sampled_tokens=sum(sum(n.mask) for n in tr.nodes),
        )
    out_rows = []
    for f in sorted(case_dir.rglob("traces.jsonl")):
        for n, line in enumerate(f.read_text().splitlines(), start=1):
            rec = json.loads(line)
            info = by_id[rec["id"]]
            subset = f.parent.name
            row = {
                "file": f.relative_to(case_dir).as_posix(),
                "line": n,
                "subset": subset,
                "step": int(f.parts[-4].split("_")[1]),
                "episode_id": rec["id"],
                "trace_id": info["trace_id"],
                "group_id": info["group_id"],
                "ok": info["ok"],
                "reward": info["reward"],
                "advantage": info["advantage"],
                "in_file_advantages": subset == "effective",
            }
            out_rows.append(row)
    import verifiers

    versions = {"python": sys.version.split()[0], "verifiers": verifiers.__version__}
    import importlib.metadata as md

    for pkg in ("renderers", "transformers", "tokenizers", "pydantic", "torch", "orjson"):
        with contextlib.suppress(md.PackageNotFoundError):
            versions[pkg] = md.version(pkg)
    versions["prime-rl"] = (
        f"source at {PRIME_RL_COMMIT} (not installed; functions taken out with ast)"
    )
    return {
        "made_by": "tools/dumps/prime_rl.py",
        "framework": "prime-rl (orchestrator file monitor) with verifiers 0.4.0 episodes",
        "versions": versions,
        "case": case,
        "description": description,
        "settings": {
            "group_size": GROUP_SIZE,
            "batch_size": BATCH_SIZE,
            "filter_zero_advantages": True,
            "algo": "grpo, length_penalty None (defaults)",
            "rewards": (
                "correct_answer (weight 1.0) + format (weight 0.5); "
                "trace.reward = sum(score * weight)"
            ),
            "env": ENV_NAME,
            "line_numbers": "1-based",
            "advantage_provenance": (
                "NOT prime-rl's own run: the orchestrator did not run. Advantages were computed by "
                "this script calling prime-rl's GRPOAlgorithm.score_group / assign_advantages "
                f"(source at {PRIME_RL_COMMIT}, executed unchanged) on the script's groups: "
                "advantage = reward - mean(reward of the group's trainable traces), float32, the "
                "same value on every sampled token of the trace. Row 'advantage' is prime-rl's "
                "scalar_advantage(trace) at full precision; in the effective file the per-token "
                "node 'advantages' are rounded to 4 decimals by Episode.to_record() and "
                "trace.info.advantage holds the full-precision scalar."
            ),
            "all_rows": (
                "records in all/ carry no advantages (written on arrival, before the group "
                "is scored); the row's 'advantage' is what GRPO assigned afterwards, or "
                "null for an errored trace (excluded from the group mean)"
            ),
            "effective_rows": (
                "only traces with a nonzero advantage are in effective/: "
                "filter_zero_advantages drops an all-equal group and any trace whose "
                "reward equals its group mean; order follows a Python set of "
                "trace ids (PYTHONHASHSEED=0 here), not the groups"
            ),
        },
        "rows": out_rows,
    }


def main(outdir: str) -> None:
    outdir = Path(outdir).resolve()
    import types

    import orjson
    import torch
    import verifiers.v1 as vf
    from renderers.default import DefaultRenderer

    module = types.ModuleType("prime_rl_extracted")  # dataclasses look their module up
    sys.modules[module.__name__] = module
    ns = module.__dict__
    ns.update(
        {
            "vf": vf,
            "torch": torch,
            "asyncio": asyncio,
            "orjson": orjson,
            "Path": Path,
            "dataclass": dataclass,
            "defaultdict": defaultdict,
        }
    )
    where = load_prime_rl(ns)

    @dataclass
    class TrainBatch:  # orchestrator/types.py TrainBatch (fields only)
        episodes: object
        cohort: object
        samples: list

    ns["TrainBatch"] = TrainBatch
    tok_dir = tempfile.mkdtemp(prefix="prime_tok_")
    tok = build_tokenizer(tok_dir)
    renderer = DefaultRenderer(tok)
    cases = [
        (
            "default",
            STEPS,
            True,
            "2 training steps x 3 groups x group_size 4, single env. all/ = every episode on "
            "arrival (interleaved across groups, no advantages); effective/ = the shipped traces "
            "with per-token advantages, in set order (not grouped). Step 1: group 2 has four equal "
            "rewards (all advantages 0: none of it in effective), group 3 has two traces whose "
            "reward equals the group mean (advantage 0: not in effective). Step 2: group 1 was "
            "dispatched at step 1 (run.work.step 1, policy 0->1) but arrived in the step-2 window, "
            "and one of its traces has advantage 0; group 2 sample 2 is a two-turn trace "
            "(system, user, assistant, user nudge, assistant: 5 nodes, two sampled) whose "
            "advantage covers both sampled nodes; group 3 rewards all 0 (none in effective). "
            "effective holds 6 (step 1) and 7 (step 2) of the 12 traces.",
        ),
        (
            "all_only",
            ALL_ONLY,
            False,
            "Only rollouts/step_1/train/all/traces.jsonl: 2 groups x 4 as they arrive, no "
            "advantages anywhere in the file. One episode of group 1 failed on its first model "
            "call (ProviderError 503): episode ok false, trace ok false, no nodes, no rewards, "
            "one call carrying the error; GRPO leaves it out of its group's mean (the truth "
            "row's advantage is null, the other three are reward - mean of three).",
        ),
    ]
    for i, (case, steps, with_eff, desc) in enumerate(cases):
        case_dir = outdir / case
        if case_dir.exists():
            shutil.rmtree(case_dir)
        case_dir.mkdir(parents=True)
        steps = json.loads(json.dumps(steps))  # fresh copies (run_case stamps group ids)
        rows = asyncio.run(run_case(case_dir, steps, with_eff, ns, tok, renderer, SEED + 100 * i))
        truth = truth_for(case_dir, rows, ns, case, desc, with_eff)
        truth["settings"]["prime_rl_code_run_unchanged"] = where
        (case_dir / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
        print(f"{case}: {len(truth['rows'])} lines -> {case_dir}")
    shutil.rmtree(tok_dir, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: prime_rl.py OUTDIR")
    main(sys.argv[1])
