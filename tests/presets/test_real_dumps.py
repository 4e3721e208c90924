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
import pyarrow as pa
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
    skipped, and said so; each step whose file holds evaluation rows is named (TRL's eval log
    writes over the step's file and marks no row)."""
    summary, out = annotate(tmp_path, TRL / "eval")
    assert pq.read_table(out).num_rows == 3 * 22
    assert any("skipped rows 0-1" in w for w in summary["warnings"])
    named = [w for w in summary["warnings"] if "are evaluation rows" in w]
    assert [w.split(": ")[1] for w in named] == ["step 1", "step 2", "step 3"]
    assert all("rows 18-23 are evaluation rows" in w for w in named)


def test_trl_a_setting_that_differs_is_named(tmp_path: Path) -> None:
    summary, _ = annotate(tmp_path, TRL / "scale_batch")
    assert summary["logged_advantages"].startswith("differs from TRL's logged advantages")
    fix = '--scale batch (scale_rewards="batch") reproduces them'
    assert any(fix in w for w in summary["warnings"])
    proc = run("check", str(TRL / "scale_batch"), "--from", "trl")
    assert proc.returncode == 4
    assert f"Hint: {fix}" in proc.stderr.splitlines()[-1]
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
    assert any("skipped 1 file with no rows to read" in w for w in summary["warnings"])
    assert summary["rows"] == 72


def test_trl_dump_without_from_is_refused(tmp_path: Path) -> None:
    proc = run("annotate", str(TRL / "default" / "completions"), "--method", "grpo",
               "--out", str(tmp_path / "o.parquet"))  # fmt: skip
    assert proc.returncode == 1
    assert "Hint: it looks like TRL's rollout dump: read it with --from trl" in proc.stderr


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("case", ["v1", "v1_compaction", "legacy", "legacy_dict_scores"])
def test_verl_gives_verls_own_grpo_advantages(tmp_path: Path, case: str) -> None:
    """verl 0.9.1's own dump functions wrote the files; its compute_grpo_outcome_advantage the
    truth (tools/dumps/verl.py)."""
    out = tmp_path / "out.jsonl"
    proc = run("annotate", str(REAL / "verl" / case / "rollout"), "--from", "verl",
               "--method", "grpo", "--out", str(out), "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["convention"] == "verl"
    truth = json.loads((REAL / "verl" / case / "truth.json").read_text())["rows"]
    rows = _jsonl(out)
    assert len(rows) == len(truth)
    assert (
        max(abs(r["advantage"] - t["grpo_advantage"]) for r, t in zip(rows, truth, strict=True))
        <= 1e-6
    )
    extras = ("score", "acc", "pred", "len_ratio")  # the legacy writer's text numbers: numbers
    assert not any(isinstance(row.get(k), str) for row in rows for k in extras)


def test_verl_v1_is_segmented_only_where_a_rollout_has_two_outputs() -> None:
    single = json.loads(run("schema", str(REAL / "verl" / "v1" / "rollout"), "--from", "verl",
                            "--json").stdout)  # fmt: skip
    both = json.loads(run("schema", str(REAL / "verl" / "v1_compaction" / "rollout"),
                          "--from", "verl", "--json").stdout)  # fmt: skip
    assert single["segmented"] is False and both["segmented"] is True


@pytest.mark.parametrize("case", ["default", "overlong_filtered", "validation"])
def test_nemo_rl_check_reproduces_its_own_advantages(case: str) -> None:
    """NeMo-RL's own estimator and logger wrote them; a sample its overlong filter dropped
    stays in its prompt's baseline."""
    proc = run("check", str(REAL / "nemo-rl" / case), "--from", "nemo-rl", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["max_abs_difference"] <= 1e-6


def test_nemo_rl_check_names_the_setting_that_reproduces() -> None:
    proc = run("check", str(REAL / "nemo-rl" / "no_loo"), "--from", "nemo-rl")
    assert proc.returncode == 4
    assert "Hint: --baseline group --scale group" in proc.stderr.splitlines()[-1]


def _last_token(values: list) -> np.ndarray:
    """A row's advantage: the value itself, or the last token's of a per-token list."""
    return np.array([v[-1] if isinstance(v, list) else v for v in values], dtype=float)


@pytest.mark.parametrize(
    "case", ["default", "mixed_compaction", "multi_turn", "dict_reward", "truncated"]
)
def test_slime_gives_slimes_own_advantages(tmp_path: Path, case: str) -> None:
    """slime's own Sample and save_debug_rollout_data wrote them (``{}`` fields included); its
    _post_process_rewards gave truth.json's advantages. A file of segmented rollouts
    (compaction) slime normalises as one group of samples."""
    out = tmp_path / "out.parquet"
    proc = run("annotate", str(REAL / "slime" / case), "--from", "slime", "--reward-key",
               "score", "--method", "grpo", "--out", str(out), "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["convention"] == "slime"
    truth = json.loads((REAL / "slime" / case / "truth.json").read_text())["rows"]
    ours = _last_token(pq.read_table(out).column("advantage").to_pylist())
    assert len(ours) == len(truth)
    assert np.abs(ours - [t["advantage"] for t in truth]).max() <= 1e-6
    one_group = [w for w in summary["warnings"] if "as one group of samples" in w]
    assert bool(one_group) == (case == "mixed_compaction")


def test_roll_gives_rolls_own_grpo_advantages(tmp_path: Path) -> None:
    """ROLL's dump_rollout_to_specific_path wrote the files; its GRPO the truth
    (tools/dumps/roll.py)."""
    out = tmp_path / "out.parquet"
    proc = run("annotate", str(REAL / "roll" / "default"), "--from", "roll", "--method", "grpo",
               "--out", str(out), "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    truth = json.loads((REAL / "roll" / "default" / "truth.json").read_text())["rows"]
    ours = pq.read_table(out).column("advantage").to_numpy()
    assert np.abs(ours - [t["grpo_advantage"] for t in truth]).max() <= 1e-6


def test_verl_legacy_repeated_prompt_text_is_refused(tmp_path: Path) -> None:
    """Two dataset rows with one prompt text: verl scored two groups of 4, the legacy dump
    (no uid, rows balanced) cannot tell them apart."""
    folder = str(REAL / "verl" / "legacy_repeated_prompt" / "rollout")
    out = str(tmp_path / "out.jsonl")
    proc = run("annotate", folder, "--from", "verl", "--method", "grpo", "--out", out)
    assert proc.returncode == 1
    assert "1.jsonl: line 1, column 'input': 8 rows of step 1 share the prompt" in proc.stderr
    assert "Hint: pass --merge-repeated-prompts" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    merged = run("audit", folder, "--from", "verl", "--merge-repeated-prompts", "--json")
    assert merged.returncode == 0 and json.loads(merged.stdout)["groups"] == 7


def test_trl_a_generation_logged_at_two_steps_is_read_once(tmp_path: Path) -> None:
    """gradient_accumulation_steps=2: completions_00002 repeats completions_00001's rows."""
    summary, out = annotate(tmp_path, TRL / "grad_accum")
    assert summary["rows"] == 48 and pq.read_table(out).num_rows == 48
    assert any("completions_00002.parquet: the rows of the file before" in w
               for w in summary["warnings"])  # fmt: skip


def test_areal_is_found_from_its_fileroot(tmp_path: Path) -> None:
    """AReaL's own workflow wrote the files; its actor's reward_norm (the group step, on
    rewards it scaled by 10) is matched to eps / reward_scaling, and the batch step it then
    runs from its config is said not to be."""
    proc = run("audit", str(REAL / "areal" / "default"), "--from", "areal", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["groups"] == 6
    out = tmp_path / "out.parquet"
    proc = run("annotate", str(REAL / "areal" / "default"), "--from", "areal", "--method",
               "grpo", "--out", str(out), "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert any("adv_norm" in w for w in json.loads(proc.stdout)["warnings"])
    truth = json.loads((REAL / "areal" / "default" / "truth.json").read_text())["rows"]
    ours = pq.read_table(out).column("advantage").to_numpy()
    assert np.abs(ours - [t["reward_norm"] for t in truth]).max() <= 5e-4


def test_prime_rl_all_traces_hold_nothing_to_check() -> None:
    all_file = REAL / "prime-rl" / "all_only" / "rollouts" / "step_1" / "train" / "all"
    proc = run("check", str(all_file / "traces.jsonl"), "--from", "prime-rl")
    assert proc.returncode == 1 and "no advantages of prime-rl's own to check" in proc.stderr
    ok = run("check", str(REAL / "prime-rl" / "default"), "--from", "prime-rl", "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["ok"]


def _edited_copy(tmp_path: Path, edit) -> Path:
    """TRL's default dump with each file's table edited (a user's own column, a dropped one)."""
    folder = tmp_path / "completions"
    folder.mkdir()
    for path in sorted((TRL / "default" / "completions").glob("*.parquet")):
        pq.write_table(edit(pq.read_table(path)), folder / path.name)
    return folder


def test_trl_without_logged_advantages_needs_the_group_size(tmp_path: Path) -> None:
    """TRL's distillation trainer logs no advantages: nothing tells num_generations."""
    folder = _edited_copy(tmp_path, lambda t: t.drop_columns(["advantage"]))
    out = str(tmp_path / "o.parquet")
    proc = run("annotate", str(folder), "--from", "trl", "--method", "grpo", "--out", out)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "holds no logged advantages to tell. Hint: give TRL's num_generations with " in (
        proc.stderr
    )
    given = run("annotate", str(folder), "--from", "trl", "--method", "grpo", "--group-size",
                "4", "--out", out, "--force")  # fmt: skip
    assert given.returncode == 0, given.stderr


def test_trl_reward_columns_the_advantages_cannot_tell_apart_are_asked_for(tmp_path: Path) -> None:
    """A float log_extra column constant within each group changes no group-normalised
    advantage: it may or may not be a reward function, so the user names them."""

    def add_difficulty(t):
        at = t.schema.get_field_index("advantage")
        group = np.arange(t.num_rows) // 4
        return t.add_column(at, "difficulty", pa.array((group % 3) / 2.0))

    folder = _edited_copy(tmp_path, add_difficulty)
    proc = run("annotate", str(folder), "--from", "trl", "--method", "grpo",
               "--out", str(tmp_path / "o.parquet"))  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "fit more than one set of reward columns" in proc.stderr
    assert "Hint: name the reward functions' columns with --reward-columns" in proc.stderr


def test_trl_distillation_files_without_rewards_are_refused(tmp_path: Path) -> None:
    """TRL's DistillationTrainer (#6613) writes the same completions files with only step,
    prompt and completion: nothing to compute advantages from, said in one line."""
    folder = _edited_copy(tmp_path, lambda t: t.select(["step", "prompt", "completion"]))
    proc = run("annotate", str(folder), "--from", "trl", "--method", "grpo", "--group-size", "4",
               "--out", str(tmp_path / "o.parquet"))  # fmt: skip
    assert proc.returncode != 0 and proc.stderr.count("\n") == 1, proc.stderr
    assert "completions_00001.parquet: no reward columns (columns: step, prompt, completion): " in (
        proc.stderr
    )
    assert "DistillationTrainer" in proc.stderr


def test_areal_v2_fields_are_kept_and_normalised_rewards_said(tmp_path: Path) -> None:
    """AReaL main @cbff54d6's own _dump_trajectory (tools/dumps/areal_v2.py): version_rle,
    segments of a multi-turn sample, original_reward beside the reward its workflow had
    normalised in the group, which its actor trains on as it is (--scale none)."""
    case = REAL / "areal" / "v2_fields"
    out = tmp_path / "out.parquet"
    proc = run("annotate", str(case), "--from", "areal", "--method", "grpo", "--scale", "none",
               "--out", str(out), "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert any("normalised these rewards in their group already" in w
               for w in json.loads(proc.stdout)["warnings"])  # fmt: skip
    rows = pq.read_table(out).to_pylist()
    truth = json.loads((case / "truth.json").read_text())["rows"]
    assert [r["reward"] for r in rows] == [t["reward"] for t in truth]
    assert [r["original_reward"] for r in rows] == [t["original_reward"] for t in truth]
    assert [r["version_rle"] for r in rows] == [t["version_rle"] for t in truth]
    assert [r["segments"] is not None for r in rows] == [t["has_segments"] for t in truth]
    assert [r["advantage"] for r in rows] == pytest.approx([t["reward"] for t in truth],
                                                           abs=1e-6)  # fmt: skip
