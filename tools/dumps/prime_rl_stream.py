"""Write prime-rl's NEW trace-stream layout (file monitor after PRs #3444 and #3465) as fixtures.

From prime-rl v0.9.1.dev29 (2026-09-01) the orchestrator's file monitor no longer writes
``rollouts/step_N/{train,eval}/{all,effective}/traces.jsonl``. Every episode is written once,
on arrival, to an arrival-ordered chunked stream, and what the trained cohort adds comes later
as append-only annotation records that a reader folds back on by trace id::

    <output_dir>/monitors/file/metrics.jsonl
    <output_dir>/monitors/file/traces/stream/00000.jsonl.zst     sealed chunk (seekable zstd)
    <output_dir>/monitors/file/traces/stream/00001.jsonl         live chunk (plain text)
    <output_dir>/monitors/file/traces/stream.index.jsonl         one row per episode
    <output_dir>/monitors/file/traces/annotations/orch/00000.jsonl[.zst]
    <output_dir>/monitors/file/traces/annotations/orch.index.jsonl
    <output_dir>/monitors/file/traces/annotations/trainer/...    (case stream_multi_annotation)

prime-rl is not on PyPI and its orchestrator needs vLLM, env servers and a trainer, so it does
not run here. What runs, unchanged:

* verifiers 0.4.0 (PyPI): episodes built exactly as ``tools/dumps/prime_rl.py`` builds them
  (its ``make_episode``, ``build_tokenizer`` and scripted completions are reused), and
  ``Episode.to_record(float_decimals=4)``, which rounds the per-token floats of the record;
  in case ``stream_retried_episode`` also ``verifiers.v1.utils.retries.run_episode_with_retry``
  with ``RetryConfig(max_retries=1)`` (what ``Env.run_slot`` runs for every episode).
* prime-rl's scoring code at ``prime_rl.PRIME_RL_COMMIT`` (559b4477, read with ``git show`` from
  the bare clone named by ``$PRIME_RL_GIT``, as ``tools/dumps/prime_rl.py`` does):
  ``GRPOAlgorithm.score_group``, ``assign_advantages``, ``scalar_advantage``, ``is_trainable``,
  ``iter_trainable_traces``, ``TrainSink.process_batch`` (``filter_zero_advantages`` True),
  the ``TrainEpisodes`` cohort and its metrics classes (``Stat`` ... ``TrainMetrics``) and
  ``utils.utils.sanitize``.
* prime-rl's new file-monitor code, from commits newer than any fetchable snapshot, taken out of
  the files listed in ``NEW_SOURCES`` (repository, commit, path, git blob id of the text used):
  ``FileMonitor.init / log_metrics / _stream / log_episodes / log_annotations / finalize``,
  the whole of ``traces/chunks.py`` (``ChunkedJsonl``, sealing with ``pyzstd``), ``traces/index.py``
  (``index_row``), ``traces/update.py`` (``make_update``, ``update_index_row``,
  ``fold_trace_updates``), the path helpers of ``traces/__init__.py``, ``FileMonitorConfig``,
  ``orchestrator/annotations.py: stamp_arrival, stamp_ship`` and
  ``trainer/rl/annotations.py: AnnotationWriter, _tensor_to_floats, _tensor_to_optional_bools``.
  These files are read from ``$PRIME_RL_SRC/<owner>+<repo>@<commit>/<path>`` (copies of the text
  stored by the code-search index; each copy is checked against the blob id recorded here).

Stood in (following prime-rl's code, not prime-rl running): the orchestrator main loop
(``orchestrator.py``: ``stamp_arrival`` then ``monitors.log(all)`` for every arrival, the train
sink, then at ship ``monitors.log(effective)`` [a no-op for the file monitor],
``monitors.log_annotations(stamp_ship(effective.vf_episodes, step))`` and one metrics row built
from ``pool.metrics.to_wandb`` for ``all`` / ``effective`` x ``train/agg`` / ``train/<env>``);
``prime_rl.utils.pathing.get_file_monitor_dir`` (``output_dir / "monitors" / "file"``);
``prime_rl.utils.config.BaseConfig`` (a pydantic ``BaseModel``); the monitor's logger; the wall
clock (``time.time`` is a fixed clock); and, in ``stream_multi_annotation``, the trainer's packed
micro batch and model outputs (trainer logprobs = sampling logprob + seeded noise, entropies
seeded random) fed to the real ``AnnotationWriter.export``. The model is scripted completions.
The run is a snapshot taken while it is still running (``FileMonitor.finalize`` not called) in
cases ``stream``, ``stream_superseded`` and ``stream_batch_cut``, so the live chunks stay plain;
the other cases end cleanly (``finalize``: every chunk sealed).

Cases (``CASES``; each ``description`` says more): ``stream`` and ``stream_multi_annotation`` as
before; ``stream_failed_episode`` (one rollout fails on its first model call: ok false, no reward,
in the stream, never annotated; its group scored over the other three); ``stream_superseded``
(two traces each get an early, script-made orch record, from prime-rl's ``score_group`` run on
the first three arrivals of the group, superseded by the real ``stamp_ship`` record later in the
same orch stream, one pair across two chunks); ``stream_batch_cut`` (batch_size 10 over groups
of 4: ``process_batch`` cuts by count, so one group ships at two steps and two scored traces with
nonzero advantages are still in the sink at the snapshot); ``stream_retried_episode`` (a rollout
whose first attempt failed and whose env retried it: the final episode is ok with the failed
attempt's error in ``errors``, counts in its group and ships). The last four add to
``truth.json`` per row ``episode_errors``, ``trace_errors``, ``trainable``, ``pending_in_sink``,
``computed.node_advantages_to_record_4`` and ``written.orch_records_each_folded_alone``, a
``groups`` summary, and ``settings.rounding`` / ``settings.failed_and_retried``; the truth files
of the first two are unchanged.

Versions that ran: Python 3.11.7, verifiers 0.4.0, pyzstd 0.20.0, orjson 3.13.0, pydantic
2.14.4, torch 2.13.0+cpu, renderers 0.1.12, transformers 5.24.0, tokenizers 0.23.3.

How to run::

    python3 -m venv /tmp/fw/prime
    /tmp/fw/prime/bin/pip install verifiers==0.4.0 torch==2.13.0 transformers==5.24.0 \\
        orjson pyzstd
    PRIME_RL_GIT=/path/to/prime-rl.git PRIME_RL_SRC=/tmp/fw/prime_src \\
        /tmp/fw/prime/bin/python tools/dumps/prime_rl_stream.py tests/fixtures/real/prime-rl \\
        [CASE ...]

``PRIME_RL_GIT`` is a bare clone holding ``PRIME_RL_COMMIT`` (e.g. the search tool's ``fetch``
of github:PrimeIntellect-ai/prime-rl); ``PRIME_RL_SRC/<owner>+<repo>@<commit>/<path>`` holds the
``NEW_SOURCES`` texts as the code-search index stores them (its ``read_file`` with repo, path and
commit), checked here against their blob ids. With no CASE it writes every case folder named in
``CASES`` (``stream``, ``stream_multi_annotation``, ``stream_failed_episode``,
``stream_superseded``, ``stream_batch_cut``, ``stream_retried_episode``); a case's seed and clock
depend only on its place in ``CASES``, so writing some cases writes them exactly as writing all
does.
``tools/dumps/prime_rl.py`` still writes ``default`` and ``all_only``.
"""

from __future__ import annotations

import os
import sys

if os.environ.get("PYTHONHASHSEED") != "0":  # process_batch iterates a set of trace ids
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable, *sys.argv])

import ast  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import textwrap  # noqa: E402
import types  # noqa: E402
from collections import defaultdict  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import prime_rl as base  # noqa: E402  (tools/dumps/prime_rl.py: episodes, tokenizer, scripts)

PRIME_RL_SRC = os.environ.get("PRIME_RL_SRC", "")
UPSTREAM = "PrimeIntellect-ai/prime-rl"
FORK = "polyphilz/prime-rl"  # the only indexed copy of the chunked traces/__init__.py

# (repository, commit, path, git blob id of the text, definitions taken; None = whole module)
NEW_SOURCES = {
    "monitor": (
        UPSTREAM,
        "048a6e23428ea9b47feaba3c9fa75376e89a383e",
        "src/prime_rl/monitors/file/monitor.py",
        "37296efb9a013cff1d23f7ee8ce1fcf27423d87b",
        [
            "OPTS",
            "FileMonitor.init",
            "FileMonitor.log_metrics",
            "FileMonitor._stream",
            "FileMonitor.log_episodes",
            "FileMonitor.log_annotations",
            "FileMonitor.finalize",
        ],
    ),
    "chunks": (
        UPSTREAM,
        "551bfc39ba61d9f0aec59780d4a3d7e5395f1fdc",
        "src/prime_rl/monitors/file/traces/chunks.py",
        "ea87162eded5943604430168c1d78dd53e6f653a",
        None,
    ),
    "index": (
        UPSTREAM,
        "13e96a1254e9eae2564a5b6985ac5ada32ae0cc4",
        "src/prime_rl/monitors/file/traces/index.py",
        "3494a23e7c418cc26ba2797cb70f54829b68d053",
        None,
    ),
    "update": (
        UPSTREAM,
        "65a185848115523d2feb2e110d04d05cfbea3a08",
        "src/prime_rl/monitors/file/traces/update.py",
        "b51f1461bb75506c859fe4b7e3b7176bd42f2016",
        None,
    ),
    "traces": (
        FORK,
        "18f8bfa26b7f49862a94c78ad402bae64299e7f8",
        "src/prime_rl/monitors/file/traces/__init__.py",
        "0c0b52b56a6c4bc17a11b8f0ada904ccbd831b06",
        ["get_trace_dir", "get_trace_stream", "get_annotations_dir", "get_index_path"],
    ),
    "config": (
        FORK,
        "18f8bfa26b7f49862a94c78ad402bae64299e7f8",
        "packages/prime-rl-configs/src/prime_rl/configs/monitors.py",
        "9cc9fa243a18230086d24a1b55ad2a5a284ed12b",
        ["FileMonitorConfig"],
    ),
    "annotations": (
        UPSTREAM,
        "f7980521ca8e17c9432aaa2b8260e16d3a87bd06",
        "src/prime_rl/orchestrator/annotations.py",
        "4ce83767d6b902cfcc84e85600e8035d9bdb39e3",
        ["stamp_arrival", "stamp_ship"],
    ),
    "trainer_annotations": (
        UPSTREAM,
        "65a185848115523d2feb2e110d04d05cfbea3a08",
        "src/prime_rl/trainer/rl/annotations.py",
        "76ae7e04001a6d1d5ae570f4bf380365ef2c4515",
        ["AnnotationWriter", "_tensor_to_floats", "_tensor_to_optional_bools"],
    ),
}

# definitions from the 559b4477 snapshot (git show), beyond what prime_rl.load_prime_rl takes
OLD_EXTRA = [
    ("src/prime_rl/orchestrator/utils.py", ["episode_env_name", "episode_group_id"]),
    (
        "src/prime_rl/orchestrator/metrics.py",
        [
            "Stat",
            "StatGroup",
            "TimingMetrics",
            "CustomMetrics",
            "TraceMetrics",
            "EpisodeMetrics",
            "TrainMetrics",
        ],
    ),
    ("src/prime_rl/utils/utils.py", ["sanitize"]),
]

SEED = 20260901
CHUNK_BYTES_STREAM = 24 * 1024  # tiny, so the stream and the orch annotations roll and seal
PRODUCER_ORCH = "orch"  # orchestrator.py: monitors.setup(producer="orch", ...)
PRODUCER_TRAINER = "trainer"


# ---------------------------------------------------------------- loading prime-rl's code
def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def read_new_source(key: str) -> str:
    repo, commit, path, blob, _ = NEW_SOURCES[key]
    if not PRIME_RL_SRC:
        sys.exit("set PRIME_RL_SRC to the folder holding <owner>+<repo>@<commit>/<path> copies")
    file = Path(PRIME_RL_SRC) / f"{repo.replace('/', '+')}@{commit}" / path
    data = file.read_bytes()
    if git_blob_id(data) != blob:
        sys.exit(f"{file}: blob {git_blob_id(data)} is not the recorded {blob}")
    return data.decode()


def take(src: str, names: list[str] | None, ns: dict, label: str) -> list[dict]:
    """exec definitions of ``src`` (text unchanged) into ``ns``; a method lands under its
    qualified name. ``names=None`` execs the whole module."""
    if names is None:
        exec(compile(src, label, "exec"), ns)
        return [{"name": "(whole module)", "lines": [1, len(src.splitlines())]}]
    tree = ast.parse(src)
    lines = src.splitlines()
    where = []
    for qual in names:
        parts = qual.split(".")
        body, node = tree.body, None
        for part in parts:
            node = next(
                n
                for n in body
                if getattr(n, "name", None) == part
                or (
                    isinstance(n, ast.Assign)
                    and any(getattr(t, "id", None) == part for t in n.targets)
                )
            )
            body = getattr(node, "body", [])
        start = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])
        seg = "\n".join(lines[start - 1 : node.end_lineno])
        code = "from __future__ import annotations\n" + textwrap.dedent(seg)
        exec(compile(code, label, "exec"), ns)
        if len(parts) > 1:
            ns[qual] = ns.pop(parts[-1])
        where.append({"name": qual, "lines": [start, node.end_lineno]})
    return where


class FixedClock:
    """Stands in for the ``time`` module in prime-rl's stamping and metrics code."""

    def __init__(self, tick) -> None:
        self.tick = tick

    def time(self) -> float:
        return self.tick()


def load_all(clock: FixedClock) -> tuple[dict, dict, list[dict]]:
    """Return (scoring namespace ``old``, monitor namespace ``new``, provenance)."""
    import orjson
    import pydantic
    import pyzstd  # noqa: F401  (chunks.py imports it)
    import torch
    import torch.distributed as dist
    import verifiers.v1 as vf

    provenance = []
    old_module = types.ModuleType("prime_rl_scoring")  # dataclasses look their module up
    sys.modules[old_module.__name__] = old_module
    old = old_module.__dict__
    old.update(
        {
            "vf": vf,
            "torch": torch,
            "asyncio": asyncio,
            "orjson": orjson,
            "Path": Path,
            "dataclass": dataclass,
            "defaultdict": defaultdict,
            "math": __import__("math"),
        }
    )
    for row in base.load_prime_rl(old):
        if row["file"] == "src/prime_rl/monitors/file.py":  # the old-layout writer: not used here
            continue
        provenance.append({"repo": UPSTREAM, "commit": base.PRIME_RL_COMMIT, **row})
    for path, names in OLD_EXTRA:
        label = f"prime-rl@{base.PRIME_RL_COMMIT[:9]}:{path}"
        for row in take(base._git_show(path), names, old, label):
            provenance.append(
                {"repo": UPSTREAM, "commit": base.PRIME_RL_COMMIT, "file": path, **row}
            )

    @dataclass
    class TrainBatch:  # orchestrator/types.py TrainBatch (fields only)
        episodes: object
        cohort: object
        samples: list

    old["TrainBatch"] = TrainBatch

    new_module = types.ModuleType("prime_rl_file_monitor")
    sys.modules[new_module.__name__] = new_module
    new = new_module.__dict__
    new.update(
        {
            "vf": vf,
            "torch": torch,
            "dist": dist,
            "Tensor": torch.Tensor,
            "asyncio": asyncio,
            "json": json,
            "math": __import__("math"),
            "shutil": shutil,
            "orjson": orjson,
            "Path": Path,
            "time": clock,  # stamp_arrival / stamp_ship / log_metrics call time.time()
            "sanitize": old["sanitize"],
            "BaseConfig": pydantic.BaseModel,  # prime_rl.utils.config.BaseConfig stand-in
            # prime_rl.utils.pathing.get_file_monitor_dir (transcribed: one line)
            "get_file_monitor_dir": lambda output_dir: output_dir / "monitors" / "file",
        }
    )
    for key in (
        "update",
        "chunks",
        "traces",
        "index",
        "config",
        "annotations",
        "trainer_annotations",
        "monitor",
    ):
        repo, commit, path, blob, names = NEW_SOURCES[key]
        label = f"{repo}@{commit[:9]}:{path}"
        src = read_new_source(key)
        if names is None:  # a whole module: its own namespace, then its names into ``new``
            module = types.ModuleType(f"prime_rl_{key}")
            sys.modules[module.__name__] = module
            rows = take(src, None, module.__dict__, label)
            new.update({k: v for k, v in module.__dict__.items() if not k.startswith("__")})
            new[f"module:{key}"] = module
        else:
            rows = take(src, names, new, label)
        for row in rows:
            provenance.append({"repo": repo, "commit": commit, "file": path, "blob": blob, **row})
    return old, new, provenance


def make_file_monitor(new: dict, config, producer: str):
    """An object of prime-rl's FileMonitor methods (the Monitor base class is not taken)."""
    methods = {name.split(".")[1]: new[name] for name in new if name.startswith("FileMonitor.")}
    cls = type("FileMonitor", (), methods)
    monitor = cls()
    monitor.config = config
    monitor.logger = logging.getLogger(f"prime_rl.file_monitor.{producer}")
    return monitor


# ---------------------------------------------------------------- cases
# Step windows: the scripted groups of tools/dumps/prime_rl.py (STEPS: 2 steps x 3 groups x 4)
# plus, for `stream`, a step-3 window in which only two episodes of a group dispatched at step 2
# have arrived when the snapshot is taken (one of them failed on its first model call).
STEP3_PARTIAL = dict(
    q="what is seven minus three ?",
    a="four",
    dispatch_step=2,
    policy=(1, 2),
    outs=["seven minus three equals four . #### four", "ERROR", "#### four", "it is five"],
    arrive=[1, 0],  # the samples that arrive (in this order); 2 and 3 are still in flight
)

MULTI_STEPS = {
    1: [
        dict(
            q="what is eight minus six ?",
            a="two",
            dispatch_step=1,
            policy=(0, 0),
            outs=[
                "eight minus six equals two . #### two",
                "#### three",
                ("i think it is three", "no , try again", "eight minus six is two . #### two"),
                "eight minus six is two",
            ],
        ),
        dict(
            q="what is one times four ?",
            a="four",
            dispatch_step=1,
            policy=(0, 0),
            outs=[
                "one times four equals four . #### four",
                "#### four",
                "ERROR",
                "#### one",
            ],
        ),
    ]
}


def _variant(steps: dict, step: int, group: int, **changes) -> dict:
    """A copy of ``steps`` with group ``group`` (0-based) of ``step`` changed: ``outs`` given
    as {sample: output}, any other key replaced."""
    out = json.loads(json.dumps(steps))
    out = {int(k): v for k, v in out.items()}
    g = out[step][group]
    for key, value in changes.items():
        if key == "outs":
            for k, o in value.items():
                g["outs"][k] = o
        else:
            g[key] = value
    return out


# step 1 group 1 sample 1 ("two plus three is five", reward 1.0) fails on its first model call;
# step 2's all-zero group goes first, so that (with this case's arrival order) it completes last
# and the one trace step 2's batch of 11 leaves in the sink is a zero-advantage one
FAILED_STEPS = _variant(base.STEPS, 1, 0, outs={1: "ERROR"})
FAILED_STEPS[2] = [FAILED_STEPS[2][2], FAILED_STEPS[2][0], FAILED_STEPS[2][1]]
# the same sample's first attempt fails, the env's retry (run_episode_with_retry) succeeds
RETRIED_STEPS = _variant(base.STEPS, 1, 0, outs={1: {"retry": "two plus three is five"}})
# an early (superseded) orch record for a trace of step 1 group 1 and of step 2 group 2
SUPERSEDED_STEPS = _variant(_variant(base.STEPS, 1, 0, supersede=True), 2, 1, supersede=True)
# batch_size 10 over groups of 4: process_batch cuts the pending traces by count, so groups
# straddle batches. Step 1's window: the 3 groups of `default` step 1 (12 traces: 10 taken, 2
# left); step 2's: its first 2 groups (2 + 8 = 10 taken); step 3's: 3 new groups (12: 10
# taken, 2 still in the sink at the snapshot).
BATCH_CUT_STEPS = {
    1: base.STEPS[1],
    2: base.STEPS[2][:2],
    3: [
        dict(
            q="what is two times four ?",
            a="eight",
            dispatch_step=3,
            policy=(2, 2),
            outs=["two times four equals eight . #### eight", "#### six", "two times four is eight",
                  "it is ten"],
        ),
        dict(
            q="what is six plus three ?",
            a="nine",
            dispatch_step=3,
            policy=(2, 2),
            outs=["#### nine", "six plus three is nine", "#### eight",
                  "six plus three equals seven"],
        ),
        dict(
            q="what is eight minus five ?",
            a="three",
            dispatch_step=3,
            policy=(2, 2),
            outs=["eight minus five is three", "#### three", "i think it is four", "#### two"],
        ),
    ],
}  # fmt: skip
CHUNK_BYTES_SUPERSEDED = 1024  # the orch annotations roll too (2-3 records a chunk)

ROUNDING = {
    "stream_records": (
        "FileMonitor.log_episodes (monitor.py@048a6e23) writes each episode on arrival as "
        "Episode.to_record(float_decimals=config.float_decimals); FileMonitorConfig.float_decimals "
        "defaults to 4 (configs/monitors.py@18f8bfa2). verifiers 0.4.0 "
        "MessageNode.serialize_record_floats (verifiers/v1/graph.py, RECORD_FLOAT_DECIMALS = 4, "
        "a pydantic field_serializer, when_used='json') applies Python round(v, 4) to each value "
        "of nodes[].logprobs, advantages, reference_logprobs, trainer_logprobs, entropies. On "
        "arrival a train episode is not scored yet (the main loop logs it before "
        "TrainSink.add), so stream records carry rounded logprobs and no advantages."
    ),
    "orch_annotations": (
        "orchestrator/annotations.py stamp_ship@f7980521 writes info.advantage "
        "(routing.scalar_advantage: mean of the trace's nonzero token advantages) and "
        "branches[k].advantages (verifiers Branch.advantages: node advantages spread over the "
        "branch's tokens, 0.0 elsewhere) as they are in memory: the float32 values of "
        "score_group's torch tensor, .tolist() to Python floats, written by orjson in shortest "
        "repr. No rounding (no float_decimals on this path, monitor.py log_annotations dumps "
        "the update as given)."
    ),
    "trainer_annotations": (
        "trainer/rl/annotations.py _tensor_to_floats@65a18584: round(float32 value, "
        "float_decimals) for trainer_logprobs and entropies (not advantages)."
    ),
    "consequence": (
        "In this layout the per-token advantages on disk equal prime-rl's float32 values exactly "
        "(rows' written.orch_stream_equals_computed). Four-decimal advantages appear only where a "
        "scored episode is serialized with to_record: the old layout's "
        "rollouts/step_N/train/effective/traces.jsonl, or a reader that re-serializes a folded "
        "record. rows' computed.node_advantages_to_record_4 hold what verifiers' serializer "
        "makes of the scored trace (|difference| <= 5e-5)."
    ),
}

FAILED_AND_RETRIED = {
    "failed_episode": (
        "The first model call fails (ProviderError 503): the call is recorded with its error and "
        "no node, Trace.record_error sets trace ok false, stop_condition provider_error, errors "
        "[ProviderError]; episode ok false, no rewards, no nodes. prime-rl's main loop stamps it "
        "(stamp_arrival: info.kind / dispatch / arrival) and monitors.log(..., 'all') writes it "
        "to the stream on arrival like any other episode ('Episode-level failures are "
        "preserved'); its index row has ok false, reward null, advantage null. TrainSink.add "
        "counts it toward its group (the group is complete at group_size arrivals); "
        "process_group's iter_trainable_traces skips trace.has_error (= not trace.ok), so "
        "GRPOAlgorithm.score_group centres the group's other traces on their own mean "
        "(3 of 4 here). The failed trace gets no advantages, is never in the batch, never "
        "shipped, never annotated."
    ),
    "retried_episode": (
        "verifiers' env reruns a failed episode when env retries allow it "
        "(verifiers/v1/env.py Env.run_slot -> verifiers/v1/utils/retries.py "
        "run_episode_with_retry; RetryConfig(max_retries=1) here, default 0). Each attempt "
        "mints a fresh episode (new episode and trace ids); only the final one reaches prime-rl, "
        "so the failed attempt is never in the stream. The final episode is ok true with the "
        "failed attempt's errors prepended to episode.errors ('success is the ok stamp, never "
        "errors-emptiness'); its trace is ok with no errors, has rewards, is trainable and "
        "counts in its group (4 of 4). Index row: ok true, num_errors 1."
    ),
}

CASES = {
    "stream": dict(
        steps=base.STEPS,
        partial=STEP3_PARTIAL,
        batch_size=12,
        chunk_bytes=CHUNK_BYTES_STREAM,
        trainer=False,
        extra_updates=False,
        finalize=False,
        description=(
            "2 training steps x 3 groups x group_size 4 (the groups of case `default`), then a "
            "step-3 window with 2 of 4 episodes of a group dispatched at step 2 arrived (one "
            "errored: ProviderError 503, no nodes, no rewards). 26 episodes in arrival order in "
            "traces/stream/ (chunk_bytes 24 KiB: sealed .zst chunks + the live .jsonl chunk, "
            "snapshot taken mid-run, finalize not called). Orchestrator annotations "
            "(producer orch) for the shipped cohort of each step: info.effective true, "
            "info.ship.step, info.advantage (mean nonzero token advantage, unrounded) and "
            "branches[0].advantages (unrounded, full length over the branch's tokens, 0.0 off "
            "the mask). Never annotated: the zero-advantage traces (step 1 group 2 all equal, "
            "step 1 group 3 two traces at the group mean, step 2 group 1 one trace, step 2 "
            "group 3 all zero; filter_zero_advantages drops them from the cohort), and both "
            "step-3 arrivals (never shipped; the errored one has no advantage at all)."
        ),
    ),
    "stream_multi_annotation": dict(
        steps=MULTI_STEPS,
        partial=None,
        batch_size=7,
        chunk_bytes=None,  # FileMonitorConfig default (5 GiB): one chunk per stream
        trainer=True,
        extra_updates=True,
        finalize=True,
        description=(
            "1 training step x 2 groups x 4, clean finish (FileMonitor.finalize seals every "
            "chunk: only .zst chunks remain). Group 2 sample 2 failed (ProviderError 503): GRPO "
            "centres the other three on a mean of 3.5/3, so their advantages are float32 values "
            "such as 0.3333332538604736, written unrounded by the orchestrator; the failed "
            "trace is never annotated. Two producers: orch (stamp_ship at step 1) and "
            "trainer (AnnotationWriter.export on the shipped samples: trainer_logprobs and "
            "entropies rounded to 4 decimals, null off the loss mask and at each sample's first "
            "position; no info). Then two more orch records written by this script to exercise "
            "the fold's newest-wins rule (prime-rl's orchestrator stamps a trace once per ship): "
            "trace A re-stamped by stamp_ship at step 2 after assign_advantages gave it a new "
            "advantage (info and per-token advantages both replaced on fold), trace B an "
            "info-only make_update with a new scalar advantage (the fold replaces "
            "info.advantage but keeps the per-token advantages of the first record)."
        ),
    ),
    "stream_failed_episode": dict(
        steps=FAILED_STEPS,
        partial=None,
        batch_size=11,
        chunk_bytes=CHUNK_BYTES_STREAM,
        trainer=False,
        extra_updates=False,
        finalize=True,
        detail=True,
        description=(
            "The groups of case `default` (2 training steps x 3 groups x group_size 4) except "
            "that step 1 group 1 sample 1 failed on its first model call (ProviderError 503): "
            "episode ok false, trace ok false, no nodes, no rewards. It is in the stream "
            "(written on arrival, index row ok false, reward null) and never annotated. GRPO "
            "scores its group over the 3 ok traces (rewards 1.5, 0.5, 0.0; float32 mean "
            "0.6666666865348816; advantages 0.8333333134651184, -0.1666666865348816, "
            "-0.6666666865348816, all three shipped at step 1). batch_size 11 (prime-rl counts "
            "trainable traces): step 1 = 11 traces, 5 shipped after filter_zero_advantages; "
            "step 2 (its groups dispatched in the order three times three, ten minus ten, one "
            "plus one) = 12 traces: process_batch takes the first 11 in insertion order, and the "
            "12th (of the all-zero group, advantage 0) stays in the sink when the run ends "
            "(rows' pending_in_sink). Clean finish (finalize): every chunk sealed."
        ),
    ),
    "stream_superseded": dict(
        steps=SUPERSEDED_STEPS,
        partial=None,
        batch_size=12,
        chunk_bytes=CHUNK_BYTES_SUPERSEDED,
        trainer=False,
        extra_updates=False,
        finalize=False,
        detail=True,
        description=(
            "The groups of case `default` (2 steps x 3 groups x 4, all episodes ok). For step 1 "
            "group 1 and step 2 group 2, when the group's third episode arrived the script wrote "
            "a script-made orch record: prime-rl's score_group run on copies of the three "
            "arrived episodes (one member still out), then prime-rl's stamp_ship for the first "
            "copied trace with a nonzero advantage (info.effective, info.ship.step, "
            "info.advantage, branches[0].advantages: all from a 3-member mean). The group's real "
            "stamp_ship at ship time comes later in the same orch stream and supersedes it "
            "(fold_trace_updates, newest wins): the folded advantages are the full-group GRPO "
            "values; a reader keeping the first record gets the 3-member values instead "
            "(rows' written.orch_records_each_folded_alone). chunk_bytes 6 KiB: the stream and "
            "the orch annotations both roll (sealed .zst chunks + a live plain chunk, snapshot "
            "mid-run, finalize not called)."
        ),
    ),
    "stream_batch_cut": dict(
        steps=BATCH_CUT_STEPS,
        partial=None,
        batch_size=10,
        chunk_bytes=CHUNK_BYTES_STREAM,
        trainer=False,
        extra_updates=False,
        finalize=False,
        detail=True,
        description=(
            "batch_size 10 with groups of 4 (all episodes ok): TrainSink.process_batch takes the "
            "first batch_size traces of pending_batch in insertion order (items[:batch_size]), "
            "whatever their group. Step 1's window (the 3 groups of `default` step 1) leaves the "
            "last 2 traces of its last-completed group in the sink: they ship at step 2 while "
            "their group-mates shipped at step 1 (one group, two ship steps). Step 2's window "
            "(`default` step 2's first 2 groups) takes exactly 10. Step 3's window (3 new groups, "
            "every reward distinct within its group) takes 10 of 12: the last 2 traces of its "
            "last-completed group, scored by GRPO with nonzero advantages, are still in the sink "
            "when the snapshot is taken (finalize not called): in the stream, never annotated "
            "(rows' pending_in_sink). Each group's advantages are computed once, over the whole "
            "group, when it completes."
        ),
    ),
    "stream_retried_episode": dict(
        steps=RETRIED_STEPS,
        partial=None,
        batch_size=12,
        chunk_bytes=CHUNK_BYTES_STREAM,
        trainer=False,
        extra_updates=False,
        finalize=True,
        detail=True,
        description=(
            "The groups of case `default` (2 steps x 3 groups x 4) except that step 1 group 1 "
            "sample 1's first attempt failed (ProviderError 503) and verifiers' "
            "run_episode_with_retry (env retries max_retries 1) reran it; the second attempt "
            "succeeded. Only the final episode is in the stream: ok true, errors [ProviderError "
            "of the failed attempt], its trace ok with rewards. It counts in its group (4 of 4, "
            "the same advantages as case `default`) and ships. The failed attempt (its own "
            "episode and trace ids) is nowhere on disk. Clean finish: every chunk sealed."
        ),
    ),
}


READER = {
    "chunks": (
        "traces/stream/ and traces/annotations/<producer>/ hold chunks NNNNN.jsonl (plain) or "
        "NNNNN.jsonl.zst (sealed, zstd seekable format: independent frames + a skippable "
        "seek-table frame; any zstd reader decompresses it whole). Order chunks by the integer "
        "before the first dot; if both forms of one number exist (mid-seal) read the plain one "
        "(chunks.py open_chunk). A line never spans chunks; the highest number is the live chunk "
        "(plain while the run is up, sealed by a clean finalize)."
    ),
    "stream_index": (
        "traces/stream.index.jsonl: one row per episode in write (= arrival) order; line = "
        "1-based position across all chunks; chunk + offset = byte offset of the record in the "
        "decompressed chunk. Written after the stream is flushed, so a row always points at a "
        "complete record; the stream may hold a torn last line past the index."
    ),
    "annotations": (
        "traces/annotations/<producer>/ chunks of update records {version, trace_id, info, "
        "branches: [{index, <stream>: [...]}]} and traces/annotations/<producer>.index.jsonl rows "
        "{trace_id, chunk, offset, info}. Producers here: orch (ship-time: info.effective, "
        "info.ship.{step,time}, info.advantage, branches[].advantages) and trainer "
        "(branches[].trainer_logprobs, entropies; info {})."
    ),
    "fold": (
        "join by trace id (traces[i].id of the episode record, not the episode id); apply the "
        "trace's updates in order (producer directory names sorted, then index order) with "
        "update.py fold_trace_updates: info deep-merged, later wins; each branch stream is cut "
        "along the branch's root-to-leaf node path by len(node.token_ids) and the values at "
        "mask==true positions replace node[<stream>] (only if that node's sampled values are all "
        "non-null). An update's absent stream leaves earlier node values in place."
    ),
    "order_guarantee": (
        "the orchestrator writes a trace's arrival record (awaited, flushed) before the trace can "
        "enter a batch, and stamp_ship after the batch is built, so within a run an annotation is "
        "always written after its trace. Readers still must join by trace id: the files are "
        "separate (a reader of a live run can see an update whose record it has not read, or a "
        "record past a torn tail), and every producer writes its own stream."
    ),
    "branch_advantages_alignment": (
        "orch branches[k].advantages = verifiers Branch.advantages of branch k (k = leaf order): "
        "one value per token of the concatenated token_ids of the root-to-leaf path (prompt "
        "scaffold included), the node's advantage at mask==true positions, 0.0 (not null) at "
        "every other position. Trainer streams hold null off the loss mask and at each "
        "sample's first position."
    ),
    "rounding": (
        "Episode.to_record(float_decimals=4): Python round(v, 4) on each value of "
        "nodes[].logprobs, advantages, reference_logprobs, trainer_logprobs, entropies "
        "(JSON dumps only). Trainer "
        "annotation streams: round(float32 value, 4). Orchestrator annotations (info.advantage, "
        "branches[].advantages) are NOT rounded: orjson writes the float32-derived doubles from "
        "torch .tolist() in full (shortest repr)."
    ),
    "field_paths": {
        "group_id": "record.group.id (index row: group)",
        "trace_id": "record.traces[i].id (index row: trace_ids)",
        "reward": (
            "sum over record.traces[i].rewards.<name> of score * weight "
            "(index row: reward = mean over reward-bearing traces)"
        ),
        "tokens": (
            "record.traces[i].nodes[j].token_ids, concatenated along parent pointers root -> leaf"
        ),
        "mask": "record.traces[i].nodes[j].mask (parallel to token_ids; true = sampled)",
        "logprobs": "record.traces[i].nodes[j].logprobs (compact over mask, 4 decimals)",
        "advantages": "after the fold: record.traces[i].nodes[j].advantages (compact over mask)",
        "scalar_advantage": "after the fold: record.traces[i].info.advantage",
        "effective": (
            "after the fold: record.traces[i].info.effective (absent = not in a shipped cohort)"
        ),
        "ship_step": "after the fold: record.traces[i].info.ship.step",
        "arrival_step": (
            "record.traces[i].info.arrival.step (dispatch: info.dispatch.step = run.work.step)"
        ),
    },
}


# ---------------------------------------------------------------- the orchestrator, stood in
async def run_case(
    case_dir: Path, spec: dict, old: dict, new: dict, tok, renderer, seed: int, clock_state
):
    import torch
    import verifiers.v1 as vf

    class MathTaskData(vf.TaskData):
        answer: str

    class MathTask(vf.Task[MathTaskData]):
        pass

    ids = base.Ids(seed)

    def clock() -> float:
        clock_state[0] += 0.125
        return clock_state[0]

    config_kwargs = {} if spec["chunk_bytes"] is None else {"chunk_bytes": spec["chunk_bytes"]}
    config = new["FileMonitorConfig"](**config_kwargs)
    orch = make_file_monitor(new, config, PRODUCER_ORCH)
    await orch.init(case_dir, producer=PRODUCER_ORCH)
    trainer = None
    if spec["trainer"]:
        trainer = make_file_monitor(new, config, PRODUCER_TRAINER)
        await trainer.init(case_dir, producer=PRODUCER_TRAINER)

    run_id = ids.hex()
    score_group = old["GRPOAlgorithm.score_group"]
    algo = SimpleNamespace(length_penalty=None)
    sink = SimpleNamespace(
        pending_batch={},
        batch_size=spec["batch_size"],
        token_batch_size=None,
        episode_by_trace={},
        pending_episodes=old["TrainEpisodes"](),
        config=SimpleNamespace(train=SimpleNamespace(filter_zero_advantages=True)),
    )
    sink._trace = lambda trace_id: next(
        tr for tr in sink.episode_by_trace[trace_id].traces if tr.id == trace_id
    )
    order_rng = random.Random(seed + 1)
    progress_step = 1
    retried: dict[str, list[str]] = {}  # final episode id -> ids of its failed attempts
    supersede_groups: set[str] = set()
    early_records: list[dict] = []

    async def early_orch_update(arrived):
        """A superseded orch record (script-made, case ``stream_superseded``): prime-rl's
        ``score_group`` run on copies of the group's first arrivals only (one member still out),
        then prime-rl's ``stamp_ship`` for the first copied trace given a nonzero advantage, at
        the current step. The real ``stamp_ship`` of the full group's cohort comes later in the
        same orch stream, so ``fold_trace_updates`` (newest wins) replaces it."""
        early = [e.model_copy(deep=True) for e in arrived]
        await score_group(algo, early)
        e, tr = next(
            (e, tr)
            for e, tr in old["iter_trainable_traces"](early)
            if old["scalar_advantage"](tr) not in (None, 0.0)
        )
        adv = old["scalar_advantage"](tr)
        tr.info["advantage"] = adv  # what TrainEpisodes.vf_episodes stamps before stamp_ship
        updates = new["stamp_ship"]([e.model_copy(update={"traces": [tr]})], progress_step)
        await orch.log_annotations(updates)
        early_records.append(
            {
                "trace_id": tr.id,
                "kind": (
                    "superseded: prime-rl stamp_ship of a copy scored by prime-rl score_group "
                    f"over the group's first {len(arrived)} arrivals (of {base.GROUP_SIZE}); "
                    "written before the real ship record"
                ),
                "step": progress_step,
                "advantage": adv,
                "node_advantages": {
                    str(i): n.advantages for i, n in enumerate(tr.nodes) if any(n.mask)
                },
                "early_group_trace_ids": [t.id for _, t in old["iter_trainable_traces"](early)],
            }
        )

    all_episodes = []  # in memory, after scoring: the truth's "computed" values
    shipped = []  # (step, cohort vf_episodes)
    idx = 0

    async def arrive(ep, pending_groups):
        """orchestrator.main_loop for one train arrival; returns a TrainBatch or None."""
        new["stamp_arrival"]([ep], "train", progress_step)
        await orch.log_episodes([ep], progress_step, "train", "all")
        all_episodes.append(ep)
        gid = ep.group.id
        pending_groups[gid].append(ep)
        if gid in supersede_groups and len(pending_groups[gid]) == base.GROUP_SIZE - 1:
            await early_orch_update(pending_groups[gid])
        if len(pending_groups[gid]) < base.GROUP_SIZE:
            return None
        group = pending_groups.pop(gid)  # TrainSink.process_group
        survivors = [tr for _, tr in old["iter_trainable_traces"](group)]
        if survivors:
            await score_group(algo, group)
        samples_by_trace = {tr.id: [base.sample_of(tr)] for tr in survivors}
        sink.pending_episodes.extend(group, sampled_trace_ids=set(samples_by_trace), admitted=True)
        sink.pending_batch.update(samples_by_trace)
        for e in group:
            for tr in e.traces:
                if tr.id in samples_by_trace:
                    sink.episode_by_trace[tr.id] = e
        if len(sink.pending_batch) >= sink.batch_size:
            return old["TrainSink.process_batch"](sink)
        return None

    async def finalize_train_batch(batch, step):
        effective = batch.cohort.effective
        cohort = effective.vf_episodes
        await orch.log_episodes(cohort, step, "train", "effective")  # no-op in the file monitor
        await orch.log_annotations(new["stamp_ship"](cohort, step))
        shipped.append((step, cohort))
        metrics: dict[str, float] = {}
        for subset, pool in (("all", batch.episodes), ("effective", effective)):
            metrics |= pool.metrics.to_wandb(prefix="train/agg", subset=subset)
            for env_name, env_pool in pool.by_env().items():
                metrics |= env_pool.metrics.to_wandb(prefix=f"train/{env_name}", subset=subset)
        await orch.log_metrics(metrics, step=step)
        if trainer is not None:
            await trainer_step(batch, cohort)

    async def trainer_step(batch, cohort):
        """The trainer's AnnotationWriter on one packed micro batch of the shipped samples;
        the packing and the model outputs are stood in."""
        writer = new["AnnotationWriter"](
            SimpleNamespace(cp_enabled=False),
            SimpleNamespace(world_size=1, rank=0),
            config.float_decimals,
        )
        rng = random.Random(seed + 7)
        token_ids, loss_mask, env_names, logprobs, entropy = [], [], [], [], []
        trace_ids, branch_indices, lengths = [], [], []
        for ep in cohort:
            for tr in ep.traces:
                for branch in tr.branches:
                    trace_ids.append(tr.id)
                    branch_indices.append(branch.index)
                    lengths.append(len(branch.token_ids))
                    token_ids += branch.token_ids
                    loss_mask += branch.sampled_mask
                    env_names += [base.ENV_NAME] * len(branch.token_ids)
                    logprobs += [
                        lp + rng.gauss(0.0, 0.02) if m else rng.uniform(-9, -1)
                        for lp, m in zip(branch.logprobs, branch.sampled_mask, strict=True)
                    ]
                    entropy += [rng.uniform(0.05, 3.0) for _ in branch.token_ids]
        pad = 3  # trailing padding folded into the last sample's length
        token_ids += [0] * pad
        loss_mask += [False] * pad
        env_names += [""] * pad
        logprobs += [0.0] * pad
        entropy += [0.0] * pad
        lengths[-1] += pad
        micro_batch = {
            "trace_ids": trace_ids,
            "branch_indices": branch_indices,
            "sequence_lengths": lengths,
            "loss_mask": torch.tensor(loss_mask),
            "env_names": env_names,
        }
        model_output = {
            "logprobs": torch.tensor(logprobs, dtype=torch.float32),
            "entropy": torch.tensor(entropy, dtype=torch.float32),
        }
        writer.export(micro_batch, model_output, {})
        new["monitors"] = SimpleNamespace(
            log_annotations=trainer.log_annotations
        )  # prime_rl.monitors
        await asyncio.to_thread(writer.flush)  # flush() calls asyncio.run(...)

    async def build_episode(g, k, idx, step):
        """One rollout of group ``g``. An output ``{"retry": text}`` is a rollout whose first
        attempt failed (ProviderError 503, as an "ERROR" output) and whose env reran it:
        verifiers' own ``run_episode_with_retry`` (env ``retries.max_retries`` 1) calls the
        attempt twice and prepends the failed attempt's errors to the final episode."""
        out = g["outs"][k]
        if not isinstance(out, dict):
            return base.make_episode(
                vf, tok, renderer, MathTask, MathTaskData, g, k, idx, ids, clock, run_id, step
            )
        from verifiers.v1.configs.retries import RetryConfig
        from verifiers.v1.utils.retries import run_episode_with_retry

        attempts = []
        for text in ("ERROR", out["retry"]):
            outs = list(g["outs"])
            outs[k] = text
            attempts.append(dict(g, outs=outs))

        async def attempt():
            episode = base.make_episode(
                vf,
                tok,
                renderer,
                MathTask,
                MathTaskData,
                attempts.pop(0),
                k,
                idx,
                ids,
                clock,
                run_id,
                step,
            )
            made_attempts.append(episode)
            return episode

        made_attempts: list = []
        episode = await run_episode_with_retry(attempt, RetryConfig(max_retries=1))
        retried[episode.id] = [a.id for a in made_attempts if a.id != episode.id]
        return episode

    pending_groups: dict[str, list] = defaultdict(list)
    for step, specs in sorted(spec["steps"].items()):
        episodes = []
        for g in specs:
            g["_gid"] = ids.uuid()
            if g.get("supersede"):
                supersede_groups.add(g["_gid"])
            for k in range(base.GROUP_SIZE):
                episodes.append(await build_episode(g, k, idx, step))
            idx += 1
        arrival = episodes[:]
        order_rng.shuffle(arrival)
        batch = None
        for ep in arrival:
            batch = await arrive(ep, pending_groups) or batch
        assert batch is not None, "the step's groups did not fill a batch"
        await finalize_train_batch(batch, progress_step)
        progress_step += 1
    if spec["partial"] is not None:
        g = dict(spec["partial"])
        g["_gid"] = ids.uuid()
        made = [
            base.make_episode(
                vf,
                tok,
                renderer,
                MathTask,
                MathTaskData,
                g,
                k,
                idx,
                ids,
                clock,
                run_id,
                progress_step,
            )
            for k in range(base.GROUP_SIZE)
        ]
        for k in g["arrive"]:
            assert await arrive(made[k], pending_groups) is None
    extra = []
    if spec["extra_updates"]:
        extra = await extra_orch_updates(orch, old, new, shipped)
    if spec["finalize"]:
        await orch.finalize()
        if trainer is not None:
            await trainer.finalize()
    else:  # a run still in progress: wait for background seals only (no finalize)
        for stream, index in orch._streams.values():
            for thread in stream._sealing:
                thread.join()
            stream.flush()
            index.flush()
        orch.file.flush()
    extra = extra + early_records
    state = {"retried": retried, "pending_in_sink": list(sink.pending_batch)}
    return all_episodes, shipped, extra, config, state


async def extra_orch_updates(orch, old, new, shipped) -> list[dict]:
    """Two more orch records for traces already stamped (script-made, see CASES)."""
    ((step, cohort),) = shipped
    traces = [(ep, tr) for ep in cohort for tr in ep.traces]
    (ep_a, tr_a), (_, tr_b) = traces[0], traces[1]
    # A: the same trace shipped again at step 2 with a new advantage
    tr_a2 = tr_a.model_copy(deep=True)
    new_adv = -0.625
    old["assign_advantages"](tr_a2, new_adv)
    tr_a2 = tr_a2.model_copy(
        update={"info": {**tr_a2.info, "advantage": old["scalar_advantage"](tr_a2)}}
    )
    ep_a2 = ep_a.model_copy(update={"traces": [tr_a2]})
    updates = new["stamp_ship"]([ep_a2], step + 1)
    # B: an info-only update
    updates.append(new["make_update"](tr_b.id, info={"advantage": 0.125}))
    await orch.log_annotations(updates)
    return [
        {
            "trace_id": tr_a.id,
            "kind": "stamp_ship at step 2 after assign_advantages",
            "advantage": new_adv,
        },
        {"trace_id": tr_b.id, "kind": "info-only make_update", "advantage": 0.125},
    ]


# ---------------------------------------------------------------- reading back, truth
def read_back(case_dir: Path, new: dict) -> tuple[list[dict], dict[str, list[dict]]]:
    """The stream through its index (prime-rl's open_chunk), and every annotation record in
    the order the dashboard folds them: producers by sorted directory name, then each
    producer's index order."""
    traces_dir = new["get_trace_dir"](case_dir)
    stream_dir = new["get_trace_stream"](case_dir)
    rows = [json.loads(line) for line in new["get_index_path"](stream_dir).read_text().splitlines()]
    episodes = []
    for row in rows:
        with new["open_chunk"](stream_dir, row["chunk"]) as f:
            f.seek(row["offset"])
            episodes.append({"row": row, "record": json.loads(f.readline())})
    updates: dict[str, list[dict]] = defaultdict(list)
    ann_dir = new["get_annotations_dir"](case_dir)
    producers = sorted(p for p in ann_dir.iterdir() if p.is_dir()) if ann_dir.is_dir() else []
    for producer in producers:
        index = new["get_index_path"](producer).read_text().splitlines()
        for n, line in enumerate(index, start=1):
            row = json.loads(line)
            with new["open_chunk"](producer, row["chunk"]) as f:
                f.seek(row["offset"])
                record = json.loads(f.readline())
            assert record["trace_id"] == row["trace_id"]
            updates[row["trace_id"]].append(
                {
                    "producer": producer.name,
                    "index_file": new["get_index_path"](producer)
                    .relative_to(traces_dir)
                    .as_posix(),
                    "index_line": n,
                    "chunk": row["chunk"],
                    "offset": row["offset"],
                    "record": record,
                }
            )
    return episodes, updates


def truth_for(
    case: str,
    case_dir: Path,
    spec: dict,
    all_eps,
    shipped,
    extra,
    config,
    old,
    new,
    provenance,
    state,
):
    import copy

    episodes, updates = read_back(case_dir, new)
    mem = {ep.id: ep for ep in all_eps}
    shipped_at = defaultdict(list)
    for step, cohort in shipped:
        for ep in cohort:
            for tr in ep.traces:
                shipped_at[tr.id].append(step)
    rows = []
    for n, item in enumerate(episodes, start=1):
        row, rec = item["row"], item["record"]
        ep = mem[rec["id"]]
        assert row["line"] == n
        for t_index, (tr_rec, tr) in enumerate(zip(rec["traces"], ep.traces, strict=True)):
            folded = copy.deepcopy(tr_rec)
            ups = updates.get(tr.id, [])
            new["fold_trace_updates"](folded, [u["record"] for u in ups])
            info = folded.get("info") or {}
            sampled_nodes = [i for i, node in enumerate(tr.nodes) if any(node.mask)]
            computed_scalar = old["scalar_advantage"](tr)
            written_orch = [u["record"] for u in ups if u["producer"] == PRODUCER_ORCH]
            computed_streams = (
                {b.index: b.advantages for b in tr.branches}
                if tr.nodes and tr.branches[0].advantages is not None
                else {}
            )
            stream_equals_computed = [
                b["advantages"] == computed_streams.get(b["index"])
                for u in written_orch
                for b in u.get("branches", [])
                if "advantages" in b
            ]
            rows.append(
                {
                    "index_line": n,
                    "chunk": row["chunk"],
                    "offset": row["offset"],
                    "episode_id": rec["id"],
                    "trace_index": t_index,
                    "trace_id": tr.id,
                    "group_id": rec["group"]["id"],
                    "env": rec["env"]["name"],
                    "ok": rec["ok"],
                    "reward": tr.reward if tr.ok else None,
                    "index_reward": row["reward"],
                    "dispatch_step": tr_rec["info"]["dispatch"]["step"],
                    "arrival_step": tr_rec["info"]["arrival"]["step"],
                    "n_nodes": len(tr_rec.get("nodes") or []),
                    "sampled_nodes": sampled_nodes,
                    "n_sampled_tokens": sum(sum(node.mask) for node in tr.nodes),
                    "computed": {
                        "scalar_advantage": computed_scalar,
                        "node_advantages": {str(i): tr.nodes[i].advantages for i in sampled_nodes}
                        if tr.nodes and tr.nodes[sampled_nodes[0]].advantages is not None
                        else None,
                        "branch_advantages": [
                            {"index": b.index, "advantages": b.advantages} for b in tr.branches
                        ]
                        if tr.nodes and tr.branches[0].advantages is not None
                        else None,
                        "zero_advantage": computed_scalar == 0.0,
                    },
                    "shipped_at_steps": shipped_at.get(tr.id, []),
                    "annotated": bool(ups),
                    "annotations": [
                        {
                            k: u[k]
                            for k in ("producer", "index_file", "index_line", "chunk", "offset")
                        }
                        for u in ups
                    ],
                    "written": {
                        "orch_records": len(written_orch),
                        "orch_info": [u.get("info") for u in written_orch],
                        "orch_stream_equals_computed": stream_equals_computed,
                    },
                    "folded": {
                        "effective": info.get("effective"),
                        "ship_step": (info.get("ship") or {}).get("step"),
                        "advantage": info.get("advantage"),
                        "node_advantages": {
                            str(i): folded["nodes"][i].get("advantages") for i in sampled_nodes
                        }
                        if ups
                        else None,
                        "node_trainer_logprobs": {
                            str(i): folded["nodes"][i].get("trainer_logprobs")
                            for i in sampled_nodes
                        }
                        if any(u["producer"] == PRODUCER_TRAINER for u in ups)
                        else None,
                    },
                }
            )
        if not ep.traces:
            rows.append(
                {"index_line": n, "episode_id": rec["id"], "trace_id": None, "annotated": False}
            )
    files = sorted(p.relative_to(case_dir).as_posix() for p in case_dir.rglob("*") if p.is_file())
    import importlib.metadata as md

    versions = {"python": sys.version.split()[0]}
    for pkg in (
        "verifiers",
        "pyzstd",
        "orjson",
        "pydantic",
        "torch",
        "renderers",
        "transformers",
        "tokenizers",
    ):
        with contextlib.suppress(md.PackageNotFoundError):
            versions[pkg] = md.version(pkg)
    out = {
        "made_by": "tools/dumps/prime_rl_stream.py",
        "framework": (
            "prime-rl file monitor, new layout (PRs #3444, #3465) with verifiers 0.4.0 episodes"
        ),
        "versions": versions,
        "case": case,
        "description": spec["description"],
        "settings": {
            "group_size": base.GROUP_SIZE,
            "batch_size": spec["batch_size"],
            "filter_zero_advantages": True,
            "algo": (
                "grpo, length_penalty None (defaults): A = R - mean(R) over the group's "
                "trainable traces, float32"
            ),
            "rewards": (
                "correct_answer (weight 1.0) + format (weight 0.5); "
                "trace.reward = sum(score * weight)"
            ),
            "file_monitor": {
                "path": str(config.path),
                "chunk_bytes": config.chunk_bytes,
                "compress": config.compress,
                "float_decimals": config.float_decimals,
            },
            "producers": sorted({u["producer"] for ups in updates.values() for u in ups}),
            "finalized": spec["finalize"],
            "advantage_provenance": (
                "NOT prime-rl's own run: the orchestrator did not run. Advantages come from "
                "prime-rl's GRPOAlgorithm.score_group / assign_advantages (source at "
                f"{base.PRIME_RL_COMMIT}, executed unchanged) on the script's groups."
            ),
            "fold_order": (
                "annotations of a trace are folded in this order: producer directories sorted "
                "by name, then the producer's index order (its write order); newest wins "
                "(update.py fold_trace_updates, dashboard/server.py annotation_index)"
            ),
            "script_made_updates": extra,
            "prime_rl_code_run_unchanged": provenance,
        },
        "reader": READER,
        "files": files,
        "rows": rows,
    }
    if spec.get("detail"):
        add_detail(out, episodes, updates, mem, shipped_at, state, old, new)
    return out


def add_detail(out, episodes, updates, mem, shipped_at, state, old, new) -> None:
    """Cases made after ``stream`` / ``stream_multi_annotation`` (their truth files are left as
    they were): errors and retries per row, the rounding, every orch record of a trace and
    which of them the fold replaced, and one summary per group."""
    import copy

    import torch

    rows = {(r["episode_id"], r.get("trace_index")): r for r in out["rows"]}
    groups: dict[str, dict] = {}
    for item in episodes:
        rec = item["record"]
        ep = mem[rec["id"]]
        trainable = {tr.id for _, tr in old["iter_trainable_traces"]([ep])}
        rounded = ep.to_record(float_decimals=4)  # verifiers' own serializer, after scoring
        for t_index, (tr_rec, tr) in enumerate(zip(rec["traces"], ep.traces, strict=True)):
            row = rows[(rec["id"], t_index)]
            sampled = row["sampled_nodes"]
            row["episode_errors"] = [e.get("type") for e in rec.get("errors") or []]
            row["trace_ok"] = tr_rec.get("ok")
            row["trace_errors"] = [e.get("type") for e in tr_rec.get("errors") or []]
            row["retried_attempts_not_in_stream"] = state["retried"].get(rec["id"], [])
            row["trainable"] = tr.id in trainable
            row["pending_in_sink"] = tr.id in state["pending_in_sink"]
            row["computed"]["node_advantages_to_record_4"] = (
                {str(i): rounded["traces"][t_index]["nodes"][i].get("advantages") for i in sampled}
                if row["computed"]["node_advantages"] is not None
                else None
            )
            orch = [u for u in updates.get(tr.id, []) if u["producer"] == PRODUCER_ORCH]
            alone = []
            for n, u in enumerate(orch):
                folded = copy.deepcopy(tr_rec)
                new["fold_trace_updates"](folded, [u["record"]])
                alone.append(
                    {
                        "index_line": u["index_line"],
                        "chunk": u["chunk"],
                        "offset": u["offset"],
                        "superseded": n < len(orch) - 1,
                        "ship_step": u["record"]["info"].get("ship", {}).get("step"),
                        "advantage": u["record"]["info"].get("advantage"),
                        "node_advantages": {
                            str(i): folded["nodes"][i].get("advantages") for i in sampled
                        },
                    }
                )
            row["written"]["orch_records_each_folded_alone"] = alone
            g = groups.setdefault(
                rec["group"]["id"],
                {
                    "group_id": rec["group"]["id"],
                    "prompt": rec["task"]["data"]["prompt"],
                    "episodes_in_stream": 0,
                    "episodes_ok": 0,
                    "episodes_failed": [],
                    "episodes_retried": [],
                    "trainable_trace_ids": [],
                    "rewards_of_trainable": [],
                    "advantage_by_trace": {},
                    "shipped_at_step_by_trace": {},
                    "zero_advantage_trace_ids": [],
                    "pending_in_sink_trace_ids": [],
                },
            )
            if t_index == 0:
                g["episodes_in_stream"] += 1
                g["episodes_ok"] += bool(rec["ok"])
                if not rec["ok"]:
                    g["episodes_failed"].append(rec["id"])
                if rec["id"] in state["retried"]:
                    g["episodes_retried"].append(rec["id"])
            if tr.id in trainable:
                g["trainable_trace_ids"].append(tr.id)
                g["rewards_of_trainable"].append(tr.reward)
                g["advantage_by_trace"][tr.id] = row["computed"]["scalar_advantage"]
                if row["computed"]["zero_advantage"]:
                    g["zero_advantage_trace_ids"].append(tr.id)
            if shipped_at.get(tr.id):
                g["shipped_at_step_by_trace"][tr.id] = shipped_at[tr.id]
            if row["pending_in_sink"]:
                g["pending_in_sink_trace_ids"].append(tr.id)
    for g in groups.values():
        rewards = g["rewards_of_trainable"]
        g["complete"] = g["episodes_in_stream"] == base.GROUP_SIZE
        g["scored"] = g["complete"] and bool(rewards)
        g["mean_reward_float32"] = (
            torch.tensor(rewards, dtype=torch.float32).mean().item() if g["scored"] else None
        )
        g["n"] = {
            "in_stream": g["episodes_in_stream"],
            "trainable_in_mean": len(g["trainable_trace_ids"]) if g["scored"] else 0,
            "shipped": len(g["shipped_at_step_by_trace"]),
        }
    out["groups"] = list(groups.values())
    out["settings"]["rounding"] = ROUNDING
    out["settings"]["failed_and_retried"] = FAILED_AND_RETRIED
    out["settings"]["verifiers_code_run_unchanged"] = [
        "verifiers/v1/episode.py Episode.to_record (float_decimals 4, the file monitor's)",
        "verifiers/v1/graph.py MessageNode.serialize_record_floats (round(v, 4) per value)",
        "verifiers/v1/trace.py Trace.record_error, record_reward, Branch.advantages, has_error",
        "verifiers/v1/utils/retries.py run_episode_with_retry, RetryState, backoff and "
        "verifiers/v1/configs/retries.py RetryConfig (only where a rollout was retried)",
    ]


def main(outdir: str, only: list[str]) -> None:
    outdir = Path(outdir).resolve()
    unknown = sorted(set(only) - set(CASES))
    if unknown:
        sys.exit(f"unknown case(s) {unknown}: the cases are {list(CASES)}")
    clock_state = [1_788_000_000.0]

    def tick() -> float:
        clock_state[0] += 0.125
        return clock_state[0]

    old, new, provenance = load_all(FixedClock(tick))
    from renderers.default import DefaultRenderer

    tok_dir = tempfile.mkdtemp(prefix="prime_tok_")
    tok = base.build_tokenizer(tok_dir)
    renderer = DefaultRenderer(tok)
    for i, (case, spec) in enumerate(CASES.items()):  # i (seed, clock) does not depend on `only`
        if only and case not in only:
            continue
        case_dir = outdir / case
        if case_dir.exists():
            shutil.rmtree(case_dir)
        case_dir.mkdir(parents=True)
        spec = dict(spec, steps=json.loads(json.dumps(spec["steps"])))  # fresh copies
        clock_state[0] = 1_788_000_000.0 + 10_000 * i
        all_eps, shipped, extra, config, state = asyncio.run(
            run_case(case_dir, spec, old, new, tok, renderer, SEED + 100 * i, clock_state)
        )
        truth = truth_for(
            case, case_dir, spec, all_eps, shipped, extra, config, old, new, provenance, state
        )
        (case_dir / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
        print(f"{case}: {len(truth['rows'])} trace rows, files {truth['files']}")
    shutil.rmtree(tok_dir, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: prime_rl_stream.py OUTDIR [CASE ...]")
    main(sys.argv[1], sys.argv[2:])
