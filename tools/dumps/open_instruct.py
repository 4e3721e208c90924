#!/usr/bin/env python3
"""Make advcli fixtures with AI2 open-instruct's own `save_traces` writer and GRPO advantage code.

WHAT RUNS UNCHANGED
    Source is read with `git show <commit>:<path>` from a bare clone of
    github.com/allenai/open-instruct (default commit:
    main @ e6c3044aa6201c8bfa4573c1b03142af599e730d, 2026-08-20,
    "Make --resume_from_checkpoint actually do something (#1823)").
    Whole top-level definitions are cut out of the files with `ast` (exact source text, decorators
    included) and exec'd into stand-in modules named like the real ones:

      open_instruct/data_types.py         ShutdownSentinel, TokenStatistics, ToolCallStats,
                                          RequestInfo, GenerationResult
      open_instruct/model_utils.py        Batch
      open_instruct/utils.py              get_git_commit, combine_reward_metrics
      open_instruct/dataset_transformation.py   GROUND_TRUTHS_KEY, VERIFIER_SOURCE_KEY,
                                          RAW_PROMPT_KEY, TOOLS_COLUMN_KEY, ENV_CONFIG_KEY,
                                          INPUT_IDS_PROMPT_KEY
      open_instruct/environments/base.py  RolloutState
      open_instruct/vllm_utils.py         CompletionOutput, RequestOutput, split_request_id,
                                          process_completed_request
      open_instruct/rl_utils.py           _rollout_executor, ROLLOUT_SHARD_SIZE, RolloutMetadata,
                                          RolloutRecord, save_rollout_metadata,
                                          _get_request_info_for_sample, _save_rollouts,
                                          save_rollouts_to_disk
      open_instruct/data_loader.py        StreamingDataLoaderConfig (its real defaults),
                                          BatchStatistics, Group, process_group,
                                          make_batch_from_groups, result_is_stale,
                                          accumulate_inference_batches,
                                          maybe_mask_truncated_completions
      open_instruct/data_loader.py        DataPreparationActor._data_preparation_loop: the
                                          statements from `scores = np.array(batch.scores)`
                                          through the `if self.config.save_traces ...:
                                          save_rollouts_to_disk(...)` block (grouping,
                                          advantage, trace write), cut out by `ast`,
                                          dedented, and exec'd once per step.

    Per step the generator does what the actor loop does at that commit:
      save_rollout_metadata(...)                       (once, before step 0, as the loop does)
      process_completed_request(...) per prompt        (vLLM output -> GenerationResult)
      result.reward_scores = <scripted rewards>        (stand-in for the verifier / reward_fn)
      accumulate_inference_batches(queue, ...)         (grouping, zero-std filtering,
                                                       batch assembly)
      maybe_mask_truncated_completions(...)
      <loop segment>                                   (advantages + save_rollouts_to_disk)

STOOD IN (not open-instruct code)
    * heavy imports (torch, vllm, ray, transformers, datasets, olmo_core, deepspeed, ...) are inert
      placeholder objects; they are only touched by annotations. Any call on one raises.
    * logger_utils.setup_logger -> logging.getLogger.
    * tokenizer: a 10-line class (eos_token_id=2, batch_decode -> "t<id>" strings); the decoded text
      never reaches the trace.  generation_config: SimpleNamespace(n=...).  dataset: a list of dicts
      with the real column keys.  inference_results_Q: queue.Queue pre-filled with the results.
    * the verifier: rewards are scripted (verification_reward=10.0 scale, as open-instruct's
      default).
    * accumulate_inference_batches is called with replenish_prompts=False /
      max_result_age_steps=None (the real loop replenishes prompts into a Ray queue; that does
      not change the batch).
      rubric_manager is None (the loop's rubric block is skipped, as with default settings).
    * rl_utils' `datetime` module is replaced by a shim whose now() returns
      2026-01-01T00:00:00+00:00, and GIT_COMMIT is set to the short commit hash (open-instruct's
      launch scripts set it from `git rev-parse --short HEAD`), so metadata files are
      reproducible.
    * rl_utils writes asynchronously on a ThreadPoolExecutor(max_workers=2). After every step the
      generator waits for that executor (shutdown(wait=True)) and puts a fresh
      ThreadPoolExecutor(max_workers=2) in its place, so line order is deterministic.
    * case `shards` only: ROLLOUT_SHARD_SIZE is set to 20 (real value: 10000) to show shard
      roll-over.

CASES (one folder each under --out; each holds only the files open-instruct wrote, plus truth.json)
    default        defaults (centered, filter_zero_std_samples=True), 2 steps x 3 prompts x 4
                   samples; one zero-variance group per step is filtered out; one empty "stop"
                   completion (-> response_tokens [eos], logprobs [NaN]).
    standard       same batch, advantage_normalization_type=standard, filter_zero_std_samples=False.
    tools          defaults, tool rollouts (tool-output tokens inside response_tokens),
                   1 step x 2 x 4.
    shards         defaults, 3 steps x 3 x 4, ROLLOUT_SHARD_SIZE=20 -> two shard files.
    n3_float_edge  standard, n=3: identical rewards 10*(1/3) with np.std 4.4e-16 (not filtered).

RERUN
    python3 -m venv /tmp/fw/open-instruct/venv &&
        /tmp/fw/open-instruct/venv/bin/pip install numpy==2.2.6 tqdm
    # a bare clone: `git clone --bare https://github.com/allenai/open-instruct`
    /tmp/fw/open-instruct/venv/bin/python open_instruct.py \
        --git-dir PATH/TO/open-instruct.git \
        --commit e6c3044aa6201c8bfa4573c1b03142af599e730d --out tests/fixtures/real/open-instruct
    Output is byte-identical across reruns (case folders are deleted and rewritten).
"""

import argparse
import ast
import datetime as _real_datetime
import hashlib
import importlib
import json
import logging
import os
import platform
import queue
import shutil
import subprocess
import sys
import textwrap
import types
from concurrent.futures import ThreadPoolExecutor

DEFAULT_GIT_DIR = os.environ.get("OPEN_INSTRUCT_GIT", "open-instruct.git")
DEFAULT_COMMIT = "e6c3044aa6201c8bfa4573c1b03142af599e730d"
FIXED_TIMESTAMP = _real_datetime.datetime(2026, 1, 1, 0, 0, 0, tzinfo=_real_datetime.timezone.utc)
REAL_IMPORT_OK = {"numpy", "tqdm"}  # plus the standard library

logging.basicConfig(level=logging.WARNING)


# --------------------------------------------------------------------------- source loading
class StandIn:
    """Inert placeholder for a heavy import; fine in annotations, raises if actually used."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return StandIn(f"{self._name}.{attr}")

    def __call__(self, *a, **k):
        raise RuntimeError(f"stand-in {self._name} was called")

    def __or__(self, other):
        return self

    __ror__ = __or__

    def __getitem__(self, item):
        return self

    def __repr__(self):
        return f"<StandIn {self._name}>"


class Source:
    def __init__(self, git_dir, commit):
        self.git_dir, self.commit = git_dir, commit
        self.texts, self.used = {}, {}

    def text(self, path):
        if path not in self.texts:
            out = subprocess.run(
                ["git", f"--git-dir={self.git_dir}", "show", f"{self.commit}:{path}"],
                check=True,
                capture_output=True,
            ).stdout
            self.texts[path] = out.decode("utf-8")
        return self.texts[path]

    def sha256(self, path):
        return hashlib.sha256(self.text(path).encode("utf-8")).hexdigest()

    def note(self, path, what, lines):
        self.used.setdefault(path, []).append({"name": what, "lines": lines})


def _node_names(node):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def _segment(lines, node):
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return start, node.end_lineno, "\n".join(lines[start - 1 : node.end_lineno]) + "\n"


MODULES = {}


def _resolve_import(node, ns, stand_ins):
    """Bind the names of one top-level import statement into ns.

    Real stdlib/numpy/tqdm where available, else stand-ins."""

    def real_ok(mod):
        top = mod.split(".")[0]
        return top in sys.stdlib_module_names or top in REAL_IMPORT_OK

    if isinstance(node, ast.Import):
        for alias in node.names:
            bind = alias.asname or alias.name.split(".")[0]
            if real_ok(alias.name):
                mod = importlib.import_module(alias.name)
                ns[bind] = (
                    mod if alias.asname else importlib.import_module(alias.name.split(".")[0])
                )
            else:
                ns[bind] = StandIn(alias.name)
                stand_ins.add(alias.name)
    else:
        mod = node.module or ""
        for alias in node.names:
            bind = alias.asname or alias.name
            if mod == "open_instruct" and alias.name in MODULES:
                ns[bind] = MODULES[alias.name]
            elif (
                mod.startswith("open_instruct.")
                and mod.split(".", 1)[1] in MODULES
                and hasattr(MODULES[mod.split(".", 1)[1]], alias.name)
            ):
                ns[bind] = getattr(MODULES[mod.split(".", 1)[1]], alias.name)
            elif real_ok(mod):
                m = importlib.import_module(mod)
                ns[bind] = (
                    getattr(m, alias.name)
                    if hasattr(m, alias.name)
                    else importlib.import_module(f"{mod}.{alias.name}")
                )
            else:
                ns[bind] = StandIn(f"{mod}.{alias.name}")
                stand_ins.add(f"{mod}.{alias.name}")


def load_module(src, short, path, names, stand_ins, extra=None):
    """exec the named top-level definitions of `path` (unchanged) into a module called
    open_instruct.<short>."""
    text = src.text(path)
    lines = text.splitlines()
    tree = ast.parse(text)
    modname = f"open_instruct.{short}"
    mod = types.ModuleType(modname)
    mod.__file__ = f"<{src.commit[:9]}:{path}>"
    sys.modules[modname] = mod
    MODULES[short] = mod
    ns = mod.__dict__
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            _resolve_import(node, ns, stand_ins)
    ns["logger"] = logging.getLogger(modname)  # stand-in for logger_utils.setup_logger(__name__)
    if extra:
        ns.update(extra)
    wanted = set(names)
    for node in tree.body:
        hit = [n for n in _node_names(node) if n in wanted]
        if not hit:
            continue
        start, end, code = _segment(lines, node)
        while True:  # names only used in annotations, defined elsewhere in the file -> stand-ins
            try:
                exec(
                    compile(code, f"{src.commit[:9]}:{path}:{start}", "exec", dont_inherit=True), ns
                )
                break
            except NameError as e:
                missing = e.name
                if missing in ns:
                    raise
                ns[missing] = StandIn(missing)
                stand_ins.add(f"{short}.{missing}")
            except AttributeError as e:  # e.g. `utils.ModelDims` in an annotation, not extracted
                obj = getattr(e, "obj", None)
                if (
                    not isinstance(obj, types.ModuleType)
                    or obj.__name__ not in sys.modules
                    or hasattr(obj, e.name)
                ):
                    raise
                setattr(obj, e.name, StandIn(f"{obj.__name__}.{e.name}"))
                stand_ins.add(f"{obj.__name__}.{e.name}")
        for n in hit:
            wanted.discard(n)
            src.note(path, n, [start, end])
    if wanted:
        raise SystemExit(f"{path} @ {src.commit}: not found: {sorted(wanted)}")
    return mod


def loop_segment(src, path="open_instruct/data_loader.py"):
    """Statements of DataPreparationActor._data_preparation_loop from
    `scores = np.array(batch.scores)` through the save_traces `if` block, as compiled code plus
    their line range."""
    text = src.text(path)
    lines = text.splitlines()
    tree = ast.parse(text)
    cls = next(
        n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "DataPreparationActor"
    )
    fn = next(
        n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_data_preparation_loop"
    )

    def bodies(node):
        for field in ("body", "orelse", "finalbody"):
            b = getattr(node, field, None)
            if isinstance(b, list) and b:
                yield b
                for child in b:
                    yield from bodies(child)

    for body in bodies(fn):
        first = last = None
        for i, st in enumerate(body):
            seg = ast.get_source_segment(text, st) or ""
            if (
                first is None
                and isinstance(st, ast.Assign)
                and seg.replace(" ", "").startswith("scores=np.array(batch.scores)")
            ):
                first = i
            if (
                first is not None
                and isinstance(st, ast.If)
                and "save_traces" in ast.unparse(st.test)
            ):
                last = i
                break
        if first is not None and last is not None:
            start, end = body[first].lineno, body[last].end_lineno
            code = textwrap.dedent("\n".join(lines[start - 1 : end])) + "\n"
            src.note(path, "DataPreparationActor._data_preparation_loop (segment)", [start, end])
            return compile(code, f"{src.commit[:9]}:{path}:{start}", "exec", dont_inherit=True), [
                start,
                end,
            ]
    raise SystemExit("loop segment not found")


# --------------------------------------------------------------------------- stand-ins
class TinyTokenizer:
    """Stand-in tokenizer: only eos_token_id / pad_token_id / batch_decode are used on this path."""

    eos_token_id = 2
    pad_token_id = 0

    def batch_decode(self, seqs, skip_special_tokens=False):
        return [" ".join(f"t{t}" for t in s) for s in seqs]


def frozen_datetime_module():
    shim = types.ModuleType("datetime")

    class _DT(_real_datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return FIXED_TIMESTAMP if tz is not None else FIXED_TIMESTAMP.replace(tzinfo=None)

    shim.datetime = _DT
    shim.timezone = _real_datetime.timezone
    return shim


# --------------------------------------------------------------------------- scripted data
EOS = TinyTokenizer.eos_token_id
TEN = 10.0  # StreamingDataLoaderConfig.verification_reward default


def prompt(index, text_ids, gt, dataset="gsm8k"):
    return {
        "index": index,
        "input_ids_prompt": [1] + text_ids,  # 1 = bos in the tiny vocab
        "ground_truth": gt,
        "dataset": dataset,
        "prompt": f"question {index}",
    }


DATASET = [
    prompt(0, [11, 12, 13], "4"),
    prompt(1, [14, 15], "7"),
    prompt(2, [16, 17, 18, 19], "12"),
    prompt(3, [20, 21], "9"),
    prompt(4, [22, 23, 24], "assert f(2) == 5", dataset="code"),
    prompt(5, [25], "1"),
    prompt(6, [26, 27], "3", dataset="code"),
    prompt(7, [28, 29, 30], "8"),
    prompt(8, [31, 32], "2"),
]


def sample(tokens, finish="stop", mask=None, rollout_state=None):
    return {"tokens": tokens, "finish": finish, "mask": mask, "rollout_state": rollout_state}


def group(index, rewards, samples):
    assert len(rewards) == len(samples)
    return {"index": index, "rewards": rewards, "samples": samples}


def plain(k, n_tokens, finish="stop"):
    toks = [40 + (k * 7 + j) % 50 for j in range(n_tokens)]
    if finish == "stop":
        toks = toks + [EOS]
    return sample(toks, finish)


# step 0 / step 1 of the default + standard cases; queue order = arrival order
STEPS_MAIN = [
    [
        group(
            0, [TEN, 0.0, 0.0, TEN], [plain(0, 3), plain(1, 4), plain(2, 5, "length"), plain(3, 2)]
        ),
        group(1, [0.0, 0.0, 0.0, 0.0], [plain(4, 3), plain(5, 3), plain(6, 2), plain(7, 4)]),
        group(
            2,
            [TEN, TEN, 0.0, TEN],
            [plain(8, 2), plain(9, 3), plain(10, 5, "length"), plain(11, 2)],
        ),
    ],
    [
        group(
            4,
            [2.5, 7.5, TEN, 0.0],
            [plain(12, 4), plain(13, 3), plain(14, 3), plain(15, 5, "length")],
        ),
        group(5, [TEN, TEN, TEN, TEN], [plain(16, 1), plain(17, 2), plain(18, 1), plain(19, 2)]),
        # sample 0: vLLM returned an empty completion with finish_reason "stop"
        group(
            3, [0.0, TEN, TEN, TEN], [sample([], "stop"), plain(20, 3), plain(21, 2), plain(22, 3)]
        ),
    ],
]


def tool_sample(k, tool_ids, ok=True):
    """model tokens, then tool-output tokens (mask 0, as vllm_utils.process_tool_tokens with
    mask_tool_use=True), then more model tokens."""
    a = [60 + k, 61 + k, 90]  # 90 = '<tool_call>'-ish token in the tiny vocab
    b = [70 + k, EOS]
    toks = a + tool_ids + b
    mask = [1] * len(a) + [0] * len(tool_ids) + [1] * len(b)
    rs = {
        "rewards": [],
        "step_count": 1,
        "done": False,
        "info": {},
        "tool_output": "4\n" if ok else "",
        "tool_error": "" if ok else "Timeout after 5s",
        "tool_runtime": 0.25 if ok else 5.0,
        "timeout": not ok,
        "tool_call_stats": [{"tool_name": "python", "success": ok, "runtime": 0.25 if ok else 5.0}],
    }
    return sample(toks, "stop", mask, rs)


STEPS_TOOLS = [
    [
        group(
            0,
            [TEN, 0.0, TEN, 0.0],
            [
                tool_sample(0, [80, 81]),
                tool_sample(1, [82], ok=False),
                tool_sample(2, [80, 81]),
                plain(30, 3),
            ],
        ),
        group(
            2,
            [0.0, 0.0, TEN, 0.0],
            [
                plain(31, 2),
                tool_sample(3, [83, 84, 85]),
                tool_sample(4, [80, 81]),
                plain(32, 4, "length"),
            ],
        ),
    ]
]

STEPS_SHARDS = [
    [
        group(
            i,
            [TEN if (i + j) % 3 == 0 else 0.0 for j in range(4)],
            [plain(10 * i + j, 2) for j in range(4)],
        )
        for i in (0, 1, 2)
    ],
    [
        group(
            i,
            [TEN if (i + j) % 2 == 0 else 0.0 for j in range(4)],
            [plain(10 * i + j, 3) for j in range(4)],
        )
        for i in (3, 4, 5)
    ],
    [
        group(
            i,
            [TEN if j < (i % 3) + 1 else 0.0 for j in range(4)],
            [plain(10 * i + j, 2) for j in range(4)],
        )
        for i in (6, 7, 8)
    ],
]

THIRD = TEN * (1 / 3)  # e.g. a code task where every sample passes 1 of 3 tests
STEPS_N3 = [
    [
        group(6, [THIRD, THIRD, THIRD], [plain(50, 3), plain(51, 3), plain(52, 4)]),
        group(4, [TEN, 0.0, THIRD], [plain(53, 2), plain(54, 3), plain(55, 3)]),
    ]
]

CASES = {
    "default": dict(
        about="open-instruct defaults at this commit (advantage_normalization_type='centered', "
        "filter_zero_std_samples=True): the all-0 and all-10 groups are filtered and never "
        "written.",
        config={},
        n=4,
        steps=STEPS_MAIN,
    ),
    "standard": dict(
        about="advantage_normalization_type='standard' ((r-mean)/(std+1e-8), population std) and "
        "filter_zero_std_samples=False so zero-variance groups are written (advantage exactly "
        "0.0).",
        config={"advantage_normalization_type": "standard", "filter_zero_std_samples": False},
        n=4,
        steps=STEPS_MAIN,
    ),
    "tools": dict(
        about="default settings, tool-using rollouts (use_tools=True): response_tokens contain "
        "the tool-output tokens; the loss mask is NOT in the trace (truth.json keeps it as "
        "`mask`).",
        config={},
        n=4,
        steps=STEPS_TOOLS,
        use_tools=True,
    ),
    "shards": dict(
        about="default settings, 3 steps; ROLLOUT_SHARD_SIZE overridden 10000 -> 20 (the only "
        "deviation) to show that a whole step goes to shard total_samples_written // "
        "ROLLOUT_SHARD_SIZE, so shard 0 holds 24 lines.",
        config={},
        n=4,
        steps=STEPS_SHARDS,
        shard_size=20,
    ),
    "n3_float_edge": dict(
        about="advantage_normalization_type='standard', default filter on, n=3: a group whose "
        "rewards are all 10*(1/3) has np.std = 4.4e-16 != 0, so it is NOT filtered and gets "
        "advantages of about -4.44e-08.",
        config={"advantage_normalization_type": "standard"},
        n=3,
        steps=STEPS_N3,
    ),
}


# --------------------------------------------------------------------------- run
def build(src):
    stand_ins = set()
    load_module(
        src,
        "data_types",
        "open_instruct/data_types.py",
        ["ShutdownSentinel", "TokenStatistics", "ToolCallStats", "RequestInfo", "GenerationResult"],
        stand_ins,
    )
    load_module(
        src,
        "dataset_transformation",
        "open_instruct/dataset_transformation.py",
        [
            "GROUND_TRUTHS_KEY",
            "VERIFIER_SOURCE_KEY",
            "RAW_PROMPT_KEY",
            "TOOLS_COLUMN_KEY",
            "ENV_CONFIG_KEY",
            "INPUT_IDS_PROMPT_KEY",
        ],
        stand_ins,
    )
    load_module(
        src,
        "utils",
        "open_instruct/utils.py",
        ["get_git_commit", "combine_reward_metrics"],
        stand_ins,
    )
    load_module(src, "model_utils", "open_instruct/model_utils.py", ["Batch"], stand_ins)
    env = load_module(
        src, "environments_base", "open_instruct/environments/base.py", ["RolloutState"], stand_ins
    )
    MODULES["environments.base"] = env
    load_module(
        src,
        "vllm_utils",
        "open_instruct/vllm_utils.py",
        ["CompletionOutput", "RequestOutput", "split_request_id", "process_completed_request"],
        stand_ins,
    )
    rl = load_module(
        src,
        "rl_utils",
        "open_instruct/rl_utils.py",
        [
            "_rollout_executor",
            "ROLLOUT_SHARD_SIZE",
            "RolloutMetadata",
            "RolloutRecord",
            "save_rollout_metadata",
            "_get_request_info_for_sample",
            "_save_rollouts",
            "save_rollouts_to_disk",
        ],
        stand_ins,
    )
    rl.datetime = frozen_datetime_module()
    load_module(
        src,
        "data_loader",
        "open_instruct/data_loader.py",
        [
            "StreamingDataLoaderConfig",
            "BatchStatistics",
            "Group",
            "process_group",
            "make_batch_from_groups",
            "result_is_stale",
            "accumulate_inference_batches",
            "maybe_mask_truncated_completions",
        ],
        stand_ins,
    )
    seg, seg_lines = loop_segment(src)
    return stand_ins, seg, seg_lines


def run_case(name, spec, src, seg, out_root):
    rl, dl, vu = MODULES["rl_utils"], MODULES["data_loader"], MODULES["vllm_utils"]
    n = spec["n"]
    case_dir = os.path.join(out_root, name)
    shutil.rmtree(case_dir, ignore_errors=True)
    os.makedirs(case_dir)
    run_name = (
        f"advcli_{name}__1__1767225600"  # grpo_fast: f"{exp_name}__{seed}__{int(time.time())}"
    )
    model_name = "advcli-fixture/no-model-stand-in"

    rl.ROLLOUT_SHARD_SIZE = spec.get("shard_size", 10000)
    real_shard = 10000
    config = dl.StreamingDataLoaderConfig(
        save_traces=True,
        rollouts_save_path=case_dir,
        num_samples_per_prompt_rollout=n,
        num_unique_prompts_rollout=len(spec["steps"][0]),
        **spec["config"],
    )
    gen_cfg = types.SimpleNamespace(n=n)
    tok = TinyTokenizer()
    self_ = types.SimpleNamespace(
        config=config, run_name=run_name, training_step=0, total_samples_written=0
    )

    # DataPreparationActor._data_preparation_loop: metadata once before the loop
    rl.save_rollout_metadata(config.rollouts_save_path, run_name, model_name)

    rows, filtered = [], []
    for step, groups in enumerate(spec["steps"]):
        self_.training_step = step
        q = queue.Queue()
        masks_by_key = {}
        for _, g in enumerate(groups):
            ex = DATASET[g["index"]]
            prompt_id = f"0_{g['index']}"
            req_id = f"train_{prompt_id}"
            outs = []
            for j, s in enumerate(g["samples"]):
                co = vu.CompletionOutput(
                    index=j,
                    token_ids=list(s["tokens"]),
                    logprobs=[round(-0.125 * (1 + (t % 5)), 3) for t in s["tokens"]],
                    finish_reason=s["finish"],
                    mask=s["mask"],
                    rollout_state=s["rollout_state"] or {},
                )
                outs.append(
                    vu.RequestOutput(
                        request_id=f"{req_id}_{j}",
                        prompt_token_ids=ex["input_ids_prompt"],
                        outputs=[co],
                    )
                )
                masks_by_key[(g["index"], j)] = (
                    s["mask"] if s["mask"] is not None else [1] * len(s["tokens"])
                )
            meta = {
                req_id: {
                    "index": g["index"],
                    "prompt_id": prompt_id,
                    "prompt_token_ids": ex["input_ids_prompt"],
                    "start_time": 100.0 + step,
                    "is_eval": False,
                    "model_step": step,
                }
            }
            result, _is_eval, _ex = vu.process_completed_request(
                req_id, outs, 101.5 + step, spec.get("use_tools", False), meta
            )
            result.reward_scores = list(g["rewards"])  # stand-in for the verifier
            result.reward_metrics = {}
            q.put(result)

        result, batch, _metrics, _stats = dl.accumulate_inference_batches(
            q,
            gen_cfg,
            num_prompts=len(groups),
            model_dims=None,
            tokenizer=tok,
            dataset=DATASET,
            base_env_config=None,
            training_step=step,
            actor_manager=None,
            active_sampling=config.active_sampling,
            filter_zero_std_samples=config.filter_zero_std_samples,
            replenish_prompts=False,
            no_resampling_pass_rate=config.no_resampling_pass_rate,
            iter_dataloader=None,
            param_prompt_Q=None,
            verbose=False,
            max_possible_score=config.max_possible_score,
            ground_truth_overrides={},
            max_result_age_steps=None,
        )
        kept = set(batch.indices) if batch is not None else set()
        for g in groups:
            if g["index"] not in kept:
                filtered.append(
                    {
                        "step": step,
                        "dataset_index": g["index"],
                        "rewards": g["rewards"],
                        "why": "filter_zero_std_samples: np.std(rewards) == 0 -> group dropped "
                        "before advantages; not in the trace",
                    }
                )
        if result is None:
            continue
        batch = dl.maybe_mask_truncated_completions(
            result, batch, config.mask_truncated_completions
        )

        ns = dict(dl.__dict__)
        ns.update(self=self_, batch=batch, result=result, step=step)
        written_before = self_.total_samples_written
        exec(seg, ns)  # open-instruct's own grouping + advantage + save_rollouts_to_disk
        advantages = ns["advantages"]
        rl._rollout_executor.shutdown(wait=True)
        rl._rollout_executor = ThreadPoolExecutor(max_workers=2)

        for i in range(len(batch.queries)):
            import numpy as np

            rows.append(
                {
                    "step": step,
                    "sample_idx": i,
                    "prompt_idx": i // n,
                    "reward": float(batch.scores[i]),
                    "advantage": float(advantages[i]),
                    "advantage_float32": float(np.float32(advantages[i])),
                    "dataset_index": batch.indices[i],
                    "shard": written_before // rl.ROLLOUT_SHARD_SIZE,
                    "mask": result.masks[i] if spec.get("use_tools") else None,
                }
            )
    if not spec.get("use_tools"):
        for r in rows:
            del r["mask"]
    return case_dir, run_name, config, rows, filtered, real_shard


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--git-dir", default=DEFAULT_GIT_DIR)
    ap.add_argument("--commit", default=DEFAULT_COMMIT)
    ap.add_argument("--out", default="tests/fixtures/real/open-instruct")
    ap.add_argument("--cases", nargs="*", default=list(CASES))
    args = ap.parse_args()

    import numpy as np

    commit = subprocess.run(
        ["git", f"--git-dir={args.git_dir}", "rev-parse", args.commit],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    subject = subprocess.run(
        ["git", f"--git-dir={args.git_dir}", "log", "-1", "--format=%cI %s", commit],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    os.environ["GIT_COMMIT"] = commit[:9]
    src = Source(args.git_dir, commit)
    stand_ins, seg, seg_lines = build(src)
    cfg_defaults = MODULES["data_loader"].StreamingDataLoaderConfig()

    for name in args.cases:
        spec = CASES[name]
        case_dir, run_name, config, rows, filtered, real_shard = run_case(
            name, spec, src, seg, args.out
        )
        files = sorted(f for f in os.listdir(case_dir))
        truth = {
            "made_by": "advcli tools/dumps/open_instruct.py: open-instruct's own code (listed in "
            "ran_unchanged) run on a scripted batch; see the script docstring for every stand-in",
            "about": spec["about"],
            "repo": "https://github.com/allenai/open-instruct",
            "commit": commit,
            "commit_info": subject,
            "ran_unchanged": {
                p: {"sha256": src.sha256(p), "definitions": v} for p, v in src.used.items()
            },
            "placeholder_imports": sorted(stand_ins),
            "stand_ins": [
                "logger_utils.setup_logger -> logging.getLogger",
                "tokenizer (TinyTokenizer)",
                "generation_config SimpleNamespace(n)",
                "dataset list[dict]",
                "verifier (scripted rewards)",
                "rl_utils.datetime (fixed now())",
                "GIT_COMMIT env",
                "ThreadPoolExecutor drained after each step",
            ]
            + (
                [f"rl_utils.ROLLOUT_SHARD_SIZE = {spec['shard_size']} (real {real_shard})"]
                if "shard_size" in spec
                else []
            ),
            "versions": {
                "python": platform.python_version(),
                "numpy": np.__version__,
                "open_instruct_pins": "python ==3.12.*, numpy 2.2.6 (uv.lock)",
            },
            "settings": {
                "advantage_normalization_type": config.advantage_normalization_type,
                "filter_zero_std_samples": config.filter_zero_std_samples,
                "num_samples_per_prompt_rollout": config.num_samples_per_prompt_rollout,
                "num_unique_prompts_rollout": config.num_unique_prompts_rollout,
                "active_sampling": config.active_sampling,
                "mask_truncated_completions": config.mask_truncated_completions,
                "mask_tool_use": config.mask_tool_use,
                "verification_reward": config.verification_reward,
                "max_possible_score": config.max_possible_score,
                "use_tools": bool(spec.get("use_tools", False)),
                "ROLLOUT_SHARD_SIZE": spec.get("shard_size", real_shard),
                "overrides_vs_defaults": {
                    "save_traces": True,
                    "rollouts_save_path": "<case folder>",
                    "num_samples_per_prompt_rollout": config.num_samples_per_prompt_rollout,
                    "num_unique_prompts_rollout": config.num_unique_prompts_rollout,
                    **spec["config"],
                },
                "defaults_at_commit": {
                    "advantage_normalization_type": cfg_defaults.advantage_normalization_type,
                    "filter_zero_std_samples": cfg_defaults.filter_zero_std_samples,
                    "num_samples_per_prompt_rollout": cfg_defaults.num_samples_per_prompt_rollout,
                },
            },
            "run_name": run_name,
            "files": files,
            "rows_note": "one row per trace line, in file order. advantage = float(advantages[i]) "
            "exactly as written (numpy float64). advantage_float32, dataset_index, shard"
            + (", mask" if spec.get("use_tools") else "")
            + " are extra facts from the run that the trace does not hold (advantage_float32 = the "
            "np.float32 cast the trainer uses, data_loader.py lookup_advantages).",
            "rows": rows,
            "filtered_groups": filtered,
        }
        with open(os.path.join(case_dir, "truth.json"), "w") as f:
            json.dump(truth, f, indent=1)
            f.write("\n")
        print(name, files, len(rows), "rows")


if __name__ == "__main__":
    main()
