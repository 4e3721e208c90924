"""Shared helpers: write small logs, and run the real ``advcli`` command."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

import advcli
from advcli.io.file_sources import read_inputs

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_data"


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return str(path)


def write_parquet(path: Path, rows: list[dict], schema: pa.Schema | None = None) -> str:
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return str(path)


def run(*args: str, stdin: bytes | None = None, cwd: Path | None = None, env: dict | None = None):
    """Run ``python -m advcli ARGS``; returns the CompletedProcess (bytes)."""
    return subprocess.run(
        [sys.executable, "-m", "advcli", *args],
        input=stdin,
        capture_output=True,
        cwd=cwd,
        env=env,
        check=False,
    )


def annotate_in_memory(paths: list, **params) -> pa.Table:
    """The whole log read into memory and annotated in one go (``advcli.annotate_table``)."""
    table, _ = read_inputs([str(p) for p in paths])
    return advcli.annotate_table(table, **params)


def rollout(prompt, reward, n_prompt=2, n_action=3, **extra) -> dict:
    n = n_prompt + n_action
    row = {
        "prompt_id": prompt,
        "input_ids": list(range(1, n + 1)),
        "action_mask": [0] * n_prompt + [1] * n_action,
        "reward": reward,
    }
    row.update(extra)
    return row


@pytest.fixture
def small_log(tmp_path) -> str:
    rows = [
        rollout("a", 1.0),
        rollout("a", 0.0),
        rollout("a", 0.0),
        rollout("a", 0.0),
        rollout("b", 1.0),
        rollout("b", 1.0),
    ]
    return write_jsonl(tmp_path / "log.jsonl", rows)


MOTO_SERVER = Path(sys.executable).with_name("moto_server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3():
    """A bucket ``logs`` on a fresh S3 API server on 127.0.0.1 (moto's standalone server),
    holding the sample log as two Parquet files; the environment that reaches it, and the
    filesystem."""
    if not MOTO_SERVER.exists():
        pytest.skip("moto[server] is not installed")
    port = free_port()
    server = subprocess.Popen([str(MOTO_SERVER), "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
           "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}  # fmt: skip
    fs = pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{port}", scheme="http",
                           region="us-east-1", access_key="test", secret_key="test",
                           allow_bucket_creation=True)  # fmt: skip
    try:
        for _ in range(100):
            try:
                fs.create_dir("logs")
                break
            except OSError:
                time.sleep(0.1)
        table = pq.read_table(SAMPLE / "rollouts.parquet")
        with fs.open_output_stream("logs/in/a.parquet") as out:
            pq.write_table(table.slice(0, 6), out)
        with fs.open_output_stream("logs/in/b.parquet") as out:
            pq.write_table(table.slice(6), out)
        yield env, fs
    finally:
        server.terminate()
        server.wait(timeout=30)


def sample_with_every_input():
    """The sample log with the columns only some methods read: a greedy rollout's reward,
    process rewards, log-probabilities of the policy and of a teacher, two reward columns, the
    token and turn counts of grpo-length."""
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
        .append_column("ref_logprobs", pa.array([[x + 0.2 for x in r] for r in logprobs]))
        .append_column("acc", table.column("reward"))
        .append_column("fmt", pa.array(rng.integers(0, 2, table.num_rows).astype(float)))
        .append_column("num_output_tokens", pa.array([len(row) for row in ids]))
        .append_column("num_input_tokens", pa.array(rng.integers(10, 50, table.num_rows)))
        .append_column("num_turns", pa.array(rng.integers(1, 4, table.num_rows)))
    )


METHOD_OPTIONS = {  # what a method needs besides the log (sample_with_every_input's columns)
    "grpo-passk": {"singleton": "zero"},
    "gdpo": {"reward_columns": "acc,fmt"},
}


def read_manifest(folder: Path) -> dict:
    """The manifest of a shard or parts folder (``_advcli_manifest.parquet``'s footer)."""
    from advcli.io import manifests
    from advcli.io.folders import Folder

    found = manifests.find(Folder(str(folder)))
    assert found is not None, f"{folder}: no manifest"
    return orjson.loads(found.text)


def write_manifest(folder: Path, manifest: dict, *, checksum: bool) -> None:
    """Replace a folder's manifest text by ``manifest``; its recorded sha256 too when
    ``checksum`` (as a careful forger would: then verify's other checks must catch it)."""
    import hashlib

    from advcli.io import manifests

    path = folder / manifests.NAME
    schema = pq.read_schema(path)
    metadata = dict(schema.metadata)
    text = orjson.dumps(manifest).decode()
    metadata[manifests.TEXT_KEY.encode()] = text.encode()
    if checksum:
        metadata[manifests.SHA256_KEY.encode()] = hashlib.sha256(text.encode()).hexdigest().encode()
    pq.ParquetWriter(str(path), schema.with_metadata(metadata)).close()
