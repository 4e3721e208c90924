"""``advcli report --compare`` and ``--steps``: the numbers of the page's Compare section, by
hand and against a loop over the sides' rows (two sides or more), and the errors of its
options."""

from __future__ import annotations

import pytest

import advcli
from advcli.reports import ReportOptions
from tests.conftest import run, write_jsonl
from tests.reports.helpers import page_data

pytest.importorskip("bokeh")

QUESTIONS = ["How many primes are below twenty?", "Name the capital of France",
             "Sort these numbers: 3 1 2"]  # fmt: skip
BEFORE = {0: [1, 0, 0, 0], 1: [1, 1, 1, 1], 2: [0, 0, 1, 1]}
AFTER = {0: [1, 1, 1, 0], 1: [1, 1, 1, 1], 2: [0, 0, 0, 1]}
LATER = {0: [1, 1, 1, 1], 1: [1, 1, 0, 1], 2: [0, 0, 0, 0]}


def rows(run_name: str, rewards: dict[int, list[int]], only: str, **extra) -> list[dict]:
    """A run's rollouts: its own prompt ids (so that only the text matches them across
    runs), one prompt only it holds, rewards 0/1."""
    out = [{"prompt_id": f"{run_name}-{q}", "question": QUESTIONS[q], "reward": float(r),
            "input_ids": [q + 1, 40 + q, 50 + i], "action_mask": [0, 1, 1], **extra}
           for q, rs in rewards.items() for i, r in enumerate(rs)]  # fmt: skip
    out += [{"prompt_id": f"{run_name}-only", "question": only, "reward": float(r),
             "input_ids": [99, 41, 42], "action_mask": [0, 1, 1], **extra}
            for r in (0, 1)]  # fmt: skip
    return out


def compared(tmp_path, *args: str) -> dict:
    out = tmp_path / "compare.html"
    proc = run("report", *args, "--method", "grpo", "--out", str(out), "--quiet", "--force")
    assert proc.returncode == 0, proc.stderr.decode()
    return page_data(out)["compare"]


def test_two_runs_side_by_side(tmp_path) -> None:
    a = write_jsonl(tmp_path / "before.jsonl", rows("a", BEFORE, "Only in the first run"))
    b = write_jsonl(tmp_path / "after.jsonl", rows("b", AFTER, "Only in the second run"))
    c = compared(tmp_path, a, "--compare", b)
    assert c["labels"] == ["before.jsonl", "after.jsonl"]
    assert c["matched_by"] == "their prompt text"
    first, second = c["overview"]
    assert (first["rollouts"], first["groups"], second["rollouts"]) == (14, 4, 14)
    assert first["mean_reward"] == pytest.approx(8 / 14) and second["mean_reward"] == (
        pytest.approx(9 / 14))  # fmt: skip
    # q1 is all-correct in both; the prompts of one run are a signal group of two
    assert first["zero_variance_groups"] == second["zero_variance_groups"] == 1
    assert first["zero_variance_rollout_share"] == pytest.approx(4 / 14)
    assert first["kinds"] == second["kinds"] == [3, 1, 0, 0, 0, 0]
    # each side's rollouts in the same bins: 0 and 1 at the two ends
    rewards = c["distributions"]["rewards"]
    assert [counts[0] for counts in rewards["counts"]] == [6, 5]
    assert [counts[-1] for counts in rewards["counts"]] == [8, 9]
    assert c["distributions"]["advantages"]["edges"][0] < 0
    # the prompts both hold, the largest changes first: q0 0.25 → 0.75, q2 0.5 → 0.25, q1 1 → 1
    p = c["prompts"]
    assert (p["total"], p["listed"]) == (3, 3)
    assert p["prompt"] == [QUESTIONS[0], QUESTIONS[2], QUESTIONS[1]]
    assert p["change"] == pytest.approx([0.5, -0.25, 0.0])
    assert p["sides"][0]["mean_reward"] == pytest.approx([0.25, 0.5, 1.0])
    assert p["sides"][1]["zero_variance"] == [0, 0, 1]
    assert p["sides"][0]["groups"] == [1, 1, 1]


def test_labels_name_the_sides(tmp_path) -> None:
    a = write_jsonl(tmp_path / "run.jsonl", rows("a", BEFORE, "x"))
    (tmp_path / "other").mkdir()
    b = write_jsonl(tmp_path / "other" / "run.jsonl", rows("b", AFTER, "y"))
    assert compared(tmp_path, a, "--compare", b)["labels"] == ["a: run.jsonl", "b: run.jsonl"]
    named = compared(tmp_path, a, "--compare", b, "--label", "v1, v2")
    assert named["labels"] == ["v1", "v2"]


def test_prompts_match_by_their_tokens_without_text(tmp_path) -> None:
    """No prompt text column: the tokens before the first action identify a prompt."""
    strip = [{k: v for k, v in r.items() if k != "question"} for r in rows("a", BEFORE, "x")]
    a = write_jsonl(tmp_path / "a.jsonl", strip)
    b = write_jsonl(tmp_path / "b.jsonl", [{k: v for k, v in r.items() if k != "question"}
                                           for r in rows("b", AFTER, "y")])  # fmt: skip
    c = compared(tmp_path, a, "--compare", b)
    assert c["matched_by"] == "their prompt tokens (those before the first action)"
    # the two 'only' prompts share their prompt token (99): the same prompt to advcli
    assert c["prompts"]["total"] == 4
    assert c["prompts"]["prompt"][:2] == ["a-0", "a-2"]  # prompt ids of the first side


def test_two_steps_of_one_log(tmp_path) -> None:
    log = write_jsonl(tmp_path / "steps.jsonl", rows("a", BEFORE, "x", step=10) +
                      rows("b", AFTER, "y", step=200))  # fmt: skip
    c = compared(tmp_path, log, "--steps", "10,200")
    assert c["labels"] == ["step 10", "step 200"]
    assert [o["rollouts"] for o in c["overview"]] == [14, 14]
    assert c["prompts"]["change"] == pytest.approx([0.5, -0.25, 0.0])


def overview_loop(side: list[dict]) -> dict:
    """A side's overview, one row at a time: its rollouts, groups (one per prompt id here),
    mean reward, zero-variance groups and share of rollouts."""
    groups: dict[str, list[float]] = {}
    for r in side:
        groups.setdefault(r["prompt_id"], []).append(r["reward"])
    flat = [x for g in groups.values() if len(g) > 1 and max(g) == min(g) for x in g]
    return {
        "rollouts": len(side),
        "groups": len(groups),
        "mean_reward": sum(r["reward"] for r in side) / len(side),
        "zero_variance_groups": sum(len(g) > 1 and max(g) == min(g) for g in groups.values()),
        "zero_variance_rollout_share": len(flat) / len(side),
    }


def check_sides(c: dict, sides: list[list[dict]]) -> None:
    """The overview of each side equals the loop's; the prompts all sides hold (by text) are
    listed with their mean reward per side and their change from the first to the last."""
    for got, side in zip(c["overview"], sides, strict=True):
        want = overview_loop(side)
        assert {k: got[k] for k in want} == pytest.approx(want, rel=1e-12)
    means = []
    for side in sides:
        by: dict[str, list[float]] = {}
        for r in side:
            by.setdefault(r["question"], []).append(r["reward"])
        means.append({q: sum(v) / len(v) for q, v in by.items()})
    common = set.intersection(*(set(m) for m in means))
    p = c["prompts"]
    assert p["total"] == p["listed"] == len(common) == len(p["prompt"])
    for i, question in enumerate(p["prompt"]):
        assert [s["mean_reward"][i] for s in p["sides"]] == [m[question] for m in means]
        assert p["change"][i] == means[-1][question] - means[0][question]
    assert [abs(x) for x in p["change"]] == sorted((abs(x) for x in p["change"]), reverse=True)
    for key in ("rewards", "advantages"):
        assert len(c["distributions"][key]["counts"]) == len(sides)
    assert [sum(counts) for counts in c["distributions"]["rewards"]["counts"]] == [
        len(side) for side in sides
    ]


def test_three_runs_side_by_side(tmp_path) -> None:
    runs = [rows("a", BEFORE, "Only in a"), rows("b", AFTER, "Only in b"),
            rows("c", LATER, "Only in c")]  # fmt: skip
    paths = [
        write_jsonl(tmp_path / f"{name}.jsonl", r) for name, r in zip("abc", runs, strict=True)
    ]
    c = compared(tmp_path, paths[0], "--compare", paths[1], "--compare", paths[2],
                 "--label", "v1,v2,v3")  # fmt: skip
    assert c["labels"] == ["v1", "v2", "v3"]
    check_sides(c, runs)
    # q0: 0.25 → 1 (+0.75), q2: 0.5 → 0 (−0.5), q1: 1 → 0.75 (−0.25)
    assert c["prompts"]["prompt"] == [QUESTIONS[0], QUESTIONS[2], QUESTIONS[1]]
    unnamed = compared(tmp_path, paths[0], "--compare", paths[1], "--compare", paths[2])
    assert unnamed["labels"] == ["a.jsonl", "b.jsonl", "c.jsonl"]


def three_steps(tmp_path) -> tuple[str, list[list[dict]]]:
    steps = [rows("a", BEFORE, "x", step=10), rows("b", AFTER, "y", step=200),
             rows("c", LATER, "z", step=300)]  # fmt: skip
    return write_jsonl(tmp_path / "steps.jsonl", [r for s in steps for r in s]), steps


@pytest.mark.parametrize(
    ("steps", "chosen"),
    [("10,200,300", [0, 1, 2]), ("10:300", [0, 1, 2]), ("300,10", [2, 0]), ("5:250", [0, 1])],
)
def test_steps_listed_or_a_span(tmp_path, steps, chosen) -> None:
    log, by_step = three_steps(tmp_path)
    c = compared(tmp_path, log, "--steps", steps)
    assert c["labels"] == [f"step {(10, 200, 300)[k]}" for k in chosen]
    check_sides(c, [by_step[k] for k in chosen])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--steps", "10"], "--steps 10: give two or more different trainer steps, as --steps "
                            "10,200, --steps 10,50,200 or --steps 10:200 (every step from 10 to "
                            "200)"),
        (["--steps", "10,10"], "--steps 10,10: give two or more different trainer steps, as "
                               "--steps 10,200, --steps 10,50,200 or --steps 10:200 (every step "
                               "from 10 to 200)"),
        (["--steps", "200:10"], "--steps 200:10: give two or more different trainer steps, as "
                                "--steps 10,200, --steps 10,50,200 or --steps 10:200 (every step "
                                "from 10 to 200)"),
        (["--steps", "10,11"], "--steps 10,11: the log has no rollout at step 11. Its steps: "
                               "10, 200, 300"),
        (["--steps", "150:250"], "--steps 150:250: the log has 1 step from 150 to 250; give a "
                                 "span that holds 2 to 10. Its steps: 10, 200, 300"),
        (["--steps", ",".join(map(str, range(11)))],
         "--steps 0,1,2,3,4,5,6,7,8,9,10: at most 10 steps (one page tells 10 sides apart)"),
        (["--steps", "10,200", "--label", "one"],
         "--label one: give two names, one per side, as --label a,b"),
        (["--steps", "10,200,300", "--label", "x,y"],
         "--label x,y: give three names, one per side, as --label a,b,c"),
        (["--steps", "10:300", "--label", "x,y"],
         "--label x,y: give three names, one per side, as --label a,b,c"),
        (["--compare", "LOG", "--compare", "LOG", "--label", "x,y"],
         "--label x,y: give three names, one per side, as --label a,b,c"),
        (["--compare", "LOG"] * 10, "--compare: at most 9 other logs (one page tells 10 sides "
                                    "apart)"),
        (["--steps", "10,200", "--compare", "LOG"],
         "give --compare (other logs) or --steps (steps of one), not both"),
        (["--label", "x,y"], "--label names the sides of --compare or --steps: give one of them"),
    ],
)  # fmt: skip
def test_bad_compare_options_are_one_line(tmp_path, options, message) -> None:
    log, _ = three_steps(tmp_path)
    options = [log if o == "LOG" else o for o in options]
    proc = run("report", log, "--method", "grpo", "--out", str(tmp_path / "o.html"), *options)
    assert proc.returncode == 2
    assert proc.stderr.decode() == f"advcli: error: {message}\n"
    assert not (tmp_path / "o.html").exists()


def test_steps_need_a_step_column(tmp_path) -> None:
    log = write_jsonl(tmp_path / "log.jsonl", rows("a", BEFORE, "x"))
    proc = run("report", log, "--out", str(tmp_path / "o.html"), "--steps", "1,2")
    assert proc.returncode == 2
    assert proc.stderr.decode().endswith(
        "log.jsonl: --steps needs a 'step' column of numbers (the --from presets write each "
        "dump file's step). Hint: compare two logs with --compare\n"
    )


def test_the_python_api_takes_one_log_or_several(tmp_path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", rows("a", BEFORE, "x"))
    b = write_jsonl(tmp_path / "b.jsonl", rows("b", AFTER, "y"))
    c = write_jsonl(tmp_path / "c.jsonl", rows("c", LATER, "z"))
    for compare, labels in ((b, ["a.jsonl", "b.jsonl"]),
                            ([b, c], ["a.jsonl", "b.jsonl", "c.jsonl"])):  # fmt: skip
        out = tmp_path / "api.html"
        advcli.report(a, out, options=ReportOptions(compare=compare), force=True)  # type: ignore[arg-type]
        assert page_data(out)["compare"]["labels"] == labels
