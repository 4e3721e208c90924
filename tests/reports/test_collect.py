"""``advcli report`` end to end on small logs: the numbers its page holds, by hand."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from advcli import installed
from advcli.reports.collect import ReportOptions, choose_groups
from tests.commands.test_prompts import REAL, TRL, nemo_rows, trl_rows
from tests.conftest import ROOT, groups_of_four, rollout, run, write_jsonl, write_parquet
from tests.presets import frameworks as fw
from tests.presets.test_presets import CASES, RS
from tests.reports.helpers import page_data, tokens

pytest.importorskip("bokeh")

STD_A = math.sqrt(0.75 / 4)  # rewards 1, 0, 0, 0: population std (the seed convention)


def hand_log(tmp_path, **extra) -> str:
    rows = [
        rollout("a", 1.0, rollout_id="a0"),
        rollout("a", 0.0, rollout_id="a1"),
        rollout("a", 0.0, rollout_id="a2"),
        # prompt, action, action, observation, observation, action
        {"prompt_id": "a", "rollout_id": "a3", "input_ids": [7, 8, 9, 10, 11, 12],
         "action_mask": [0, 1, 1, 0, 0, 1], "reward": 0.0, "response": "the answer is 4"},
        rollout("b", 1.0, rollout_id="b0"),
        rollout("b", 1.0, rollout_id="b1"),
        rollout("c", 0.5, rollout_id="c0"),
        rollout("d", 0.50, rollout_id="d0"),
        rollout("d", 0.52, rollout_id="d1"),
    ]  # fmt: skip
    for row in rows:
        row.update(extra)
    return write_jsonl(tmp_path / "log.jsonl", rows)


def report(log, out, *args):
    proc = run("report", log, "--out", str(out), "--json", *args)
    assert proc.returncode == 0, proc.stderr.decode()
    return json.loads(proc.stdout), page_data(out)


def test_overview_groups_and_detail_by_hand(tmp_path):
    log = hand_log(tmp_path)
    summary, data = report(log, tmp_path / "r.html", "--method", "grpo")
    assert summary["bytes"] == (tmp_path / "r.html").stat().st_size
    assert summary["advantages_from"] == data["advantages_from"] == "grpo (advcli)"

    audit = json.loads(run("audit", log, "--json").stdout)
    for key in ("files", "warnings", "reward_histogram"):
        audit.pop(key)
    health = ("staleness", "lengths", "entropy", "mismatch", "advisories")  # its own sections
    audit = {k: v for k, v in audit.items() if k not in health}
    assert data["overview"] == audit  # the same numbers as audit --json
    assert audit["near_tie_groups"] == 1 and audit["near_tie_rollouts"] == 2

    g = data["groups"]["columns"]
    kinds = [data["kinds"][k] for k in g["kind"]]
    assert g["prompt"] == ["a", "b", "c", "d"] and g["size"] == [4, 2, 1, 2]
    assert kinds == ["signal", "all-correct", "singleton", "near-tie"]
    assert g["mean"] == pytest.approx([0.25, 1.0, 0.5, 0.51])
    assert g["std"] == pytest.approx([STD_A, 0.0, 0.0, 0.01])
    assert g["action_tokens"] == [12, 6, 3, 6]

    a = data["details"]["0"]
    assert [r["id"] for r in a] == ["a0", "a1", "a2", "a3"]
    assert [r["reward"] for r in a] == [1.0, 0.0, 0.0, 0.0]
    assert [r["length"] for r in a] == [3, 3, 3, 3]
    win, lose = 0.75 / (STD_A + 1e-6), -0.25 / (STD_A + 1e-6)
    assert [r["advantage"] for r in a] == pytest.approx([win, lose, lose, lose], rel=1e-6)
    ids, kind, adv = tokens(a[3]["tokens"])
    assert adv is not None
    assert ids.tolist() == [7, 8, 9, 10, 11, 12]
    assert kind.tolist() == [0, 1, 1, 2, 2, 1]
    assert adv[kind == 1] == pytest.approx([lose] * 3, rel=1e-6)
    assert a[3]["text"] == {"response": "the answer is 4"}
    assert a[3]["tokens"]["shown"] == a[3]["tokens"]["total"] == 6

    dist = data["distributions"]
    assert sum(dist["rewards"]["counts"]) == 9
    assert sum(dist["advantages"]["counts"]) == 27  # every action token
    near = 0.01 / (0.01 + 1e-6)  # group d: 0.50 and 0.52
    assert dist["advantages"]["edges"][0] == pytest.approx(-near, rel=1e-5)
    assert dist["advantages"]["edges"][-1] == pytest.approx(win, rel=1e-6)
    assert sum(dist["lengths"]["counts"]) == 9 and dist["group_sizes"] == {"1": 1, "2": 2, "4": 1}
    assert data["trends"] is None


def test_an_annotated_log_shows_its_own_advantages(tmp_path):
    log = hand_log(tmp_path)
    ok = run("annotate", log, "--method", "grpo", "--out", str(tmp_path / "ann.parquet"))
    assert ok.returncode == 0, ok.stderr.decode()
    _, mine = report(str(tmp_path / "ann.parquet"), tmp_path / "a.html")
    _, theirs = report(log, tmp_path / "b.html", "--method", "grpo")
    assert mine["advantages_from"] == "advantages"
    assert mine["distributions"]["advantages"] == theirs["distributions"]["advantages"]
    for code, rollouts in theirs["details"].items():
        got = [r["advantage"] for r in mine["details"][code]]
        assert got == pytest.approx([r["advantage"] for r in rollouts], rel=1e-6)
    _, plain = report(log, tmp_path / "c.html")  # no method, no advantages column
    assert plain["advantages_from"] is None and plain["distributions"]["advantages"] is None
    assert "adv" not in plain["details"]["0"][0]["tokens"]


def test_trends_per_step(tmp_path):
    rows = [
        rollout("p", 1.0, step=1), rollout("p", 1.0, step=1),  # zero-variance
        rollout("q", 1.0, step=1, n_action=5), rollout("q", 0.0, step=1, n_action=1),
        rollout("r", 0.0, step=2), rollout("r", 1.0, step=2),
    ]  # fmt: skip
    _, data = report(write_jsonl(tmp_path / "log.jsonl", rows), tmp_path / "r.html")
    t = data["trends"]
    assert t["step"] == [1.0, 2.0] and t["rollouts"] == [4, 2]
    assert t["zero_variance_share"] == [0.5, 0.0]
    assert t["mean_reward"] == [0.75, 0.5]
    assert t["mean_length"] == [3.0, 3.0]  # (3 + 3 + 5 + 1) / 4


def test_a_framework_dump_steps_from_its_files(tmp_path):
    dump = fw.verl_v1(tmp_path / "dump", fw.rollouts(steps=3))
    _, data = report(str(dump), tmp_path / "r.html", "--from", "verl", "--method", "grpo")
    audit = json.loads(run("audit", str(dump), "--from", "verl", "--json").stdout)
    assert data["overview"]["zero_variance_groups"] == audit["zero_variance_groups"] == 3
    assert data["trends"]["step"] == [1.0, 2.0, 3.0]
    assert data["trends"]["zero_variance_share"] == pytest.approx([1 / 3] * 3)


def test_a_log_without_token_ids(tmp_path):
    rows = [
        {"prompt_id": "a", "reward": 1.0, "completion": "yes"},
        {"prompt_id": "a", "reward": 0.0, "completion": "no"},
    ]
    log = write_parquet(tmp_path / "text.parquet", rows)
    _, data = report(log, tmp_path / "r.html", "--method", "grpo")
    assert data["distributions"]["lengths"] is None
    a = data["details"]["0"]
    assert [r["advantage"] for r in a] == pytest.approx([0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6)])
    assert [r["text"] for r in a] == [{"completion": "yes"}, {"completion": "no"}]
    assert "tokens" not in a[0] and a[0]["length"] is None
    assert sum(data["distributions"]["advantages"]["counts"]) == 2  # one per rollout


def test_large_logs_keep_a_seeded_sample_that_holds_the_worst_groups(tmp_path):
    rows = []
    for g in range(60):
        zero_variance = g % 3 == 0  # 20 zero-variance groups, g tokens long
        for s in range(2):
            reward = 1.0 if zero_variance else float(s)
            rows.append(rollout(f"g{g}", reward, n_action=70 + g))
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    args = ["--sample-groups", "30", "--detail-groups", "8", "--token-budget", "0"]
    summary, data = report(log, tmp_path / "r.html", *args)
    listed = data["groups"]["columns"]["code"]
    assert summary["groups_listed"] == len(listed) == 30 and data["groups"]["total"] == 60
    detail = sorted(int(c) for c in data["details"])
    assert len(detail) == 8 and set(detail) <= set(listed)
    assert {57, 54, 51, 48} <= set(detail)  # the 4 longest zero-variance groups
    view = data["details"]["57"][0]["tokens"]
    assert (view["shown"], view["total"]) == (64, 2 + 70 + 57)  # the smallest share
    _, again = report(log, tmp_path / "s.html", *args)
    assert again["groups"] == data["groups"] and again["details"].keys() == data["details"].keys()
    _, other = report(log, tmp_path / "t.html", *args, "--seed", "1")
    assert other["groups"]["columns"]["code"] != listed


def test_choose_groups_keeps_everything_that_fits():
    kinds = np.array([0, 1, 0, 4])
    listed, detail = choose_groups(kinds, None, np.array([2, 2, 2, 2]), ReportOptions())
    assert listed.tolist() == detail.tolist() == [0, 1, 2, 3]


def test_bad_advantages_column_is_one_line(tmp_path):
    row = rollout("a", 1.0, advantages=[0.5, 0.5])  # 5 tokens, 2 advantages
    log = write_jsonl(tmp_path / "log.jsonl", [row, rollout("a", 0.0, advantages=[0.0] * 5)])
    proc = run("report", log, "--out", str(tmp_path / "r.html"))
    assert proc.returncode == 1 and not (tmp_path / "r.html").exists()
    assert proc.stderr.decode() == (
        f"advcli: error: {log}: line 1, column 'advantages': 2 advantages but 5 tokens. "
        "Hint: report a log annotated by advcli, or give --method\n"
    )


def test_outputs_are_refused_like_every_command(tmp_path, small_log):
    out = tmp_path / "r.html"
    out.write_text("mine")
    proc = run("report", small_log, "--out", str(out))
    assert proc.returncode == 2 and b"already exists" in proc.stderr
    assert out.read_text() == "mine"
    proc = run("report", small_log, "--out", small_log, "--force")
    assert proc.returncode == 2 and b"one of the inputs" in proc.stderr


def test_without_the_extra_it_says_which_to_install(tmp_path, small_log):
    code = (
        "import sys; sys.modules['bokeh'] = None; sys.argv = ['advcli', 'report', "
        f"{small_log!r}, '--out', {str(tmp_path / 'r.html')!r}]\n"
        "from advcli.__main__ import main; main()"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, check=False)
    assert proc.returncode == 1
    assert proc.stderr.decode() == (
        "advcli: error: advcli report draws its charts with Bokeh. "
        f"Hint: {installed.pip_install('report')}\n"
    )


def test_a_framework_logs_options_serve_the_log_without_a_method(tmp_path):
    """--reward-columns reads TRL's reward with --from trl and no --method; without --from it
    is gdpo's parameter, and a page without a method has none to give it to."""
    dump = fw.trl(tmp_path / "out", fw.rollouts(steps=2))
    columns = ["--reward-columns", "accuracy_reward,format_reward"]
    _, data = report(str(dump), tmp_path / "r.html", "--from", "trl", "--group-size", "4",
                     *columns)  # fmt: skip
    assert list(data["distributions"]["components"]) == ["accuracy_reward", "format_reward"]
    log = write_jsonl(tmp_path / "log.jsonl", [rollout("a", 1.0), rollout("a", 0.0)])
    proc = run("report", log, "--out", str(tmp_path / "p.html"), *columns)
    assert proc.returncode == 2 and not (tmp_path / "p.html").exists()
    assert proc.stderr.decode() == (
        "advcli: error: --reward-columns is a method's parameter: add --method "
        "(e.g. --method grpo)\n"
    )


def test_reward_components_of_a_trl_log(tmp_path):
    dump = fw.trl(tmp_path / "out", fw.rollouts(steps=2))  # 24 completions, one NaN per step
    _, data = report(str(dump), tmp_path / "r.html", "--from", "trl", "--method", "grpo",
                     "--convention", "trl", "--group-size", "4",
                     "--reward-columns", "accuracy_reward,format_reward")  # fmt: skip
    parts = data["distributions"]["components"]
    assert list(parts) == ["accuracy_reward", "format_reward"]
    assert sum(parts["accuracy_reward"]["counts"]) == 22  # NaN: the function returned None
    assert sum(parts["format_reward"]["counts"]) == 24
    assert parts["format_reward"]["edges"][0] == 0.0 and parts["format_reward"]["edges"][-1] == 0.5
    assert data["trends"]["step"] == [1.0, 2.0]


@pytest.mark.parametrize("case", list(CASES))
def test_every_preset(tmp_path, case):
    write, name, extra, has_tokens = CASES[case]
    dump = write(tmp_path / "dump", RS)
    _, data = report(str(dump), tmp_path / "r.html", "--from", name, "--method", "grpo", *extra)
    audit = json.loads(run("audit", str(dump), "--from", name, *extra, "--json").stdout)
    assert data["overview"] == {k: audit[k] for k in data["overview"]}
    assert sum(data["distributions"]["advantages"]["counts"]) > 0
    rollouts = [r for group in data["details"].values() for r in group]
    assert len(rollouts) == audit["rollouts"]  # small: every group in detail
    assert all(("tokens" in r) == has_tokens for r in rollouts)


@pytest.mark.parametrize(
    ("advantages", "problem"),
    [
        (0.5, "column 'advantages' is not a list of numbers, one per token"),
        (["a"] * 5, "column 'advantages' holds no numbers"),
    ],
)
def test_an_advantages_column_that_is_not_numbers_per_token(tmp_path, advantages, problem):
    rows = [rollout("a", 1.0, advantages=advantages), rollout("a", 0.0, advantages=advantages)]
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    proc = run("report", log, "--out", str(tmp_path / "r.html"))
    assert proc.returncode == 1 and not (tmp_path / "r.html").exists()
    assert proc.stderr.decode() == (
        f"advcli: error: {log}: {problem}. "
        "Hint: report a log annotated by advcli, or give --method\n"
    )


def test_agent_steps_show_each_steps_advantage(tmp_path):
    from tests.methods.test_steps import _worked_rows

    log = write_jsonl(tmp_path / "steps.jsonl", _worked_rows())
    _, data = report(log, tmp_path / "r.html", "--method", "gigpo")
    rollouts = {r["id"]: r for group in data["details"].values() for r in group}
    assert rollouts["a"]["steps"] == [1.0, 0.5] and rollouts["b"]["steps"] == [-1.0, -0.5]
    overview = data["overview"]
    assert (overview["state_groups"], overview["steps_without_signal"]) == (3, 2)


def test_a_per_token_method_on_segments_shows_no_step_advantages(tmp_path):
    """A per-token method (GAE) has no one advantage per step: the segments' rollouts are shown
    without one (it was an internal error, exit 70), their tokens' advantages still there."""
    from tests.methods.test_steps import _worked_rows

    rows = [{**row, "values": [0.25] * len(row["input_ids"])} for row in _worked_rows()]
    log = write_jsonl(tmp_path / "steps.jsonl", rows)
    _, data = report(log, tmp_path / "r.html", "--method", "gae", "--gamma", "1.0")
    rollouts = [r for group in data["details"].values() for r in group]
    assert rollouts and all("steps" not in r and r["segments"] == 2 for r in rollouts)


def test_the_token_view_spends_its_budget_on_the_response(tmp_path):
    """A 180-token prompt keeps its last 8 tokens; the response's come after, in full."""
    prompt, response = list(range(1000, 1180)), list(range(5, 45))
    rows = [{"prompt_id": "q", "rollout_id": f"r{i}", "reward": float(i % 2),
             "input_ids": prompt + response, "action_mask": [0] * 180 + [1] * 40}
            for i in range(4)]  # fmt: skip
    log = write_jsonl(tmp_path / "long.jsonl", rows)
    _, data = report(log, tmp_path / "r.html", "--method", "grpo", "--token-budget", "256")
    view = data["details"]["0"][0]["tokens"]
    ids, kind, _ = tokens(view)
    assert view["folded"] == 172 and view["total"] == 220 and view["shown"] == 48
    assert ids.tolist() == prompt[-8:] + response
    assert kind.tolist() == [0] * 8 + [1] * 40


def test_charts_say_what_they_count_and_write_plain_numbers(tmp_path):
    log = write_jsonl(tmp_path / "text.jsonl", [{"prompt_id": f"a{i // 2}", "reward": float(i % 2),
                                                 "response": "x", "step": i // 2}
                                                for i in range(6)])  # fmt: skip
    _, data = report(log, tmp_path / "r.html", "--method", "grpo")
    charts = json.dumps(data["charts"])
    assert "advantages (rollouts)" in charts and "advantages (action tokens)" not in charts
    assert "0,0.[000000]" in charts  # NumeralTickFormatter: 6,000,000, not 6.000e+6
    assert '"min_interval": 1' in charts  # three steps: no tick at 0.5


def test_a_tokenizer_gives_the_tokens_text(tmp_path):
    pytest.importorskip("tokenizers")
    from tests.reports.helpers import tiny_tokenizer

    words = ["<unk>", "what", "is", "two", "plus", "equals", "four", "five"]
    tok = tiny_tokenizer(tmp_path / "tokenizer.json", words)
    rows = [{"prompt_id": "q", "rollout_id": f"r{i}", "reward": float(i),
             "input_ids": [1, 2, 3, 4, 3, 6 + i], "action_mask": [0, 0, 0, 0, 0, 1]}
            for i in range(2)]  # fmt: skip
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    _, data = report(log, tmp_path / "r.html", "--method", "grpo", "--tokenizer", tok)
    assert data["vocab"] == {"1": "what", "2": "is", "3": "two", "4": "plus", "6": "four",
                             "7": "five"}  # fmt: skip
    proc = run("report", log, "--out", str(tmp_path / "s.html"), "--tokenizer",
               str(tmp_path / "none.json"))  # fmt: skip
    assert proc.returncode == 2 and b"--tokenizer" in proc.stderr and b"no such file" in proc.stderr


def _tokenized_log(tmp_path) -> str:
    rows = [{"prompt_id": "q", "rollout_id": f"r{i}", "reward": float(i),
             "input_ids": [1, 2 + i], "action_mask": [0, 1]} for i in range(2)]  # fmt: skip
    return write_jsonl(tmp_path / "log.jsonl", rows)


@pytest.mark.parametrize("kind", ["folder with one", "folder", "fifo", "device", "nothing"])
def test_a_tokenizer_that_is_no_file_says_what_it_is(tmp_path, kind):
    """A model folder holding a tokenizer.json is read; a folder without one, a FIFO or a
    device is refused saying what it is (a FIFO would be opened)."""
    pytest.importorskip("tokenizers")
    from tests.reports.helpers import tiny_tokenizer

    folder = tmp_path / "model"
    folder.mkdir()
    given = {"folder with one": folder, "folder": folder, "fifo": tmp_path / "fifo",
             "device": "/dev/null", "nothing": tmp_path / "none.json"}[kind]  # fmt: skip
    if kind == "folder with one":
        tiny_tokenizer(folder / "tokenizer.json", ["<unk>", "a", "b"])
    if kind == "fifo":
        os.mkfifo(given)
    proc = run("report", _tokenized_log(tmp_path), "--method", "grpo", "--tokenizer", given,
               "--out", tmp_path / "r.html")  # fmt: skip
    if kind == "folder with one":
        assert proc.returncode == 0, proc.stderr.decode()
        assert (tmp_path / "r.html").exists()
        return
    hint = "Hint: give a tokenizer.json, or the model folder that holds one"
    special = f"{given} is not a regular file (a FIFO, a device or a socket)"
    said = {
        "folder": f"a folder without a tokenizer.json. {hint}",
        "fifo": f"{special}. {hint}",
        "device": f"{special}. {hint}",
        "nothing": f"no such file or folder. {hint}",
    }[kind] + "\n"
    assert proc.returncode == 2
    assert proc.stderr.decode() == f"advcli: error: --tokenizer {given}: {said}"
    assert not (tmp_path / "r.html").exists()


def test_a_tokenizer_whose_regex_panics_is_one_line_naming_it(tmp_path):
    """A decoder's regular expression beyond Oniguruma's retry limit makes the tokenizers
    library panic (a BaseException, PanicException, with Rust's own message on stderr)."""
    tokenizers = pytest.importorskip("tokenizers")

    words = {"<unk>": 0, "a": 1, "a" * 30 + "!": 2, "b": 3}
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(words, unk_token="<unk>"))
    tokenizer.decoder = tokenizers.decoders.Replace(tokenizers.Regex("(a+)+c"), "x")
    tok = tmp_path / "tokenizer.json"
    tokenizer.save(str(tok))
    log = _tokenized_log(tmp_path)
    proc = run("report", log, "--method", "grpo", "--tokenizer", tok, "--out", tmp_path / "r.html")
    assert proc.returncode == 2
    assert proc.stderr.decode() == (
        f"advcli: error: --tokenizer {tok}: {log}: line 1, column 'input_ids': token 2: the "
        "tokenizers library fails to decode it (Onig: Regex search error: retry-limit-in-match "
        "over). Hint: give another tokenizer.json, or leave --tokenizer out\n"
    )
    assert not (tmp_path / "r.html").exists()


def test_a_report_of_a_log_with_an_infinite_step_is_drawn(tmp_path):
    """(found by tests.fuzz: a verl line with "step": 1e999 made the page's JSON invalid)"""
    pytest.importorskip("bokeh")
    rows = [{**r, "step": float("inf") if i == 0 else 1.0} for i, r in enumerate(groups_of_four())]
    path = tmp_path / "log.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    proc = run("report", str(path), "--method", "grpo", "-q", "--out", str(tmp_path / "r.html"))
    assert proc.returncode == 0, proc.stderr.decode()
    trend = page_data(tmp_path / "r.html")["trends"]  # the infinite step's rollout on no step
    assert (trend["step"], trend["rollouts"]) == ([1.0], [7])


def steps_log(tmp_path) -> str:
    """The refs' log of both log-prob streams (tests/fixtures/refs/health), its 24 rollouts on
    three steps, with versions, truncations and token entropies."""
    from tests.reports.test_rollout_pass import LOG

    table = pq.read_table(LOG)
    n = table.num_rows
    rng = np.random.default_rng(5)
    entropies = [
        rng.uniform(0, 1.5, len(ids)).tolist() for ids in table.column("input_ids").to_pylist()
    ]
    table = (
        table.append_column("step", pa.array([i // 8 for i in range(n)], pa.int64()))
        .append_column("version", pa.array([i // 8 - (i % 3 == 0) for i in range(n)], pa.int64()))
        .append_column("truncated", pa.array([i % 5 == 0 for i in range(n)]))
        .append_column("entropies", pa.array(entropies, pa.list_(pa.float32())))
    )
    path = tmp_path / "steps.parquet"
    pq.write_table(table, path)
    return str(path)


def test_health_by_step_is_the_audits_by_step(tmp_path):
    log = steps_log(tmp_path)
    out = tmp_path / "r.html"
    proc = run("report", log, "--method", "grpo", "--correction", "token-mask",
               "--correction-bounds", "0.9,1.1", "--out", str(out), "--quiet")  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    health = page_data(out)["health_by_step"]
    audit = json.loads(run("audit", log, "--by", "step", "--json").stdout)
    keys = ["0", "1", "2"]
    assert health["step"] == [0.0, 1.0, 2.0]
    series = health["series"]
    by = {
        "zero_variance_rollout_share": [audit["groups_by_step"][k]["zero_variance_rollout_share"]
                                        for k in keys],
        "truncated_share": [audit["lengths"]["by_step"][k]["truncated_share"] for k in keys],
        "mean_length": [audit["lengths"]["by_step"][k]["length"]["mean"] for k in keys],
        "mean_lag": [audit["staleness"]["by_step"][k]["mean_lag"] for k in keys],
        "entropy_token_mean": [audit["entropy"]["by_step"][k] for k in keys],
    }  # fmt: skip
    for name, want in by.items():
        assert series[name] == want, name
    assert series["mean_lag"] == [3 / 8, 3 / 8, 2 / 8]  # lag 1 on rows 0, 3, 6, 9, …, 21
    # the mismatch by step against a float64 loop over the log
    rows = pq.read_table(log).to_pylist()
    for s in range(3):
        n = absolute = k3 = masked = 0.0
        for row in rows[8 * s : 8 * s + 8]:
            for a, t, q in zip(row["action_mask"], row["trainer_logprobs"], row["logprobs"],
                               strict=True):  # fmt: skip
                if a:
                    d = float(t) - float(q)
                    n += 1
                    absolute += abs(d)
                    k3 += math.exp(d) - 1 - d
                    masked += not 0.9 <= math.exp(d) <= 1.1
        assert series["abs_delta_mean"][s] == pytest.approx(absolute / n, rel=1e-12)
        assert series["k3_mean"][s] == pytest.approx(k3 / n, rel=1e-9)
        assert series["masked_token_share"][s] == pytest.approx(masked / n, rel=1e-12)


def test_no_step_no_health_by_step(tmp_path):
    from tests.reports.test_rollout_pass import LOG

    out = tmp_path / "r.html"
    proc = run("report", str(LOG), "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr.decode()
    assert page_data(out)["health_by_step"] is None


def health_rows(path) -> list[tuple[tuple[int, ...], float, float]]:
    """(prompt: the tokens before the first action, step, reward) per row of sample_data's
    health log."""
    return [
        (tuple(r["input_ids"][: r["action_mask"].index(1)]), float(r["step"]), r["reward"])
        for r in pq.read_table(path).to_pylist()
    ]


NEMO_DEFAULT = REAL / "nemo-rl" / "default" / "exp_001"  # two steps, rewards 0 and 1
RUN_VIEW = [  # a multi-step log, the options that read it, its rows as the framework wrote them
    pytest.param(TRL, ["--from", "trl"], trl_rows, id="trl"),  # 5 reward values: the mean
    pytest.param(NEMO_DEFAULT, ["--from", "nemo-rl"], nemo_rows, id="nemo-rl"),  # 2: the pass rate
    pytest.param(ROOT / "sample_data" / "health.parquet", [], health_rows, id="health"),
]


@pytest.mark.parametrize(("log", "args", "read"), RUN_VIEW)
def test_the_run_view_equals_a_float64_loop_over_the_dumps_rows(tmp_path, log, args, read):
    """Per step: the pass rate (reward ≥ the higher of two values), else the mean reward, and
    the rewards' quantiles (linear between order statistics); each prompt seen at two steps
    by its largest move of that figure between consecutive steps, the largest first."""
    rows = read(log)
    values = sorted({r for *_, r in rows})
    success = values[1] if len(values) == 2 else None
    _, data = report(str(log), tmp_path / "r.html", *args)
    view = data["health_by_step"]
    steps = sorted({s for _, s, _ in rows})
    assert view["step"] == steps and view["success"] == success
    series = view["series"]
    assert ("pass_rate" in series) == (success is not None) != ("mean_reward" in series)
    for k, s in enumerate(steps):
        rewards = sorted(r for _, t, r in rows if t == s)
        n = len(rewards)
        if success is None:
            assert series["mean_reward"][k] == pytest.approx(sum(rewards) / n, rel=1e-12)
        else:
            assert series["pass_rate"][k] == sum(r >= success for r in rewards) / n
        for q in (0.1, 0.25, 0.5, 0.75, 0.9):
            h = q * (n - 1)
            lo, hi = math.floor(h), min(math.floor(h) + 1, n - 1)
            want = rewards[lo] + (h - lo) * (rewards[hi] - rewards[lo])
            got = series[f"reward_q{round(100 * q)}"][k]
            assert got == pytest.approx(want, rel=1e-12, abs=1e-15), (s, q)
    by: dict = {}
    for prompt, s, r in rows:
        by.setdefault(prompt, {}).setdefault(s, []).append(r)
    moves = {}
    for prompt, cells in by.items():
        figure = {s: (sum(r >= success for r in v) if success is not None else sum(v)) / len(v)
                  for s, v in sorted(cells.items())}  # fmt: skip
        pairs = list(zip(list(figure)[:-1], list(figure)[1:], strict=True))
        if pairs:
            a, b = max(pairs, key=lambda ab: abs(figure[ab[1]] - figure[ab[0]]))  # the first
            moves[prompt] = (a, b, figure[a], figure[b])
    movers = view["movers"]
    assert movers["total"] == len(moves) == len(movers["prompt"])
    got = sorted(zip(movers["from_step"], movers["to_step"], movers["before"], movers["after"],
                     strict=True))  # fmt: skip
    for mine, want in zip(got, sorted(moves.values()), strict=True):
        assert mine[:2] == want[:2] and mine[2:] == pytest.approx(want[2:], rel=1e-12)
    for before, after, change in zip(movers["before"], movers["after"], movers["change"],
                                     strict=True):  # fmt: skip
        assert change == pytest.approx(after - before, rel=1e-12)
    changes = [abs(c) for c in movers["change"]]
    assert changes == sorted(changes, reverse=True)
    if log == TRL:  # by prompt text, as `prompts` finds each prompt's mean reward by step
        assert movers["matched_by"] == "their prompt text"
        records = json.loads(run("prompts", str(log), "--from", "trl", "--success", "2",
                                 "--json").stdout)["records"]  # fmt: skip
        by_step = {r["prompt"]: r["mean_reward_by_step"] for r in records}
        for i, prompt in enumerate(movers["prompt"]):
            assert moves[prompt][:2] == (movers["from_step"][i], movers["to_step"][i])
            assert by_step[prompt][str(int(movers["to_step"][i]))] == movers["after"][i]
