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

from tests.conftest import ROOT
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
    assert any("skipped 2 row(s) (rows 0-1)" in w for w in summary["warnings"])
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
    (said,) = [w for w in json.loads(merged.stdout)["warnings"] if "merge" in w]
    assert said.endswith(
        "1.jsonl: line 1, column 'input': 1 prompt text(s) of step 1 with a multiple of the "
        "others' 4 rows (this one 8), each scored as one group (--merge-repeated-prompts): not "
        "the framework's numbers, which scored each dataset row apart"
    )


def test_trl_a_generation_logged_at_two_steps_is_read_once(tmp_path: Path) -> None:
    """gradient_accumulation_steps=2: completions_00002 repeats completions_00001's rows."""
    summary, out = annotate(tmp_path, TRL / "grad_accum")
    assert summary["rows"] == 48 and pq.read_table(out).num_rows == 48
    assert any(w.startswith("skipped 1 file(s) holding the rows of the file before")
               and "completions_00002.parquet;" in w for w in summary["warnings"])  # fmt: skip


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


def test_check_refuses_a_group_size_the_logged_advantages_contradict() -> None:
    """A TRL run with groups of 4 read with --group-size 8: every run of one prompt would be
    an evaluation row; check fails (exit 4) naming the size the logged advantages fit, and
    annotate refuses it (exit 2); a found size is said found, a given one is not."""
    folder = str(TRL / "g4_for_check" / "completions")
    proc = run("check", folder, "--from", "trl", "--group-size", "8")
    assert proc.returncode == 4
    assert proc.stderr.endswith(
        "216 of its rows are not whole groups of 8 (read as evaluation rows or a cut group), "
        "and TRL's logged advantages fit --group-size 4. Hint: --group-size 4\n"
    )
    assert proc.stderr.startswith("advcli: error: --group-size 8: ")
    proc = run("annotate", folder, "--from", "trl", "--method", "grpo", "--group-size", "8",
               "--out", "-", "--format", "jsonl")  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("advcli: error: --group-size 8: ")
    proc = run("check", folder, "--from", "trl", "--group-size", "4", "--json")
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["found"] == (
        "--reward-columns accuracy_reward,format_reward (found from TRL's logged advantages)"
    )


def test_trl_another_method_chosen_on_purpose_is_said_calmly(tmp_path: Path) -> None:
    summary, _ = annotate(tmp_path, TRL / "default", "--method", "rloo")
    (said,) = [w for w in summary["warnings"] if "logged advantages" in w]
    assert said.startswith(
        "TRL's logged advantages are its grpo, which --method grpo gives; these are rloo's "
        "under the trl convention, as asked: they differ in "
    )
    (tmp_path / "b").mkdir()
    summary, _ = annotate(tmp_path / "b", TRL / "default", "--scale", "none")
    (said,) = [w for w in summary["warnings"] if "logged advantages" in w]
    assert said.startswith("TRL's logged advantages are its grpo, which --scale group gives")


def test_trl_gdpo_takes_the_reward_columns_the_reader_found(tmp_path: Path) -> None:
    """sample_data's run trained with grpo: gdpo (TRL's normalize_then_sum) runs on the
    columns found from the logged advantages, and the loud warning names --method grpo."""
    out = tmp_path / "gdpo.parquet"
    proc = run("annotate", str(ROOT / "sample_data" / "trl" / "completions"), "--from", "trl",
               "--method", "gdpo", "--out", str(out), "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    params = json.loads(pq.read_metadata(out).metadata[b"advcli"])["params"]
    assert params["reward_columns"] == "accuracy_reward,format_reward"
    (loud,) = summary["warnings"]
    assert loud.startswith("THESE ARE NOT TRL'S ADVANTAGES: gdpo under the trl convention")
    assert loud.endswith("; --method grpo reproduces them")


def test_trl_a_file_of_evaluation_rows_only_loses_none(tmp_path: Path) -> None:
    """num_generations_eval=1 with an evaluation before the first step: its file holds 3
    evaluation rows and no training group, none of them the rest of a cut group."""
    summary, out = annotate(tmp_path, TRL / "eval_n1")
    assert summary["rows"] == 72 and pq.read_table(out).num_rows == 72
    assert summary["warnings"][0].endswith(
        "completions_00000.parquet: step 0: every row is an evaluation row (no run of one prompt "
        "is a whole group of 4): TRL's evaluation before its first training step, which marks "
        "no row as eval"
    )
    assert not any("00000.parquet: skipped" in w for w in summary["warnings"])


@pytest.mark.parametrize(("case", "said"), [
    ("dapo_dict_logged", "the reward is score + overlong_reward"),
    ("dapo_float_logged", None), ("dapo_float_unlogged", None), ("dapo_dict_extra_keys", None),
])  # fmt: skip
def test_verl_dapo_trains_on_the_penalised_score(tmp_path: Path, case: str, said: str | None):
    """verl's DAPO reward manager trains on score + overlong_reward; a dict result's score
    overwrites the dumped one (logged: the sum is read, and said), a number result's is the
    trained one (acc holds the raw score)."""
    out = tmp_path / "out.jsonl"
    proc = run("annotate", str(REAL / "verl" / case / "rollout"), "--from", "verl",
               "--method", "grpo", "--out", str(out), "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    warnings = json.loads(proc.stdout)["warnings"]
    assert [w for w in warnings if w.startswith("the reward is")] == ([] if said is None else [
        "the reward is score + overlong_reward: verl's DAPO reward manager trained on the "
        "reward function's score plus its overlong penalty, and the dump's score is the "
        "reward function's own (its dict's score overwrites the trained one)"])  # fmt: skip
    truth = json.loads((REAL / "verl" / case / "truth.json").read_text())["rows"]
    ours = [r["reward"] for r in _jsonl(out)]
    assert np.abs(np.array(ours) - [t["score"] for t in truth]).max() <= 1e-6


def test_verl_dapo_without_its_penalty_is_refused_until_the_score_is_named(tmp_path: Path):
    folder = str(REAL / "verl" / "dapo_dict_unlogged" / "rollout")
    out = str(tmp_path / "out.jsonl")
    proc = run("annotate", folder, "--from", "verl", "--method", "grpo", "--out", out)
    assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1
    assert proc.stderr.endswith(
        "1.jsonl: line 1, column 'score': the reward function returned math_dapo's dict "
        "(score, acc, pred), whose score is the dump's: verl's DAPO reward manager may have "
        "trained on it plus an overlong penalty that only overlong_buffer_cfg.log=true writes "
        "(as overlong_reward). Hint: --col reward=score reads the score as the reward "
        "knowingly\n"
    )
    named = run("annotate", folder, "--from", "verl", "--method", "grpo", "--col",
                "reward=score", "--out", out)  # fmt: skip
    assert named.returncode == 0, named.stderr
    schema = run("schema", folder, "--from", "verl")  # what it holds is shown, the doubt said
    assert schema.returncode == 0 and "math_dapo's dict" in schema.stderr


def test_verl_dapo_recipe_fields_on_other_lines_are_refused() -> None:
    """verl-recipe's RayDAPOTrainer logs the reward function's fields in generation order,
    the text after balance_batch: math_dapo's answers are not in their lines' outputs."""
    proc = run("audit", str(REAL / "verl" / "recipe_dapo_dict_logged" / "rollout"), "--from",
               "verl")  # fmt: skip
    assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1
    assert "1.jsonl: line 2, column 'pred': the reward function's fields are not the lines' " \
           "own: its answer '20' is not in the line's output, and only 3 of 18 lines hold " \
           "theirs" in proc.stderr  # fmt: skip


@pytest.mark.parametrize(("case", "refused"), [
    ("repeated_prompt", "8 rows share the prompt"),
    ("step_wise", "its prompt continues line 1's conversation: a step-wise dump"),
])  # fmt: skip
def test_skyrl_dumps_whose_groups_it_cannot_tell_are_refused(case: str, refused: str) -> None:
    proc = run("audit", str(REAL / "skyrl" / case / "dumped_evals"), "--from", "skyrl")
    assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1
    assert refused in proc.stderr


def test_skyrl_reads_under_its_own_convention(tmp_path: Path) -> None:
    """SkyRL's GRPO is verl's: torch.std, + 1e-6, a lone sample keeps its reward."""
    for case in ("default", "singleton"):
        out = tmp_path / f"{case}.jsonl"
        proc = run("annotate", str(REAL / "skyrl" / case / "dumped_evals"), "--from", "skyrl",
                   "--method", "grpo", "--out", str(out), "--json")  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        summary = json.loads(proc.stdout)
        assert summary["convention"] == "skyrl" and summary["warnings"] == []
        truth = json.loads((REAL / "skyrl" / case / "truth.json").read_text())["rows"]
        ours = [r["advantage"] for r in _jsonl(out)]
        assert np.abs(np.array(ours) - [t["grpo_advantage"] for t in truth]).max() <= 1e-6


def test_prime_rl_a_failed_episode_leaves_its_group_one_short(tmp_path: Path) -> None:
    """A failed episode (ok false) is left out as prime-rl leaves it out: its group scored
    over the other 3 (mean 2/3), no group-size warning, said once."""
    out = tmp_path / "out.parquet"
    proc = run("annotate", str(REAL / "prime-rl" / "stream_failed_episode"), "--from",
               "prime-rl", "--method", "grpo", "--out", str(out), "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["rows"] == 23 and summary["logged_advantages"].startswith("reproduces")
    (said,) = summary["warnings"]
    assert said.endswith(
        "left out 1 failed episode(s) (ok false: no tokens, no reward), as prime-rl does: it "
        "scores their groups over the other episodes"
    )
