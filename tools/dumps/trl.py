"""Write real TRL GRPO completion dumps as small test fixtures.

Made with TRL 1.16.0, transformers 5.24.0, torch 2.13.0+cpu (accelerate 1.15.0, datasets 5.2.0,
pandas 3.1.1, pyarrow 26.0.1, tokenizers 0.23.3), on CPU, offline.

Run (from the repository root, with the framework venv, never as part of CI):

    HF_HUB_OFFLINE=1 /tmp/fw/venv/bin/python tools/dumps/trl.py OUTDIR [CASE ...]

OUTDIR is a scratch folder (the tiny model and each run's `output_dir` go there). For every case the
script runs one real `GRPOTrainer(...).train()` with `log_completions=True`, lets TRL write
`{output_dir}/completions/completions_{step:05d}.parquet` itself, then copies that `completions/`
folder unchanged to `tests/fixtures/real/trl/<case>/completions/` and writes
`tests/fixtures/real/trl/<case>/truth.json` beside it.

Nothing is downloaded: the tokenizer is a word-level `tokenizers` model built here and the policy a
randomly initialised 2-layer Qwen2 (both saved with `save_pretrained` and passed to TRL by path).
Reward functions are plain, deterministic Python functions (crc32 of the completion text, so the
values do not depend on Python's hash seed).

How truth.json knows which row belongs to which TRL group: every reward function call is recorded
here (mode, the prompts and completions TRL passed, each function's outputs). TRL calls the reward
functions once per generation batch (train) or per eval batch, in the row order it later logs, and
its advantage code groups each call's rows as contiguous blocks of `num_generations` (train) or
`num_generations_eval` (eval) (`_generate_and_score_completions`, `rewards.view(-1,
num_generations)`). A completions file holds the last `generation_batch_size` rows TRL logged (its
`_logs` deques), so each file is matched to a contiguous stretch of the recorded calls; the group of
a row is (call, position in call // group size). The script also recomputes TRL's advantage from the
recorded rewards with TRL's own formula and stores the largest difference in truth.json.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import zlib
from pathlib import Path

# This file is called trl.py: keep its own folder off sys.path so that `import trl` finds TRL
# (once dumpkit, beside it, is imported).
sys.path.insert(0, str(Path(__file__).resolve().parent))
import dumpkit  # noqa: E402

dumpkit.leave_folder(__file__)

dumpkit.offline_on_cpu()
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "real" / "trl"

_WORDS = (
    "0 1 2 3 4 5 6 7 8 9 add plus minus times and is what the answer solve compute "
    "question task of to a b c x y so then yes no maybe sum total result : ? . = + - "
    "think done ok"
)
WORDS = _WORDS.split()
SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)


def build_model(folder: Path) -> Path:
    from tokenizers import decoders
    from transformers import Qwen2Config, Qwen2ForCausalLM

    vocab = {tok: i for i, tok in enumerate(SPECIAL + WORDS)}
    joins = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    tokenizer = dumpkit.word_level_tokenizer(vocab, SPECIAL, decoder=joins, padding_side="left")
    tokenizer.chat_template = CHAT_TEMPLATE
    dumpkit.seed_all(0)
    # initializer_range 0.5: peaked enough that completions depend on the prompt
    config = dumpkit.tiny_model_config(
        Qwen2Config, vocab, max_position_embeddings=128, initializer_range=0.5
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = vocab["<pad>"]
    model.generation_config.eos_token_id = vocab["<eos>"]
    model.generation_config.bos_token_id = vocab["<bos>"]
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# --------------------------------------------------------------------------------------------------
# Recording of every reward call (to derive TRL's grouping, and to re-check TRL's advantage)

CALLS: list[
    dict
] = []  # one entry per TRL reward pass: mode, prompts, completions, outputs per function
TRAINER = None  # the running GRPOTrainer (to know train/eval mode)


def _text(c) -> str:
    return c[-1]["content"] if isinstance(c, list) else c


def _h(s: str, salt: str) -> int:
    return zlib.crc32((salt + "|" + s).encode("utf-8"))


def recorded(fn):
    """Record each call of a reward function; TRL sees the wrapped function's __name__ unchanged."""

    def wrapper(prompts, completions, **kwargs):
        out = fn(prompts, completions, **kwargs)
        key = (id(prompts), id(completions))
        if not CALLS or CALLS[-1]["key"] != key or fn.__name__ in CALLS[-1]["outputs"]:
            CALLS.append(
                {
                    "key": key,
                    "mode": "train" if TRAINER.model.training else "eval",
                    "prompts": list(prompts),
                    "completions": list(completions),
                    "question_id": list(kwargs.get("question_id", [None] * len(prompts))),
                    "outputs": {},
                }
            )
        CALLS[-1]["outputs"][fn.__name__] = [math.nan if v is None else float(v) for v in out]
        return out

    wrapper.__name__ = fn.__name__
    wrapper.__qualname__ = fn.__qualname__
    return wrapper


# --------------------------------------------------------------------------------------------------
# Reward functions (TRL signature: prompts, completions, completion_ids, **dataset columns,
# trainer_state, log_extra, log_metric)


def _task(kwargs, i) -> str:
    return kwargs.get("kind", ["plain"] * (i + 1))[i]


@recorded
def accuracy_reward(prompts, completions, **kwargs):
    out = []
    for i, c in enumerate(completions):
        kind = _task(kwargs, i)
        if kind == "const":
            out.append(1.0)  # the whole group gets 1.0: zero std
        else:
            key = _text(c) + "|" + str(kwargs.get("question_id", [""] * len(completions))[i])
            out.append([0.0, 0.5, 1.0][_h(key, "acc") % 3])
    return out


@recorded
def format_reward(prompts, completions, **kwargs):
    out = []
    for i, c in enumerate(completions):
        kind = _task(kwargs, i)
        if kind == "const":
            out.append(0.5)
        else:
            out.append([0.0, 1.0][_h(_text(c), "fmt") % 2])
    return out


@recorded
def length_reward(prompts, completions, **kwargs):
    """Logs a float column and a string column through TRL's `log_extra` kwarg."""
    texts = [_text(c) for c in completions]
    lengths = [len(t.split()) for t in texts]
    out = [1.0 if n % 2 == 0 else 0.0 for n in lengths]
    log_extra = kwargs["log_extra"]
    # String column called first: TRL flushes the columns in sorted order (length_ratio first).
    log_extra("verdict", ["even" if r == 1.0 else "odd" for r in out])
    log_extra("length_ratio", [n / 8.0 for n in lengths])
    return out


def _make_none_funcs(group_size: int):
    """Reward functions returning None.

    TRL passes the rows of a generation batch in order, groups being contiguous blocks of
    `group_size`, so `i % group_size` is the member's position in its group.
    kind == "allnone": both functions return None for every member (a fully unscorable group);
    kind == "mixed": both return None for members 0 and 1 (unscorable rows inside a scored group),
    members 2 and 3 get accuracy 0.0 and 1.0;
    kind == "single": only accuracy_reward returns None, for members 1 and 2.
    """

    @recorded
    def accuracy_reward(prompts, completions, **kwargs):
        out = []
        for i, c in enumerate(completions):
            kind, m = _task(kwargs, i), i % group_size
            if (
                kind == "allnone"
                or (kind == "mixed" and m in (0, 1))
                or (kind == "single" and m in (1, 2))
            ):
                out.append(None)
            elif kind == "mixed":
                out.append([0.0, 1.0][m - 2])  # the two scored members differ
            else:
                out.append([0.0, 0.5, 1.0][_h(_text(c), "acc") % 3])
        return out

    @recorded
    def format_reward(prompts, completions, **kwargs):
        out = []
        for i, c in enumerate(completions):
            kind, m = _task(kwargs, i), i % group_size
            if kind == "allnone" or (kind == "mixed" and m in (0, 1)):
                out.append(None)
            else:
                out.append([0.0, 1.0][_h(_text(c), "fmt") % 2])
        return out

    return [accuracy_reward, format_reward]


# --------------------------------------------------------------------------------------------------
# Datasets

PROMPTS = [
    "what is 3 plus 4 ?",
    "compute 7 minus 2 .",
    "add 5 and 1 so the sum is what ?",
    "what is 2 times 3 ?",
    "solve x = 9 minus 4 .",
    "the total of 6 and 2 is what ?",
    "what is 8 minus 8 ?",
    "add 1 and 1 .",
    "compute 4 times 2 ?",
]


def text_dataset(n: int, kinds=None, start: int = 0):
    from datasets import Dataset

    rows = {"prompt": [], "question_id": [], "kind": []}
    for i in range(n):
        rows["prompt"].append(PROMPTS[(start + i) % len(PROMPTS)])
        rows["question_id"].append(f"q{start + i}")
        rows["kind"].append(kinds[i] if kinds else ("const" if i == 1 else "plain"))
    return Dataset.from_dict(rows)


def repeated_dataset():
    from datasets import Dataset

    # Six tasks, only two prompt texts: the task lives in question_id.
    return Dataset.from_dict(
        {
            # "Solve:"/"Compute:" are not in the vocabulary (they tokenize to <unk> ":"), so a
            # prompt column showing them proves TRL logs the dataset prompt, not decoded ids.
            "prompt": ["Solve:"] * 4 + ["Compute:"] * 2,
            "question_id": ["q0", "q1", "q2", "q3", "q4", "q5"],
            "kind": ["plain", "plain", "const", "plain", "plain", "plain"],
        }
    )


def distinct_dataset(n: int):
    """n tasks whose prompt texts all differ (unlike text_dataset's, which repeat after 9)."""
    from datasets import Dataset

    ops = ["plus", "minus", "times"]
    prompts = [f"what is {i % 10} {ops[(i // 10) % 3]} {(i // 30) % 10} ?" for i in range(n)]
    assert len(set(prompts)) == n
    return Dataset.from_dict(
        {
            "prompt": prompts,
            "question_id": [f"q{i}" for i in range(n)],
            "kind": ["const" if i == 1 else "plain" for i in range(n)],
        }
    )


def conversational_dataset(n: int):
    from datasets import Dataset

    return Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}] for i in range(n)],
            "question_id": [f"q{i}" for i in range(n)],
            "kind": ["const" if i == 1 else "plain" for i in range(n)],
        }
    )


# --------------------------------------------------------------------------------------------------
# Cases

BASE = dict(
    max_completion_length=8,
    num_generations=4,
    per_device_train_batch_size=24,
    max_steps=3,
    learning_rate=1e-3,
    use_cpu=True,
    bf16=False,
    report_to="none",
    save_strategy="no",
    log_completions=True,
    num_completions_to_print=1,
    logging_steps=1,
    seed=0,
    data_seed=0,
    disable_tqdm=True,
    dataloader_num_workers=0,
)

TWO = [accuracy_reward, format_reward]

CASES = {
    "default": dict(
        description="Default GRPO settings: num_generations=4, 6 prompts x 4 = a generation batch "
        "of 24 rows, scale_rewards='group', two reward functions. One prompt (kind=const) "
        "gets the same rewards for all members, so its group has zero std and advantage 0.",
        config={},
        funcs=TWO,
        train=lambda: text_dataset(6),
    ),
    "g8": dict(
        description="num_generations=8 (per_device_train_batch_size=24: 3 prompts x 8 per step), "
        "the other settings as in default; the group size differs from the other fixtures' 4 "
        "and is not written in the file.",
        config=dict(num_generations=8),
        funcs=TWO,
        train=lambda: text_dataset(6),
    ),
    "repeated_prompt": dict(
        description="Six tasks but only two prompt texts ('Solve:' x4, 'Compute:' x2); the task "
        "is in the question_id column that accuracy_reward reads. Neighbouring groups can "
        "have identical prompt text, so grouping by prompt text merges distinct TRL groups. "
        "The prompt column holds 'Solve:' verbatim although the tokenizer reads it as '<unk> :': "
        "TRL logs the dataset's prompt, not decoded prompt ids.",
        config={},
        funcs=TWO,
        train=repeated_dataset,
    ),
    "log_extra": dict(
        description="Three reward functions; length_reward calls TRL's log_extra(column, values), "
        "first with a string column (verdict), then with a float column (length_ratio). TRL "
        "writes the extra columns after all reward columns and before advantage, in sorted "
        "name order (length_ratio, verdict), not call order.",
        config={},
        funcs=[accuracy_reward, format_reward, length_reward],
        train=lambda: text_dataset(6),
    ),
    "none_rewards": dict(
        description="Reward functions returning None. kind=allnone: both functions return None "
        "for every member (TRL sets the summed reward NaN, the group mean/std are NaN and "
        "nan_to_num gives advantage 0); kind=mixed: both return None for members 0-1 (NaN "
        "rewards excluded from that group's nanmean/nanstd, their advantage forced to 0); "
        "kind=single: only accuracy_reward returns None for members 1-2 (nansum counts it as "
        "0, the row keeps format_reward).",
        config={},
        funcs="none",
        train=lambda: text_dataset(
            6, kinds=["allnone", "mixed", "single", "plain", "plain", "const"]
        ),
    ),
    "eval": dict(
        description="eval_strategy='steps', eval_steps=1, num_generations=4 for training and "
        "num_generations_eval=2 for an eval set of 3 prompts (per_device_eval_batch_size=6: "
        "one eval batch of 6 rows). Train and eval share TRL's _logs deques (maxlen "
        "generation_batch_size=24): at each step TRL first writes the 24 train rows, then the "
        "evaluation's log call overwrites the same completions_{step}.parquet with the last "
        "18 train rows followed by the 6 eval rows (at step 3 the closing train-summary log "
        "writes the same content a third time). The first train group in each file is cut (2 "
        "of its 4 members were pushed out of the deque), and nothing in the file marks a row "
        "as eval: train and eval rows carry the same step.",
        config=dict(
            eval_strategy="steps",
            eval_steps=1,
            num_generations_eval=2,
            per_device_eval_batch_size=6,
        ),
        funcs=TWO,
        train=lambda: text_dataset(6),
        eval=lambda: text_dataset(3, start=6),
    ),
    "scale_batch": dict(
        description="scale_rewards='batch': advantage = (r - group mean) / (std over the whole "
        "generation batch + 1e-4).",
        config=dict(scale_rewards="batch"),
        funcs=TWO,
        train=lambda: text_dataset(6),
    ),
    "scale_none": dict(
        description="scale_rewards='none': advantage = r - group mean (no division).",
        config=dict(scale_rewards="none"),
        funcs=TWO,
        train=lambda: text_dataset(6),
    ),
    "normalize_then_sum": dict(
        description="multi_objective_aggregation='normalize_then_sum' (GDPO): each reward "
        "function is normalised within its group ((r_k - mean_k)/(std_k + 1e-4)), the "
        "normalised values are summed with the weights, then the sum is normalised over the "
        "whole batch ((s - batch mean)/(batch std + 1e-4)); scale_rewards is ignored on this "
        "path.",
        config=dict(multi_objective_aggregation="normalize_then_sum"),
        funcs=TWO,
        train=lambda: text_dataset(6),
    ),
    "weights": dict(
        description="reward_weights=[1.0, 0.5]: TRL's reward is nansum(w_k * r_k); the weights "
        "are not in the file.",
        config=dict(reward_weights=[1.0, 0.5]),
        funcs=TWO,
        train=lambda: text_dataset(6),
    ),
    "conversational": dict(
        description="Conversational dataset: prompt is a list of {role, content} messages; TRL "
        "applies the chat template to generate, and logs prompt as the original message list "
        "and completion as [{role: assistant, content: ...}] (Parquet "
        "list<struct<role: string, content: string>>).",
        config={},
        funcs=TWO,
        train=lambda: conversational_dataset(6),
    ),
    "empty_step": dict(
        description="A dataset of 4 prompts, smaller than one generation batch (6 prompts x 4): "
        "TRL's RepeatSampler drops the incomplete chunk, so no batch is generated and "
        "transformers stops at step 0; the closing log call still writes "
        "completions_00000.parquet with no rows and only the columns step, prompt, "
        "completion, advantage, all float64 (no reward column: none was ever logged). It is "
        "the only file the run writes (save_strategy='no').",
        config={},
        funcs=TWO,
        train=lambda: text_dataset(4),
    ),
    "grad_accum": dict(
        description="gradient_accumulation_steps=2, steps_per_generation=4, "
        "per_device_train_batch_size=6: one generation batch of 24 rows serves 4 "
        "micro-batches = 2 optimizer steps, so completions_00001 and completions_00002 hold "
        "the same 24 rows (same generation) and completions_00003 a new one.",
        config=dict(
            per_device_train_batch_size=6, gradient_accumulation_steps=2, steps_per_generation=4
        ),
        funcs=TWO,
        train=lambda: text_dataset(6),
    ),
    "batch_weights_none": dict(
        description="Three settings at once: scale_rewards='batch', reward_weights=[1.0, 0.5] and "
        "reward functions returning None (the none_rewards functions and kinds: allnone, mixed, "
        "single, plain, plain, const). TRL: reward = nansum(w_k * r_k), NaN where every function "
        "returned None; advantage = (reward - group nanmean) / (nanstd over the whole generation "
        "batch + 1e-4), then NaN -> 0. The weights are not in the file.",
        config=dict(scale_rewards="batch", reward_weights=[1.0, 0.5]),
        funcs="none",
        train=lambda: text_dataset(
            6, kinds=["allnone", "mixed", "single", "plain", "plain", "const"]
        ),
    ),
    "all_zero": dict(
        description="Every prompt is kind=const: every completion gets accuracy 1.0 and format "
        "0.5, so every group has zero std and TRL logs advantage 0 for all 72 rows. Nothing in "
        "the file (rewards or advantages) tells the group size.",
        config={},
        funcs=TWO,
        train=lambda: text_dataset(6, kinds=["const"] * 6),
    ),
    "eval_n1": dict(
        description="eval_strategy='steps', eval_steps=1, eval_on_start=True, "
        "num_generations_eval=1 for an eval set of 3 prompts (per_device_eval_batch_size=3: one "
        "eval batch of 3 rows, each its own group of one). TRL's group path sets std to 0 when "
        "num_generations_eval is 1 and the mean is the reward itself, so every eval advantage "
        "is 0. The evaluation before training (eval_on_start) writes completions_00000.parquet "
        "holding only those 3 eval rows; at steps 1-3 TRL writes the 24 train rows, then the "
        "eval log overwrites the step's file with the last 21 train rows followed by the 3 eval "
        "rows (the first train group in the file is cut to 1 member). Nothing in the file marks a "
        "row as eval.",
        config=dict(
            eval_strategy="steps",
            eval_steps=1,
            eval_on_start=True,
            num_generations_eval=1,
            per_device_eval_batch_size=3,
        ),
        funcs=TWO,
        train=lambda: text_dataset(6),
        eval=lambda: text_dataset(3, start=6),
    ),
    "g4_for_check": dict(
        description="num_generations=4 with 18 prompts per step (per_device_train_batch_size=72, "
        "a dataset of 54 tasks with distinct prompt texts): 18 groups of 4 per file, for "
        "checking a group size the user gives wrongly (e.g. 8).",
        config=dict(per_device_train_batch_size=72),
        funcs=TWO,
        train=lambda: distinct_dataset(54),
    ),
    "gdpo_weights": dict(
        description="multi_objective_aggregation='normalize_then_sum' with reward_weights=[1.0, "
        "0.5]: each reward function is normalised within its group, the normalised values are "
        "summed with the weights 1.0 and 0.5, then the sum is normalised over the whole batch. "
        "The weights are not in the file.",
        config=dict(multi_objective_aggregation="normalize_then_sum", reward_weights=[1.0, 0.5]),
        funcs=TWO,
        train=lambda: text_dataset(6),
    ),
}


# --------------------------------------------------------------------------------------------------
# TRL's advantage formula, re-applied to the recorded rewards (checks the grouping in truth.json)


def trl_advantages(
    rewards_per_func: np.ndarray, weights: np.ndarray, G: int, scale: str, agg: str
) -> np.ndarray:
    t = torch.tensor(rewards_per_func, dtype=torch.float32)
    w = torch.tensor(weights, dtype=torch.float32)
    from trl.trainer.utils import nanstd

    unscorable = torch.isnan(t).all(dim=1)
    if agg == "sum_then_normalize":
        r = (t * w.unsqueeze(0)).nansum(dim=1)
        r[unscorable] = torch.nan
        mean = torch.nanmean(r.view(-1, G), dim=1).repeat_interleave(G)
        if scale in ("group", "none"):
            std = (
                nanstd(r.view(-1, G), dim=1).repeat_interleave(G) if G > 1 else torch.zeros_like(r)
            )
        else:
            std = nanstd(r).expand_as(r) if r.numel() > 1 else torch.zeros_like(r)
        adv = r - mean
        if scale != "none":
            adv = adv / (std + 1e-4)
    else:
        g = t.view(-1, G, t.shape[1])
        mk = torch.nanmean(g, dim=1, keepdim=True)
        sk = nanstd(g, dim=1, keepdim=True) if G > 1 else torch.zeros_like(mk)
        r = (((g - mk) / (sk + 1e-4)).view(-1, t.shape[1]) * w.unsqueeze(0)).nansum(dim=1)
        r[unscorable] = torch.nan
        std = nanstd(r).expand_as(r) if r.numel() > 1 else torch.zeros_like(r)
        adv = (r - torch.nanmean(r)) / (std + 1e-4)
    return torch.nan_to_num(adv, nan=0.0).numpy()


def jsonable(x):
    if isinstance(x, float) and math.isnan(x):
        return None
    return x


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray):
        a = a.tolist()
    if isinstance(b, np.ndarray):
        b = b.tolist()
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        # Parquet gives a struct every field its column has (null where a message lacks it: a
        # tool message has a name, an assistant message tool_calls): a null is an absent key.
        a = {k: v for k, v in a.items() if v is not None}
        b = {k: v for k, v in b.items() if v is not None}
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def derive_truth(case: str, spec: dict, trainer, args, comp_dir: Path, versions: dict) -> dict:
    names = [f.__name__ for f in trainer.reward_funcs]
    weights = trainer.reward_weights.cpu().numpy()
    G_train, G_eval = trainer.num_generations, trainer.num_generations_eval

    # The stream of logged rows, in TRL's logging order, with each row's origin.
    stream = []
    adv_check = 0.0
    for ci, call in enumerate(CALLS):
        G = G_train if call["mode"] == "train" else G_eval
        rpf = np.array([call["outputs"][n] for n in names], dtype=np.float64).T
        adv = trl_advantages(
            rpf, weights, G, trainer.scale_rewards, trainer.multi_objective_aggregation
        )
        for pos in range(len(call["prompts"])):
            stream.append(
                dict(
                    call=ci,
                    mode=call["mode"],
                    pos=pos,
                    group_in_call=pos // G,
                    G=G,
                    prompt=call["prompts"][pos],
                    completion=call["completions"][pos],
                    question_id=call["question_id"][pos],
                    adv=float(adv[pos]),
                )
            )

    files = {}
    groups = {}
    per_row = {}
    for path in sorted(comp_dir.glob("*.parquet")):
        df = pd.read_parquet(path)
        rel = f"completions/{path.name}"
        n = len(df)
        info = {"rows": n, "columns": list(df.columns)}
        if n == 0:
            info.update(train_rows=None, eval_rows=None, steps=[])
            files[rel] = info
            groups[rel] = []
            per_row[rel] = []
            continue
        rows = [(df["prompt"].iloc[i], df["completion"].iloc[i]) for i in range(n)]
        # The file is a contiguous stretch of the stream (the deque's content at log time).
        starts = [
            s
            for s in range(len(stream) - n + 1)
            if all(
                _same(stream[s + i]["prompt"], rows[i][0])
                and _same(stream[s + i]["completion"], rows[i][1])
                for i in range(n)
            )
        ]
        if len(starts) != 1:
            raise RuntimeError(
                f"{case}/{rel}: {len(starts)} matches of the file in the recorded calls"
            )
        seg = stream[starts[0] : starts[0] + n]
        # Group numbers in file order; a group is (call, group_in_call).
        gid, labels, seen = -1, [], {}
        for r in seg:
            k = (r["call"], r["group_in_call"])
            if k not in seen:
                gid += 1
                seen[k] = gid
            labels.append(seen[k])
        sizes = {g: labels.count(g) for g in set(labels)}
        modes = [r["mode"] for r in seg]

        def span(mode, modes=modes):
            idx = [i for i, m in enumerate(modes) if m == mode]
            if not idx:
                return None
            assert idx == list(range(idx[0], idx[-1] + 1)), "rows of one mode are not contiguous"
            return [idx[0], idx[-1] + 1]

        info.update(
            train_rows=span("train"),
            eval_rows=span("eval"),
            steps=sorted(set(int(s) for s in df["step"])),
            incomplete_groups=sorted(
                g for g, sz in sizes.items() if sz != seg[labels.index(g)]["G"]
            ),
        )
        diffs = np.abs(
            df["advantage"].to_numpy(dtype=np.float64) - np.array([r["adv"] for r in seg])
        )
        info["max_abs_diff_trl_advantage_vs_recomputed"] = float(diffs.max())
        adv_check = max(adv_check, float(diffs.max()))
        files[rel] = info
        groups[rel] = labels
        per_row[rel] = [
            {
                "mode": r["mode"],
                "reward_call": r["call"],
                "position_in_call": r["pos"],
                "group_size": r["G"],
                "question_id": r["question_id"],
            }
            for r in seg
        ]

    settings = {
        "num_generations": args.num_generations,
        "num_generations_eval": args.num_generations_eval,
        "effective_num_generations_eval": G_eval,
        "scale_rewards": args.scale_rewards,
        "reward_weights": [float(w) for w in weights],
        "reward_weights_arg": args.reward_weights,
        "multi_objective_aggregation": args.multi_objective_aggregation,
        "gradient_accumulation_steps": args.gradient_accumulation_steps,
        "per_device_train_batch_size": args.per_device_train_batch_size,
        "steps_per_generation": args.steps_per_generation,
        "generation_batch_size": args.generation_batch_size,
        "num_iterations": args.num_iterations,
        "max_steps": args.max_steps,
        "max_completion_length": args.max_completion_length,
        "logging_steps": args.logging_steps,
        "shuffle_dataset": args.shuffle_dataset,
        "seed": args.seed,
        "beta": args.beta,
        "loss_type": args.loss_type,
        "eval_strategy": str(getattr(args.eval_strategy, "value", args.eval_strategy)),
        "eval_steps": args.eval_steps,
        # Only where set, so that the cases made before it was recorded stay byte-identical.
        **({"eval_on_start": True} if args.eval_on_start else {}),
        "per_device_eval_batch_size": args.per_device_eval_batch_size,
        "train_dataset_rows": len(trainer.train_dataset),
        "eval_dataset_rows": len(trainer.eval_dataset)
        if trainer.eval_dataset is not None
        else None,
    }
    extra_cols = sorted(
        {c for info in files.values() for c in info["columns"]}
        - {"step", "prompt", "completion", "advantage", *names}
    )
    return {
        "made_by": "tools/dumps/trl.py",
        "framework": "TRL 1.16.0",
        "versions": versions,
        "case": case,
        "description": spec["description"],
        "settings": settings,
        "reward_functions": names,
        "log_extra_columns": extra_cols,
        "files": files,
        "groups": groups,
        "rows": per_row,
        "notes": {
            "groups": "per file, the TRL group of each row in file order, numbered 0.. within the "
            "file; TRL groups a reward call's rows as contiguous blocks of num_generations "
            "(train) or num_generations_eval (eval). incomplete_groups lists groups cut by "
            "the _logs deque.",
            "rows": "per file and row: train/eval, which reward call of the run (0-based), the "
            "position in it, TRL's group size for that row and the dataset's question_id (not "
            "in the parquet).",
            "writes": "per file, every time TRL wrote it during train(): the mode TRL's log() saw "
            "(model.training; the closing summary log after a final evaluation, and a run "
            "that never trained, report eval) and the row count; a later write replaces the "
            "earlier file.",
            "advantage_check": "max |TRL's advantage in the file - TRL's formula re-applied to "
            "the recorded rewards of the whole reward call| over all files of the case",
        },
        "max_abs_diff_trl_advantage_vs_recomputed": adv_check,
    }


def run_case(case: str, outdir: Path, model_dir: Path, versions: dict) -> None:
    global TRAINER
    from transformers import PreTrainedTokenizerFast
    from trl import GRPOConfig, GRPOTrainer

    spec = CASES[case]
    CALLS.clear()
    dumpkit.seed_all(0)
    run_dir = outdir / "runs" / case
    if run_dir.exists():
        shutil.rmtree(run_dir)
    cfg = dict(BASE)
    cfg.update(spec["config"])
    cfg["output_dir"] = str(run_dir)
    args = GRPOConfig(**cfg)
    funcs = _make_none_funcs(args.num_generations) if spec["funcs"] == "none" else spec["funcs"]
    # AutoTokenizer would turn this folder's tokenizer into a Qwen2Tokenizer (byte-level BPE
    # pre-tokenizer and decoder, chosen by config.json's model_type), so the word-level tokenizer
    # is loaded with its own class.
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_dir)
    trainer = GRPOTrainer(
        model=str(model_dir),
        processing_class=tokenizer,
        reward_funcs=funcs,
        args=args,
        train_dataset=spec["train"](),
        eval_dataset=spec["eval"]() if "eval" in spec else None,
    )
    TRAINER = trainer
    # Watch (not change) TRL's parquet writes: which log call wrote each file, its mode, its rows.
    writes: dict[str, list] = {}
    to_parquet = pd.DataFrame.to_parquet

    def watched(df, path, *a, **k):
        writes.setdefault(f"completions/{Path(path).name}", []).append(
            {"mode": "train" if trainer.model.training else "eval", "rows": len(df)}
        )
        return to_parquet(df, path, *a, **k)

    pd.DataFrame.to_parquet = watched
    try:
        trainer.train()
    finally:
        pd.DataFrame.to_parquet = to_parquet
        TRAINER = None

    comp_dir = run_dir / "completions"
    dest = FIXTURES / case
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(comp_dir, dest / "completions")
    truth = derive_truth(case, spec, trainer, args, comp_dir, versions)
    for rel, info in truth["files"].items():
        info["writes"] = writes.get(rel, [])
    (dest / "truth.json").write_text(
        json.dumps(truth, indent=1, default=jsonable, allow_nan=False) + "\n"
    )
    print(
        f"[{case}] "
        + ", ".join(f"{k}: {v['rows']} rows" for k, v in truth["files"].items())
        + f"; advantage check {truth['max_abs_diff_trl_advantage_vs_recomputed']:.2e}"
    )


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        sys.exit(__doc__)
    import accelerate
    import datasets
    import pyarrow
    import tokenizers
    import transformers
    import trl

    versions = {
        "trl": trl.__version__,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "accelerate": accelerate.__version__,
        "datasets": datasets.__version__,
        "pandas": pd.__version__,
        "pyarrow": pyarrow.__version__,
        "tokenizers": tokenizers.__version__,
        "python": sys.version.split()[0],
    }
    if trl.__version__ != "1.16.0":
        sys.exit(f"this script documents TRL 1.16.0, found {trl.__version__}")
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    outdir = Path(argv[1]).resolve()
    cases = argv[2:] or list(CASES)
    model_dir = build_model(outdir / "model")
    for case in cases:
        run_case(case, outdir, model_dir, versions)


if __name__ == "__main__":
    main(sys.argv)
