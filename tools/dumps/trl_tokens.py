"""Write real TRL GRPO completion dumps with the token ids TRL generated beside them.

Made with TRL 1.16.0, transformers 5.24.0, torch 2.13.0+cpu (the versions are in each case's
truth.json), on CPU, offline, by a real `GRPOTrainer(...).train()` as in `trl.py` (whose reward
functions, recording of reward calls and truth.json this script reuses).

Run (from the repository root, with the framework venv, never as part of CI):

    HF_HUB_OFFLINE=1 /tmp/fw/trl/bin/python tools/dumps/trl_tokens.py OUTDIR [CASE ...]

For every case, `tests/fixtures/real/trl/<case>/` gets:

- `completions/`: the folder TRL wrote, unchanged;
- `tokenizer/`: the tokenizer the run used, as `save_pretrained` wrote it (tokenizer.json,
  tokenizer_config.json, chat_template.jinja);
- `truth.json`: as `trl.py` writes it, plus `tokens` (what this script checked and set);
- `generated_ids.json`: per completions file, one entry per row in file order: `prompt_ids` and
  `completion_ids` as TRL generated them (unpadded), `tool_mask` (0 on tool-result tokens; null
  without tools) and `eos` (the completion's last id is the tokenizer's end-of-sequence).

How the ids are captured: `GRPOTrainer._generate_and_score_completions` returns the generation
batch as padded tensors (prompts padded on the left, completions on the right, with their masks
and, with tools, `tool_mask`); a subclass here keeps each returned batch, unpadded by its masks.
TRL makes one such batch per reward call, rows in the same order, so the row a file logged at
(reward call, position) -- which truth.json's `rows` records -- is that batch's row there.
The script then decodes each row's completion ids with `skip_special_tokens=True` and checks the
text against the completion TRL logged (with tools: every message's text in order).

The tokenizer: word-level (`dumpkit.word_level_tokenizer`) with special tokens `<pad> <eos>
<bos> <unk>`, role markers `<|system|> <|user|> <|assistant|> <|tool|>` and `<tool_call>
</tool_call>`; its chat template starts with the bos token and closes every message with the eos
token, so a completion that ends by itself ends with `<eos>`, which TRL's decoding drops.

Cases:

- `chat_ids`: chat prompts (a system message on every other prompt), a random tiny Qwen2; other
  special tokens than `<eos>` are kept out of the completions (`generation_kwargs`'
  `suppress_tokens`), so decoded text tokenizes back to the ids; some completions end with
  `<eos>`, the rest are cut at max_completion_length.
- `completion_ids_logged`: text prompts; a reward function logs the `completion_ids` TRL passes
  to reward functions with `log_extra("completion_ids", ...)` (TRL's `log_extra` takes any
  per-row values: the lists of ints become a Parquet list<int64> column).
- `tools_ids`: chat prompts and `tools=[square]`. A random model does not call tools, so the
  model is scripted: attention and MLP outputs zeroed (the residual stream is the current token's
  one-hot embedding) and an untied output layer holding log-probabilities of the next token
  given the current one (`SCRIPT`). After `<|assistant|>` it writes, with probability 1/2 each,
  `<tool_call> square x = N </tool_call> <eos>` (N in 2 3 4) or `the answer is W .` (W in yes
  no maybe) then `<eos>` (3/4) or `so` and another answer (1/4). learning_rate 0 keeps the
  script through the steps. TRL parses the tool call with the tokenizer's `response_template`
  (set here, saved with the tokenizer), runs `square`, appends the tool message's tokens
  `<|tool|> N*N <eos> <|assistant|>` (tool_mask 0) and lets the model write on: some rows end
  with a final answer, some with a second tool call whose result would pass
  max_completion_length (TRL drops that result), some are cut. The chat template ignores
  `tools` (no tool list in the prompt), so the prompt ids do not depend on it.
"""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dumpkit  # noqa: E402

dumpkit.leave_folder(__file__)
dumpkit.offline_on_cpu()

import pandas as pd  # noqa: E402
import torch  # noqa: E402


def _load_trl_script():
    """tools/dumps/trl.py as a module (its name is TRL's, so it is loaded by path)."""
    path = Path(__file__).resolve().parent / "trl.py"
    spec = importlib.util.spec_from_file_location("trl_dumps", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


trl_dumps = _load_trl_script()

FIXTURES = trl_dumps.FIXTURES
ROLES = ["<|system|>", "<|user|>", "<|assistant|>", "<|tool|>"]
SPECIAL = [*dumpkit.PAD_EOS_BOS_UNK, *ROLES, "<tool_call>", "</tool_call>"]
WORDS = [*trl_dumps.WORDS, "square", "16", ",", "you", "are", "helpful", "tutor", "be", "brief"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> "
    "{% if m['content'] %}{{ m['content'] }} {% endif %}"
    "{% if m.tool_calls is defined and m.tool_calls %}{% for call in m.tool_calls %}"
    "<tool_call> {{ call['function']['name'] }} "
    "{% for k, v in call['function']['arguments'].items() %}{{ k }} = {{ v }} "
    "{% if not loop.last %}, {% endif %}{% endfor %}</tool_call> {% endfor %}{% endif %}"
    "{{ eos_token }} {% endfor %}{% if add_generation_prompt %}<|assistant|> {% endif %}"
)
# transformers' response parsing for that template: a tool call is `<tool_call> NAME k = v ,
# ... </tool_call>`, the content runs to `<eos>`.
RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|assistant|>",
    "fields": {
        "tool_calls": {
            "open_pattern": r"<tool_call>\s*(?P<name>\w+)",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "kv-lines",
            "content_args": {"line_sep": ",", "kv_sep": "="},
            "transform": {
                "type": "function",
                "function": {"name": "{name}", "arguments": "{content}"},
            },
        },
        "content": {"close_pattern": r"<eos>\s*", "content": "text"},
    },
}

# The scripted model of tools_ids: token -> {next token: probability}; any other token -> <eos>.
SCRIPT = {
    "<|assistant|>": {"<tool_call>": 0.5, "the": 0.5},
    "<tool_call>": {"square": 1.0},
    "square": {"x": 1.0},
    "x": {"=": 1.0},
    "=": {"2": 1 / 3, "3": 1 / 3, "4": 1 / 3},
    "2": {"</tool_call>": 1.0},
    "3": {"</tool_call>": 1.0},
    "4": {"</tool_call>": 1.0},
    "the": {"answer": 1.0},
    "answer": {"is": 1.0},
    "is": {"yes": 1 / 3, "no": 1 / 3, "maybe": 1 / 3},
    "yes": {".": 1.0},
    "no": {".": 1.0},
    "maybe": {".": 1.0},
    ".": {"<eos>": 0.75, "so": 0.25},
    "so": {"the": 1.0},
}
IMPOSSIBLE = -50.0  # log-probability of a next token the script never writes


def square(x: int) -> int:
    """Square a number.

    Args:
        x: The number to square.
    """
    return x * x


def save_tokenizer(folder: Path, with_tools: bool):
    from tokenizers import decoders
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL + WORDS)}
    joins = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    tokenizer = dumpkit.word_level_tokenizer(vocab, SPECIAL, decoder=joins, padding_side="left")
    tokenizer.chat_template = CHAT_TEMPLATE
    if with_tools:
        tokenizer.response_template = RESPONSE_TEMPLATE
    tokenizer.save_pretrained(folder)
    return PreTrainedTokenizerFast.from_pretrained(folder), vocab


def save_random_model(folder: Path, vocab: dict[str, int]) -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    dumpkit.seed_all(0)
    config = dumpkit.tiny_model_config(
        Qwen2Config, vocab, max_position_embeddings=128, initializer_range=0.5
    )
    Qwen2ForCausalLM(config).save_pretrained(folder)


def save_scripted_model(folder: Path, vocab: dict[str, int]) -> None:
    """A Qwen2 whose next-token distribution is SCRIPT[current token] (see the docstring)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    hidden = 96
    assert len(vocab) <= hidden
    dumpkit.seed_all(0)
    config = Qwen2Config(
        vocab_size=len(vocab),
        hidden_size=hidden,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=False,
        max_position_embeddings=128,
        pad_token_id=vocab["<pad>"],
        eos_token_id=vocab["<eos>"],
        bos_token_id=vocab["<bos>"],
    )
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        # embedding = one-hot; the final RMSNorm scales it to sqrt(hidden)
        model.model.embed_tokens.weight.copy_(torch.eye(len(vocab), hidden))
        logp = torch.full((len(vocab), len(vocab)), IMPOSSIBLE)  # [next, current]
        logp[vocab["<eos>"], :] = 0.0
        for current, nexts in SCRIPT.items():
            logp[:, vocab[current]] = IMPOSSIBLE
            for token, p in nexts.items():
                logp[vocab[token], vocab[current]] = math.log(p)
        head = torch.zeros(len(vocab), hidden)
        head[:, : len(vocab)] = logp / math.sqrt(hidden)
        model.lm_head.weight.copy_(head)
    model.generation_config.pad_token_id = vocab["<pad>"]
    model.generation_config.eos_token_id = vocab["<eos>"]
    model.generation_config.bos_token_id = vocab["<bos>"]
    model.save_pretrained(folder)


# --------------------------------------------------------------------------------------------------
# Datasets and reward functions

SYSTEM = "you are a helpful tutor . be brief ."


def chat_dataset(n: int):
    from datasets import Dataset

    def messages(i: int) -> list[dict]:
        user = {"role": "user", "content": trl_dumps.PROMPTS[i % len(trl_dumps.PROMPTS)]}
        return [{"role": "system", "content": SYSTEM}, user] if i % 2 == 0 else [user]

    return Dataset.from_dict(
        {
            "prompt": [messages(i) for i in range(n)],
            "question_id": [f"q{i}" for i in range(n)],
            "kind": ["const" if i == 1 else "plain" for i in range(n)],
        }
    )


@trl_dumps.recorded
def ended_reward(prompts, completions, completion_ids, **kwargs):
    """1.0 for a completion shorter than max_completion_length (it ended by itself); logs the
    completion ids TRL passed as an extra column."""
    kwargs["log_extra"]("completion_ids", [list(ids) for ids in completion_ids])
    limit = trl_dumps.TRAINER.max_completion_length
    return [1.0 if len(ids) < limit else 0.0 for ids in completion_ids]


TWO = trl_dumps.TWO

CASES = {
    "chat_ids": dict(
        description="Chat prompts (a system message on every other prompt, then a user message), "
        "single-turn completions of at most 8 tokens from a random tiny Qwen2; special tokens "
        "other than <eos> suppressed in generation. The chat template closes each message with "
        "<eos>: completions that end by themselves end with <eos> (dropped from the logged text "
        "by TRL's skip_special_tokens decoding), the others are cut at max_completion_length.",
        config={},
        funcs=TWO,
        train=lambda: chat_dataset(6),
        model="random",
        tools=None,
    ),
    "completion_ids_logged": dict(
        description="Text prompts; a third reward function (ended_reward: 1.0 when the completion "
        "is shorter than max_completion_length) also calls log_extra('completion_ids', ...) with "
        "the completion_ids TRL passes to reward functions, so TRL writes a completion_ids column "
        "(list<int64>, EOS included where generated) between the reward columns and advantage.",
        config={},
        funcs=[*TWO, ended_reward],
        train=lambda: trl_dumps.text_dataset(6),
        model="random",
        tools=None,
    ),
    "tools_ids": dict(
        description="Chat prompts with tools=[square]; a scripted model (see the script's "
        "docstring) answers or calls square, TRL runs the tool, appends its message and "
        "generates on. Logged completions are message lists: assistant (with tool_calls), "
        "tool (name, content), assistant; max_completion_length=20 counts the tool tokens too. "
        "learning_rate=0 keeps the script.",
        config=dict(max_completion_length=20, learning_rate=0.0),
        funcs=TWO,
        train=lambda: chat_dataset(6),
        model="scripted",
        tools=[square],
    ),
}

SUPPRESSED = [s for s in SPECIAL if s != "<eos>"]  # never generated by the random models


# --------------------------------------------------------------------------------------------------
# The ids TRL generated


GENERATED: list[list[dict]] = []  # per generation batch (= reward call), per row


def recording_trainer_class():
    from trl import GRPOTrainer

    class RecordingGRPOTrainer(GRPOTrainer):
        """Keeps each generation batch TRL makes, unpadded."""

        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            eos = self.processing_class.eos_token_id
            rows = []
            for i in range(out["prompt_ids"].shape[0]):
                keep_p = out["prompt_mask"][i].bool()
                keep_c = out["completion_mask"][i].bool()
                completion = out["completion_ids"][i][keep_c].tolist()
                tool_mask = out.get("tool_mask")
                rows.append(
                    {
                        "prompt_ids": out["prompt_ids"][i][keep_p].tolist(),
                        "completion_ids": completion,
                        "tool_mask": None if tool_mask is None else tool_mask[i][keep_c].tolist(),
                        "eos": bool(completion) and completion[-1] == eos,
                    }
                )
            GENERATED.append(rows)
            return out

    return RecordingGRPOTrainer


def message_text(message: dict) -> str:
    """The words of a logged message as the template writes them (special tokens left out)."""
    parts = [message["content"]] if message.get("content") else []
    for call in message.get("tool_calls") or []:
        args = " , ".join(
            f"{k} = {v}" for k, v in call["function"]["arguments"].items() if v is not None
        )
        parts.append(f"{call['function']['name']} {args}")
    return " ".join(parts)


def check_row(tokenizer, row: dict, prompt, completion) -> None:
    """The generated ids decode to what TRL logged for the row."""
    ids, mask = row["completion_ids"], row["tool_mask"]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    if isinstance(completion, str):  # a text prompt's completion
        expected = completion
    else:
        expected = " ".join(t for t in (message_text(m) for m in completion) if t)
    assert text == expected, (text, expected)
    if mask is not None:
        tool_ids = [t for t, m in zip(ids, mask, strict=True) if m == 0]
        tools_text = " ".join(m["content"] for m in completion if m["role"] == "tool")
        assert tokenizer.decode(tool_ids, skip_special_tokens=True) == tools_text
    if isinstance(prompt, str):
        expected_ids = tokenizer(prompt)["input_ids"]
    else:
        expected_ids = tokenizer.apply_chat_template(
            prompt, add_generation_prompt=True, tokenize=True, return_dict=False
        )
    assert expected_ids == row["prompt_ids"], (expected_ids, row["prompt_ids"])


def generated_for_files(truth: dict, comp_dir: Path, tokenizer) -> tuple[dict, int]:
    files, checked = {}, 0
    for rel, rows in truth["rows"].items():
        df = pd.read_parquet(comp_dir / Path(rel).name)
        entries = []
        for i, origin in enumerate(rows):
            row = GENERATED[origin["reward_call"]][origin["position_in_call"]]
            check_row(
                tokenizer, row, _plain(df["prompt"].iloc[i]), _plain(df["completion"].iloc[i])
            )
            checked += 1
            entries.append(row)
        files[Path(rel).name] = entries
    return files, checked


def _plain(value):
    """A Parquet value as Python lists and dicts (pandas gives numpy arrays of dicts)."""
    if hasattr(value, "tolist") and not isinstance(value, str):
        value = value.tolist()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


# --------------------------------------------------------------------------------------------------


def run_case(case: str, outdir: Path, versions: dict) -> None:
    from trl import GRPOConfig

    spec = CASES[case]
    trl_dumps.CALLS.clear()
    GENERATED.clear()
    tok_dir = outdir / case / "tokenizer"
    model_dir = outdir / case / "model"
    for d in (tok_dir, model_dir):
        if d.exists():
            shutil.rmtree(d)
    tokenizer, vocab = save_tokenizer(tok_dir, with_tools=spec["tools"] is not None)
    if spec["model"] == "random":
        save_random_model(model_dir, vocab)
    else:
        save_scripted_model(model_dir, vocab)

    dumpkit.seed_all(0)
    run_dir = outdir / "runs" / case
    if run_dir.exists():
        shutil.rmtree(run_dir)
    cfg = dict(trl_dumps.BASE)
    cfg.update(spec["config"])
    if spec["model"] == "random":
        cfg["generation_kwargs"] = {"suppress_tokens": [vocab[s] for s in SUPPRESSED]}
    cfg["output_dir"] = str(run_dir)
    args = GRPOConfig(**cfg)
    trainer = recording_trainer_class()(
        model=str(model_dir),
        processing_class=tokenizer,
        reward_funcs=spec["funcs"],
        args=args,
        train_dataset=spec["train"](),
        tools=spec["tools"],
    )
    trl_dumps.TRAINER = trainer
    try:
        trainer.train()
    finally:
        trl_dumps.TRAINER = None
    assert len(GENERATED) == len(trl_dumps.CALLS), (len(GENERATED), len(trl_dumps.CALLS))

    comp_dir = run_dir / "completions"
    truth = trl_dumps.derive_truth(case, spec, trainer, args, comp_dir, versions)
    truth["made_by"] = "tools/dumps/trl_tokens.py"
    generated, checked = generated_for_files(truth, comp_dir, tokenizer)
    rows = [r for entries in generated.values() for r in entries]
    truth["tokens"] = {
        "tokenizer": "tokenizer/ (save_pretrained of the tokenizer passed as processing_class)",
        "generation_kwargs": args.generation_kwargs,
        "tools": [t.__name__ for t in spec["tools"] or []],
        "rows_checked": checked,
        "rows_ending_with_eos": sum(r["eos"] for r in rows),
        "rows_with_tool_tokens": sum(
            r["tool_mask"] is not None and 0 in r["tool_mask"] for r in rows
        ),
        "check": "per row of every file: the completion ids TRL generated, decoded with "
        "skip_special_tokens=True, give the logged completion (chat: the messages' text in "
        "order, a tool call as 'NAME k = v'), the ids under tool_mask 0 decode to the tool "
        "messages' content, and a chat prompt rendered with the tokenizer's chat template "
        "(add_generation_prompt=True) gives the prompt ids",
    }

    dest = FIXTURES / case
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(comp_dir, dest / "completions")
    shutil.copytree(tok_dir, dest / "tokenizer")
    (dest / "truth.json").write_text(
        json.dumps(truth, indent=1, default=trl_dumps.jsonable, allow_nan=False) + "\n"
    )
    (dest / "generated_ids.json").write_text(
        json.dumps(generated, separators=(",", ":")).replace('},{"prompt_ids"', '},\n{"prompt_ids"')
        + "\n"
    )
    print(
        f"[{case}] {checked} rows checked, {truth['tokens']['rows_ending_with_eos']} end with eos, "
        f"{truth['tokens']['rows_with_tool_tokens']} with tool tokens; advantage check "
        f"{truth['max_abs_diff_trl_advantage_vs_recomputed']:.2e}"
    )


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        sys.exit(__doc__)
    import trl

    if trl.__version__ != "1.16.0":
        sys.exit(f"this script documents TRL 1.16.0, found {trl.__version__}")
    frameworks = ("trl", "transformers", "torch", "accelerate", "datasets")
    dists = (*frameworks, "pandas", "pyarrow", "tokenizers")
    versions = {**dumpkit.installed_versions(dists), "python": sys.version.split()[0]}
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    outdir = Path(argv[1]).resolve()
    for case in argv[2:] or list(CASES):
        run_case(case, outdir, versions)


if __name__ == "__main__":
    main(sys.argv)
