"""SIGKILL at random points of ``annotate`` and ``shard``, with and without ``--force`` over an
existing output: the output path then holds nothing (a first write), or the old or the new
complete output, never a mix; and the next run leaves no temporary behind."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from advcli.io.outputs import metadata_path
from advcli.io.writers import read_metadata
from tests.conftest import run

KILLS = 4  # per case; each at a random time within a full run


@pytest.fixture(scope="module")
def log(tmp_path_factory) -> str:
    """About a second of work: 30,000 rollouts of 20-60 tokens in groups of 6."""
    rng = np.random.default_rng(0)
    n = 30_000
    lens = rng.integers(20, 60, n)
    offsets = pa.array(np.r_[0, np.cumsum(lens)].astype(np.int32))
    table = pa.table(
        {
            "prompt_id": pa.array([f"q{i // 6}" for i in range(n)]),
            "input_ids": pa.ListArray.from_arrays(
                offsets, pa.array(rng.integers(0, 50_000, lens.sum()))
            ),
            "reward": pa.array(rng.integers(0, 2, n).astype(float)),
        }
    )
    path = tmp_path_factory.mktemp("kill") / "log.parquet"
    pq.write_table(table, path)
    return str(path)


def command(log: str, out: Path, method: str) -> list[str]:
    name = "shard" if out.suffix == "" else "annotate"
    return [name, log, "--method", method, "-q", "--out", str(out)]


def state(out: Path) -> tuple[str, bytes] | None:
    """What the output path holds: None, or (method, content) of a complete output."""
    if out.suffix == "":  # a shard folder
        if not out.exists():
            return None
        assert run("verify", str(out)).returncode == 0
        manifest = (out / "_advcli_manifest.parquet").read_bytes()
        part = next(out.glob("part-*.parquet"))
        return str(pq.read_metadata(part).metadata[b"advcli"]), manifest
    if not out.exists():
        assert not metadata_path(out).exists() or out.suffix != ".jsonl"
        return None
    meta = read_metadata(str(out))  # for JSONL: the metadata of exactly these bytes
    assert meta is not None
    return meta["method"], out.read_bytes()


@pytest.mark.parametrize("force", [False, True], ids=["first-write", "force-over-old"])
@pytest.mark.parametrize("name", ["out.jsonl", "out.parquet", "sh"])
def test_sigkill_leaves_the_old_or_the_new_output(log, tmp_path, name, force):
    references = {}
    for method in ("rloo", "grpo"):  # old, new
        ref = tmp_path / method / name
        ref.parent.mkdir()
        started = time.monotonic()
        assert run(*command(log, ref, method)).returncode == 0
        references[method] = state(ref)
        duration = time.monotonic() - started
    work = tmp_path / "work"
    work.mkdir()
    out = work / name
    if force:
        old = tmp_path / "rloo" / name
        if old.is_dir():
            shutil.copytree(old, out)
        else:
            shutil.copy(old, out)
            if name.endswith(".jsonl"):
                shutil.copy(metadata_path(old), metadata_path(out))
    allowed = [references["rloo"] if force else None, references["grpo"]]
    rng = np.random.default_rng(zlib.crc32(f"{name}{force}".encode()))
    args = [sys.executable, "-m", "advcli", *command(log, out, "grpo"), *(["--force"] * force)]
    for delay in rng.uniform(0.2, duration, KILLS):
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate()
        assert proc.returncode in (-signal.SIGKILL, 0, 2), err  # 2: it exists (a prior kill
        assert state(out) in allowed  # landed after the move), without --force
    assert run(*command(log, out, "grpo"), "--force").returncode == 0
    assert state(out) == references["grpo"]
    temporaries = [p for p in work.iterdir() if p.name.startswith(".") and p != metadata_path(out)]
    assert temporaries == []
