"""Outputs that are complete or absent: what every output gets, whatever its name, and however
runs writing the same output interleave."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from advcli.errors import OutputError
from advcli.io import outputs
from advcli.io.outputs import create_empty, metadata_path, temporaries, temporary_beside
from advcli.io.writers import read_metadata
from tests.conftest import (
    SAMPLE,
    dead_pid,
    digest,
    group_log,
    metadata_of,
    one_line,
    run,
    write_jsonl,
    write_parquet,
)

WRITERS = 4
ROUNDS = 40  # one round in seven mixed the pair before the lock (measured): a miss is ~0.2%


def _write_again_and_again(out: str, ready, rounds: int, writer: int) -> None:
    """Write ``out`` with --force, ``rounds`` times, each when every writer is ready."""
    from advcli.io.writers import write_batches

    rows = pa.table({"writer": [writer] * (writer + 1)})  # each writer's data its own size
    for _ in range(rounds):
        ready.wait()
        write_batches(out, "jsonl", {"method": f"writer {writer}"}, [(rows, 0)], force=True)
        ready.wait()


def test_concurrent_force_writers_leave_data_and_metadata_that_agree(tmp_path):
    """Several processes writing one JSONL output with --force at once: after every round,
    the data is one writer's and its metadata file that same writer's (one run's data beside
    another's metadata made `shard` refuse the output)."""
    out = str(tmp_path / "out.jsonl")
    # Forked from a fresh process that imported the writer once (no fork of this one, which
    # holds threads), rather than each started anew.
    processes = multiprocessing.get_context("forkserver")
    processes.set_forkserver_preload([__name__, "advcli.io.writers", "polars"])
    ready = processes.Barrier(WRITERS + 1)
    writers = [processes.Process(target=_write_again_and_again, args=(out, ready, ROUNDS, w))
               for w in range(WRITERS)]  # fmt: skip
    for process in writers:
        process.start()
    try:
        mixed = []
        for round_ in range(ROUNDS):
            ready.wait(timeout=120)  # all start writing
            ready.wait(timeout=120)  # all have finished
            writer = json.loads(Path(out).read_text().splitlines()[0])["writer"]
            meta = read_metadata(out)  # raises where the metadata describes other data
            if meta is None or meta["method"] != f"writer {writer}":
                mixed.append(round_)
        assert mixed == []
    finally:
        for process in writers:
            process.join(timeout=120)
            if process.is_alive():
                process.kill()
    assert all(process.exitcode == 0 for process in writers)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.jsonl.meta.json", "out.jsonl"]


def _name(size: int, suffix: str, char: str = "n") -> str:
    """A name of ``size`` bytes: "n", then ``char`` as often as fits, "n"s to fill, ``suffix``
    (the leading "n" puts a character of 2, 3 or 4 bytes across the place a shortened
    temporary name cuts)."""
    fill = size - len(suffix) - 1
    chars = char * (fill // len(char.encode()))
    return "n" + chars + "n" * (fill - len(chars.encode())) + suffix


CHARS = ["n", "é", "日", "😀"]  # 1, 2, 3 and 4 bytes in UTF-8


OUTPUTS = {
    "parquet": (["annotate", "--method", "grpo"], ".parquet"),
    "jsonl": (["annotate", "--method", "grpo"], ".jsonl"),
    "report": (["report", "--method", "grpo"], ".html"),
    "shard": (["shard", "--method", "grpo"], ""),
}
LONGEST = {"jsonl": 244}  # its metadata file, .NAME.meta.json, is 11 bytes longer


@pytest.mark.parametrize("char", CHARS)
@pytest.mark.parametrize("kind", sorted(OUTPUTS))
def test_an_output_name_as_long_as_a_name_may_be_is_written(tmp_path, kind, char):
    """A name of 255 bytes (NAME_MAX), of characters of any width, is written, and written
    again with --force: its temporary, .NAME.advcli-PID-START-XXXX.tmp, is shortened (the
    name's first whole characters and a hash) where it would not fit."""
    command, suffix = OUTPUTS[kind]
    out = tmp_path / _name(LONGEST.get(kind, 255), suffix, char)
    args = [command[0], str(SAMPLE / "rollouts.parquet"), *command[1:], "-q", "--out", str(out)]
    for again in ([], ["--force"]):
        proc = run(*args, *again)
        assert proc.returncode == 0, proc.stderr.decode()
    assert out.exists() and not [p for p in tmp_path.iterdir() if ".advcli-" in p.name]
    if kind == "jsonl":
        assert metadata_of(out)["method"] == "grpo"


def test_a_jsonl_name_whose_metadata_name_cannot_fit_is_refused(tmp_path):
    out = tmp_path / _name(245, ".jsonl")
    proc = run("annotate", str(SAMPLE / "rollouts.parquet"), "--method", "grpo", "--out",
               str(out))  # fmt: skip
    line = proc.stderr.decode()
    assert proc.returncode == 2 and line.count("\n") == 1 and "Traceback" not in line
    assert f"the name {metadata_path(out).name} is 256 bytes long" in line
    assert "holds at most 255. Hint: choose a shorter --out" in line
    assert list(tmp_path.iterdir()) == []


def test_a_temporary_name_is_text_whatever_the_characters_of_its_output(tmp_path):
    """Every length up to the limit, every character width: the temporary name (shortened
    or not) is whole UTF-8 characters, fits, begins with the output's name (its first
    characters, where shortened) and is found again as the output's temporary."""
    for char in CHARS:
        for size in range(len(".parquet") + 1, 256):
            out = tmp_path / _name(size, ".parquet", char)
            tmp = temporary_beside(out)
            stem = tmp.name[1:].split(".advcli-")[0]
            assert len(tmp.name.encode("utf-8")) <= 255  # strict: no half character
            assert out.name.startswith(stem.split("~")[0]) and len(stem) > 1
            create_empty(tmp)
            assert list(temporaries(out)) == [tmp]
            tmp.unlink()


@pytest.mark.parametrize("size", [20, 255])
def test_a_temporary_a_killed_run_left_is_removed_by_the_next(tmp_path, size):
    """The leftover of a run that is gone, found by the name its temporaries carry (the
    whole name, or its shortened form for a long one)."""
    out = tmp_path / _name(size, ".parquet")
    leftover = temporary_beside(out)
    assert len(os.fsencode(leftover.name)) <= 255
    gone = leftover.name.replace(f"-{os.getpid()}-", "-4194304-")  # a process id never in use
    shutil.copy(SAMPLE / "rollouts.parquet", leftover.with_name(gone))
    proc = run("annotate", str(SAMPLE / "rollouts.parquet"), "--method", "grpo", "-q",
               "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


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
    assert read_metadata(str(out)) is not None  # data and metadata agree


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
    dead = dead_pid()
    os.rename(out, tmp_path / f".sh.advcli-{dead}-1-0a0a.old")
    (tmp_path / f".sh.advcli-{dead}-1-0b0b.tmp").mkdir()  # the new folder, never moved in
    proc = run(*shard)
    assert proc.returncode == 2 and "already exists" in one_line(proc)
    assert run("verify", str(out)).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.jsonl", "sh"]


def test_stale_temporaries_of_dead_runs_are_removed(small_log, tmp_path):
    out = tmp_path / "out.parquet"
    dead = dead_pid()
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
