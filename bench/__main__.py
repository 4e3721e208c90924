"""advcli's benchmark: ``make bench`` or ``python -m bench [--tokens 50e6]``.

Generates a synthetic multi-turn log (cached in the work folder), then in one invocation runs:
the I/O floor (advcli's reader and writer, pyarrow's, polars'; the fastest counts), ``annotate``
for grpo and gae, ``audit`` and ``shard``, each in its own process under ``/usr/bin/time -v``
for its peak memory; ``audit`` of a sibling log with both log-prob streams against reading the
columns it audits; the GAE core alone and a plain per-rollout Python loop on the same arrays;
``annotate`` on a JSONL log against polars' ``read_ndjson`` and Parquet write of the same;
``prompts`` on a sibling log whose steps ask the same prompts again against reading the prompt,
step and reward columns; and
``annotate --from`` on verl and NeMo-RL dumps against the same rollouts in advcli's own JSONL
(:mod:`bench.presets`); ``report`` on a 1 M-rollout log, its page opened in headless Chromium
(:mod:`bench.report`); GiGPO's ``--similarity`` on one group's distinct states against
verl-agent's loop (:mod:`bench.similarity`); the start-up of ``--help`` against a minimal
typer app's (:mod:`bench.startup`). Prints one table; ratios are against the floor measured
in the same run. Timings on a shared machine vary by 10-20% from one run to the next, so every
end-to-end step runs ``--repeat`` times, the steps taking turns (a slow spell of the machine
hits all of them alike); the table shows each step's median time and largest peak.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from bench import presets, similarity, startup
from bench import report as report_bench
from bench.generate import generate, split_steps
from bench.measure import measured

ROOT = Path(__file__).resolve().parent.parent

ANNOTATE = {  # name: options; methods writing `returns` are compared with the 2-column floor
    "grpo": ["--method", "grpo"],
    "rloo": ["--method", "rloo"],
    "batch-mean": ["--method", "batch-mean", "--batch-size", "256"],
    "grpo (verl)": ["--method", "grpo", "--convention", "verl"],
    "mc": ["--method", "mc", "--gamma", "0.99"],
    "td": ["--method", "td", "--gamma", "0.99"],
    "gae": ["--method", "gae", "--gamma", "0.99"],
    "gae (verl, whitened)": ["--method", "gae", "--gamma", "0.99", "--convention", "verl"],
    "gae (openrlhf, whitened)": ["--method", "gae", "--gamma", "0.99", "--convention",
                                 "openrlhf"],
    "reinforce-pp (whitened)": ["--method", "reinforce-pp", "--gamma", "0.99"],
    "reinforce-pp-baseline": ["--method", "reinforce-pp-baseline", "--gamma", "0.99"],
}  # fmt: skip
TWO_COLUMNS = ("mc", "td", "gae", "reinforce-pp")  # methods that also write `returns`


def floor_of(step: str) -> str:
    """The floor a step is compared with: the one writing as many token columns."""
    if step.startswith("shard"):
        return "I/O floor, shard columns"
    method = step.removeprefix("annotate ").split()[0]
    return "I/O floor, 2 columns" if method.startswith(TWO_COLUMNS) else "I/O floor"


ESTIMATORS = {  # the estimators added with the frameworks' ones, on the log with more columns
    "opo": ["--method", "opo"],
    "grpo-passk": ["--method", "grpo-passk", "--singleton", "zero"],
    "gpg": ["--method", "gpg"],
    "maxrl": ["--method", "maxrl"],
    "sppo": ["--method", "sppo"],
    "gdpo": ["--method", "gdpo", "--reward-columns", "reward,format_reward"],
    "gdpo (trl)": ["--method", "gdpo", "--convention", "trl", "--reward-columns",
                   "reward,format_reward"],
    "grpo-process": ["--method", "grpo-process"],
    "remax": ["--method", "remax"],
    "opd": ["--method", "opd"],
    "grpo --kl-coef 0.05 (k3)": ["--method", "grpo", "--kl-coef", "0.05", "--kl-estimator", "k3"],
    "gae --kl-coef 0.05": ["--method", "gae", "--kl-coef", "0.05"],
    "grpo --opd-coef 1": ["--method", "grpo", "--opd-coef", "1"],
}  # fmt: skip


PROMPTS_PER_STEP = 256  # groups of a step of the run log that ``prompts`` reads

AGENT_STEPS = ("grpo", "gigpo")  # on a log of 8-step trajectories: gigpo's cost over grpo's

STEPS = 8  # the main log cut into this many step files, each whitened alone
PER_STEP = {  # whitened per step, in one read of the log (against the 2-column floor)
    "reinforce-pp (whitened per step)": ["--method", "reinforce-pp", "--gamma", "0.99"],
    "gae (verl, whitened per step)": ["--method", "gae", "--gamma", "0.99", "--convention",
                                      "verl"],
}  # fmt: skip


def tokens_in(path: Path) -> int:
    table = pq.read_table(path, columns=["action_mask"])
    return int(sum(len(chunk.values) for chunk in table.column(0).chunks))


def annotations(
    advcli: list[str], log: Path, runs: dict[str, list[str]], work: Path, prefix: str
) -> dict[str, list[str]]:
    """The ``annotate`` step of each of ``runs`` (name: options) on ``log``, labelled and
    written under ``prefix`` (the rows of one table of the report)."""
    label, out = (f"{prefix}: ", f"{prefix}-") if prefix else ("", "")
    return {
        f"{label}annotate {name}": [
            *advcli, "annotate", str(log), *options,
            "--out", str(work / f"{out}{name.split()[0]}.parquet"), "--force", "-q",
        ]
        for name, options in runs.items()
    }  # fmt: skip


def generated(path: Path, tokens: float, **kinds: Any) -> None:
    """Write the bench log ``path`` (:func:`bench.generate.generate`) unless it is there."""
    if not path.exists():
        print(f"generating {path} …", file=sys.stderr)
        generate(str(path), tokens, **kinds)


def main() -> None:
    # Every step may write and read bytecode, as an installed advcli does (pip compiles it):
    # with PYTHONDONTWRITEBYTECODE set, each run would compile advcli's modules again.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=float, default=50e6, help="size of the Parquet log")
    parser.add_argument("--jsonl-tokens", type=float, default=10e6, help="size of the JSONL log")
    parser.add_argument("--loop-tokens", type=float, default=2e6, help="tokens for the loop")
    parser.add_argument(
        "--extras-tokens", type=float, default=20e6, help="size of the log for the estimators "
        "that read more columns (log-probabilities, process rewards, ...)"
    )  # fmt: skip
    parser.add_argument(
        "--steps-tokens", type=float, default=50e6, help="size of the log of 8-step agent "
        "trajectories (gigpo against grpo)"
    )  # fmt: skip
    parser.add_argument("--workdir", default=str(ROOT / "bench_out"))
    parser.add_argument("--skip-core", action="store_true", help="only the end-to-end runs")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each end-to-end step")
    parser.add_argument(
        "--preset-rollouts", type=int, default=20 * 1024, help="rollouts of the preset logs"
    )
    parser.add_argument(
        "--report-rollouts", type=float, default=1e6, help="rollouts of the report's log"
    )
    args = parser.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    log = work / f"log-{args.tokens:.0f}.parquet"
    generated(log, args.tokens)
    n_tokens = tokens_in(log)
    py = sys.executable
    advcli = [py, "-m", "advcli"]
    steps: dict[str, list[str]] = {
        f"I/O floor ({kind})": [
            py, "-m", "bench.floor", kind, str(log), str(work / f"floor-{kind}.parquet")
        ]
        for kind in ("advcli", "pyarrow", "polars")
    }  # fmt: skip
    steps["I/O floor, shard columns"] = [
        py, "-m", "bench.floor", "shard", str(log), str(work / "floor-shard.parquet")
    ]  # fmt: skip
    steps["I/O floor, 2 columns"] = [
        py, "-m", "bench.floor", "advcli", str(log), str(work / "floor-2.parquet"), "2"
    ]  # fmt: skip
    steps.update(annotations(advcli, log, ANNOTATE, work, ""))
    extras = work / f"log-extras-{args.extras_tokens:.0f}.parquet"
    generated(extras, args.extras_tokens, extras=True)
    extras_floor = [py, "-m", "bench.floor", "advcli", str(extras), str(work / "floor-x.parquet")]
    steps.update(annotations(advcli, extras, ESTIMATORS, work, "x"))
    steps["x: I/O floor (advcli)"] = extras_floor
    agent = work / f"log-steps-{args.steps_tokens:.0f}.parquet"
    generated(agent, args.steps_tokens, group_size=64, agent_steps=8)
    for name in AGENT_STEPS:
        out = str(work / f"s-{name}.parquet")
        steps[f"s: annotate {name}"] = [
            *advcli, "annotate", str(agent), "--method", name, "--out", out, "--force", "-q",
        ]  # fmt: skip
    stepped = work / f"log-{args.tokens:.0f}-steps"
    if not stepped.exists():
        print(f"cutting {log} into {STEPS} step files …", file=sys.stderr)
        split_steps(str(log), str(stepped), STEPS)
    steps["steps: I/O floor, 2 columns"] = [
        py, "-m", "bench.floor", "advcli", str(stepped), str(work / "floor-steps.parquet"), "2"
    ]  # fmt: skip
    steps.update(annotations(advcli, stepped, PER_STEP, work, "steps"))
    steps["audit"] = [*advcli, "audit", str(log), "--json"]
    # The log again with both log-prob streams, a sibling: the other steps' log stays as it was.
    streams = work / f"log-streams-{args.tokens:.0f}.parquet"
    generated(streams, args.tokens, streams=True)
    steps["streams: read floor"] = [
        py, "-m", "bench.floor", "streams", str(streams), str(work / "floor-streams.parquet")
    ]  # fmt: skip
    steps["streams: audit (mismatch)"] = [*advcli, "audit", str(streams), "--json"]
    # The log again as a run: its steps ask the same prompts (a text column, fresh ids).
    run_log = work / f"log-prompts-{args.tokens:.0f}.parquet"
    generated(run_log, args.tokens, prompts_per_step=PROMPTS_PER_STEP)
    steps["prompts: read floor"] = [
        py, "-m", "bench.floor", "prompts", str(run_log), str(work / "floor-prompts.parquet")
    ]  # fmt: skip
    steps["prompts: prompts --json"] = [*advcli, "prompts", str(run_log), "--json"]
    jsonl = work / f"log-{args.jsonl_tokens:.0f}.jsonl"
    generated(jsonl, args.jsonl_tokens)
    steps["JSONL floor"] = [py, "-m", "bench.floor", "ndjson", str(jsonl), str(work / "j.parquet")]
    steps["JSONL annotate grpo"] = [
        *advcli, "annotate", str(jsonl), "--method", "grpo", "--out", str(work / "j-grpo.parquet"),
        "--force", "-q",
    ]  # fmt: skip
    steps["JSONL schema"] = [*advcli, "schema", str(jsonl), "--json"]  # reads the first 4 MB
    steps["JSONL schema --full"] = [*advcli, "schema", str(jsonl), "--json", "--full"]
    shards = work / "shards"
    steps["shard (grpo)"] = [
        *advcli, "shard", str(log), "--method", "grpo", "--out", str(shards), "-q"
    ]  # fmt: skip
    times: dict[str, list[float]] = {name: [] for name in steps}
    peaks: dict[str, list[float]] = {name: [] for name in steps}
    for rep in range(args.repeat):
        for name, cmd in steps.items():
            print(f"running {name} ({rep + 1}/{args.repeat}) …", file=sys.stderr)
            shutil.rmtree(shards, ignore_errors=True)
            seconds, peak = measured(cmd)
            times[name].append(seconds)
            peaks[name].append(peak)
    results = [
        (name, statistics.median(times[name]), max(peaks[name])) for name in steps
    ]  # name, median seconds, largest peak MB
    floor = min(seconds for name, seconds, _ in results if name.startswith("I/O floor ("))
    floors = {"I/O floor": floor, **{name: seconds for name, seconds, _ in results}}
    x_floor = floors["x: I/O floor (advcli)"]
    peak_mb = {name: peak for name, _, peak in results}
    x_tokens = tokens_in(extras)

    lines = [f"log: {log.name}, {n_tokens:,} tokens, {log.stat().st_size / 2**20:,.0f} MiB"]
    lines.append(
        f"{'step':<32}{'seconds':>9}{'M tokens/s':>12}{'floor/step':>12}{'like floor':>12}"
        f"{'peak MB':>10}"
    )
    for name, seconds, peak in results:
        if name.startswith(("x: ", "s: ", "JSONL", "steps: ", "streams: ")):
            continue
        rate = n_tokens / seconds / 1e6
        compared = name.startswith(("annotate", "shard"))
        like = floors[floor_of(name)] / seconds if compared else float("nan")
        lines.append(
            f"{name:<32}{seconds:>9.2f}{rate:>12.1f}{floor / seconds:>12.2f}{like:>12.2f}"
            f"{peak:>10.0f}"
        )
    lines.append(
        "(floor/step: against the one-column floor; like floor: against the floor writing as "
        "many token columns as the method: 2 for mc, td, gae, reinforce-pp; shard: the floor "
        "reading and writing the shard columns once)"
    )
    lines.append(f"(median of {args.repeat} runs per step, taking turns; peak: the largest)")
    steps_floor = floors["steps: I/O floor, 2 columns"]
    lines.append(
        f"{stepped.name} (the log in {STEPS} step files, a batch column; floor: the same read "
        f"and two columns written, {steps_floor:.2f} s):"
    )
    for name in PER_STEP:
        seconds = floors[f"steps: annotate {name}"]
        lines.append(
            f"  annotate {name:<34}{seconds:>9.2f} s  floor/step {steps_floor / seconds:.2f}  "
            f"peak {peak_mb[f'steps: annotate {name}']:.0f} MB"
        )
    lines.append(
        f"estimators reading more columns: {extras.name}, {x_tokens:,} tokens, "
        f"{extras.stat().st_size / 2**20:,.0f} MiB (floor: the same read and write)"
    )
    lines.append(f"{'step':<36}{'seconds':>9}{'M tokens/s':>12}{'floor/step':>12}{'peak MB':>10}")
    for name, seconds, peak in results:
        if name.startswith("x: "):
            rate = x_tokens / seconds / 1e6
            lines.append(
                f"{name[3:]:<36}{seconds:>9.2f}{rate:>12.1f}{x_floor / seconds:>12.2f}{peak:>10.0f}"
            )

    streams_floor = floors["streams: read floor"]
    streams_audit = floors["streams: audit (mismatch)"]
    lines.append(
        f"two log-prob streams ({streams.name}, the log with logprobs and trainer_logprobs): "
        f"reading its audited columns {streams_floor:.2f} s, audit --json {streams_audit:.2f} s "
        f"({peak_mb['streams: audit (mismatch)']:.0f} MB): floor/step "
        f"{streams_floor / streams_audit:.2f}"
    )
    prompts_floor, prompts_s = floors["prompts: read floor"], floors["prompts: prompts --json"]
    lines.append(
        f"prompts ({run_log.name}, the log as a run of steps of {PROMPTS_PER_STEP} prompts "
        f"asked again): reading prompt id, prompt, step and reward {prompts_floor:.2f} s, "
        f"prompts --json {prompts_s:.2f} s ({peak_mb['prompts: prompts --json']:.0f} MB): "
        f"floor/step {prompts_floor / prompts_s:.2f}"
    )
    grpo_s, gigpo_s = (floors[f"s: annotate {name}"] for name in AGENT_STEPS)
    lines.append(
        f"agent steps ({agent.name}, {tokens_in(agent):,} tokens in trajectories of 8 steps, "
        f"8 per group): annotate grpo {grpo_s:.2f} s ({peak_mb['s: annotate grpo']:.0f} MB), "
        f"gigpo {gigpo_s:.2f} s ({peak_mb['s: annotate gigpo']:.0f} MB): gigpo/grpo "
        f"{gigpo_s / grpo_s:.2f}"
    )
    lines.append(
        f"JSONL ({jsonl.name}, {jsonl.stat().st_size / 2**20:,.0f} MiB): polars read_ndjson + "
        f"Parquet write {floors['JSONL floor']:.2f} s ({peak_mb['JSONL floor']:.0f} MB), "
        f"annotate grpo {floors['JSONL annotate grpo']:.2f} s "
        f"({peak_mb['JSONL annotate grpo']:.0f} MB): floor/step "
        f"{floors['JSONL floor'] / floors['JSONL annotate grpo']:.2f}; schema "
        f"{floors['JSONL schema']:.2f} s (its first 4 MB), schema --full "
        f"{floors['JSONL schema --full']:.2f} s"
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

    print("running gigpo's --similarity …", file=sys.stderr)
    lines += similarity.run()
    print("running the start-up …", file=sys.stderr)
    lines += startup.run(15)
    print("running the presets …", file=sys.stderr)
    lines += presets.run(work / "presets", args.preset_rollouts, args.repeat)
    print("running the report …", file=sys.stderr)
    lines += report_bench.run(work / "report", int(args.report_rollouts), args.repeat)
    report = "\n".join(lines)
    print(report)
    (work / "results.txt").write_text(report + "\n")
    (work / "results.json").write_text(
        json.dumps(
            {"tokens": n_tokens, "floor_seconds": floor, "steps": results, "runs": times}, indent=2
        )
    )


if __name__ == "__main__":
    main()
