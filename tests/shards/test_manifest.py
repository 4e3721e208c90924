"""``advcli verify`` (advcli.shards.manifest) trusts nothing it has not checked: the manifest's
checksum, every field it reads, an earlier version's manifest, symlinks and stray files."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import group_log, one_line, read_manifest, run, write_manifest, write_parquet


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
