"""``--out -``: the annotated rows (or the report's page) on standard output, for a pipe; and
standard output as every command writes to it: never one of the inputs, and a write there
that fails (closed, full) is one line."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq
import pytest

from advcli.io.outputs import metadata_path
from tests.conftest import ROOT, SAMPLE, one_line, run

ADVCLI = [sys.executable, "-m", "advcli"]
GAE = ["--method", "gae", "--gamma", "1.0", "--lam", "0.95"]
GRPO = ["--method", "grpo"]


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


def _advcli_to(stdout, *args: str, shell_redirect: str | None = None):
    """The real command with standard output ``stdout`` (a file object), or as the shell
    leaves it after ``shell_redirect`` (``>&-``: closed)."""
    if shell_redirect is not None:
        command = ["sh", "-c", f'"$@" {shell_redirect}', "sh", *ADVCLI, *args]
        return subprocess.run(command, capture_output=True, cwd=ROOT, timeout=120, check=False)
    return subprocess.run([*ADVCLI, *args], stdout=stdout, stderr=subprocess.PIPE, cwd=ROOT,
                          timeout=120, check=False)  # fmt: skip


# Every command that writes to standard output, and how its input is named: the file, its
# folder, a glob; an annotated JSONL log's metadata file counts as the log.
STDOUT_IS_INPUT = {
    "annotate --out -": (["annotate", "LOG", "--method", "grpo", "--out", "-"], "file"),
    "score --out -": (["score", "LOG", "--critic", str(SAMPLE / "critic.onnx"), "--out", "-"],
                      "file"),
    "report --out -": (["report", "LOG", "--method", "grpo", "--out", "-"], "glob"),
    "audit --json": (["audit", "LOG", "--json"], "folder"),
    "schema": (["schema", "LOG"], "file"),
    "check": (["check", "LOG", "--method", "grpo"], "metadata"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(STDOUT_IS_INPUT))
def test_standard_output_that_is_an_input_is_refused(tmp_path, case):
    """`advcli annotate LOG --out - >> LOG` appended the rows to the log it read (189 MB grew
    to 407 MB, exit 0): standard output is compared with every input like any output."""
    args, naming = STDOUT_IS_INPUT[case]
    folder = tmp_path / "logs"
    folder.mkdir()
    log = folder / "log.jsonl"
    shutil.copy(SAMPLE / "rollouts.jsonl", log)
    target = log
    if naming == "metadata":  # the log is an annotated one; stdout is its metadata file
        proc = run("annotate", str(log), "--method", "grpo", "-q", "--out",
                   str(folder / "a.jsonl"))  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        log.unlink()
        log, target = folder / "a.jsonl", metadata_path(folder / "a.jsonl")
    named = {"folder": folder, "glob": folder / "*.jsonl"}.get(naming, log)
    before = target.read_bytes()
    with open(target, "ab") as stdout:
        proc = _advcli_to(stdout, *[str(named) if a == "LOG" else a for a in args])
    assert proc.returncode == 2
    assert f"standard output is {target}, one of the inputs" in one_line(proc)
    assert target.read_bytes() == before


@pytest.mark.parametrize("where", ["closed", "full"])
@pytest.mark.parametrize(
    "args",
    [
        ["annotate", "LOG", "--method", "grpo", "--out", "-", "-q"],
        ["annotate", "LOG", "--method", "grpo", "--out", "-", "-q", "--format", "arrow"],
        ["report", "LOG", "--method", "grpo", "--out", "-", "-q"],
        ["audit", "LOG", "--json"],
        ["schema", "LOG"],
    ],
    ids=lambda a: " ".join(a[:1] + a[2:]),
)
def test_standard_output_closed_or_full_is_one_line_exit_2(where, args):
    """`--out - >&-` and `> /dev/full` (and any command's result there): exit 2, one line."""
    if where == "full" and not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    redirect = ">&-" if where == "closed" else "> /dev/full"
    filled = [str(SAMPLE / "rollouts.parquet") if a == "LOG" else a for a in args]
    proc = _advcli_to(None, *filled, shell_redirect=redirect)
    assert proc.returncode == 2
    line = one_line(proc)
    if where == "closed" and "-" in args:  # refused before any work
        assert "--out -: standard output is closed" in line
    else:
        reason = "Bad file descriptor" if where == "closed" else "No space left on device"
        assert f"standard output: could not write ({reason})" in line


def test_report_to_standard_output_is_the_page():
    log = str(SAMPLE / "rollouts.parquet")
    piped = subprocess.run([*ADVCLI, "report", log, "--method", "grpo", "--out", "-", "--json"],
                           capture_output=True, cwd=ROOT, check=False)  # fmt: skip
    assert piped.returncode == 0, piped.stderr
    page = piped.stdout
    assert page.startswith(b"<!DOCTYPE html>") and page.rstrip().endswith(b"</html>")
    summary = json.loads(piped.stderr)  # --json: on stderr, stdout holds the page
    assert summary["output"] == "-" and summary["bytes"] == len(page)
    assert not (ROOT / "-").exists()  # no file named '-'


def test_a_shard_folder_cannot_go_to_standard_output(tmp_path):
    log = str(SAMPLE / "rollouts.parquet")
    proc = run("shard", log, "--method", "grpo", "--out", "-", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == b""
    assert "--out -: this output is a folder of files" in one_line(proc)
    assert list(tmp_path.iterdir()) == []


# Commands that read standard input (`-`) and write to standard output.
STDIN_TO_STDOUT = {
    "annotate --out -": ["annotate", "-", "--method", "grpo", "--out", "-", "-q"],
    "report --out -": ["report", "-", "--method", "grpo", "--out", "-", "-q"],
    "audit --json": ["audit", "-", "--json"],
    "schema": ["schema", "-"],
}


@pytest.mark.parametrize("opened", ["ab", "r+b"], ids=[">> LOG", "1<> LOG"])
@pytest.mark.parametrize("case", sorted(STDIN_TO_STDOUT))
def test_standard_output_on_the_file_standard_input_reads_is_refused(tmp_path, case, opened):
    """`advcli annotate - --out - < LOG >> LOG` appended the rows to the log it read (and
    `1<> LOG` overwrote it in place), exit 0: input `-` is the file behind descriptor 0."""
    log = tmp_path / "log.jsonl"
    shutil.copy(SAMPLE / "rollouts.jsonl", log)
    before = log.read_bytes()
    with open(log, "rb") as stdin, open(log, opened) as stdout:
        args = [*ADVCLI, *STDIN_TO_STDOUT[case]]
        proc = subprocess.run(args, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE,
                              cwd=ROOT, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 2
    assert "standard output is the file standard input (-) reads" in one_line(proc)
    assert log.read_bytes() == before


@pytest.mark.parametrize("force", [[], ["--force"]], ids=["", "--force"])
@pytest.mark.parametrize("command", ["annotate", "report"])
def test_an_output_file_that_standard_input_reads_is_refused(tmp_path, command, force):
    """`advcli annotate - --out LOG --force < LOG` replaced the log it read, exit 0."""
    log = tmp_path / "log.jsonl" if command == "annotate" else tmp_path / "log.html"
    shutil.copy(SAMPLE / "rollouts.jsonl", log)
    before = log.read_bytes()
    args = [command, "-", "--method", "grpo", "-q", "--out", str(log), *force]
    with open(log, "rb") as stdin:
        proc = subprocess.run([*ADVCLI, *args], stdin=stdin, capture_output=True, cwd=ROOT,
                              timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 2
    assert f"{log}: this is the file standard input (-) reads" in one_line(proc)
    assert log.read_bytes() == before and sorted(tmp_path.iterdir()) == [log]


@pytest.mark.parametrize("redirect", ["2>/dev/full", "2>&-"])
def test_a_run_whose_messages_standard_error_cannot_take_keeps_its_exit_code(tmp_path, redirect):
    """`annotate LOG --out F 2>/dev/full` wrote F whole and exited 1 (the summary's write
    failed, then the error's): there is nowhere to report it; the run's own code stands."""
    if "full" in redirect and not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    out = tmp_path / "a.jsonl"
    done = _advcli_to(None, "annotate", str(SAMPLE / "rollouts.parquet"), *GRPO, "--out",
                      str(out), shell_redirect=redirect)  # fmt: skip
    assert done.returncode == 0 and done.stderr == b""
    assert pl.read_ndjson(out).height == 14 and metadata_path(out).exists()
    failed = _advcli_to(None, "annotate", str(tmp_path / "absent.jsonl"), *GRPO, "--out",
                        str(tmp_path / "b.jsonl"), shell_redirect=redirect)  # fmt: skip
    assert failed.returncode == 2 and failed.stderr == b""
