"""Progress: the passes a run makes, numbered; the plain lines of batch jobs; the time left."""

from __future__ import annotations

import gzip
import io

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rich.console import Console

import advcli
from advcli import render
from tests.conftest import group_log, run, write_parquet


def _log(tmp_path, n_groups: int = 40) -> str:
    rows = [
        {"prompt_id": f"p{g}", "input_ids": [1, 2, 3, 4], "action_mask": [0, 1, 1, 1],
         "reward": float((g + i) % 2)}
        for g in range(n_groups) for i in range(4)
    ]  # fmt: skip
    path = tmp_path / "log.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def test_a_run_numbers_its_passes_over_the_log(tmp_path) -> None:
    """reinforce-pp reads the per-row columns, then whitens (one token pass), then writes: three
    passes; the first does not know the total yet (a method's passes can depend on the log)."""
    heard = []

    class Heard(advcli.Reporter):
        def passes(self, number, total):
            heard.append((number, total))

        def stage(self, name):
            heard.append(name)

    with advcli.reporting(Heard()):
        advcli.annotate(_log(tmp_path), str(tmp_path / "out.parquet"), method="reinforce-pp")
    assert heard == [
        (1, None), "pass 1: reading per-row columns",
        (2, 3), "pass 2/3: whitening statistics",
        (3, 3), "pass 3/3: annotating",
    ]  # fmt: skip


def test_plain_progress_prints_one_line_per_pass(tmp_path) -> None:
    out = tmp_path / "out.parquet"
    proc = run("annotate", _log(tmp_path), "--method", "grpo", "--out", out, "--progress", "plain")
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.decode().splitlines() if line.startswith("advcli: ")]
    assert [line.split(": ")[1] for line in lines] == ["pass 1", "pass 2/2"]
    assert lines[0].startswith("advcli: pass 1: reading per-row columns: ")
    assert lines[1].startswith("advcli: pass 2/2: annotating: ")
    assert all(line.endswith(" in all") for line in lines)


def test_auto_without_a_terminal_is_silent_for_a_short_run(tmp_path) -> None:
    """A short run, or one that stops on an error, prints only its result: its one error line."""
    proc = run("annotate", _log(tmp_path), "--method", "grpo", "--out", tmp_path / "o.parquet",
               "-q")  # fmt: skip
    assert proc.returncode == 0 and proc.stderr == b""
    proc = run("annotate", _log(tmp_path), "--method", "grpo", "--out", tmp_path / "o2.parquet",
               "--col", "reward=score")  # fmt: skip
    assert proc.returncode != 0
    assert len(proc.stderr.decode().strip().splitlines()) == 1


def test_a_mistyped_mode_is_refused_with_the_closest() -> None:
    proc = run("schema", "x.parquet", "--progress", "plian")
    assert proc.returncode == 2
    assert proc.stderr.decode().strip() == (
        "advcli: error: --progress plian: expected one of auto, bar, plain, none. "
        "Did you mean 'plain'?"
    )


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(render.time, "perf_counter", fake)
    return fake


def test_the_time_left_counts_the_passes_to_come(clock) -> None:
    """Pass 1 took 20 s; pass 2 of 3 is a quarter done after 10 s: 30 s left of it, and the
    last pass as long as the two on average, (20 + 40)/2 = 30 s: 1m00s."""
    activity = render.Activity(quiet=False, mode="none")
    activity.passes(1, None)
    activity.stage("pass 1: reading")
    clock.now += 20
    activity.passes(2, 3)
    activity.stage("pass 2/3: whitening")
    clock.now += 10
    activity.read(100, 0.25)
    assert activity.time_left() == "1m00s left"
    activity.passes(3, None)  # a total not known: only a pass's own rest could be told
    activity.stage("pass 3: writing")
    clock.now += 5
    activity.read(10, 0.5)
    assert activity.time_left() == ""


def test_plain_lines_at_each_pass_and_about_every_30_seconds(clock) -> None:
    """``auto`` without a terminal: nothing in the first 10 s, then a line at each pass and
    one about every 30 s: rows, share, rate, time left and in all."""
    text = io.StringIO()
    console = Console(file=text, width=200)
    with render.Activity(quiet=False, mode="auto", console=console) as activity:
        activity.stage("pass 1: reading")
        clock.now += 5
        activity.read(500, 0.1)
        assert text.getvalue() == ""  # within the first 10 s
        clock.now += 10
        activity.read(1_000, 0.2)  # 15 s: the first 30 s since the start are not over
        clock.now += 20
        activity.read(2_000, 0.5)
        activity.read(2_100, 0.55)  # within 30 s of the last line
    assert text.getvalue().splitlines() == [
        "advcli: pass 1: reading: 2,000 rows, 50%, 35s left, 35s in all"
    ]


def test_the_report_reads_its_advantages_in_the_runs_last_pass(tmp_path) -> None:
    pytest.importorskip("bokeh")
    heard = []

    class Heard(advcli.Reporter):
        def stage(self, name):
            heard.append(name)

    with advcli.reporting(Heard()):
        advcli.report(_log(tmp_path), str(tmp_path / "r.html"), method="grpo")
    assert heard[0] == "pass 1: reading per-row columns"
    assert "pass 2/2: reading advantages and the sampled rollouts" in heard


def _passes(calls: list[tuple[int, float | None]]) -> list[list[tuple[int, float | None]]]:
    """The meter's calls cut into passes (the rows read start again)."""
    passes: list[list[tuple[int, float | None]]] = []
    for rows, share in calls:
        if not passes or rows <= passes[-1][-1][0]:
            passes.append([])
        passes[-1].append((rows, share))
    return passes


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".parquet"])
def test_every_pass_reports_its_progress(tmp_path, suffix):
    import advcli

    rows = group_log(30, 4)
    paths = []
    for k in range(3):  # three files: a JSONL pass reports after each (a chunk each)
        part = [{**r, "rollout_id": f"{r['rollout_id']}-{k}", "values": [0.5] * 5} for r in rows]
        path = tmp_path / f"log{k}{suffix}"
        if suffix == ".parquet":
            write_parquet(path, part)
        else:
            data = b"".join(orjson.dumps(r) + b"\n" for r in part)
            path.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
        paths.append(str(path))
    calls: list[tuple[int, float | None]] = []

    class Reads(advcli.Reporter):
        def read(self, rows, share):
            calls.append((rows, share))

    with advcli.reporting(Reads()):
        advcli.annotate(paths, tmp_path / "o.parquet", method="gae", convention="verl",
                        batch_rows=50)  # fmt: skip
    passes = _passes(calls)
    assert len(passes) >= 3  # per-row columns, whitening statistics, the annotated rows
    for i, one in enumerate(passes):
        assert one[-1][0] == 360, one  # every pass reads every row
        if suffix == ".jsonl.gz" and i == 0:
            assert {share for _, share in one} == {None}  # no total before the rows are counted
        else:
            shares = [share for _, share in one if share is not None]
            assert len(shares) == len(one), one  # a total is known from the start
            assert shares == sorted(shares) and shares[-1] == pytest.approx(1.0), one
