"""``advcli prompts``: each prompt's figures on the frameworks' own multi-step dumps equal a
float64 loop over the dumps' rows (read here as the frameworks wrote them); the filters select
exactly the prompts the loop says; ``--drop-prompts`` / ``--keep-prompts`` of the exported file
remove exactly those prompts' rows before ``annotate`` computes anything."""

from __future__ import annotations

import glob
import json
import shutil
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import ROOT, one_line, run

REAL = ROOT / "tests" / "fixtures" / "real"
TRL = REAL / "trl" / "default" / "completions"  # three steps of the same six prompts
VERL = REAL / "verl" / "legacy" / "rollout"
NEMO = REAL / "nemo-rl" / "reinforce_pp" / "exp_001"  # two steps, prompts seen at both


def trl_rows(folder: Path) -> list[tuple[Hashable, float, float]]:
    """(prompt, step, reward) per completion, as TRL logged them: the reward is the sum of its
    reward functions (weight 1 each)."""
    out = []
    for path in sorted(folder.glob("completions_*.parquet")):
        for r in pq.read_table(path).to_pylist():
            out.append((r["prompt"], float(r["step"]), r["accuracy_reward"] + r["format_reward"]))
    return out


def verl_rows(folder: Path) -> list[tuple[Hashable, float, float]]:
    out = []
    for path in sorted(glob.glob(f"{folder}/*.jsonl")):
        for line in Path(path).read_text().splitlines():
            r = json.loads(line)
            out.append((r["input"], float(r["step"]), float(r["score"])))
    return out


def nemo_rows(folder: Path) -> list[tuple[Hashable, float, float]]:
    """The prompt: the tokens before the first one trained on; the step: the file's."""
    out: list[tuple[Hashable, float, float]] = []
    for path in sorted(folder.glob("train_data_step*.jsonl")):
        step = float(path.stem.removeprefix("train_data_step"))
        for line in path.read_text().splitlines():
            r = json.loads(line)
            mask = r["token_loss_mask"][0]
            out.append((tuple(r["token_ids"][0][: mask.index(1)]), step, r["rewards"][0]))
    return out


def loop(rows: list[tuple[Hashable, float, float]], success: float) -> dict[Hashable, dict]:
    """Each prompt's figures, one rollout at a time in float64 (the definitions of
    :mod:`advcli.core.prompts`)."""
    by: dict[Hashable, dict[float, list[float]]] = {}
    for prompt, step, reward in rows:
        by.setdefault(prompt, {}).setdefault(step, []).append(reward)
    out = {}
    for prompt, steps in by.items():
        rewards = [r for s in steps.values() for r in s]
        n = len(rewards)
        mean = sum(rewards) / n
        rate = {s: sum(r >= success for r in v) / len(v) for s, v in sorted(steps.items())}
        solved = [s for s, x in rate.items() if x > 0]
        xs, ys = list(rate), list(rate.values())
        trend = None
        if len(xs) >= 2:
            mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
            trend = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
                (x - mx) ** 2 for x in xs
            )
        out[prompt] = {
            "steps_seen": len(steps),
            "rollouts": n,
            "pass_rate": sum(r >= success for r in rewards) / n,
            "mean_reward": mean,
            "reward_variance": sum((r - mean) ** 2 for r in rewards) / n,
            "trend": trend,
            "first_solved_step": min(solved) if solved else None,
            "last_solved_step": max(solved) if solved else None,
            "forgotten": bool(solved) and any(x == 0 and s > min(solved) for s, x in rate.items()),
            "zero_variance_steps": sum(
                len(v) >= 2 and max(v) - min(v) <= 0 for v in steps.values()
            ),
            "pass_rate_by_step": rate,
            "mean_reward_by_step": {s: sum(v) / len(v) for s, v in sorted(steps.items())},
        }
    return out


def prompts_json(*args: str | Path) -> dict[str, Any]:
    proc = run("prompts", *args, "--json")
    assert proc.returncode == 0, proc.stderr.decode()
    found: dict[str, Any] = json.loads(proc.stdout)
    return found


def key_of(record: dict[str, Any]) -> Hashable:
    tokens = record.get("prompt_tokens")
    return tuple(tokens) if tokens is not None else record["prompt"]


CASES = [
    pytest.param(TRL, "trl", trl_rows, "2", "their prompt text", id="trl"),
    pytest.param(VERL, "verl", verl_rows, "1", "their prompt text", id="verl"),
    pytest.param(NEMO, "nemo-rl", nemo_rows, "1", "their prompt tokens", id="nemo-rl"),
]


@pytest.mark.parametrize(("folder", "preset", "read", "success", "basis"), CASES)
def test_each_prompt_equals_a_float64_loop_over_the_dumps_rows(folder, preset, read, success,
                                                               basis):  # fmt: skip
    want = loop(read(folder), float(success))
    found = prompts_json(folder, "--from", preset, "--success", success)
    assert found["matched_by"].startswith(basis)
    assert found["prompts"] == found["selected"] == len(want)
    got = {key_of(r): r for r in found["records"]}
    assert set(got) == set(want)
    for prompt, expected in want.items():
        record = got[prompt]
        for name, value in expected.items():
            if name.endswith("_by_step"):
                assert {float(k): v for k, v in record[name].items()} == pytest.approx(value)
            elif value is None or isinstance(value, bool):
                assert record[name] == value, name
            else:
                assert record[name] == pytest.approx(value, rel=1e-12, abs=1e-15), name
    assert all(len(r["pass_rate_by_step"]) == r["steps_seen"] for r in found["records"])


def test_a_multi_step_run_has_prompts_learned_and_forgotten():
    """TRL's run: six prompts at three steps; the figures the loop checks above are not all
    trivial (a prompt is forgotten, a trend is not flat)."""
    found = prompts_json(TRL, "--from", "trl", "--success", "2")
    assert found["steps"] == [1, 2, 3]
    assert {r["steps_seen"] for r in found["records"]} == {3}
    assert any(r["forgotten"] for r in found["records"])
    assert any(r["trend"] not in (0, None) for r in found["records"])


@pytest.mark.parametrize(("folder", "preset", "read", "success", "basis"), CASES)
def test_the_filters_select_exactly_the_prompts_the_loop_says(folder, preset, read, success,
                                                              basis):  # fmt: skip
    want = loop(read(folder), float(success))

    def chosen(*args: str) -> set[Hashable]:
        found = prompts_json(folder, "--from", preset, "--success", success, *args)
        assert found["selected"] == len(found["records"])
        return {key_of(r) for r in found["records"]}

    band = {p for p, w in want.items() if 0.25 <= w["pass_rate"] <= 0.5}
    assert chosen("--band", "0.25,0.5") == band
    assert chosen("--never-solved") == {
        p for p, w in want.items() if w["first_solved_step"] is None
    }
    always = {p for p, w in want.items() if all(x > 0 for x in w["pass_rate_by_step"].values())}
    assert chosen("--always-solved") == always
    assert chosen("--forgotten") == {p for p, w in want.items() if w["forgotten"]}
    assert chosen("--min-steps", "2") == {p for p, w in want.items() if w["steps_seen"] >= 2}
    both = {p for p in band if want[p]["steps_seen"] >= 2}
    assert chosen("--band", "0.25,0.5", "--min-steps", "2") == both


def test_sort_orders_the_prompts_from_the_highest():
    found = prompts_json(TRL, "--from", "trl", "--success", "2", "--sort", "reward_variance")
    variances = [r["reward_variance"] for r in found["records"]]
    assert variances == sorted(variances, reverse=True)


@pytest.mark.parametrize(
    ("band", "problem"),
    [
        ("0.8,0.2", "LO is above HI"),
        ("-0.1,0.5", "pass rates are within [0, 1]"),
        ("0.2,1.5", "pass rates are within [0, 1]"),
        ("0.2", "give two pass rates"),
    ],
)
def test_a_bad_band_is_one_line_naming_band(band, problem):
    proc = run("prompts", TRL, "--from", "trl", "--success", "2", "--band", band)
    assert proc.returncode == 2
    line = one_line(proc)
    assert line.startswith(f"advcli: error: --band {band}: ") and problem in line, line


def test_rewards_of_more_than_two_values_ask_for_success():
    proc = run("prompts", TRL, "--from", "trl")
    assert proc.returncode != 0
    line = one_line(proc)
    assert "the rewards take 5 values (0, 0.5, 1, 1.5, 2)" in line and "--success 1" in line


def test_two_reward_values_pass_at_the_higher():
    found = prompts_json(REAL / "nemo-rl" / "default" / "exp_001", "--from", "nemo-rl")
    assert found["success"] == 1.0


def _advantages(path: Path) -> dict[tuple[str, str], float]:
    table = pq.read_table(path, columns=["prompt", "completion", "step", "advantage"])
    return {
        (r["prompt"], f"{r['step']}:{r['completion']}"): r["advantage"] for r in table.to_pylist()
    }


def _without(folder: Path, out: Path, prompts: set[Hashable]) -> Path:
    """A copy of TRL's dump folder without the rows of ``prompts``."""
    out.mkdir()
    for path in folder.glob("completions_*.parquet"):
        table = pq.read_table(path)
        keep = [p not in prompts for p in table.column("prompt").to_pylist()]
        pq.write_table(table.filter(pa.array(keep)), out / path.name)
    return out


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_dropping_the_exported_prompts_removes_exactly_their_rows(tmp_path, fmt):
    exported = tmp_path / f"never.{fmt}"
    proc = run("prompts", TRL, "--from", "trl", "--success", "2", "--never-solved", "--out",
               exported)  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    never = {p for p, w in loop(trl_rows(TRL), 2.0).items() if w["first_solved_step"] is None}
    assert 0 < len(never) < 6
    dropped = tmp_path / "dropped.parquet"
    proc = run("annotate", TRL, "--from", "trl", "--method", "grpo", "--drop-prompts", exported,
               "--out", dropped, "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    removed = json.loads(proc.stdout)["prompts_removed"]
    n_rows = sum(p in never for p, _, _ in trl_rows(TRL))
    assert removed.startswith(f"--drop-prompts {exported}: {n_rows} rows of {len(never)} prompts")
    assert "prompts matched by their prompt text" in removed
    # the rows left, and their advantages: those of the log without those rows
    smaller = _without(TRL, tmp_path / "smaller", never)
    reference = tmp_path / "reference.parquet"
    proc = run("annotate", smaller, "--from", "trl", "--method", "grpo", "--out", reference)
    assert proc.returncode == 0, proc.stderr.decode()
    got, want = _advantages(dropped), _advantages(reference)
    assert {p for p, _ in got} == {p for p, _, _ in trl_rows(TRL)} - never
    assert got.keys() == want.keys()
    assert list(got.values()) == pytest.approx(list(want.values()), abs=1e-7)
    # --keep-prompts of the same file keeps the others' complement: exactly those prompts
    kept = tmp_path / "kept.parquet"
    proc = run("annotate", TRL, "--from", "trl", "--method", "grpo", "--keep-prompts", exported,
               "--out", kept)  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    assert {p for p, _ in _advantages(kept)} == never


def test_the_exported_file_joins_back_to_the_dataset(tmp_path):
    """Its text and id, and its figures, as ``--json`` shows them (a Parquet file's maps
    read back as step -> rate)."""
    out = tmp_path / "band.parquet"
    found = prompts_json(VERL, "--from", "verl", "--success", "1", "--band", "0.2,0.8",
                         "--out", out)  # fmt: skip
    table = pq.read_table(out)
    assert table.num_rows == found["selected"] == len(found["records"])
    assert table.column("prompt").to_pylist() == [r["prompt"] for r in found["records"]]
    assert table.column("prompt_id").to_pylist() == [r["prompt_id"] for r in found["records"]]
    by_step = [dict(m) for m in table.column("pass_rate_by_step").to_pylist()]
    assert by_step == [{int(k): v for k, v in r["pass_rate_by_step"].items()}
                       for r in found["records"]]  # fmt: skip
    proc = run("prompts", VERL, "--from", "verl", "--success", "1", "--out", out)
    assert proc.returncode != 0 and "--force" in one_line(proc)


@pytest.mark.parametrize("out", ["-", "prompts.csv"])
def test_out_is_a_parquet_or_jsonl_file(out):
    proc = run("prompts", TRL, "--from", "trl", "--success", "2", "--out", out)
    assert proc.returncode == 2
    assert one_line(proc) == f"advcli: error: --out {out}: give a .parquet or .jsonl file"


def test_a_file_without_prompt_columns_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"x": 1}\n')
    proc = run("annotate", TRL, "--from", "trl", "--method", "grpo", "--keep-prompts", bad,
               "--out", tmp_path / "o.parquet")  # fmt: skip
    assert proc.returncode == 2
    line = one_line(proc)
    assert f"--keep-prompts {bad}: no 'prompt', 'prompt_tokens' or 'prompt_id' column" in line
    assert not (tmp_path / "o.parquet").exists()


def test_a_missing_file_names_its_option(tmp_path):
    proc = run("annotate", TRL, "--from", "trl", "--method", "grpo", "--drop-prompts",
               tmp_path / "none.jsonl", "--out", tmp_path / "o.parquet")  # fmt: skip
    assert proc.returncode != 0
    assert one_line(proc).startswith(f"advcli: error: --drop-prompts: {tmp_path / 'none.jsonl'}: ")


def test_a_file_of_other_prompts_is_said(tmp_path):
    """Nothing to remove is no error, but said: the file lists another log's prompts."""
    listed = tmp_path / "other.jsonl"
    listed.write_text('{"prompt": "a prompt of another run", "prompt_id": "x"}\n')
    out = tmp_path / "o.parquet"
    proc = run("annotate", TRL, "--from", "trl", "--method", "grpo", "--drop-prompts", listed,
               "--out", out, "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    found = json.loads(proc.stdout)
    assert found["rows_written"] == len(trl_rows(TRL))
    assert f"--drop-prompts {listed}: none of its 1 prompts is in" in found["warnings"][-1]


def test_keep_and_drop_together_are_refused(tmp_path):
    proc = run("annotate", TRL, "--from", "trl", "--method", "grpo", "--keep-prompts", "a",
               "--drop-prompts", "b", "--out", tmp_path / "o.parquet")  # fmt: skip
    assert proc.returncode == 2
    assert "give --keep-prompts or --drop-prompts, not both" in one_line(proc)


def test_shard_reads_the_prompts_kept_only(tmp_path):
    exported = tmp_path / "tokens.jsonl"
    proc = run("prompts", NEMO, "--from", "nemo-rl", "--success", "1", "--min-steps", "2",
               "--out", exported)  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    twice = {p for p, w in loop(nemo_rows(NEMO), 1.0).items() if w["steps_seen"] >= 2}
    assert {
        tuple(json.loads(line)["prompt_tokens"]) for line in exported.read_text().splitlines()
    } == twice
    proc = run("shard", NEMO, "--from", "nemo-rl", "--method", "grpo", "--keep-prompts",
               exported, "--out", tmp_path / "sh", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    found = json.loads(proc.stdout)
    n_kept = sum(p in twice for p, _, _ in nemo_rows(NEMO))
    assert found["rows"] == n_kept
    assert "prompts matched by their prompt tokens" in found["prompts_removed"]


def test_a_verl_prompt_seen_at_several_steps(tmp_path):
    """verl's dumps in the suite ask fresh prompts at each step: a third step that asks step
    1's prompts again (its scores reversed) makes each seen twice."""
    folder = tmp_path / "rollout"
    shutil.copytree(VERL, folder)
    rows = [json.loads(line) for line in (VERL / "1.jsonl").read_text().splitlines()]
    again = [{**r, "step": 3, "score": 1.0 - r["score"]} for r in rows]
    (folder / "3.jsonl").write_text("".join(json.dumps(r) + "\n" for r in again))
    want = loop(verl_rows(folder), 1.0)
    assert {w["steps_seen"] for w in want.values()} == {1, 2}
    found = prompts_json(folder, "--from", "verl", "--success", "1")
    for record in found["records"]:
        expected = want[record["prompt"]]
        for name in ("steps_seen", "pass_rate", "first_solved_step", "last_solved_step",
                     "forgotten", "zero_variance_steps"):  # fmt: skip
            assert record[name] == expected[name], name
        if expected["trend"] is None:
            assert record["trend"] is None
        else:
            assert record["trend"] == pytest.approx(expected["trend"], rel=1e-12)


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_an_empty_selection_drops_nothing_and_keeps_nothing(tmp_path, suffix):
    """No prompt passes the filters: the file lists none; --drop-prompts of it removes no row
    (and says so), --keep-prompts of it leaves none (refused in one line)."""
    chosen = tmp_path / f"none{suffix}"
    proc = run("prompts", TRL, "--from", "trl", "--success", "1000", "--min-steps", "99",
               "--out", chosen)  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    out = tmp_path / "out.parquet"
    proc = run("annotate", TRL, "--from", "trl", "--method", "grpo", "--drop-prompts", chosen,
               "--out", out)  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    assert f"--drop-prompts {chosen}: it lists no prompt" in proc.stderr.decode()
    assert pq.read_table(out).num_rows == pq.read_table(TRL).num_rows
    proc = run("annotate", TRL, "--from", "trl", "--method", "grpo", "--keep-prompts", chosen,
               "--out", out, "--force")  # fmt: skip
    assert proc.returncode == 1
    assert "is left" in one_line(proc)
