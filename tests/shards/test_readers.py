"""A shard folder is a dataset folder: the usual readers of a folder of Parquet files load it
as it is, its rows in order, and nothing else (the manifest holds no rows)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import advcli
from tests.conftest import ROOT

SAMPLE = ROOT / "sample_data" / "rollouts.parquet"


def expected(folder: Path) -> pa.Table:
    """The folder's rows as its parts hold them, part after part."""
    return pa.concat_tables(pq.read_table(p) for p in sorted(folder.glob("part-*.parquet")))


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """A shard folder, one packed, and one with splits."""
    root = tmp_path_factory.mktemp("shards")
    made = {}
    for name, opts in {
        "rows": advcli.ShardOptions(tokens_per_shard=120),
        "packed": advcli.ShardOptions(pack=64, tokens_per_shard=256),
        "split": advcli.ShardOptions(split="val=0.25", tokens_per_shard=120),
    }.items():
        advcli.shard(SAMPLE, root / name, opts, method="grpo")
        made[name] = root / name
    return made


def readers() -> dict[str, Callable[[Path], pa.Table]]:
    """Each reader, as a function of a folder that gives its rows as an Arrow table."""

    def hf(folder: Path) -> pa.Table:
        datasets = pytest.importorskip("datasets")
        loaded = datasets.load_dataset(
            "parquet", data_dir=str(folder), cache_dir=str(folder.parent / ".hf-cache")
        )
        assert list(loaded) == ["train"], list(loaded)
        return loaded["train"].data.table

    def pandas(folder: Path) -> pa.Table:
        pd = pytest.importorskip("pandas")
        return pa.Table.from_pandas(pd.read_parquet(folder), preserve_index=False)

    return {
        "pyarrow.parquet": lambda folder: pq.read_table(folder),
        "pyarrow.dataset": lambda folder: ds.dataset(folder, format="parquet").to_table(),
        "polars.scan_parquet": lambda folder: pl.scan_parquet(folder).collect().to_arrow(),
        "polars.read_parquet": lambda folder: pl.read_parquet(folder).to_arrow(),
        "pandas": pandas,
        "datasets": hf,
    }


READERS = readers()


def same_rows(got: pa.Table, want: pa.Table) -> None:
    assert got.num_rows == want.num_rows
    assert got.column_names == want.column_names
    for name in want.column_names:
        assert got.column(name).to_pylist() == want.column(name).to_pylist(), name


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("kind", ["rows", "packed"])
def test_every_reader_loads_a_shard_folder_as_it_is(folders, reader, kind, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = folders[kind]
    same_rows(READERS[reader](folder), expected(folder))


@pytest.mark.parametrize("reader", READERS)
def test_every_reader_loads_a_split_subfolder(folders, reader, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for split in ("train", "val"):
        folder = folders["split"] / split
        same_rows(READERS[reader](folder), expected(folder))


def test_hf_datasets_finds_the_splits_of_a_shard_folder(folders, monkeypatch):
    """Its train/ and val/ folders are Hugging Face's own split names."""
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    top = folders["split"]
    loaded = datasets.load_dataset("parquet", data_dir=str(top), cache_dir=str(top.parent / ".c"))
    assert sorted(loaded) == ["train", "validation"]
    same_rows(loaded["train"].data.table, expected(top / "train"))
    same_rows(loaded["validation"].data.table, expected(top / "val"))


def test_the_manifest_is_a_parquet_file_without_rows(folders):
    """Inside the folder, read by verify, and holding no row group (which HF datasets would
    trip on); its footer holds the manifest's text and sha256."""
    import hashlib
    import json

    path = folders["rows"] / "_advcli_manifest.parquet"
    meta = pq.ParquetFile(path).metadata
    assert meta.num_rows == 0 and meta.num_row_groups == 0
    schema = pq.read_schema(path)
    text = schema.metadata[b"advcli_manifest"]
    assert schema.metadata[b"advcli_manifest_sha256"] == hashlib.sha256(text).hexdigest().encode()
    manifest = json.loads(text)
    assert manifest["format"] == "advcli-shards/1" and manifest["method"] == "grpo"
    assert (
        schema.remove_metadata()
        == pq.read_schema(folders["rows"] / "part-00000.parquet").remove_metadata()
    )
    assert advcli.verify(folders["rows"]).ok
    assert sorted(p.name for p in folders["rows"].iterdir())[0] == "_advcli_manifest.parquet"
