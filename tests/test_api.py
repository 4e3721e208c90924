"""The public Python API: each function gives what its command gives; the CLI is a thin layer."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

import advcli
from advcli import errors as advcli_errors
from advcli.errors import DataError, UsageError
from bench.critic_model import build_critic, make_weights
from tests.conftest import ROOT, SAMPLE, metadata_of, run

LOG = str(SAMPLE / "rollouts.parquet")


def test_the_api_names_resolve():
    from advcli import api

    assert set(advcli.__all__) == {*api.__all__, "__version__"}
    for name in advcli.__all__:
        assert getattr(advcli, name) is not None
    with pytest.raises(AttributeError):
        advcli.no_such_function  # noqa: B018


def test_annotate_writes_what_the_command_writes(tmp_path):
    by_api, by_cli = tmp_path / "api.parquet", tmp_path / "cli.parquet"
    summary = advcli.annotate(LOG, by_api, method="gae", convention="verl", gamma=0.99, lam=0.9)
    args = ["--method", "gae", "--convention", "verl", "--gamma", "0.99", "--lam", "0.9"]
    proc = run("annotate", LOG, *args, "--out", str(by_cli), "--json", "-q")
    assert proc.returncode == 0, proc.stderr.decode()
    assert by_api.read_bytes() == by_cli.read_bytes()
    printed = json.loads(proc.stdout)
    assert isinstance(summary, advcli.AnnotateResult) and summary.rows_written == 14
    mine = summary.as_dict()
    assert list(mine) == list(printed)  # --json prints as_dict(), in its order
    for key in ("seconds", "output"):
        del printed[key], mine[key]
    assert mine == printed


def test_annotate_table_in_memory_equals_the_file(tmp_path):
    out = tmp_path / "o.parquet"
    advcli.annotate(LOG, out, method="rloo", singleton="raw")
    table = advcli.annotate_table(pq.read_table(LOG), method="rloo", singleton="raw")
    written = pq.read_table(out)
    assert table.column_names == written.column_names
    for name in table.column_names:
        assert table.column(name).to_pylist() == written.column(name).to_pylist(), name
    meta = json.loads(table.schema.metadata[b"advcli"])
    assert meta["params"] == metadata_of(out)["params"]
    assert meta["inputs"] == ["<table>"]


def test_annotate_table_errors_name_the_row_of_the_table():
    table = pq.read_table(LOG)
    with pytest.raises(DataError, match=r"^<table>: row 13, column 'prompt_id': prompt 'p-lonely'"):
        advcli.annotate_table(table, method="grpo", singleton="error")
    with pytest.raises(UsageError, match="unknown parameter 'gama'"):
        advcli.annotate_table(table, method="grpo", gama=0.9)


def test_audit_and_describe(tmp_path):
    found = advcli.audit(LOG)
    proc = run("audit", LOG, "--json")
    assert found.as_dict() == json.loads(proc.stdout) | {
        "group_sizes": found.report.group_sizes,  # JSON keys are text
        "reward_histogram": found.report.reward_histogram,
    }
    assert found.prompt_ids("zero-variance") == ["p-easy"]
    assert found.prompt_ids("singleton") == ["p-lonely"]
    with pytest.raises(UsageError):
        found.prompt_ids("other")
    info = advcli.describe([LOG])
    assert info.rows == 14 and info.can_run["gae"] == "yes"
    assert info.as_dict() == json.loads(run("schema", LOG, "--json").stdout) | {
        "columns": info.columns  # JSON has lists where Python has tuples
    }


def test_score_shard_and_verify(tmp_path):
    critic = tmp_path / "critic.onnx"
    build_critic(critic, make_weights(vocab=32_768, dim=8, hidden=8))  # the sample's ids
    raw = tmp_path / "raw.parquet"
    pq.write_table(pq.read_table(LOG).drop_columns(["values"]), raw)
    scored = tmp_path / "scored.parquet"
    result = advcli.score(raw, scored, critic)  # a path is enough
    assert result.rows == 14 and result.provider == "CPUExecutionProvider"
    values = pq.read_table(scored).column("values").combine_chunks().flatten().to_numpy()
    assert np.isnan(values).sum() == 14  # shifted: each row's first token has no value
    opts = advcli.ShardOptions(shuffle=True, seed=3, keep_groups=True)
    summary = advcli.shard(LOG, tmp_path / "shards", opts, method="grpo")
    assert summary.samples == 14 and summary.as_dict()["samples"] == 14
    assert advcli.verify(tmp_path / "shards").ok


def test_the_critic_package_needs_neither_polars_nor_orjson():
    """bench/gpu_check.py runs where only numpy, pyarrow and onnxruntime are installed."""
    code = (
        "import sys, advcli, advcli.critic; "
        "print(sorted({'polars', 'orjson', 'onnxruntime'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stderr


def test_annotate_table_takes_polars_and_pandas_frames_and_gives_the_same_kind():
    pl = pytest.importorskip("polars")
    pd = pytest.importorskip("pandas")
    frame = pl.DataFrame({"prompt_id": ["a", "a"], "reward": [1.0, 0.0], "input_ids": [[1], [2]]})
    got = advcli.annotate_table(frame, method="rloo")
    assert isinstance(got, pl.DataFrame) and got["advantage"].to_list() == [1.0, -1.0]
    as_pandas = advcli.annotate_table(frame.to_pandas(), method="rloo")
    assert isinstance(as_pandas, pd.DataFrame) and list(as_pandas["advantage"]) == [1.0, -1.0]
    assert as_pandas.attrs["advcli"]["params"]["method"] == "rloo"
    with pytest.raises(advcli_errors.UsageError, match="not builtins.list"):
        advcli.annotate_table([1, 2], method="rloo")


def test_python_callers_read_their_keywords_in_errors(tmp_path, small_log):
    out = tmp_path / "o.parquet"
    out.write_text("taken")
    with pytest.raises(advcli_errors.OutputError, match=r"Hint: pass `force=True` to replace it"):
        advcli.annotate(small_log, out, method="grpo")
    with pytest.raises(advcli_errors.UsageError, match=r"`col=\['reward=rewrd'\]`: no column"):
        advcli.annotate(small_log, tmp_path / "p.parquet", method="grpo", col=["reward=rewrd"])
    with pytest.raises(advcli_errors.UsageError, match="`critic='none.onnx'`: no such file"):
        advcli.annotate(small_log, tmp_path / "q.parquet", method="gae", critic="none.onnx")
    with pytest.raises(advcli_errors.UsageError, match=r"Hint: pass `method='grpo'` \(or another"):
        advcli.shard(small_log, tmp_path / "shards")
    with pytest.raises(advcli_errors.UsageError, match=r"^`format='arrow'` writes Arrow IPC"):
        advcli.annotate(small_log, tmp_path / "r.parquet", method="grpo", format="arrow")


def test_dir_lists_the_api():
    assert {"annotate", "annotate_table", "audit", "shard"} <= set(dir(advcli))
    assert "importlib" not in dir(advcli)


def test_keywords_are_the_options_names(tmp_path, small_log):
    """``--from`` is ``from_`` (``from`` is Python's), ``--format`` is ``format``."""
    done = advcli.annotate(small_log, tmp_path / "a.out", method="grpo", format="jsonl")
    assert done.rows_written > 0 and (tmp_path / "a.out").read_text().startswith("{")
    with pytest.raises(advcli_errors.UsageError, match=r"^`from_='no-such'`: unknown framework"):
        advcli.audit(small_log, from_="no-such")
