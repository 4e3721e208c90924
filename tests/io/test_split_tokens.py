"""Logs whose tokens come split (prompt_ids + response_ids, optional response_mask): read as
their concatenation, written back in the user's layout."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import advcli
from tests.conftest import run


def logs(seed: int = 0) -> tuple[list[dict], list[dict]]:
    """The same rollouts split, and joined as advcli's schema (some response tokens are a
    tool's output: response_mask 0)."""
    rng = np.random.default_rng(seed)
    split, joined = [], []
    for g in range(4):
        for k in range(4):
            prompt = rng.integers(0, 1000, 2 + g).tolist()
            response = rng.integers(0, 1000, 3 + k).tolist()
            mask = [1] * len(response)
            mask[1] = 0  # an observation inside the response
            reward = float(rng.integers(0, 2))
            split.append({"prompt_id": f"p{g}", "prompt_ids": prompt, "response_ids": response,
                          "response_mask": mask, "reward": reward})  # fmt: skip
            joined.append({"prompt_id": f"p{g}", "input_ids": prompt + response,
                           "action_mask": [0] * len(prompt) + mask, "reward": reward})  # fmt: skip
    return split, joined


@pytest.mark.parametrize("method", ["grpo", "rloo", "reinforce-pp", "remax"])
def test_a_split_log_is_annotated_as_its_concatenation_in_its_own_layout(tmp_path, method):
    split, joined = logs()
    if method == "remax":
        for rows in (split, joined):
            for i, r in enumerate(rows):
                r["baseline_reward"] = float(i % 3) / 2
    pq.write_table(pa.Table.from_pylist(split), tmp_path / "split.parquet")
    pq.write_table(pa.Table.from_pylist(joined), tmp_path / "joined.parquet")
    for name in ("split", "joined"):
        proc = run("annotate", str(tmp_path / f"{name}.parquet"), "--method", method, "-q",
                   "--out", str(tmp_path / f"{name}.out.jsonl"))  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    got = [json.loads(line) for line in (tmp_path / "split.out.jsonl").read_text().splitlines()]
    want = [json.loads(line) for line in (tmp_path / "joined.out.jsonl").read_text().splitlines()]
    assert "input_ids" not in got[0] and "action_mask" not in got[0]
    for g, w, row in zip(got, want, split, strict=True):
        assert g["prompt_ids"] == row["prompt_ids"] and g["response_ids"] == row["response_ids"]
        n = len(row["prompt_ids"])
        for column in ("advantages", "returns"):
            if column in w:
                assert g[column] == w[column][n:]  # over the response tokens only
                assert len(g[column]) == len(row["response_ids"])
        assert g["advantages"][1] == 0.0  # the observation carries no advantage


def test_annotate_table_and_shard_read_the_split_layout(tmp_path):
    split, joined = logs(1)
    a = advcli.annotate_table(pa.Table.from_pylist(split), method="grpo")
    b = advcli.annotate_table(pa.Table.from_pylist(joined), method="grpo")
    assert a.column("advantage").to_pylist() == b.column("advantage").to_pylist()
    pq.write_table(pa.Table.from_pylist(split), tmp_path / "split.parquet")
    pq.write_table(pa.Table.from_pylist(joined), tmp_path / "joined.parquet")
    for name in ("split", "joined"):  # a shard holds the whole sequence, as trainers read it
        advcli.shard(tmp_path / f"{name}.parquet", tmp_path / f"{name}-shards", method="grpo")
    s = pq.read_table(tmp_path / "split-shards")
    j = pq.read_table(tmp_path / "joined-shards")
    for column in ("input_ids", "loss_mask", "advantages"):
        assert s.column(column).to_pylist() == j.column(column).to_pylist()


def test_a_response_mask_that_does_not_fit_is_refused_at_its_row(tmp_path):
    split, _ = logs()
    split[5]["response_mask"] = split[5]["response_mask"][:-1]
    path = tmp_path / "split.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in split))
    proc = run("annotate", str(path), "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 1
    err = proc.stderr.decode()
    assert f"{path}: line 6, column 'response_mask':" in err and "response tokens" in err
    assert err.count("\n") == 1 and not (tmp_path / "o.parquet").exists()


def test_token_columns_of_another_type_are_refused_naming_them(tmp_path):
    split, _ = logs()
    for column, value, kind in (("prompt_ids", [1.5, 2.0], "integer"),
                                ("response_mask", [0.5] * 3, "0/1")):  # fmt: skip
        rows = [{**r, column: value} for r in split]
        path = tmp_path / f"{column}.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path)
        proc = run("annotate", str(path), "--method", "grpo", "--out", str(tmp_path / "o.jsonl"))
        err = proc.stderr.decode()
        assert proc.returncode == 1 and f"column '{column}'" in err and kind in err, err
        assert err.count("\n") == 1


def test_a_critic_scores_the_whole_sequence_of_a_split_log(tmp_path):
    """`score` writes the joined layout (its values line up with `input_ids`); annotating
    that equals `annotate --critic` on the split log, whose advantages cover the response."""
    pytest.importorskip("onnxruntime")
    from bench.critic_model import build_critic, make_weights

    critic = tmp_path / "critic.onnx"
    build_critic(critic, make_weights(vocab=1000, dim=8, hidden=8))
    split, _ = logs(2)
    log = tmp_path / "split.parquet"
    pq.write_table(pa.Table.from_pylist(split), log)
    scored = advcli.score(log, tmp_path / "scored.parquet", str(critic))
    table = pq.read_table(scored.output)
    assert (
        table.column("input_ids").to_pylist()[0]
        == split[0]["prompt_ids"] + split[0]["response_ids"]
    )
    assert [len(v) for v in table.column("values").to_pylist()] == [
        len(r["prompt_ids"]) + len(r["response_ids"]) for r in split
    ]
    gae: dict[str, Any] = {"method": "gae", "gamma": 1.0, "lam": 0.95}
    advcli.annotate(scored.output, tmp_path / "a.parquet", **gae)
    advcli.annotate(log, tmp_path / "b.parquet", critic=advcli.CriticOptions(str(critic)), **gae)
    a, b = pq.read_table(tmp_path / "a.parquet"), pq.read_table(tmp_path / "b.parquet")
    assert "input_ids" not in b.column_names
    for i, row in enumerate(split):
        n = len(row["prompt_ids"])
        assert b.column("advantages")[i].as_py() == a.column("advantages")[i].as_py()[n:]


def test_a_null_token_list_and_a_file_without_a_role_column_are_refused(tmp_path):
    split, _ = logs()
    split[3]["prompt_ids"] = None
    path = tmp_path / "nulls.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in split))
    proc = run("annotate", str(path), "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
    err = proc.stderr.decode()
    assert proc.returncode == 1 and f"{path}: line 4, column 'prompt_ids': null" in err, err
    split, _ = logs()
    pq.write_table(pa.Table.from_pylist(split[:8]), tmp_path / "a.parquet")
    rest = [{k: v for k, v in r.items() if k != "reward"} for r in split[8:]]
    pq.write_table(pa.Table.from_pylist(rest), tmp_path / "b.parquet")
    proc = run("annotate", str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet"),
               "--method", "grpo", "--out", str(tmp_path / "o.parquet"))  # fmt: skip
    err = proc.stderr.decode()
    assert proc.returncode == 1 and "b.parquet: no 'reward' column (reward)" in err, err
    assert err.count("\n") == 1


def test_per_token_columns_cover_the_response_and_an_annotated_split_log_shards(tmp_path):
    """GAE with values over the response equals GAE on the joined log with 0 over the prompt;
    the annotated copy (the user's layout) shards to the same rows as the raw log."""
    split, joined = logs(1)
    rng = np.random.default_rng(2)
    for s, j in zip(split, joined, strict=True):
        values = rng.normal(size=len(s["response_ids"])).round(3).tolist()
        s["values"] = values
        j["values"] = [0.0] * len(s["prompt_ids"]) + values
    pq.write_table(pa.Table.from_pylist(split), tmp_path / "split.parquet")
    pq.write_table(pa.Table.from_pylist(joined), tmp_path / "joined.parquet")
    for name in ("split", "joined"):
        proc = run("annotate", str(tmp_path / f"{name}.parquet"), "--method", "gae", "-q",
                   "--out", str(tmp_path / f"{name}.out.parquet"))  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    got = pq.read_table(tmp_path / "split.out.parquet").to_pylist()
    want = pq.read_table(tmp_path / "joined.out.parquet").to_pylist()
    for g, w, row in zip(got, want, split, strict=True):
        assert g["advantages"] == w["advantages"][len(row["prompt_ids"]) :]
    for name in ("split.parquet", "split.out.parquet"):
        method = ["--method", "gae"] if name == "split.parquet" else []
        proc = run(
            "shard", str(tmp_path / name), *method, "--out", str(tmp_path / f"shards-{name}")
        )
        assert proc.returncode == 0, proc.stderr
    raw, annotated = (pq.read_table(tmp_path / f"shards-{n}")
                      for n in ("split.parquet", "split.out.parquet"))  # fmt: skip
    assert raw.select(["input_ids", "loss_mask", "advantages", "returns"]).equals(
        annotated.select(["input_ids", "loss_mask", "advantages", "returns"])
    )


def test_a_per_token_column_of_neither_length_is_refused_at_its_row(tmp_path):
    split, _ = logs()
    for r in split:
        r["values"] = [0.0] * len(r["response_ids"])
    split[5]["values"] = [0.0]
    pq.write_table(pa.Table.from_pylist(split), tmp_path / "split.parquet")
    proc = run("annotate", str(tmp_path / "split.parquet"), "--method", "gae",
               "--out", str(tmp_path / "out.parquet"))  # fmt: skip
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert "row 5, column 'values': 1 values for 4 response tokens" in err, err
    assert len(err.strip().splitlines()) == 1


def _with_spans(rows: list[dict]) -> list[dict]:
    """The split rows with spans over the whole sequence in place of the response mask."""
    out = []
    for r in rows:
        n, mask = len(r["prompt_ids"]), r["response_mask"]
        spans = [{"start": 0, "end": n, "kind": "prompt"}]
        for i, m in enumerate(mask):
            spans.append({"start": n + i, "end": n + i + 1,
                          "kind": "action" if m else "observation"})  # fmt: skip
        out.append({k: v for k, v in r.items() if k != "response_mask"} | {"spans": spans})
    return out


@pytest.mark.parametrize("method", ["grpo", "reinforce-pp"])
def test_a_split_log_with_spans_gets_per_token_advantages(tmp_path, method):
    """Spans index the whole sequence: the same advantages, per token over the response, as
    the joined log with its action mask."""
    split, joined = logs(3)
    pq.write_table(pa.Table.from_pylist(_with_spans(split)), tmp_path / "spans.parquet")
    pq.write_table(pa.Table.from_pylist(joined), tmp_path / "joined.parquet")
    for name in ("spans", "joined"):
        proc = run("annotate", str(tmp_path / f"{name}.parquet"), "--method", method, "-q",
                   "--out", str(tmp_path / f"{name}.out.parquet"))  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    got = pq.read_table(tmp_path / "spans.out.parquet").to_pylist()
    want = pq.read_table(tmp_path / "joined.out.parquet").to_pylist()
    for g, w, row in zip(got, want, split, strict=True):
        assert g["advantages"] == w["advantages"][len(row["prompt_ids"]) :]
        assert g["advantages"][1] == 0.0  # the observation span


def test_an_action_span_over_a_split_logs_prompt_is_refused(tmp_path):
    """Spans counted from the response's first token would read a prompt's length too early."""
    rows = _with_spans(logs(3)[0])
    rows[2]["spans"] = [{"start": 0, "end": len(rows[2]["response_ids"]), "kind": "action"}]
    path = tmp_path / "spans.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = run("annotate", str(path), "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert err == (
        f"advcli: error: {path}: line 3, column 'spans': the action span starting at 0 lies in "
        "the prompt (2 tokens of 'prompt_ids'): the spans of a split log index the whole "
        "sequence, 'prompt_ids' then 'response_ids'. Hint: count the spans from the prompt's "
        "first token\n"
    )


def test_a_split_log_with_both_a_response_mask_and_spans_is_refused(tmp_path):
    split, _ = logs(3)
    rows = [{**r, "spans": s["spans"]} for r, s in zip(split, _with_spans(split), strict=True)]
    path = tmp_path / "both.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    proc = run("annotate", str(path), "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 1
    assert proc.stderr.decode() == (
        f"advcli: error: {path}: both 'response_mask' and 'spans' say which response tokens "
        "are actions. Hint: keep one of the two columns\n"
    )


def _write(path: Path, rows: list[dict], schema: pa.Schema | None = None) -> Path:
    """``rows`` as Parquet (``schema``: the column types) or JSONL, by the suffix."""
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


def _flat(rows: list[dict]) -> list[dict]:
    return [{"prompt_id": r["prompt_id"], "input_ids": r["prompt_ids"] + r["response_ids"],
             "action_mask": [0] * len(r["prompt_ids"]) + r["response_mask"],
             "reward": r["reward"]} for r in rows]  # fmt: skip


# (column, token, value, problem): a value no id or mask list may hold, in either layout
BAD_TOKENS = [
    ("prompt_ids", 1, None, "token id null at token 1"),
    ("response_ids", 2, None, "token id null at token 2"),
    ("response_mask", 0, None, "mask value null at token 0"),
    ("response_mask", 2, 2, "mask value 2 at token 2; a mask holds only 0 and 1"),
    ("response_mask", 2, 300, "mask value 300 at token 2; a mask holds only 0 and 1"),
    ("response_mask", 2, -1, "mask value -1 at token 2; a mask holds only 0 and 1"),
]
FLAT = {"prompt_ids": "input_ids", "response_ids": "input_ids", "response_mask": "action_mask"}


@pytest.mark.parametrize("layout", ["split", "flat"])
@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
@pytest.mark.parametrize(("column", "token", "value", "problem"), BAD_TOKENS)
def test_a_null_or_a_mask_value_not_0_or_1_inside_a_token_list_is_refused_at_its_row(
    tmp_path, layout, suffix, column, token, value, problem
):
    """Nulls inside id and mask lists, and mask values a narrower type would wrap (300 in an
    int16 mask), are refused at their row, column and token in every layout and format;
    never read as 0, cast, or written as NaN ids."""
    split, _ = logs()
    split[6][column] = list(split[6][column])
    split[6][column][token] = value
    rows, at = split, (column, token)
    if layout == "flat":
        rows = _flat(split)
        shift = len(split[6]["prompt_ids"]) if column != "prompt_ids" else 0
        at = (FLAT[column], token + shift)
        problem = problem.replace(f"at token {token}", f"at token {token + shift}")
    narrow = pa.list_(pa.int16()) if suffix == ".parquet" else None
    schema = None
    if narrow is not None:  # the mask's narrowest integer type that holds every value
        schema = pa.Table.from_pylist(rows).schema
        schema = schema.set(schema.get_field_index(at[0]), pa.field(at[0], narrow))
    log = _write(tmp_path / f"log{suffix}", rows, schema)
    row = "line 7" if suffix == ".jsonl" else "row 6"
    for command in (["annotate", "--method", "grpo"], ["shard", "--method", "grpo"]):
        out = tmp_path / ("o.parquet" if command[0] == "annotate" else "shards")
        proc = run(command[0], str(log), *command[1:], "--out", str(out))
        err = proc.stderr.decode()
        assert proc.returncode == 1, err
        assert err.startswith(f"advcli: error: {log}: {row}, column '{at[0]}': {problem}."), err
        assert err.count("\n") == 1 and not out.exists()


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_ids_of_mixed_integer_widths_are_joined_without_changing_one(tmp_path, suffix):
    """int64 prompt ids beside int32 response ids: joined as int64 (never cast down, where
    4294967308 would read 12), in the shards and what a critic reads."""
    split, _ = logs()
    big = 2**32 + 12
    for r in split:
        r["prompt_ids"][0] = big
    schema = pa.Table.from_pylist(split).schema
    schema = schema.set(schema.get_field_index("response_ids"),
                        pa.field("response_ids", pa.list_(pa.int32())))  # fmt: skip
    log = _write(tmp_path / f"log{suffix}", split, schema)
    proc = run("shard", str(log), "--method", "grpo", "--out", str(tmp_path / "shards"))
    assert proc.returncode == 0, proc.stderr
    got = pq.read_table(tmp_path / "shards").column("input_ids")
    assert got.type.value_type == pa.int64()
    assert got.to_pylist() == [r["prompt_ids"] + r["response_ids"] for r in split]


def test_negative_and_unsigned_ids_beyond_int64_are_refused_in_the_column_that_holds_them(
    tmp_path,
):
    split, _ = logs()
    schema = pa.Table.from_pylist(split).schema
    for column, value, problem in (("prompt_ids", 2**64 - 1, "is beyond int64"),
                                   ("response_ids", 3, "is negative")):  # fmt: skip
        rows = [dict(r) for r in split]
        rows[4] = {**rows[4], column: [value, *rows[4][column][1:]]}
        kind = pa.uint64() if value > 2**63 else pa.int64()
        if column == "response_ids":
            rows[4][column][0] = -value
        typed = schema.set(schema.get_field_index(column), pa.field(column, pa.list_(kind)))
        log = _write(tmp_path / f"{column}.parquet", rows, typed)
        proc = run("annotate", str(log), "--method", "grpo", "--out", str(tmp_path / "o.jsonl"))
        err = proc.stderr.decode()
        assert proc.returncode == 1 and f"row 4, column '{column}': token id" in err, err
        assert f"{problem} at token 0" in err and err.count("\n") == 1


@pytest.mark.parametrize(("method", "values"), [("grpo", False), ("gae", True)])
def test_an_annotated_split_log_annotated_again_keeps_the_users_layout(tmp_path, method, values):
    """The second annotate writes what the first wrote: advcli's columns over the response
    (not over the whole sequence because the input already had them), and the per-token
    columns it passes through as they came (over the response, or whole where the prompt
    part holds values)."""
    split, _ = logs(4)
    rng = np.random.default_rng(0)
    for i, r in enumerate(split):
        n, m = len(r["prompt_ids"]), len(r["response_ids"])
        r["old_logprobs"] = (-rng.random(m if i % 2 else n + m)).round(3).tolist()
        if values:
            r["values"] = rng.normal(size=m).round(3).tolist()
    split[0]["old_logprobs"][0] = None  # a null inside a list passed through stays null
    log = _write(tmp_path / "split.parquet", split)
    first, second = tmp_path / "first.parquet", tmp_path / "second.parquet"
    for given, out in ((log, first), (first, second)):
        proc = run("annotate", str(given), "--method", method, "-q", "--out", str(out))
        assert proc.returncode == 0, proc.stderr
    a, b = pq.read_table(first), pq.read_table(second)
    assert a.column_names == b.column_names
    for name in a.column_names:
        assert b.column(name).to_pylist() == a.column(name).to_pylist(), name
    for row, r in zip(a.to_pylist(), split, strict=True):
        assert len(row["advantages"]) == len(r["response_ids"])
        assert row["old_logprobs"][1:] == pytest.approx(r["old_logprobs"][1:])  # as it came
        assert (row["old_logprobs"][0] is None) == (r["old_logprobs"][0] is None)
        if values:
            assert row["values"] == pytest.approx(r["values"])


@pytest.mark.parametrize("layout", ["split", "flat"])
def test_a_row_beyond_the_tokens_a_row_may_hold_is_refused_and_the_bound_raised(tmp_path, layout):
    """ADVCLI_MAX_ROW_TOKENS (lowered here to 8) bounds every row read, in either layout; raised,
    the same log is read."""
    split, _ = logs()
    rows = split if layout == "split" else _flat(split)
    log = _write(tmp_path / "log.parquet", rows)
    longest = max(len(r["prompt_ids"]) + len(r["response_ids"]) for r in split)
    row = next(i for i, r in enumerate(split)
               if len(r["prompt_ids"]) + len(r["response_ids"]) == longest)  # fmt: skip
    column = "response_ids" if layout == "split" else "input_ids"
    env = dict(os.environ, ADVCLI_MAX_ROW_TOKENS="8")
    proc = run("annotate", str(log), "--method", "grpo", "--out", str(tmp_path / "o.parquet"),
               env=env)  # fmt: skip
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert err.startswith(f"advcli: error: {log}: row {row}, column '{column}': {longest} "
                          "tokens, more than the 8 a row may hold. Hint: raise "
                          "ADVCLI_MAX_ROW_TOKENS")  # fmt: skip
    env["ADVCLI_MAX_ROW_TOKENS"] = str(longest)
    proc = run("annotate", str(log), "--method", "grpo", "--out", str(tmp_path / "o.parquet"),
               env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def test_a_per_token_column_of_other_than_numbers_passes_through_as_given(tmp_path):
    split, _ = logs()
    for r in split:
        r["old_logprobs"] = [str(-0.5)] * len(r["response_ids"])
    log = _write(tmp_path / "split.parquet", split)
    proc = run("annotate", str(log), "--method", "rloo", "-q", "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 0, proc.stderr.decode()
    got = pq.read_table(tmp_path / "o.parquet").column("old_logprobs").to_pylist()
    assert got == [r["old_logprobs"] for r in split]
