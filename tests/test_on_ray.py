"""``annotate --engine ray`` on a real Ray cluster: a head and a second node started with
``ray start`` on 127.0.0.1 (one CPU each). Every method's output, read back from the parts
folder, is the local engine's, bit for bit and row for row."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from tests.conftest import SAMPLE, free_port, run

pytest.importorskip("ray")

RAY = str(Path(sys.executable).with_name("ray"))
TIMEOUT = 180  # seconds for any one command: a saturated pool once hung
# A home of the tests' own: a local ray.init() leaves a token in ~/.ray (Ray 2.5x), which a
# cluster started later with `ray start` would then half use.
ENV_HOME = {"RAY_USAGE_STATS_ENABLED": "0", "HOME": tempfile.mkdtemp(prefix="advcli-ray-")}
ENV = {**os.environ, **ENV_HOME}

CASES = {  # name: annotate's keyword arguments (every method that runs on the sample log)
    "grpo": {"method": "grpo"},
    "grpo verl": {"method": "grpo", "convention": "verl"},
    "rloo": {"method": "rloo"},
    "dr-grpo": {"method": "dr-grpo"},
    "opo": {"method": "opo"},
    "grpo-passk": {"method": "grpo-passk", "singleton": "zero"},
    "gpg": {"method": "gpg"},
    "maxrl": {"method": "maxrl"},
    "sppo": {"method": "sppo"},
    "gdpo": {"method": "gdpo", "reward_columns": "reward"},
    "batch-mean": {"method": "batch-mean", "batch_size": 4},
    "grpo drop": {"method": "grpo", "zero_variance": "drop"},
    "mc": {"method": "mc", "gamma": 0.9},
    "td": {"method": "td", "gamma": 0.9},
    "gae": {"method": "gae", "gamma": 0.9, "lam": 0.8},
    "gae verl (whitened)": {"method": "gae", "convention": "verl", "batch_size": 8},
    "gae openrlhf": {"method": "gae", "convention": "openrlhf"},
    "gae adaptive": {"method": "gae", "lam": "adaptive", "alpha": 0.05},
    "reinforce-pp": {"method": "reinforce-pp"},
    "reinforce-pp-baseline": {"method": "reinforce-pp-baseline"},
}


def ray_cmd(*args: str) -> None:
    proc = subprocess.run([RAY, *args], capture_output=True, text=True, env=ENV,
                          timeout=TIMEOUT, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


@pytest.fixture(scope="module")
def cluster():
    """A head and a second node on 127.0.0.1, one CPU each; their address. The cluster keeps
    its files in a folder of its own, which names its processes: only they are stopped after
    (``ray stop`` would stop every Ray of the machine)."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    home = tempfile.mkdtemp(prefix="advray-", dir="/tmp")  # short: Ray's sockets live there
    try:
        ray_cmd("start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
                "--num-cpus", "1", "--include-dashboard", "false", "--temp-dir", home)  # fmt: skip
        ray_cmd("start", "--address", address, "--node-ip-address", "127.0.0.1",
                "--num-cpus", "1")  # fmt: skip
        yield address
    finally:
        stop_processes_of(home)
        shutil.rmtree(home, ignore_errors=True)


def stop_processes_of(home: str) -> None:
    """Kill the processes whose command line names ``home``, and all their descendants (Ray's
    agents rename themselves, so only their parents name it)."""
    table = subprocess.run(["ps", "-ww", "-eo", "pid=,ppid=,args="], capture_output=True,
                           text=True, check=False).stdout.splitlines()  # fmt: skip
    children: dict[int, list[int]] = {}
    doomed = []
    for line in table:
        pid, ppid, args = (
            line.split(None, 2) if len(line.split(None, 2)) == 3 else (*line.split(), "")
        )
        children.setdefault(int(ppid), []).append(int(pid))
        if home in args:
            doomed.append(int(pid))
    while doomed:
        pid = doomed.pop()
        doomed += children.pop(pid, [])
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def three_files(tmp_path_factory) -> Path:
    """The sample log in three files; rollout r23's two segments lie in two of them."""
    folder = tmp_path_factory.mktemp("log")
    table = pq.read_table(SAMPLE / "rollouts.parquet")
    for name, start, n in (("a", 0, 5), ("b", 5, 7), ("c", 12, 2)):
        pq.write_table(table.slice(start, n), folder / f"{name}.parquet")
    return folder


def read_parts(folder: Path) -> pa.Table:
    return ds.dataset(folder, format="parquet").to_table().replace_schema_metadata(None)


def advcli(
    *args: str, env: dict | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "advcli", *args], capture_output=True,
                          text=True, env=env or ENV, timeout=TIMEOUT, check=False,
                          cwd=cwd)  # fmt: skip


def test_every_method_is_bit_identical_on_a_cluster(cluster, three_files, tmp_path):
    """One process, connected once, runs every case on both engines (the CLI test below runs
    the real command)."""
    script = tmp_path / "compare.py"
    script.write_text(
        "import json, sys\n"
        "import pyarrow.dataset as ds, pyarrow.parquet as pq\n"
        "from advcli import api\n"
        "cases = json.loads(sys.argv[3])\n"
        "out = {}\n"
        "for i, (name, opts) in enumerate(cases.items()):\n"
        "    local = f'{sys.argv[2]}/local-{i}.parquet'\n"
        "    parts = f'{sys.argv[2]}/ray-{i}'\n"
        "    api.annotate(sys.argv[1], local, **opts)\n"
        "    api.annotate(sys.argv[1], parts, engine='ray', ray_address=sys.argv[4], **opts)\n"
        "    a = pq.read_table(local).replace_schema_metadata(None)\n"
        "    b = ds.dataset(parts, format='parquet').to_table().replace_schema_metadata(None)\n"
        "    out[name] = [a.equals(b), a.num_rows, b.num_rows]\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run(
        [sys.executable, str(script), str(three_files), str(tmp_path), json.dumps(CASES), cluster],
        capture_output=True, text=True, env=ENV, timeout=TIMEOUT * 2, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {name: same for name, (same, _, _) in found.items()} == dict.fromkeys(CASES, True)
    assert found["grpo"][1:] == [14, 14] and found["grpo drop"][1] < 14  # rows really dropped


def test_the_command_through_ray_address(cluster, three_files, tmp_path):
    local, parts = tmp_path / "local.parquet", tmp_path / "parts"
    args = ["--method", "gae", "--convention", "verl", "--gamma", "0.99"]
    assert advcli("annotate", str(three_files), *args, "--out", str(local)).returncode == 0
    proc = advcli("annotate", str(three_files), *args, "--engine", "ray", "--out", str(parts),
                  "--json", env={**ENV, "RAY_ADDRESS": cluster})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert (summary["engine"], summary["parts"], summary["rows_written"]) == ("ray", 3, 14)
    assert sorted(p.name for p in parts.iterdir()) == [
        "_advcli_manifest.json", "part-00000.parquet", "part-00001.parquet", "part-00002.parquet"
    ]  # fmt: skip
    manifest = json.loads((parts / "_advcli_manifest.json").read_text())
    assert [p["rows"] for p in manifest["parts"]] == [5, 7, 2]
    assert [Path(p["input"]).name for p in manifest["parts"]] == ["a.parquet", "b.parquet",
                                                                  "c.parquet"]  # fmt: skip
    assert read_parts(parts).equals(pq.read_table(local).replace_schema_metadata(None))
    proc = advcli("annotate", str(three_files), *args, "--engine", "ray", "--out", str(parts),
                  env={**ENV, "RAY_ADDRESS": cluster})  # fmt: skip
    assert proc.returncode == 2 and "already exists" in proc.stderr
    checked = json.loads(advcli("verify", str(parts), "--json").stdout)
    assert (checked["ok"], checked["parts"], checked["rows"]) == (True, 3, 14)
    with open(parts / "part-00001.parquet", "ab") as f:
        f.write(b"\0")  # a changed byte: verify names the part
    proc = advcli("verify", str(parts))
    assert proc.returncode == 1
    assert proc.stderr == (
        f"advcli: error: {parts / 'part-00001.parquet'}: its bytes are not the ones written "
        "(sha256). Hint: write it again with advcli annotate --engine ray --force\n"
    )


def test_relative_paths_mean_the_same_files_to_the_workers(cluster, three_files):
    """The workers run in another folder: the driver hands them absolute paths."""
    here = three_files.parent
    args = ["--method", "gae", "--convention", "verl", "--ray-address", cluster]
    proc = advcli("annotate", three_files.name, *args, "--engine", "ray", "--out", "rel-parts",
                  cwd=here)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    local = advcli("annotate", three_files.name, "--method", "gae", "--convention", "verl",
                   "--out", "rel.parquet", cwd=here)  # fmt: skip
    assert local.returncode == 0, local.stderr
    expected = pq.read_table(here / "rel.parquet").replace_schema_metadata(None)
    assert read_parts(here / "rel-parts").equals(expected)
    audit = advcli("audit", three_files.name, "--engine", "ray", "--ray-address", cluster,
                   "--json", cwd=here)  # fmt: skip
    assert audit.returncode == 0 and json.loads(audit.stdout)["action_tokens"] == 99


def test_audit_counts_tokens_on_the_cluster(cluster, three_files):
    here = json.loads(advcli("audit", str(three_files), "--json").stdout)
    proc = advcli("audit", str(three_files), "--json", "--engine", "ray", "--ray-address",
                  cluster)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == here
    assert here["action_tokens"] == 99


def test_a_killed_worker_is_retried_or_leaves_nothing(cluster, tmp_path):
    """A worker killed while it writes its part: Ray runs the task again (the output is then
    the local engine's), or the run fails with one line and no output folder."""
    folder = tmp_path / "log"
    folder.mkdir()
    rng = np.random.default_rng(0)
    n, length = 40_000, 32  # rollouts a file, tokens a rollout: 1.3 M tokens a file
    offsets = pa.array(np.arange(n + 1, dtype=np.int32) * length)
    for i in range(4):
        pq.write_table(pa.table({
            "prompt_id": pa.array(np.arange(n) // 8 + i * n),
            "input_ids": pa.ListArray.from_arrays(offsets, pa.array(
                rng.integers(1, 50_000, n * length))),
            "action_mask": pa.ListArray.from_arrays(offsets, pa.array(
                np.tile(np.r_[np.zeros(8, np.int8), np.ones(length - 8, np.int8)], n))),
            "reward": pa.array(rng.integers(0, 2, n).astype(np.float64)),
        }), folder / f"part{i}.parquet")  # fmt: skip
    local, parts = tmp_path / "local.parquet", tmp_path / "parts"
    args = ["--method", "grpo"]
    assert advcli("annotate", str(folder), *args, "--out", str(local)).returncode == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "advcli", "annotate", str(folder), *args, "--engine", "ray",
         "--ray-address", cluster, "--out", str(parts)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
    )  # fmt: skip
    killed = False
    deadline = time.monotonic() + TIMEOUT
    while proc.poll() is None and not killed and time.monotonic() < deadline:
        found = subprocess.run(["pgrep", "-f", "ray::_write_part"], capture_output=True,
                               text=True, check=False).stdout.split()  # fmt: skip
        if found:
            os.kill(int(found[0]), signal.SIGKILL)
            killed = True
        time.sleep(0.02)
    _, err = proc.communicate(timeout=TIMEOUT)
    if proc.returncode == 0:
        assert read_parts(parts).equals(pq.read_table(local).replace_schema_metadata(None))
    else:
        assert not parts.exists() and err.startswith("advcli: error: ") and err.count("\n") == 1
    if not killed:
        pytest.skip("the run ended before a worker could be killed")


def test_not_parquet_is_one_line(tmp_path):
    proc = run("annotate", str(SAMPLE / "rollouts.jsonl"), "--method", "grpo", "--engine", "ray",
               "--out", str(tmp_path / "parts"))  # fmt: skip
    assert proc.returncode == 2 and not (tmp_path / "parts").exists()
    assert proc.stderr.decode().startswith("advcli: error: ")
    assert "--engine ray reads Parquet logs" in proc.stderr.decode()


def test_without_ray_it_says_which_extra(tmp_path):
    code = (
        "import sys; sys.modules['ray'] = None; sys.argv = ['advcli', 'annotate', "
        f"{str(SAMPLE / 'rollouts.parquet')!r}, '--method', 'grpo', '--engine', 'ray', "
        f"'--out', {str(tmp_path / 'parts')!r}]\n"
        "from advcli.__main__ import main; main()"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr == "advcli: error: --engine ray needs Ray. Hint: pip install 'advcli[ray]'\n"


def test_no_command_imports_ray_unless_asked():
    code = "import sys, advcli.cli, advcli.api; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    assert out.strip() == "False"


def test_parquet_in_object_storage_on_the_cluster(cluster, s3, tmp_path):
    """The workers read the same s3:// inputs (the driver's AWS_* settings go with the tasks)."""
    env, _ = s3
    args = ["--method", "grpo", "--convention", "verl"]
    local, parts = tmp_path / "local.parquet", tmp_path / "parts"
    assert advcli("annotate", "s3://logs/in", *args, "--out", str(local),
                  env={**env, **ENV_HOME}).returncode == 0  # fmt: skip
    proc = advcli("annotate", "s3://logs/in", *args, "--engine", "ray", "--ray-address", cluster,
                  "--out", str(parts), env={**env, **ENV_HOME})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert read_parts(parts).equals(pq.read_table(local).replace_schema_metadata(None))


def test_an_unknown_engine_is_one_line(tmp_path):
    proc = run("annotate", str(SAMPLE / "rollouts.parquet"), "--method", "grpo", "--engine",
               "spark", "--out", str(tmp_path / "o.parquet"))  # fmt: skip
    assert proc.returncode == 2 and not (tmp_path / "o.parquet").exists()
    assert proc.stderr.decode() == "advcli: error: --engine 'spark': expected one of local, ray\n"
