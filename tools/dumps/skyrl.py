"""Write real SkyRL 0.4.0 eval dumps (`dumped_evals/global_step_{N}_evals/{data_source}.jsonl`).

Made with SkyRL 0.4.0 (PyPI `skyrl`, the wheel `skyrl-0.4.0-py3-none-any.whl`, sha256
7f95dad660ddc388ca135a1faf61bcbd8010a39e3d4fef92c62959c0353c6ee9, which ships `skyrl/`,
`skyrl-gym/skyrl_gym/` and `skyrl-agent/`), torch 2.13.0+cpu, transformers 5.16.1, tokenizers
0.23.3, datasets 5.2.0, torchdata 0.11.0, numpy 2.4.6, omegaconf 2.4.0, loguru 0.7.3, jaxtyping
0.3.11, cloudpathlib 0.26.0, Python 3.11, on CPU, offline, no Ray, no vLLM, no model download.

The wheel says Python >= 3.12, but every file of it compiles on 3.11; what fails on 3.11 is the
package `__init__`s of `skyrl.backends` and `skyrl.train.generators`, which import the Tinker
pydantic models (pydantic refuses a `typing.TypedDict` field before 3.12), and every module that
imports `ray` at its top. So: the wheel's modules that import cleanly are imported as they are
(with the package `__init__`s of `skyrl.backends`, `skyrl.train.generators` and
`skyrl.train.utils` (which imports Ray) replaced by empty packages over the same folders), and
the functions of modules that import Ray are taken out of their files with `ast` and run
unchanged.

Get it and run it (from the repository root, never as part of CI):

    pip download --no-deps --python-version 3.12 --only-binary=:all: skyrl==0.4.0 -d /tmp/fw/skyrl
    python3.11 -m venv /tmp/fw/skyrl-venv
    /tmp/fw/skyrl-venv/bin/pip install torch==2.13.0 numpy==2.4.6 transformers==5.16.1 \
        tokenizers==0.23.3 datasets torchdata loguru omegaconf pyyaml jaxtyping tqdm jinja2 \
        cloudpathlib
    /tmp/fw/skyrl-venv/bin/python tools/dumps/skyrl.py OUTDIR \
        --wheel /tmp/fw/skyrl/skyrl-0.4.0-py3-none-any.whl [--fixtures DIR] [--cases a,b]

The wheel is unzipped into OUTDIR/src (never into this repository). Each case runs in
OUTDIR/<case>/ with `trainer.export_path` = OUTDIR/<case>/export; SkyRL's own writer puts
`dumped_evals/global_step_{1,2}_evals/{data_source}.jsonl` and `aggregated_results.jsonl` there,
and that `dumped_evals/` folder is copied unchanged to `tests/fixtures/real/skyrl/<case>/` with a
`truth.json` beside it. Seeded and scripted (no sampling, no clock in the files), so two runs
write identical files.

What is SkyRL's own code, unchanged:
- imported from the unzipped wheel: `SkyRLTrainConfig.from_cli_overrides` (skyrl/train/config/
  config.py; every default not named in a case's `overrides` is SkyRL's), `PromptDataset`
  (skyrl/train/dataset/dataset.py: reads the parquet files of `data.val_data`, `uid` = row index),
  `SkyRLGymGenerator` (skyrl/train/generators/skyrl_gym_generator.py: `generate` →
  `agent_loop` or `generate_batched`, chat templating, multi-turn token bookkeeping,
  `_build_per_token_rewards`), `prepare_generator_input`, `concatenate_generator_outputs`,
  `get_metrics_from_generator_output` (generators/utils.py), `get_sampling_params_for_backend`
  (backends/skyrl_train/inference_servers/engine_utils.py), `pretty_print_example`,
  `convert_prompts_responses_to_batch_tensors`, `compute_prompt_mini_batch_boundaries`,
  `compute_prompt_boundaries` (train/dataset/preprocess.py), `TrainingInputBatch`,
  `pad_training_input_batch` (backends/skyrl_train/training_batch.py), and skyrl_gym (`make`,
  `register`, `BaseTextEnv`, the `gsm8k` and `gsm8k_multi_turn` environments and
  `skyrl_gym.envs.gsm8k.utils.extract_solution`);
- taken out of their files with `ast` (the parsed nodes compiled as they are, under the file's
  own name, after the file's own import lines, each run where its module imports here):
  skyrl/train/evaluate.py: `_EvalRows`, `_rows_for_output`, `_scored_view`, `evaluate` (the
  function `RayPPOTrainer.eval` calls); skyrl/train/utils/trainer_utils.py:
  `sanitize_data_source`, `calculate_per_dataset_metrics`, `dump_per_dataset_eval_results`,
  `validate_generator_output`, `_validate_per_token_side_channels`, `_validate_step_wise_fields`,
  `zero_variance_filter`, `build_dataloader`; skyrl/train/utils/utils.py: `Timer`;
  skyrl/backends/skyrl_train/utils/ppo_utils.py: `BaseFunctionRegistry`, `AdvantageEstimator`,
  `AdvantageEstimatorRegistry`, `register_advantage_estimator`, `masked_var`, `masked_whiten`,
  the five estimators (`compute_grpo_outcome_advantage`, `compute_rloo_outcome_advantage`,
  `compute_gae_advantage_return`, `compute_reinforce_plus_plus_outcome_advantage`,
  `compute_maxrl_advantage`) and `compute_advantages_and_returns`; skyrl/train/trainer.py: the
  methods `RayPPOTrainer.postprocess_generator_output`, `convert_to_training_input` and
  `compute_advantages_and_returns`; skyrl/backends/skyrl_train/inference_servers/utils.py:
  `_uses_lora_weight_sync` (the one name `SkyRLTrainConfig.__post_init__` imports from that file,
  whose other imports need vLLM).
- The eval call follows `RayPPOTrainer.eval` (trainer.py L236-260): `evaluate(eval_dataloader,
  generator, cfg, global_step, tokenizer)` with the dataloader from `build_dataloader(cfg,
  eval_dataset, is_train=False)`, at global steps 1 and 2 (`trainer.eval_interval=1`, no eval
  before training).

truth.json's advantages: the eval dump is never trained on, and SkyRL computes no advantage for
eval rows. truth.json holds what SkyRL's trainer would compute if that step's eval rows were its
training batch: SkyRL's `postprocess_generator_output` (response-level rewards → a per-token list
with the reward on the last token; token-level lists kept), `convert_to_training_input` (padded
tensors; `trainer.train_batch_size` and `policy_mini_batch_size` set to the step's prompt count
and `generator.n_samples_per_prompt` to the eval n, which that method checks), then
`compute_advantages_and_returns` (→ ppo_utils.compute_advantages_and_returns →
`compute_grpo_outcome_advantage` with SkyRL's defaults: `index` = the uids, `epsilon` = its
default 1e-6, `grpo_norm_by_std` = `trainer.algorithm.grpo_norm_by_std`). The uid is the eval
dataset's row index (`PromptDataset.__getitem__`), which the dump does not carry: within a step it
coincides with the `input_prompt` text except where two dataset rows share a prompt (case
`repeated_prompt`) and in step-wise rows (case `step_wise`, one row per turn, each with its own
prompt). Each row also has, for contrast, SkyRL's GRPO with `grpo_norm_by_std=false`, SkyRL's RLOO,
and SkyRL's GRPO grouped by `input_prompt` text (what the dump alone identifies).

Stand-ins (not SkyRL's code) and why:
- the inference engine (vLLM in SkyRL): `ScriptedEngine.generate` returns scripted responses (the
  table of each case below, by uid, repetition and turn), tokenized with the tokenizer plus the
  eos token, or cut at `max_tokens` with stop reason "length" as vLLM does; its logprobs are
  placeholders (-0.5 per token: the dump does not hold them);
- `graded_math` (cases default, singleton, token_rewards, repeated_prompt) is a skyrl_gym
  `BaseTextEnv` of ours, registered with `skyrl_gym.register` as a user's custom environment is:
  1.0 for the right answer after "####" (SkyRL's gsm8k `extract_solution`, strict), 0.25 for a
  wrong one after "####", 0.5 for the right last number without "####", else 0.0; binary,
  multi_turn and step_wise use SkyRL's own `gsm8k` / `gsm8k_multi_turn` environments;
- `concatenate_generator_outputs` imports `validate_generator_output` from trainer_utils when it
  runs: `sys.modules["skyrl.train.utils.trainer_utils"]` is the module holding the functions taken
  from that file; the trainer methods get the module of those taken from ppo_utils as
  `ppo_utils`; `Timer` gets `time` and loguru's `logger`, the two names it uses;
- wrappers around `dump_per_dataset_eval_results` and `calculate_per_dataset_metrics` keep a copy
  of the arguments `evaluate` hands them (the concatenated generator output and the uids), then
  call SkyRL's function;
- Ray: ppo_utils' namespace gets an object whose `is_initialized()` is False (the registry then
  stays process-local, as SkyRL's own docstring says) and whose `remote` returns its argument;
- the trainer object for the three methods carries only `cfg`, `tokenizer`, `all_metrics` and a
  `dispatch` whose `get_lcm_dp_size()` is 1 (no padding rows); `values` is None (no critic);
- the generator module's clock (`time.monotonic`, used only for the trajectory timing metrics in
  aggregated_results.jsonl) is `SteppedClock`, 1/1024 s a call, so those numbers repeat; with
  `environment.skyrl_gym.max_env_workers=0` (a config key: environment steps run in the event
  loop, not in a thread pool) the calls come in a fixed order;
- `data.dataloader.num_workers=0` (a config key: the same batches, no spawned workers) and
  `PromptDataset(num_workers=1)` (the length filter without a spawned pool; the trainer passes 8);
- the tokenizer is built in code, never downloaded: a word-level `tokenizers` model over the words
  used here plus `<pad> <unk> <|im_start|> <|im_end|>` (eos = `<|im_end|>`, as Qwen's), a
  two-line ChatML-like chat template; no model runs (the engine is scripted).
"""

from __future__ import annotations

import os
import sys

# This file is called skyrl.py: never let it shadow the real `skyrl` package (its folder comes
# off sys.path once dumpkit, beside it, is imported).
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import dumpkit  # noqa: E402

dumpkit.leave_folder(__file__)

import argparse  # noqa: E402
import ast  # noqa: E402
import asyncio  # noqa: E402
import copy  # noqa: E402
import hashlib  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import types  # noqa: E402
import zipfile  # noqa: E402
from pathlib import Path  # noqa: E402

dumpkit.offline_on_cpu()
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

SKYRL_VERSION = "0.4.0"
WHEEL_SHA256 = "7f95dad660ddc388ca135a1faf61bcbd8010a39e3d4fef92c62959c0353c6ee9"
SEED = 2604
STEPS = (1, 2)
SOURCES = ("openai/gsm8k", "synthetic/arith")
OPS = {"plus": lambda a, b: a + b, "minus": lambda a, b: a - b, "times": lambda a, b: a * b}
# (data_source, a, op, b): the eval set, in dataset order (the uid is the row index)
QUESTIONS = [
    ("openai/gsm8k", 3, "plus", 5),
    ("openai/gsm8k", 7, "minus", 4),
    ("openai/gsm8k", 6, "times", 2),
    ("synthetic/arith", 9, "plus", 6),
    ("synthetic/arith", 8, "minus", 3),
    ("synthetic/arith", 4, "times", 4),
]
# the same prompt text in two rows of one data source, and again in the other data source
REPEATED_QUESTIONS = [
    ("openai/gsm8k", 3, "plus", 5),
    ("openai/gsm8k", 7, "minus", 4),
    ("openai/gsm8k", 3, "plus", 5),
    ("synthetic/arith", 3, "plus", 5),
    ("synthetic/arith", 8, "minus", 3),
]
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
SPECIALS = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
MAX_TOKENS = 16

# Outcome kinds a scripted response takes (text in `response_text`)
#   right: right answer after ####      bare: right number, no ####
#   wrong: wrong number after ####      none: no number      long: cut at max_tokens
S = {  # per case: step -> per uid -> per repetition -> outcome (or, multi-turn, per-turn list)
    "float": {
        1: [
            ["right", "bare", "wrong", "none"],
            ["bare", "bare", "bare", "bare"],  # zero variance (0.5 x4)
            ["right", "right", "long", "wrong"],
            ["wrong", "none", "none", "bare"],
            ["right", "right", "right", "bare"],
            ["none", "wrong", "long", "right"],
        ],
        2: [
            ["right", "right", "bare", "wrong"],
            ["right", "wrong", "none", "bare"],
            ["right", "right", "right", "right"],  # zero variance (1.0 x4)
            ["bare", "wrong", "right", "none"],
            ["wrong", "wrong", "none", "right"],
            ["bare", "long", "right", "wrong"],
        ],
    },
    "binary": {
        1: [
            ["right", "wrong", "none", "right"],
            ["right", "right", "right", "right"],  # all 1
            ["none", "wrong", "bare", "long"],  # all 0 (0, 0.0, 0, 0: ints and floats)
            ["right", "none", "none", "none"],
            ["wrong", "right", "right", "bare"],
            ["right", "right", "right", "none"],
        ],
        2: [
            ["right", "right", "wrong", "right"],
            ["none", "none", "none", "none"],  # all 0
            ["right", "wrong", "right", "none"],
            ["right", "right", "right", "right"],  # all 1
            ["bare", "right", "none", "wrong"],
            ["none", "right", "none", "none"],
        ],
    },
    "singleton": {
        1: [["right"], ["bare"], ["wrong"], ["none"], ["long"], ["right"]],
        2: [["bare"], ["right"], ["right"], ["wrong"], ["none"], ["bare"]],
    },
    "repeated": {
        1: [
            ["right", "bare", "wrong", "none"],
            ["right", "right", "none", "bare"],
            ["wrong", "wrong", "wrong", "right"],
            ["none", "none", "bare", "bare"],
            ["right", "wrong", "bare", "none"],
        ],
        2: [
            ["right", "right", "right", "bare"],
            ["none", "wrong", "right", "right"],
            ["bare", "bare", "bare", "bare"],
            ["right", "none", "wrong", "right"],
            ["wrong", "none", "right", "right"],
        ],
    },
    "turns": {  # gsm8k_multi_turn, max_turns 3: a correct answer ends the episode
        1: [
            [
                ["right"],
                ["wrong", "right"],
                ["none", "wrong", "wrong"],
                ["wrong", "wrong", "right"],
            ],
            [["wrong", "wrong", "wrong"], ["right"], ["right"], ["none", "right"]],
            [["none", "none", "none"], ["wrong", "right"], ["right"], ["bare", "wrong", "none"]],
            [["right"], ["right"], ["wrong", "wrong", "right"], ["right"]],
            [["wrong", "none", "right"], ["none", "none", "none"], ["right"], ["wrong", "right"]],
            [["right"], ["none", "right"], ["wrong", "wrong", "wrong"], ["right"]],
        ],
        2: [
            [["right"], ["right"], ["wrong", "right"], ["none", "none", "right"]],
            [["wrong", "right"], ["right"], ["none", "wrong", "none"], ["right"]],
            [["right"], ["right"], ["right"], ["right"]],
            [["none", "wrong", "wrong"], ["wrong", "right"], ["right"], ["none", "right"]],
            [["right"], ["wrong", "none", "wrong"], ["none", "right"], ["right"]],
            [["wrong", "wrong", "right"], ["right"], ["none", "none", "none"], ["right"]],
        ],
    },
}

COMMON_OVERRIDES = [
    "trainer.eval_interval=1",
    "trainer.eval_before_train=false",
    "generator.eval_n_samples_per_prompt=4",
    "generator.eval_sampling_params.temperature=1.0",
    f"generator.eval_sampling_params.max_generate_length={MAX_TOKENS}",
    f"generator.sampling_params.max_generate_length={MAX_TOKENS}",
    "data.dataloader.num_workers=0",
    "environment.skyrl_gym.max_env_workers=0",
]

CASES = {
    "default": {
        "questions": "QUESTIONS",
        "script": "float",
        "env_class": "graded_math",
        "overrides": ["generator.batched=true", "environment.env_class=graded_math"],
        "description": (
            "Two eval steps (global_step_1_evals, global_step_2_evals) of the same 6 prompts "
            "(3 per data source, 2 data sources: openai/gsm8k -> openai_gsm8k.jsonl, "
            "synthetic/arith -> synthetic_arith.jsonl), generator.eval_n_samples_per_prompt=4, "
            "rewards 0 / 0.25 / 0.5 / 1.0 from a custom environment. generator.batched=true, as "
            "SkyRL's examples/train/gsm8k/run_gsm8k.sh sets it: generate_batched keeps the "
            "environment's float reward, so 'score' is a JSON number. (With SkyRL's default "
            "generator.batched=false 'score' is a per-token list: case token_rewards.) One group "
            "per step has zero variance (0.5 x4 in step 1, 1.0 x4 in step 2); three responses "
            "(two in step 1, one in step 2) are cut at max_tokens (stop_reason 'length')."
        ),
    },
    "singleton": {
        "questions": "QUESTIONS",
        "script": "singleton",
        "env_class": "graded_math",
        "overrides": [
            "generator.batched=true",
            "environment.env_class=graded_math",
            "generator.eval_n_samples_per_prompt=1",
        ],
        "description": (
            "As default but generator.eval_n_samples_per_prompt=1 (SkyRL's own default for "
            "eval): every group has one row. SkyRL's compute_grpo_outcome_advantage gives a "
            "group of one mean 0 and std 1, so its advantage is score / (1 + 1e-6), not 0. "
            "(Zero-variance groups of 4: cases default and binary.)"
        ),
    },
    "token_rewards": {
        "questions": "QUESTIONS",
        "script": "float",
        "env_class": "graded_math",
        "overrides": ["environment.env_class=graded_math"],
        "description": (
            "SkyRL's default generator (generator.batched=false, use_conversation_multi_turn="
            "true, no custom chat template): agent_loop's _build_per_token_rewards returns a list "
            "of token rewards, so 'score' in the dump is a JSON list of floats as long as the "
            "response, 0.0 except the reward at the last generated token. Same scripted "
            "responses as default. SkyRL's GRPO sums the list."
        ),
    },
    "binary": {
        "questions": "QUESTIONS",
        "script": "binary",
        "env_class": "gsm8k",
        "overrides": ["generator.batched=true"],
        "description": (
            "SkyRL's own gsm8k environment (skyrl_gym/envs/gsm8k: compute_score, strict '#### N' "
            "match), generator.batched=true as in run_gsm8k.sh: rewards are 1.0 (right), 0.0 "
            "(format_score: a wrong number after ####) or the int 0 (no '#### N' found), so "
            "'score' is written as 1.0, 0.0 or 0. Groups of all 1 and all 0 in both steps."
        ),
    },
    "multi_turn": {
        "questions": "QUESTIONS",
        "script": "turns",
        "env_class": "gsm8k_multi_turn",
        "overrides": ["generator.max_turns=3"],
        "description": (
            "SkyRL's gsm8k_multi_turn environment, generator.max_turns=3, default generator "
            "(batched=false): per-turn rewards (1.0 right, 0.2/3 for a wrong number after "
            "####, 0 otherwise; a right answer ends the episode) are placed at each assistant "
            "turn's last token, so 'score' is a list with up to 3 non-zero entries and "
            "'output_response' holds every turn with the environment's user messages between "
            "them. SkyRL's GRPO sums the list."
        ),
    },
    "step_wise": {
        "questions": "QUESTIONS",
        "script": "turns",
        "env_class": "gsm8k_multi_turn",
        "overrides": ["generator.max_turns=3", "generator.step_wise_trajectories=true"],
        "description": (
            "As multi_turn with generator.step_wise_trajectories=true: the dump keeps one row "
            "per turn (evaluate: 'The dump keeps every row (every step when step-wise)'), each "
            "with that turn's whole history as 'input_prompt' and that turn's response plus the "
            "next observation as 'output_response'; 'score' is that turn's per-token list. SkyRL "
            "trains step-wise rows with the GRPO of each trajectory's LAST step (grouped by uid "
            "over last steps only) broadcast to all its steps; per-step rewards are ignored. "
            "Grouping by input_prompt puts only first turns together; later turns are groups of "
            "one."
        ),
    },
    "repeated_prompt": {
        "questions": "REPEATED_QUESTIONS",
        "script": "repeated",
        "env_class": "graded_math",
        "overrides": ["generator.batched=true", "environment.env_class=graded_math"],
        "description": (
            "Five dataset rows, three of them with the same prompt text ('3 plus 5'): rows 0 and 2 "
            "in openai/gsm8k, row 3 in synthetic/arith. SkyRL's uid is the dataset row index, so "
            "it has three groups of 4 where the dump (no uid) shows 12 rows of one prompt text in "
            "a step, 8 of them in one file."
        ),
    },
}


# ---------------------------------------------------------------------------------------------
# Loading SkyRL


def unpack_wheel(wheel: str, dest: Path) -> Path:
    digest = hashlib.sha256(Path(wheel).read_bytes()).hexdigest()
    if digest != WHEEL_SHA256:
        raise SystemExit(
            f"{wheel}: sha256 {digest}, expected {WHEEL_SHA256} (skyrl {SKYRL_VERSION})"
        )
    if dest.exists():
        shutil.rmtree(dest)
    with zipfile.ZipFile(wheel) as z:
        z.extractall(dest)
    return dest


TAKEN: dict[str, list[str]] = {}
IMPORTS_SKIPPED: dict[str, list[str]] = {}


def _name_of(node):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        t = node.targets[0]
        return t.id if isinstance(t, ast.Name) else None
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    return None


def _run_imports(tree, path: str, ns: dict, rel: str) -> None:
    """The file's own top-level import lines, one imported name at a time; one whose module does
    not import here (Ray, vLLM, the Ray workers) is skipped and recorded."""
    for node in tree.body:
        nodes = []
        if isinstance(node, ast.Import):
            nodes = [ast.Import(names=[a]) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            nodes = [ast.ImportFrom(module=node.module, names=[a], level=0) for a in node.names]
        elif isinstance(node, ast.Try) and any(
            isinstance(n, (ast.Import, ast.ImportFrom)) for n in node.body
        ):
            nodes = [node]
        for n in nodes:
            ast.copy_location(n, node)
            try:
                exec(compile(ast.Module(body=[n], type_ignores=[]), path, "exec"), ns)
            except Exception as e:  # noqa: BLE001
                what = ast.unparse(n).splitlines()[0]
                IMPORTS_SKIPPED.setdefault(rel, []).append(f"{what}  ({type(e).__name__})")


def _module_for(rel: str, path: str) -> dict:
    """A module of its own (dataclasses look the class's module up in sys.modules), named after
    the file it is taken from with a `skyrl_taken.` prefix."""
    name = "skyrl_taken." + rel[:-3].replace("/", ".")
    mod = sys.modules.get(name) or types.ModuleType(name)
    mod.__file__ = path
    sys.modules[name] = mod
    return mod.__dict__


def take(src: Path, rel: str, names, given=None, imports=True) -> dict:
    """Compile the top-level definitions `names` of SkyRL's file `rel` as they are, in a namespace
    holding the file's own imports (where they import) and then `given`."""
    path = str(src / rel)
    tree = ast.parse(Path(path).read_text(), filename=path)
    ns = _module_for(rel, path)
    if imports:
        _run_imports(tree, path, ns, rel)
    ns.update(given or {})
    picked = [n for n in tree.body if _name_of(n) in names]
    missing = set(names) - {_name_of(n) for n in picked}
    if missing:
        raise SystemExit(f"{rel}: not found: {sorted(missing)}")
    exec(compile(ast.Module(body=picked, type_ignores=[]), path, "exec"), ns)
    TAKEN.setdefault(rel, []).extend(names)
    return ns


def take_methods(src: Path, rel: str, cls: str, names, given=None) -> dict:
    """The methods `names` of class `cls` in `rel`, compiled as they are (decorators kept)."""
    path = str(src / rel)
    tree = ast.parse(Path(path).read_text(), filename=path)
    ns = _module_for(rel, path)
    _run_imports(tree, path, ns, rel)
    ns.update(given or {})
    (klass,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    picked = [n for n in klass.body if getattr(n, "name", None) in names]
    if len(picked) != len(names):
        raise SystemExit(f"{rel}:{cls}: not all of {names} found")
    exec(compile(ast.Module(body=picked, type_ignores=[]), path, "exec"), ns)
    TAKEN.setdefault(rel, []).extend(f"{cls}.{n}" for n in names)
    return {n: ns[n] for n in names}


def source_of(src: Path, rel: str, name: str) -> dict:
    path = src / rel
    text = path.read_text()
    for node in ast.parse(text).body:
        if _name_of(node) == name:
            start = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])
            lines = text.splitlines()[start - 1 : node.end_lineno]
            return {"file": rel, "lines": [start, node.end_lineno], "source": "\n".join(lines)}
    raise KeyError(name)


class _NoRay:
    """Ray, not running: the registries of ppo_utils then stay process-local."""

    @staticmethod
    def is_initialized():
        return False

    @staticmethod
    def remote(obj):
        return obj


def load_skyrl(src: Path) -> dict:
    sys.path[:0] = [str(src), str(src / "skyrl-gym")]
    # Empty packages over the real folders: their __init__s import the Tinker pydantic models
    # (skyrl.backends, skyrl.train.generators) or Ray (skyrl.train.utils), none of which the
    # code run here uses.
    for pkg in ("skyrl.backends", "skyrl.train.generators", "skyrl.train.utils"):
        mod = types.ModuleType(pkg)
        mod.__path__ = [str(src.joinpath(*pkg.split(".")))]
        sys.modules[pkg] = mod
    # SkyRLTrainConfig.__post_init__ imports `_uses_lora_weight_sync` from a module whose other
    # imports need vLLM: that one function, taken from its file.
    name = "skyrl.backends.skyrl_train.inference_servers.utils"
    lora = take(
        src,
        "skyrl/backends/skyrl_train/inference_servers/utils.py",
        ["_uses_lora_weight_sync"],
        imports=False,
    )
    mod = types.ModuleType(name)
    mod._uses_lora_weight_sync = lora["_uses_lora_weight_sync"]
    sys.modules[name] = mod

    import skyrl_gym
    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch
    from skyrl.train.config.config import SkyRLTrainConfig
    from skyrl.train.dataset.dataset import PromptDataset
    from skyrl.train.generators.skyrl_gym_generator import SkyRLGymGenerator

    k = {}
    k["skyrl_gym"] = skyrl_gym
    k["SkyRLTrainConfig"] = SkyRLTrainConfig
    k["PromptDataset"] = PromptDataset
    k["SkyRLGymGenerator"] = SkyRLGymGenerator
    k["TrainingInputBatch"] = TrainingInputBatch

    # Timer uses `time` and loguru's `logger`; the rest of utils.py's imports need Ray.
    utils = take(
        src,
        "skyrl/train/utils/utils.py",
        ["Timer"],
        given={"time": __import__("time"), "logger": logger},
        imports=False,
    )
    tu = take(
        src,
        "skyrl/train/utils/trainer_utils.py",
        [
            "sanitize_data_source",
            "calculate_per_dataset_metrics",
            "dump_per_dataset_eval_results",
            "validate_generator_output",
            "_validate_per_token_side_channels",
            "_validate_step_wise_fields",
            "zero_variance_filter",
            "build_dataloader",
        ],
    )
    k["trainer_utils"] = tu
    # concatenate_generator_outputs imports validate_generator_output from this module lazily:
    # it finds the module of the functions taken from it.
    sys.modules["skyrl.train.utils.trainer_utils"] = sys.modules[tu["__name__"]]
    ppo = take(
        src,
        "skyrl/backends/skyrl_train/utils/ppo_utils.py",
        [
            "BaseFunctionRegistry",
            "AdvantageEstimator",
            "AdvantageEstimatorRegistry",
            "register_advantage_estimator",
            "masked_var",
            "masked_whiten",
            "compute_reinforce_plus_plus_outcome_advantage",
            "compute_rloo_outcome_advantage",
            "compute_gae_advantage_return",
            "compute_grpo_outcome_advantage",
            "compute_maxrl_advantage",
            "compute_advantages_and_returns",
        ],
        given={"ray": _NoRay},
    )
    k["ppo_ns"] = ppo
    ppo_mod = types.ModuleType("skyrl.backends.skyrl_train.utils.ppo_utils")
    ppo_mod.__dict__.update({n: v for n, v in ppo.items() if not n.startswith("__")})

    captured: dict = {}

    def recording_dump(dump_dir_path, tokenizer, concat_generator_outputs, *args, **kwargs):
        captured["concat"] = copy.deepcopy(concat_generator_outputs)
        captured["data_sources"] = list(args[0])
        captured["dir"] = str(dump_dir_path)
        return tu["dump_per_dataset_eval_results"](
            dump_dir_path, tokenizer, concat_generator_outputs, *args, **kwargs
        )

    def recording_metrics(concat_generator_outputs, concat_uids, *args, **kwargs):
        captured["scored_uids"] = list(concat_uids)
        return tu["calculate_per_dataset_metrics"](
            concat_generator_outputs, concat_uids, *args, **kwargs
        )

    k["captured"] = captured
    ev = take(
        src,
        "skyrl/train/evaluate.py",
        ["_EvalRows", "_rows_for_output", "_scored_view", "evaluate"],
        given={
            "Timer": utils["Timer"],
            "calculate_per_dataset_metrics": recording_metrics,
            "dump_per_dataset_eval_results": recording_dump,
            "validate_generator_output": tu["validate_generator_output"],
        },
    )
    k["evaluate"] = ev["evaluate"]
    k["trainer_methods"] = take_methods(
        src,
        "skyrl/train/trainer.py",
        "RayPPOTrainer",
        [
            "postprocess_generator_output",
            "convert_to_training_input",
            "compute_advantages_and_returns",
        ],
        given={
            "ppo_utils": ppo_mod,
            "Timer": utils["Timer"],
            "zero_variance_filter": tu["zero_variance_filter"],
            "validate_generator_output": tu["validate_generator_output"],
        },
    )
    return k


# ---------------------------------------------------------------------------------------------
# Stand-ins: tokenizer, environment, inference engine


def question_text(a, op, b):
    return f"What is {a} {op} {b} ? {INSTRUCTION}"


def answer_of(a, op, b):
    return OPS[op](a, b)


def response_text(kind, a, op, b):
    ans = answer_of(a, op, b)
    if kind == "right":
        return f"{a} {op} {b} is {ans} . #### {ans}"
    if kind == "bare":
        return f"{a} {op} {b} is {ans} ."
    if kind == "wrong":
        return f"{a} {op} {b} is {ans + 1} . #### {ans + 1}"
    if kind == "none":
        return "hmm let me check it again"
    if kind == "long":
        return "so i think " + "wait let me check it again " * 3 + f"#### {ans}"
    raise ValueError(kind)


def build_tokenizer(path: Path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    pre = pre_tokenizers.Whitespace()
    texts = [
        "system user assistant You are a helpful assistant . I am a user .",
        INSTRUCTION,
        "Please provide your step-by-step reasoning, and also include a tentative numeric answer "
        "at the end in the exact format: '#### ANSWER'.",
        "Now provide only the final numeric answer in the exact format: '#### ANSWER'.",
    ]
    for qs in (QUESTIONS, REPEATED_QUESTIONS):
        for _, a, op, b in qs:
            texts.append(question_text(a, op, b))
            texts += [
                response_text(k, a, op, b) for k in ("right", "bare", "wrong", "none", "long")
            ]
    words = []
    for t in texts:
        words += [w for w, _ in pre.pre_tokenize_str(t)]
    vocab = {tok: i for i, tok in enumerate(SPECIALS + sorted(set(words)))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<|im_end|>",
        unk_token="<unk>",
        additional_special_tokens=["<|im_start|>"],
        padding_side="left",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(path))
    return AutoTokenizer.from_pretrained(str(path))


def define_graded_env(skyrl_gym):
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
    from skyrl_gym.envs.gsm8k.utils import extract_solution

    class GradedMathEnv(BaseTextEnv):
        """A user's custom environment: 1.0 right after ####, 0.25 wrong after ####, 0.5 right
        last number without ####, else 0.0 (one turn)."""

        def __init__(self, env_config=None, extras=None):
            super().__init__()
            self.ground_truth = (extras or {})["reward_spec"]["ground_truth"]

        def step(self, action):
            strict = extract_solution(action, method="strict")
            if strict is not None:
                reward = 1.0 if strict == self.ground_truth else 0.25
            else:
                reward = (
                    0.5 if extract_solution(action, method="flexible") == self.ground_truth else 0.0
                )
            return BaseTextEnvStepOutput(observations=[], reward=reward, done=True, metadata={})

    if "graded_math" not in skyrl_gym.envs.registration.registry:
        skyrl_gym.register(id="graded_math", entry_point=GradedMathEnv)


class ScriptedEngine:
    """Stands in for SkyRL's inference engine client (vLLM): the response to a request is the
    case's scripted outcome for (uid, repetition, turn), as token ids plus eos, or cut at
    `max_tokens` (stop reason "length")."""

    weight_version = None

    def __init__(self, tokenizer, questions, script, n):
        self.tok = tokenizer
        self.questions = questions
        self.script = script
        self.n = n
        self.step = None
        self.turns: dict = {}

    def new_step(self, step):
        self.step = step
        self.turns = {}

    def _outcome(self, uid, rep, turn):
        o = self.script[self.step][uid][rep]
        return o[turn] if isinstance(o, list) else o

    async def generate(self, engine_input, model=None):
        prompts = engine_input["prompt_token_ids"]
        sessions = engine_input.get("session_ids")
        max_tokens = engine_input["sampling_params"]["max_tokens"]
        out = {"responses": [], "response_ids": [], "stop_reasons": [], "response_logprobs": []}
        for k in range(len(prompts)):
            if sessions:  # agent_loop: session id = f"{uid}_{repetition}", one request per turn
                uid, rep = (int(x) for x in str(sessions[k]).rsplit("_", 1))
                turn = self.turns.get(sessions[k], 0)
                self.turns[sessions[k]] = turn + 1
            else:  # generate_batched: prepare_generator_input's order, n repetitions per uid
                uid, rep, turn = k // self.n, k % self.n, 0
            _, a, op, b = self.questions[uid]
            ids = self.tok.encode(response_text(self._outcome(uid, rep, turn), a, op, b),
                                  add_special_tokens=False)  # fmt: skip
            if len(ids) + 1 > max_tokens:
                ids, stop = ids[:max_tokens], "length"
            else:
                ids, stop = ids + [self.tok.eos_token_id], "stop"
            out["responses"].append(self.tok.decode(ids, skip_special_tokens=True))
            out["response_ids"].append(ids)
            out["stop_reasons"].append(stop)
            out["response_logprobs"].append([-0.5] * len(ids))
        return out

    async def finish_session(self, session_id):
        return None


class SteppedClock:
    """The generator's `time` module: `monotonic()` advances 1/1024 s a call (a binary fraction,
    so a difference of two readings is exact wherever the clock stands), so the trajectory timing
    metrics in aggregated_results.jsonl repeat from run to run. With
    environment.skyrl_gym.max_env_workers=0 and this engine no agent loop waits on anything, so
    each trajectory's readings are consecutive, whatever order asyncio starts the loops in
    (tqdm's gather goes through a set)."""

    def __init__(self):
        self.ticks = 0

    def monotonic(self):
        self.ticks += 1
        return self.ticks / 1024.0


class StandInTrainer:
    """Carries what RayPPOTrainer's three methods read."""

    class _Dispatch:
        @staticmethod
        def get_lcm_dp_size():
            return 1

    def __init__(self, methods, cfg, tokenizer):
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.all_metrics = {}
        self.dispatch = self._Dispatch()
        self._m = methods

    def postprocess_generator_output(self, *a, **kw):
        return self._m["postprocess_generator_output"](self, *a, **kw)

    def convert_to_training_input(self, *a, **kw):
        return self._m["convert_to_training_input"](self, *a, **kw)

    def compute_advantages_and_returns(self, *a, **kw):
        return self._m["compute_advantages_and_returns"](self, *a, **kw)


# ---------------------------------------------------------------------------------------------
# One case


def write_dataset(questions, env_class, path: Path) -> list[str]:
    """SkyRL's data format (examples/train/gsm8k/gsm8k_dataset.py): one parquet file per data
    source, in `data.val_data` order."""
    import datasets

    files = []
    for source in dict.fromkeys(s for s, *_ in questions):
        rows = []
        for i, (s, a, op, b) in enumerate(questions):
            if s != source:
                continue
            q = question_text(a, op, b)
            rows.append(
                {
                    "data_source": source,
                    "prompt": [{"role": "user", "content": q}],
                    "env_class": env_class,
                    "reward_spec": {"method": "rule", "ground_truth": str(answer_of(a, op, b))},
                    "extra_info": {"split": "test", "index": i, "question": q},
                }
            )
        f = path / f"{source.replace('/', '_')}.parquet"
        datasets.Dataset.from_list(rows).to_parquet(str(f))
        files.append(str(f))
    return files


def advantages_of(trainer, k, generator_output, uids, prompts, cfg):
    """SkyRL's trainer path on one step's eval rows, as if they were its training batch."""
    import numpy as np

    go = copy.deepcopy(generator_output)
    go, uids = trainer.postprocess_generator_output(go, list(uids))
    batch = trainer.convert_to_training_input(go, uids)
    batch["values"] = None  # no critic: what fwd_logprobs_values_reward sets
    batch = trainer.compute_advantages_and_returns(batch)
    mask = batch["response_mask"].bool()
    sums = batch["rewards"].sum(dim=-1)
    adv = [float(batch["advantages"][i][mask[i]][0]) for i in range(len(uids))]
    # SkyRL's GRPO over the same rows grouped by what the dump shows: the input_prompt text
    by_text, _ = k["ppo_ns"]["compute_grpo_outcome_advantage"](
        token_level_rewards=batch["rewards"].clone(),
        response_mask=batch["response_mask"],
        index=np.array(prompts),
        grpo_norm_by_std=cfg.trainer.algorithm.grpo_norm_by_std,
    )
    return {
        "score_sum": [float(x) for x in sums],
        "advantage": adv,
        "by_text": [float(by_text[i][mask[i]][0]) for i in range(len(uids))],
    }


def run_case(case, k, outdir: Path, src: Path):
    import numpy as np
    import torch

    spec = CASES[case]
    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    work = outdir / case
    if work.exists():
        shutil.rmtree(work)
    (work / "data").mkdir(parents=True)
    questions = globals()[spec["questions"]]
    tokenizer = build_tokenizer(work / "tokenizer")
    val_files = write_dataset(questions, spec["env_class"], work / "data")
    export = work / "export"
    overrides = COMMON_OVERRIDES + spec["overrides"]
    cfg = k["SkyRLTrainConfig"].from_cli_overrides(
        overrides
        + [
            f"trainer.export_path={export}",
            f"data.val_data={json.dumps(val_files)}",
            f"data.train_data={json.dumps(val_files)}",
        ]
    )
    n = cfg.generator.eval_n_samples_per_prompt
    define_graded_env(k["skyrl_gym"])
    eval_dataset = k["PromptDataset"](
        datasets=cfg.data.val_data,
        tokenizer=tokenizer,
        max_prompt_length=cfg.trainer.max_prompt_length,
        num_workers=1,
    )
    assert len(eval_dataset) == len(questions)
    dataloader = k["trainer_utils"]["build_dataloader"](cfg, eval_dataset, is_train=False)
    engine = ScriptedEngine(tokenizer, questions, S[spec["script"]], n)
    generator = k["SkyRLGymGenerator"](
        generator_cfg=cfg.generator,
        skyrl_gym_cfg=cfg.environment.skyrl_gym,
        inference_engine_client=engine,
        tokenizer=tokenizer,
    )
    sys.modules[k["SkyRLGymGenerator"].__module__].time = SteppedClock()
    # the trainer-side config for truth.json: this step's eval rows as a training batch
    tcfg = copy.deepcopy(cfg)
    tcfg.trainer.train_batch_size = len(questions)
    tcfg.trainer.policy_mini_batch_size = len(questions)
    tcfg.generator.n_samples_per_prompt = n
    variants = {
        "grpo": tcfg,
        "grpo_norm_by_std_false": _with(tcfg, grpo_norm_by_std=False),
        "rloo": _with(tcfg, advantage_estimator="rloo"),
    }
    rows, files, per_step = [], {}, {}
    for step in STEPS:
        engine.new_step(step)
        metrics = asyncio.run(
            k["evaluate"](
                eval_dataloader=dataloader,
                generator=generator,
                cfg=cfg,
                global_step=step,
                tokenizer=tokenizer,
            )
        )
        cap = k["captured"]
        concat = cap["concat"]
        if cfg.generator.step_wise_trajectories:
            uids = [t.instance_id for t in concat["trajectory_ids"]]
        else:
            uids = cap["scored_uids"]
        prompts = [tokenizer.decode(p) for p in concat["prompt_token_ids"]]
        results = {
            name: advantages_of(
                StandInTrainer(k["trainer_methods"], c, tokenizer), k, concat, uids, prompts, c
            )  # fmt: skip
            for name, c in variants.items()
        }
        step_dir = f"dumped_evals/global_step_{step}_evals"
        per_step[str(step)] = {
            "eval_metrics": {kk: v for kk, v in metrics.items() if not kk.startswith("timing/")},
            "uids": uids,
            "is_last_step": concat.get("is_last_step"),
        }
        # rows in file order: data sources in first-appearance order, as
        # dump_per_dataset_eval_results writes them
        sources = list(
            dict.fromkeys(s if s is not None else "unknown" for s in cap["data_sources"])
        )
        first_seen: dict = {}
        text_seen: dict = {}
        for src_name in sources:
            fname = f"{step_dir}/{k['trainer_utils']['sanitize_data_source'](src_name)}.jsonl"
            idx = [i for i, s in enumerate(cap["data_sources"]) if (s or "unknown") == src_name]
            lines = (export / fname).read_text().splitlines()
            assert len(lines) == len(idx)
            files[fname] = {"lines": len(lines), "json_types": json_types(export / fname)}
            for line_no, i in enumerate(idx, start=1):
                obj = json.loads(lines[line_no - 1])
                group = first_seen.setdefault(uids[i], len(first_seen))
                text_group = text_seen.setdefault(obj["input_prompt"], len(text_seen))
                row = {
                    "file": fname,
                    "line": line_no,
                    "step": step,
                    "uid": uids[i],
                    "group": group,
                    "prompt_group": text_group,
                    "score": obj["score"],
                    "reward": results["grpo"]["score_sum"][i],
                    "grpo_advantage": results["grpo"]["advantage"][i],
                    "grpo_advantage_norm_by_std_false": results["grpo_norm_by_std_false"][
                        "advantage"
                    ][i],
                    "rloo_advantage": results["rloo"]["advantage"][i],
                    "grpo_advantage_grouped_by_input_prompt": results["grpo"]["by_text"][i],
                }
                if cfg.generator.step_wise_trajectories:
                    tid = concat["trajectory_ids"][i].to_string()
                    last = max(
                        j for j, t in enumerate(concat["trajectory_ids"]) if t.to_string() == tid
                    )
                    row["is_last_step"] = concat["is_last_step"][i]
                    row["trajectory"] = tid
                    row["trajectory_reward"] = results["grpo"]["score_sum"][last]
                rows.append(row)
        agg = f"{step_dir}/aggregated_results.jsonl"
        files[agg] = {"lines": 1, "json_types": json_types(export / agg)}
    algo = cfg.trainer.algorithm
    truth = {
        "made_by": "tools/dumps/skyrl.py",
        "framework": f"SkyRL {SKYRL_VERSION} (PyPI skyrl, wheel sha256 {WHEEL_SHA256})",
        "versions": versions(),
        "case": case,
        "description": spec["description"],
        "settings": {
            "overrides": overrides,
            "env_class": spec["env_class"],
            "steps": list(STEPS),
            "eval_n_samples_per_prompt": n,
            "prompts": len(questions),
            "data_sources": list(dict.fromkeys(s for s, *_ in questions)),
            "generator.batched": cfg.generator.batched,
            "generator.max_turns": cfg.generator.max_turns,
            "generator.step_wise_trajectories": cfg.generator.step_wise_trajectories,
            "trainer.algorithm.advantage_estimator": algo.advantage_estimator,
            "trainer.algorithm.grpo_norm_by_std": algo.grpo_norm_by_std,
            "trainer.algorithm.advantage_batch_normalize": algo.advantage_batch_normalize,
            "trainer.algorithm.zero_variance_filter": algo.zero_variance_filter,
            "grpo_epsilon": _grpo_epsilon(k),
            "truth_trainer_config": {
                "trainer.train_batch_size": tcfg.trainer.train_batch_size,
                "trainer.policy_mini_batch_size": tcfg.trainer.policy_mini_batch_size,
                "generator.n_samples_per_prompt": tcfg.generator.n_samples_per_prompt,
                "note": "set on a copy of the config so that convert_to_training_input accepts "
                "one eval step's rows as its training batch; nothing else differs",
            },
        },
        "seed": SEED,
        "files": dict(sorted(files.items())),
        "row_fields": ROW_FIELDS,
        "rows": rows,
        "per_step": per_step,
    }
    return export, truth


ROW_FIELDS = {
    "file, line": "the dump file (relative to the case folder) and its 1-based line",
    "uid": "SkyRL's uid of the row (eval dataset row index; not in the dump)",
    "group": "group index within the step by uid (order of first appearance)",
    "prompt_group": "group index within the step by input_prompt text (what the dump shows)",
    "score": "the dump's 'score' as written",
    "reward": "what SkyRL's compute_grpo_outcome_advantage sums: token_level_rewards.sum(-1)"
    " (float32) after postprocess_generator_output (step_wise: this row's own sum; SkyRL uses"
    " trajectory_reward, the sum of the trajectory's last step)",
    "is_last_step, trajectory, trajectory_reward": "step_wise only: SkyRL's is_last_step, the"
    " TrajectoryID (uid_repetition) and the reward of the trajectory's last step",
    "grpo_advantage": "SkyRL's trainer.compute_advantages_and_returns with the case's config"
    " (advantage_estimator grpo, epsilon 1e-6, grpo_norm_by_std true, std unbiased), index = uid",
    "grpo_advantage_norm_by_std_false": "the same with trainer.algorithm.grpo_norm_by_std=false",
    "rloo_advantage": "the same with trainer.algorithm.advantage_estimator=rloo",
    "grpo_advantage_grouped_by_input_prompt": "compute_grpo_outcome_advantage over the step's rows"
    " with index = input_prompt text instead of uid (step_wise: each row on its own rewards,"
    " not SkyRL's last-step broadcast)",
}


def _with(cfg, **algo):
    c = copy.deepcopy(cfg)
    for key, v in algo.items():
        setattr(c.trainer.algorithm, key, v)
    return c


def _grpo_epsilon(k):
    sig = inspect.signature(k["ppo_ns"]["compute_grpo_outcome_advantage"])
    return sig.parameters["epsilon"].default


def versions():
    dists = (
        "torch",
        "transformers",
        "tokenizers",
        "datasets",
        "torchdata",
        "numpy",
        "omegaconf",
        "loguru",
        "jaxtyping",
        "cloudpathlib",
        "pyarrow",
    )
    found = dumpkit.installed_versions(dists)
    return {"skyrl": SKYRL_VERSION, **found, "python": platform.python_version()}


def json_types(path: Path):
    names = {str: "string", bool: "bool", int: "int", float: "float", type(None): "null",
             list: "list", dict: "object"}  # fmt: skip
    seen: dict = {}
    for line in path.read_text().splitlines():
        for key, v in json.loads(line).items():
            t = names[type(v)]
            if isinstance(v, list) and v:
                t += "<" + "|".join(sorted({names[type(x)] for x in v})) + ">"
            seen.setdefault(key, set()).add(t)
    return {key: sorted(v) for key, v in seen.items()}


def skyrl_defaults(k, src: Path):
    cfg = k["SkyRLTrainConfig"]()
    a, g, t = cfg.trainer.algorithm, cfg.generator, cfg.trainer
    return {
        "config": {
            "trainer.algorithm.advantage_estimator": a.advantage_estimator,
            "trainer.algorithm.grpo_norm_by_std": a.grpo_norm_by_std,
            "trainer.algorithm.advantage_batch_normalize": a.advantage_batch_normalize,
            "trainer.algorithm.zero_variance_filter": a.zero_variance_filter,
            "trainer.algorithm.zero_variance_filter_tol": a.zero_variance_filter_tol,
            "trainer.algorithm.loss_reduction": a.loss_reduction,
            "trainer.algorithm.gamma": a.gamma,
            "trainer.algorithm.lambd": a.lambd,
            "trainer.dump_eval_results": t.dump_eval_results,
            "trainer.eval_interval": t.eval_interval,
            "trainer.eval_before_train": t.eval_before_train,
            "trainer.eval_batch_size": t.eval_batch_size,
            "trainer.export_path": "~/exports/",
            "generator.batched": g.batched,
            "generator.n_samples_per_prompt": g.n_samples_per_prompt,
            "generator.eval_n_samples_per_prompt": g.eval_n_samples_per_prompt,
            "generator.eval_sampling_params.temperature": g.eval_sampling_params.temperature,
            "generator.step_wise_trajectories": g.step_wise_trajectories,
            "generator.use_conversation_multi_turn": g.use_conversation_multi_turn,
            "generator.zero_reward_on_non_stop": g.zero_reward_on_non_stop,
        },
        "grpo_epsilon": _grpo_epsilon(k),
        "grpo_epsilon_note": "compute_grpo_outcome_advantage's keyword default; "
        "ppo_utils.compute_advantages_and_returns passes no epsilon and no config key sets it",
        "compute_grpo_outcome_advantage": source_of(
            src, "skyrl/backends/skyrl_train/utils/ppo_utils.py", "compute_grpo_outcome_advantage"
        ),
    }


def main():
    ap = argparse.ArgumentParser(description="Write real SkyRL eval dumps as advcli fixtures.")
    ap.add_argument("outdir", help="scratch folder; each case runs in OUTDIR/<case>")
    ap.add_argument("--wheel", required=True, help="skyrl-0.4.0-py3-none-any.whl")
    ap.add_argument(
        "--fixtures",
        default=os.path.join(
            os.path.dirname(os.path.dirname(_HERE)), "tests", "fixtures", "real", "skyrl"
        ),
    )
    ap.add_argument("--cases", default=",".join(CASES))
    args = ap.parse_args()
    outdir = Path(args.outdir).resolve()
    src = unpack_wheel(args.wheel, outdir / "src")
    k = load_skyrl(src)
    defaults = skyrl_defaults(k, src)
    for case in args.cases.split(","):
        export, truth = run_case(case, k, outdir, src)
        truth["skyrl_defaults"] = defaults
        truth["skyrl_code"] = {"taken_with_ast": TAKEN, "imports_skipped": IMPORTS_SKIPPED}
        dest = Path(args.fixtures) / case
        if dest.exists():
            shutil.rmtree(dest)
        for f in truth["files"]:
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(export / f, dest / f)
        with open(dest / "truth.json", "w") as fh:
            json.dump(truth, fh, indent=1, ensure_ascii=False)
            fh.write("\n")
        print(f"{case}: {len(truth['rows'])} rows -> {dest}")


if __name__ == "__main__":
    main()
