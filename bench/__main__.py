"""advcli's benchmark: ``make bench`` or ``python -m bench [--tokens 50e6]``.

Generates a synthetic multi-turn log (cached in the work folder), then in one invocation runs:
the I/O floor (advcli's reader and writer, pyarrow's, polars'; the fastest counts), ``annotate``
for grpo and gae, ``audit`` and ``shard``, each in its own process under ``/usr/bin/time -v``
for its peak memory; the GAE core alone and a plain per-rollout Python loop on the same arrays;
and JSONL reading against polars' own NDJSON reader. Prints one table; ratios are against the
floor measured in the same run. Timings on a shared machine vary by 10-20%: compare ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from bench.generate import generate

ROOT = Path(__file__).resolve().parent.parent


def measured(args: list[str]) -> tuple[float, float]:
    """Run a command; return (seconds, peak resident MB)."""
    time_v = shutil.which("time") or "/usr/bin/time"
    use_time = os.path.exists(time_v)
    cmd = [time_v, "-v", *args] if use_time else args
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"benchmark step failed: {' '.join(args)}\n{proc.stderr[-2000:]}")
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    return seconds, int(peak.group(1)) / 1024 if peak else float("nan")


def tokens_in(path: Path) -> int:
    table = pq.read_table(path, columns=["action_mask"])
    return int(sum(len(chunk.values) for chunk in table.column(0).chunks))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=float, default=50e6, help="size of the Parquet log")
    parser.add_argument("--jsonl-tokens", type=float, default=5e6, help="size of the JSONL log")
    parser.add_argument("--loop-tokens", type=float, default=2e6, help="tokens for the loop")
    parser.add_argument("--workdir", default=str(ROOT / "bench_out"))
    parser.add_argument("--skip-core", action="store_true", help="only the end-to-end runs")
    args = parser.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    log = work / f"log-{args.tokens:.0f}.parquet"
    if not log.exists():
        print(f"generating {log} …", file=sys.stderr)
        generate(str(log), args.tokens)
    n_tokens = tokens_in(log)
    py = sys.executable
    results: list[tuple[str, float, float, float | None]] = []  # name, seconds, tok/s, MB

    def run(name: str, cmd: list[str]) -> float:
        print(f"running {name} …", file=sys.stderr)
        seconds, peak = measured(cmd)
        results.append((name, seconds, n_tokens / seconds, peak))
        return seconds

    floors = {
        kind: run(
            f"I/O floor ({kind})",
            [py, "-m", "bench.floor", kind, str(log), str(work / f"floor-{kind}.parquet")],
        )
        for kind in ("advcli", "pyarrow", "polars")
    }
    floor = min(floors.values())
    advcli = [py, "-m", "advcli"]
    for method in ("grpo", "gae"):
        run(
            f"annotate {method}",
            [
                *advcli,
                "annotate",
                str(log),
                "--method",
                method,
                "--gamma",
                "0.99",
                "--out",
                str(work / f"{method}.parquet"),
                "--force",
                "-q",
            ],
        )
    run("audit", [*advcli, "audit", str(log), "--json"])
    shutil.rmtree(work / "shards", ignore_errors=True)
    run(
        "shard (grpo)",
        [*advcli, "shard", str(log), "--method", "grpo", "--out", str(work / "shards"), "-q"],
    )

    lines = [f"log: {log.name}, {n_tokens:,} tokens, {log.stat().st_size / 2**20:,.0f} MiB"]
    lines.append(f"{'step':<24}{'seconds':>9}{'M tokens/s':>12}{'floor/step':>12}{'peak MB':>10}")
    for name, seconds, rate, peak in results:
        lines.append(
            f"{name:<24}{seconds:>9.2f}{rate / 1e6:>12.1f}{floor / seconds:>12.2f}{peak:>10.0f}"
        )

    if not args.skip_core:
        print("running the GAE core and the Python loop …", file=sys.stderr)
        proc = subprocess.run(
            [py, "-m", "bench.core", str(log), str(args.loop_tokens)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        r = json.loads(proc.stdout)
        core_rate, loop_rate = r["core_tokens_per_s"], r["loop_tokens_per_s"]
        lines.append(
            f"GAE core (one core): {core_rate / 1e6:.1f} M tokens/s over {r['tokens']:,} tokens; "
            f"Python loop: {loop_rate / 1e6:.2f} M tokens/s over {r['loop_tokens']:,}; "
            f"core/loop = {core_rate / loop_rate:.0f}x; "
            f"max |difference| = {r['max_abs_difference']:.1e}"
        )

    jsonl = work / f"log-{args.jsonl_tokens:.0f}.jsonl"
    if not jsonl.exists():
        generate(str(jsonl), args.jsonl_tokens)
    from advcli.io.readers import read_inputs

    started = time.perf_counter()
    frame = pl.read_ndjson(
        jsonl,
        schema_overrides={
            "input_ids": pl.List(pl.Int64),
            "action_mask": pl.List(pl.Int64),
            "values": pl.List(pl.Float64),
        },
    )
    polars_s = time.perf_counter() - started
    started = time.perf_counter()
    read_inputs([str(jsonl)])
    advcli_s = time.perf_counter() - started
    jsonl_tokens = int(frame["input_ids"].list.len().sum())
    lines.append(
        f"JSONL ({jsonl_tokens:,} tokens): polars read_ndjson {polars_s:.2f} s, advcli "
        f"reader {advcli_s:.2f} s: advcli at {polars_s / advcli_s:.2f}x polars' speed"
    )
    report = "\n".join(lines)
    print(report)
    (work / "results.txt").write_text(report + "\n")
    (work / "results.json").write_text(
        json.dumps({"tokens": n_tokens, "floor_seconds": floor, "steps": results}, indent=2)
    )


if __name__ == "__main__":
    main()
