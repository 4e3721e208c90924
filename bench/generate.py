"""Generate a synthetic multi-turn rollout log of a given size (Parquet or JSONL).

Lengths are long-tailed (lognormal, median ~1.5k tokens, capped at 32k); every rollout has a
prompt span, then action / observation / action turns; per-token critic values; groups of
``--group-size`` rollouts per prompt, about a fifth of them zero-variance. Written in chunks, so
memory stays bounded whatever the size:
``python -m bench.generate --tokens 50e6 --out log.parquet``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from advcli.core.ragged import offsets_from_lengths, row_of
from advcli.io.writers import ROW_GROUP_ROWS, parquet_options

MAX_LEN = 32_768
PROMPT_TEXT = (
    "system: you are a careful math tutor; think step by step, then give the answer after "
    "####. user: problem {} of the curriculum, what is the sum of its digits? assistant:"
)


def lengths(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.clip(rng.lognormal(np.log(1500), 0.9, n), 64, MAX_LEN).astype(np.int64)


def chunk(
    rng: np.random.Generator,
    first_row: int,
    n_rows: int,
    group_size: int,
    extras: bool = False,
    agent_steps: int = 0,
    streams: bool = False,
    prompts_per_step: int = 0,
) -> pa.Table:
    """``n_rows`` rollouts, starting at global row ``first_row`` (whole groups); ``extras``: the
    columns only some methods read (log-probabilities of the policy, a reference and a teacher,
    a greedy rollout's reward, four process rewards per row, a second reward column);
    ``agent_steps``: rows are the steps of trajectories of that many steps (segments), with a
    ``state`` (one of four per step number, so states repeat across a group's trajectories)
    and a ``step_reward``; ``streams``: both log-prob streams, the sampler's ``logprobs`` and
    the trainer's ``trainer_logprobs`` (N(0, 0.05) apart, 1% of tokens ±log 3 apart);
    ``prompts_per_step``: a run's steps of that many groups each, every step asking the same
    prompts again (a ``step`` and a ``prompt`` text column; the prompt ids, one per group, are
    fresh at each step, as verl's uid is)."""
    n_tok = lengths(rng, n_rows)
    offsets = offsets_from_lengths(n_tok)
    total = int(offsets[-1])
    rows = row_of(offsets)
    pos = np.arange(total) - offsets[:-1][rows]
    # prompt: first ~12%; an observation span in the middle ~15%; the rest actions.
    prompt_end = (n_tok * 0.12).astype(np.int64)[rows]
    obs_start = (n_tok * 0.5).astype(np.int64)[rows]
    obs_end = (n_tok * 0.65).astype(np.int64)[rows]
    mask = ((pos >= prompt_end) & ~((pos >= obs_start) & (pos < obs_end))).astype(np.int8)
    group = (first_row + np.arange(n_rows)) // group_size
    p_correct = rng.uniform(0, 1, group.max() - group.min() + 1)
    p_correct[rng.uniform(0, 1, len(p_correct)) < 0.1] = 1.0  # all-correct groups
    p_correct[rng.uniform(0, 1, len(p_correct)) < 0.1] = 0.0  # all-wrong groups
    reward = (rng.uniform(0, 1, n_rows) < p_correct[group - group.min()]).astype(np.float32)

    def lists(values: np.ndarray) -> pa.Array:
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values))

    columns = {
        "prompt_id": pa.array([f"prompt-{g}" for g in group]),
        "rollout_id": pa.array(first_row + np.arange(n_rows)),
        "input_ids": lists(rng.integers(0, 150_000, total, dtype=np.int32)),
        "action_mask": lists(mask),
        "values": lists(rng.uniform(0, 1, total).astype(np.float32)),
        "reward": pa.array(reward),
        "completion_time": pa.array(first_row + rng.uniform(0, 64, n_rows)),
    }
    if extras:
        logprobs = -rng.exponential(0.5, total).astype(np.float32)
        columns["logprobs"] = lists(logprobs)
        columns["ref_logprobs"] = lists(logprobs + rng.normal(0, 0.1, total).astype(np.float32))
        columns["teacher_logprobs"] = lists(logprobs + rng.normal(0, 0.3, total).astype(np.float32))
        columns["baseline_reward"] = pa.array(rng.uniform(0, 1, n_rows))
        steps = 4
        step_offsets = pa.array((np.arange(n_rows + 1) * steps).astype(np.int32))
        ends = (n_tok[:, None] * np.arange(1, steps + 1) // steps - 1).ravel()
        columns["step_rewards"] = pa.ListArray.from_arrays(
            step_offsets, pa.array(rng.integers(0, 2, n_rows * steps).astype(np.float64))
        )
        columns["step_ends"] = pa.ListArray.from_arrays(step_offsets, pa.array(ends))
        columns["format_reward"] = pa.array(rng.integers(0, 2, n_rows).astype(np.float64))
    if streams:
        sampler = -rng.exponential(0.5, total).astype(np.float32)
        delta = rng.normal(0, 0.05, total).astype(np.float32)
        far = rng.uniform(0, 1, total) < 0.01
        signs = rng.choice(np.array([-1, 1], np.float32), int(far.sum()))
        delta[far] = np.float32(np.log(3.0)) * signs
        columns["logprobs"] = lists(sampler)
        columns["trainer_logprobs"] = lists(sampler + delta)
    if prompts_per_step:
        step, asked = group // prompts_per_step, group % prompts_per_step
        columns["step"] = pa.array(step)
        columns["prompt"] = pa.array([PROMPT_TEXT.format(p) for p in asked])
    if agent_steps:
        row = first_row + np.arange(n_rows)
        columns["rollout_id"] = pa.array(row // agent_steps)
        columns["segment_index"] = pa.array(row % agent_steps)
        columns["state"] = pa.array((row % agent_steps) * 4 + rng.integers(0, 4, n_rows))
        columns["step_reward"] = pa.array(rng.integers(0, 2, n_rows).astype(np.float64) / 4)
    return pa.table(columns)


def split_steps(src: str, folder: str, steps: int, group_size: int = 16) -> None:
    """``src`` cut into ``steps`` files of consecutive whole groups (``folder/step_NNN.parquet``),
    each with a ``batch`` column naming its step: a run's log, one file per trainer step."""
    pf = pq.ParquetFile(src)
    per_step = -(-pf.metadata.num_rows // steps // group_size) * group_size
    Path(folder).mkdir(parents=True, exist_ok=True)
    rows = 0
    writer = None
    for batch in pf.iter_batches(batch_size=group_size * 64):
        table = pa.Table.from_batches([batch])
        while table.num_rows:
            step = rows // per_step
            take = min(table.num_rows, (step + 1) * per_step - rows)
            part = table.slice(0, take)
            part = part.append_column("batch", pa.array([f"step {step}"] * take))
            if writer is None or writer[0] != step:
                if writer is not None:
                    writer[1].close()
                path = Path(folder) / f"step_{step:03d}.parquet"
                writer = (step, pq.ParquetWriter(path, part.schema, **parquet_options(part.schema)))
            writer[1].write_table(part, row_group_size=ROW_GROUP_ROWS)
            rows += take
            table = table.slice(take)
    if writer is not None:
        writer[1].close()


def generate(
    out: str,
    tokens: float,
    group_size: int = 16,
    seed: int = 0,
    extras: bool = False,
    agent_steps: int = 0,
    streams: bool = False,
    prompts_per_step: int = 0,
) -> tuple[int, int]:
    """Write about ``tokens`` tokens to ``out`` (``extras``, ``agent_steps``, ``streams``,
    ``prompts_per_step``: see :func:`chunk`; ``group_size`` counts rows); returns (rows,
    tokens) written."""
    rng = np.random.default_rng(seed)
    rows_per_chunk = group_size * (ROW_GROUP_ROWS // group_size)
    written_rows = written_tokens = 0
    writer = None
    try:
        while written_tokens < tokens:
            table = chunk(rng, written_rows, rows_per_chunk, group_size, extras, agent_steps,
                          streams, prompts_per_step)  # fmt: skip
            if out.endswith(".jsonl"):
                import polars as pl

                with open(out, "ab" if writer else "wb") as fh:
                    pl.from_arrow(table).write_ndjson(fh)
                writer = True
            else:
                if writer is None:
                    writer = pq.ParquetWriter(out, table.schema, **parquet_options(table.schema))
                writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
            written_rows += table.num_rows
            written_tokens += int(pc.list_value_length(table["input_ids"]).to_numpy().sum())
    finally:
        if writer not in (None, True):
            writer.close()
    return written_rows, written_tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=float, default=50e6)
    parser.add_argument("--out", required=True)
    parser.add_argument("--group-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rows, tokens = generate(args.out, args.tokens, args.group_size, args.seed)
    print(f"{args.out}: {rows:,} rows, {tokens:,} tokens")


if __name__ == "__main__":
    main()
