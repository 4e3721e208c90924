"""advcli on dumps written by the frameworks' own code (``tests/fixtures/real``), against the
numbers the framework itself logged.

TRL's fixtures were written by a real ``GRPOTrainer.train()`` of TRL 1.16.0
(``tools/dumps/trl.py``, one run per setting; each case's ``truth.json`` says what ran). Each
row carries TRL's own ``advantage``: advcli's must equal it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.conftest import run as run_bytes


def run(*args: str) -> subprocess.CompletedProcess[str]:
    proc = run_bytes(*args)
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(),
                                       proc.stderr.decode())  # fmt: skip


REAL = Path(__file__).parent.parent / "fixtures" / "real"
TRL = REAL / "trl"

# case -> the options a user passes: the settings of TRL's that are not in its dump
TRL_CASES = {
    "default": [],
    "g8": [],
    "repeated_prompt": [],
    "log_extra": [],
    "none_rewards": [],
    "conversational": [],
    "grad_accum": [],
    "eval": [],
    "scale_batch": ["--scale", "batch"],
    "scale_none": ["--scale", "none"],
    "normalize_then_sum": ["--method", "gdpo", "--reward-columns", "accuracy_reward,format_reward"],
    "weights": ["--reward-weights", "accuracy_reward=1,format_reward=0.5"],
}


def annotate(tmp_path: Path, inputs: Path, *options: str) -> tuple[dict, Path]:
    out = tmp_path / "out.parquet"
    method = [] if "--method" in options else ["--method", "grpo"]
    proc = run("annotate", str(inputs), "--from", "trl", *method, *options, "--out", str(out),
               "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), out


@pytest.mark.parametrize("case", sorted(TRL_CASES))
def test_trl_gives_trls_own_advantages(tmp_path: Path, case: str) -> None:
    summary, out = annotate(tmp_path, TRL / case, *TRL_CASES[case])
    table = pq.read_table(out)
    ours = table.column("advantage").to_numpy()
    theirs = table.column("source_advantage").to_numpy()  # TRL's own, carried through
    assert np.abs(ours - theirs).max() <= 1e-6
    assert summary["convention"] == "trl"  # --from trl carries TRL's convention
    assert summary["logged_advantages"].startswith("reproduces TRL's logged advantages")
    truth = json.loads((TRL / case / "truth.json").read_text())
    size = truth["settings"]["num_generations"]
    assert f"--group-size {size}" in summary["found"]


def test_trl_group_size_is_found_not_guessed() -> None:
    """Neighbouring prompts with the same text: groups of 4 (TRL's), not runs of 8 or 16."""
    proc = run("audit", str(TRL / "repeated_prompt"), "--from", "trl", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["groups"] == 18


def test_trl_log_extra_columns_are_not_rewards(tmp_path: Path) -> None:
    summary, _ = annotate(tmp_path, TRL / "log_extra")
    assert "accuracy_reward,format_reward,length_reward " in summary["found"] + " "
    assert "length_ratio" not in summary["found"]


def test_trl_unscorable_rows_get_zero_and_stay_out_of_the_baseline(tmp_path: Path) -> None:
    _, out = annotate(tmp_path, TRL / "none_rewards")
    t = pq.read_table(out)
    acc, fmt = (np.isnan(t.column(c).to_numpy()) for c in ("accuracy_reward", "format_reward"))
    unscorable = acc & fmt
    assert unscorable.sum() >= 2
    assert (t.column("advantage").to_numpy()[unscorable] == 0).all()
    assert (t.column("source_advantage").to_numpy()[unscorable] == 0).all()


def test_trl_eval_rows_and_cut_groups(tmp_path: Path) -> None:
    """Evaluation rows are groups of num_generations_eval; the group the buffer cut is
    skipped, and said so."""
    summary, out = annotate(tmp_path, TRL / "eval")
    assert pq.read_table(out).num_rows == 3 * 22
    assert any("skipped rows 0-1" in w for w in summary["warnings"])


def test_trl_a_setting_that_differs_is_named(tmp_path: Path) -> None:
    summary, _ = annotate(tmp_path, TRL / "scale_batch")
    assert summary["logged_advantages"].startswith("differs from TRL's logged advantages")
    assert any("--scale batch reproduces them" in w for w in summary["warnings"])
    proc = run("check", str(TRL / "scale_batch"), "--from", "trl")
    assert proc.returncode == 4
    assert "Hint: --scale batch reproduces them" in proc.stderr.splitlines()[-1]
    assert (
        run("check", str(TRL / "scale_batch"), "--from", "trl", "--scale", "batch").returncode == 0
    )


def test_trl_weights_not_in_the_dump_are_asked_for(tmp_path: Path) -> None:
    proc = run("annotate", str(TRL / "weights"), "--from", "trl", "--method", "grpo",
               "--out", str(tmp_path / "o.parquet"))  # fmt: skip
    assert proc.returncode == 2
    assert "--reward-weights" in proc.stderr and "--group-size" in proc.stderr


def test_trl_empty_file_in_a_folder_is_skipped(tmp_path: Path) -> None:
    folder = tmp_path / "completions"
    shutil.copytree(TRL / "default" / "completions", folder)
    shutil.copy(TRL / "empty_step" / "completions" / "completions_00000.parquet", folder)
    summary, _ = annotate(tmp_path, folder)
    assert any("skipped 1 empty file" in w for w in summary["warnings"])
    assert summary["rows"] == 72


def test_trl_dump_without_from_is_refused(tmp_path: Path) -> None:
    proc = run("annotate", str(TRL / "default" / "completions"), "--method", "grpo",
               "--out", str(tmp_path / "o.parquet"))  # fmt: skip
    assert proc.returncode == 2
    assert "--from trl" in proc.stderr
