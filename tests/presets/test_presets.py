"""Every preset, end to end through the command line, on files written as each framework writes
them: the advantages equal those of the same rollouts in advcli's own schema."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import advcli.presets
from tests.conftest import ROOT, one_line, run
from tests.presets import frameworks as fw

RS = fw.rollouts()


def key_from_text(step: int, completion: str) -> tuple[int, int, int]:
    """(step, prompt, sample) of a completion written by ``frameworks.rollouts``."""
    m = re.match(r"answer (\d+) for (\d+) ", completion)
    assert m, completion
    return step, int(m.group(2)), int(m.group(1))


def prime_rl_key(rollout_id: str) -> tuple[int, int, int]:
    """(step, prompt, sample) of a prime-rl rollout id, ``s{STEP}-{PROMPT}-{SAMPLE}/...``."""
    step, prompt, sample = (int(x) for x in rollout_id.split("/")[0].split("-")[1:])
    return step, prompt, sample


KEYS: dict[str, Callable[[dict], tuple[int, int, int]]] = {
    "verl": lambda r: key_from_text(r["step"], r["output"]),
    "trl": lambda r: key_from_text(r["step"], r["completion"]),
    "openrlhf": lambda r: key_from_text(int(r["input"].split()[0]), r["output"]),
    "nemo-rl": lambda r: key_from_text(int(r["rollout_id"].split(":")[0]), r["content"][1]),
    "areal": lambda r: key_from_text(r["tail_version"], r["completion"]),
    "skyrl": lambda r: key_from_text(int(r["prompt_id"].split(":")[0]), r["output_response"]),
    "roll": lambda r: key_from_text(int(r["prompt_id"].split(":")[0]), r["responses"]),
    "slime": lambda r: key_from_text(1 + r["prompt_id"] // 100, r["response"]),
    "prime-rl": lambda r: prime_rl_key(r["rollout_id"]),
}

CASES = {
    # name: (writer, --from, extra options, the log has tokens)
    "verl V1": (fw.verl_v1, "verl", [], False),
    "verl legacy": (fw.verl_legacy, "verl", [], False),
    "trl": (fw.trl, "trl", ["--reward-weights", "format_reward=2", "--group-size", "4"], False),
    "openrlhf": (lambda d, rs: fw.openrlhf(d / "out.jsonl", rs), "openrlhf", [], False),
    "nemo-rl": (fw.nemo_rl, "nemo-rl", [], True),
    "areal": (fw.areal, "areal", [], False),
    "skyrl": (fw.skyrl, "skyrl", [], False),
    "roll": (fw.roll, "roll", [], False),
    "slime": (fw.slime, "slime", ["--reward-key", "acc"], True),
    "prime-rl": (fw.prime_rl, "prime-rl", [], True),
}


def annotated(path: Path | str, out: Path, *args: str) -> list[dict]:
    proc = run("annotate", str(path), "--out", str(out), "-q", *args)
    assert proc.returncode == 0, proc.stderr.decode()
    return pl.read_parquet(out).to_dicts()


def expected(tmp_path: Path, method: str, tokens: bool, rewards: list[float] | None = None):
    """Advantages per (step, prompt, sample) from the same rollouts in advcli's schema."""
    rs = RS
    if rewards is not None:
        rs = [fw.Rollout(**{**r.__dict__, "reward": w}) for r, w in zip(RS, rewards, strict=True)]
    ref = fw.reference_log(tmp_path / "reference.parquet", rs, tokens=tokens, key="step")
    rows = annotated(ref, tmp_path / "reference-out.parquet", "--method", method)
    return {(r.step, r.prompt, r.sample): row for r, row in zip(rs, rows, strict=True)}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("method", ["grpo", "rloo"])
def test_a_preset_gives_the_advantages_of_the_same_rollouts_in_advclis_schema(
    tmp_path, case, method
):
    writer, preset, options, tokens = CASES[case]
    dump = writer(tmp_path / "dump", RS) or tmp_path / "dump"
    rows = annotated(dump, tmp_path / "out.parquet", "--from", preset, "--method", method,
                     "--convention", "advcli", *options)  # fmt: skip
    assert len(rows) == len(RS)
    rewards = fw.trl_rewards(RS) if preset == "trl" else None
    want = expected(tmp_path, method, tokens, rewards)
    for row in rows:
        ref = want[KEYS[preset](row)]
        assert row["advantage"] == pytest.approx(ref["advantage"], rel=1e-6, abs=1e-7), row
        assert row["group_size"] == 4 and row["zero_variance"] == ref["zero_variance"]
        if tokens:
            assert row["advantages"] == pytest.approx(ref["advantages"], rel=1e-6, abs=1e-7)
            assert row["input_ids"] == ref["input_ids"]
        else:
            assert "advantages" not in row


@pytest.mark.parametrize("case", [c for c in CASES if CASES[c][3]])
def test_token_presets_run_the_per_token_methods(tmp_path, case):
    """REINFORCE++ under the framework's convention, whitened over its batch: a step of
    NeMo-RL's, a rollout file of slime's (the step here), the whole log of prime-rl's."""
    writer, preset, options, _ = CASES[case]
    dump = writer(tmp_path / "dump", RS) or tmp_path / "dump"
    method = ("--method", "reinforce-pp-baseline", "--gamma", "0.9")
    rows = annotated(dump, tmp_path / "out.parquet", "--from", preset, *method, *options)
    want = {}
    ref = fw.reference_log(tmp_path / "reference.parquet", RS, tokens=True, key="step",
                           batch=preset in ("nemo-rl", "slime"))  # fmt: skip
    convention = ("--convention", advcli.presets.get(preset).convention)
    for r, row in zip(RS, annotated(ref, tmp_path / "ref.parquet", *method, *convention),
                      strict=True):  # fmt: skip
        want[(r.step, r.prompt, r.sample)] = row["advantages"]
    for row in rows:
        assert row["advantages"] == pytest.approx(want[KEYS[preset](row)], rel=1e-5, abs=1e-6)


def test_presets_read_a_folder_a_file_and_keep_the_frameworks_fields(tmp_path):
    dump = fw.verl_v1(tmp_path / "dump", RS)
    one = annotated(dump / "2.jsonl", tmp_path / "one.parquet", "--from", "verl", "--method",
                    "grpo")  # fmt: skip
    assert {r["step"] for r in one} == {2} and len(one) == 12
    row = one[0]
    assert row["uid"].endswith("_0") and row["prompt_id"] == row["uid"][: -len("_0_0")]
    assert row["rollout_id"] == row["uid"][: -len("_0")] and row["segment_index"] == 0
    assert row["score"] == row["reward"] and row["gts"] is not None


def test_verl_legacy_groups_by_prompt_text_within_a_step(tmp_path):
    dump = fw.verl_legacy(tmp_path / "dump", RS)
    proc = run("audit", str(dump), "--from", "verl", "--json")
    report = json.loads(proc.stdout)
    assert report["groups"] == 6 and report["group_sizes"] == {"4": 6}  # texts repeat per step
    rows = annotated(dump, tmp_path / "o.parquet", "--from", "verl", "--method", "grpo")
    by_key = {KEYS["verl"](r): r for r in rows}
    assert by_key[(1, 1, 0)]["prompt_id"].startswith("1:user\nQuestion 1")
    assert isinstance(by_key[(1, 1, 0)]["acc"], float | type(None))


def test_nemo_rl_trims_the_padding_and_keeps_its_advantages_masked(tmp_path):
    dump = fw.nemo_rl(tmp_path / "dump", RS)
    rows = annotated(dump, tmp_path / "o.parquet", "--from", "nemo-rl", "--method", "grpo")
    r = RS[5]
    row = next(x for x in rows if KEYS["nemo-rl"](x) == (r.step, r.prompt, r.sample))
    assert row["input_ids"] == r.tokens and row["action_mask"] == r.mask
    assert row["reward"] == r.reward and len(row["source_advantages"]) == len(r.tokens)
    assert row["source_advantages"][: len(r.prompt_ids)] == [0.0] * len(r.prompt_ids)
    assert len({row["prompt_id"] for row in rows}) == 6


def test_slime_reads_a_torch_file_without_torch_and_refuses_code(tmp_path):
    dump = fw.slime(tmp_path / "dump", RS)
    proc = run("audit", str(dump), "--from", "slime", "--json")
    assert proc.returncode == 2 and "--reward-key" in proc.stderr.decode()
    rows = annotated(dump, tmp_path / "o.parquet", "--from", "slime", "--reward-key", "acc",
                     "--method", "grpo")  # fmt: skip
    assert sum(r["status"] == "truncated" for r in rows) == 6 and "truncated" not in rows[0]
    assert rows[0]["logprobs"][: len(RS[0].prompt_ids)] == [0.0] * len(RS[0].prompt_ids)
    distilled = annotated(dump, tmp_path / "opd.parquet", "--from", "slime", "--reward-key",
                          "acc", "--method", "opd")  # fmt: skip
    n_prompt = len(RS[0].prompt_ids)  # teacher -0.5 against the policy's -0.25, on the response
    assert distilled[0]["advantages"] == [0.0] * n_prompt + [-0.25] * len(RS[0].completion_ids)
    evil = tmp_path / "evil" / "1.pt"
    fw.torch_save({"samples": [EvilReduce()]}, evil)
    proc = run("schema", str(evil), "--from", "slime")
    text = proc.stderr.decode()
    assert proc.returncode == 1 and "refused to load posix.system" in text, text
    assert not (tmp_path / "pwned").exists()


class EvilReduce:
    """A pickle that would run a command when loaded."""

    def __reduce__(self):
        import os

        return (os.system, ("touch pwned",))


def test_pickles_of_framework_classes_are_refused(tmp_path):
    """SkyRL's pickles everywhere; verl's gen_batch.dp but by --from verl, whose reader
    refuses a damaged one in one line (tests/presets/test_verl_proto.py: hostile ones)."""
    skyrl, verl = tmp_path / "training_input.pkl", tmp_path / "gen_batch.dp"
    for path in (skyrl, verl):
        path.write_bytes(b"\x80\x04junk")
    for args in (["schema", str(skyrl)], ["schema", str(skyrl), "--from", "verl"]):
        proc = run(*args)
        text = proc.stderr.decode()
        assert proc.returncode == 2 and "loading it would run code" in text, text
    proc = run("schema", str(verl))
    assert proc.returncode == 2 and "Hint: read it with --from verl" in proc.stderr.decode()
    proc = run("schema", str(verl), "--from", "verl")
    text = proc.stderr.decode()
    assert proc.returncode == 1 and text.count("\n") == 1
    assert "cannot read the rollouts safely" in text, text


def test_a_framework_dump_without_from_says_which_preset_reads_it(tmp_path):
    dump = fw.nemo_rl(tmp_path / "dump", RS)
    path = next(dump.rglob("*.jsonl"))
    proc = run("annotate", str(path), "--method", "grpo", "-o", str(tmp_path / "o.parquet"))
    text = proc.stderr.decode()
    assert proc.returncode == 1 and text.count("\n") == 1
    assert "Hint: it looks like NeMo-RL's rollout dump: read it with --from nemo-rl" in text
    info = json.loads(run("schema", str(path), "--json").stdout)
    assert info["looks_like"] == "nemo-rl"
    v1 = fw.verl_v1(tmp_path / "v1", RS) / "1.jsonl"
    proc = run("annotate", str(v1), "--method", "grpo", "-o", str(tmp_path / "v.parquet"))
    text = proc.stderr.decode()
    assert proc.returncode == 1  # uid and score fit advcli's aliases, but uid is no group key
    assert "Hint: it looks like verl's rollout dump: read it with --from verl" in text
    assert text.count("\n") == 1
    own = fw.write_lines(tmp_path / "own.jsonl", [  # advcli's own schema, OpenRLHF's fields
        {"prompt_id": "p", "input": "q", "output": "a", "reward": float(i % 2)} for i in range(4)
    ])  # fmt: skip
    proc = run("annotate", str(own), "--method", "grpo", "-o", str(tmp_path / "own.parquet"))
    assert proc.returncode == 0 and "looks like OpenRLHF's rollout dump" in proc.stderr.decode()
    proc = run("annotate", str(v1), "--method", "grpo", "--col", "reward=score",
               "-o", str(tmp_path / "v.parquet"))  # fmt: skip
    assert proc.returncode == 0  # named columns: read as advcli's own schema, with warnings
    assert "--from verl reads it as verl writes it" in proc.stderr.decode()


def test_a_file_that_does_not_fit_the_preset_names_the_missing_field(tmp_path):
    path = fw.write_lines(tmp_path / "x.jsonl", [{"input": "a", "output": "b"}])
    proc = run("schema", str(path), "--from", "verl")
    text = proc.stderr.decode()
    assert proc.returncode == 1
    assert text.startswith(f"advcli: error: {path}: no 'score' field, which a verl dump has")


def test_warnings_go_in_the_json_only_with_json(tmp_path):
    dump = fw.areal(tmp_path / "dump", RS)
    out = tmp_path / "o.parquet"
    proc = run("annotate", str(dump), "--from", "areal", "--method", "grpo", "-o", str(out),
               "--json", "-q")  # fmt: skip
    assert proc.stderr == b"" and any("adv_norm" in w for w in json.loads(proc.stdout)["warnings"])
    proc = run("annotate", str(dump), "--from", "areal", "--method", "grpo", "-o", str(out),
               "--force", "-q")  # fmt: skip
    assert proc.stderr.decode().startswith("advcli: warning: AReaL's dump holds rewards")


def test_preset_options_need_from(tmp_path):
    dump = fw.verl_v1(tmp_path / "dump", RS)
    proc = run("audit", str(dump / "1.jsonl"), "--group-size", "4")
    assert (
        proc.returncode == 2 and "--group-size applies to a framework's log" in proc.stderr.decode()
    )
    assert np.isfinite(1.0)


@pytest.mark.parametrize("size", ["0", "13", str((1 << 63) - 1)])
@pytest.mark.parametrize(("writer", "preset"), [(fw.trl, "trl"), (fw.nemo_rl, "nemo-rl")])
def test_a_group_size_no_file_can_hold_is_a_usage_error(tmp_path, writer, preset, size):
    """TRL's dump without its logged advantages took --group-size 9223372036854775807 and
    blamed TRL's evaluation log for rows that could be in no group (0: a division by 0);
    NeMo-RL's blamed the data. A group is rows of one file (12 rows here)."""
    dump = writer(tmp_path / "dump", RS)
    for path in dump.rglob("*.parquet"):  # the logged advantages would name the size instead
        pl.read_parquet(path).drop("advantage").write_parquet(path)
    proc = run("annotate", str(dump), "--from", preset, "--method", "grpo", "--group-size",
               size, "-o", str(tmp_path / "o.parquet"))  # fmt: skip
    message = proc.stderr.decode()
    assert proc.returncode == 2 and message.count("\n") == 1, message
    if size == "0":
        assert message == "advcli: error: --group-size 0: expected a positive integer\n"
    else:
        assert message.startswith(f"advcli: error: --group-size {size}: more than the 12 rows ")
    assert not (tmp_path / "o.parquet").exists()


@pytest.mark.parametrize(
    ("writer", "preset", "options", "convention", "compared"),
    [
        (fw.trl, "trl", ["--reward-weights", "format_reward=2", "--group-size", "4"], "trl",
         "per row"),
        (fw.nemo_rl, "nemo-rl", [], "nemo-rl", "per token"),
        (fw.prime_rl, "prime-rl", [], "prime-rl", "per token"),
    ],
)  # fmt: skip
def test_check_reproduces_the_frameworks_own_advantages(
    tmp_path, writer, preset, options, convention, compared
):
    dump = writer(tmp_path / "dump", RS)
    proc = run("check", str(dump), "--from", preset, *options, "--json")
    assert proc.returncode == 0, proc.stderr.decode()
    result = json.loads(proc.stdout)
    assert result["ok"] and result["convention"] == convention and result["compared"] == compared
    assert result["rows"] == 24 and result["max_abs_difference"] < 1e-6
    # Under another convention the numbers differ: exit 4, the worst rows named.
    proc = run("check", str(dump), "--from", preset, *options, "--convention", "seed")
    text = proc.stdout.decode()
    assert proc.returncode == 4 and "worst rows" in text, proc.stderr.decode()
    assert "differ from the logged advantages by more than --tol 1e-05" in proc.stderr.decode()


def test_check_names_a_changed_advantage(tmp_path):
    dump = fw.trl(tmp_path / "dump", RS)
    path = dump / "completions" / "completions_00002.parquet"
    # the file no longer says which rows form a group: --group-size does
    table = pl.read_parquet(path)
    table = table.with_columns(
        advantage=pl.col("advantage") + pl.Series([0.0] * 5 + [0.01] + [0.0] * 6)
    )
    table.write_parquet(path)
    proc = run("check", str(dump), "--from", "trl", "--reward-weights", "format_reward=2",
               "--group-size", "4", "--reward-columns", "accuracy_reward,format_reward",
               "--json")  # fmt: skip
    result = json.loads(proc.stdout)
    assert proc.returncode == 4 and result["rows_beyond_tol"] == 1
    assert result["groups_beyond_tol"] == 1
    worst = result["worst"][0]
    assert worst["rollout_id"] == "2:5" and worst["prompt_id"] == "2:1.0"  # run 1, block 0
    assert worst["difference"] == pytest.approx(0.01, abs=1e-6)


@pytest.mark.parametrize(("logged", "said"), [(np.nan, "NaN"), (np.inf, "infinity"),
                                             (-np.inf, "-infinity")])  # fmt: skip
def test_check_counts_a_logged_advantage_that_is_no_number(tmp_path, logged, said):
    """A NaN or an infinity the framework logged is no advantage to compare with: the row
    differs, said with its rollout; the largest difference stays that of the numbers."""
    dump = fw.trl(tmp_path / "dump", RS)
    path = dump / "completions" / "completions_00002.parquet"
    table = pl.read_parquet(path)
    advantage = table["advantage"].to_numpy().copy()
    advantage[5] = logged
    table.with_columns(advantage=pl.Series(advantage)).write_parquet(path)
    proc = run("check", str(dump), "--from", "trl", "--reward-weights", "format_reward=2",
               "--group-size", "4", "--reward-columns", "accuracy_reward,format_reward",
               "--json")  # fmt: skip
    result = json.loads(proc.stdout)
    assert proc.returncode == 4 and result["rows"] == 24 and result["rows_beyond_tol"] == 1
    assert result["max_abs_difference"] < 1e-6 and result["worst"] == []
    assert ("1 row(s) log an advantage that is no number, counted as differing: the first, "
            f"rollout 2:5 of prompt 2:1.0, logs {said}") in result["warnings"]  # fmt: skip


def test_check_needs_a_log_with_the_frameworks_advantages(tmp_path):
    dump = fw.verl_v1(tmp_path / "dump", RS)
    proc = run("check", str(dump), "--from", "verl")
    assert proc.returncode == 1 and "no advantages of verl's own to check" in proc.stderr.decode()
    proc = run("check", str(dump))
    assert proc.returncode == 2 and "add --from" in proc.stderr.decode()


def test_verl_v1_outputs_of_one_session_are_segments_of_one_rollout(tmp_path):
    rs = [r for r in RS if r.step == 1]
    dump = fw.verl_v1(tmp_path / "dump", rs)
    lines = (dump / "1.jsonl").read_text().splitlines()
    first = json.loads(lines[0])  # a compacting agent loop wrote a second output
    extra = dict(first, uid=first["uid"][:-2] + "_1", output="continued")
    (dump / "1.jsonl").write_text("\n".join([lines[0], json.dumps(extra), *lines[1:]]) + "\n")
    rows = annotated(dump, tmp_path / "o.parquet", "--from", "verl", "--method", "grpo")
    pair = [r for r in rows if r["rollout_id"] == first["uid"][:-2]]
    assert [r["segment_index"] for r in pair] == [0, 1]
    assert pair[0]["advantage"] == pair[1]["advantage"] and pair[0]["group_size"] == 4


def test_slime_file_of_segmented_rollouts_is_one_group_of_samples(tmp_path):
    """slime reshapes rewards into groups only where a file holds n_samples_per_prompt x
    rollout_batch_size samples; with segments it normalises the file as one group."""
    dump = fw.slime(tmp_path / "dump", [r for r in RS if r.step == 1])
    path = dump / "rollout_data" / "1.pt"
    from advcli.presets import torch_file

    data = torch_file.load(str(path))
    a, b = data["samples"][4], data["samples"][5]  # two samples of one prompt's group
    a["rollout_id"] = b["rollout_id"] = 77
    a["reward"] = b["reward"] = {"acc": 0.5, "fmt": 0.0}
    fw.torch_save(data, path)
    rows = annotated(dump, tmp_path / "o.parquet", "--from", "slime", "--reward-key", "acc",
                     "--method", "grpo")  # fmt: skip
    pair = [r for r in rows if r["slime_rollout_id"] == "rollout 77"]
    assert len(pair) == 2 and {r["segment_index"] for r in pair} == {0}
    assert {r["group_size"] for r in rows} == {len(rows)}
    rewards = np.array([r["reward"] for r in rows])
    expected = (rewards - rewards.mean()) / (rewards.std(ddof=1) + 1e-6)  # slime's, by hand
    assert np.abs(np.array([r["advantage"] for r in rows]) - expected).max() < 1e-6


def test_nemo_rl_validation_lines_group_by_the_first_user_message(tmp_path):
    records = [
        {"content": [[{"role": "system", "content": "be brief"},
                      {"role": "user", "content": f"q{i // 2}"}]],
         "rewards": [float(i % 2)], "idx": i}
        for i in range(6)
    ]  # fmt: skip
    path = fw.write_lines(tmp_path / "val_data_step3.jsonl", records)
    report = json.loads(run("audit", str(path), "--from", "nemo-rl", "--json").stdout)
    assert report["groups"] == 3 and report["group_sizes"] == {"2": 3}


def test_prime_rl_every_root_to_leaf_path_is_a_rollout(tmp_path):
    dump = fw.prime_rl(tmp_path / "dump", [r for r in RS if r.step == 1][:4])
    path = next(dump.rglob("traces.jsonl"))
    episodes = [json.loads(line) for line in path.read_text().splitlines()]
    nodes = episodes[0]["traces"][0]["nodes"]
    nodes.append(dict(nodes[1], token_ids=[5, 6], mask=[True, True], logprobs=[-1.0, -1.0],
                      advantages=[0.5, 0.5]))  # fmt: skip
    path.write_text("\n".join(json.dumps(e) for e in episodes) + "\n")
    rows = annotated(path, tmp_path / "o.parquet", "--from", "prime-rl", "--method", "grpo")
    branches = [r for r in rows if r["rollout_id"].startswith(episodes[0]["id"] + "/")]
    assert [r["rollout_id"].rsplit("/", 1)[1] for r in branches] == ["1", "2"]
    assert branches[1]["input_ids"][-2:] == [5, 6]
    assert branches[1]["input_ids"][:-2] == branches[0]["input_ids"][: -len(nodes[1]["token_ids"])]


@pytest.mark.parametrize(
    ("writer", "name", "preset"),
    [(fw.verl_legacy, "1.jsonl", "verl"), (fw.areal, "rollout/1/0.jsonl", "areal"),
     (fw.skyrl, "dumped_evals/global_step_1_evals/openai_gsm8k.jsonl", "skyrl")],
)  # fmt: skip
def test_a_dump_advcli_cannot_read_as_its_own_names_the_preset(tmp_path, writer, name, preset):
    dump = writer(tmp_path / "dump", RS)
    proc = run("schema", str(dump / name))
    text = proc.stderr.decode()
    assert proc.returncode == 1 and text.count("\n") == 1, text
    assert text.rstrip().endswith(f"read it with --from {preset}")


@pytest.mark.parametrize("length", [10**18, -3])
def test_a_slime_response_length_beyond_its_tokens_is_refused_before_a_mask_is_made(
    tmp_path, length
):
    """A sample without a loss mask gets one of response_length ones: a length of 1e18 would
    allocate it (MemoryError) before the length was checked against the tokens."""
    dump = fw.slime(tmp_path / "dump", [r for r in RS if r.step == 1])
    path = dump / "rollout_data" / "1.pt"
    from advcli.presets import torch_file

    data = torch_file.load(str(path))
    data["samples"][2]["response_length"] = length
    data["samples"][2].pop("loss_mask", None)
    fw.torch_save(data, path)
    proc = run("annotate", str(dump), "--from", "slime", "--reward-key", "acc", "--method",
               "grpo", "--out", str(tmp_path / "o.parquet"))  # fmt: skip
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert f"1.pt: row 2, column 'response_length': response_length {length} is not within" in err
    assert err.count("\n") == 1


def test_a_nul_in_a_framework_dumps_field_name_is_one_line(tmp_path):
    """(found by tests.fuzz: polars panicked handing the name to Arrow)"""
    dump = tmp_path / "rollout"
    shutil.copytree(ROOT / "tests" / "fixtures" / "real" / "verl" / "v1" / "rollout", dump)
    first = dump / "1.jsonl"
    first.write_text(first.read_text().replace('"score"', '"sc\\u0000ore"', 1))
    proc = run("schema", str(dump), "--from", "verl")
    assert proc.returncode == 1
    assert "1.jsonl: line 1: a field name holds a NUL character" in one_line(proc)
