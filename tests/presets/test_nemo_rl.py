"""``--from nemo-rl`` on dumps written by NeMo-RL's own code (``tools/dumps/nemo_rl.py``):
rollout-identity groups (PR #3882) and the near-constant-group rule (PR #4158)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.presets.test_real_dumps import REAL, run

NEMO = REAL / "nemo-rl"
STEP1 = Path("exp_001") / "train_data_step1.jsonl"


def _truth(case: str) -> list[dict]:
    rows: list[dict] = json.loads((NEMO / case / "truth.json").read_text())["rows"]
    return rows


def _annotated(tmp_path: Path, inputs: Path, *options: str) -> tuple[dict, np.ndarray]:
    out = tmp_path / "out.parquet"
    proc = run("annotate", str(inputs), "--from", "nemo-rl", "--method", "grpo", *options,
               "--out", str(out), "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), pq.read_table(out).column("advantage").to_numpy()


def _rewritten(tmp_path: Path, case: str, edit) -> Path:
    """A copy of a case's dump with each line edited by ``edit(record, truth_row)``."""
    lines = (NEMO / case / STEP1).read_text().splitlines()
    path = tmp_path / case / STEP1
    path.parent.mkdir(parents=True)
    records = [edit(json.loads(line), row) for line, row in zip(lines, _truth(case), strict=True)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return tmp_path / case


def test_rollout_identity_groups_are_found_from_the_logged_advantages(tmp_path: Path) -> None:
    """Dataset row 0 sampled twice: NeMo-RL (#3882) scores two groups of 4 where equal prompt
    tokens make one of 8; the dump has no group field, its advantages tell."""
    summary, adv = _annotated(tmp_path, NEMO / "rollout_identity")
    assert summary["found"].startswith("--group-size 4 (found from NeMo-RL's logged advantages")
    assert adv == pytest.approx([r["advantage"] for r in _truth("rollout_identity")], abs=1e-6)
    assert adv[:4].tolist() == [0.0] * 4  # group A: all wrong, zero variance on its own


def test_rollout_identity_given_and_refused(tmp_path: Path) -> None:
    truth = _truth("rollout_identity")
    _, given = _annotated(tmp_path, NEMO / "rollout_identity", "--group-size", "4")
    assert given == pytest.approx([r["advantage"] for r in truth], abs=1e-6)
    # without logged advantages nothing tells: equal prompt tokens, NeMo-RL's rule until #3882
    bare = _rewritten(
        tmp_path,
        "rollout_identity",
        lambda rec, _: {k: v for k, v in rec.items() if k != "advantages"},
    )
    summary, merged = _annotated(tmp_path, bare, "--force")
    assert "found" not in summary
    want = [r["advantage_if_grouped_by_prompt_tokens"] for r in truth]
    assert merged == pytest.approx(want, abs=1e-6)
    proc = run("annotate", str(bare), "--from", "nemo-rl", "--method", "grpo", "--group-size",
               "6", "--out", str(tmp_path / "x.parquet"))  # fmt: skip
    assert proc.returncode != 0 and proc.stderr.count("\n") == 1
    assert "train_data_step1.jsonl: lines 7-12 hold two prompts, so blocks of --group-size 6 " in (
        proc.stderr
    )


def test_gym_group_ids_are_the_groups(tmp_path: Path) -> None:
    """A row carrying NeMo-Gym's ``_ng_group_id`` (#3861) is grouped by it (and its attempt)."""
    folder = _rewritten(tmp_path, "rollout_identity", lambda rec, row: rec | {
        "_ng_group_id": [row["rollout_group_id"]], "_ng_group_attempt": [0],
        "_ng_rollout_index": [row["rollout_index"]]})  # fmt: skip
    summary, adv = _annotated(tmp_path, folder)
    assert "found" not in summary
    assert adv == pytest.approx([r["advantage"] for r in _truth("rollout_identity")], abs=1e-6)


def test_near_constant_groups_after_4158() -> None:
    """NeMo-RL since #4158 wrote these: equal rewards are not divided by their std."""
    proc = run("check", str(NEMO / "near_constant"), "--from", "nemo-rl", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["max_abs_difference"] <= 1e-7


def test_near_constant_groups_before_4158(tmp_path: Path) -> None:
    """The same rollouts as NeMo-RL at 7ea279a scored them (its own estimator, truth.json's
    ``advantage_before_4158``): [0, .11, .11, .11] gives the first rollout -2042.4, divided by
    the float32 noise of the others' std; ``nemo-rl-pre-4158`` reproduces it, and check
    names it."""
    folder = _rewritten(tmp_path, "near_constant", lambda rec, row: rec | {
        "advantages": [[row["advantage_before_4158"]] * len(rec["advantages"][0])]})  # fmt: skip
    proc = run("check", str(folder), "--from", "nemo-rl")
    assert proc.returncode == 4
    assert proc.stderr.splitlines()[-1].endswith(
        "Hint: --convention nemo-rl-pre-4158 (NeMo-RL before its PR #4158 divided equal rewards "
        "by the rounding noise of their float32 std) reproduces them"
    )
    ok = run("check", str(folder), "--from", "nemo-rl", "--convention", "nemo-rl-pre-4158",
             "--json")  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["max_abs_difference"] <= 1e-7
    _, adv = _annotated(tmp_path, folder, "--convention", "nemo-rl-pre-4158")
    assert adv[12] == pytest.approx(-2042.4078369140625, rel=1e-7)


@pytest.mark.parametrize("value", [0.5, 2, -1, None])
@pytest.mark.parametrize("field", ["token_loss_mask", "sample_loss_mask"])
def test_a_loss_mask_value_other_than_0_or_1_is_refused_at_its_line(tmp_path, field, value):
    """NeMo-RL multiplies its loss by both masks; a value other than 0 or 1 (read as an action
    where > 0, as none where not) is refused at its line and token, as every layout's mask is."""

    def edit(record: dict, _: dict) -> dict:
        if record["idx"] == 2:
            if field == "token_loss_mask":
                record[field][0][record["input_lengths"][0] - 1] = value  # its last real token
            else:
                record[field] = [value]
        return record

    inputs = _rewritten(tmp_path, "rollout_identity", edit)
    proc = run("annotate", str(inputs), "--from", "nemo-rl", "--method", "grpo",
               "--out", str(tmp_path / "out.parquet"))  # fmt: skip
    err = proc.stderr
    assert proc.returncode == 1 and err.count("\n") == 1, err
    assert f"train_data_step1.jsonl: line 3, column '{field}': mask value " in err
    assert not (tmp_path / "out.parquet").exists()


def test_both_log_prob_streams_are_read_at_the_dumps_positions(tmp_path: Path) -> None:
    """``generation_logprobs`` (the sampler's) and ``prev_logprobs`` (the trainer's), cut to
    ``input_lengths`` alike: position i is log p(token i) in both, so the first generated
    token (position 39 of the first line, read off the dump by hand) holds both streams'."""
    proc = run("schema", str(NEMO / "default"), "--from", "nemo-rl", "--json")
    assert proc.returncode == 0, proc.stderr
    streams = json.loads(proc.stdout)["logprob_streams"]
    assert streams == {"sampler": "generation_logprobs", "trainer": "prev_logprobs",
                       "kl_and_distillation_read": "trainer"}  # fmt: skip
    out = tmp_path / "out.parquet"
    proc = run("annotate", str(NEMO / "default" / STEP1), "--from", "nemo-rl", "--method",
               "grpo", "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    first = pq.read_table(out).slice(0, 1).to_pylist()[0]
    assert len(first["generation_logprobs"]) == len(first["prev_logprobs"]) == 54
    assert first["action_mask"][38:41] == [0, 1, 1]
    assert first["generation_logprobs"][38:41] == pytest.approx(
        [0.0, -12.461753845214844, -0.776925265789032], abs=1e-6
    )
    assert first["prev_logprobs"][38:41] == pytest.approx(
        [-5.070518493652344, -12.353089332580566, -0.7209392786026001], abs=1e-6
    )


def test_each_row_has_its_files_step(tmp_path: Path) -> None:
    """The step of ``train_data_step{N}.jsonl``: the `step` role, as the other presets give
    it (``prompts`` and ``report`` read it)."""
    out = tmp_path / "out.parquet"
    proc = run("annotate", str(NEMO / "default"), "--from", "nemo-rl", "--method", "grpo",
               "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = pq.read_table(out, columns=["step", "rollout_id"]).to_pylist()
    assert {(r["rollout_id"].split(":")[0], r["step"]) for r in rows} == {("1", 1), ("2", 2)}
