"""Shared helpers: write small logs, and run the real ``advcli`` command."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

import advcli
from advcli.io.file_sources import read_inputs
from advcli.io.writers import read_metadata

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_data"


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return str(path)


def write_parquet(path: Path, rows: list[dict], schema: pa.Schema | None = None) -> str:
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return str(path)


def run(
    *args: str | os.PathLike[str],
    stdin: bytes | None = None,
    cwd: Path | None = None,
    env: dict | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m advcli ARGS``; returns the CompletedProcess (bytes). The command is a
    child of this worker's fork server (:mod:`tests.cli_server`) where that cannot change
    what it does, else a fresh process."""
    server = _fork_server()
    if server is not None and server.fits(env):
        return server.run([str(a) for a in args], stdin, cwd)
    return subprocess.run(
        [sys.executable, "-m", "advcli", *args],
        input=stdin,
        capture_output=True,
        cwd=cwd,
        env=env,
        check=False,
    )


def one_line(proc: subprocess.CompletedProcess[bytes] | subprocess.CompletedProcess[str]) -> str:
    """The error a failed command printed, checked to be advcli's one line (no traceback, no
    panic)."""
    text = proc.stderr if isinstance(proc.stderr, str) else proc.stderr.decode()
    assert "Traceback" not in text and "panicked" not in text, text
    assert text.count("\n") == 1 and text.startswith("advcli: error: "), text
    return text.strip()


READING_COMMANDS = {  # every command that reads a log, its output (if any) under OUT
    "schema": ["schema"],
    "audit": ["audit"],
    "annotate": ["annotate", "--method", "grpo", "--out", "OUT/o.parquet"],
    "shard": ["shard", "--method", "grpo", "--out", "OUT/sh"],
}


def refused(tmp_path: Path, path: str, command: str, code: int = 1) -> str:
    """The one line ``command`` (of :data:`READING_COMMANDS`) refuses ``path`` with, checked to
    exit ``code`` and leave no output behind."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    args = [a.replace("OUT", str(out)) for a in READING_COMMANDS[command]]
    proc = run(args[0], path, *args[1:])
    assert proc.returncode == code, proc.stderr.decode()
    assert list(out.iterdir()) == []
    return one_line(proc)


def metadata_of(output: str | os.PathLike[str]) -> dict[str, Any]:
    """The metadata advcli wrote with an annotated output, which must have it."""
    found = read_metadata(str(output))
    assert found is not None, f"{output}: no advcli metadata"
    return found


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def dead_pid() -> str:
    """The pid of a process that has exited."""
    return subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip


class _ForkServer:
    """This process's :mod:`tests.cli_server`, and the connection to it."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="advcli-fork-")
        path = os.path.join(self.folder, "socket")
        self.env = dict(os.environ)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.cli_server", path],
            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        )  # fmt: skip
        assert self.process.stdout is not None
        if self.process.stdout.readline() != b"ready\n":
            raise RuntimeError("the CLI fork server did not start")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        atexit.register(self.close)

    def fits(self, env: dict | None) -> bool:
        """Whether a child of the server would see the environment a fresh process would."""
        wanted = dict(os.environ if env is None else env)
        return _without_test_name(wanted) == _without_test_name(self.env)

    def run(self, args: list[str], stdin: bytes | None, cwd: Path | None):
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        in_r, in_w = os.pipe() if stdin is not None else (0, None)
        request = {"args": args, "cwd": str(cwd or os.getcwd()), "env": dict(os.environ)}
        payload = orjson.dumps(request)
        socket.send_fds(
            self.sock, [struct.pack("!I", len(payload)) + payload], [in_r, out_w, err_w]
        )
        for fd in (out_w, err_w, *((in_r,) if in_w is not None else ())):
            os.close(fd)
        streams: dict[int, bytes] = {}

        def drain(fd: int) -> None:
            with os.fdopen(fd, "rb") as f:
                streams[fd] = f.read()

        readers = [threading.Thread(target=drain, args=(fd,)) for fd in (out_r, err_r)]
        for reader in readers:
            reader.start()
        if in_w is not None:
            with os.fdopen(in_w, "wb") as f, contextlib.suppress(BrokenPipeError):
                f.write(stdin or b"")
        for reader in readers:
            reader.join()
        status = b""
        while len(status) < 4:
            chunk = self.sock.recv(4 - len(status))
            if not chunk:
                raise RuntimeError("the CLI fork server stopped")
            status += chunk
        (code,) = struct.unpack("!i", status)
        return subprocess.CompletedProcess(
            [sys.executable, "-m", "advcli", *args], code, streams[out_r], streams[err_r]
        )

    def close(self) -> None:
        self.sock.close()
        self.process.wait(timeout=30)
        shutil.rmtree(self.folder, ignore_errors=True)


def _without_test_name(env: dict) -> dict:
    return {k: v for k, v in env.items() if k != "PYTEST_CURRENT_TEST"}


_SERVER: list[_ForkServer | None] = []


def _fork_server() -> _ForkServer | None:
    """This process's fork server, started on first use (None: ``ADVCLI_TEST_FORK=0``)."""
    if not _SERVER:
        on = os.environ.get("ADVCLI_TEST_FORK", "1") != "0" and hasattr(socket, "send_fds")
        _SERVER.append(_ForkServer() if on else None)
    return _SERVER[0]


def annotate_in_memory(paths: list, **params) -> pa.Table:
    """The whole log read into memory and annotated in one go (``advcli.annotate_table``)."""
    table, _ = read_inputs([str(p) for p in paths])
    return advcli.annotate_table(table, **params)


def rollout(prompt, reward, n_prompt=2, n_action=3, **extra) -> dict:
    n = n_prompt + n_action
    row = {
        "prompt_id": prompt,
        "input_ids": list(range(1, n + 1)),
        "action_mask": [0] * n_prompt + [1] * n_action,
        "reward": reward,
    }
    row.update(extra)
    return row


def group_log(n_prompts: int = 3, per_prompt: int = 4) -> list[dict]:
    """Groups of rollouts ``p{P}-r{R}`` whose rewards alternate 0 and 1 within a group."""
    return [
        rollout(f"p{p}", float((p + r) % 2), rollout_id=f"p{p}-r{r}")
        for p in range(n_prompts)
        for r in range(per_prompt)
    ]


def groups_of_four(n: int = 8) -> list[dict]:
    """``n`` rollouts ``r{i}``, four to a prompt, rewards 0, 1, 0, 1 in each."""
    return [rollout(f"p{i // 4}", float(i % 2), rollout_id=f"r{i}") for i in range(n)]


@pytest.fixture
def small_log(tmp_path) -> str:
    rows = [
        rollout("a", 1.0),
        rollout("a", 0.0),
        rollout("a", 0.0),
        rollout("a", 0.0),
        rollout("b", 1.0),
        rollout("b", 1.0),
    ]
    return write_jsonl(tmp_path / "log.jsonl", rows)


MOTO_SERVER = Path(sys.executable).with_name("moto_server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3():
    """A bucket ``logs`` on a fresh S3 API server on 127.0.0.1 (moto's standalone server),
    holding the sample log as two Parquet files; the environment that reaches it, and the
    filesystem."""
    if not MOTO_SERVER.exists():
        pytest.skip("moto[server] is not installed")
    port = free_port()
    server = subprocess.Popen([str(MOTO_SERVER), "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
           "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}  # fmt: skip
    fs = pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{port}", scheme="http",
                           region="us-east-1", access_key="test", secret_key="test",
                           allow_bucket_creation=True)  # fmt: skip
    try:
        for _ in range(100):
            try:
                fs.create_dir("logs")
                break
            except OSError:
                time.sleep(0.1)
        table = pq.read_table(SAMPLE / "rollouts.parquet")
        with fs.open_output_stream("logs/in/a.parquet") as out:
            pq.write_table(table.slice(0, 6), out)
        with fs.open_output_stream("logs/in/b.parquet") as out:
            pq.write_table(table.slice(6), out)
        yield env, fs
    finally:
        server.terminate()
        server.wait(timeout=30)


def sample_with_every_input():
    """The sample log with the columns only some methods read: a greedy rollout's reward,
    process rewards, log-probabilities of the policy and of a teacher, two reward columns, the
    token and turn counts of grpo-length, an agent role and an episode, an agent step's state
    and reward."""
    table = pq.read_table(SAMPLE / "rollouts.parquet")
    ids = table.column("input_ids").to_pylist()
    rng = np.random.default_rng(0)
    logprobs = [(-rng.random(len(row))).tolist() for row in ids]
    return (
        table.append_column("baseline_reward", pa.array(rng.random(table.num_rows)))
        .append_column("step_rewards", pa.array([[0.5, 1.0] for _ in ids]))
        .append_column("step_ends", pa.array([[0, len(row) - 1] for row in ids]))
        .append_column("logprobs", pa.array(logprobs))
        .append_column("teacher_logprobs", pa.array([[x - 0.1 for x in r] for r in logprobs]))
        .append_column("ref_logprobs", pa.array([[x + 0.2 for x in r] for r in logprobs]))
        .append_column("acc", table.column("reward"))
        .append_column("fmt", pa.array(rng.integers(0, 2, table.num_rows).astype(float)))
        .append_column("num_output_tokens", pa.array([len(row) for row in ids]))
        .append_column("num_input_tokens", pa.array(rng.integers(10, 50, table.num_rows)))
        .append_column("num_turns", pa.array(rng.integers(1, 4, table.num_rows)))
        .append_column(
            "agent",
            pa.array(["proposer" if i % 3 == 0 else "solver" for i in range(table.num_rows)]),
        )
        .append_column("episode", pa.array([f"e{i // 4}" for i in range(table.num_rows)]))
        .append_column("state", pa.array([f"s{i % 3}" for i in range(table.num_rows)]))
        .append_column("step_reward", pa.array(rng.random(table.num_rows)))
    )


# What a method needs besides the log (sample_with_every_input's columns).
METHOD_OPTIONS: dict[str, dict[str, Any]] = {
    "grpo-passk": {"singleton": "zero"},
    "gdpo": {"reward_columns": "acc,fmt"},
}


def read_manifest(folder: Path) -> dict:
    """The manifest of a shard or parts folder (``_advcli_manifest.parquet``'s footer)."""
    from advcli.io import manifests
    from advcli.io.folders import Folder

    found = manifests.find(Folder(str(folder)))
    assert found is not None, f"{folder}: no manifest"
    return orjson.loads(found.text)


def write_manifest(folder: Path, manifest: dict, *, checksum: bool) -> None:
    """Replace a folder's manifest text by ``manifest``; its recorded sha256 too when
    ``checksum`` (as a careful forger would: then verify's other checks must catch it)."""
    import hashlib

    from advcli.io import manifests

    path = folder / manifests.NAME
    schema = pq.read_schema(path)
    metadata = dict(schema.metadata)
    text = orjson.dumps(manifest).decode()
    metadata[manifests.TEXT_KEY.encode()] = text.encode()
    if checksum:
        metadata[manifests.SHA256_KEY.encode()] = hashlib.sha256(text.encode()).hexdigest().encode()
    pq.ParquetWriter(str(path), schema.with_metadata(metadata)).close()
