"""A command's run resolved once (advcli.jobs), and the one channel of its progress."""

from __future__ import annotations

import pytest

import advcli
from advcli import jobs, methods
from advcli.errors import UsageError


def test_a_job_refuses_its_options_before_reading(tmp_path):
    """Nothing is read: the log does not even exist."""
    missing = [str(tmp_path / "none.parquet")]
    cases = [
        ({"engine": "spark"}, "--engine 'spark': expected one of local, ray"),
        ({"method": "grpx"}, "unknown method 'grpx'"),
        ({"method": "grpo", "params": {"gamma": 0.5}}, "`gamma` does not apply to grpo"),
        ({"params": {"gamma": 0.5}}, "--gamma is a method's parameter: add --method"),
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
    assert jobs.job([], convention="verl", method="grpo").params.convention == "verl"
    assert jobs.job([], engine="ray").ray is not None  # connected only when a pass needs it


def test_the_method_is_looked_up_once(small_log, monkeypatch):
    """The job holds the method: planning and annotating never look it up again."""
    job = jobs.job([small_log], method="reinforce-pp")

    def looked_up(name):
        raise AssertionError(f"{name} looked up again")

    monkeypatch.setattr(methods, "get", looked_up)
    run = job.plan(job.open())
    assert sum(batch.table.num_rows for batch in run.annotated()) == run.rows.n_rows


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
