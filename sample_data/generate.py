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

if __name__ == "__main__":
    (HERE / "rollouts.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), HERE / "rollouts.parquet")
