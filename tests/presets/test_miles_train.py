"""``--from miles`` on ``--dump-details`` folders miles@31f1ca9's own code wrote
(``tools/dumps/miles_train.py``): the rollout dump joined to the train dumps, one per rank
(``train_data/{rollout_id}_{rank}.pt``), with data-, tensor- and context-parallel ranks. The
expected values in each ``truth.json`` are what miles' own ``DumpReader.load_joined`` reads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.presets.test_real_dumps import REAL, run

MILES = REAL / "miles-train"
LAYOUTS = ["default", "tensor_parallel_copies", "context_parallel"]


def _check(inputs: Path, *options: str) -> dict:
    proc = run("check", str(inputs), "--from", "miles", *options, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _truth(case: str) -> list[dict]:
    return json.loads((MILES / case / "truth.json").read_text())["samples"]


@pytest.mark.parametrize("case", LAYOUTS)
def test_check_reproduces_miles_grpo_advantages(case: str) -> None:
    """GRPO (miles' defaults) on two data-parallel ranks; with two tensor-parallel copies of
    each sample; with each sample's per-token values cut across two context-parallel ranks."""
    result = _check(MILES / case)
    assert result["ok"] and result["compared"] == "per token" and result["rows"] == 8
    assert result["max_abs_difference"] <= 1e-6


@pytest.mark.parametrize("case", [*LAYOUTS, "reinforce_plus_plus_kl"])
def test_the_joined_values_are_miles_own(tmp_path: Path, case: str) -> None:
    out = tmp_path / "o.parquet"
    proc = run("annotate", str(MILES / case / "train_data" / "0_1.pt"), "--from", "miles",
               "--method", "grpo", "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == 8  # one rank's file named: the rollout dump, read once
    for row, sample in zip(rows, _truth(case), strict=True):
        n = sample["response_length"]
        mask = sample["loss_mask"]
        on_mask = [a if m else 0.0 for a, m in zip(sample["advantages"], mask, strict=True)]
        assert row["source_advantages"][-n:] == pytest.approx(on_mask, abs=1e-7)
        assert row["source_returns"][-n:] == pytest.approx(sample["returns"], abs=1e-7)
        # both streams, over the same response positions: the trainer's and the sampler's
        assert row["trainer_logprobs"][-n:] == pytest.approx(sample["log_probs"], abs=1e-7)
        assert row["logprobs"][-n:] == pytest.approx(sample["rollout_log_probs"], abs=1e-7)
        assert (
            row["trainer_logprobs"][:-n]
            == row["logprobs"][:-n]
            == [0.0] * (len(row["logprobs"]) - n)
        )
        for name, column in (("ref_log_probs", "ref_logprobs"), ("entropy", "entropies")):
            if sample.get(name) is not None:
                assert row[column][-n:] == pytest.approx(sample[name], abs=1e-7)


def test_a_missing_context_parallel_rank_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "dump"
    shutil.copytree(MILES / "context_parallel", folder)
    (folder / "train_data" / "0_1.pt").unlink()
    proc = run("check", str(folder), "--from", "miles")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "is held by context-parallel ranks [0] of 2: its slices cannot be put together" in (
        proc.stderr)  # fmt: skip


def test_a_missing_data_parallel_shard_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "dump"
    shutil.copytree(MILES / "default", folder)
    (folder / "train_data" / "0_1.pt").unlink()
    proc = run("check", str(folder), "--from", "miles")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "the train dump holds no sample for rollout dump positions" in proc.stderr


@pytest.mark.parametrize(
    ("case", "edit", "message"),
    [
        ("default", lambda d: d["response_lengths"].__setitem__(0, 99),
         "total and response lengths"),
        ("context_parallel", lambda d: d["advantages"].__setitem__(0, d["advantages"][0][:-1]),
         "holds"),
        ("default", lambda d: d["sample_indices"].__setitem__(0, 99),
         "column 'sample_indices': sample_index 99 is not a sample of the rollout dump"),
    ],
)  # fmt: skip
def test_a_rank_file_that_does_not_fit_its_rollout_dump_is_one_line(
    tmp_path: Path, case: str, edit, message: str
) -> None:
    torch = pytest.importorskip("torch")
    folder = tmp_path / "dump"
    shutil.copytree(MILES / case, folder)
    rank = folder / "train_data" / "0_1.pt"
    dump = torch.load(rank, weights_only=True)
    edit(dump["rollout_data"])
    torch.save(dump, rank)
    proc = run("check", str(folder), "--from", "miles")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"{rank}: row 0" in proc.stderr and message in proc.stderr


def test_check_reproduces_miles_reinforce_plus_plus_with_kl() -> None:
    """miles' REINFORCE++ puts −β·KL on every response token, tool output included, each a
    discounted step (the ``miles`` convention: --observations step --kl-on steps)."""
    result = _check(MILES / "reinforce_plus_plus_kl", "--method", "reinforce-pp", "--kl-coef",
                    "0.05")  # fmt: skip
    assert result["convention"] == "miles" and result["ok"]
    assert result["max_abs_difference"] <= 1e-6
    proc = run("check", str(MILES / "reinforce_plus_plus_kl"), "--from", "miles", "--method",
               "reinforce-pp", "--kl-coef", "0.05", "--kl-on", "actions", "--observations",
               "skip", "--json")  # fmt: skip
    slime_way = json.loads(proc.stdout)  # the KL on actions only, as slime: 0.013 off
    assert proc.returncode == 4 and slime_way["max_abs_difference"] > 0.01
