"""Object storage that cannot be reached, or never answers: one line and exit 2 within
ADVCLI_REMOTE_TIMEOUT (lowered to 1 s here), for every scheme, never an internal error or a
hang. No network is needed: a server on 127.0.0.1 that takes connections and never answers,
and names nothing resolves."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from advcli import installed
from tests.conftest import ROOT, groups_of_four, one_line, run, write_parquet

HF = importlib.util.find_spec("fsspec") and importlib.util.find_spec("huggingface_hub")


@pytest.fixture
def silent_server():
    """``http://127.0.0.1:PORT``: connections are taken (the kernel's backlog) and never
    answered."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


STOPPED_AFTER = 30
"""Seconds a run with ADVCLI_REMOTE_TIMEOUT=1 is given before it counts as a hang (generous:
a machine under load is slow to start one)."""


def advcli(env: dict[str, str], *args: str, stdout: Path | None = None) -> str:
    """The one line a command that cannot reach its storage prints (exit 2), long before
    :data:`STOPPED_AFTER`; ``stdout``: a regular file for its standard output (the run then
    also checks it is not an input)."""
    with open(stdout or os.devnull, "wb") as out:
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "advcli", *args],
                stdout=out if stdout else subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                cwd=ROOT, timeout=STOPPED_AFTER, check=False,
                env={**os.environ, "ADVCLI_REMOTE_TIMEOUT": "1", **env},
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            pytest.fail(f"advcli {' '.join(args)}: still waiting after {STOPPED_AFTER} s")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("advcli: error: "), proc.stderr
    return proc.stderr


def test_s3_that_never_answers(silent_server):
    line = advcli({"AWS_ENDPOINT_URL": silent_server, "AWS_ACCESS_KEY_ID": "k",
                   "AWS_SECRET_ACCESS_KEY": "s"}, "schema", "s3://logs/a.parquet")  # fmt: skip
    assert "s3://logs/a.parquet: cannot read this location (" in line


NO_AWS_SETTINGS = {name: "" for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION",
                                         "AWS_DEFAULT_REGION")}  # fmt: skip


@pytest.mark.parametrize("stdout", ["pipe", "file"])
def test_s3_endpoint_in_uri_that_never_answers(silent_server, tmp_path, stdout):
    """The server named in the URI: the filesystem is made on the request's thread, and a
    storage that did not answer is not asked again (with standard output a file the inputs
    are looked at twice; the second S3 client waited forever on pyarrow's lock, held by the
    first request, left running)."""
    uri = (
        f"s3://logs/a.parquet?endpoint_override={silent_server.removeprefix('http://')}&scheme=http"
    )
    out = tmp_path / "out.txt" if stdout == "file" else None
    line = advcli(NO_AWS_SETTINGS, "schema", uri, stdout=out)
    assert f"{uri}: cannot read this location (no answer within 1 s)" in line


@pytest.mark.parametrize("uri", ["s3://advcli-no-such-bucket/a.parquet", "s3://"])
def test_s3_on_aws_unreachable(tmp_path, uri):
    """No region given: pyarrow asks AWS for the bucket's region when it makes the filesystem,
    which (with no network) took as long as its own retries, past the timeout."""
    line = advcli(NO_AWS_SETTINGS, "schema", uri, stdout=tmp_path / "out.txt")
    assert f"{uri}: cannot read this location (" in line


@pytest.mark.parametrize("where", ["default", "silent"])
def test_gs_unreachable(silent_server, where):
    """gs:// retries for minutes by itself (its credentials, then the request): with no
    network (or a bucket nobody may read), or a server that never answers (named in the
    URI), one line within the timeout."""
    uri = "gs://advcli-no-such-bucket/logs/"
    if where == "silent":
        uri += f"?endpoint_override={silent_server.removeprefix('http://')}&scheme=http"
    line = advcli({}, "audit", uri)
    assert f"{uri}: cannot read this location (" in line


@pytest.mark.skipif(not HF, reason="fsspec and huggingface_hub (advcli[hf]) are not installed")
@pytest.mark.parametrize("where", ["unresolvable", "silent"])
def test_hf_unreachable(silent_server, where):
    """hf:// through fsspec and huggingface_hub, whose HTTP client raises its own errors (not
    OSError): an unknown host was an internal error (exit 70)."""
    endpoint = "http://advcli-nowhere.invalid" if where == "unresolvable" else silent_server
    line = advcli({"HF_ENDPOINT": endpoint, "HF_HUB_OFFLINE": "0"},
                  "schema", "hf://datasets/advcli/none/a.parquet")  # fmt: skip
    assert "hf://datasets/advcli/none/a.parquet: cannot read this location (" in line


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
    proc = run("annotate", write_parquet(tmp_path / "log.parquet", groups_of_four()), "--method",
               "grpo", "--engine", "ray", "--ray-address", "127.0.0.1:1", "--out",
               str(tmp_path / "parts"))  # fmt: skip
    assert proc.returncode == 2 and "cannot reach the Ray cluster at 127.0.0.1:1" in one_line(proc)
    assert time.monotonic() - started < 30
