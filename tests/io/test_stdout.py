"""``--out -``: the annotated rows on standard output, for a pipe."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq

from tests.conftest import ROOT, SAMPLE, run

ADVCLI = [sys.executable, "-m", "advcli"]
GAE = ["--method", "gae", "--gamma", "1.0", "--lam", "0.95"]


def test_jsonl_to_stdout_is_the_file_s_bytes_and_the_summary_goes_to_stderr(tmp_path):
    log = str(SAMPLE / "rollouts.parquet")
    assert run("annotate", log, *GAE, "-q", "--out", str(tmp_path / "a.jsonl")).returncode == 0
    piped = subprocess.run([*ADVCLI, "annotate", log, *GAE, "--out", "-", "--json"],
                           capture_output=True, cwd=ROOT, check=False)  # fmt: skip
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout == (tmp_path / "a.jsonl").read_bytes()
    summary = json.loads(piped.stderr)  # --json: on stderr, stdout holds the rows
    assert summary["output"] == "-" and summary["rows_written"] == 14
    assert not (ROOT / "-").exists() and not (ROOT / ".-.meta.json").exists()


def test_a_pipe_into_a_reader(tmp_path):
    """`advcli annotate ... --out - | advcli audit -` and into polars, as a shell runs it."""
    log = str(SAMPLE / "rollouts.parquet")
    shell = (
        f"{sys.executable} -m advcli annotate {log} --method grpo --out - -q"
        f" | {sys.executable} -m advcli audit - --json"
    )
    audited = subprocess.run(
        shell, shell=True, capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert audited.returncode == 0, audited.stderr
    direct = json.loads(run("audit", log, "--json").stdout)
    got = json.loads(audited.stdout)
    assert got["groups"] == direct["groups"] and got["rollouts"] == direct["rollouts"]
    rows = subprocess.run([*ADVCLI, "annotate", log, "--method", "grpo", "--out", "-", "-q"],
                          capture_output=True, cwd=ROOT, check=True).stdout  # fmt: skip
    frame = pl.read_ndjson(io.BytesIO(rows))
    assert frame.height == 14 and "advantages" in frame.columns


def test_arrow_to_stdout_carries_the_run_s_metadata(tmp_path):
    log = str(SAMPLE / "rollouts.parquet")
    out = tmp_path / "a.parquet"
    assert run("annotate", log, *GAE, "-q", "--out", str(out)).returncode == 0
    piped = subprocess.run([*ADVCLI, "annotate", log, *GAE, "--out", "-", "--format", "arrow",
                            "-q"], capture_output=True, cwd=ROOT, check=True)  # fmt: skip
    table = pyarrow.ipc.open_stream(pa.py_buffer(piped.stdout)).read_all()
    assert json.loads(table.schema.metadata[b"advcli"])["method"] == "gae"
    want = pq.read_table(out)
    for name in ("rollout_id", "advantages", "returns"):
        got, ref = table.column(name).to_pylist(), want.column(name).to_pylist()
        assert (
            got == ref
            if name == "rollout_id"
            else np.allclose(np.concatenate(got), np.concatenate(ref), rtol=0, atol=0)
        )


def test_a_reader_that_stops_early_stops_it_quietly(tmp_path):
    """`| head`: exit 141 (128 + SIGPIPE), nothing on stderr, as Unix tools do."""
    rows = [{"prompt_id": f"p{i // 4}", "input_ids": list(range(200)), "reward": float(i % 2),
             "action_mask": [0] * 20 + [1] * 180} for i in range(4000)]  # fmt: skip
    log = tmp_path / "big.parquet"
    pq.write_table(pa.Table.from_pylist(rows), log)
    args = [*ADVCLI, "annotate", str(log), "--method", "grpo", "--out", "-", "-q"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert proc.stdout is not None and proc.stdout.read(100)
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141 and err == b""


def test_what_stdout_cannot_take_is_refused_in_one_line(tmp_path):
    log = str(SAMPLE / "rollouts.parquet")
    cases = [
        (["--format", "parquet"], "--out -: Parquet needs a file it can seek in"),
        (["--engine", "ray"], "--out -: --engine ray writes Parquet parts into a folder"),
    ]
    for args, needle in cases:
        proc = run("annotate", log, "--method", "grpo", "--out", "-", *args)
        assert proc.returncode == 2 and needle in proc.stderr.decode() and proc.stdout == b""
    proc = run("annotate", log, "--method", "grpo", "--out", str(tmp_path / "a.jsonl"),
               "--format", "arrow")  # fmt: skip
    assert proc.returncode == 2
    assert b"--format arrow writes Arrow IPC to standard output" in proc.stderr
