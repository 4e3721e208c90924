"""``--force`` replaces a regular file, or a folder advcli wrote and nothing else: a folder of
the user's files, a FIFO, a device node and a symlink are refused with one line, ``--force``
or not, and left as they were."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from advcli.io.outputs import metadata_path
from tests.conftest import one_line, run


def shard(log: str, out: Path, *extra: str):
    return run("shard", log, "--method", "grpo", "--out", str(out), "--quiet", *extra)


def test_shard_force_replaces_its_own_output(small_log, tmp_path):
    out = tmp_path / "shards"
    assert shard(small_log, out).returncode == 0
    assert shard(small_log, out, "--force").returncode == 0
    assert run("verify", str(out)).returncode == 0


@pytest.mark.parametrize("where", ["top", "hidden", "subfolder"])
def test_shard_force_refuses_a_folder_holding_the_users_files(small_log, tmp_path, where):
    out = tmp_path / "shards"
    if where == "top":  # a folder of the user's own files: no manifest at all
        out.mkdir()
        (out / "thesis.tex").write_text("years of work")
        mine = out / "thesis.tex"
    else:  # advcli's output with a file of the user's added to it
        assert shard(small_log, out).returncode == 0
        mine = out / (".notes" if where == "hidden" else "mine/notes.txt")
        mine.parent.mkdir(exist_ok=True)
        mine.write_text("keep me")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    proc = shard(small_log, out, "--force")
    assert proc.returncode == 2
    line = one_line(proc)
    assert "not an output folder of advcli" in line and "--force replaces only" in line
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    assert mine.exists()


def test_force_refuses_a_fifo_and_a_symlink(small_log, tmp_path):
    fifo = tmp_path / "pipe.parquet"
    os.mkfifo(fifo)
    elsewhere = tmp_path / "real.parquet"
    elsewhere.write_bytes(b"the user's")
    link = tmp_path / "link.parquet"
    link.symlink_to(elsewhere)
    for out, what in ((fifo, "not a regular file"), (link, "a symbolic link")):
        for command in (["annotate", small_log, "--method", "grpo"], ["shard", small_log]):
            proc = run(*command, "--out", str(out), "--force")
            assert proc.returncode == 2 and what in one_line(proc), command
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert link.is_symlink() and elsewhere.read_bytes() == b"the user's"


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a device needs root")
def test_force_refuses_a_device_node(small_log, tmp_path):
    device = tmp_path / "null.jsonl"
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a /dev/null of its own
    proc = run("annotate", small_log, "--method", "grpo", "--out", str(device), "--force")
    assert proc.returncode == 2 and "not a regular file" in one_line(proc)
    assert stat.S_ISCHR(device.lstat().st_mode)
    assert not metadata_path(device).exists()
