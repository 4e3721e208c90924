"""Every bad input gets one line naming file, row/line and column, a hint, and exit code 1."""

from __future__ import annotations

import gzip
import shutil
import struct
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import zstandard

from tests.conftest import SAMPLE, one_line, rollout, run, write_jsonl, write_parquet
from tests.presets import frameworks


def bad(tmp_path, rows, *args, method="grpo", name="log.jsonl"):
    path = (
        write_jsonl(tmp_path / name, rows)
        if name.endswith(".jsonl")
        else write_parquet(tmp_path / name, rows)
    )
    proc = run("annotate", path, "--method", method, "--out", str(tmp_path / "out.parquet"), *args)
    assert not (tmp_path / "out.parquet").exists()
    return proc, path


def test_missing_column_lists_columns_found(tmp_path):
    rows = [{"prompt_id": "a", "input_ids": [1, 2], "action_mask": [0, 1]}]
    proc, path = bad(tmp_path, rows)
    assert proc.returncode == 1
    assert one_line(proc) == (
        f"advcli: error: {path}: no 'reward' column. Columns found: prompt_id, input_ids, "
        "action_mask. Hint: name its column with --col"
    )


def test_group_method_without_group_key(tmp_path):
    rows = [{"input_ids": [1, 2], "reward": 1.0}]
    proc, path = bad(tmp_path, rows)
    assert proc.returncode == 1
    assert one_line(proc) == (
        f"advcli: error: {path}: no 'prompt_id' column. Columns found: input_ids, reward. "
        "Hint: name its column with --col"
    )


def test_list_length_differs_from_input_ids(tmp_path):
    rows = [rollout("a", 1.0), rollout("a", 0.0, action_mask=[0, 1, 1])]
    proc, path = bad(tmp_path, rows)
    assert proc.returncode == 1
    assert one_line(proc) == (
        f"advcli: error: {path}: line 2, column 'action_mask': 3 entries but 'input_ids' has "
        "5 tokens. Hint: every per-token column needs one entry per token"
    )


def test_mask_value_not_binary(tmp_path):
    rows = [rollout("a", 1.0, action_mask=[0, 0, 1, 2, 1])]
    proc, path = bad(tmp_path, rows)
    assert one_line(proc) == (
        f"advcli: error: {path}: line 1, column 'action_mask': mask value 2 at token 3; a mask "
        "holds only 0 and 1. Hint: 1 marks a token the policy sampled, 0 any other token"
    )


def test_parquet_rows_are_named_by_row(tmp_path):
    rows = [rollout("a", 1.0), rollout("a", float("nan"))]
    proc, path = bad(tmp_path, rows, name="log.parquet")
    assert proc.returncode == 1
    assert one_line(proc) == (
        f"advcli: error: {path}: row 1, column 'reward': value nan is not a finite number. "
        "Hint: fix or drop the row"
    )


def test_non_finite_value_at_an_action_token(tmp_path):
    rows = [rollout("a", 1.0, values=[0.0, 0.0, 0.5, float("inf"), 0.1])]
    proc, path = bad(tmp_path, rows, method="gae", name="log.parquet")
    assert one_line(proc) == (
        f"advcli: error: {path}: row 0, column 'values': value inf is not a finite number. "
        "Hint: fix or drop the row"
    )


def test_non_finite_value_off_actions_is_ignored(tmp_path):
    """GAE reads no value at a prompt token: NaN or null there gives what 0 gives."""
    advantages = []
    for name, prompt_values in (("odd", [float("nan"), None]), ("zeros", [0.0, 0.0])):
        rows = [rollout("a", 1.0, values=[*prompt_values, 0.5, 0.2, 0.1])]
        path = write_jsonl(tmp_path / f"{name}.jsonl", rows)
        out = tmp_path / f"{name}.parquet"
        gae = ["--method", "gae", "--gamma", "1", "--lam", "0.95"]
        proc = run("annotate", path, *gae, "--out", str(out), "-q")
        assert proc.returncode == 0, proc.stderr
        advantages.append(pq.read_table(out).column("advantages").to_pylist())
    assert advantages[0] == advantages[1]
    deltas = [0.2 - 0.5, 0.1 - 0.2, 1.0 - 0.1]  # r + V(t+1) - V(t) at the three actions
    want = [deltas[0] + 0.95 * (deltas[1] + 0.95 * deltas[2]), deltas[1] + 0.95 * deltas[2]]
    assert advantages[0][0][2:] == pytest.approx([*want, deltas[2]], rel=1e-6)


def test_invalid_json_line(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"prompt_id": "a", "input_ids": [1], "reward": 1}\n{"prompt_id": "b",,}\n')
    proc = run("annotate", str(path), "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 1
    assert one_line(proc).startswith(f"advcli: error: {path}: line 2: not valid JSON (")
    assert one_line(proc).endswith("Hint: one JSON object per line")


def test_wrong_type_in_a_later_line(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text(
        '{"prompt_id": "a", "input_ids": [1, 2], "reward": 1}\n\n'
        '{"prompt_id": "a", "input_ids": "oops", "reward": 0}\n'
    )
    proc = run("annotate", str(path), "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
    assert one_line(proc) == (
        f"advcli: error: {path}: line 3, column 'input_ids': expected a list of 64-bit integers, "
        'saw "oops". Hint: every line must use the same types'
    )


def compress(path, suffix: str):
    """``path`` as-is, or a gzip/zstd copy of it named ``path + suffix``."""
    if not suffix:
        return path
    data = path.read_bytes()
    data = gzip.compress(data) if suffix == ".gz" else zstandard.ZstdCompressor().compress(data)
    packed = path.with_name(path.name + suffix)
    packed.write_bytes(data)
    return packed


@pytest.mark.parametrize("suffix", ["", ".gz", ".zst"])
def test_line_numbers_count_blank_lines_in_plain_and_compressed_files(tmp_path, suffix):
    path = tmp_path / "log.jsonl"
    path.write_text('\n\n{"prompt_id": "a", "input_ids": [1, 2], "reward": 1}\n{"prompt_id": ,}\n')
    path = compress(path, suffix)
    proc = run("annotate", str(path), "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 1
    assert one_line(proc).startswith(f"advcli: error: {path}: line 4: not valid JSON (")
    path = tmp_path / "first.jsonl"
    path.write_text('\n  \n{"prompt_id": "a", "input_ids": [1, 2],, "reward": 1}\n')
    path = compress(path, suffix)
    proc = run("annotate", str(path), "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
    assert one_line(proc).startswith(f"advcli: error: {path}: line 3: not valid JSON (")


def test_empty_input(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    proc = run("annotate", str(path), "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 1
    assert one_line(proc) == f"advcli: error: {path}: the input has no rows. Hint: check the file"


def test_unknown_method_is_a_usage_error(small_log, tmp_path):
    proc = run("annotate", small_log, "--method", "ppo", "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 2
    assert one_line(proc) == (
        "advcli: error: unknown method 'ppo'. Did you mean 'gae'? Methods: grpo, rloo, dr-grpo, "
        "opo, grpo-passk, "
        "gpg, maxrl, batch-mean, sppo, quantile, focal-grpo, ktae, hierarchical-grpo, rae, "
        "gigpo, step-reinforce, agentic-reinforce, step-grpo, gdpo, grpo-length, "
        "grpo-process, mc, td, gae, reinforce-pp, reinforce-pp-baseline, remax, opd"
    )


def test_unknown_convention_is_a_usage_error(small_log, tmp_path):
    proc = run(
        "annotate",
        small_log,
        "--method",
        "grpo",
        "--convention",
        "x",
        "--out",
        str(tmp_path / "o.parquet"),
    )
    assert proc.returncode == 2
    assert one_line(proc) == (
        "advcli: error: unknown convention 'x'. Conventions: advcli, verl, trl, openrlhf, torchrl, "
        "skyrl, nemo-rl, nemo-rl-pre-4158, prime-rl, tinker, open-instruct, areal, slime, miles, "
        "roll"
    )


def _spans(*spans):
    return [{"start": s, "end": e, "kind": k} for s, e, k in spans]


@pytest.mark.parametrize(
    ("spans", "problem"),
    [
        (
            _spans((0, 2, "prompt"), (2, 9, "action")),
            "span [2, 9) is out of range for 5 tokens"
            ". Hint: spans are [start, end) token positions with end exclusive",
        ),
        (
            _spans((0, 3, "prompt"), (2, 5, "action")),
            "spans [0, 3) and [2, 5) overlap. Hint: each token belongs to at most one span",
        ),
        (
            _spans((0, 2, "prompt"), (2, 5, "tool")),
            "span kind 'tool'. Hint: a span's kind is one of prompt, action, observation",
        ),
    ],
)
def test_bad_spans(tmp_path, spans, problem):
    row = {"prompt_id": "a", "input_ids": [1, 2, 3, 4, 5], "reward": 1.0, "spans": spans}
    proc, path = bad(tmp_path, [row])
    assert one_line(proc) == f"advcli: error: {path}: line 1, column 'spans': {problem}"


def test_existing_output_is_refused_without_force(small_log, tmp_path):
    out = tmp_path / "o.parquet"
    out.write_bytes(b"keep me")
    proc = run("annotate", small_log, "--method", "grpo", "--out", str(out))
    assert proc.returncode == 2
    assert (
        one_line(proc) == f"advcli: error: {out}: already exists. Hint: pass --force to replace it"
    )
    assert out.read_bytes() == b"keep me"


def test_output_that_is_an_input_is_refused_even_with_force(small_log):
    proc = run("annotate", small_log, "--method", "grpo", "--out", small_log, "--force")
    assert proc.returncode == 2
    assert one_line(proc) == (
        f"advcli: error: {small_log}: this is one of the inputs; advcli never overwrites its "
        "input. Hint: choose another --out"
    )


def test_singleton_error_rule_names_the_prompt(tmp_path):
    rows = [rollout("a", 1.0), rollout("a", 0.0), rollout("lonely", 1.0)]
    proc, path = bad(tmp_path, rows, "--convention", "openrlhf")
    assert proc.returncode == 1
    assert one_line(proc) == (
        f"advcli: error: {path}: line 3, column 'prompt_id': prompt 'lonely' has a single "
        "rollout; --singleton error (convention openrlhf, method grpo) forbids singleton groups. "
        "Hint: pass --singleton zero, raw or drop"
    )


def test_ambiguous_aliases_ask_for_col(tmp_path):
    rows = [{"uid": "a", "group_id": "g", "input_ids": [1], "reward": 1.0}]
    proc, path = bad(tmp_path, rows)
    assert one_line(proc) == (
        f"advcli: error: {path}: columns 'uid', 'group_id' could each be 'prompt_id'. "
        "Hint: choose one with --col prompt_id=uid"
    )


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--method", "grpoo"], "unknown method 'grpoo'. Did you mean 'grpo'? Methods: grpo,"),
        (["--method", "grpo", "--convention", "verll"],
         "unknown convention 'verll'. Did you mean 'verl'? Conventions:"),
        (["--method", "grpo", "--from", "vrl"],
         "--from vrl: unknown framework. Did you mean 'verl'? Frameworks:"),
        (["--method", "grpo", "--col", "rewrd=score"],
         "unknown role 'rewrd'. Did you mean 'reward'? Roles:"),
        (["--method", "grpo", "--col", "reward=scor"],
         "--col reward=scor: no column 'scor'. Did you mean 'score'?"),
    ],
)  # fmt: skip
def test_a_typo_gets_a_did_you_mean(tmp_path, options, expected):
    log = write_jsonl(tmp_path / "log.jsonl", [{"prompt_id": "a", "score": 1.0,
                                                "input_ids": [1, 2]}])  # fmt: skip
    proc = run("annotate", log, *options, "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode in (1, 2) and expected in one_line(proc), one_line(proc)


def test_a_missing_column_names_the_closest_one(tmp_path):
    log = write_jsonl(tmp_path / "log.jsonl", [{"prompt_id": "a", "rewardd": 1.0,
                                                "input_ids": [1, 2]}])  # fmt: skip
    proc = run("annotate", log, "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
    assert one_line(proc).endswith("Hint: name it with --col reward=rewardd")


def test_an_error_about_many_files_names_their_folder_and_count(tmp_path):
    for i in range(30):
        (tmp_path / "logs").mkdir(exist_ok=True)
        write_jsonl(tmp_path / "logs" / f"step_{i:03d}.jsonl",
                    [{"prompt_id": "a", "reward": 1.0, "input_ids": [1, 2]}])  # fmt: skip
    proc = run("annotate", tmp_path / "logs", "--method", "gae", "--out", tmp_path / "o.parquet")
    message = one_line(proc)
    assert message.startswith(f"advcli: error: {tmp_path / 'logs'}/ (30 files: step_000.jsonl …"
                              " step_029.jsonl): no 'values' column.")  # fmt: skip
    assert len(message) < 300


def _row_group_claims(path: Path, rows: int) -> None:
    """Edit a one-row-group Parquet file's footer so that its row group claims ``rows`` rows
    (fewer than it holds, and than the footer counts): its num_rows, Thrift's compact i64
    after total_byte_size (header 0x16), is the footer's last such field."""
    data = path.read_bytes()
    size = struct.unpack("<i", data[-8:-4])[0]
    body, footer = data[: -8 - size], data[-8 - size : -8]
    held = pq.read_metadata(path).num_rows
    assert pq.read_metadata(path).num_row_groups == 1 and held < 64  # one byte, zigzagged
    at = footer.rindex(bytes([0x16, 2 * held]))
    footer = footer[:at] + bytes([0x16, 2 * rows]) + footer[at + 2 :]
    path.write_bytes(body + footer + struct.pack("<i", len(footer)) + b"PAR1")
    edited = pq.read_metadata(path)
    assert (edited.num_rows, edited.row_group(0).num_rows) == (held, rows)


@pytest.mark.parametrize("reading", ["parquet", "parquet and jsonl", "--from trl"])
def test_a_footer_whose_row_group_claims_fewer_rows_is_refused_by_every_reader(tmp_path, reading):
    """A row group claiming 5 of a file's 14 rows read as 5 rows, exit 0, where the log was
    read whole (Parquet beside JSONL) or by a framework's reader: every read checks it."""
    if reading == "--from trl":
        folder = frameworks.trl(tmp_path / "trl", frameworks.rollouts(steps=1))
        damaged = folder / "completions" / "completions_00001.parquet"
        args = [str(folder), "--from", "trl"]
    else:
        damaged = tmp_path / "log.parquet"
        shutil.copy(SAMPLE / "rollouts.parquet", damaged)
        others = (
            [write_jsonl(tmp_path / "more.jsonl", [rollout("q", 1.0)])]
            if "jsonl" in reading
            else []
        )
        args = [str(damaged), *others]
    _row_group_claims(damaged, 5)
    proc = run("audit", *args, "--json")
    assert proc.returncode == 1 and proc.stdout == b""
    assert one_line(proc).startswith(
        f"advcli: error: {damaged}: not a readable Parquet file (its footer"
    )
    assert "row groups hold 5" in one_line(proc)
