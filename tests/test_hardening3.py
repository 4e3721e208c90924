"""Regression tests for the third attack on advcli (issue 29): each case one line on stderr,
exit 1 (data) or 2 (usage), nothing left behind; never an internal error, a hang or a
silently wrong number. ``--force`` is in ``tests/io/test_force.py``, the report's script
injection in ``tests/reports/test_browser.py``, SIGTERM in ``tests/test_hardening.py``."""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from advcli import installed
from advcli.io.outputs import metadata_path
from tests.conftest import rollout, run, write_jsonl, write_parquet

COMMANDS = {
    "schema": ["schema"],
    "audit": ["audit"],
    "annotate": ["annotate", "--method", "grpo", "--out", "OUT/o.parquet"],
    "shard": ["shard", "--method", "grpo", "--out", "OUT/sh"],
}


def one_line(proc) -> str:
    text = proc.stderr.decode()
    assert "Traceback" not in text and "panicked" not in text, text
    assert text.count("\n") == 1 and text.startswith("advcli: error: "), text
    return text.strip()


def refused(tmp_path: Path, path: str, command: str, code: int = 1) -> str:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    args = [a.replace("OUT", str(out)) for a in COMMANDS[command]]
    proc = run(args[0], path, *args[1:])
    assert proc.returncode == code, proc.stderr.decode()
    assert list(out.iterdir()) == []  # nothing left behind
    return one_line(proc)


def log_rows(n: int = 8) -> list[dict]:
    return [rollout(f"p{i // 4}", float(i % 2), rollout_id=f"r{i}") for i in range(n)]


def _footer(data: bytes) -> tuple[bytes, bytes]:
    size = struct.unpack("<i", data[-8:-4])[0]
    return data[: -8 - size], data[-8 - size : -8]


def _broken_parquet(tmp_path: Path, kind: str) -> str:
    good = Path(write_parquet(tmp_path / "good.parquet", log_rows()))
    data = good.read_bytes()
    path = tmp_path / f"{kind}.parquet"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "magic_only":
        path.write_bytes(b"PAR1")
    elif kind == "footer_beyond_file":
        path.write_bytes(data[:-8] + struct.pack("<i", 10**6) + b"PAR1")
    elif kind == "jsonl_named_parquet":
        path.write_text("\n".join(json.dumps(r) for r in log_rows()) + "\n")
    elif kind == "rows_without_row_groups":  # a footer that claims 8 rows, 0 row groups
        pq.ParquetWriter(path, pq.read_schema(good)).close()
        body, meta = _footer(path.read_bytes())
        at = meta.find(b"\x16\x00")  # num_rows (field 3, i64) = 0 in Thrift's compact form
        meta = meta[:at] + b"\x16\x10" + meta[at + 2 :]  # zigzag varint 16: 8 rows
        path.write_bytes(body + meta + struct.pack("<i", len(meta)) + b"PAR1")
        assert pq.read_metadata(path).num_rows == 8
    good.unlink()
    return str(path)


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(
    "kind",
    ["empty", "magic_only", "footer_beyond_file", "jsonl_named_parquet", "rows_without_row_groups"],
)
def test_a_broken_parquet_file_is_one_line(tmp_path, kind, command):
    path = _broken_parquet(tmp_path, kind)
    line = refused(tmp_path, path, command)
    assert line.startswith(f"advcli: error: {path}: not a readable Parquet file")
    if kind == "jsonl_named_parquet":
        assert "it holds JSON lines: name it .jsonl" in line


def test_a_page_whose_checksum_fails_is_refused(tmp_path):
    path = tmp_path / "crc.parquet"
    pq.write_table(pa.Table.from_pylist(log_rows()), path, write_page_checksum=True,
                   compression="none")  # fmt: skip
    data = bytearray(path.read_bytes())
    data[data.find(b"p0")] = ord("q")  # a byte of a data page changed after it was written
    path.write_bytes(bytes(data))
    for command in ("audit", "annotate", "shard"):
        assert "CRC checksum verification failed" in refused(tmp_path, str(path), command)


def test_json_nested_too_deep_is_one_line(tmp_path):
    deep = json.dumps(log_rows(1)[0])[:-1] + ', "x": ' + "[" * 10_000 + "]" * 10_000 + "}"
    path = tmp_path / "deep.jsonl"
    path.write_text(deep + "\n")
    for command in COMMANDS:
        assert "line 1: not valid JSON" in refused(tmp_path, str(path), command)


def test_a_fifo_or_a_symlink_loop_as_input_is_refused_not_a_hang(tmp_path):
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "a.parquet").symlink_to("b.parquet")
    (folder / "b.parquet").symlink_to("a.parquet")
    for command in COMMANDS:
        assert "not a regular file" in refused(tmp_path, str(fifo), command, code=2)
        assert "Too many levels of symbolic links" in refused(
            tmp_path, str(folder), command, code=2
        )


@pytest.mark.parametrize("command", ["annotate", "shard"])
def test_a_null_or_out_of_range_token_id_names_its_row_and_token(tmp_path, command):
    rows = log_rows()
    rows[3]["input_ids"] = [rows[3]["input_ids"][0], None, *rows[3]["input_ids"][2:]]
    path = write_jsonl(tmp_path / "null.jsonl", rows)
    line = refused(tmp_path, path, command)
    assert line.startswith(f"advcli: error: {path}: line 4, column 'input_ids': token id null")
    assert "at token 1" in line
    table = pa.Table.from_pylist(log_rows())
    ids = [[1, 2**63 + 5, *r[2:]] for r in table.column("input_ids").to_pylist()]
    at = table.schema.get_field_index("input_ids")
    wide = table.set_column(at, "input_ids", pa.array(ids, pa.list_(pa.uint64())))
    big = tmp_path / "u64.parquet"
    pq.write_table(wide, big)
    line = refused(tmp_path, str(big), command)
    assert "row 0, column 'input_ids': token id 9223372036854775813 is beyond int64" in line


def _with_pass_through(tmp_path: Path, column: pa.Array) -> str:
    table = pa.Table.from_pylist(log_rows()).append_column("extra", column)
    path = tmp_path / "log.parquet"
    pq.write_table(table, path)
    return str(path)


def test_a_nan_bound_for_jsonl_is_refused_unless_null_is_asked_for(tmp_path):
    values = pa.array([1.0, float("nan"), 2, 3, float("inf"), 5, 6, 7])
    path = _with_pass_through(tmp_path, values)
    out = tmp_path / "o.jsonl"
    proc = run("annotate", path, "--method", "grpo", "--out", str(out))
    assert proc.returncode == 1
    assert "o.jsonl: row 1 of the output, column 'extra': nan" in one_line(proc)
    assert "--nonfinite null" in one_line(proc)
    assert not out.exists() and not metadata_path(out).exists()
    proc = run("annotate", path, "--method", "grpo", "--out", str(out), "--nonfinite", "null",
               "--json")  # fmt: skip
    assert proc.returncode == 0 and json.loads(proc.stdout)["nonfinite_nulls"] == 2
    assert [json.loads(line)["extra"] for line in out.read_text().splitlines()][:2] == [1.0, None]
    assert run("annotate", path, "--method", "grpo", "--out", str(tmp_path / "o.parquet")
               ).returncode == 0  # Parquet holds NaN as it is  # fmt: skip
    proc = run("annotate", path, "--method", "grpo", "--out", str(out), "--nonfinite", "zero")
    assert proc.returncode == 2
    assert "--nonfinite zero: expected one of error, null" in one_line(proc)


def test_a_bytes_column_bound_for_jsonl_is_one_line(tmp_path):
    path = _with_pass_through(tmp_path, pa.array([b"\x00\xff"] * 8, pa.binary()))
    out = tmp_path / "o.jsonl"
    proc = run("annotate", path, "--method", "grpo", "--out", str(out))
    assert proc.returncode == 2
    assert "column 'extra' holds bytes, which JSON lines cannot hold" in one_line(proc)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.parquet"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["annotate", "--method", "grpo", "--scale", "batch", "--batch-size", str(10**20)],
         "--batch-size 100000000000000000000: too large"),
        (["shard", "--method", "grpo", "--shuffle", "--seed", "-1"],
         "--seed -1: expected an integer >= 0"),
        (["shard", "--method", "grpo", "--seed", str(10**20)], "--seed 100000000000000000000"),
        (["shard", "--param", f"batch_size={10**20}"], "--batch-size 100000000000000000000"),
        (["annotate", "--method", "gae", "--critic", "c.onnx", "--batch-tokens", str(10**20)],
         "--batch-tokens 100000000000000000000: too large"),
        (["report", "--method", "grpo", "--seed", "-1"], "--seed -1: expected an integer >= 0"),
        (["report", "--method", "grpo", "--sample-groups", str(10**20)],
         "--sample-groups 100000000000000000000: too large"),
        (["check", "--tol", "nan"], "--tol"),  # (typer 0.29 refuses it itself, below 0)
    ],
)  # fmt: skip
def test_an_integer_option_out_of_range_is_one_line_and_exit_2(small_log, tmp_path, args, needle):
    proc = run(args[0], small_log, *args[1:], "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 2 and needle in one_line(proc)
    assert not (tmp_path / "o.parquet").exists()


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
@pytest.mark.parametrize("when", ["between passes", "during the last pass"])
def test_an_input_changed_under_a_multi_pass_run_is_refused(tmp_path, suffix, when):
    """The log rewritten (other rewards, the same size) after the passes that plan the run:
    no output mixing the two versions. A Parquet log is read from disk at every pass: one
    line instead. A JSONL log's later passes read what its first pass parsed (kept in a
    temporary file): the output is the first version's, whole."""

    import advcli
    from advcli.errors import DataError

    rows = log_rows()
    writer = write_parquet if suffix == ".parquet" else write_jsonl
    path = Path(writer(tmp_path / f"log{suffix}", rows))
    other = [{**r, "reward": 1.0 - r["reward"]} for r in rows]  # the same bytes in size

    def rewrite() -> None:
        writer(tmp_path / f"new{suffix}", other)
        os.replace(tmp_path / f"new{suffix}", path)

    class Rewrite(advcli.Reporter):
        def stage(self, name: str) -> None:
            if name == "pass 2/2: annotating" and when == "between passes":
                rewrite()

        def advance(self, rows: int, tokens: int) -> None:
            if when == "during the last pass" and rows:
                rewrite()

    out = tmp_path / "o.parquet"
    if suffix == ".jsonl":
        with advcli.reporting(Rewrite()):
            advcli.annotate([str(path)], str(out), method="grpo", batch_rows=2)
        assert pq.read_table(out).column("reward").to_pylist() == [r["reward"] for r in rows]
        return
    refused = pytest.raises(DataError, match="changed while advcli read it")
    with refused, advcli.reporting(Rewrite()):
        advcli.annotate([str(path)], str(out), method="grpo", batch_rows=2)
    assert not out.exists()


def test_a_jsonl_file_changed_while_its_first_pass_reads_it_is_refused(tmp_path):
    """The window a JSONL log has: its first pass, which parses the text."""
    from advcli.errors import DataError
    from advcli.io import file_sources

    path = Path(write_jsonl(tmp_path / "log.jsonl", log_rows()))
    log = file_sources.JsonlSource([str(path)], {})
    frames = log._frames(None)
    next(frames)
    path.write_text(path.read_text().replace('"reward": 0.0', '"reward": 1.0'))
    with pytest.raises(DataError, match="changed while advcli read it"):
        list(frames)


def test_critic_truncation_never_writes_nan_on_an_action_token(tmp_path):
    """``--max-len-truncate left`` that would cut action tokens (left without a value) is
    refused at the row; one that cuts only the prompt scores; ``--max-len 0`` is a usage
    error."""
    pytest.importorskip("onnxruntime")
    from bench.critic_model import build_critic, make_weights

    critic = tmp_path / "c.onnx"
    build_critic(critic, make_weights(vocab=1000, dim=8, hidden=8))
    rows = [rollout(f"p{i // 2}", float(i % 2), rollout_id=f"r{i}", n_prompt=3, n_action=3)
            for i in range(4)]  # fmt: skip
    log = write_parquet(tmp_path / "log.parquet", rows)
    for command in (["score"], ["annotate", "--method", "gae"]):
        base = [*command, log, "--critic", str(critic), "--max-len-truncate", "left"]
        proc = run(*base, "--max-len", "3", "--out", str(tmp_path / "o.parquet"))
        assert proc.returncode == 1, command
        assert "row 0, column 'input_ids': 6 tokens, and --max-len 3 leaves out" in one_line(proc)
        assert not (tmp_path / "o.parquet").exists()
        proc = run(*base, "--max-len", "0", "--out", str(tmp_path / "o.parquet"))
        assert proc.returncode == 2 and "--max-len 0: expected a positive integer" in one_line(proc)
    proc = run(
        "score",
        log,
        "--critic",
        str(critic),
        "--max-len-truncate",
        "left",
        "--max-len",
        "4",
        "--out",
        str(tmp_path / "o.parquet"),
    )  # fmt: skip  (cuts 2 prompt tokens)
    assert proc.returncode == 0, proc.stderr.decode()
    table = pq.read_table(tmp_path / "o.parquet")
    for values, mask in zip(table.column("values").to_pylist(),
                            table.column("action_mask").to_pylist(), strict=True):  # fmt: skip
        assert all(v == v for v, m in zip(values, mask, strict=True) if m)  # no NaN on actions


PRIME = Path(__file__).parent / "fixtures" / "real" / "prime-rl" / "default" / "rollouts"


def _prime_dump(tmp_path: Path, edit) -> str:
    """prime-rl's own effective traces (tests/fixtures/real) with the first trace's nodes
    edited."""
    lines = (PRIME / "step_1" / "train" / "effective" / "traces.jsonl").read_text().splitlines()
    episode = json.loads(lines[0])
    edit(episode["traces"][0]["nodes"])
    folder = tmp_path / "rollouts" / "step_1" / "train" / "effective"
    folder.mkdir(parents=True)
    (folder / "traces.jsonl").write_text("\n".join([json.dumps(episode), *lines[1:]]) + "\n")
    return str(tmp_path / "rollouts")


def _set_parent(index: int, parent):
    def edit(nodes: list[dict]) -> None:
        nodes[index]["parent"] = parent

    return edit


def _cycle(nodes: list[dict]) -> None:
    nodes[1]["parent"], nodes[2]["parent"] = 2, 1


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (_set_parent(2, 2), "trace 0, node 2: parent 2 is not another node"),
        (_set_parent(1, -1), "trace 0, node 1: parent -1 is not another node"),
        (_set_parent(1, 7), "trace 0, node 1: parent 7 is not another node"),
        (_set_parent(1, "0"), "trace 0, node 1: parent '0' is not another node"),
        (_cycle, "trace 0: node 1's parents form a cycle"),
        (lambda nodes: nodes.clear(), "trace 0 has no nodes"),
    ],
)
def test_prime_rl_node_graphs_are_checked(tmp_path, edit, needle):
    dump = _prime_dump(tmp_path, edit)
    for command in ("audit", "annotate"):
        extra = ["--method", "grpo", "--out", str(tmp_path / "o.parquet")] * (command != "audit")
        proc = run(command, dump, "--from", "prime-rl", *extra)
        assert proc.returncode == 1
        line = one_line(proc)
        assert "traces.jsonl: line 1, column 'traces': " + needle in line


def test_a_prime_rl_tree_past_the_expansion_limit_is_refused(tmp_path, monkeypatch):
    """Every root-to-leaf path is a rollout repeating its prefix: a deep tree of few tokens
    expands past any memory, so past EXPANDED_TOKENS it is refused before a path is built."""
    import advcli
    from advcli.errors import DataError
    from advcli.presets import prime_rl

    def deep(nodes: list[dict]) -> None:
        leaf = nodes[-1]
        nodes[:] = nodes[:2]
        for i in range(2, 2 + 2**6 - 1):  # a binary tree under node 1
            nodes.append({**leaf, "parent": 1 if i < 4 else 2 + (i - 4) // 2})

    dump = _prime_dump(tmp_path, deep)
    assert advcli.audit([dump], from_="prime-rl").report.rollouts > 32  # within the limit
    monkeypatch.setattr(prime_rl, "EXPANDED_TOKENS", 500)
    with pytest.raises(DataError, match=r"tree expands to 32 root-to-leaf paths of [\d,]+ tokens"):
        advcli.audit([dump], from_="prime-rl")


def test_a_failed_prime_rl_episode_without_tokens_is_skipped_and_said():
    all_file = (
        Path(__file__).parent / "fixtures" / "real" / "prime-rl" / "all_only" / "rollouts"
        / "step_1" / "train" / "all" / "traces.jsonl"
    )  # fmt: skip
    proc = run("audit", str(all_file), "--from", "prime-rl", "--json")
    assert proc.returncode == 0
    assert any("left out 1 failed episode(s) (ok false: no tokens, no reward)" in w
               for w in json.loads(proc.stdout)["warnings"])  # fmt: skip


def test_remote_locations_fail_in_one_line_within_the_stated_limit(tmp_path):
    """gs:// retries for minutes without network or credentials: ADVCLI_REMOTE_TIMEOUT bounds
    it; hf:// without fsspec names the extra; a Ray head nothing answers at is one line in
    seconds, not Ray's minutes of retries and C++ lines."""
    import importlib.util
    import time

    env = {**os.environ, "ADVCLI_REMOTE_TIMEOUT": "2"}
    started = time.monotonic()
    proc = run("audit", "gs://advcli-no-such-bucket/x.parquet", env=env)
    assert proc.returncode == 2 and "gs://advcli-no-such-bucket/x.parquet: " in one_line(proc)
    assert time.monotonic() - started < 60
    if importlib.util.find_spec("fsspec") is None:
        proc = run("audit", "hf://datasets/someone/logs/x.parquet")
        assert proc.returncode == 1 and installed.pip_install("hf") in one_line(proc)
    pytest.importorskip("ray")
    started = time.monotonic()
    proc = run("annotate", write_parquet(tmp_path / "log.parquet", log_rows()), "--method",
               "grpo", "--engine", "ray", "--ray-address", "127.0.0.1:1", "--out",
               str(tmp_path / "parts"))  # fmt: skip
    assert proc.returncode == 2 and "cannot reach the Ray cluster at 127.0.0.1:1" in one_line(proc)
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("at_line", [4, 1501])  # among the lines that type the log, or later
def test_a_key_twice_inside_a_struct_a_role_reads_is_refused(tmp_path, at_line):
    rows = [{**r, "meta": {"group": r["prompt_id"], "b": 2}} for r in log_rows(2000)]
    lines = [json.dumps(r) for r in rows]
    lines[at_line - 1] = lines[at_line - 1].replace('"b": 2', '"group": "other"')
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(lines) + "\n")
    proc = run("audit", str(path), "--col", "prompt_id=meta.group")
    assert proc.returncode == 1
    assert f"line {at_line}, column 'meta.group': the key appears twice" in one_line(proc)


def test_a_nul_in_a_framework_dumps_field_name_is_one_line(tmp_path):
    """(found by tests.fuzz: polars panicked handing the name to Arrow)"""
    dump = tmp_path / "rollout"
    shutil.copytree(Path(__file__).parent / "fixtures" / "real" / "verl" / "v1" / "rollout", dump)
    first = dump / "1.jsonl"
    first.write_text(first.read_text().replace('"score"', '"sc\\u0000ore"', 1))
    proc = run("schema", str(dump), "--from", "verl")
    assert proc.returncode == 1
    assert "1.jsonl: line 1: a field name holds a NUL character" in one_line(proc)


def test_a_report_of_a_log_with_an_infinite_step_is_drawn(tmp_path):
    """(found by tests.fuzz: a verl line with "step": 1e999 made the page's JSON invalid)"""
    pytest.importorskip("bokeh")
    rows = [{**r, "step": float("inf") if i == 0 else 1.0} for i, r in enumerate(log_rows())]
    path = tmp_path / "log.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    proc = run("report", str(path), "--method", "grpo", "-q", "--out", str(tmp_path / "r.html"))
    assert proc.returncode == 0, proc.stderr.decode()
