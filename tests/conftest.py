"""Shared helpers: write small logs, and run the real ``advcli`` command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import advcli
from advcli.io.sources import read_inputs

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_data"


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return str(path)


def write_parquet(path: Path, rows: list[dict], schema: pa.Schema | None = None) -> str:
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return str(path)


def run(*args: str, stdin: bytes | None = None, cwd: Path | None = None):
    """Run ``python -m advcli ARGS``; returns the CompletedProcess (text)."""
    return subprocess.run(
        [sys.executable, "-m", "advcli", *args],
        input=stdin,
        capture_output=True,
        cwd=cwd,
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
