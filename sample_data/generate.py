"""Regenerate the sample logs: ``python sample_data/generate.py`` (deterministic)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).parent
rng = np.random.default_rng(7)


def turns(*parts: tuple[str, int]) -> tuple[list[int], list[int], list[dict]]:
    """Token ids, action mask and spans for a sequence of (kind, length) parts."""
    ids: list[int] = []
    mask: list[int] = []
    spans: list[dict] = []
    for kind, n in parts:
        spans.append({"start": len(ids), "end": len(ids) + n, "kind": kind})
        ids += rng.integers(10, 32000, n).tolist()
        mask += [1 if kind == "action" else 0] * n
    return ids, mask, spans


def row(prompt, rollout, reward, parts, *, segment=0, t=0.0, truncated=False, boot=None):
    ids, mask, spans = turns(*parts)
    values = np.round(rng.uniform(0.0, 1.0, len(ids)), 4).tolist()
    return {
        "prompt_id": prompt,
        "rollout_id": rollout,
        "segment_index": segment,
        "input_ids": ids,
        "action_mask": mask,
        "spans": spans,
        "reward": reward,
        "values": values,
        "completion_time": t,
        "truncated": truncated,
        "bootstrap_value": boot,
        "old_logprobs": np.round(-rng.exponential(1.0, len(ids)), 4).tolist(),
        "model_version": "policy-v3",
    }


P, A, O = "prompt", "action", "observation"
rows = [
    # p-math: mixed rewards, single-turn
    row("p-math", "r00", 1.0, [(P, 6), (A, 8)], t=3.0),
    row("p-math", "r01", 0.0, [(P, 6), (A, 5)], t=1.0),
    row("p-math", "r02", 1.0, [(P, 6), (A, 7)], t=4.5),
    row("p-math", "r03", 0.0, [(P, 6), (A, 9)], t=2.0),
    # p-easy: every rollout correct, a zero-variance group
    row("p-easy", "r10", 1.0, [(P, 5), (A, 4)], t=0.5),
    row("p-easy", "r11", 1.0, [(P, 5), (A, 6)], t=1.5),
    row("p-easy", "r12", 1.0, [(P, 5), (A, 3)], t=2.5),
    row("p-easy", "r13", 1.0, [(P, 5), (A, 5)], t=3.5),
    # p-tool: multi-turn tool use with observation spans; r21 is truncated
    row("p-tool", "r20", 1.0, [(P, 4), (A, 5), (O, 3), (A, 4)], t=6.0),
    row("p-tool", "r21", 0.0, [(P, 4), (A, 3), (O, 6), (A, 2), (O, 2), (A, 3)], t=7.0,
        truncated=True, boot=0.35),
    row("p-tool", "r22", 0.5, [(P, 4), (A, 6), (O, 4), (A, 5)], t=5.0),
    # r23: one long rollout cut by context compression into two segments
    row("p-tool", "r23", 1.0, [(P, 4), (A, 6), (O, 3), (A, 3)], segment=0, t=8.0),
    row("p-tool", "r23", 1.0, [(P, 7), (A, 4), (O, 2), (A, 5)], segment=1, t=9.0),
    # p-lonely: a singleton group
    row("p-lonely", "r30", 0.7, [(P, 5), (A, 6)], t=2.2),
]

SCHEMA = pa.schema(
    [
        ("prompt_id", pa.string()),
        ("rollout_id", pa.string()),
        ("segment_index", pa.int32()),
        ("input_ids", pa.list_(pa.int32())),
        ("action_mask", pa.list_(pa.int8())),
        ("spans", pa.list_(pa.struct([("start", pa.int32()), ("end", pa.int32()),
                                      ("kind", pa.string())]))),
        ("reward", pa.float64()),
        ("values", pa.list_(pa.float32())),
        ("completion_time", pa.float64()),
        ("truncated", pa.bool_()),
        ("bootstrap_value", pa.float64()),
        ("old_logprobs", pa.list_(pa.float32())),
        ("model_version", pa.string()),
    ]
)

# health.parquet: a small asynchronous run for `advcli audit`'s health sections and
# `--correction`. Its own generator, so rollouts.* stay byte for byte as they were.
health_rng = np.random.default_rng(51)
STEPS = (1, 2, 3)
# Per prompt: how its rollouts' turns are built, and its rewards (None: drawn).
HEALTH_PROMPTS = {
    "p-algebra": [(P, 6), (A, 0)],
    "p-geometry": [(P, 5), (A, 0)],
    "p-easy": [(P, 4), (A, 0)],
    "p-tool": [(P, 4), (A, 0), (O, 3), (A, 0)],
}


def health_row(step: int, prompt: str, k: int, reward: float) -> dict:
    """One rollout of ``prompt`` sampled at ``step`` by weights up to two steps stale; the
    trainer's log-probs differ from the sampler's by a little noise plus a few large jumps
    (|delta| = log 3, outside a 0.5..2 token mask), more of them the staler the rollout."""
    staleness = min(int(health_rng.choice([0, 0, 1, 2])), step - 1)
    ids: list[int] = []
    mask: list[int] = []
    for kind, n in HEALTH_PROMPTS[prompt]:
        n = n or int(health_rng.integers(3, 11))
        ids += health_rng.integers(10, 32000, n).tolist()
        mask += [1 if kind == A else 0] * n
    action = np.array(mask, dtype=bool)
    sampler = -health_rng.exponential(0.8, len(ids))
    jumps = health_rng.random(len(ids)) < 0.04 + 0.08 * staleness
    delta = health_rng.normal(0.0, 0.03, len(ids))
    delta[jumps] = np.log(3.0) * health_rng.choice([-1.0, 1.0], int(jumps.sum()))
    trainer = sampler + np.where(action, delta, 0.0)
    return {
        # Scoped by step, as verl's preset scopes its prompts: each step's group is its own.
        "prompt_id": f"{step}:{prompt}",
        "rollout_id": f"{step}:{prompt}:{k}",
        "step": step,
        "version": step - staleness,
        "input_ids": ids,
        "action_mask": mask,
        "reward": reward,
        "logprobs": np.round(sampler, 4).tolist(),
        "trainer_logprobs": np.round(trainer, 4).tolist(),
        "entropies": np.round(health_rng.uniform(0.05, 2.5, len(ids)), 3).tolist(),
        "truncated": False,
    }


def health_rows() -> list[dict]:
    out = []
    for step in STEPS:
        for prompt in HEALTH_PROMPTS:
            # p-easy is all-correct (a zero-variance group); the others are mixed.
            drawn = health_rng.integers(0, 2, 2).tolist()
            rewards = [1, 1, 1, 1] if prompt == "p-easy" else [1, 0, *drawn]
            out += [health_row(step, prompt, k, float(r)) for k, r in enumerate(rewards)]
    # The two longest responses ran into the length limit.
    longest = sorted(range(len(out)), key=lambda i: -sum(out[i]["action_mask"]))[:2]
    for i in longest:
        out[i]["truncated"] = True
    return out


HEALTH_SCHEMA = pa.schema(
    [
        ("prompt_id", pa.string()),
        ("rollout_id", pa.string()),
        ("step", pa.int32()),
        ("version", pa.int32()),
        ("input_ids", pa.list_(pa.int32())),
        ("action_mask", pa.list_(pa.int8())),
        ("reward", pa.float64()),
        ("logprobs", pa.list_(pa.float32())),
        ("trainer_logprobs", pa.list_(pa.float32())),
        ("entropies", pa.list_(pa.float32())),
        ("truncated", pa.bool_()),
    ]
)


def write(out: Path = HERE) -> None:
    """Write rollouts.jsonl, rollouts.parquet and health.parquet into ``out``."""
    (out / "rollouts.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), out / "rollouts.parquet")
    health = pa.Table.from_pylist(health_rows(), schema=HEALTH_SCHEMA)
    pq.write_table(health, out / "health.parquet")


if __name__ == "__main__":
    write()
