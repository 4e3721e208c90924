"""Regression tests for the attack on advcli's inputs (issue 13): one or more per class of break,
numbered as in the issue. Every failure is one line on stderr and exit 1 (data) or 2 (usage);
nothing is lost and no input is overwritten."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pyarrow.parquet as pq
import pytest
import zstandard

from advcli.errors import OutputError
from advcli.io import writers
from tests.conftest import SAMPLE, rollout, run, write_jsonl, write_parquet


def one_line(proc) -> str:
    """The single line a failing command prints, checked to be exactly one line."""
    text = proc.stderr.decode()
    assert "Traceback" not in text and "panicked" not in text, text
    assert text.count("\n") == 1 and text.endswith("\n"), text
    return text.strip()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def group_log(n_prompts: int = 3, per_prompt: int = 4) -> list[dict]:
    return [
        rollout(f"p{p}", float((p + r) % 2), rollout_id=f"p{p}-r{r}")
        for p in range(n_prompts)
        for r in range(per_prompt)
    ]


# 1. An input is never overwritten, however it was named.


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
@pytest.mark.parametrize("how", ["glob", "folder", "hardlink", "symlink"])
def test_output_that_an_input_expands_to_is_refused_with_force(tmp_path, suffix, how):
    logs = tmp_path / "logs"
    logs.mkdir()
    writer = write_parquet if suffix == ".parquet" else write_jsonl
    a, b = Path(writer(logs / f"a{suffix}", group_log())), Path(writer(logs / f"b{suffix}", []))
    b.unlink()
    before = digest(a)
    given = {"glob": str(logs / f"*{suffix}"), "folder": str(logs)}.get(how, str(a))
    out = a
    if how in ("hardlink", "symlink"):
        out = tmp_path / f"other{suffix}"
        (os.link if how == "hardlink" else os.symlink)(a, out)
    for command in (["annotate", "--method", "grpo"], ["score", "--critic", "none.onnx"]):
        proc = run(command[0], given, *command[1:], "--out", str(out), "--force")
        assert proc.returncode == 2
        assert "this is one of the inputs" in one_line(proc)
        assert digest(a) == before


# 2. A truncated or corrupt compressed input is an error naming the file.


def _many_rows(n: int) -> bytes:
    return b"".join(orjson.dumps(rollout(f"p{i // 4}", float(i % 2))) + b"\n" for i in range(n))


def _zstd_frames(data: bytes, frames: int) -> bytes:
    step = len(data) // frames
    parts = [data[i * step : (i + 1) * step if i < frames - 1 else None] for i in range(frames)]
    return b"".join(zstandard.ZstdCompressor().compress(part) for part in parts)


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("cut.jsonl.zst", lambda d: _zstd_frames(d, 3)[: -len(_zstd_frames(d, 3)) // 6]),
        ("cut.jsonl.gz", lambda d: gzip.compress(d)[:-40]),
        ("plain.jsonl.gz", lambda d: d),
        ("plain.jsonl.zst", lambda d: d),
        ("flipped.jsonl.gz", lambda d: _flip(gzip.compress(d), 200)),
        ("flipped.jsonl.zst", lambda d: _flip(zstandard.ZstdCompressor().compress(d), 200)),
    ],
)
def test_truncated_or_corrupt_compressed_input_is_an_error(tmp_path, name, make):
    path = tmp_path / name
    path.write_bytes(make(_many_rows(3000)))
    out = tmp_path / "out.parquet"
    proc = run("annotate", str(path), "--method", "grpo", "--out", str(out))
    assert proc.returncode == 1
    line = one_line(proc)
    assert line.startswith(f"advcli: error: {path}:"), line
    assert not out.exists()


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


# 3. Two runs writing the same output: the second never replaces the first without --force.


def test_an_output_that_appears_while_writing_is_kept(tmp_path):
    target = tmp_path / "out.parquet"
    appeared = pytest.raises(OutputError, match="appeared while writing")
    with appeared, writers.atomic_path(target, force=False) as tmp:
        tmp.write_bytes(b"ours")
        target.write_bytes(b"another run's")
    assert target.read_bytes() == b"another run's"
    assert [p.name for p in tmp_path.iterdir()] == ["out.parquet"]


def test_concurrent_annotate_runs_never_both_succeed(tmp_path):
    log = write_jsonl(tmp_path / "log.jsonl", group_log(200, 8))
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "advcli", "annotate", log, "--method", "grpo", "-q", "--out"]
    procs = [subprocess.Popen([*cmd, str(out)], stderr=subprocess.PIPE) for _ in range(4)]
    codes = [p.wait() for p in procs]
    errors = [p.stderr.read().decode() for p in procs if p.stderr]
    assert codes.count(0) == 1, (codes, errors)
    assert all(c == 2 for c in codes if c), errors
    assert writers.read_metadata(str(out)) is not None  # data and metadata agree


# 4. Replacing an existing output is crash-safe: see tests/test_kill.py for the kills; here the
#    mechanisms.


def test_jsonl_metadata_names_the_data_it_describes(small_log, tmp_path):
    out = tmp_path / "out.jsonl"
    assert run("annotate", small_log, "--method", "grpo", "-q", "--out", str(out)).returncode == 0
    meta = json.loads(Path(f"{out}.meta.json").read_text())
    assert meta["data"] == {"bytes": out.stat().st_size, "sha256": digest(out)}
    out.write_bytes(out.read_bytes().replace(b'"a"', b'"z"'))  # as if another run's data
    proc = run("shard", str(out), "--out", str(tmp_path / "sh"))
    assert proc.returncode == 1
    assert "describes another version of" in one_line(proc)


def test_a_folder_is_swapped_in_one_step(tmp_path):
    target = tmp_path / "sh"
    target.mkdir()
    (target / "old").write_text("old")
    inode = target.stat().st_ino
    with writers.atomic_folder(target, force=True) as tmp:
        (tmp / "new").write_text("new")
    assert [p.name for p in target.iterdir()] == ["new"]
    assert target.stat().st_ino != inode
    assert [p.name for p in tmp_path.iterdir()] == ["sh"]


# 5. Temporaries are named as ours and removed by the next write when their process is gone.


def test_stale_temporaries_of_dead_runs_are_removed(small_log, tmp_path):
    out = tmp_path / "out.parquet"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    stale_file = tmp_path / f".out.parquet.advcli-{dead}-1-abcd.tmp"
    stale_folder = tmp_path / f".out.parquet.advcli-{dead}-1-ef01.old"
    live = tmp_path / f".out.parquet.{writers.TAG}-0000.tmp"  # this test's own process: running
    foreign = tmp_path / ".out.parquet.user-notes.tmp"
    stale_file.write_text("x")
    stale_folder.mkdir()
    live.write_text("x")
    foreign.write_text("x")
    assert run("annotate", small_log, "--method", "grpo", "-q", "--out", str(out)).returncode == 0
    assert not stale_file.exists() and not stale_folder.exists()
    assert live.exists() and foreign.exists()


# 6. Files of one log whose columns differ.


def test_files_with_different_pass_through_columns_read_as_nulls(tmp_path):
    rows = group_log(2, 2)
    a = write_parquet(tmp_path / "a.parquet", [{**r, "note": "x"} for r in rows[:2]])
    b = write_parquet(tmp_path / "b.parquet", rows[2:])
    out = tmp_path / "out.parquet"
    assert run("annotate", a, b, "--method", "grpo", "-q", "--out", str(out)).returncode == 0
    assert pq.read_table(out).column("note").to_pylist() == ["x", "x", None, None]


def test_a_role_missing_in_one_file_names_that_file(tmp_path):
    rows = group_log(2, 2)
    a = write_parquet(tmp_path / "a.parquet", [{**r, "values": [0.0] * 5} for r in rows[:2]])
    b = write_parquet(tmp_path / "b.parquet", rows[2:])
    proc = run("annotate", a, b, "--method", "gae", "--out", str(tmp_path / "out.parquet"))
    assert proc.returncode == 1
    assert one_line(proc).startswith(f"advcli: error: {b}: no 'values' column")


# 7. A null rollout_id.


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_a_null_rollout_id_names_the_row(tmp_path, suffix):
    rows = group_log(2, 2)
    rows[2]["rollout_id"] = None
    writer = write_parquet if suffix == ".parquet" else write_jsonl
    log = writer(tmp_path / f"log{suffix}", rows)
    for command in (["annotate", "--method", "grpo", "--out", str(tmp_path / "o.parquet")],
                    ["shard", "--method", "grpo", "--out", str(tmp_path / "sh")]):  # fmt: skip
        proc = run(command[0], log, *command[1:])
        assert proc.returncode == 1
        where = "line 3" if suffix == ".jsonl" else "row 2"  # Parquet rows count from 0
        assert f"{where}, column 'rollout_id': rollout id is missing" in one_line(proc)


# 8. Corrupt Parquet pages behind an intact footer.


def test_corrupt_parquet_pages_are_one_line(tmp_path):
    source = (SAMPLE / "rollouts.parquet").read_bytes()
    footer = int.from_bytes(source[-8:-4], "little") + 8
    rng = np.random.default_rng(0)
    seen = 0
    for i in range(40):
        data = bytearray(source)
        for at in rng.integers(4, len(source) - footer, 8):
            data[at] ^= 0xFF
        path = tmp_path / f"m{i}.parquet"
        path.write_bytes(bytes(data))
        proc = run("annotate", str(path), "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
        assert proc.returncode in (0, 1), proc.stderr
        if proc.returncode:
            seen += 1
            assert one_line(proc).startswith(f"advcli: error: {path}")
        (tmp_path / "o.parquet").unlink(missing_ok=True)
    assert seen > 10
