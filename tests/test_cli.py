"""The real ``advcli`` command on small logs: outputs, formats, metadata, audit, atomic writes."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import re
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

import advcli
from advcli.errors import OutputError
from advcli.io import writers
from tests.conftest import ROOT, SAMPLE, metadata_of, one_line, rollout, run, write_jsonl


def ok(proc):
    assert proc.returncode == 0, proc.stderr.decode()
    return proc


def test_annotate_grpo_values_and_metadata(small_log, tmp_path):
    out = tmp_path / "o.parquet"
    ok(run("annotate", small_log, "--method", "grpo", "--out", str(out), "-q"))
    df = pl.read_parquet(out)
    # group a: rewards [1, 0, 0, 0], population std sqrt(3)/4, eps 1e-6
    std = np.sqrt(3) / 4
    expected = [0.75 / (std + 1e-6)] + [-0.25 / (std + 1e-6)] * 3 + [0.0, 0.0]
    np.testing.assert_allclose(df["advantage"].to_numpy(), expected, rtol=1e-6)
    assert df["advantages"][0].to_list()[:2] == [0.0, 0.0]  # prompt tokens
    np.testing.assert_allclose(df["advantages"][0].to_list()[2:], [expected[0]] * 3, rtol=1e-6)
    assert df["zero_variance"].to_list() == [False] * 4 + [True] * 2
    assert df["group_size"].to_list() == [4] * 4 + [2] * 2
    meta = metadata_of(out)
    assert meta["method"] == "grpo"
    assert meta["params"]["std_ddof"] == 0 and meta["params"]["eps"] == 1e-6
    assert meta["inputs"] == [small_log]


def test_jsonl_and_parquet_round_trip(tmp_path):
    a = tmp_path / "a.jsonl"
    b = tmp_path / "b.parquet"
    c = tmp_path / "c.jsonl"
    ok(run("annotate", str(SAMPLE / "rollouts.parquet"), "--method", "rloo", "--out", str(a), "-q"))
    ok(run("annotate", str(a), "--method", "rloo", "--out", str(b), "-q"))
    ok(run("annotate", str(b), "--method", "rloo", "--out", str(c), "-q"))
    first, last = pl.read_ndjson(a), pl.read_ndjson(c)
    assert first.columns == last.columns
    for name in ("prompt_id", "reward", "advantage", "model_version"):
        assert first[name].to_list() == last[name].to_list()
    np.testing.assert_allclose(
        np.concatenate(first["advantages"].to_list()), np.concatenate(last["advantages"].to_list())
    )
    assert json.loads((tmp_path / ".c.jsonl.meta.json").read_text())["method"] == "rloo"


def test_parquet_and_jsonl_samples_give_the_same_numbers(tmp_path):
    outs = []
    for name in ("rollouts.parquet", "rollouts.jsonl"):
        out = tmp_path / f"{name}.parquet"
        ok(run("annotate", str(SAMPLE / name), "--method", "gae", "--out", str(out), "-q"))
        outs.append(pl.read_parquet(out))
    a, b = (np.concatenate(o["advantages"].to_list()) for o in outs)
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_passthrough_columns_are_untouched(tmp_path):
    """Same values; polars' writer widens offsets (list -> large_list, string -> large_string)."""
    out = tmp_path / "o.parquet"
    src = SAMPLE / "rollouts.parquet"
    ok(run("annotate", str(src), "--method", "grpo", "--out", str(out), "-q"))
    before, after = pq.read_table(src), pq.read_table(out)
    for name in before.column_names:
        column = before.column(name)
        assert after.column(name).cast(column.type).equals(column), name
    assert after.schema.field("input_ids").type == pa.large_list(pa.int32())


def test_stdin_directory_and_glob(small_log, tmp_path):
    data = (tmp_path / "log.jsonl").read_bytes()
    outs = {}
    for label, args, stdin in [
        ("stdin", ["-"], data),
        ("dir", [str(tmp_path)], None),
        ("glob", [str(tmp_path / "*.jsonl")], None),
    ]:
        out = tmp_path / "out" / f"{label}.parquet"
        ok(run("annotate", *args, "--method", "grpo", "--out", str(out), "-q", stdin=stdin))
        outs[label] = pl.read_parquet(out)["advantage"].to_list()
    assert outs["stdin"] == outs["dir"] == outs["glob"]


def test_compressed_jsonl_and_blank_lines_read_as_the_plain_file(small_log, tmp_path):
    data = b"\n" + Path(small_log).read_bytes().replace(b"\n", b"\n\n")
    inputs = {"plain": tmp_path / "a.jsonl", "gz": tmp_path / "b.jsonl.gz"}
    inputs["zst"] = tmp_path / "c.jsonl.zst"
    inputs["plain"].write_bytes(data)
    inputs["gz"].write_bytes(gzip.compress(data))
    inputs["zst"].write_bytes(zstandard.ZstdCompressor().compress(data))
    outs = {}
    for label, path in [("log", small_log), *inputs.items()]:
        out = tmp_path / f"{label}.parquet"
        ok(run("annotate", str(path), "--method", "grpo", "--out", str(out), "-q"))
        outs[label] = pq.read_table(out)
    assert all(table.equals(outs["log"]) for table in outs.values())


def test_json_summary(small_log, tmp_path):
    proc = ok(
        run(
            "annotate",
            small_log,
            "--method",
            "grpo",
            "--out",
            str(tmp_path / "o.jsonl"),
            "--json",
            "-q",
        )
    )
    summary = json.loads(proc.stdout)
    assert summary["rows"] == 6 and summary["groups"] == 2
    assert summary["zero_variance_groups"] == 1
    assert summary["zero_variance_rollout_share"] == pytest.approx(2 / 6)


def test_summary_extremes_when_every_action_is_positive(tmp_path):
    """Tokens off the actions hold 0; the summary's extremes must not count them."""
    log = write_jsonl(tmp_path / "log.jsonl", [rollout("a", 1.0), rollout("b", 2.0)])
    out = tmp_path / "o.parquet"
    proc = ok(
        run(
            "annotate",
            log,
            "--method",
            "reinforce-pp",
            "--gamma",
            "1",
            "--whiten",
            "none",
            "--out",
            str(out),
            "--json",
            "-q",
        )
    )
    summary = json.loads(proc.stdout)
    assert (summary["advantage_min"], summary["advantage_max"]) == (1.0, 2.0)
    assert summary["advantage_mean"] == pytest.approx(1.5)


def test_zero_variance_drop_counts_rows(small_log, tmp_path):
    out = tmp_path / "o.parquet"
    proc = ok(
        run(
            "annotate",
            small_log,
            "--method",
            "grpo",
            "--zero-variance",
            "drop",
            "--out",
            str(out),
            "--json",
            "-q",
        )
    )
    assert json.loads(proc.stdout)["dropped"] == {"zero_variance": 2}
    assert pl.read_parquet(out)["prompt_id"].to_list() == ["a"] * 4


def test_col_mapping_and_aliases(tmp_path):
    rows = [{"uid": "a", "tokens": [5, 6], "score": s, "loss_mask": [0, 1]} for s in (1, 0)]
    path = write_jsonl(tmp_path / "log.jsonl", rows)
    out = tmp_path / "o.parquet"
    ok(run("annotate", path, "--method", "rloo", "--out", str(out), "-q"))
    assert pl.read_parquet(out)["advantage"].to_list() == [1.0, -1.0]
    rows = [{"q": "a", "input_ids": [5, 6], "r": s} for s in (1, 0)]
    path = write_jsonl(tmp_path / "log2.jsonl", rows)
    ok(
        run(
            "annotate",
            path,
            "--method",
            "rloo",
            "--col",
            "prompt_id=q",
            "--col",
            "reward=r",
            "--out",
            str(tmp_path / "o2.parquet"),
            "-q",
        )
    )


def test_schema_reports_roles_and_all_action_default(tmp_path):
    rows = [{"prompt_id": "a", "input_ids": [1, 2, 3], "reward": 1.0}]
    path = write_jsonl(tmp_path / "log.jsonl", rows)
    info = json.loads(ok(run("schema", path, "--json")).stdout)
    assert info["columns"]["prompt_id"] == ["string", "prompt_id"]
    assert info["actions"] == "no mask and no spans: every token is treated as an action"
    assert info["tokens"] == 3 and info["action_tokens"] == 3


def test_audit_json_list_and_threshold():
    sample = str(SAMPLE / "rollouts.parquet")
    report = json.loads(ok(run("audit", sample, "--json")).stdout)
    assert report["groups"] == 4 and report["rollouts"] == 13
    assert report["zero_variance_groups"] == 1 and report["zero_variance_all_correct"] == 1
    assert report["singleton_groups"] == 1
    assert report["zero_variance_rollout_share"] == pytest.approx(4 / 13)
    assert report["no_signal_rollout_share"] == pytest.approx(5 / 13)
    assert report["group_sizes"] == {"1": 1, "4": 3}
    assert ok(run("audit", sample, "--list", "zero-variance")).stdout.decode() == "p-easy\n"
    assert ok(run("audit", sample, "--list", "singleton")).stdout.decode() == "p-lonely\n"
    proc = run("audit", sample, "--fail-above", "0.2", "--json")
    assert proc.returncode == 3
    assert proc.stderr.decode().strip() == (
        "advcli: error: zero-variance groups hold 30.8% of the rollouts, above --fail-above 0.2"
    )
    ok(run("audit", sample, "--fail-above", "0.5", "--json"))


def test_audit_terminal_report():
    text = ok(run("audit", str(SAMPLE / "rollouts.jsonl"))).stdout.decode()
    assert "zero-variance groups" in text and "all-correct" in text and "rewards" in text


def test_atomic_write_leaves_nothing_when_writing_fails(monkeypatch, tmp_path):
    """A failure mid-write is an OutputError; the temporary file goes, the target never appears."""

    def explode(frame, path, **kwargs):
        frame.collect()  # drain the tables fed so far
        with open(path, "wb") as fh:
            fh.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(pl.LazyFrame, "sink_parquet", explode)
    out = tmp_path / "o.parquet"
    with (
        pytest.raises(OutputError, match=r"o\.parquet: could not write the output \(disk full\)"),
        writers.TableWriter(str(out), "parquet", {}) as writer,
    ):
        writer.write(pa.table({"a": [1]}))
        writer.commit()
    assert list(tmp_path.iterdir()) == []


def test_version_and_help():
    assert ok(run("--version")).stdout.decode().startswith("advcli ")
    assert "annotate" in ok(run("--help")).stdout.decode()


def test_every_sample_method_runs(tmp_path):
    for method in (
        "grpo",
        "rloo",
        "batch-mean",
        "mc",
        "td",
        "gae",
        "reinforce-pp",
        "reinforce-pp-baseline",
    ):
        out = tmp_path / f"{method}.parquet"
        proc = ok(
            run(
                "annotate",
                str(SAMPLE / "rollouts.parquet"),
                "--method",
                method,
                "--batch-size",
                "4",
                "--out",
                str(out),
                "--json",
                "-q",
            )
        )
        df = pl.read_parquet(out)
        actions = []
        for adv, mask in zip(df["advantages"].to_list(), df["action_mask"].to_list(), strict=True):
            assert all(a == 0.0 for a, m in zip(adv, mask, strict=True) if m == 0)
            actions += [a for a, m in zip(adv, mask, strict=True) if m]
        summary = json.loads(proc.stdout)  # the summary describes the action tokens only
        assert summary["action_tokens_written"] == len(actions)
        assert summary["advantage_min"] == min(actions)
        assert summary["advantage_max"] == max(actions)
        assert summary["advantage_mean"] == pytest.approx(np.mean(actions), rel=1e-12)


def test_rows_are_kept_in_input_order(tmp_path):
    rows = [rollout(p, r) for p, r in [("b", 1), ("a", 0), ("b", 0), ("a", 1)]]
    path = write_jsonl(tmp_path / "log.jsonl", rows)
    out = tmp_path / "o.parquet"
    ok(run("annotate", path, "--method", "rloo", "--out", str(out), "-q"))
    assert pl.read_parquet(out)["advantage"].to_list() == [1.0, -1.0, -1.0, 1.0]


def test_outputs_get_ordinary_file_permissions(small_log, tmp_path):
    out = tmp_path / "o.parquet"
    ok(run("annotate", small_log, "--method", "grpo", "--out", str(out), "-q"))
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask


def _long_jsonl(path, n_rows: int) -> tuple[str, list[int]]:
    """A JSONL log of ``n_rows`` lines of 4 tokens, and the byte offset where each line ends."""
    lines = [
        json.dumps({"prompt_id": f"p{i // 4}", "input_ids": [1, 2, 3, 4],
                    "action_mask": [0, 1, 1, 1], "reward": float(i % 2)}).encode() + b"\n"
        for i in range(n_rows)
    ]  # fmt: skip
    path.write_bytes(b"".join(lines))
    ends = list(itertools.accumulate(len(line) for line in lines))
    return str(path), ends


def test_schema_samples_a_long_jsonl_log_unless_full(tmp_path, monkeypatch):
    """The first whole lines past the sample's size (here 2,000 bytes, read in chunks of that
    size: each chunk ends at the end of a line), counted and said; --full reads them all."""
    from advcli.commands import schema

    monkeypatch.setattr(schema, "SAMPLE_BYTES", 2_000)
    path, ends = _long_jsonl(tmp_path / "log.jsonl", 400)
    first_chunk = next(i for i, end in enumerate(ends) if end >= 2_000) + 1  # whole lines
    info = advcli.describe(path)
    assert info.rows == first_chunk and info.tokens == 4 * first_chunk
    size = ends[-1]
    about = round(first_chunk * size / ends[first_chunk - 1])
    assert info.sampled == (
        f"the first {first_chunk:,} rows ({ends[first_chunk - 1] / 1e6:.1f} MB of "
        f"{size / 1e6:.1f} MB, about {about:,} rows in all); `full=True` reads everything"
    )
    assert info.warnings == [
        "a sample of the log was read: its group sizes are not checked (`full=True`)"
    ]
    whole = advcli.describe(path, full=True)
    assert whole.rows == 400 and whole.sampled is None
    small = advcli.describe(_long_jsonl(tmp_path / "small.jsonl", 10)[0])
    assert small.rows == 10 and small.sampled is None  # the whole log fits in the sample


def test_schema_on_a_long_jsonl_log_says_it_sampled(tmp_path):
    line = json.dumps({"prompt_id": "p", "input_ids": list(range(200)), "reward": 1.0})
    path = tmp_path / "log.jsonl"
    path.write_text((line + "\n") * (9_000_000 // len(line)))  # 9 MB: past the 4 MB sample
    proc = run("schema", path)
    assert proc.returncode == 0, proc.stderr
    assert "sampled" in proc.stdout.decode() and "--full reads everything" in proc.stdout.decode()
    proc = run("schema", path, "--full", "--json")
    assert json.loads(proc.stdout)["rows"] == 9_000_000 // len(line)


def test_every_example_in_the_help_runs_as_shown(tmp_path):
    """The examples at the end of each command's --help, in order in one folder (verify reads
    the shards that shard wrote)."""
    import shlex

    from advcli.cli.app import EXAMPLES, app

    (tmp_path / "sample_data").symlink_to(SAMPLE)
    commands = [
        info.name or getattr(info.callback, "__name__", "") for info in app.registered_commands
    ]
    assert sorted(EXAMPLES) == sorted(commands)
    for name in commands:
        for example in EXAMPLES[name]:
            words = shlex.split(example)
            assert words[:2] == ["advcli", name]
            proc = run(*words[1:], cwd=tmp_path)
            assert proc.returncode == 0, f"{example}: {proc.stderr.decode()}"


def test_exit_codes_follow_one_rule(tmp_path):
    log = write_jsonl(tmp_path / "log.jsonl", [{"input_ids": [1, 2], "reward": 1.0}])
    proc = run("audit", log)  # no prompt_id: the data
    assert proc.returncode == 1 and "no 'prompt_id' column" in one_line(proc)
    proc = run("audit", log, "--col", "reward=nosuch")  # a flag naming what is not there
    assert proc.returncode == 2
    assert "--col reward=nosuch: no column 'nosuch'" in one_line(proc)
    proc = run("audit", log, "--col", "nosuch=reward")  # no such role
    assert proc.returncode == 2 and "--col nosuch=reward: unknown role 'nosuch'" in one_line(proc)
    errors = (ROOT / "docs" / "errors.md").read_text()
    assert "| 70 |" in errors  # the internal-error exit code is documented


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
