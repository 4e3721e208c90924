"""Token ids made from a text log with ``--tokenizer``: worked examples with a word-level
tokenizer built here (word k of the vocabulary has id k), driven through the command line."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from advcli.io.retokenize import load_tokenizer
from tests.conftest import run, write_jsonl

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

SPECIAL = ["<unk>", "<eos>", "<|user|>", "<|assistant|>", "<|tool|>"]
WORDS = ["what", "is", "two", "plus", "four", "six", "call", "calc", "result"]
VOCAB = {w: i for i, w in enumerate(SPECIAL + WORDS)}
USER = [{"role": "user", "content": "what"}]
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)


def ids(text: str) -> list[int]:
    return [VOCAB[w] for w in text.split()]


def model_folder(
    path: Path, template: str | None = TEMPLATE, *, file_template: bool = False
) -> Path:
    """A model folder: tokenizer.json, and the chat template in tokenizer_config.json (or in
    chat_template.jinja)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    path.mkdir()
    tokenizer = Tokenizer(models.WordLevel(VOCAB, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(SPECIAL)
    tokenizer.save(str(path / "tokenizer.json"))
    config: dict[str, str] = {"eos_token": "<eos>"}
    if template is not None and not file_template:
        config["chat_template"] = template
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    if template is not None and file_template:
        (path / "chat_template.jinja").write_text(template)
    return path


def annotated(tmp_path: Path, rows: list[dict], *args: str) -> list[dict]:
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    out = tmp_path / "out.parquet"
    proc = run("annotate", log, "--method", "reinforce-pp", "--out", out, *args)
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"token ids made from the text" in proc.stderr
    return pq.read_table(out).to_pylist()


def test_text_prompt_and_completion(tmp_path):
    folder = model_folder(tmp_path / "model")
    rows = [
        {"prompt_id": "q", "reward": float(r), "prompt": "what is two plus four", "completion": c}
        for r, c in ((1, "six"), (0, "two four"))
    ]
    got = annotated(tmp_path, rows, "--tokenizer", str(folder))
    assert got[0]["input_ids"] == ids("what is two plus four six")
    assert got[0]["action_mask"] == [0, 0, 0, 0, 0, 1]
    assert got[1]["input_ids"] == ids("what is two plus four two four")
    assert got[1]["action_mask"] == [0] * 5 + [1, 1]


@pytest.mark.parametrize("file_template", [False, True], ids=["config", "jinja-file"])
def test_chat_prompt_through_the_template(tmp_path, file_template):
    folder = model_folder(tmp_path / "model", file_template=file_template)
    prompt = [{"role": "user", "content": "what is two plus four"}]
    answer = [{"role": "assistant", "content": "six"}]
    rows = [{"prompt_id": "q", "reward": float(i), "prompt_messages": prompt,
             "completion_messages": answer} for i in range(2)]  # fmt: skip
    got = annotated(tmp_path, rows, "--tokenizer", str(folder))
    # the generation prompt: "<|user|> what is two plus four <|assistant|>"
    assert got[0]["input_ids"] == ids("<|user|> what is two plus four <|assistant|> six")
    assert got[0]["action_mask"] == [0] * 7 + [1]


def test_a_tool_message_is_an_observation(tmp_path):
    """Assistant, tool, assistant: each message rendered after the ones before; the tool's
    message and the template's markers around it (the next assistant turn it opens) are
    observations, the assistant messages actions (the last one its content alone)."""
    folder = model_folder(tmp_path / "model")
    completion = [
        {"role": "assistant", "content": "call calc"},
        {"role": "tool", "content": "six"},
        {"role": "assistant", "content": "result six"},
    ]
    rows = [{"prompt_id": "q", "reward": float(i), "prompt_messages": USER,
             "completion_messages": completion} for i in range(2)]  # fmt: skip
    got = annotated(tmp_path, rows, "--tokenizer", str(folder))
    want = "<|user|> what <|assistant|> call calc <|tool|> six <|assistant|> result six"
    assert got[0]["input_ids"] == ids(want)
    assert got[0]["action_mask"] == [0, 0, 0, 1, 1, 0, 0, 0, 1, 1]


def test_eos_appended_where_the_logged_length_counts_it(tmp_path):
    """verl's response_length counts the EOS the decoded text dropped: a row one token short
    gets it back; a row that matches stays as it is."""
    folder = model_folder(tmp_path / "model")
    rows = [
        {"prompt_id": "q", "reward": 1.0, "input": "what", "output": "six", "response_length": 2},
        {"prompt_id": "q", "reward": 0.0, "input": "what", "output": "two four",
         "response_length": 2},
    ]  # fmt: skip
    got = annotated(tmp_path, rows, "--tokenizer", str(folder))
    assert got[0]["input_ids"] == ids("what six <eos>")
    assert got[0]["action_mask"] == [0, 1, 1]
    assert got[1]["input_ids"] == ids("what two four")
    meta = json.loads(pq.read_metadata(tmp_path / "out.parquet").metadata[b"advcli"])
    assert meta["retokenized"]["eos_appended"] == 1
    assert meta["retokenized"]["differ"] == 0


def test_too_many_rows_off_the_logged_length_are_refused(tmp_path):
    folder = model_folder(tmp_path / "model")
    rows = [
        {"prompt_id": "q", "reward": float(i), "input": "what", "output": "six",
         "response_length": 5} for i in range(2)
    ]  # fmt: skip
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    out = tmp_path / "out.parquet"
    proc = run("annotate", log, "--method", "grpo", "--out", out, "--tokenizer", folder)
    assert proc.returncode == 1
    err = proc.stderr.decode()
    assert err.count("\n") == 1
    assert "line 1, column 'response_length'" in err and "--max-retokenize-mismatch 0.05" in err
    assert not out.exists()
    proc = run("annotate", log, "--method", "grpo", "--out", out, "--tokenizer", folder,
               "--max-retokenize-mismatch", "1")  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"2 of 2 rows differ" in proc.stderr


def test_the_output_records_the_tokenizers_sha256(tmp_path):
    folder = model_folder(tmp_path / "model")
    rows = [{"prompt_id": "q", "reward": float(i), "prompt": "what", "completion": "six"}
            for i in range(2)]  # fmt: skip
    annotated(tmp_path, rows, "--tokenizer", str(folder / "tokenizer.json"))
    meta = json.loads(pq.read_metadata(tmp_path / "out.parquet").metadata[b"advcli"])
    want = hashlib.sha256((folder / "tokenizer.json").read_bytes()).hexdigest()
    assert meta["tokenizer_sha256"] == want
    assert load_tokenizer(folder).sha256 == want  # the folder's tokenizer.json, the same


def test_a_text_log_without_a_tokenizer_names_the_option(tmp_path):
    rows = [{"prompt_id": "q", "reward": float(i), "prompt": "what", "completion": "six"}
            for i in range(2)]  # fmt: skip
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    out = tmp_path / "o.parquet"
    proc = run("annotate", log, "--method", "reinforce-pp", "--out", out)
    assert proc.returncode == 1
    assert "Hint: make them from the text with --tokenizer PATH" in proc.stderr.decode()
    folder = model_folder(tmp_path / "model")  # the hint followed
    proc = run("annotate", log, "--method", "reinforce-pp", "--out", out, "--tokenizer", folder)
    assert proc.returncode == 0, proc.stderr.decode()
    assert pq.read_table(out).column("input_ids").to_pylist() == [ids("what six")] * 2


@pytest.mark.parametrize("kind", ["nothing", "empty folder", "not a tokenizer"])
def test_a_tokenizer_path_that_is_not_one_is_one_line(tmp_path, kind):
    rows = [{"prompt_id": "q", "reward": float(i), "prompt": "what", "completion": "six"}
            for i in range(2)]  # fmt: skip
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    given = tmp_path / "tok"
    if kind == "empty folder":
        given.mkdir()
    if kind == "not a tokenizer":
        given.write_text("{}")
    out = tmp_path / "o.parquet"
    proc = run("annotate", log, "--method", "grpo", "--out", out, "--tokenizer", given)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and err.count("\n") == 1, err
    assert err.startswith(f"advcli: error: --tokenizer {given}: ")
    said = {
        "nothing": "no such file or folder",
        "empty folder": "a folder without a tokenizer.json",
        "not a tokenizer": "not a tokenizer.json the tokenizers library reads",
    }[kind]
    assert said in err
    assert not out.exists()


def test_a_log_with_token_ids_refuses_a_tokenizer(tmp_path):
    folder = model_folder(tmp_path / "model")
    rows = [{"prompt_id": "q", "reward": float(i), "input_ids": [1, 2], "action_mask": [0, 1],
             "prompt": "what", "completion": "six"} for i in range(2)]  # fmt: skip
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    proc = run("annotate", log, "--method", "grpo", "--out", tmp_path / "o.parquet",
               "--tokenizer", folder)  # fmt: skip
    assert proc.returncode == 2
    assert "the log has token ids ('input_ids')" in proc.stderr.decode()


def test_the_template_runs_sandboxed(tmp_path):
    """A chat template cannot reach Python's objects (a model folder is input: no file ever
    runs code): refused in one line naming the row."""
    folder = model_folder(
        tmp_path / "model", "{{ messages.__class__.__mro__[1].__subclasses__() }}"
    )
    rows = [{"prompt_id": "q", "reward": float(i), "prompt_messages": USER,
             "completion": "six"} for i in range(2)]  # fmt: skip
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    proc = run("annotate", log, "--method", "grpo", "--out", tmp_path / "o.parquet",
               "--tokenizer", folder)  # fmt: skip
    err = proc.stderr.decode()
    assert proc.returncode == 1 and err.count("\n") == 1, err
    assert "line 1, column 'prompt_messages': the chat template" in err and "fails on it" in err


def test_chat_messages_without_a_template_are_refused(tmp_path):
    folder = model_folder(tmp_path / "model", None)
    rows = [{"prompt_id": "q", "reward": float(i), "prompt_messages": USER,
             "completion": "six"} for i in range(2)]  # fmt: skip
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    proc = run("annotate", log, "--method", "grpo", "--out", tmp_path / "o.parquet",
               "--tokenizer", folder)  # fmt: skip
    assert proc.returncode == 2
    assert "has no chat template" in proc.stderr.decode()


TRL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "trl"


@pytest.mark.parametrize("case", ["chat_ids", "tools_ids", "completion_ids_logged"])
def test_trl_dumps_give_the_ids_trl_generated(tmp_path, case):
    """TRL 1.16's own runs (tools/dumps/trl_tokens.py), with the tokenizer each used: the
    prompt's ids are the ones TRL generated from, the completion's the ones it sampled but
    for the EOS its decoded text dropped (TRL logs no length to restore it); a logged
    `completion_ids` column gives them all; tool results are observations, as TRL's tool mask
    has them."""
    folder = TRL / case
    out = tmp_path / "out.parquet"
    proc = run("annotate", folder / "completions", "--from", "trl", "--tokenizer",
               folder / "tokenizer", "--method", "reinforce-pp", "--out", out)  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    generated = json.loads((folder / "generated_ids.json").read_text())
    want = [row for name in sorted(generated) for row in generated[name]]
    got = pq.read_table(out).to_pylist()
    assert len(got) == len(want) == 72
    eos = load_tokenizer(folder / "tokenizer").eos_id
    logged = case == "completion_ids_logged"
    for row, (g, w) in enumerate(zip(got, want, strict=True)):
        n = len(w["prompt_ids"])
        assert g["input_ids"][:n] == w["prompt_ids"], row
        sampled = w["completion_ids"]
        if w["eos"] and not logged:
            assert sampled[-1] == eos
            sampled = sampled[:-1]
        assert g["input_ids"][n:] == sampled, row
        assert g["action_mask"] == [0] * n + (w["tool_mask"] or [1] * len(sampled))[: len(sampled)]


VERL = TRL.parent / "verl" / "tokens"


def test_a_verl_dump_gives_the_response_ids_verl_generated(tmp_path):
    """verl 0.9.1's own rollout dump (tools/dumps/verl_tokens.py) with the tokenizer the run
    used: every response's ids are the ones verl generated, but for the end-of-turn token its
    decoded text dropped; the prompt, decoded without its special tokens, cannot give the
    template's markers back (``gen_batch.dp`` holds the exact ids)."""
    out = tmp_path / "out.parquet"
    proc = run("annotate", VERL / "rollout", "--from", "verl", "--tokenizer", VERL / "tokenizer",
               "--method", "reinforce-pp", "--out", out)  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    generated = json.loads((VERL / "generated_ids.json").read_text())
    want = [row for name in sorted(generated) for row in generated[name]]
    got = pq.read_table(out).to_pylist()
    end = load_tokenizer(VERL / "tokenizer").tokenizer.token_to_id("<|im_end|>")
    cut = 0
    for g, w in zip(got, want, strict=True):
        first = g["action_mask"].index(1)
        response = w["response_ids"]
        if response[-1] == end:
            response, cut = response[:-1], cut + 1
        assert g["input_ids"][first:] == response
        assert g["input_ids"][:first] != w["prompt_ids"]  # its <|im_start|> markers are lost
    assert len(got) == 32 and 0 < cut < 32


def test_a_verl_text_dump_shards_in_verls_layout(tmp_path):
    out = tmp_path / "shards"
    proc = run("shard", VERL / "rollout", "--from", "verl", "--tokenizer", VERL / "tokenizer",
               "--method", "grpo", "--layout", "verl", "--out", out)  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    assert run("verify", out).returncode == 0
    meta = json.loads(pq.read_metadata(out / "part-00000.parquet").metadata[b"advcli"])
    want = hashlib.sha256((VERL / "tokenizer" / "tokenizer.json").read_bytes()).hexdigest()
    assert meta["tokenizer_sha256"] == want


def test_a_trl_text_dump_is_scored_by_a_critic_then_gae_runs(tmp_path):
    """score --from trl --tokenizer: the critic's values over the ids made from the text, the
    same as scoring a log that holds those ids; GAE then runs on the scored dump."""
    folder = TRL / "chat_ids"
    critic = Path(__file__).resolve().parents[2] / "sample_data" / "critic.onnx"
    scored, annotated_ = tmp_path / "scored.parquet", tmp_path / "ids.parquet"
    proc = run("score", folder / "completions", "--from", "trl", "--tokenizer",
               folder / "tokenizer", "--critic", critic, "--out", scored)  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"token ids made from the text" in proc.stderr
    proc = run("annotate", folder / "completions", "--from", "trl", "--tokenizer",
               folder / "tokenizer", "--method", "grpo", "--out", annotated_)  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    again = tmp_path / "again.parquet"
    ids = pq.read_table(annotated_, columns=["prompt_id", "reward", "input_ids", "action_mask"])
    pq.write_table(ids, tmp_path / "ids-only.parquet")
    proc = run("score", tmp_path / "ids-only.parquet", "--critic", critic, "--out", again)
    assert proc.returncode == 0, proc.stderr.decode()
    got = pc.list_flatten(pq.read_table(scored).column("values")).to_numpy()
    np.testing.assert_array_equal(got, pc.list_flatten(pq.read_table(again).column("values")))
    meta = json.loads(pq.read_metadata(scored).metadata[b"advcli"])
    assert meta["tokenizer_sha256"] == load_tokenizer(folder / "tokenizer").sha256
    gae = tmp_path / "gae.parquet"
    proc = run("annotate", scored, "--method", "gae", "--convention", "verl", "--out", gae)
    assert proc.returncode == 0, proc.stderr.decode()
