"""The report page's heading: a log of many files is named by its folder and count."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from advcli.reports.page import heading
from tests.conftest import rollout, run, write_jsonl

pytest.importorskip("bokeh")


def page_heading(path: Path) -> tuple[str, str]:
    """The page's ``<title>`` and ``<h1>`` text."""
    html = path.read_text(encoding="utf-8")
    title = re.search(r"<title>(.*?)</title>", html)
    h1 = re.search(r"<h1>(.*?)</h1>", html)
    assert title is not None and h1 is not None
    return title.group(1), h1.group(1)


def test_a_few_files_are_named_one_by_one():
    assert heading(["a.jsonl", "b.jsonl"]) == "advcli report: a.jsonl, b.jsonl"


def test_many_step_files_fold_into_their_folder_and_count(tmp_path):
    steps = tmp_path / "run"
    steps.mkdir()
    files = [
        write_jsonl(steps / f"step_{k:03d}.jsonl", [rollout("p", 1.0), rollout("p", 0.0)])
        for k in range(1, 41)
    ]
    out = tmp_path / "r.html"
    proc = run("report", *files, "--out", str(out))
    assert proc.returncode == 0, proc.stderr.decode()
    folded = f"advcli report: {steps}/ (40 files: step_001.jsonl … step_040.jsonl)"
    assert page_heading(out) == (folded, folded)
