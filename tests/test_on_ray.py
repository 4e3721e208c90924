"""``--engine ray`` on a real Ray cluster: a head and a second node started with ``ray start``
on 127.0.0.1 (one CPU each). Every method's output, read back from the parts folder, is the
local engine's, bit for bit and row for row; so is ``score``'s, and a large file's, cut into
row ranges."""

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
import pyarrow.compute  # noqa: F401 (pa.compute)
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from advcli import installed
from advcli.methods import REGISTRY
from tests.conftest import (
    METHOD_OPTIONS,
    SAMPLE,
    free_port,
    one_line,
    read_manifest,
    run,
    sample_with_every_input,
)

pytest.importorskip("ray")

RAY = str(Path(sys.executable).with_name("ray"))
TIMEOUT = 180  # seconds for any one command: a saturated pool once hung
# A home of the tests' own: a local ray.init() leaves a token in ~/.ray (Ray 2.5x), which a
# cluster started later with `ray start` would then half use.
ENV_HOME = {"RAY_USAGE_STATS_ENABLED": "0", "HOME": tempfile.mkdtemp(prefix="advcli-ray-")}
ENV = {**os.environ, **ENV_HOME}

CASES = {  # name: annotate's keyword arguments: every registered method, then options
    **{name: {"method": name, **METHOD_OPTIONS.get(name, {})} for name in REGISTRY},
    "grpo verl": {"method": "grpo", "convention": "verl"},
    "batch-mean": {"method": "batch-mean", "batch_size": 4},
    "grpo drop": {"method": "grpo", "zero_variance": "drop"},
    "grpo kl": {"method": "grpo", "kl_coef": 0.1},
    "mc discounted": {"method": "mc", "gamma": 0.9},
    "gae discounted": {"method": "gae", "gamma": 0.9, "lam": 0.8},
    "gae verl (whitened)": {"method": "gae", "convention": "verl", "batch_size": 8},
    "gae openrlhf": {"method": "gae", "convention": "openrlhf"},
    "gae adaptive": {"method": "gae", "lam": "adaptive", "alpha": 0.05},
    "grpo, a sequence correction": {
        "method": "grpo",
        "correction": "sequence-mask",
        "correction_bounds": "0.5,2",
    },
    "grpo, verl's token rejection": {
        "method": "grpo",
        "convention": "verl",
        "correction": "token-k3",
        "correction_bounds": "0.004",
    },
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
        # The second node declares a GPU (Ray schedules by the resources declared): `score`
        # then runs its tasks there, with ONNX Runtime's CPU provider on this machine.
        ray_cmd("start", "--address", address, "--node-ip-address", "127.0.0.1",
                "--num-cpus", "1", "--num-gpus", "1")  # fmt: skip
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
    doomed: list[int] = []
    for line in table:
        pid, ppid, args = (
            line.split(None, 2) if len(line.split(None, 2)) == 3 else (*line.split(), "")
        )
        children.setdefault(int(ppid), []).append(int(pid))
        if home in args:
            doomed.append(int(pid))
    while doomed:
        victim = doomed.pop()
        doomed += children.pop(victim, [])
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)


@pytest.fixture(scope="module")
def three_files(tmp_path_factory) -> Path:
    """The sample log (with the columns only some methods read, and the trainer's log-probs)
    in three files; rollout r23's two segments lie in two of them."""
    folder = tmp_path_factory.mktemp("log")
    table = sample_with_every_input()
    logprobs = table.column("logprobs").to_pylist()  # the trainer's: its own token by token
    drift = np.random.default_rng(1)
    trainer = [[x + 0.2 * drift.standard_normal() for x in row] for row in logprobs]
    table = table.append_column("trainer_logprobs", pa.array(trainer))
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
        "_advcli_manifest.parquet", "part-00000.parquet", "part-00001.parquet", "part-00002.parquet"
    ]  # fmt: skip
    manifest = read_manifest(parts)
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
        "(sha256). Hint: write it again with --engine ray --force\n"
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
    """The whole audit, the mismatch section with a correction and a framework's metrics too,
    is the local engine's."""
    args = ["--json", "--correction", "token-mask", "--convention", "verl"]
    here = json.loads(advcli("audit", str(three_files), *args).stdout)
    proc = advcli("audit", str(three_files), *args, "--engine", "ray", "--ray-address",
                  cluster)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == here
    assert here["action_tokens"] == 99
    assert here["mismatch"]["action_tokens"] == 99 and "rollout_corr/kl" in (
        here["mismatch"]["framework_metrics"])  # fmt: skip


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
        found = subprocess.run(["pgrep", "-f", "ray::_annotate_unit"], capture_output=True,
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


STAGED = {  # name: (the log, annotate's keyword arguments): logs the workers read staged
    "jsonl gae verl": ("jsonl", {"method": "gae", "convention": "verl", "batch_size": 8}),
    "jsonl reinforce-pp": ("jsonl", {"method": "reinforce-pp"}),
    "jsonl grpo drop": ("jsonl", {"method": "grpo", "zero_variance": "drop"}),
    "jsonl gae adaptive": ("jsonl", {"method": "gae", "lam": "adaptive", "alpha": 0.05}),
    "nested --col gae openrlhf": (
        "nested",
        {"method": "gae", "convention": "openrlhf", "col": ["prompt_id=group.id"]},
    ),
    "--from nemo-rl": (
        "nemo-rl",
        {"method": "reinforce-pp-baseline", "gamma": 0.9, "from_": "nemo-rl"},
    ),
    "--from verl (text)": ("verl", {"method": "grpo", "from_": "verl"}),
}


@pytest.fixture(scope="module")
def staged_logs(tmp_path_factory) -> dict[str, Path]:
    """The sample log as three JSONL files (blank lines between rows, one gzipped); as three
    Parquet files whose prompt id is a struct's field; and two frameworks' dumps."""
    from tests.presets import frameworks as fw

    folder = tmp_path_factory.mktemp("staged")
    table = pq.read_table(SAMPLE / "rollouts.parquet")
    (folder / "jsonl").mkdir()
    (folder / "nested").mkdir()
    for name, start, n in (("a", 0, 5), ("b", 5, 7), ("c", 12, 2)):
        rows = table.slice(start, n).to_pylist()
        text = b"\n".join(json.dumps(r).encode() + b"\n" for r in rows)  # blank lines
        if name == "b":
            import gzip

            (folder / "jsonl" / "b.jsonl.gz").write_bytes(gzip.compress(text))
        else:
            (folder / "jsonl" / f"{name}.jsonl").write_bytes(text)
        part = table.slice(start, n)
        group = pa.StructArray.from_arrays([part.column("prompt_id").combine_chunks()], ["id"])
        nested = part.drop_columns(["prompt_id"]).append_column("group", group)
        pq.write_table(nested, folder / "nested" / f"{name}.parquet")
    rs = fw.rollouts(steps=3, prompts=4, group=4)
    return {
        "jsonl": folder / "jsonl",
        "nested": folder / "nested",
        "nemo-rl": fw.nemo_rl(folder / "nemo", rs) or folder / "nemo",
        "verl": fw.verl_v1(folder / "verl", rs),
    }


def test_jsonl_presets_and_struct_fields_are_staged_and_bit_identical(
    cluster, staged_logs, tmp_path
):
    """Logs the workers cannot read in place are read once into Ray's object store, in the
    local engine's batches (pieces of a few batches here, so files spread in several units):
    the same rows and values as the local engine."""
    script = tmp_path / "compare.py"
    script.write_text(
        "import json, sys\n"
        "import pyarrow.dataset as ds, pyarrow.parquet as pq\n"
        "from advcli import api\n"
        "from advcli.on_ray import cluster\n"
        "cluster.PIECE_BYTES = 3000  # a few batches of 4 rows a piece\n"
        "cases, logs = json.loads(sys.argv[2]), json.loads(sys.argv[3])\n"
        "out = {}\n"
        "for i, (name, (log, opts)) in enumerate(cases.items()):\n"
        "    local = f'{sys.argv[1]}/local-{i}.parquet'\n"
        "    parts = f'{sys.argv[1]}/ray-{i}'\n"
        "    api.annotate(logs[log], local, batch_rows=4, **opts)\n"
        "    done = api.annotate(logs[log], parts, engine='ray', ray_address=sys.argv[4],\n"
        "                        batch_rows=4, **opts)\n"
        "    a = pq.read_table(local).replace_schema_metadata(None)\n"
        "    b = ds.dataset(parts, format='parquet').to_table().replace_schema_metadata(None)\n"
        "    out[name] = [a.equals(b), a.num_rows, done.parts]\n"
        "print(json.dumps(out))\n"
    )
    logs = {k: str(v) for k, v in staged_logs.items()}
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path), json.dumps(STAGED), json.dumps(logs),
         cluster],
        capture_output=True, text=True, env=ENV, timeout=TIMEOUT * 2, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {name: same for name, (same, _, _) in found.items()} == dict.fromkeys(STAGED, True)
    assert found["jsonl gae verl"][1] == 14 and found["jsonl grpo drop"][1] < 14
    assert all(parts >= 3 for _, _, parts in found.values())  # a part a file at least
    assert found["--from nemo-rl"][2] == 4  # 3 files, one cut at a piece: 48 rows on 2 CPUs


def test_a_bad_row_of_a_staged_jsonl_log_names_its_line(cluster, tmp_path):
    """A worker that meets a bad token row names its line, counted on the driver (blank lines
    included): the same message as the local engine's, and nothing written."""
    rows = pq.read_table(SAMPLE / "rollouts.parquet").to_pylist()
    rows[9]["values"] = rows[9]["values"][:-1]  # one value short
    log = tmp_path / "log.jsonl"
    log.write_bytes(b"\n\n".join(json.dumps(r).encode() for r in rows) + b"\n")
    args = ["annotate", str(log), "--method", "gae"]
    local = advcli(*args, "--out", str(tmp_path / "local.parquet"))
    on_ray = advcli(*args, "--engine", "ray", "--ray-address", cluster, "--out",
                    str(tmp_path / "parts"))  # fmt: skip
    assert local.returncode == on_ray.returncode == 1
    assert f"{log}: line 19, column 'values'" in local.stderr
    assert on_ray.stderr == local.stderr and not (tmp_path / "parts").exists()


def test_shard_and_audit_read_a_jsonl_log_on_the_cluster(cluster, staged_logs, tmp_path):
    log = str(staged_logs["jsonl"])
    args = ["--method", "grpo", "--shuffle", "--split", "val=0.3"]
    local = advcli("shard", log, *args, "--out", str(tmp_path / "local"))
    assert local.returncode == 0, local.stderr
    proc = advcli("shard", log, *args, "--engine", "ray", "--ray-address", cluster, "--out",
                  str(tmp_path / "ray"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for shard in sorted((tmp_path / "local").rglob("*.parquet")):
        twin = tmp_path / "ray" / shard.relative_to(tmp_path / "local")
        assert shard.read_bytes() == twin.read_bytes()
    here = json.loads(advcli("audit", log, "--json").stdout)
    there = advcli("audit", log, "--json", "--engine", "ray", "--ray-address", cluster)
    assert there.returncode == 0, there.stderr
    assert json.loads(there.stdout) == here


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
    hint = installed.pip_install("ray")
    assert proc.stderr == f"advcli: error: --engine ray needs Ray. Hint: {hint}\n"


def test_no_command_imports_ray_unless_asked():
    code = "import sys, advcli.cli.runner, advcli.api; print('ray' in sys.modules)"
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


def test_work_units_cut_a_large_file_at_row_groups_rounded_to_batches(tmp_path):
    from advcli.io.file_sources import ParquetSource
    from advcli.on_ray.cluster import Unit, work_units

    table = pa.table({"x": np.arange(1000)})
    pq.write_table(table, tmp_path / "big.parquet", row_group_size=300)
    pq.write_table(table.slice(0, 50), tmp_path / "small.parquet")
    log = ParquetSource([str(tmp_path / "big.parquet"), str(tmp_path / "small.parquet")])
    # row groups start at 0, 300, 600, 900; rounded down to batches of 128: 0, 256, 512, 896
    assert work_units(log, 128, 4) == [Unit(0, 0, 256), Unit(0, 256, 512), Unit(0, 512, 896),
                                       Unit(0, 896, 1000), Unit(1, 0, 50)]  # fmt: skip
    assert work_units(log, 128, 2) == [Unit(0, 0, 512), Unit(0, 512, 1000), Unit(1, 0, 50)]
    assert work_units(log, 128, 3) == [Unit(0, 0, 256), Unit(0, 256, 512), Unit(0, 512, 1000),
                                       Unit(1, 0, 50)]  # fmt: skip
    assert work_units(log, 128, 1) == [Unit(0, 0, 1000), Unit(1, 0, 50)]
    assert work_units(log, 1000, 4) == [Unit(0, 0, 1000), Unit(1, 0, 50)]  # one batch: no cut


def test_one_large_file_spreads_in_row_ranges(cluster, tmp_path):
    """One file of 8 row groups on two workers: two parts, and the local engine's output
    (whitening statistics and segment chains measured over the ranges, added up in order)."""
    table = pq.read_table(SAMPLE / "rollouts.parquet")
    copies = []
    for k in range(20):  # the sample log 20 times over, each copy its own prompts and rollouts
        copy = table
        for name in ("prompt_id", "rollout_id"):
            renamed = pa.compute.binary_join_element_wise(table.column(name), f"-{k}", "")
            copy = copy.set_column(copy.schema.get_field_index(name), name, renamed)
        copies.append(copy)
    pq.write_table(pa.concat_tables(copies), tmp_path / "big.parquet", row_group_size=35)
    script = tmp_path / "compare.py"
    script.write_text(
        "import json, sys\n"
        "import pyarrow.dataset as ds, pyarrow.parquet as pq\n"
        "from advcli import api\n"
        "out = {}\n"
        "for i, opts in enumerate([{'method': 'gae', 'convention': 'verl', 'gamma': 0.9},\n"
        "                          {'method': 'grpo'}]):\n"
        "    local, parts = f'{sys.argv[2]}/local-{i}.parquet', f'{sys.argv[2]}/ray-{i}'\n"
        "    api.annotate(sys.argv[1], local, batch_rows=16, **opts)\n"
        "    r = api.annotate(sys.argv[1], parts, engine='ray', ray_address=sys.argv[3],\n"
        "                     batch_rows=16, **opts)\n"
        "    a = pq.read_table(local).replace_schema_metadata(None)\n"
        "    b = ds.dataset(parts, format='parquet').to_table().replace_schema_metadata(None)\n"
        "    out[opts['method']] = [a.equals(b), r.parts, b.num_rows]\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "big.parquet"), str(tmp_path), cluster],
        capture_output=True, text=True, env=ENV, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found == {"gae": [True, 2, 280], "grpo": [True, 2, 280]}
    manifest = read_manifest(tmp_path / "ray-0")
    assert [p["input_rows"] for p in manifest["parts"]] == [[0, 128], [128, 280]]


def test_score_on_the_cluster_is_the_local_score(cluster, three_files, tmp_path):
    """The cluster declares one GPU: a task a GPU (units cut for one GPU: a file each), the
    critic's bytes sent to the worker; its values are the local ones."""
    pytest.importorskip("onnxruntime")
    from bench.critic_model import build_critic, make_weights

    critic = tmp_path / "critic.onnx"
    build_critic(critic, make_weights(vocab=32000, dim=8, hidden=8))
    local, parts = tmp_path / "scored.parquet", tmp_path / "scored"
    args = ["--critic", str(critic)]
    assert advcli("score", str(three_files), *args, "--out", str(local)).returncode == 0
    proc = advcli("score", str(three_files), *args, "--engine", "ray", "--ray-address", cluster,
                  "--out", str(parts), "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert (summary["parts"], summary["rows"], summary["gpus"]) == (3, 14, 1)
    assert summary["provider"] == "CPUExecutionProvider"  # no CUDA in this ONNX Runtime
    mine, theirs = read_parts(parts), pq.read_table(local).replace_schema_metadata(None)
    assert mine.drop_columns(["values"]).equals(theirs.drop_columns(["values"]))
    values = [np.concatenate(t.column("values").to_numpy(zero_copy_only=False))
              for t in (mine, theirs)]  # fmt: skip
    assert np.array_equal(
        values[0], values[1], equal_nan=True
    )  # NaN: a row's first token (shifted)
    part = json.loads(pq.read_metadata(parts / "part-00000.parquet").metadata[b"advcli"])
    assert (part["command"], part["critic"]["file"]) == ("score", str(critic))
    assert json.loads(advcli("verify", str(parts), "--json").stdout)["ok"]
    cpu = tmp_path / "cpu"  # --device cpu asks for no GPU: a task a CPU, the same values
    proc = advcli("score", str(three_files), *args, "--device", "cpu", "--engine", "ray",
                  "--ray-address", cluster, "--out", str(cpu), "--json")  # fmt: skip
    assert proc.returncode == 0 and json.loads(proc.stdout)["gpus"] == 0, proc.stderr
    assert read_parts(cpu).drop_columns(["values"]).equals(mine.drop_columns(["values"]))
    proc = advcli("score", str(three_files), *args, "--device", "cuda", "--engine", "ray",
                  "--ray-address", cluster, "--out", str(tmp_path / "g"))  # fmt: skip
    assert proc.returncode == 2 and not (tmp_path / "g").exists()
    assert proc.stderr.startswith("advcli: error: --device cuda: this ONNX Runtime has no CUDA")
    assert proc.stderr.count("\n") == 1


@pytest.mark.parametrize("convention", ["seed", "verl"])
def test_annotate_with_a_critic_on_the_cluster(cluster, three_files, tmp_path, convention):
    """``annotate --critic``: the workers load the critic (a task a GPU, as the cluster
    declares one) and score their units; with verl's whitening, whose passes read the values
    twice, each pass scores its units again. The local engine's table."""
    pytest.importorskip("onnxruntime")
    from bench.critic_model import build_critic, make_weights

    critic = tmp_path / "critic.onnx"
    build_critic(critic, make_weights(vocab=32000, dim=8, hidden=8))
    args = ["annotate", str(three_files), "--method", "gae", "--convention", convention,
            "--critic", str(critic)]  # fmt: skip
    local, parts = tmp_path / "local.parquet", tmp_path / "parts"
    assert advcli(*args, "--out", str(local)).returncode == 0
    proc = advcli(*args, "--engine", "ray", "--ray-address", cluster, "--out", str(parts))
    assert proc.returncode == 0, proc.stderr
    assert "'values' column is not read" in proc.stderr  # the sample log has values
    assert read_parts(parts).equals(pq.read_table(local).replace_schema_metadata(None))
    part = json.loads(pq.read_metadata(parts / "part-00000.parquet").metadata[b"advcli"])
    assert part["critic"]["replaced_column"] == "values"


def test_parts_to_object_storage_and_verify_them_there(cluster, s3, tmp_path):
    """The workers upload their parts; the manifest lands last; verify reads them there."""
    env, fs = s3
    env = {**env, **ENV_HOME}
    args = ["--method", "gae", "--convention", "verl"]
    local = tmp_path / "local.parquet"
    assert advcli("annotate", "s3://logs/in", *args, "--out", str(local), env=env).returncode == 0
    ray_args = ["--engine", "ray", "--ray-address", cluster, "--out", "s3://logs/parts"]
    proc = advcli("annotate", "s3://logs/in", *args, *ray_args, env=env)
    assert proc.returncode == 0, proc.stderr
    listed = fs.get_file_info(pafs.FileSelector("logs/parts", recursive=True))
    assert sorted(i.base_name for i in listed) == [
        "_advcli_manifest.parquet", "part-00000.parquet", "part-00001.parquet"
    ]  # fmt: skip
    parts = ds.dataset("logs/parts", filesystem=fs, format="parquet").to_table()
    assert parts.replace_schema_metadata(None).equals(
        pq.read_table(local).replace_schema_metadata(None)
    )
    checked = json.loads(advcli("verify", "s3://logs/parts", "--json", env=env).stdout)
    assert (checked["ok"], checked["parts"], checked["rows"]) == (True, 2, 14)
    proc = advcli("annotate", "s3://logs/in", *args, *ray_args, env=env)
    assert proc.returncode == 2 and one_line(proc).startswith(
        "advcli: error: s3://logs/parts: already exists. Hint: pass --force"
    )
    fs.delete_file("logs/parts/_advcli_manifest.parquet")  # as a run cut short leaves it
    proc = advcli("verify", "s3://logs/parts", env=env)
    assert proc.returncode == 1
    assert "s3://logs/parts/_advcli_manifest.parquet: no manifest" in one_line(proc)
    proc = advcli("annotate", "s3://logs/in", *args, *ray_args, "--force", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(advcli("verify", "s3://logs/parts", "--json", env=env).stdout)["ok"]


SHARD_CASES = {  # name: shard's options
    "gae verl, split and shuffled, verl's layout": [
        "--method", "gae", "--convention", "verl", "--shuffle", "--split", "val=0.3",
        "--tokens-per-shard", "40", "--layout", "verl"],
    "grpo packed, zero-variance dropped": ["--method", "grpo", "--pack", "16", "--truncate",
                                           "--drop-zero-variance", "--keep-groups"],
    "rloo, a column kept, TRL's layout": ["--method", "rloo", "--keep", "old_logprobs",
                                          "--rows-per-shard", "4", "--layout", "trl"],
    "grpo corrected, verl's layout": ["--method", "grpo", "--correction",
                                      "token-k2", "--correction-bounds", "0.004", "--layout",
                                      "verl"],
}  # fmt: skip


@pytest.mark.parametrize("case", list(SHARD_CASES))
def test_shard_on_the_cluster_writes_the_same_shards(cluster, three_files, tmp_path, case):
    """The token passes, the counts and the annotation run on the cluster; this process plans
    and writes: every shard and the manifest are the local engine's, byte for byte."""
    args = SHARD_CASES[case]
    here, there = tmp_path / "here", tmp_path / "there"
    proc = advcli("shard", str(three_files), *args, "--out", str(here))
    assert proc.returncode == 0, proc.stderr
    proc = advcli("shard", str(three_files), *args, "--out", str(there), "--engine", "ray",
                  "--ray-address", cluster)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    files = sorted(p.relative_to(here) for p in here.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(there) for p in there.rglob("*") if p.is_file())
    assert len(files) >= 2  # the manifest and the shards
    for name in files:
        assert (here / name).read_bytes() == (there / name).read_bytes(), name
    assert json.loads(advcli("verify", str(there), "--json").stdout)["ok"]


RAY_DATA = """
import json, sys
import ray, ray.data
ray.init(address=sys.argv[1], log_to_driver=False)
ray.data.DataContext.get_current().execution_options.preserve_order = True
for folder in sys.argv[2:]:
    tables = ray.get(ray.data.read_parquet(folder).to_arrow_refs())
    print(json.dumps([r for t in tables for r in t.column("rollout_id").to_pylist()]))
"""


def test_a_parts_folder_and_a_shard_folder_load_in_every_reader(
    cluster, three_files, tmp_path, monkeypatch
):
    """pyarrow, pandas, polars, HF datasets and Ray Data's read_parquet read the folders that
    --engine ray writes as they are, rows in order."""
    from tests.shards.test_readers import READERS, expected, same_rows

    parts, shards = tmp_path / "parts", tmp_path / "shards"
    on_ray = ["--engine", "ray", "--ray-address", cluster]
    for proc in (
        advcli("annotate", str(three_files), "--method", "grpo", *on_ray, "--out", str(parts)),
        advcli("shard", str(three_files), "--method", "grpo", "--rows-per-shard", "4",
               *on_ray, "--out", str(shards)),
    ):  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    env = {**ENV, "HF_HUB_OFFLINE": "1"}
    for folder in (parts, shards):
        want = expected(folder)
        assert want.num_rows > 0 and len(list(folder.glob("part-*.parquet"))) > 1
        for reader in READERS.values():
            same_rows(reader(folder), want)
    script = [sys.executable, "-c", RAY_DATA, cluster, str(parts), str(shards)]  # one Ray start
    read = subprocess.run(script, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert read.returncode == 0, read.stderr
    seen = [json.loads(line) for line in read.stdout.splitlines()[-2:]]
    assert seen == [expected(f).column("rollout_id").to_pylist() for f in (parts, shards)]
    # a parts folder as an earlier advcli wrote it (_advcli_manifest.json) still verifies
    old = json.dumps(read_manifest(parts))
    (parts / "_advcli_manifest.parquet").unlink()
    (parts / "_advcli_manifest.json").write_text(old)
    checked = advcli("verify", str(parts), "--json")
    assert (
        checked.returncode == 0 and json.loads(checked.stdout)["rows"] == expected(parts).num_rows
    )


def test_prompts_dropped_on_the_cluster_are_the_prompts_dropped_here(cluster, three_files,
                                                                     tmp_path):  # fmt: skip
    """``--drop-prompts``: the log less those rows is what the cluster reads."""
    listed = tmp_path / "drop.jsonl"
    listed.write_text('{"prompt_id": "p-easy"}\n')
    args = ["--method", "grpo", "--drop-prompts", str(listed)]
    local = advcli("annotate", str(three_files), *args, "--out", str(tmp_path / "local.parquet"))
    assert local.returncode == 0, local.stderr
    proc = advcli("annotate", str(three_files), *args, "--engine", "ray", "--ray-address",
                  cluster, "--out", str(tmp_path / "parts"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    here = pq.read_table(tmp_path / "local.parquet").replace_schema_metadata(None)
    assert 0 < here.num_rows < 14 and "p-easy" not in here.column("prompt_id").to_pylist()
    assert read_parts(tmp_path / "parts").equals(here)
