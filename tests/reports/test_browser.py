"""The report page in a real headless Chromium: it draws without errors, shows the audit's
numbers, sorts its groups, opens a group and shows a rollout's tokens."""

from __future__ import annotations

import json
import math
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.conftest import SAMPLE, run, write_jsonl
from tools import browser

pytest.importorskip("bokeh")
pytestmark = pytest.mark.skipif(browser.missing() is not None, reason=str(browser.missing()))


@pytest.fixture(scope="module")
def chromium():
    """One headless Chromium page for the module (Playwright runs one at a time)."""
    with browser.browser_page() as (page, errors):
        yield page, errors


@pytest.fixture(scope="module")
def page_of_sample(tmp_path_factory, chromium):
    out = tmp_path_factory.mktemp("report") / "report.html"
    log = str(SAMPLE / "rollouts.parquet")
    proc = run("report", log, "--method", "grpo", "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr.decode()
    audit = json.loads(run("audit", log, "--json").stdout)
    page, errors = chromium
    page.goto(out.as_uri())
    page.wait_for_function("document.body.dataset.ready === 'yes'", timeout=20_000)
    return page, errors, audit


def test_it_draws_offline_without_errors(page_of_sample):
    page, errors, _ = page_of_sample
    assert errors == []
    charts = page.locator(".chart")
    assert charts.count() == 4  # rewards, advantages, lengths, group sizes
    for i in range(charts.count()):  # Bokeh drew a canvas in each
        assert (
            charts.nth(i).locator("canvas").count()
            + charts.nth(i).evaluate("e => e.querySelectorAll('*').length")
            > 1
        )
    assert page.evaluate("typeof window.advcliChartsDrawn") == "number"


def test_the_overview_is_the_audit(page_of_sample):
    page, _, audit = page_of_sample
    shown = page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('[data-key]')]"
        ".map(e => [e.dataset.key, JSON.parse(e.dataset.value)]))"
    )
    assert len(shown) == 15
    assert shown == {key: audit[key] for key in shown}
    assert page.locator("[data-key=zero_variance_groups]").inner_text() == "1"
    assert page.locator("[data-key=zero_variance_rollout_share]").inner_text() == "30.8%"


def prompts(page) -> list[str]:
    return page.locator("#group-table tbody td.prompt").all_inner_texts()


def test_the_group_table_sorts_and_filters(page_of_sample):
    page, errors, _ = page_of_sample
    assert prompts(page) == ["p-math", "p-easy", "p-tool", "p-lonely"]  # log order
    page.click("#group-table th[data-sort=mean]")  # ascending mean reward
    assert prompts(page) == ["p-math", "p-tool", "p-lonely", "p-easy"]
    page.click("#group-table th[data-sort=mean]")  # descending
    assert prompts(page) == ["p-easy", "p-lonely", "p-tool", "p-math"]
    page.fill("#group-filter", "p-t")
    assert prompts(page) == ["p-tool"]
    page.fill("#group-filter", "")
    page.select_option("#group-kind", label="singleton")
    assert prompts(page) == ["p-lonely"]
    page.select_option("#group-kind", value="all")
    page.click("#group-table th[data-sort=code]")
    assert errors == []


def test_a_group_opens_and_a_rollout_shows_its_tokens(page_of_sample):
    page, errors, _ = page_of_sample
    page.locator("#group-table tbody tr", has_text="p-tool").click()
    assert page.locator("#group-detail").is_visible()
    rollouts = page.locator("#rollout-table tbody tr")
    assert rollouts.count() == 4  # p-tool's rollouts, side by side
    first = rollouts.nth(0).locator("td").all_inner_texts()
    assert first[:2] == ["r20", "1"] and first[3:] == ["9", "1"]  # reward 1, 9 actions
    rollouts.nth(0).click()
    assert page.locator("#token-view").is_visible()
    # r20: 4 prompt tokens, 5 actions, a tool's output of 3 tokens, 4 actions
    assert page.locator("#tokens .tok").count() == 16
    assert page.locator("#tokens .tok.k0").count() == 4
    assert page.locator("#tokens .tok.k2").count() == 3
    actions = page.locator("#tokens .tok.k1")
    assert actions.count() == 9
    ids = pq.read_table(SAMPLE / "rollouts.parquet").column("input_ids")[8].as_py()
    win = 0.375 / math.sqrt(0.6875 / 4)  # rewards 1, 0, 0.5, 1: grpo's 0.9045 for r20
    assert actions.first.get_attribute("title") == f"token {ids[4]} · action · advantage {win:.4f}"
    assert errors == []


def test_a_step_rollout_shows_each_steps_advantage(tmp_path, chromium):
    from tests.methods.test_steps import _worked_rows

    out = tmp_path / "steps.html"
    log = write_jsonl(tmp_path / "steps.jsonl", _worked_rows())
    proc = run("report", log, "--method", "gigpo", "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr.decode()
    page, errors = chromium
    page.goto(out.as_uri())
    page.wait_for_function("document.body.dataset.ready === 'yes'", timeout=20_000)
    assert page.locator("[data-key=no_signal_step_share]").inner_text() == "50.0%"
    page.locator("#group-table tbody tr").first.click()
    page.locator("#rollout-table tbody tr", has_text="a").first.click()
    assert page.locator("#token-steps").inner_text() == "advantage of each step: 1 · 0.5"
    assert errors == []


def test_a_long_prompt_is_folded_before_the_response(tmp_path, chromium):
    rows = [{"prompt_id": "q", "rollout_id": f"r{i}", "reward": float(i % 2),
             "input_ids": list(range(100, 280)) + list(range(5, 45)),
             "action_mask": [0] * 180 + [1] * 40} for i in range(4)]  # fmt: skip
    out = tmp_path / "long.html"
    log = write_jsonl(tmp_path / "long.jsonl", rows)
    proc = run("report", log, "--method", "grpo", "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr.decode()
    page, errors = chromium
    page.goto(out.as_uri())
    page.wait_for_function("document.body.dataset.ready === 'yes'", timeout=20_000)
    page.locator("#group-table tbody tr").first.click()
    page.locator("#rollout-table tbody tr").first.click()
    assert page.locator("#tokens .folded").inner_text() == "… 172 prompt tokens"
    assert page.locator("#tokens .tok.k0").count() == 8
    assert page.locator("#tokens .tok.k1").count() == 40
    assert errors == []


def test_a_tokenizer_shows_each_tokens_text(tmp_path, chromium):
    pytest.importorskip("tokenizers")
    from tests.reports.helpers import tiny_tokenizer

    tok = tiny_tokenizer(tmp_path / "tokenizer.json", ["<unk>", "what", "is", "two", "four"])
    rows = [{"prompt_id": "q", "rollout_id": f"r{i}", "reward": float(i),
             "input_ids": [1, 2, 3, 4], "action_mask": [0, 0, 1, 1]} for i in range(2)]  # fmt: skip
    out = tmp_path / "text.html"
    log = write_jsonl(tmp_path / "text.jsonl", rows)
    proc = run("report", log, "--method", "grpo", "--tokenizer", tok, "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr.decode()
    page, errors = chromium
    page.goto(out.as_uri())
    page.wait_for_function("document.body.dataset.ready === 'yes'", timeout=20_000)
    page.locator("#group-table tbody tr").first.click()
    page.locator("#rollout-table tbody tr").first.click()
    assert page.locator("#tokens .tok").all_inner_texts() == ["what", "is", "two", "four"]
    assert page.locator("#tokens .tok.k1").first.get_attribute("title").startswith("token 3 ·")
    assert errors == []


HOSTILE = '<img src=x onerror="alert(1)"></script><script>alert(2)</script><!-- @@APP@@ @@DATA@@'


def test_names_and_texts_in_the_log_never_run_as_script(tmp_path, chromium):
    """A file named like a template slot and text columns holding markup and slot names: the
    page shows them as text, no script runs, nothing breaks."""
    rows = [
        {"prompt_id": HOSTILE if i < 2 else "p2", "rollout_id": f"r{i}", "reward": float(i % 2),
         "input_ids": [1, 2, 3], "action_mask": [0, 1, 1], "response": HOSTILE}
        for i in range(4)
    ]  # fmt: skip
    log = write_jsonl(tmp_path / "@@DATA@@ @@TITLE@@.jsonl", rows)
    out = tmp_path / "report.html"
    proc = run("report", log, "--method", "grpo", "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr.decode()
    page, errors = chromium
    errors.clear()
    dialogs: list[str] = []

    def dismiss(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", dismiss)
    page.goto(out.as_uri())
    page.wait_for_function("document.body.dataset.ready === 'yes'", timeout=20_000)
    assert page.locator("h1").inner_text().endswith("@@DATA@@ @@TITLE@@.jsonl")
    page.locator("#group-table tbody tr").first.click()
    page.locator("#rollout-table tbody tr").first.click()
    assert HOSTILE in page.locator("#token-text").inner_text()
    assert page.locator("#group-table img, #token-text img, #group-title img").count() == 0
    assert dialogs == [] and errors == []


def test_a_token_free_log_of_many_files_is_tidy(tmp_path, chromium):
    """Forty step files fold into their folder and count; a log without token ids has no
    action-token or length columns, and its advantages chart counts rollouts."""
    folder = tmp_path / "steps"
    folder.mkdir()
    for step in range(40):
        write_jsonl(folder / f"step_{step:03d}.jsonl",
                    [{"prompt_id": f"p{step}", "reward": float(i % 2), "response": "hi",
                      "step": step} for i in range(2)])  # fmt: skip
    out = tmp_path / "many.html"
    proc = run("report", str(folder), "--method", "grpo", "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr.decode()
    page, errors = chromium
    page.goto(out.as_uri())
    page.wait_for_function("document.body.dataset.ready === 'yes'", timeout=20_000)
    assert page.locator("#subtitle summary").inner_text() == f"{folder}/ (40 files)"
    headers = page.locator("#group-table th").all_inner_texts()
    assert not any("action tokens" in h for h in headers)
    page.locator("#group-table tbody tr").first.click()
    assert page.locator("#length-head").is_hidden()
    assert "n/a" not in page.locator("#rollout-table").inner_text()
    assert errors == []


def test_groups_are_found_by_their_prompts_words_and_filtered(tmp_path, chromium):
    questions = {"q0": "How many primes are below twenty?", "q1": "Name the capital of France",
                 "q2": "Sort these numbers: 3 1 2"}  # fmt: skip
    rows = [{"prompt_id": key, "question": text, "reward": float((i + n) % 3 == 0) * (n + 1),
             "step": n, "input_ids": [1, 2, 3], "action_mask": [0, 1, 1]}
            for n, (key, text) in enumerate(questions.items()) for i in range(3)]  # fmt: skip
    out = tmp_path / "words.html"
    log = write_jsonl(tmp_path / "words.jsonl", rows)
    proc = run("report", log, "--method", "grpo", "--out", str(out), "--quiet",
               "--detail-groups", "2")  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    page, errors = chromium
    page.goto(out.as_uri())
    page.wait_for_function("document.body.dataset.ready === 'yes'", timeout=20_000)
    headers = page.locator("#group-table th").all_inner_texts()
    assert headers[:4] == ["#", "prompt id", "prompt (first words)", "step"]
    assert "advantage spread" in headers
    page.fill("#group-filter", "capital of")
    assert prompts(page) == ["q1", "Name the capital of France"]
    page.fill("#group-filter", "")
    page.select_option("#group-step", label="step 2")
    assert prompts(page)[0] == "q2"
    page.select_option("#group-step", value="all")
    page.fill("#reward-min", "0.5")
    page.fill("#reward-max", "0.8")
    assert prompts(page) == ["q1", "Name the capital of France"]  # mean reward 2/3
    page.fill("#reward-min", "")
    page.fill("#reward-max", "")
    assert page.locator("#group-table td.no-detail").count() == 1
    assert "not in the detail sample" in page.locator("#groups-note").inner_text()
    assert errors == []


def test_two_runs_side_by_side(tmp_path, chromium):
    """The Compare section: each side's overview and change, the distributions overlaid
    (two sets of bars in each chart), the prompts both hold by change, found by their words."""
    from tests.reports.test_compare import AFTER, BEFORE, QUESTIONS, rows

    a = write_jsonl(tmp_path / "before.jsonl", rows("a", BEFORE, "Only in the first run"))
    b = write_jsonl(tmp_path / "after.jsonl", rows("b", AFTER, "Only in the second run"))
    out = tmp_path / "compare.html"
    proc = run("report", a, "--compare", b, "--label", "before,after", "--method", "grpo",
               "--out", str(out), "--quiet")  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    page, errors = chromium
    page.goto(out.as_uri())
    page.wait_for_function("document.body.dataset.ready === 'yes'", timeout=20_000)
    assert page.locator("#compare").is_visible()
    assert page.locator("#compare-title").inner_text() == "Compare: before and after"
    mean = page.locator("#compare-overview tr[data-key=mean_reward] td").all_inner_texts()
    assert mean == ["mean reward", "0.5714", "0.6429", "+0.07143"]
    charts = page.locator("#compare-charts .chart")
    assert charts.count() == 2
    legends = page.evaluate(
        "Object.values(Bokeh.index).map(v => v.model).filter(m => m.id && "
        "m.title && m.title.text.includes('share of rollouts'))"
        ".map(m => m.renderers.filter(r => r.glyph.type === 'Quad').length)"
    )
    assert legends == [2, 2]
    table = page.locator("#compare-table tbody tr")
    assert table.count() == 3
    firsts = [table.nth(i).locator("td").first.inner_text() for i in range(3)]
    assert firsts == [QUESTIONS[0], QUESTIONS[2], QUESTIONS[1]]
    assert table.nth(0).locator("td").last.inner_text() == "+0.5"
    page.fill("#compare-filter", "capital")
    assert table.count() == 1 and "France" in table.nth(0).inner_text()
    assert "3 prompts are in both" in page.locator("#compare-prompts-note").inner_text()
    assert errors == []


def test_two_steps_side_by_side(tmp_path, chromium):
    from tests.reports.test_compare import AFTER, BEFORE, rows

    log = write_jsonl(tmp_path / "steps.jsonl", rows("a", BEFORE, "x", step=10) +
                      rows("b", AFTER, "y", step=200))  # fmt: skip
    out = tmp_path / "steps.html"
    proc = run("report", log, "--steps", "10,200", "--method", "grpo", "--out", str(out),
               "--quiet")  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    page, errors = chromium
    page.goto(out.as_uri())
    page.wait_for_function("document.body.dataset.ready === 'yes'", timeout=20_000)
    heads = page.locator("#compare-overview th").all_inner_texts()
    assert heads == ["", "step 10", "step 200", "change"]
    share = page.locator("#compare-overview tr[data-key=zero_variance_rollout_share] td")
    assert share.all_inner_texts() == ["zero-variance share of rollouts", "28.6%", "28.6%",
                                       "0.0 pt"]  # fmt: skip
    assert not page.locator("#compare").is_hidden()
    assert errors == []


def test_the_token_view_overlays_delta_the_weight_and_the_masked_tokens(tmp_path, chromium):
    from tests.reports.test_rollout_pass import LOG

    out = tmp_path / "overlay.html"
    proc = run("report", str(LOG), "--method", "grpo", "--correction", "token-mask",
               "--correction-bounds", "0.9,1.1", "--out", str(out), "--quiet")  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    row = pq.read_table(LOG).slice(0, 1).to_pylist()[0]
    page, errors = chromium
    page.goto(out.as_uri())
    page.wait_for_function("document.body.dataset.ready === 'yes'", timeout=20_000)
    page.locator("#group-table tbody tr").first.click()
    page.locator("#rollout-table tbody tr").first.click()
    pick = page.locator("#token-colour")
    assert pick.is_visible()
    assert pick.locator("option").all_inner_texts() == [
        "advantage", "δ = trainer − sampler log-prob", "correction weight (− 1)"]  # fmt: skip
    assert "token-mask [0.9, 1.1]" in page.locator("#overlay-note").inner_text()
    actions = page.locator("#tokens .tok.k1")
    t = row["action_mask"].index(1)
    delta = float(row["trainer_logprobs"][t]) - float(row["logprobs"][t])
    rho = math.exp(delta)
    title = actions.first.get_attribute("title")
    assert f"δ {float(f'{delta:.4g}'):g}" in title and f"ρ {float(f'{rho:.4g}'):g}" in title
    assert ("· masked" if not 0.9 <= rho <= 1.1 else "· kept") in title
    outside = sum(
        1
        for a, tr, s in zip(
            row["action_mask"], row["trainer_logprobs"], row["logprobs"], strict=True
        )
        if a and not 0.9 <= math.exp(float(tr) - float(s)) <= 1.1
    )
    assert page.locator("#tokens .tok.masked").count() == outside
    before = actions.first.evaluate("n => n.style.background")
    pick.select_option("delta")
    after = page.locator("#tokens .tok.k1").first.evaluate("n => n.style.background")
    assert after != before  # coloured by δ now
    assert errors == []


def test_a_log_without_the_trainer_stream_says_so(tmp_path, chromium):
    out = tmp_path / "plain.html"
    proc = run("report", str(SAMPLE / "rollouts.parquet"), "--method", "grpo", "--out", str(out),
               "--quiet")  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    page, errors = chromium
    page.goto(out.as_uri())
    page.wait_for_function("document.body.dataset.ready === 'yes'", timeout=20_000)
    page.locator("#group-table tbody tr", has_text="p-tool").click()
    page.locator("#rollout-table tbody tr").first.click()
    assert page.locator("#token-colour").is_hidden()
    assert "no trainer log-probs" in page.locator("#overlay-note").inner_text()
    assert errors == []


def test_the_health_by_step_charts_open_a_steps_groups(tmp_path, chromium):
    from tests.reports.test_collect import steps_log

    out = tmp_path / "health.html"
    proc = run("report", steps_log(tmp_path), "--method", "grpo", "--correction", "token-mask",
               "--correction-bounds", "0.9,1.1", "--out", str(out), "--quiet")  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    page, errors = chromium
    page.goto(out.as_uri())
    page.wait_for_function("document.body.dataset.ready === 'yes'", timeout=20_000)
    charts = page.locator("#trend-charts .chart").evaluate_all("cs => cs.map(c => c.id)")
    for name in ("zero-variance", "reward", "length", "truncated", "lag", "entropy", "delta",
                 "k3", "masked"):  # fmt: skip
        assert f"chart-trend-{name}" in charts
    assert page.locator("#group-table tbody tr").count() == 6
    # a click on the masked share's point of step 1: select it as Bokeh's TapTool does
    page.evaluate(
        """() => {
          const doc = Bokeh.documents.find((d) => d.roots().some((r) =>
            String(r.title.text).startsWith("share of action tokens masked")));
          const source = [...doc._all_models.values()].find((m) => m.data && m.data.step);
          source.selected.indices = [1];
        }"""
    )
    steps = page.locator("#group-table tbody tr td:nth-child(3)").all_inner_texts()
    assert steps == ["1", "1"]  # the groups of step 1
    assert page.locator("#group-step").input_value() == "1"
    assert errors == []


def test_three_steps_side_by_side(tmp_path, chromium):
    """Three sides: a column each and the change from the first to the last; three sets of
    bars in each overlaid chart; a prompt row holds each side's four figures."""
    from tests.reports.test_compare import three_steps

    log, _ = three_steps(tmp_path)
    out = tmp_path / "three.html"
    proc = run("report", log, "--steps", "10:300", "--method", "grpo", "--out", str(out),
               "--quiet")  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    page, errors = chromium
    page.goto(out.as_uri())
    page.wait_for_function("document.body.dataset.ready === 'yes'", timeout=20_000)
    title = page.locator("#compare-title").inner_text()
    assert title == "Compare: step 10, step 200 and step 300"
    heads = page.locator("#compare-overview th").all_inner_texts()
    assert heads == ["", "step 10", "step 200", "step 300", "change"]
    mean = page.locator("#compare-overview tr[data-key=mean_reward] td").all_inner_texts()
    assert mean == ["mean reward", "0.5714", "0.6429", "0.5714", "0"]
    quads = page.evaluate(
        "Object.values(Bokeh.index).map(v => v.model).filter(m => m.id && "
        "m.title && /^(rewards|advantages) \\(share/.test(m.title.text))"
        ".map(m => m.renderers.filter(r => r.glyph.type === 'Quad').length)"
    )
    assert quads == [3, 3]
    first = page.locator("#compare-table tbody tr").first.locator("td").all_inner_texts()
    assert len(first) == 1 + 3 * 4 + 1 and first[-1] == "+0.75"  # q0: 0.25 → 1
    assert page.locator("#compare-prompts-title").inner_text() == "Prompts all hold"
    assert "3 prompts are in all 3" in page.locator("#compare-prompts-note").inner_text()
    assert errors == []


def test_the_run_view_lists_the_prompts_moving_most(tmp_path, chromium):
    """TRL's three steps: the mean reward and the reward quantiles by step; the prompts moving
    most, largest first; a click on one lists the groups of its later step."""
    from tests.commands.test_prompts import TRL

    out = tmp_path / "run.html"
    proc = run("report", str(TRL), "--from", "trl", "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr.decode()
    page, errors = chromium
    page.goto(out.as_uri())
    page.wait_for_function("document.body.dataset.ready === 'yes'", timeout=20_000)
    charts = page.locator("#trend-charts .chart").evaluate_all("cs => cs.map(c => c.id)")
    assert "chart-trend-reward" in charts and "chart-trend-reward-quantiles" in charts
    lines = page.evaluate(
        "Object.values(Bokeh.index).map(v => v.model).filter(m => m.id && "
        "m.title && m.title.text.startsWith('reward quantiles'))"
        ".map(m => m.renderers.filter(r => r.glyph.type === 'Line').length)"
    )
    assert lines == [5]
    assert page.locator("#movers").is_visible()
    rows = page.locator("#movers-table tbody tr")
    assert rows.count() == 6
    assert rows.first.locator("td").all_inner_texts() == [
        "add 5 and 1 so the sum is what ?", "1", "2", "0.25", "1.25", "+1"]  # fmt: skip
    rows.first.click()
    steps = page.locator("#group-table tbody tr td:nth-child(4)").all_inner_texts()
    assert steps and set(steps) == {"2"}
    assert errors == []
