"""Write real ROLL RLVR rollout dumps (`rollout_dump_data.step_{N}.jsonl`) as test fixtures.

Made from ROLL github.com/alibaba/ROLL @ 8eb27cc2dc34c4d1310b169d9b86d339004d811a (2026-08-19),
with verl 0.9.1's `DataProto` standing in for ROLL's fork of it, torch 2.13.0+cpu, transformers
5.10.4, tokenizers 0.22.2, numpy 2.4.6, codetiming 1.4.0, Python 3.11, on CPU, offline. ROLL is not
on PyPI (the PyPI `roll` is another project): its source comes from the bare git dir that the search
tool's `fetch github:alibaba/ROLL` returned.

Run (from the repository root, with the verl venv of tools/dumps/verl.py, never as part of CI):

    /tmp/fw/verl/bin/python tools/dumps/roll.py OUTDIR --roll-src GITDIR [--fixtures DIR]

GITDIR is a bare git clone of alibaba/ROLL; `roll/pipeline/rlvr/utils.py`,
`roll/utils/functionals.py` and `roll/utils/kl_controller.py` are read from its HEAD with `git show`
into OUTDIR/src/ (never into this repository). The dump is written under OUTDIR/default/dump/ by
ROLL's own writer and copied unchanged to `tests/fixtures/real/roll/default/` with a `truth.json`.
Two runs write identical files.

What is ROLL's own code, unchanged (taken out of its files with `ast`, the parsed nodes compiled as
they are, with `from __future__ import annotations` as the files have):
- roll/pipeline/rlvr/utils.py: `COLUMMNS_CONFIG`, `write_to_json_process`, `json_checker`,
  `DUMPING_FUNC`, `dump_rollout_to_specific_path` (called as rlvr_pipeline.py L556 does, with
  `pipeline_config.rollout_dump_dir` an absolute path, after the generate schedulers' batches are
  concatenated; it starts a daemon `multiprocessing.Process` that writes the file, which we join);
- roll/utils/functionals.py, for ROLL's own GRPO advantages (rlvr_pipeline.py L680-727:
  `get_sample_level_mask` → `reward_postprocess` → `compute_token_reward` → `compute_advantage`):
  those four plus `difficulty_mask`, `reward_norm`, `expand_to_token_level`, `compute_approx_kl`,
  `compute_clip_fraction`, `masked_mean`, `masked_var`, `masked_whiten`,
  `compute_reinforce_return`, `compute_gae_advantage_return`; roll/utils/kl_controller.py:
  `FixedKLController`, `AdaptiveKLController`, `get_kl_controller`.

Stand-ins (not ROLL's code) and why:
- `DataProto` is verl's (ROLL's `roll/distributed/scheduler/protocol.py` is a fork of it; the dump
  only reads `.batch`, `.non_tensor_batch`, `.meta_info`); `logger` is `logging.getLogger("roll")`;
- the generation: response token ids are scripted (seeded rng), `scores` come from a rule in this
  file (1.0 right answer in \\boxed{}, 0.1 boxed but wrong, 0.0 no box), and
  `response_level_rewards = scores` as ROLL's math rule reward worker sets them; rows are laid out
  as ROLL's generate scheduler returns them: the `num_return_sequences` responses of a prompt
  contiguous, prompts in completion order (here a seeded permutation, so the file is not in
  dataset order); one domain;
- the pipeline config is a `SimpleNamespace` with RLVRConfig's defaults for the fields the
  functions read, `adv_estimator="grpo"` and `num_return_sequences=4`.
"""

from __future__ import annotations

import argparse
import ast
import json
import logging
import multiprocessing
import os
import platform
import random
import shutil
import subprocess
import sys
from types import SimpleNamespace

# This file is called roll.py: its folder comes off sys.path (once dumpkit, beside it, is
# imported), so that `import roll` finds ROLL.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import dumpkit  # noqa: E402

dumpkit.leave_folder(__file__)

ROLL_COMMIT = "8eb27cc2dc34c4d1310b169d9b86d339004d811a"
SEED = 4321
N = 4  # num_return_sequences
STEPS = 2
PROMPTS_PER_STEP = 4
SYSTEM = "please reason step by step , and put your final answer within \\boxed{ } ."
WORDS_TEXT = (
    "please reason step by step , and put your final answer within \\boxed{ } . what is plus "
    "minus times ? so i think the hmm wait let me check it"
)
WORDS = WORDS_TEXT.split()
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<|im_start|>", "<|im_end|>"]
OPS = {"plus": lambda a, b: a + b, "minus": lambda a, b: a - b, "times": lambda a, b: a * b}
QUESTIONS = [
    (3, "plus", 5),
    (7, "minus", 4),
    (6, "times", 2),
    (9, "plus", 8),
    (12, "minus", 5),
    (4, "times", 4),
    (15, "plus", 6),
    (8, "times", 3),
]

UTILS_NAMES = [
    "COLUMMNS_CONFIG",
    "write_to_json_process",
    "json_checker",
    "DUMPING_FUNC",
    "dump_rollout_to_specific_path",
]
FUNCTIONALS_NAMES = [
    "compute_clip_fraction",
    "compute_approx_kl",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "compute_reinforce_return",
    "compute_gae_advantage_return",
    "expand_to_token_level",
    "reward_norm",
    "difficulty_mask",
    "compute_token_reward",
    "reward_postprocess",
    "get_sample_level_mask",
    "compute_advantage",
]
KL_NAMES = ["AdaptiveKLController", "FixedKLController", "get_kl_controller"]


def git_show(gitdir, path, dest):
    text = dumpkit.git_file(gitdir, "HEAD", path)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with open(dest, "w") as f:
        f.write(text)
    return dest


def take_out(path, names, namespace):
    """Compile the top-level definitions `names` of `path` (AST nodes unchanged) into `ns`."""
    with open(path) as f:
        tree = ast.parse(f.read(), filename=path)
    picked = []
    for node in tree.body:
        if (
            (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and node.name in names
            )
            or isinstance(node, ast.Assign)
            and any(getattr(t, "id", None) in names for t in node.targets)
        ):
            picked.append(node)
    found = {getattr(n, "name", None) or n.targets[0].id for n in picked}
    missing = set(names) - found
    assert not missing, f"{path}: not found {missing}"
    import __future__

    code = compile(
        ast.Module(body=picked, type_ignores=[]),
        path,
        "exec",
        flags=__future__.annotations.compiler_flag,
        dont_inherit=True,
    )
    exec(code, namespace)
    return namespace


def load_roll(gitdir, src):
    import copy
    import time

    import numpy
    import numpy as np
    import torch
    import torch.nn.functional as F
    from codetiming import Timer
    from tensordict import TensorDict
    from verl import DataProto

    sha = subprocess.run(
        ["git", "--git-dir", gitdir, "rev-parse", "HEAD"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    paths = {
        p: git_show(gitdir, p, os.path.join(src, p))
        for p in (
            "roll/pipeline/rlvr/utils.py",
            "roll/utils/functionals.py",
            "roll/utils/kl_controller.py",
        )
    }
    logger = logging.getLogger("roll")
    ns = {
        "os": os,
        "json": json,
        "time": time,
        "numpy": numpy,
        "np": np,
        "copy": copy,
        "torch": torch,
        "F": F,
        "Timer": Timer,
        "multiprocessing": multiprocessing,
        "DataProto": DataProto,
        "TensorDict": TensorDict,
        "logger": logger,
    }
    from collections.abc import Callable
    from typing import Optional, Union

    ns.update(Callable=Callable, Dict=dict, List=list, Optional=Optional, Tuple=tuple, Union=Union)
    take_out(paths["roll/utils/kl_controller.py"], KL_NAMES, ns)
    take_out(paths["roll/pipeline/rlvr/utils.py"], UTILS_NAMES, ns)
    take_out(paths["roll/utils/functionals.py"], FUNCTIONALS_NAMES, ns)
    return sha, ns


def build_tokenizer(path):
    from tokenizers import pre_tokenizers
    from transformers import AutoTokenizer

    words = list(dict.fromkeys(WORDS + [str(i) for i in range(0, 130)]))
    vocab = {t: i for i, t in enumerate(SPECIALS + words)}
    fast = dumpkit.word_level_tokenizer(vocab, SPECIALS, pre_tokenizers.WhitespaceSplit())
    fast.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }} {{ m['content'] }}<|im_end|> "
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant {% endif %}"
    )
    fast.save_pretrained(path)
    return AutoTokenizer.from_pretrained(path)


def dataset_rows():
    rows = []
    for i, (a, op, b) in enumerate(QUESTIONS):
        q = f"what is {a} {op} {b} ?"
        rows.append(
            {
                "id": str(i + 1),
                "source": "toy_math",
                "difficulty": "1.0",
                "prompt": q,
                "messages": json.dumps(
                    [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]
                ),
                "ground_truth": str(OPS[op](a, b)),
                "case_type": "",
                "test_case_function": "",
                "test_cases": "",
                "tag": "toy_math",
            }
        )
    return rows


def scripted_response(rng, truth):
    kind = rng.choice(["right", "right", "wrong", "none", "hmm"])
    wrong = int(truth) + rng.choice([-3, -1, 1, 2])
    return {
        "right": f"so i think \\boxed{{ {truth} }}",
        "wrong": f"i think \\boxed{{ {wrong} }}",
        "none": "hmm wait let me check",
        "hmm": f"hmm wait . \\boxed{{ {truth} }}",
    }[kind]


def rule_score(response, truth):
    import re

    m = re.findall(r"\\boxed\{ (-?\d+) \}", response)
    if not m:
        return 0.0
    return 1.0 if m[-1] == truth else 0.1  # 0.1 for a boxed but wrong answer


def make_batch(rows, tokenizer, rng, step):
    """The concatenated generate-scheduler output of one step (what the pipeline dumps)."""
    import numpy as np
    import torch
    from verl import DataProto

    order = rows[:]
    rng.shuffle(order)  # prompts come back in completion order, each with its N responses together
    P, R = 40, 16
    pad = tokenizer.pad_token_id
    prompts, responses, non_tensor = [], [], {k: [] for k in list(rows[0].keys()) + ["domain"]}
    scores = []
    for row in order:
        msgs = json.loads(row["messages"])
        p_ids = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
        p_ids = p_ids["input_ids"] if hasattr(p_ids, "keys") else p_ids
        for _ in range(N):
            text = scripted_response(rng, row["ground_truth"])
            r_ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
            prompts.append(p_ids)
            responses.append(r_ids[:R])
            scores.append(rule_score(text, row["ground_truth"]))
            for k in rows[0]:
                non_tensor[k].append(row[k])
            non_tensor["domain"].append("math_rule")
    B = len(prompts)
    input_ids = torch.full((B, P + R), pad, dtype=torch.long)
    attention_mask = torch.zeros((B, P + R), dtype=torch.long)
    response_mask = torch.zeros((B, P + R), dtype=torch.long)
    resp = torch.full((B, R), pad, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        input_ids[i, P - len(p) : P] = torch.tensor(p)
        input_ids[i, P : P + len(r)] = torch.tensor(r)
        resp[i, : len(r)] = torch.tensor(r)
        attention_mask[i, P - len(p) : P + len(r)] = 1
        response_mask[i, P : P + len(r)] = 1
    position_ids = torch.clamp(torch.cumsum(attention_mask, dim=-1) - 1, min=0)
    score_t = torch.tensor(scores, dtype=torch.float32)
    batch = DataProto.from_dict(
        tensors={
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "responses": resp,
            "response_mask": response_mask,
            "scores": score_t,
            "response_level_rewards": score_t.clone(),
        },
        non_tensors={k: np.array(v, dtype=object) for k, v in non_tensor.items()},
        meta_info={
            "generation_config": {
                "temperature": 0.99,
                "top_p": 0.99,
                "top_k": 100,
                "max_new_tokens": R,
                "num_return_sequences": N,
                "do_sample": True,
            },
            "global_step": step,
        },
    )
    return batch


def pipeline_config():
    return SimpleNamespace(
        adv_estimator="grpo",
        norm_mean_type=None,
        norm_std_type=None,
        reward_clip=None,
        advantage_clip=None,
        whiten_advantages=False,
        whiten_rewards=False,
        gamma=1,
        lambd=0.95,
        kl_penalty="kl",
        add_token_level_kl=False,
        init_kl_coef=0.2,
        target_kl=None,
        kl_horizon=10000,
        max_len_mask=False,
        difficulty_mask=False,
        error_max_len_clip=False,
        error_max_len_threshold=9999999999,
        difficulty_low_threshold=0.1,
        difficulty_high_threshold=0.95,
        actor_infer=SimpleNamespace(generating_args=SimpleNamespace(num_return_sequences=N)),
        is_pure_opd=False,
        use_opd=False,
    )


def roll_grpo(ns, batch):
    """rlvr_pipeline.py L570-727 on the dumped batch, with ROLL's functions (one domain)."""
    import torch

    b = batch  # the pipeline continues with the same object after the dump
    b.batch["prompt_id"] = torch.arange(b.batch.batch_size[0])
    b.batch["old_log_probs"] = torch.zeros_like(b.batch["attention_mask"][:, 1:])  # no recompute
    b.batch["ref_log_probs"] = b.batch["old_log_probs"].clone()  # enable_reference=False
    b.reorder(indices=torch.argsort(b.batch["prompt_id"]))
    cfg = pipeline_config()
    kl_ctrl = ns["get_kl_controller"](
        init_kl_coef=cfg.init_kl_coef, target_kl=cfg.target_kl, kl_horizon=cfg.kl_horizon
    )
    b, _ = ns["get_sample_level_mask"](b, cfg)
    b, _ = ns["reward_postprocess"](b, cfg, {})
    b, _ = ns["compute_token_reward"](b, cfg, kl_ctrl)
    final_response_mask = b.batch["final_response_mask"].clone()
    b = ns["compute_advantage"](
        data=b,
        gamma=cfg.gamma,
        lambd=cfg.lambd,
        adv_estimator=cfg.adv_estimator,
        advantage_clip=cfg.advantage_clip,
        whiten_advantages=cfg.whiten_advantages,
        whiten_rewards=cfg.whiten_rewards,
        response_mask=final_response_mask,
        pipeline_config=cfg,
    )
    adv = b.batch["advantages"]
    first = final_response_mask.argmax(dim=1)
    return [float(adv[i, first[i]]) for i in range(adv.shape[0])]


def _d(text):
    """A description written as a wrapped paragraph, stored as one line."""
    return " ".join(text.split())


def versions():
    dists = ("verl", "torch", "transformers", "tokenizers", "tensordict", "numpy", "codetiming")
    found = dumpkit.installed_versions(dists)
    return {"roll": ROLL_COMMIT, **found, "python": platform.python_version()}


def main():
    ap = argparse.ArgumentParser(
        description="Write real ROLL RLVR rollout dumps as advcli test fixtures."
    )
    ap.add_argument("outdir")
    ap.add_argument("--roll-src", required=True, help="a bare git clone of alibaba/ROLL")
    ap.add_argument(
        "--fixtures",
        default=os.path.join(
            os.path.dirname(os.path.dirname(_HERE)), "tests", "fixtures", "real", "roll"
        ),
    )
    args = ap.parse_args()
    import numpy as np
    import torch

    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    outdir = os.path.abspath(args.outdir)
    sha, ns = load_roll(args.roll_src, os.path.join(outdir, "src"))
    work = os.path.join(outdir, "default")
    if os.path.exists(work):
        shutil.rmtree(work)
    dump_dir = os.path.join(work, "dump")  # rollout_dump_dir must be absolute (json_checker)
    tokenizer = build_tokenizer(os.path.join(work, "tokenizer"))
    rng = random.Random(SEED)
    rows_all = dataset_rows()
    truth_rows, files = [], {}
    for step in range(STEPS):  # ROLL's global_step starts at 0
        step_rows = rows_all[step * PROMPTS_PER_STEP : (step + 1) * PROMPTS_PER_STEP]
        batch = make_batch(step_rows, tokenizer, rng, step)
        ns["dump_rollout_to_specific_path"](dump_dir, step, batch, tokenizer)
        for p in multiprocessing.active_children():  # the writer is a daemon process: wait for it
            p.join()
        name = f"rollout_dump_data.step_{step}.jsonl"
        with open(os.path.join(dump_dir, name)) as f:
            text = f.read()
        obj = json.loads(text)
        assert text.count("\n") == 1 and len(obj["responses"]) == len(batch)
        adv = roll_grpo(ns, batch)
        files[name] = {
            "lines": 1,
            "objects": 1,
            "rows": len(obj["responses"]),
            "keys": list(obj.keys()),
        }
        for i in range(len(obj["responses"])):
            truth_rows.append(
                {
                    "file": name,
                    "line": 1,
                    "position": i,
                    "id": obj["id"][i],
                    "group": i // N,
                    "score": float(batch.batch["scores"][i]),
                    "grpo_advantage": adv[i],
                }
            )
    truth = {
        "made_by": "tools/dumps/roll.py",
        "framework": f"ROLL @ {sha}",
        "versions": versions(),
        "case": "default",
        "description": _d(
            """ROLL RLVR pipeline dump (pipeline_config.rollout_dump_dir, absolute path): one file
            per step, global_step 0 and 1, each ONE line holding ONE JSON object whose values
            are column lists (the dataset columns among COLUMMNS_CONFIG, then responses, scores,
            sampling_params = json.dumps of the batch meta_info repeated per row, global_step).
            4 prompts x num_return_sequences=4 per step; a prompt's 4 rows are contiguous,
            prompts in completion order (not dataset order). The group id is 'id'. 'scores' are
            float32 tensor values via .tolist(). grpo_advantage is ROLL's own
            (adv_estimator=grpo: reward_postprocess forces norm_mean_type=norm_std_type='group',
            i.e. (r - mean) / (std + 1e-6) over consecutive blocks of num_return_sequences rows,
            unbiased torch.std; then compute_token_reward/compute_advantage with gamma=1, no
            whitening/clipping). ROLL groups by position (reshape(-1, n)), not by 'id'; here
            both agree. Rows in truth.json are per position in the column lists ('position',
            0-based)."""
        ),
        "settings": {
            "num_return_sequences": N,
            "prompts_per_step": PROMPTS_PER_STEP,
            "steps": [0, 1],
            "adv_estimator": "grpo",
            "whiten_advantages": False,
            "advantage_clip": None,
            "reward_clip": None,
            "add_token_level_kl": False,
            "domain": "math_rule",
        },
        "seed": SEED,
        "files": files,
        "rows": truth_rows,
    }
    dest = os.path.join(args.fixtures, "default")
    if os.path.exists(dest):
        shutil.rmtree(dest)
    os.makedirs(dest)
    for name in files:
        shutil.copyfile(os.path.join(dump_dir, name), os.path.join(dest, name))
    with open(os.path.join(dest, "truth.json"), "w") as fh:
        json.dump(truth, fh, indent=1)
        fh.write("\n")
    print("[roll.py] default: " + ", ".join(f"{n} ({v['rows']} rows)" for n, v in files.items()))


if __name__ == "__main__":
    main()
