"""The registry: every method and parameter in one place, and everything else made from it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
import typer

import advcli
from advcli.cli.app import app
from advcli.errors import DataError, UsageError
from advcli.io.schema import Roles
from advcli.methods import PARAMETERS, REGISTRY, get, register, what_runs
from advcli.methods.temporal import GAMMA, Gae
from advcli.params import Param
from advcli.presets import SHARED_WITH_METHODS
from tests.conftest import METHOD_OPTIONS, ROOT, SAMPLE, read_manifest, sample_with_every_input

INPUT_COLUMNS = pq.read_schema(SAMPLE / "rollouts.parquet").names


def annotate_command():
    return typer.main.get_command(app).commands["annotate"]  # type: ignore[attr-defined]


def test_every_parameter_is_read_by_a_method_and_declared_once():
    used = {p.name: p for m in REGISTRY.values() for p in m.takes}
    assert set(used) == set(PARAMETERS)
    assert all(used[name] is param for name, param in PARAMETERS.items())


def test_annotate_has_one_option_per_parameter_made_from_its_declaration():
    options = {p.name: p for p in annotate_command().params}
    for name, param in PARAMETERS.items():
        if name in SHARED_WITH_METHODS:  # one option, for a framework's log and for gdpo
            assert "gdpo" in (options[name].help or "")
            continue
        option = options[name]
        assert param.flag in option.opts
        assert option.help == param.help
        assert option.default == param.cli_default
    assert [line.name for line in advcli.list_methods().methods] == list(REGISTRY)


def test_what_a_log_can_run_comes_from_each_methods_roles():
    no_values = Roles({"input_ids": "ids", "reward": "r", "prompt_id": "p"})
    runs = what_runs(no_values)
    assert runs["grpo"] == "yes" and runs["reinforce-pp"] == "yes"
    assert runs["gae"] == "needs values (or `critic`)"
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


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """tests/methods/toy_plugin installed by pip (built from a copy: setuptools writes into
    the tree it builds) into a folder of its own, so that no other test sees it."""
    root = tmp_path_factory.mktemp("plugin")
    source = root / "src"
    shutil.copytree(Path(__file__).parent / "toy_plugin", source)
    site = root / "site"
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
               "--no-index", "--target", str(site), str(source)]  # fmt: skip
    subprocess.run(install, check=True, capture_output=True)
    return site


def run_with_toy(site: Path, *args: str) -> subprocess.CompletedProcess:
    """The real CLI with the toy plugin installed (on the path)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-m", "advcli", *args], capture_output=True, text=True, cwd=ROOT,
        env=env, check=False,
    )  # fmt: skip


def test_an_estimator_added_in_one_file_is_a_method_of_every_command(
    small_log, tmp_path, plugin_site
):
    """An installed plugin (tests/methods/toy_plugin: one module, one entry point) declares a
    method and a new parameter: the options, --method, the checks, schema and shard follow
    with nothing of advcli edited."""
    assert "scaled-mean" in run_with_toy(plugin_site, "methods").stdout
    toy = json.loads(run_with_toy(plugin_site, "methods", "scaled-mean", "--json").stdout)
    assert [p["flag"] for p in toy["parameters"] if not p["shared"]] == [
        "--zero-variance",
        "--toy-factor",
    ]
    out = tmp_path / "toy.parquet"
    proc = run_with_toy(
        plugin_site,
        "annotate",
        small_log,
        "--method",
        "scaled-mean",
        "--toy-factor",
        "2",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    df = pl.read_parquet(out)
    # group a: rewards [1, 0, 0, 0], mean 0.25; group b: [1, 1] is zero-variance
    np.testing.assert_allclose(df["advantage"].to_numpy(), [1.5, -0.5, -0.5, -0.5, 0.0, 0.0])
    assert df["advantages"][0].to_list() == [0.0, 0.0, 1.5, 1.5, 1.5]
    meta = json.loads(pl.read_parquet_metadata(out)["advcli"])
    assert meta["method"] == "scaled-mean" and meta["params"]["toy_factor"] == 2.0
    schema = json.loads(run_with_toy(plugin_site, "schema", small_log, "--json").stdout)
    assert schema["can_run"]["scaled-mean"] == "yes"
    no_prompt = tmp_path / "no_prompt.parquet"
    pl.read_parquet(out).drop("prompt_id").write_parquet(no_prompt)
    again = tmp_path / "again.parquet"
    proc = run_with_toy(
        plugin_site, "annotate", str(no_prompt), "--method", "scaled-mean", "-o", str(again)
    )
    assert proc.returncode == 1 and "no 'prompt_id' column" in proc.stderr
    proc = run_with_toy(
        plugin_site, "shard", small_log, "--method", "scaled-mean", "--toy-factor", "3",
        "--out", str(tmp_path / "shards"), "--json", "-q",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert read_manifest(tmp_path / "shards")["params"]["toy_factor"] == 3.0
    assert "scaled-mean" not in advcli.describe(small_log).can_run  # this process: built-ins


@pytest.mark.parametrize("name", list(REGISTRY))
def test_each_method_writes_the_columns_it_declares(name):
    log = sample_with_every_input()
    options = METHOD_OPTIONS.get(name, {})
    table = advcli.annotate_table(log, method=name, **options)
    added = [c for c in table.column_names if c not in log.column_names]
    assert added == list(REGISTRY[name].outputs)
    if "lam" in {p.name for p in REGISTRY[name].takes}:
        adaptive = advcli.annotate_table(log, method=name, lam="adaptive", alpha=1.5, **options)
        assert set(adaptive.column_names) - set(table.column_names) == {"lam"}


def test_a_plugin_that_fails_to_load_is_one_line_naming_it(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    (source / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "advcli-broken"\nversion = "0.1"\n'
        '[project.entry-points."advcli.methods"]\nbroken = "advcli_broken:Nope"\n'
        "[tool.setuptools]\npy-modules = []\n"
    )
    site = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
               "--no-index", "--target", str(site), str(source)]  # fmt: skip
    subprocess.run(install, check=True, capture_output=True)
    proc = run_with_toy(site, "schema", "sample_data/rollouts.jsonl")
    assert proc.returncode == 1
    assert proc.stderr == (
        "advcli: error: plugin 'broken' (advcli_broken:Nope, entry point group advcli.methods) "
        "failed to load: ModuleNotFoundError: No module named 'advcli_broken'\n"
    )


@pytest.mark.parametrize("name", list(REGISTRY))
def test_each_method_reads_only_what_it_takes_whatever_its_options(name):
    """A run's Params raise on a read of a parameter its method does not take: every method,
    under every choice of each of its parameters with choices and with the shared signals on,
    reads none (and records exactly what it takes)."""
    log = sample_with_every_input()
    base = METHOD_OPTIONS.get(name, {})
    takes = {p.name: p for p in REGISTRY[name].takes}
    variants: list[dict[str, Any]] = [{}] + [
        {param: choice} for param, p in takes.items() for choice in p.choices
    ]
    variants += [{"kl_coef": 0.1}] if "kl_coef" in takes else []
    variants += [{"opd_coef": 0.2}, {"batch_size": 3}] if "batch_size" in takes else []
    for variant in variants:
        options = {**base, **variant}
        try:
            table = advcli.annotate_table(log, method=name, **options)
        except UsageError:  # a choice this method refuses, with a message (grpo-passk's scale)
            continue
        except DataError:  # a choice the log cannot take (--singleton error: it has singletons)
            continue
        params = json.loads(table.schema.metadata[b"advcli"])["params"]
        assert set(params) == {"method", "convention", *takes}
