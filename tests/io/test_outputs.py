"""Outputs that are complete or absent: what every output gets, whatever its name, and however
runs writing the same output interleave."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from advcli.io.outputs import create_empty, metadata_path, temporaries, temporary_beside
from advcli.io.writers import read_metadata
from tests.conftest import SAMPLE, run

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
        assert read_metadata(str(out))["method"] == "grpo"


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
