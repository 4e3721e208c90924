"""A command's run resolved once (advcli.run.jobs), and the one channel of its progress."""

from __future__ import annotations

from typing import Any

import pytest

import advcli
from advcli import methods
from advcli.errors import UsageError
from advcli.methods import Method
from advcli.run import jobs
from tests.conftest import SAMPLE


def test_a_job_refuses_its_options_before_reading(tmp_path):
    """Nothing is read: the log does not even exist."""
    missing = [str(tmp_path / "none.parquet")]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"engine": "spark"}, "`engine` 'spark': expected one of local, ray"),
        ({"method": "grpx"}, "unknown method 'grpx'"),
        ({"method": "grpo", "params": {"gamma": 0.5}}, "`gamma` does not apply to grpo"),
        ({"params": {"gamma": 0.5}}, "`gamma` is a method's parameter: add `method`"),
        ({"convention": "x"}, "unknown convention 'x'"),
        ({"preset": "x"}, "`from_='x'`: unknown framework"),
    ]
    for given, message in cases:
        with pytest.raises(UsageError, match=message):
            jobs.job(missing, **given)


def test_a_job_takes_the_framework_s_convention_and_reads_as_it_says(small_log):
    job = jobs.job([small_log], preset="trl", method="grpo", col=["reward=r"])
    assert job.params is not None and job.params.convention == "trl"
    assert job.reading.preset is not None and job.reading.preset.name == "trl"
    assert job.reading.col == ("reward=r",) and job.ray is None
    params = jobs.job([], convention="verl", method="grpo").params
    assert params is not None and params.convention == "verl"
    assert jobs.job([], engine="ray").ray is not None  # connected only when a pass needs it


def lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the methods looked up from now on (each lookup still made)."""
    names: list[str] = []
    get = methods.get

    def counted(name: str) -> Method[Any]:
        names.append(name)
        return get(name)

    monkeypatch.setattr(methods, "get", counted)
    return names


def test_the_method_is_looked_up_once(small_log: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job holds the method, and its parameters hold it too: planning and annotating
    never look it up again."""
    job = jobs.job([small_log], method="reinforce-pp")
    looked_up = lookups(monkeypatch)
    run = job.plan(job.open())
    assert sum(batch.table.num_rows for batch in run.annotated()) == run.rows.n_rows
    assert looked_up == []


def test_with_from_only_the_framework_s_settings_are_looked_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reading TRL's dump with rloo, whose advantages are not TRL's: settling the group size
    and the search for the setting that gives the logged advantages try TRL's settings,
    which its preset names (grpo, gdpo); the job's own method, held by its parameters, is
    never looked up again."""
    job = jobs.job([str(SAMPLE / "trl" / "completions")], preset="trl", method="rloo")
    looked_up = lookups(monkeypatch)
    run = job.plan(job.open())
    assert run.settled is not None and run.settled.startswith("`group_size=4`")
    assert run.agreement is not None and run.agreement.differ == 54
    assert run.reproduced_by == "`method='grpo'`"
    assert set(looked_up) == {"grpo", "gdpo"}


def test_a_reporter_hears_every_stage_and_pass(tmp_path, small_log):
    """Stages in order, each pass's reads up to the whole log, and the written rows."""
    heard: list[tuple] = []

    class Heard(advcli.Reporter):
        def stage(self, name):
            heard.append(("stage", name))

        def read(self, rows, share):
            heard.append(("read", rows, share))

        def advance(self, rows, tokens):
            heard.append(("advance", rows, tokens))

    log = small_log
    with advcli.reporting(Heard()):
        summary = advcli.annotate(log, tmp_path / "o.parquet", method="reinforce-pp")
    stages = [h[1] for h in heard if h[0] == "stage"]
    assert stages == [
        "pass 1: reading per-row columns",
        "pass 2/3: whitening statistics",
        "pass 3/3: annotating",
    ]
    assert ("read", summary.rows, 1.0) in heard
    assert heard[-1] == ("advance", summary.rows_written, summary.tokens_written)
    heard.clear()
    advcli.annotate(log, tmp_path / "p.parquet", method="reinforce-pp", force=True)
    assert heard == []  # outside the block nothing reports
