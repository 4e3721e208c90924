"""``--engine ray`` against the local engine on the same multi-file log:
``python -m bench.on_ray [--tokens 200e6] [--files 8]``.

Generates ``--files`` Parquet files of the bench's synthetic log (``--tokens`` in all, each file
its own seed, so groups do not span files), then runs ``annotate --method grpo``,
``annotate --method gae --convention verl`` (also on the same log as JSONL, which Ray reads
staged in its object store) and ``shard --method grpo --shuffle`` with each engine, taking
turns, each in its own process under ``/usr/bin/time -v``; ``--engine ray`` starts a local
Ray on every core (its start-up counts). Prints seconds and peak memory; the
peak of ``--engine ray`` is the driver's alone (Ray's workers are other processes: their peaks
are not included). ``python -m bench`` does not run it (it takes minutes): run it on its own.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
from pathlib import Path

import polars as pl
import pyarrow.compute as pc
import pyarrow.parquet as pq

from advcli.io.writers import ROW_GROUP_ROWS
from bench.generate import generate
from bench.measure import measured

CASES = {  # name: the command, its options and the log's format
    "annotate grpo": ("annotate", ["--method", "grpo"], "parquet"),
    "annotate gae (verl)": ("annotate", ["--method", "gae", "--gamma", "0.99", "--convention",
                                         "verl"], "parquet"),
    "shard grpo, shuffled": ("shard", ["--method", "grpo", "--shuffle"], "parquet"),
    "annotate gae (verl), JSONL log": ("annotate", ["--method", "gae", "--gamma", "0.99",
                                                    "--convention", "verl"], "jsonl"),
}  # fmt: skip


def own_ids(path: Path, index: int) -> None:
    """Give file ``index`` rollout and prompt ids of its own (each file is generated alone, its
    ids from 0; a log may not hold one rollout twice)."""
    table = pq.read_table(path)
    rollout = pc.add(table.column("rollout_id"), index * 10**9)
    prompt = pc.binary_join_element_wise(f"f{index}", table.column("prompt_id"), "-")
    table = table.set_column(table.schema.get_field_index("rollout_id"), "rollout_id", rollout)
    table = table.set_column(table.schema.get_field_index("prompt_id"), "prompt_id", prompt)
    pq.write_table(table, path, row_group_size=ROW_GROUP_ROWS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=float, default=200e6)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--workdir", default=str(Path(__file__).resolve().parent.parent / "bench_out")
    )
    args = parser.parse_args()
    log = Path(args.workdir) / f"ray-log-{args.tokens:.0f}-{args.files}"
    if not log.exists():
        print(f"generating {log} …", file=sys.stderr)
        log.mkdir(parents=True)
        for i in range(args.files):
            path = log / f"part-{i:03d}.parquet"
            generate(str(path), args.tokens / args.files, seed=i)
            own_ids(path, i)
    as_jsonl = log.with_name(log.name + "-jsonl")  # the same log as JSONL (staged on Ray)
    if not as_jsonl.exists():
        as_jsonl.mkdir()
        for path in sorted(log.glob("*.parquet")):
            pl.read_parquet(path).write_ndjson(as_jsonl / f"{path.stem}.jsonl")
    out = Path(args.workdir) / "ray-out"
    steps = {}
    for name, (command, options, fmt) in CASES.items():
        given = str(as_jsonl if fmt == "jsonl" else log)
        base = [sys.executable, "-m", "advcli", command, given, *options, "-q", "--force"]
        local = str(out) + (".parquet" if command == "annotate" else "")
        steps[f"{name}, local"] = [*base, "--out", local]
        steps[f"{name}, ray"] = [*base, "--engine", "ray", "--out", str(out)]
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in steps}
    for _ in range(args.repeat):
        for name, cmd in steps.items():
            print(f"running {name} …", file=sys.stderr)
            runs[name].append(measured(cmd))
            shutil.rmtree(out, ignore_errors=True)
    print(f"{log.name}: {args.files} files, {args.tokens:,.0f} tokens")
    for name in CASES:
        local = statistics.median(s for s, _ in runs[f"{name}, local"])
        ray = statistics.median(s for s, _ in runs[f"{name}, ray"])
        print(f"{name}: local {local:.1f} s ({max(p for _, p in runs[f'{name}, local']):.0f} MB), "
              f"ray {ray:.1f} s (driver {max(p for _, p in runs[f'{name}, ray']):.0f} MB): "
              f"ray / local = {ray / local:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
