"""`advcli score` and `annotate --critic` with a tiny ONNX critic built by the tests."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

import advcli
from advcli import installed
from advcli.critic.options import CriticOptions
from advcli.critic.scorer import CriticScorer
from bench.critic_model import build_critic, make_weights, reference
from tests.conftest import SAMPLE, metadata_of, one_line, rollout, run, write_parquet

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def critic(tmp_path_factory):
    path = tmp_path_factory.mktemp("critic") / "critic.onnx"
    weights = make_weights(vocab=32000, dim=8, hidden=8)
    build_critic(path, weights)
    return str(path), weights


def test_score_adds_shifted_values(critic, tmp_path):
    path, weights = critic
    out = tmp_path / "scored.parquet"
    proc = run(
        "score",
        str(SAMPLE / "rollouts.parquet"),
        "--critic",
        path,
        "--device",
        "cpu",
        "--out",
        str(out),
        "--json",
        "-q",
    )
    assert proc.returncode == 0, proc.stderr.decode()
    summary = json.loads(proc.stdout)
    assert summary["provider"] == "CPUExecutionProvider" and summary["rows"] == 14
    df = pl.read_parquet(out)
    for ids, values in zip(df["input_ids"], df["values"], strict=True):
        expected = reference(weights, ids.to_numpy())
        got = values.to_numpy()
        assert np.isnan(got[0])
        np.testing.assert_allclose(got[1:], expected[:-1], rtol=1e-5, atol=1e-6)
    meta = metadata_of(out)
    assert meta["critic"]["provider"] == "CPUExecutionProvider"
    assert meta["critic"]["alignment"].startswith("shifted")
    assert len(meta["critic"]["sha256"]) == 64


def test_annotate_with_critic_equals_annotate_with_scored_values(critic, tmp_path):
    path, _ = critic
    raw = tmp_path / "raw.parquet"
    table = pq.read_table(SAMPLE / "rollouts.parquet").drop_columns(["values"])
    pq.write_table(table, raw)
    scored = tmp_path / "scored.parquet"
    assert run("score", str(raw), "--critic", path, "--out", str(scored), "-q").returncode == 0
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    args = ["--method", "gae", "--gamma", "0.99", "--lam", "0.9", "-q"]
    proc = run("annotate", str(raw), "--critic", path, "--out", str(a), *args)
    assert proc.returncode == 0, proc.stderr.decode()
    assert run("annotate", str(scored), "--out", str(b), *args).returncode == 0
    adv_a = np.concatenate(pl.read_parquet(a)["advantages"].to_list())
    adv_b = np.concatenate(pl.read_parquet(b)["advantages"].to_list())
    np.testing.assert_array_equal(adv_a, adv_b)


def test_the_critic_runs_once_when_several_passes_need_values(critic, tmp_path, monkeypatch):
    """verl whitens GAE per batch and the sample's segments chain: three passes read values.
    The critic scores each batch once; the later passes read its values back unchanged."""
    path, _ = critic
    raw = tmp_path / "raw.parquet"
    pq.write_table(pq.read_table(SAMPLE / "rollouts.parquet").drop_columns(["values"]), raw)
    scored = tmp_path / "scored.parquet"
    assert run("score", str(raw), "--critic", path, "--out", str(scored), "-q").returncode == 0
    calls = []
    real_call = CriticScorer.__call__

    def counted(self, row0, table, tok):
        calls.append(row0)
        return real_call(self, row0, table, tok)

    monkeypatch.setattr(CriticScorer, "__call__", counted)
    p: dict[str, Any] = {"method": "gae", "convention": "verl", "gamma": 0.99, "segments": "chain"}
    outs = {}
    for name, source, critic_opts in (
        ("critic", raw, CriticOptions(path)),
        ("scored", scored, None),
    ):
        outs[name] = tmp_path / f"annotated-{name}.parquet"
        advcli.annotate([str(source)], str(outs[name]), **p, critic=critic_opts, batch_rows=4)
    assert calls == [0, 4, 8, 12]  # 14 rows in batches of 4: once each
    got, expected = (pq.read_table(outs[name]) for name in ("critic", "scored"))
    for column in ("advantages", "returns"):
        assert got.column(column).equals(expected.column(column))


def test_cuda_without_cuda_is_a_clear_error(critic, tmp_path):
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this machine has CUDA")
    proc = run(
        "score",
        str(SAMPLE / "rollouts.parquet"),
        "--critic",
        critic[0],
        "--device",
        "cuda",
        "--out",
        str(tmp_path / "o.parquet"),
    )
    assert proc.returncode == 2
    text = proc.stderr.decode()
    assert text.count("\n") == 1 and installed.pip_install("gpu") in text


def test_no_room_for_the_critics_values_is_one_line(critic, tmp_path):
    """Several passes read the values: they go to an unnamed file in TMPDIR. A file size limit
    there (as a full disk would) is one line naming the folder, exit 2, and no output."""
    import os
    import resource
    import signal
    import subprocess
    import sys

    path, _ = critic
    raw = tmp_path / "raw.parquet"
    pq.write_table(pq.read_table(SAMPLE / "rollouts.parquet").drop_columns(["values"]), raw)
    out = tmp_path / "out.parquet"

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed
        resource.setrlimit(resource.RLIMIT_FSIZE, (400, 400))  # the values take 764 bytes

    args = ["annotate", str(raw), "--critic", path, "--method", "gae", "--convention", "verl"]
    proc = subprocess.run(
        [sys.executable, "-m", "advcli", *args, "--out", str(out)],
        capture_output=True, text=True, preexec_fn=small_files,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        f"advcli: error: {tmp_path}: no room to keep the critic's values (File too large). "
        "Hint: point TMPDIR at a disk with 4 bytes per token of the log free\n"
    )
    assert not out.exists()


def test_the_sample_critic_is_the_toy_network_its_script_makes(tmp_path):
    """sample_data/critic.onnx is what sample_data/critic.py writes, byte for byte, and it
    scores the bench critic's network on ids mod 64 (the same seeded weights)."""
    import runpy

    script = runpy.run_path(str(SAMPLE / "critic.py"))
    script["build"](tmp_path / "critic.onnx")
    assert (tmp_path / "critic.onnx").read_bytes() == (SAMPLE / "critic.onnx").read_bytes()
    out = tmp_path / "scored.parquet"
    proc = run("score", str(SAMPLE / "rollouts.parquet"), "--critic", str(SAMPLE / "critic.onnx"),
               "--device", "cpu", "--out", str(out), "-q")  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    weights = make_weights(vocab=64, dim=16, hidden=32, seed=0)
    for ids, values in zip(*pl.read_parquet(out)[["input_ids", "values"]], strict=True):
        expected = reference(weights, ids.to_numpy() % 64)
        np.testing.assert_allclose(values.to_numpy()[1:], expected[:-1], rtol=1e-5, atol=1e-6)


def test_critic_with_a_method_that_reads_no_values_is_refused(small_log, tmp_path):
    proc = run("annotate", small_log, "--method", "grpo", "--critic", "c.onnx",
               "--out", str(tmp_path / "o.parquet"))  # fmt: skip
    assert proc.returncode == 2
    assert one_line(proc).startswith("advcli: error: --critic: grpo reads no values.")


def test_critic_over_logged_values_scores_them_and_says_so(tmp_path):
    pytest.importorskip("onnxruntime")
    from bench.critic_model import build_critic, make_weights

    critic = tmp_path / "critic.onnx"
    build_critic(critic, make_weights(vocab=32000, dim=8, hidden=8))
    raw = tmp_path / "raw.parquet"
    pq.write_table(pq.read_table(SAMPLE / "rollouts.parquet").drop_columns(["values"]), raw)
    args = ["--method", "gae", "--critic", str(critic)]
    with_values, without = tmp_path / "a.parquet", tmp_path / "b.parquet"
    proc = run("annotate", str(SAMPLE / "rollouts.parquet"), *args, "--out", str(with_values))
    assert proc.returncode == 0
    assert "advcli: warning: the log's 'values' column is not read: --critic scores" in \
        proc.stderr.decode()  # fmt: skip
    assert run("annotate", str(raw), *args, "-q", "--out", str(without)).returncode == 0
    a, b = pq.read_table(with_values), pq.read_table(without)
    assert a.column("advantages").equals(b.column("advantages"))  # the critic's values, both
    meta = metadata_of(with_values)
    assert meta["critic"]["replaced_column"] == "values"


def test_critic_truncation_never_writes_nan_on_an_action_token(tmp_path):
    """``--max-len-truncate left`` that would cut action tokens (left without a value) is
    refused at the row; one that cuts only the prompt scores; ``--max-len 0`` is a usage
    error."""
    pytest.importorskip("onnxruntime")
    from bench.critic_model import build_critic, make_weights

    critic = tmp_path / "c.onnx"
    build_critic(critic, make_weights(vocab=1000, dim=8, hidden=8))
    rows = [rollout(f"p{i // 2}", float(i % 2), rollout_id=f"r{i}", n_prompt=3, n_action=3)
            for i in range(4)]  # fmt: skip
    log = write_parquet(tmp_path / "log.parquet", rows)
    for command in (["score"], ["annotate", "--method", "gae"]):
        base = [*command, log, "--critic", str(critic), "--max-len-truncate", "left"]
        proc = run(*base, "--max-len", "3", "--out", str(tmp_path / "o.parquet"))
        assert proc.returncode == 1, command
        assert "row 0, column 'input_ids': 6 tokens, and --max-len 3 leaves out" in one_line(proc)
        assert not (tmp_path / "o.parquet").exists()
        proc = run(*base, "--max-len", "0", "--out", str(tmp_path / "o.parquet"))
        assert proc.returncode == 2 and "--max-len 0: expected a positive integer" in one_line(proc)
    proc = run(
        "score",
        log,
        "--critic",
        str(critic),
        "--max-len-truncate",
        "left",
        "--max-len",
        "4",
        "--out",
        str(tmp_path / "o.parquet"),
    )  # fmt: skip  (cuts 2 prompt tokens)
    assert proc.returncode == 0, proc.stderr.decode()
    table = pq.read_table(tmp_path / "o.parquet")
    for values, mask in zip(table.column("values").to_pylist(),
                            table.column("action_mask").to_pylist(), strict=True):  # fmt: skip
        assert all(v == v for v, m in zip(values, mask, strict=True) if m)  # no NaN on actions
