"""The registry: every method and parameter in one place, and everything else made from it."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer

import advcli
from advcli.cli import SHARED_WITH_PRESETS, app
from advcli.io.schema import Roles
from advcli.methods import PARAMETERS, REGISTRY, get, register, what_runs
from advcli.methods.temporal import GAMMA, Gae
from advcli.params import Param
from tests.conftest import ROOT, SAMPLE

INPUT_COLUMNS = pq.read_schema(SAMPLE / "rollouts.parquet").names


def annotate_command():
    return typer.main.get_command(app).commands["annotate"]  # type: ignore[attr-defined]


def test_every_parameter_is_read_by_a_method_and_declared_once():
    used = {p.name: p for m in REGISTRY.values() for p in m.all_parameters}
    assert set(used) == set(PARAMETERS)
    assert all(used[name] is param for name, param in PARAMETERS.items())


def test_annotate_has_one_option_per_parameter_made_from_its_declaration():
    options = {p.name: p for p in annotate_command().params}
    for name, param in PARAMETERS.items():
        if name in SHARED_WITH_PRESETS:  # one option, for a framework's log and for gdpo
            assert "gdpo" in (options[name].help or "")
            continue
        option = options[name]
        assert param.flag in option.opts
        assert option.help == param.help
        assert option.default == param.cli_default
    method = options["method"]
    assert all(name in (method.help or "") for name in REGISTRY)


def test_what_a_log_can_run_comes_from_each_methods_roles():
    no_values = Roles({"input_ids": "ids", "reward": "r", "prompt_id": "p"})
    runs = what_runs(no_values)
    assert runs["grpo"] == "yes" and runs["reinforce-pp"] == "yes"
    assert runs["gae"] == "needs values (or --critic)"
    assert what_runs(Roles({"input_ids": "ids", "reward": "r"}))["rloo"] == "needs prompt_id"


def test_a_method_or_parameter_is_registered_once():
    with pytest.raises(ValueError, match="registered already"):
        register(get("gae"))

    class Clash(Gae):
        name = "clash"
        parameters = (Param("gamma", float, 0.5, "another gamma", "x"),)

    with pytest.raises(ValueError, match="another parameter is called 'gamma'"):
        register(Clash())
    assert "clash" not in REGISTRY and PARAMETERS["gamma"] is GAMMA


def run_with_toy(*args: str) -> subprocess.CompletedProcess:
    """The real CLI with the toy estimator of tests/methods/toy.py registered first."""
    code = (
        "import sys, tests.methods.toy; from advcli.cli import main; sys.argv[0] = 'advcli'; main()"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, check=False
    )


def test_an_estimator_added_in_one_file_is_a_method_of_every_command(small_log, tmp_path):
    """tests/methods/toy.py declares a method and a new parameter and registers them: the
    options, --method, the checks, schema and the API follow with nothing else edited."""
    help_text = run_with_toy("annotate", "--help").stdout
    assert "--toy-factor" in help_text and "scaled-mean" in help_text
    out = tmp_path / "toy.parquet"
    proc = run_with_toy(
        "annotate", small_log, "--method", "scaled-mean", "--toy-factor", "2", "--out", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    df = pl.read_parquet(out)
    # group a: rewards [1, 0, 0, 0], mean 0.25; group b: [1, 1] is zero-variance
    np.testing.assert_allclose(df["advantage"].to_numpy(), [1.5, -0.5, -0.5, -0.5, 0.0, 0.0])
    assert df["advantages"][0].to_list() == [0.0, 0.0, 1.5, 1.5, 1.5]
    meta = json.loads(pl.read_parquet_metadata(out)["advcli"])
    assert meta["method"] == "scaled-mean" and meta["params"]["toy_factor"] == 2.0
    schema = json.loads(run_with_toy("schema", small_log, "--json").stdout)
    assert schema["can_run"]["scaled-mean"] == "yes"
    no_prompt = tmp_path / "no_prompt.parquet"
    pl.read_parquet(out).drop("prompt_id").write_parquet(no_prompt)
    again = tmp_path / "again.parquet"
    proc = run_with_toy("annotate", str(no_prompt), "--method", "scaled-mean", "-o", str(again))
    assert proc.returncode == 1 and "no 'prompt_id' column" in proc.stderr
    proc = run_with_toy(
        "shard", small_log, "--method", "scaled-mean", "--param", "toy-factor=3",
        "--out", str(tmp_path / "shards"), "--json", "-q",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "scaled-mean" not in advcli.describe(small_log)["can_run"]  # this process: built-ins


def sample_with_every_input():
    """The sample log with the columns only some methods read: a greedy rollout's reward,
    process rewards, log-probabilities of the policy and of a teacher, two reward columns."""
    table = pq.read_table(SAMPLE / "rollouts.parquet")
    ids = table.column("input_ids").to_pylist()
    rng = np.random.default_rng(0)
    logprobs = [(-rng.random(len(row))).tolist() for row in ids]
    return (
        table.append_column("baseline_reward", pa.array(rng.random(table.num_rows)))
        .append_column("step_rewards", pa.array([[0.5, 1.0] for _ in ids]))
        .append_column("step_ends", pa.array([[0, len(row) - 1] for row in ids]))
        .append_column("logprobs", pa.array(logprobs))
        .append_column("teacher_logprobs", pa.array([[x - 0.1 for x in r] for r in logprobs]))
        .append_column("acc", table.column("reward"))
        .append_column("fmt", pa.array(rng.integers(0, 2, table.num_rows).astype(float)))
    )


METHOD_OPTIONS = {"grpo-passk": {"singleton": "zero"}, "gdpo": {"reward_columns": "acc,fmt"}}


@pytest.mark.parametrize("name", list(REGISTRY))
def test_each_method_writes_the_columns_it_declares(name):
    log = sample_with_every_input()
    options = METHOD_OPTIONS.get(name, {})
    table = advcli.annotate_table(log, method=name, **options)
    added = [c for c in table.column_names if c not in log.column_names]
    assert added == list(REGISTRY[name].outputs)
    adaptive = advcli.annotate_table(log, method=name, lam="adaptive", alpha=1.5, **options)
    extra = {"lam"} if "returns" in REGISTRY[name].outputs else set()
    assert set(adaptive.column_names) - set(table.column_names) == extra
