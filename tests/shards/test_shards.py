"""advcli shard / verify: shards read back exactly, packing, splits, weights, atomicity."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import advcli
from advcli.cli import runner as cli
from advcli.shards import build
from tests.conftest import ROOT, read_manifest, write_manifest
from tests.shards.test_plan import naive_ffd

SAMPLE = ROOT / "sample_data" / "rollouts.parquet"
SAMPLE_JSONL = ROOT / "sample_data" / "rollouts.jsonl"


def run(capsys, *args) -> tuple[int, str, str]:
    """The real entry point (advcli.cli.runner:main) in-process: exit code, stdout, stderr."""
    old = sys.argv
    sys.argv = ["advcli", *map(str, args)]
    try:
        cli.main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    finally:
        sys.argv = old
    out, err = capsys.readouterr()
    return code, out, err


def ok(capsys, *args) -> dict:
    code, out, err = run(capsys, *args, "--quiet", "--json")
    assert code == 0, err
    return json.loads(out)


def make_log(path: Path, n_prompts: int = 60, seed: int = 0, max_len: int = 60) -> Path:
    """A raw log: groups of 1-6 rollouts (some all-equal rewards), prompt + action tokens."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 7, n_prompts)
    n = int(sizes.sum())
    prompt = np.repeat(np.arange(n_prompts), sizes)
    same = rng.random(n_prompts) < 0.3  # zero-variance groups
    reward = np.where(same[prompt], 1.0, rng.integers(0, 2, n).astype(float))
    lens = rng.integers(3, max_len, n)
    off = np.r_[0, np.cumsum(lens)].astype(np.int32)
    pos = np.arange(off[-1]) - np.repeat(off[:-1], lens)
    mask = (pos >= np.repeat(rng.integers(1, 3, n), lens)).astype(np.int8)
    lists = pa.array(off)
    table = pa.table(
        {
            "prompt_id": pa.array([f"q{p}" for p in prompt]),
            "rollout_id": pa.array([f"r{i}" for i in range(n)]),
            "input_ids": pa.ListArray.from_arrays(lists, pa.array(rng.integers(0, 9999, off[-1]))),
            "action_mask": pa.ListArray.from_arrays(lists, pa.array(mask)),
            "reward": pa.array(reward),
            "old_logprobs": pa.ListArray.from_arrays(
                lists, pa.array(rng.standard_normal(off[-1]).astype(np.float32))
            ),
            "model_version": pa.array([f"v{i % 3}" for i in range(n)]),
        }
    )
    pq.write_table(table, path)
    return path


@pytest.fixture(scope="module")
def log_path(tmp_path_factory) -> Path:
    return make_log(tmp_path_factory.mktemp("log") / "log.parquet")


def reference(path: Path, method: str = "grpo") -> tuple[pa.Table, np.ndarray]:
    """The annotated table and its flat action mask, as advcli annotate computes them."""
    table = advcli.annotate_table(pq.read_table(path), method=method)
    mask = table.column("action_mask").combine_chunks().flatten().to_numpy()
    return table, mask.astype(bool)


def shard_files(folder: Path) -> list[str]:
    return sorted(str(p) for p in folder.glob("part-*.parquet"))


def unpack(table: pa.Table) -> dict[str, dict]:
    """Packed rows back to one record per rollout (by rollout id)."""
    out = {}
    for row in table.to_pylist():
        start = 0
        for i, n in enumerate(row["seq_lens"]):
            piece = slice(start, start + n)
            assert row["position_ids"][piece] == list(range(n))
            rec = {k: row[k][piece] for k in ("input_ids", "loss_mask", "advantages")}
            rec |= {"prompt_id": row["prompt_id"][i], "old_logprobs": row["old_logprobs"][piece]}
            out[row["rollout_id"][i]] = rec
            start += n
        assert start == len(row["input_ids"])
    return out


# --------------------------------------------------------------------------- round trips


def test_rows_read_back_exactly_with_pyarrow_and_polars(capsys, tmp_path, log_path):
    out = tmp_path / "shards"
    summary = ok(
        capsys, "shard", log_path, "--method", "grpo", "--out", out,
        "--tokens-per-shard", 2000, "--keep", "old_logprobs", "--keep", "model_version",
    )  # fmt: skip
    ref, mask = reference(log_path)
    files = shard_files(out)
    assert len(files) == summary["shards"] > 2
    got = ds.dataset(files, format="parquet").to_table()
    assert got.num_rows == ref.num_rows  # same rows, same order
    for name in ("prompt_id", "rollout_id", "input_ids", "advantages", "old_logprobs"):
        assert got.column(name).to_pylist() == ref.column(name).to_pylist(), name
    assert got.column("model_version").to_pylist() == ref.column("model_version").to_pylist()
    flat_mask = pa.concat_arrays([c.flatten() for c in got.column("loss_mask").chunks])
    np.testing.assert_array_equal(flat_mask.to_numpy().astype(bool), mask)
    frame = pl.read_parquet(f"{out}/*.parquet")
    assert frame["rollout_id"].to_list() == ref.column("rollout_id").to_pylist()
    assert frame["advantages"].to_list() == ref.column("advantages").to_pylist()
    # shard size: greedy, each shard as many whole rows as fit in 2000 tokens
    manifest = read_manifest(out)
    tokens = [s["tokens"] for s in manifest["shards"]]
    assert all(t <= 2000 for t in tokens) and sum(tokens) == manifest["totals"]["tokens"]
    assert pq.ParquetFile(files[0]).metadata.num_row_groups >= 1


def test_annotated_input_gives_the_same_shards_and_jsonl_works(capsys, tmp_path):
    annotated = tmp_path / "a.parquet"
    assert run(capsys, "annotate", SAMPLE, "--method", "gae", "--out", annotated, "-q")[0] == 0
    ok(capsys, "shard", SAMPLE, "--method", "gae", "--out", tmp_path / "raw")
    summary = ok(capsys, "shard", annotated, "--out", tmp_path / "ann")
    assert summary["annotated_input"] is True and summary["method"] == "gae"
    raw_bytes = (tmp_path / "raw" / "part-00000.parquet").read_bytes()
    assert (tmp_path / "ann" / "part-00000.parquet").read_bytes() == raw_bytes
    got = pq.read_table(tmp_path / "ann" / "part-00000.parquet")
    assert "returns" in got.column_names  # gae has critic targets
    assert got.column("returns").to_pylist() == pq.read_table(annotated)["returns"].to_pylist()
    code, _, err = run(capsys, "shard", annotated, "--method", "grpo", "--out", tmp_path / "x")
    assert code == 2 and "already annotated with method 'gae'" in err and "Hint:" in err
    for given in (["--gamma", "0.9"], ["--param", "gamma=0.9"]):
        code, _, err = run(capsys, "shard", annotated, *given, "--out", tmp_path / "x")
        assert code == 2 and "the method's parameters apply to raw logs" in err
    code, _, err = run(capsys, "shard", annotated, SAMPLE, "--out", tmp_path / "x")
    assert code == 2 and "a raw log among logs annotated by advcli" in err
    jsonl = ok(capsys, "shard", SAMPLE_JSONL, "--method", "gae", "--out", tmp_path / "j")
    assert jsonl["tokens"] == summary["tokens"] and jsonl["samples"] == 14


def test_shuffle_is_a_deterministic_permutation(capsys, tmp_path, log_path):
    args = ["shard", log_path, "--method", "grpo", "--shuffle", "--seed", "7"]
    ok(capsys, *args, "--out", tmp_path / "a", "--rows-per-shard", 50)
    ok(capsys, *args, "--out", tmp_path / "b", "--rows-per-shard", 50)
    ok(capsys, "shard", log_path, "--method", "grpo", "--shuffle", "--seed", "8",
       "--out", tmp_path / "c", "--rows-per-shard", 50)  # fmt: skip
    a, b = (sorted((tmp_path / d).iterdir()) for d in "ab")
    assert [p.name for p in a] == [p.name for p in b]
    assert all(x.read_bytes() == y.read_bytes() for x, y in zip(a, b, strict=True))
    ref, _ = reference(log_path)
    got = pl.read_parquet(f"{tmp_path / 'a'}/*.parquet")
    other = pl.read_parquet(f"{tmp_path / 'c'}/*.parquet")
    ids = ref.column("rollout_id").to_pylist()
    assert got["rollout_id"].to_list() != ids  # shuffled...
    assert got["rollout_id"].to_list() != other["rollout_id"].to_list()  # ...by the seed
    expected = Counter(zip(ids, map(tuple, ref.column("advantages").to_pylist()), strict=True))
    assert Counter(zip(got["rollout_id"], map(tuple, got["advantages"]), strict=True)) == expected


def test_keep_groups_adjacent_and_in_one_shard(capsys, tmp_path, log_path):
    out = tmp_path / "g"
    ok(capsys, "shard", log_path, "--method", "grpo", "--out", out,
       "--shuffle", "--keep-groups", "--rows-per-shard", 10)  # fmt: skip
    seen: dict[str, str] = {}
    sequence = []
    for f in shard_files(out):
        prompts = pq.read_table(f, columns=["prompt_id"])["prompt_id"].to_pylist()
        assert len(prompts) <= 10 or len(set(prompts)) == 1  # only a big group overflows
        for p in prompts:
            assert seen.setdefault(p, f) == f  # one shard per group
        sequence += prompts
    runs = [p for i, p in enumerate(sequence) if i == 0 or sequence[i - 1] != p]
    assert len(runs) == len(set(runs))  # adjacent
    assert runs != sorted(runs, key=lambda p: int(p[1:]))  # groups shuffled


STREAM_CASES = [
    {},
    {"rows_per_shard": 17, "loss_weights": "seq-mean-token-mean"},
    {"pack": 128, "keep": ["old_logprobs", "model_version"], "tokens_per_shard": 900},
    {"pack": 40, "truncate": True, "loss_weights": "seq-mean-token-mean"},
    {"shuffle": True, "seed": 3, "rows_per_shard": 25, "keep": ["old_logprobs"]},
    {"shuffle": True, "seed": 4, "keep_groups": True, "tokens_per_shard": 700},
    {"split": "val=0.25,test=0.1", "shuffle": True, "pack": 100, "keep_groups": True},
    {"drop_zero_variance": True, "drop_singletons": True, "loss_weights": "token-mean"},
]


@pytest.mark.parametrize("case", STREAM_CASES)
@pytest.mark.parametrize("param", [None, ["zero-variance=drop"]])
def test_streaming_does_not_change_a_byte(tmp_path, log_path, case, param, monkeypatch):
    """Many small batches and buckets give the same folder as the whole log in one of each;
    rows arriving in order, written straight to the shards, the same as through bucket files."""
    folders = []
    runs = (("one", 10**9, 2**62, True), ("many", 16, 500, True), ("files", 16, 500, False))
    for name, batch_rows, bucket_tokens, direct in runs:
        if not direct:
            monkeypatch.setattr(build, "arrive_in_order", lambda lay: False)
        out = tmp_path / name
        opts = advcli.ShardOptions(**case)
        advcli.shard([str(log_path)], str(out), opts, method="grpo", param=param,
                       batch_rows=batch_rows, bucket_tokens=bucket_tokens)  # fmt: skip
        folders.append({p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()})
    one, many, files = folders
    assert len(one) > 1 and one == many == files
    assert not list(tmp_path.rglob("*.arrow"))  # no bucket left behind


SHARD_UNDER_LIMIT = """
import resource, sys
import advcli
from advcli.errors import OutputError
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[3]), int(sys.argv[4])))
try:
    advcli.shard([sys.argv[1]], sys.argv[2], advcli.ShardOptions(tokens_per_shard=60, shuffle=True),
                   method="grpo", batch_rows=16, bucket_tokens=50)
except OutputError as exc:
    sys.exit(str(exc))
"""


def test_many_buckets_raise_the_open_file_limit_or_fail_before_writing(tmp_path, log_path):
    """Shuffled rows go through bucket files, one open per bucket (here ~150): a low soft limit
    on open files is raised to what is needed; a hard limit below it is a clear error and
    nothing is written."""
    expected = tmp_path / "expected"
    opts = advcli.ShardOptions(tokens_per_shard=60, shuffle=True)
    advcli.shard([str(log_path)], str(expected), opts, method="grpo", batch_rows=16,
                 bucket_tokens=50)  # fmt: skip

    def under(soft: int, hard: int, out: Path) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-c", SHARD_UNDER_LIMIT, str(log_path), str(out), str(soft)]
        return subprocess.run([*cmd, str(hard)], capture_output=True, text=True, cwd=ROOT)

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    hard = 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)
    if hard < 300:  # a process may not raise its hard limit: this machine's is too low
        pytest.skip(f"the hard limit on open files here is {hard}")
    raised = under(40, hard, tmp_path / "raised")
    assert raised.returncode == 0, raised.stderr
    files = sorted(p.relative_to(expected) for p in expected.rglob("*") if p.is_file())
    assert len(files) > 100
    for name in files:
        assert (tmp_path / "raised" / name).read_bytes() == (expected / name).read_bytes()

    refused = under(40, 40, tmp_path / "refused")
    assert refused.returncode == 1
    assert "temporary bucket files open at once" in refused.stderr
    assert "ulimit -n" in refused.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "refused").exists() and not list(tmp_path.glob(".refused*"))


# --------------------------------------------------------------------------- packing


def test_packed_rows_unpack_to_the_original_rollouts(capsys, tmp_path, log_path):
    out = tmp_path / "p"
    summary = ok(
        capsys, "shard", log_path, "--method", "grpo", "--out", out, "--pack", 128,
        "--keep", "old_logprobs", "--keep", "model_version", "--tokens-per-shard", 1500,
    )  # fmt: skip
    ref, mask = reference(log_path)
    got = ds.dataset(shard_files(out), format="parquet").to_table()
    assert summary["layout"] == "packed" and got.num_rows < ref.num_rows
    assert max(len(x) for x in got.column("input_ids").to_pylist()) <= 128
    rollouts = unpack(got)
    offsets = np.r_[0, np.cumsum([len(x) for x in ref.column("input_ids").to_pylist()])]
    assert len(rollouts) == ref.num_rows
    for i, row in enumerate(ref.to_pylist()):
        rec = rollouts[row["rollout_id"]]
        assert rec["input_ids"] == row["input_ids"]
        assert rec["advantages"] == row["advantages"]
        assert rec["old_logprobs"] == row["old_logprobs"]
        assert rec["prompt_id"] == row["prompt_id"]
        assert rec["loss_mask"] == mask[offsets[i] : offsets[i + 1]].astype(int).tolist()
    versions = dict(
        zip(ref["rollout_id"].to_pylist(), ref["model_version"].to_pylist(), strict=True)
    )
    for ids, vs in zip(
        got["rollout_id"].to_pylist(), got["model_version"].to_pylist(), strict=True
    ):
        assert vs == [versions[r] for r in ids]  # a per-row column: one value per rollout
    # unshuffled packs come in order of their first rollout: deterministic and near input order
    firsts = [
        ref.column("rollout_id").to_pylist().index(r[0]) for r in got["rollout_id"].to_pylist()
    ]
    assert firsts == sorted(firsts)
    # the same number of packs as a plain first-fit-decreasing
    lens = np.diff(offsets)
    assert got.num_rows == len(naive_ffd(lens.tolist(), 128))


def test_pack_too_long_is_an_error_unless_truncated(capsys, tmp_path, log_path):
    code, _, err = run(capsys, "shard", log_path, "--method", "grpo", "--out", tmp_path / "x",
                       "--pack", 40)  # fmt: skip
    assert code == 1 and not (tmp_path / "x").exists()
    assert f"{log_path}: row " in err and "column 'input_ids'" in err
    assert "does not fit in --pack 40" in err and "--truncate" in err
    assert len(err.strip().splitlines()) == 1
    out = tmp_path / "t"
    summary = ok(capsys, "shard", log_path, "--method", "grpo", "--out", out,
                 "--pack", 40, "--truncate", "--loss-weights", "seq-mean-token-mean")  # fmt: skip
    ref, _ = reference(log_path)
    lens = np.array([len(x) for x in ref.column("input_ids").to_pylist()])
    manifest = read_manifest(out)
    assert manifest["truncated"]["rollouts"] == int((lens > 40).sum()) > 0
    assert manifest["truncated"]["tokens"] == int(np.maximum(lens - 40, 0).sum())
    assert summary["tokens"] == int(np.minimum(lens, 40).sum())
    rollouts = unpack_weights(pq.read_table(shard_files(out)[0]))
    for row in ref.to_pylist():
        ids, w = rollouts[row["rollout_id"]]
        assert ids == row["input_ids"][:40]
        assert sum(w) == pytest.approx(1.0 if any(w) else 0.0, abs=1e-5)


def unpack_weights(table: pa.Table) -> dict:
    out = {}
    for row in table.to_pylist():
        start = 0
        for rid, n in zip(row["rollout_id"], row["seq_lens"], strict=True):
            out[rid] = (row["input_ids"][start : start + n], row["loss_weight"][start : start + n])
            start += n
    return out


# --------------------------------------------------------------------------- weights, drops, split


@pytest.mark.parametrize("rule", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_loss_weights(capsys, tmp_path, log_path, rule):
    out = tmp_path / "w"
    ok(capsys, "shard", log_path, "--method", "grpo", "--out", out, "--loss-weights", rule)
    got = pl.read_parquet(f"{out}/*.parquet")
    for mask, w in zip(got["loss_mask"].to_list(), got["loss_weight"].to_list(), strict=True):
        mask, w = np.array(mask), np.array(w)
        assert (w[mask == 0] == 0).all()
        expected = 1.0 / mask.sum() if rule == "seq-mean-token-mean" else 1.0
        np.testing.assert_allclose(w[mask == 1], expected, rtol=1e-6)


def test_drops_are_counted(capsys, tmp_path, log_path):
    out = tmp_path / "d"
    ok(capsys, "shard", log_path, "--method", "grpo", "--out", out,
       "--drop-zero-variance", "--drop-singletons")  # fmt: skip
    ref, _ = reference(log_path)
    zv = np.array(ref["zero_variance"].to_pylist())
    single = np.array(ref["singleton"].to_pylist())
    manifest = read_manifest(out)
    assert manifest["dropped"] == {"zero_variance": int(zv.sum()), "singleton": int(single.sum())}
    assert zv.sum() > 0 and single.sum() > 0
    kept = [
        r for r, z, s in zip(ref["rollout_id"].to_pylist(), zv, single, strict=True) if not z | s
    ]
    assert pl.read_parquet(f"{out}/*.parquet")["rollout_id"].to_list() == kept
    code, _, err = run(capsys, "shard", SAMPLE, "--method", "gae", "--out", tmp_path / "x",
                       "--drop-zero-variance")  # fmt: skip
    assert code == 2 and "no 'zero_variance' column" in err


def test_split_by_prompt_hash(capsys, tmp_path, log_path):
    out = tmp_path / "s"
    summary = ok(capsys, "shard", log_path, "--method", "grpo", "--out", out,
                 "--split", "val=0.25", "--shuffle", "--pack", 100)  # fmt: skip
    assert not list(out.glob("part-*.parquet")) and (out / "train").is_dir()
    train = pl.read_parquet(f"{out}/train/*.parquet")["prompt_id"].explode().to_list()
    val = pl.read_parquet(f"{out}/val/*.parquet")["prompt_id"].explode().to_list()
    assert set(train).isdisjoint(val) and val
    assert 0.1 < len(set(val)) / len(set(train) | set(val)) < 0.4
    assert summary["splits"] == {"train": len(train), "val": len(val)}
    again = tmp_path / "s2"  # the split does not depend on the seed or the order
    ok(capsys, "shard", log_path, "--method", "grpo", "--out", again, "--split", "val=0.25")
    assert set(pl.read_parquet(f"{again}/val/*.parquet")["prompt_id"]) == set(val)
    manifest = read_manifest(out)
    assert {s["path"].split("/")[0] for s in manifest["shards"]} == {"train", "val"}


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["--split", "val=2"], 2, "--split val=2: expected NAME=FRACTION"),
        (["--split", "val"], 2, "Hint: --split val=0.02"),
        (["--split", "val=0.6,test=0.5"], 2, "add up to 1 or more"),
        (["--keep", "nope"], 2, "--keep nope: no such column. Columns: prompt_id, rollout_id"),
        (["--truncate"], 2, "--truncate cuts rollouts longer than --pack N"),
        (["--loss-weights", "mean"], 2, "expected one of token-mean"),
        (["--param", "gama=1"], 2, "--param 'gama=1': no parameter 'gama'. Did you mean 'gamma'?"),
        (["--rows-per-shard", "5", "--tokens-per-shard", "9"], 2, "give one"),
    ],
)
def test_usage_errors(capsys, tmp_path, log_path, args, code, needle):
    got, _, err = run(capsys, "shard", log_path, "--method", "grpo", "--out", tmp_path / "o", *args)
    assert got == code and needle in err and "Hint:" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


def test_raw_log_needs_a_method_and_output_is_refused_unless_force(capsys, tmp_path, log_path):
    code, _, err = run(capsys, "shard", log_path, "--out", tmp_path / "o")
    assert code == 2 and "raw log" in err and "--method" in err
    out = tmp_path / "o"
    ok(capsys, "shard", log_path, "--method", "grpo", "--out", out)
    code, _, err = run(capsys, "shard", log_path, "--method", "rloo", "--out", out)
    assert code == 2 and "already exists" in err and "--force" in err
    summary = ok(capsys, "shard", log_path, "--method", "rloo", "--out", out, "--force")
    assert summary["method"] == "rloo"
    assert read_manifest(out)["method"] == "rloo"
    assert [p.name for p in tmp_path.iterdir()] == ["o"]  # no temporary folders left
    code, _, err = run(capsys, "shard", log_path, "--method", "grpo", "--out", log_path.parent)
    assert code == 2 and "holds the input" in err


# --------------------------------------------------------------------------- verify


def test_verify_catches_truncated_altered_and_missing_shards(capsys, tmp_path, log_path):
    out = tmp_path / "v"
    ok(capsys, "shard", log_path, "--method", "grpo", "--out", out, "--tokens-per-shard", 3000)
    assert ok(capsys, "verify", out)["ok"] is True
    files = [Path(f) for f in shard_files(out)]
    data = files[1].read_bytes()

    def fails(needle: str) -> None:
        code, _, err = run(capsys, "verify", out)
        assert code == 1 and needle in err and "Hint:" in err, err
        assert len(err.strip().splitlines()) == 1

    files[1].write_bytes(data[: len(data) // 2])
    fails(f"{files[1]}: {len(data) // 2} bytes, the manifest says {len(data)}")
    flipped = bytearray(data)
    flipped[len(data) // 3] ^= 0x01
    files[1].write_bytes(bytes(flipped))
    fails(f"{files[1]}: sha256")
    files[1].write_bytes(data)
    assert ok(capsys, "verify", out)["ok"]
    manifest_path = out / "_advcli_manifest.parquet"
    manifest = read_manifest(out)

    def with_manifest(change) -> None:
        """Edit the manifest, and its checksum too (else verify stops at the checksum)."""
        m = json.loads(json.dumps(manifest))
        change(m)
        write_manifest(out, m, checksum=True)

    with_manifest(lambda m: m["shards"][0].update(rows=m["shards"][0]["rows"] + 1))
    fails("rows, the manifest says")
    with_manifest(lambda m: m["shards"][0].update(tokens=1))
    fails("tokens (")
    with_manifest(lambda m: m["shards"][0]["schema"][0].__setitem__(1, "int64"))
    fails("schema (prompt_id: string")
    with_manifest(lambda m: None)
    (out / "part-09999.parquet").write_bytes(data)
    fails("a file the manifest does not list")
    (out / "part-09999.parquet").unlink()
    files[0].unlink()
    fails(f"{files[0]}: missing")
    manifest_path.unlink()
    fails("no manifest")
    code, _, err = run(capsys, "verify", tmp_path / "nowhere")
    assert code == 2 and "no such folder" in err


def _with_key_value_copy(path: Path, key: bytes, value: bytes, *, arrow_copy: bool) -> None:
    """Rewrite a Parquet file with ``key`` set to ``value`` in one of the footer's two copies:
    the key-value metadata (what ``pq.read_metadata(...).metadata`` and polars show), or the
    Arrow schema's (``arrow_copy``: what ``pq.read_schema`` and pandas show)."""
    table = pq.read_table(path)
    kept = dict(table.schema.metadata)
    schema = table.schema.with_metadata({**kept, key: value} if arrow_copy else kept)
    with pq.ParquetWriter(path, schema) as writer:
        writer.write_table(table.cast(schema))
        writer.add_key_value_metadata({key: kept[key] if arrow_copy else value})


@pytest.mark.skipif(
    not hasattr(pq.ParquetWriter, "add_key_value_metadata"),
    reason="this pyarrow cannot write the footer's two copies apart (pyarrow >= 16 can)",
)
@pytest.mark.parametrize("arrow_copy", [False, True], ids=["key-value copy", "arrow copy"])
def test_verify_checks_both_copies_of_the_manifest(capsys, tmp_path, log_path, arrow_copy):
    """The manifest's text and sha256 are in its footer twice: an edit of either copy (its
    sha256 recomputed, as a careful forger would) fails verify, whichever copy a reader reads."""
    import hashlib

    from advcli.io import manifests

    out = tmp_path / "v"
    ok(capsys, "shard", log_path, "--method", "grpo", "--out", out)
    manifest = read_manifest(out)
    manifest["totals"]["rows"] += 1
    text = json.dumps(manifest).encode()
    path = out / manifests.NAME
    for key, value in (
        (manifests.TEXT_KEY, text),
        (manifests.SHA256_KEY, hashlib.sha256(text).hexdigest().encode()),
    ):
        _with_key_value_copy(path, key.encode(), value, arrow_copy=arrow_copy)  # fmt: skip
    code, _, err = run(capsys, "verify", out)
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert f"{path}: edited after advcli wrote it (its footer holds two copies of" in err


def test_sigkill_leaves_no_complete_looking_output(tmp_path):
    log = make_log(tmp_path / "big.parquet", n_prompts=3000, seed=1, max_len=40)
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    args = [sys.executable, "-m", "advcli", "shard", str(log), "--method", "grpo", "--quiet",
            "--out", str(out), "--rows-per-shard", "20"]  # fmt: skip
    proc = subprocess.Popen(args, env=env, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not list(tmp_path.glob(".out.*.tmp/*.parquet")) and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.002)  # kill once the first shards are in the temporary folder
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "finished before the kill: make the log bigger"
    leftovers = list(tmp_path.glob(".out.*.tmp"))
    assert leftovers and list(leftovers[0].glob("*.parquet"))  # killed while writing
    assert not out.exists()
    assert not list(tmp_path.rglob("_advcli_manifest.parquet"))
    # the next run is not blocked by the debris and writes a complete folder
    done = subprocess.run([*args[:-2], "--rows-per-shard", "2000"], env=env, check=True)
    assert done.returncode == 0 and (out / "_advcli_manifest.parquet").exists()


def folder_bytes(folder: Path) -> dict[Path, bytes]:
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_methods_parameters_are_flags_as_on_annotate_and_param_a_deprecated_spelling(
    capsys, tmp_path
):
    flags = ok(capsys, "shard", SAMPLE, "--method", "gae", "--lam", "0.9", "--out", tmp_path / "a")
    assert flags["warnings"] == []
    assert read_manifest(tmp_path / "a")["params"]["lam"] == 0.9
    old = ok(
        capsys, "shard", SAMPLE, "--method", "gae", "--param", "lam=0.9", "--out", tmp_path / "b"
    )
    assert old["warnings"] == ["--param is deprecated: write --lam 0.9"]
    advcli.shard([str(SAMPLE)], tmp_path / "c", method="gae", lam=0.9)
    python = advcli.shard([str(SAMPLE)], tmp_path / "f", method="gae", param=["lam=0.9"])
    assert python.warnings == ["`param` is deprecated: write `lam='0.9'`"]  # lam: text
    assert (
        folder_bytes(tmp_path / "a") == folder_bytes(tmp_path / "b") == folder_bytes(tmp_path / "c")
    )
    code, _, err = run(capsys, "shard", SAMPLE, "--method", "grpo", "--param", "scale=none",
                       "--scale", "batch", "--out", tmp_path / "d")  # fmt: skip
    assert code == 2 and "--scale given twice: as a flag and with --param" in err
    code, _, err = run(
        capsys, "shard", SAMPLE, "--method", "grpo", "--lam", "0.9", "--out", tmp_path / "e"
    )
    assert code == 2 and "--lam does not apply to grpo" in err
