"""Write a real AReaL rollout dump in its 2026 format (`version_rle`, `segments`,
`original_reward` beside `reward`), written by AReaL's own `_dump_trajectory`.

Made from AReaL github.com/areal-project/AReaL @ cbff54d645d2cd8ee1f1c358a82f3f473588433d
(main, 2026-08-22). No PyPI release has these fields (PyPI `areal` stops at 1.0.4; `version_rle` /
`segments` came with #1408 8b2d2210e, `original_reward` with #1516 95d70052f), so the code is
read from the bare git dir that the search tool's `fetch github:areal-project/AReaL` returned and
taken out of the files with `ast`, byte for byte (each function or class is compiled from its
own source lines; nothing is edited), into synthetic modules registered in `sys.modules` under
their real dotted names.

Run (framework venv, never part of CI):

    /tmp/fw/areal-new/venv/bin/python tools/dumps/areal_v2.py [OUTDIR] \
        [--areal-git-dir PATH]  (a bare clone of github.com/areal-project/AReaL; default $AREAL_GIT)

OUTDIR defaults to tests/fixtures/real/areal/v2_fields and is wiped first (AReaL appends). The venv:
`python3.11 -m venv /tmp/fw/areal-new/venv && .../pip install torch transformers tokenizers
aiofiles pillow` (CPU). Takes a few seconds. Deterministic: two runs write byte-identical files.

AReaL code run unchanged (file: names, line ranges in truth.json):
- areal/infra/workflow_executor.py: `TaskIdGenerator`; `WorkflowExecutor.__init__`,
  `_get_tokenizer`, `_get_dump_dir`, `_compute_output_versions`, `_split_trajectory_for_dump`,
  `_dump_trajectory` (only these methods are put into the class).
- areal/infra/remote_inf_engine.py: `GroupedRolloutWorkflow` (`arun_episode`,
  `_normalize_group_rewards`: the `gconfig.reward_normalization=True` group z-score).
- areal/experimental/openai/types.py: `InteractionWithTokenLogpReward` (`to_tensor_dict`, with
  `chat_template_type="concat"` for the multi-turn leaf), module `logger`.
- areal/api/io_struct.py `ModelResponse`; areal/api/workflow_api.py `RolloutWorkflow`;
  areal/utils/data.py `is_multi_modal_key`, `get_batch_size`, `_pad_cat_dim0`,
  `concat_padded_tensors`; areal/utils/hf_utils.py `load_hf_tokenizer`;
  areal/utils/stats_logger.py `StatsLogger.get_log_path`; areal/infra/workflow_context.py
  `WorkflowContext`, `_current_context`, `set`, `get`.
- Each file's top-level imports are executed as written where they resolve (torch, aiofiles,
  transformers, PIL, the synthetic areal modules); the rest are skipped (listed in truth.json).

Stand-ins (not AReaL code):
- `InferenceEngineConfig`: a namespace with the fields the code reads (fileroot, experiment_name,
  trial_name, tokenizer_path, dump_to_file=True, consumer_batch_size, max_concurrent_rollouts,
  max_head_offpolicyness). `executor.logger` is a std logger (normally set by `initialize()`).
- `RTensor.localize`: identity (no remote tensors here). `areal.utils.logging`: std logging.
- The inference engine and the agent: `ScriptedEngine.agenerate` returns `ModelResponse`s with
  scripted output tokens and per-token weight versions (what SGLang/vLLM report, including a
  generation interrupted by a weight update from version 3 to 4); `ScriptedAgentWorkflow` plays
  the OpenAI-proxy agent: it builds one `InteractionWithTokenLogpReward` per model call, links a
  second turn to its parent (as `InteractionCache` does) and returns the leaf, i.e. what the
  `concat` export returns. Rewards are scripted 1.0/0.0 "answer correct" values.
- The tokenizer: a word-level `tokenizers` model (vocab from the scripted texts) saved as a
  `PreTrainedTokenizerFast` into a temp dir, then loaded by AReaL's `load_hf_tokenizer`.
- The executor step between the workflow and the dump (workflow_executor.py L1197-1203 and
  L1222-1225, in the `_execute_workflow` closure) is re-typed here: interaction dict ->
  `concat_padded_tensors([v.to_tensor_dict() ...])` -> `await _dump_trajectory(traj, task_id,
  False)`. getpass.getuser() is pinned by LOGNAME=user so the USER folder is stable.

Batch: 2 tasks x 4 samples (GroupedRolloutWorkflow group_size 4, reward_normalization True).
Task 0 is single-turn, all tokens from weights v3 -> rollout/3/0.jsonl. Task 1: sample 0 is
multi-turn (tool call at v3, tool result as context tokens, answer at v4: `segments` and a
two-run `version_rle`), sample 1 was interrupted by the v3->v4 update (two-run `version_rle`),
samples 2-3 are v4 -> rollout/4/1.jsonl.
"""

from __future__ import annotations
import __future__

import argparse
import ast
import asyncio
import hashlib
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import types
from importlib import metadata
from pathlib import Path
from typing import Any

# dumpkit is beside this file (on sys.path already when it runs as a script, not when imported)
sys.path.insert(0, str(Path(__file__).resolve().parent))
import dumpkit  # noqa: E402

AREAL_REPO = "github.com/areal-project/AReaL"
AREAL_COMMIT = "cbff54d645d2cd8ee1f1c358a82f3f473588433d"
DEFAULT_GIT_DIR = os.environ.get("AREAL_GIT", "AReaL.git")
DEFAULT_OUT = "tests/fixtures/real/areal/v2_fields"
EXPERIMENT = "areal-new-fixture"
TRIAL = "trial0"
USER = "user"
GROUP_SIZE = 4

# (file, dotted module name, [(top-level name, methods to keep or None for all)]), in load order.
EXTRACT: list[tuple[str, str, list[tuple[str, list[str] | None]]]] = [
    ("areal/api/workflow_api.py", "areal.api.workflow_api", [("RolloutWorkflow", None)]),
    ("areal/api/io_struct.py", "areal.api.io_struct", [("ModelResponse", None)]),
    (
        "areal/infra/workflow_context.py",
        "areal.infra.workflow_context",
        [("WorkflowContext", None), ("_current_context", None), ("set", None), ("get", None)],
    ),
    (
        "areal/experimental/openai/types.py",
        "areal.experimental.openai.types",
        [("logger", None), ("InteractionWithTokenLogpReward", None)],
    ),
    (
        "areal/utils/data.py",
        "areal.utils.data",
        [
            ("is_multi_modal_key", None),
            ("get_batch_size", None),
            ("_pad_cat_dim0", None),
            ("concat_padded_tensors", None),
        ],
    ),
    ("areal/utils/hf_utils.py", "areal.utils.hf_utils", [("load_hf_tokenizer", None)]),
    (
        "areal/utils/stats_logger.py",
        "areal.utils.stats_logger",
        [("StatsLogger", ["get_log_path"])],
    ),
    (
        "areal/infra/remote_inf_engine.py",
        "areal.infra.remote_inf_engine",
        [("GroupedRolloutWorkflow", None)],
    ),
    (
        "areal/infra/workflow_executor.py",
        "areal.infra.workflow_executor",
        [
            ("TaskIdGenerator", None),
            (
                "WorkflowExecutor",
                [
                    "__init__",
                    "_get_tokenizer",
                    "_get_dump_dir",
                    "_compute_output_versions",
                    "_split_trajectory_for_dump",
                    "_dump_trajectory",
                ],
            ),
        ],
    ),
]

REEXPORTS = {
    "areal.api.workflow_api": {"areal.api": ["RolloutWorkflow"]},
    "areal.api.io_struct": {"areal.api": ["ModelResponse"]},
    "areal.experimental.openai.types": {
        "areal.experimental.openai": ["InteractionWithTokenLogpReward"]
    },
}

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "[UNK]"]
SYSTEM = "<|im_start|>system You are a helpful assistant . <|im_end|>"


def chat_prompt(question: str) -> str:
    return f"{SYSTEM} <|im_start|>user {question} <|im_end|> <|im_start|>assistant"


# Per task: question, then per sample a list of turns. A turn is
# (context text before the call or "" for the first, [(text, weight version), ...], reward).
TASKS: list[dict[str, Any]] = [
    {
        "question": "What is 7 + 5 ?",
        "samples": [
            [("", [("7 + 5 = 12 . The answer is 12 . <|im_end|>", 3)], 1.0)],
            [("", [("7 + 5 = 13 . The answer is 13 . <|im_end|>", 3)], 0.0)],
            [("", [("The answer is 12 . <|im_end|>", 3)], 1.0)],
            [("", [("Adding 5 to 7 gives 12 . The answer is 12 . <|im_end|>", 3)], 1.0)],
        ],
    },
    {
        "question": "What is 23 * 4 ? Use the calculator .",
        "samples": [
            [
                ("", [("<tool_call> calculator 23 * 4 </tool_call> <|im_end|>", 3)], None),
                (
                    "<|im_start|>tool 92 <|im_end|> <|im_start|>assistant",
                    [("The calculator says 92 . The answer is 92 . <|im_end|>", 4)],
                    1.0,
                ),
            ],
            [("", [("23 * 4 = 92", 3), (". The answer is 92 . <|im_end|>", 4)], 1.0)],
            [("", [("23 * 4 = 82 . The answer is 82 . <|im_end|>", 4)], 0.0)],
            [("", [("The answer is 27 . <|im_end|>", 4)], 0.0)],
        ],
    },
]


def node_name(node: ast.stmt) -> str | None:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    return None


def first_line(node: ast.stmt) -> int:
    decos = getattr(node, "decorator_list", [])
    return min([node.lineno] + [d.lineno for d in decos])


def segment(lines: list[str], start: int, end: int) -> str:
    return "".join(lines[start - 1 : end])


def one_by_one(node: ast.ImportFrom | ast.Import) -> list[str]:
    out = []
    for alias in node.names:
        asname = f" as {alias.asname}" if alias.asname else ""
        if isinstance(node, ast.ImportFrom):
            out.append(f"from {'.' * node.level}{node.module or ''} import {alias.name}{asname}")
        else:
            out.append(f"import {alias.name}{asname}")
    return out


def placeholder(name: str, path: str) -> type:
    """Stand-in for a name whose import was skipped (used only in annotations)."""

    def fail(*args, **kwargs):
        raise RuntimeError(f"{name} (import skipped in {path}) was used")

    return type(name, (), {"__init__": fail, "__getattr__": fail})


def ensure_package(name: str) -> types.ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    mod = types.ModuleType(name)
    mod.__path__ = []
    sys.modules[name] = mod
    if "." in name:
        parent, _, child = name.rpartition(".")
        setattr(ensure_package(parent), child, mod)
    return mod


def install_standins() -> None:
    std_logging = types.ModuleType("areal.utils.logging")
    std_logging.getLogger = lambda name, *args, **kwargs: logging.getLogger(name)
    ensure_package("areal.utils")
    sys.modules["areal.utils.logging"] = std_logging
    sys.modules["areal.utils"].logging = std_logging

    class RTensor:
        """Stand-in: no remote tensors here, so `localize` returns its input."""

        @staticmethod
        def localize(obj: Any) -> Any:
            return obj

    rtensor = types.ModuleType("areal.infra.rpc.rtensor")
    rtensor.RTensor = RTensor
    ensure_package("areal.infra.rpc")
    sys.modules["areal.infra.rpc.rtensor"] = rtensor
    sys.modules["areal.infra.rpc"].rtensor = rtensor


def load_module(git_dir: str, path: str, dotted: str, wanted, report: dict) -> types.ModuleType:
    src = dumpkit.git_file(git_dir, AREAL_COMMIT, path)
    lines = src.splitlines(keepends=True)
    tree = ast.parse(src)
    package, _, leaf = dotted.rpartition(".")
    mod = types.ModuleType(dotted)
    mod.__file__ = f"<AReaL@{AREAL_COMMIT[:9]}:{path}>"
    mod.__package__ = package
    sys.modules[dotted] = mod
    setattr(ensure_package(package), leaf, mod)
    ns = mod.__dict__
    future = any(isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in tree.body[:3])
    flags = __future__.annotations.compiler_flag if future else 0
    ran_imports, skipped_imports, skipped = [], [], []
    for node in tree.body:
        if not isinstance(node, ast.Import | ast.ImportFrom) or (
            isinstance(node, ast.ImportFrom) and node.module == "__future__"
        ):
            continue
        stmt = segment(lines, node.lineno, node.end_lineno)
        try:
            exec(compile(stmt, mod.__file__, "exec", flags, dont_inherit=True), ns)
            ran_imports.append(f"L{node.lineno}")
        except ImportError:
            for single in one_by_one(node):
                try:
                    exec(compile(single, mod.__file__, "exec", flags, dont_inherit=True), ns)
                    ran_imports.append(f"L{node.lineno}: {single}")
                except ImportError:
                    skipped_imports.append(f"L{node.lineno}: {single}")
                    skipped.append(single.split()[-1].split(".")[0])
    for bound in skipped:
        ns.setdefault(bound, placeholder(bound, path))
    by_name = {node_name(n): n for n in tree.body if node_name(n)}
    ran = []
    for name, methods in wanted:
        node = by_name[name]
        start, end = first_line(node), node.end_lineno
        if methods is None:
            code = segment(lines, start, end)
            ran.append({"name": name, "lines": [start, end]})
        else:
            parts = [segment(lines, start, node.lineno)]
            ranges = []
            members = {m.name: m for m in node.body if hasattr(m, "name")}
            for meth in methods:
                m = members[meth]
                ms, me = first_line(m), m.end_lineno
                parts.append(segment(lines, ms, me))
                ranges.append({"name": f"{name}.{meth}", "lines": [ms, me]})
            code = "".join(parts)
            ran.extend(ranges)
        exec(compile(code, mod.__file__, "exec", flags, dont_inherit=True), ns)
    report[path] = {
        "module": dotted,
        "git_blob": dumpkit.git_blob(git_dir, AREAL_COMMIT, path),
        "sha256": hashlib.sha256(src.encode()).hexdigest(),
        "ran_unchanged": ran,
        "imports_run": ran_imports,
        "imports_skipped": skipped_imports,
    }
    return mod


def build_tokenizer(tmp: str) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    texts = []
    for task in TASKS:
        texts.append(chat_prompt(task["question"]))
        for sample in task["samples"]:
            for context, pieces, _ in sample:
                texts += [context] + [text for text, _ in pieces]
    split_special = "|".join(re.escape(t) for t in SPECIAL)
    words = {w for text in texts for w in re.sub(split_special, " ", text).split()}
    vocab = {tok: i for i, tok in enumerate(SPECIAL + sorted(words - set(SPECIAL)))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(SPECIAL)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="[UNK]",
        additional_special_tokens=SPECIAL[1:2] + SPECIAL[3:5],
    )
    path = os.path.join(tmp, "tokenizer")
    fast.save_pretrained(path)
    return path


class ScriptedEngine:
    """Stand-in inference engine: returns the scripted completion of each call."""

    def __init__(self, model_response_cls, tokenizer, version: int):
        self.model_response_cls = model_response_cls
        self.tokenizer = tokenizer
        self.version = version

    def get_version(self) -> int:
        return self.version

    async def agenerate(self, input_tokens: list[int], pieces: list[tuple[str, int]]):
        out, versions = [], []
        for text, version in pieces:
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            out += ids
            versions += [version] * len(ids)
        logprobs = [round(-0.05 * (1 + (k * 7) % 5), 2) for k in range(len(out))]
        return self.model_response_cls(
            input_tokens=list(input_tokens),
            output_tokens=out,
            output_logprobs=logprobs,
            output_versions=versions,
            stop_reason="stop",
            tokenizer=self.tokenizer,
        )


def make_agent_workflow(base_cls, interaction_cls, workflow_context, tokenizer):
    class ScriptedAgentWorkflow(base_cls):
        """Stand-in agent (OpenAI-proxy style): one interaction per model call."""

        async def arun_episode(self, engine, data):
            ctx = workflow_context.get()
            turns = data["samples"][ctx.sample_idx]
            tokens = tokenizer.encode(chat_prompt(data["question"]), add_special_tokens=False)
            parent, leaf = None, None
            for k, (context, pieces, reward) in enumerate(turns):
                if context:
                    tokens = tokens + tokenizer.encode(context, add_special_tokens=False)
                resp = await engine.agenerate(tokens, pieces)
                leaf = interaction_cls(
                    model_response=resp,
                    reward=reward,
                    parent=parent,
                    chat_template_type="concat",
                )
                leaf.interaction_id = f"chatcmpl-t{ctx.task_id}-s{ctx.sample_idx}-{k}"
                tokens = resp.input_tokens + resp.output_tokens
                parent = leaf
            return {leaf.interaction_id: leaf}

    return ScriptedAgentWorkflow


async def run(out_dir: Path, git_dir: str) -> dict:
    report: dict[str, Any] = {}
    install_standins()
    mods = {}
    for path, dotted, wanted in EXTRACT:
        mods[dotted] = load_module(git_dir, path, dotted, wanted, report)
        # Package re-exports (areal/api/__init__.py, areal/experimental/openai/__init__.py),
        # set before the next file's imports run.
        for package, names in REEXPORTS.get(dotted, {}).items():
            for name in names:
                setattr(ensure_package(package), name, getattr(mods[dotted], name))
    wctx = mods["areal.infra.workflow_context"]
    interaction_cls = mods["areal.experimental.openai.types"].InteractionWithTokenLogpReward
    executor_mod = mods["areal.infra.workflow_executor"]
    concat_padded_tensors = mods["areal.utils.data"].concat_padded_tensors
    grouped_cls = mods["areal.infra.remote_inf_engine"].GroupedRolloutWorkflow

    with tempfile.TemporaryDirectory() as tmp:
        config = types.SimpleNamespace(
            experiment_name=EXPERIMENT,
            trial_name=TRIAL,
            fileroot=str(out_dir),
            tokenizer_path=build_tokenizer(tmp),
            dump_to_file=True,
            consumer_batch_size=GROUP_SIZE,
            max_concurrent_rollouts=None,
            max_head_offpolicyness=1,
        )
        engine = ScriptedEngine(mods["areal.api.io_struct"].ModelResponse, None, version=4)
        executor = executor_mod.WorkflowExecutor(config, engine)
        executor.logger = logging.getLogger("WorkflowExecutor")
        tokenizer = executor._get_tokenizer()
        engine.tokenizer = tokenizer
        agent = make_agent_workflow(
            mods["areal.api.workflow_api"].RolloutWorkflow, interaction_cls, wctx, tokenizer
        )()
        assert issubclass(grouped_cls, mods["areal.api.workflow_api"].RolloutWorkflow)
        workflow = grouped_cls(
            agent, GROUP_SIZE, logging.getLogger("GroupedRolloutWorkflow"), True, False
        )
        for task in TASKS:
            task_id = executor._task_id_generator.next()
            wctx.set(wctx.WorkflowContext(is_eval=False, task_id=task_id))
            traj = await workflow.arun_episode(engine, task)
            # workflow_executor.py L1197-1203 and L1222-1225 (in the _execute_workflow closure):
            if isinstance(traj, dict) and all(
                isinstance(v, interaction_cls) for v in traj.values()
            ):
                traj = concat_padded_tensors([v.to_tensor_dict() for v in traj.values()])
            ok, reason = await executor._dump_trajectory(traj, task_id, False)
            if not ok:
                raise RuntimeError(f"_dump_trajectory failed for task {task_id}: {reason}")
    report["tokenizer_vocab_size"] = len(tokenizer)
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=DEFAULT_OUT)
    ap.add_argument("--areal-git-dir", default=DEFAULT_GIT_DIR)
    args = ap.parse_args()
    out_dir = Path(args.out).resolve()
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    os.environ["LOGNAME"] = USER
    logging.basicConfig(level=logging.WARNING)
    report = asyncio.run(run(out_dir, args.areal_git_dir))

    vocab_size = report.pop("tokenizer_vocab_size")
    rollout = out_dir / "logs" / USER / EXPERIMENT / TRIAL / "rollout"
    rows, files = [], []
    for path in sorted(rollout.rglob("*.jsonl")):
        rel = path.relative_to(out_dir).as_posix()
        files.append(rel)
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            n_gen = sum(n for _, n in rec["version_rle"])
            if "segments" in rec:
                segs = rec["segments"]
                assert sum(seg["len"] for seg in segs) == rec["seqlen"]
                assert sum(seg["len"] for seg in segs if seg["role"] == "gen") == n_gen
            else:
                assert n_gen == rec["seqlen"] - rec["prompt_len"]
            rows.append(
                {
                    "file": rel,
                    "version_folder": path.parent.name,
                    "task_id": rec["task_id"],
                    "sample_idx": rec["sample_idx"],
                    "reward": rec["reward"],
                    "original_reward": rec.get("original_reward"),
                    "version_rle": rec["version_rle"],
                    "has_segments": "segments" in rec,
                }
            )
    # Independent check of the normalisation (float64, population std) against AReaL's result.
    for task_id, task in enumerate(TASKS):
        raw = [sample[-1][2] for sample in task["samples"]]
        mean = sum(raw) / len(raw)
        std = (sum((r - mean) ** 2 for r in raw) / len(raw)) ** 0.5
        got = [r for r in rows if r["task_id"] == task_id]
        assert [r["original_reward"] for r in got] == raw
        for row, r in zip(got, raw, strict=True):
            assert abs(row["reward"] - (r - mean) / (std + 1e-8)) < 1e-6
    libs = ["torch", "transformers", "tokenizers", "aiofiles", "pillow", "numpy"]
    truth = {
        "made_by": "tools/dumps/areal_v2.py (AReaL's own code, extracted with ast, unchanged)",
        "repo": AREAL_REPO,
        "commit": AREAL_COMMIT,
        "commit_date": "2026-08-22",
        "fields_from": {
            "version_rle, segments": "#1408 8b2d2210e (2026-06-19)",
            "original_reward": "#1516 95d70052f (2026-07-24)",
        },
        "fileroot": ".",
        "path_pattern": "FILEROOT/logs/USER/EXPERIMENT/TRIAL/rollout/{version}/{task_id}.jsonl",
        "user": USER,
        "experiment_name": EXPERIMENT,
        "trial_name": TRIAL,
        "files": files,
        "ran_unchanged": report,
        "standins": [
            "InferenceEngineConfig: SimpleNamespace of the fields read (dump_to_file=True)",
            "executor.logger: std logging (normally set in WorkflowExecutor.initialize)",
            "RTensor.localize: identity; areal.utils.logging: std logging",
            "ScriptedEngine.agenerate: scripted ModelResponse tokens and per-token versions",
            "ScriptedAgentWorkflow: one InteractionWithTokenLogpReward per call, 2nd turn "
            "parented to the 1st (chat_template_type='concat'), returns the leaf",
            "rewards: scripted 1.0/0.0 correctness; tokenizer: word-level `tokenizers` model "
            "as PreTrainedTokenizerFast, loaded by load_hf_tokenizer",
            "executor glue retyped: L1197-1203 (concat_padded_tensors of to_tensor_dict) and "
            "L1222-1225 (`await self._dump_trajectory(traj, task_id, is_eval=False)`)",
            "getpass.getuser() pinned via LOGNAME=user",
        ],
        "reward_normalization": {
            "by": "GroupedRolloutWorkflow._normalize_group_rewards (remote_inf_engine.py), "
            "run unchanged: (r - mean) / (std(unbiased=False) + 1e-8), float32, per group of 4",
            "gconfig": {"n_samples": GROUP_SIZE, "reward_normalization": True},
        },
        "versions": {
            "python": sys.version.split()[0],
            **{lib: metadata.version(lib) for lib in libs},
        },
        "tokenizer": f"word-level, {vocab_size} tokens, eos <|im_end|>, pad <|endoftext|>",
        "rows": rows,
    }
    (out_dir / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")


if __name__ == "__main__":
    main()
