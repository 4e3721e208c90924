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

import pytest

from tests.conftest import ROOT

HF = importlib.util.find_spec("fsspec") and importlib.util.find_spec("huggingface_hub")


@pytest.fixture
def silent_server():
    """``http://127.0.0.1:PORT``: connections are taken (the kernel's backlog) and never
    answered."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def advcli(env: dict[str, str], *args: str) -> str:
    """The one line a command that cannot reach its storage prints (exit 2)."""
    proc = subprocess.run(
        [sys.executable, "-m", "advcli", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
        env={**os.environ, "ADVCLI_REMOTE_TIMEOUT": "1", **env},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("advcli: error: "), proc.stderr
    return proc.stderr


def test_s3_that_never_answers(silent_server):
    line = advcli({"AWS_ENDPOINT_URL": silent_server, "AWS_ACCESS_KEY_ID": "k",
                   "AWS_SECRET_ACCESS_KEY": "s"}, "schema", "s3://logs/a.parquet")  # fmt: skip
    assert "s3://logs/a.parquet: cannot read this location (" in line


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
