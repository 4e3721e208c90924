"""Regression tests for the attack on advcli's inputs (issue 13): one or more per class of break,
numbered as in the issue. Every failure is one line on stderr and exit 1 (data) or 2 (usage);
nothing is lost and no input is overwritten."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pyarrow.parquet as pq
import pytest
import zstandard

from advcli.errors import OutputError
from advcli.io import outputs, writers
from advcli.io.outputs import metadata_path
from tests.conftest import (
    SAMPLE,
    read_manifest,
    rollout,
    run,
    write_jsonl,
    write_manifest,
    write_parquet,
)


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
    with appeared, outputs.atomic_path(target, force=False) as tmp:
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
    meta = json.loads(metadata_path(out).read_text())
    assert meta["data"] == {"bytes": out.stat().st_size, "sha256": digest(out)}
    out.write_bytes(out.read_bytes().replace(b'"a"', b'"z"'))  # as if another run's data
    proc = run("shard", str(out), "--out", str(tmp_path / "sh"))
    assert proc.returncode == 1
    assert "describes another version of" in one_line(proc)


def test_a_kill_between_the_two_moves_of_a_jsonl_output_loses_no_metadata(small_log, tmp_path):
    """Killed after the data moved and before its metadata did: the new data sits with the
    old metadata, and the new metadata under its temporary name, where advcli looks."""
    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    for out, method in ((old, "rloo"), (new, "grpo")):
        assert (
            run("annotate", small_log, "--method", method, "-q", "--out", str(out)).returncode == 0
        )
    shutil.copy(new, old)  # the data moved...
    pending = tmp_path / f"..old.jsonl.meta.json.advcli-{_dead_pid()}-1-0c0c.tmp"
    shutil.copy(metadata_path(new), pending)  # ...its metadata did not
    assert writers.read_metadata(str(old))["method"] == "grpo"
    summary = json.loads(run("shard", str(old), "--out", str(tmp_path / "sh"), "--json").stdout)
    assert summary["method"] == "grpo"
    pending.unlink()  # without it the old metadata describes other data: an error, not a guess
    proc = run("shard", str(old), "--out", str(tmp_path / "sh2"))
    assert proc.returncode == 1 and "describes another version" in one_line(proc)


def test_a_folder_is_swapped_in_one_step(tmp_path):
    target = tmp_path / "sh"
    target.mkdir()
    (target / "old").write_text("old")
    inode = target.stat().st_ino
    with outputs.atomic_folder(target, force=True) as tmp:
        (tmp / "new").write_text("new")
    assert [p.name for p in target.iterdir()] == ["new"]
    assert target.stat().st_ino != inode
    assert [p.name for p in tmp_path.iterdir()] == ["sh"]


def test_a_swap_a_kill_interrupted_is_undone_by_the_next_run(small_log, tmp_path):
    """Where no one-step swap exists, the old folder is moved aside first; killed right then,
    the next run puts it back before anything else."""
    out = tmp_path / "sh"
    shard = ["shard", small_log, "--method", "grpo", "-q", "--out", str(out)]
    assert run(*shard).returncode == 0
    dead = _dead_pid()
    os.rename(out, tmp_path / f".sh.advcli-{dead}-1-0a0a.old")
    (tmp_path / f".sh.advcli-{dead}-1-0b0b.tmp").mkdir()  # the new folder, never moved in
    proc = run(*shard)
    assert proc.returncode == 2 and "already exists" in one_line(proc)
    assert run("verify", str(out)).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.jsonl", "sh"]


def _dead_pid() -> str:
    """The pid of a process that has exited."""
    return subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip


# 5. Temporaries are named as ours and removed by the next write when their process is gone.


def test_stale_temporaries_of_dead_runs_are_removed(small_log, tmp_path):
    out = tmp_path / "out.parquet"
    dead = _dead_pid()
    stale_file = tmp_path / f".out.parquet.advcli-{dead}-1-abcd.tmp"
    stale_folder = tmp_path / f".out.parquet.advcli-{dead}-1-ef01.tmp"
    live = tmp_path / f".out.parquet.{outputs.TAG}-0000.tmp"  # this test's own process: running
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
    for i in range(12):  # more, in-process: tests/test_fuzz.py
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
    assert seen >= 3


# 9. Output paths that cannot be used, and writes that fail: exit 2, nothing left behind.


def test_an_output_that_cannot_go_there_is_a_usage_error(small_log, tmp_path):
    (tmp_path / "file").write_text("x")
    folder = tmp_path / "out.parquet"
    folder.mkdir()
    (tmp_path / "o.jsonl.meta.json").write_text("{}")
    (tmp_path / "d.jsonl").write_text("old data\n")
    (tmp_path / "d.jsonl.meta.json").mkdir()  # its metadata's place taken by a folder
    cases = [
        (["--out", str(tmp_path / "file" / "o.parquet")], "is a file, not a folder"),
        (["--out", str(folder), "--force"], "a folder, not a file"),
        (["--out", str(tmp_path / "o.jsonl")], "o.jsonl.meta.json: already exists"),
        (["--out", str(tmp_path / "d.jsonl"), "--force"], "d.jsonl.meta.json: a folder, not"),
    ]
    if sys.platform.startswith("linux"):
        cases.append((["--out", "/proc/advcli-test.parquet"], "could not write the output"))
    for args, needle in cases:
        proc = run("annotate", small_log, "--method", "grpo", *args)
        assert proc.returncode == 2, proc.stderr
        assert needle in one_line(proc)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "d.jsonl", "d.jsonl.meta.json", "file", "log.jsonl", "o.jsonl.meta.json", "out.parquet"
    ]  # fmt: skip
    assert list(folder.iterdir()) == []
    assert (tmp_path / "d.jsonl").read_text() == "old data\n"  # the old output untouched


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in read-only folders")
def test_a_read_only_folder_is_a_usage_error(small_log, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    proc = run("annotate", small_log, "--method", "grpo", "--out", str(locked / "o.parquet"))
    assert proc.returncode == 2
    assert "no permission" in one_line(proc)


def _limited(max_bytes: int):
    """A child process whose files cannot grow beyond ``max_bytes``, as on a full disk."""
    import resource
    import signal

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write then fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))

    return limit


@pytest.mark.parametrize("command", ["annotate-parquet", "annotate-jsonl", "shard"])
def test_a_write_that_fails_midway_is_a_usage_error_and_leaves_nothing(tmp_path, command):
    log = write_parquet(tmp_path / "log.parquet", group_log(3000, 4))
    out = tmp_path / ("sh" if command == "shard" else f"out.{command.split('-')[1]}")
    args = ["shard", log, "--method", "grpo", "--rows-per-shard", "5000"] if command == "shard" \
        else ["annotate", log, "--method", "grpo"]  # fmt: skip
    command_line = [sys.executable, "-m", "advcli", *args, "--out", str(out)]
    limit = _limited(20_000)
    proc = subprocess.run(command_line, capture_output=True, preexec_fn=limit, check=False)
    assert proc.returncode == 2
    assert "could not write the output" in one_line(proc)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.parquet"]


# 10. Logs of odd shapes.


def test_schema_of_a_log_of_empty_objects_counts_its_rows(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text("{}\n\n{}\n")
    info = json.loads(run("schema", str(log), "--json").stdout)
    assert info["rows"] == 2 and info["columns"] == {}
    proc = run("annotate", str(log), "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 1
    assert "no 'prompt_id' column. Columns found: none." in one_line(proc)


def test_integers_beyond_64_bits(tmp_path):
    rows = [rollout(2**64 + 1, 1.0), rollout(2**64 + 1, 0.0), rollout(7, 1.0)]
    log = tmp_path / "log.jsonl"  # orjson writes no integer beyond 64 bits: json does
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "o.parquet"
    assert run("annotate", str(log), "--method", "grpo", "-q", "--out", str(out)).returncode == 0
    table = pq.read_table(out)
    assert table.column("prompt_id").to_pylist() == [str(2**64 + 1)] * 2 + ["7"]  # as text
    assert [a[-1] for a in table.column("advantages").to_pylist()] == pytest.approx(
        [1.0, -1.0, 0.0], abs=1e-5
    )
    rows = [rollout("a", 1.0), rollout("a", 0.0, input_ids=[1, 2, 3, 4, 2**64])]
    (tmp_path / "ids.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = run("annotate", str(tmp_path / "ids.jsonl"), "--method", "grpo", "--out", str(out),
               "--force")  # fmt: skip
    assert proc.returncode == 1
    assert "line 2, column 'input_ids': expected a list of 64-bit integers" in one_line(proc)


@pytest.mark.parametrize(
    "meta",
    ["[1, 2", '"text"', '{"method": 5}', '{"method": "grpo", "roles": {"reward": 3}}'],
)
def test_malformed_metadata_of_an_annotated_log(small_log, tmp_path, meta):
    out = tmp_path / "ann.jsonl"
    assert run("annotate", small_log, "--method", "grpo", "-q", "--out", str(out)).returncode == 0
    metadata_path(out).write_text(meta)
    proc = run("shard", str(out), "--out", str(tmp_path / "sh"))
    assert proc.returncode == 1
    assert one_line(proc).startswith(f"advcli: error: {metadata_path(out)}: ")


def test_a_segment_index_that_is_no_number(tmp_path):
    log = write_jsonl(tmp_path / "log.jsonl", [rollout("a", 1.0, segment_index={})])
    proc = run("annotate", log, "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 1
    assert "column 'segment_index'" in one_line(proc)


# 11. verify trusts nothing it has not checked.


@pytest.fixture
def shards(tmp_path) -> Path:
    log = write_parquet(tmp_path / "log.parquet", group_log(20, 4))
    out = tmp_path / "sh"
    proc = run("shard", log, "--method", "grpo", "--split", "val=0.3", "--rows-per-shard", "20",
               "-q", "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return out


def _edit_manifest(folder: Path, change, *, checksum: bool) -> None:
    manifest = read_manifest(folder)
    change(manifest)
    write_manifest(folder, manifest, checksum=checksum)


def _verify_fails(folder: Path, needle: str) -> None:
    proc = run("verify", str(folder))
    assert proc.returncode == 1, proc.stderr
    assert needle in one_line(proc)


def test_verify_checks_the_manifest_checksum(shards):
    assert run("verify", str(shards)).returncode == 0
    original = (shards / "_advcli_manifest.parquet").read_bytes()
    for change in (
        lambda m: m.update(method="rloo"),
        lambda m: m["params"].update(eps=0.1),
        lambda m: m["inputs"][0].update(sha256="0" * 64),
        lambda m: m["shards"][0].update(split="val"),
    ):
        _edit_manifest(shards, change, checksum=False)
        _verify_fails(shards, "_advcli_manifest.parquet: edited after advcli wrote it")
        (shards / "_advcli_manifest.parquet").write_bytes(original)
    (shards / "_advcli_manifest.parquet").write_bytes(original[:-20])
    _verify_fails(shards, "_advcli_manifest.parquet: not a readable manifest")


def test_verify_and_force_read_the_manifest_of_an_earlier_version(shards):
    """Before the manifest moved into the folder's Parquet: manifest.json with manifest.sha256
    beside the shards."""
    text = json.dumps(read_manifest(shards), indent=2, sort_keys=True) + "\n"
    (shards / "_advcli_manifest.parquet").unlink()
    (shards / "manifest.json").write_text(text)
    sha = hashlib.sha256(text.encode()).hexdigest()
    (shards / "manifest.sha256").write_text(f"{sha}  manifest.json\n")
    assert run("verify", str(shards)).returncode == 0
    (shards / "manifest.json").write_text(text.replace('"grpo"', '"rloo"'))
    _verify_fails(shards, "manifest.json: edited after advcli wrote it")
    (shards / "manifest.json").write_text(text)
    (shards / "manifest.sha256").unlink()
    _verify_fails(shards, "manifest.sha256: missing")
    (shards / "manifest.sha256").write_text(f"{sha}  manifest.json\n")
    log = read_manifest(shards)["inputs"][0]["path"]
    again = run("shard", log, "--method", "grpo", "--force", "-q", "--out", str(shards))
    assert again.returncode == 0, again.stderr  # --force knows the folder as advcli's
    assert not (shards / "manifest.json").exists() and run("verify", str(shards)).returncode == 0


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda m: m["shards"][0].pop("bytes"), "manifest.shards[0] lacks 'bytes'"),
        (lambda m: m["shards"][0].pop("sha256"), "manifest.shards[0] lacks 'sha256'"),
        (lambda m: m["shards"].__setitem__(0, "train/part-00000.parquet"),
         "manifest.shards[0] is str, expected a record"),
        (lambda m: m["shards"][0].update(rows=str(m["shards"][0]["rows"])),
         "manifest.shards[0].rows is '"),
        (lambda m: m.update(method="rloo"), "its method differs from the manifest's"),
        (lambda m: m["params"].update(eps=0.1), "its params differs from the manifest's"),
        (lambda m: m["shards"][0].update(split="val"), "is not where the shard is"),
        (lambda m: m["splits"]["val"].update(rows=1), "split 'val' does not add up"),
    ],
)  # fmt: skip
def test_verify_checks_every_field_it_reads(shards, change, needle):
    _edit_manifest(shards, change, checksum=True)
    _verify_fails(shards, needle)


def test_verify_refuses_symlinks_and_stray_files(shards):
    shard = next(shards.glob("train/*.parquet"))
    keep = shards.parent / "kept.parquet"
    shutil.move(shard, keep)
    shard.symlink_to(keep)
    _verify_fails(shards, f"{shard}: missing or not a file")
    shard.unlink()
    shutil.move(keep, shard)
    assert run("verify", str(shards)).returncode == 0
    (shards / ".hidden").mkdir()
    (shards / ".hidden" / "extra.parquet").write_bytes(shard.read_bytes())
    _verify_fails(shards, ".hidden/extra.parquet: a file the manifest does not list")


# 12. Numbers too large for float32 are refused where they come in, or where a sum overflows.


def test_inputs_beyond_float32_are_refused_by_row_and_column(tmp_path):
    rows = group_log(2, 2)
    rows[1]["values"] = [0.0, 0.0, 3e39, 0.0, 0.0]
    for r in rows[:1] + rows[2:]:
        r["values"] = [0.0] * 5
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    proc = run("annotate", log, "--method", "gae", "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 1
    assert one_line(proc) == (
        f"advcli: error: {log}: line 2, column 'values': value 3e+39 is beyond float32's range "
        "(±3.4e38), which advcli writes. Hint: scale the column"
    )
    rows[1]["reward"] = -1e300
    proc = run("annotate", write_jsonl(tmp_path / "r.jsonl", rows), "--method", "grpo",
               "--out", str(tmp_path / "o.parquet"))  # fmt: skip
    assert proc.returncode == 1
    assert "line 2, column 'reward': value -1e+300 is beyond float32's range" in one_line(proc)
    assert not (tmp_path / "o.parquet").exists()
    rows[1]["reward"] = 1.0
    rows[2].update(truncated=True, bootstrap_value=1e300)  # a truncated row's bootstrap too
    proc = run("annotate", write_jsonl(tmp_path / "b.jsonl", rows), "--method", "reinforce-pp",
               "--out", str(tmp_path / "o.parquet"))  # fmt: skip
    assert proc.returncode == 1
    assert "line 3, column 'bootstrap_value': value 1e+300 is beyond float32's" in one_line(proc)


def test_a_result_that_overflows_float32_names_its_row(tmp_path):
    n = 50
    rows = [rollout("a", 0.0, n_prompt=0, n_action=n, token_rewards=[0.0] * n, values=[0.0] * n)
            for _ in range(2)]  # fmt: skip
    rows[1]["token_rewards"] = [3e38] * n  # each fits; their sum does not
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    proc = run("annotate", log, "--method", "mc", "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 1
    assert one_line(proc).startswith(
        f"advcli: error: {log}: line 2, column 'advantages': the mc result inf is not a finite "
        "float32 number"
    )
    assert proc.stderr.count(b"Warning") == 0


# 13. A critic that returns NaN or infinity.


def _critic(path: Path, op: str) -> str:
    """A critic whose output is log(-id) (NaN for ids > 0) or 1 / (id - id) (infinite)."""
    from onnx import TensorProto, helper, save

    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", "s"])
    out = helper.make_tensor_value_info("values", TensorProto.FLOAT, ["b", "s"])
    nodes = [helper.make_node("Cast", ["input_ids"], ["x"], to=TensorProto.FLOAT)]
    if op == "nan":
        nodes += [helper.make_node("Neg", ["x"], ["n"]), helper.make_node("Log", ["n"], ["y"])]
    else:
        nodes += [helper.make_node("Sub", ["x", "x"], ["z"]),
                  helper.make_node("Reciprocal", ["z"], ["y"])]  # fmt: skip
    mask_f = helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT)
    nodes += [mask_f, helper.make_node("Mul", ["y", "m"], ["values"])]
    graph = helper.make_graph(nodes, "broken", [ids, mask], [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save(model, str(path))
    return str(path)


@pytest.mark.parametrize("op", ["nan", "inf"])
def test_a_critic_returning_non_finite_values_is_named(small_log, tmp_path, op):
    pytest.importorskip("onnxruntime")
    critic = _critic(tmp_path / f"{op}.onnx", op)
    seen = "nan" if op == "nan" else "inf"
    for command in (["score", "--critic", critic],
                    ["annotate", "--method", "gae", "--critic", critic]):  # fmt: skip
        out = tmp_path / "o.parquet"
        proc = run(command[0], small_log, *command[1:], "--out", str(out))
        assert proc.returncode == 1
        assert one_line(proc).startswith(
            f"advcli: error: {small_log}: line 1, column 'input_ids': the critic returned {seen} "
            "for token 1"
        )
        assert not out.exists()


# 14. Values of the wrong kind anywhere in a line, and keys given twice.


def _spans_log(path: Path, start: object, at_line: int) -> str:
    """A log typed by its first lines, whose line ``at_line`` has an odd span start."""
    spans = [{"start": 0, "end": 2, "kind": "prompt"}, {"start": 2, "end": 5, "kind": "action"}]
    rows = [rollout(f"p{i // 4}", float(i % 2), spans=spans) for i in range(300)]
    rows[at_line - 1] = {**rows[at_line - 1], "spans": [spans[0], {**spans[1], "start": start}]}
    for row in rows:
        del row["action_mask"]
    return write_jsonl(path, rows)


@pytest.mark.parametrize("start", ["2", 2.5])
@pytest.mark.parametrize("at_line", [3, 250])  # among the lines that type the log, or later
def test_a_span_start_that_is_no_integer(tmp_path, start, at_line):
    log = _spans_log(tmp_path / "log.jsonl", start, at_line)
    proc = run("annotate", log, "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 1
    line = one_line(proc)
    if at_line == 250:
        shown = orjson.dumps(start).decode()
        assert f"line 250, column 'spans': expected a 64-bit integer at spans[1].start, " \
            f"saw {shown}" in line  # fmt: skip
    else:  # the column's type itself is off
        assert "column 'spans' (spans) has type" in line


def test_negative_segment_index_and_token_id(tmp_path):
    rows = [rollout("a", 1.0, rollout_id="r", segment_index=-1)]
    proc = run("annotate", write_jsonl(tmp_path / "s.jsonl", rows), "--method", "grpo",
               "--out", str(tmp_path / "o.parquet"))  # fmt: skip
    assert proc.returncode == 1
    assert "line 1, column 'segment_index': segment index -1 is negative" in one_line(proc)
    rows = [rollout("a", 1.0), rollout("a", 0.0, input_ids=[1, 2, -3, 4, 5])]
    log = write_parquet(tmp_path / "t.parquet", rows)
    proc = run("annotate", log, "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 1
    assert "row 1, column 'input_ids': token id -3 is negative" in one_line(proc)


@pytest.mark.parametrize("spaced", [False, True])
def test_a_key_given_twice_is_refused(tmp_path, spaced):
    rows = group_log(2, 2)
    lines = [orjson.dumps(r).decode() for r in rows]
    colon = '": ' if spaced else '":'
    lines[2] = lines[2][:-1] + f', "prompt_id{colon}"7"}}'  # as a hand edit would
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(lines) + "\n")
    for command in (
        ["schema"],
        ["annotate", "--method", "grpo", "--out", str(tmp_path / "o.jsonl")],
    ):
        proc = run(command[0], str(log), *command[1:])
        assert proc.returncode == 1
        assert "line 3, column 'prompt_id': the key appears twice" in one_line(proc)
    nested = [{**r, "meta": {"prompt_id": "x"}} for r in rows]  # a nested key of that name
    out = tmp_path / "n.parquet"
    log = write_jsonl(tmp_path / "nested.jsonl", nested)
    assert run("annotate", log, "--method", "grpo", "-q", "--out", str(out)).returncode == 0


# 16. Exit codes: about the data 1, about the command line 2.


def test_exit_codes_follow_one_rule(tmp_path):
    log = write_jsonl(tmp_path / "log.jsonl", [{"input_ids": [1, 2], "reward": 1.0}])
    assert run("audit", log).returncode == 1  # no prompt_id: the data
    proc = run("audit", log, "--col", "reward=nosuch")  # a flag naming what is not there
    assert proc.returncode == 2
    assert "--col reward=nosuch: no column 'nosuch'" in one_line(proc)
    assert run("audit", log, "--col", "nosuch=reward").returncode == 2  # no such role
    errors = (Path(__file__).parent.parent / "docs" / "errors.md").read_text()
    assert "| 70 |" in errors  # the internal-error exit code is documented


# 15. Ctrl-C: one line, exit 130, nothing left behind; ignored when the parent ignores it.


def _big_log(tmp_path: Path) -> str:
    return write_parquet(tmp_path / "big.parquet", group_log(6000, 8))


def _start(*args: str, ignore_sigint: bool = False) -> subprocess.Popen:
    import signal

    def disposition() -> None:  # explicit: a test run in the background ignores SIGINT
        signal.signal(signal.SIGINT, signal.SIG_IGN if ignore_sigint else signal.SIG_DFL)
        for stop in (signal.SIGTERM, signal.SIGHUP):  # (a job runner may ignore these too)
            signal.signal(stop, signal.SIG_DFL)

    command_line = [sys.executable, "-m", "advcli", *args]
    return subprocess.Popen(
        command_line, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=disposition
    )


def _when_writing(tmp_path: Path, proc: subprocess.Popen) -> None:
    import time

    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".*.tmp")) and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.005)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="watches /proc")
@pytest.mark.parametrize("command", ["annotate", "shard"])
@pytest.mark.parametrize("when", ["starting", "writing"])
def test_ctrl_c_is_one_line_and_exit_130(tmp_path, command, when):
    import signal
    import time

    log = _big_log(tmp_path)
    out = tmp_path / ("out.jsonl" if command == "annotate" else "sh")
    proc = _start(command, log, "--method", "grpo", "--out", str(out))
    if when == "starting":  # while the libraries load: once pyarrow's is mapped
        maps = Path(f"/proc/{proc.pid}/maps")
        while "pyarrow" not in maps.read_text() and proc.poll() is None:
            time.sleep(0.001)
    else:
        _when_writing(tmp_path, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate()
    assert proc.returncode == 130, err
    assert err == b"advcli: interrupted\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.parquet"]


@pytest.mark.parametrize("command", ["annotate", "shard", "score"])
@pytest.mark.parametrize(("stop", "code"), [("SIGTERM", 143), ("SIGHUP", 129)])
def test_sigterm_and_sighup_end_a_run_as_ctrl_c_does(tmp_path, command, stop, code):
    """A scheduler's stop or a closed terminal: one line, exit 128 + the signal, no temporary
    left beside the output."""
    import signal

    log = write_parquet(tmp_path / "big.parquet", group_log(20000, 8))
    out = tmp_path / ("out.jsonl" if command != "shard" else "sh")
    if command == "score":
        pytest.importorskip("onnxruntime")
        from bench.critic_model import build_critic, make_weights

        build_critic(tmp_path / "c.onnx", make_weights(vocab=1000, dim=8, hidden=8))
    args = ["--critic", str(tmp_path / "c.onnx")] if command == "score" else ["--method", "grpo"]
    for _ in range(3):  # a loaded machine may finish the run before the signal lands: again
        proc = _start(command, log, *args, "--out", str(out), "--force")
        _when_writing(tmp_path, proc)
        proc.send_signal(getattr(signal, stop))
        _, err = proc.communicate()
        if proc.returncode != 0:
            break
    assert (proc.returncode, err) == (code, b"advcli: terminated\n")
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".onnx") == ["big.parquet"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="watches /proc")
@pytest.mark.parametrize("library", ["orjson", "polars", "pyarrow"])
def test_ctrl_c_while_a_native_module_loads_is_held_until_it_has(tmp_path, library):
    """An interrupt raised inside a native module's initialisation could crash the process
    (orjson's did: SIGSEGV, nothing said); it is held until the modules are loaded."""
    import signal
    import time

    log = _big_log(tmp_path)
    if library == "polars":  # it reads JSONL logs (loaded on first use, as numpy and pyarrow)
        log = write_jsonl(tmp_path / "big.jsonl", pq.read_table(log).to_pylist())
    for _ in range(3):
        proc = _start("schema", log)
        maps = Path(f"/proc/{proc.pid}/maps")
        while proc.poll() is None and library not in maps.read_text():
            time.sleep(0.0005)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate()
        assert (proc.returncode, err) == (130, b"advcli: interrupted\n")


def test_ctrl_c_is_ignored_when_the_parent_ignores_it(tmp_path):
    import signal

    log = _big_log(tmp_path)
    out = tmp_path / "out.jsonl"
    proc = _start("annotate", log, "--method", "grpo", "-q", "--out", str(out), ignore_sigint=True)
    _when_writing(tmp_path, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate()
    assert proc.returncode == 0, err
    assert writers.read_metadata(str(out)) is not None


# 17. typer's usage errors in advcli's form; --json alone on stdout; ranges checked.


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["annotate", "log.jsonl", "--out", "o.parquet"], "Missing option '--method'"),
        (["annotate", "log.jsonl", "--method", "gae", "--gamma", "abc", "-o", "o.parquet"],
         "Invalid value for '--gamma'"),
        (["audit", "log.jsonl", "--fail-above", "2"], "Invalid value for '--fail-above'"),
        (["audit", "log.jsonl", "--fail-above", "-0.1"], "Invalid value for '--fail-above'"),
        (["audit", "log.jsonl", "--list", "everything"], "expected zero-variance or singleton"),
        (["annotate", "log.jsonl", "--nosuch"], "No such option: --nosuch"),
        (["nosuch"], "No such command 'nosuch'"),
    ],
)  # fmt: skip
def test_usage_errors_are_one_line_and_exit_2(small_log, args, needle):
    proc = run(*args, cwd=Path(small_log).parent)
    assert proc.returncode == 2
    line = one_line(proc)
    assert line.startswith("advcli: error: ") and needle in line, line


@pytest.mark.parametrize("value", [{}, [1], True, 1.5])
def test_an_id_that_is_not_a_string_or_an_integer_is_refused(tmp_path, value):
    rows = [rollout("p", 1.0), dict(rollout("p", 0.0), prompt_id=value)]
    rows.append(dict(rollout("q", 0.0), meta={"prompt_id": {}}))  # not the row's own: fine
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    proc = run("audit", log)
    assert proc.returncode == 1
    assert one_line(proc) == (
        f"advcli: error: {log}: line 2, column 'prompt_id': an id is a string or an integer, "
        f"saw {json.dumps(value, separators=(',', ':'))}. Hint: write the id as a string"
    )


def test_a_value_of_another_kind_on_a_later_line_names_line_and_column(tmp_path):
    rows = [rollout("p", 1.0), dict(rollout("p", 0.0), segment_index={})]
    rows[0]["segment_index"] = 0
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    proc = run("annotate", log, "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 1
    assert one_line(proc) == (
        f"advcli: error: {log}: line 2, column 'segment_index': expected a number (as on line "
        "1), saw {}. Hint: every line must use the same types"
    )


def test_broken_roles_in_an_annotated_logs_metadata_are_the_datas_fault(tmp_path):
    log = write_jsonl(tmp_path / "log.jsonl", [rollout(f"p{i % 2}", i % 3) for i in range(6)])
    out = tmp_path / "a.jsonl"
    assert run("annotate", log, "--method", "grpo", "--out", str(out)).returncode == 0
    meta = metadata_path(out)
    record = json.loads(meta.read_text())
    record["roles"] = {"nosuchrole": "reward"}
    meta.write_text(json.dumps(record))
    proc = run("shard", str(out), "--out", str(tmp_path / "sh"))
    assert proc.returncode == 1
    assert one_line(proc).startswith(f"advcli: error: {meta}: its 'roles' are not roles advcli")
    record["roles"] = {"reward": "nosuch"}
    meta.write_text(json.dumps(record))
    proc = run("shard", str(out), "--out", str(tmp_path / "sh"))
    assert proc.returncode == 1
    assert one_line(proc) == (
        f"advcli: error: {meta}: its 'roles' name a column the log lacks (reward=nosuch). "
        "Hint: annotate the raw log again"
    )
    assert not (tmp_path / "sh").exists()


def test_json_alone_prints_json_on_stdout_and_nothing_on_stderr(tmp_path):
    log = write_jsonl(tmp_path / "log.jsonl", [rollout(f"p{i}", 1.0) for i in range(3)])
    out = str(tmp_path / "o.parquet")
    for args in (["annotate", log, "--method", "grpo", "--out", out], ["schema", log],
                 ["audit", log], ["shard", log, "--method", "grpo", "--out", str(tmp_path / "s")],
                 ["verify", str(tmp_path / "s")]):  # fmt: skip
        proc = run(*args, "--json")
        assert proc.returncode == 0 and proc.stderr == b"", (args, proc.stderr)
        result = json.loads(proc.stdout)
        if "warnings" in result:  # every group a singleton: the warning is in the JSON
            assert args[0] == "verify" or result["warnings"]
    proc = run("audit", log, "--list", "singleton", "--json")
    assert json.loads(proc.stdout) == ["p0", "p1", "p2"] and proc.stderr == b""


# 18. --critic with a method that reads no values; --critic over a log that has values.


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
    meta = writers.read_metadata(str(with_values))
    assert meta["critic"]["replaced_column"] == "values"


# 19. Every --help renders: metavars in words, nothing eaten by rich markup.


def test_every_command_help_renders_its_options_in_words():
    from advcli.cli.runner import command

    group = command()
    for name, cmd in [("", group), *group.commands.items()]:
        proc = run(*([name] if name else []), "--help")
        assert proc.returncode == 0, proc.stderr
        text = proc.stdout.decode()
        flat = " ".join(text.replace("│", " ").split())
        for ugly in ("<bool>", "<str>", "<int>", "<float>", "<list["):
            assert ugly not in text, (name, ugly)
        for param in cmd.params:
            if getattr(param, "hidden", False):  # a method's parameter: advcli methods NAME
                continue
            for opt in param.opts:
                assert opt in text or param.metavar in text, (name, opt)
            if param.help and "[" in param.help:  # rich markup would eat [t-1]-like text
                for bracketed in re.findall(r"\[[^\]]*\]", param.help):
                    assert bracketed in flat, (name, param.name, bracketed)
    score = run("score", "--help").stdout.decode()
    assert "output at t-1" in " ".join(score.replace("│", " ").split())


# 20. Every pass moves the progress line, with its share done where its total is known.


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
            shares = [share for _, share in one]
            assert shares == sorted(shares) and shares[-1] == pytest.approx(1.0), one


# 21. Two files with the same rollouts: the error names both.


def test_a_folder_holding_one_log_in_two_formats_names_both_files(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    for name in ("rollouts.jsonl", "rollouts.parquet"):
        shutil.copy(SAMPLE / name, folder / name)
    proc = run("audit", str(folder))
    assert proc.returncode == 1
    assert one_line(proc) == (
        f"advcli: error: {folder}/rollouts.parquet: row 0, column 'segment_index': rollout "
        f"'r00' (segment 0) is also at {folder}/rollouts.jsonl line 1; two files hold the same "
        "rollouts (one log in two formats in one folder?). Hint: give only one of them"
    )
    rows = group_log(2, 2)
    a = write_jsonl(tmp_path / "a.jsonl", rows)
    b = write_jsonl(tmp_path / "b.jsonl", rows[2:])  # no segment_index: ids must be unique
    proc = run("annotate", a, b, "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 1
    assert f"{b}: line 1, column 'rollout_id': rollout 'p1-r0' is also at {a} line 3" in \
        one_line(proc)  # fmt: skip


def test_an_annotated_jsonl_keeps_its_metadata_hidden_and_reads_an_old_sidecar(
    small_log, tmp_path, monkeypatch
):
    """``.out.jsonl.meta.json``: HF datasets reads the folder's data alone (it skips hidden
    files); polars reads it through a glob (it refuses a folder of two kinds of files, hidden
    ones too). A metadata file beside the data (``out.jsonl.meta.json``, as advcli wrote it
    before) still reads, and a new write replaces it."""
    import polars as pl

    folder = tmp_path / "annotated"
    folder.mkdir()
    out = folder / "out.jsonl"
    assert run("annotate", small_log, "--method", "rloo", "-q", "--out", str(out)).returncode == 0
    assert sorted(p.name for p in folder.iterdir()) == [".out.jsonl.meta.json", "out.jsonl"]
    assert writers.read_metadata(str(out))["method"] == "rloo"
    assert pl.read_ndjson(folder / "*.jsonl").height == 6
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    loaded = datasets.load_dataset("json", data_dir=str(folder), cache_dir=str(tmp_path / "c"))
    assert loaded["train"].num_rows == 6 and "advantages" in loaded["train"].column_names
    metadata_path(out).rename(folder / "out.jsonl.meta.json")  # the layout before
    assert writers.read_metadata(str(out))["method"] == "rloo"
    summary = json.loads(run("shard", str(out), "--out", str(tmp_path / "sh"), "--json").stdout)
    assert summary["method"] == "rloo"
    again = run("annotate", small_log, "--method", "grpo", "-q", "--force", "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in folder.iterdir()) == [".out.jsonl.meta.json", "out.jsonl"]
    assert writers.read_metadata(str(out))["method"] == "grpo"
