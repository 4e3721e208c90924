"""The GAE core alone (flat arrays in memory) against a plain per-rollout Python loop.

Both take the same arrays: action mask, values, outcome reward, row offsets; observation-skip
GAE with gamma = 0.99, lambda = 0.95; per-token float32 advantages out.
``python -m bench.core LOG.parquet LOOP_TOKENS`` prints the timings as JSON.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import pyarrow.parquet as pq

from advcli._malloc import tune_allocator
from advcli.core import temporal as T

GAMMA, LAM = 0.99, 0.95


def gae_core(mask: np.ndarray, values: np.ndarray, reward: np.ndarray, offsets: np.ndarray):
    """advcli's core, composed as the engine composes it for one batch (observation-skip: the
    steps are the action tokens, gathered and scattered with the mask)."""
    _, step_offsets = T.step_positions(mask, offsets, "skip")
    rewards, _ = T.outcome_on_steps(step_offsets, reward)
    adv = T.gae(
        values[mask].astype(np.float64),
        rewards,
        step_offsets,
        gamma=GAMMA,
        lam=LAM,
        next_value=np.zeros(len(offsets) - 1),
    )
    out = np.zeros(len(mask), dtype=np.float32)
    out[mask] = adv.astype(np.float32)
    return out


def gae_core_batched(
    mask: np.ndarray, values: np.ndarray, reward: np.ndarray, offsets: np.ndarray, rows: int = 512
) -> np.ndarray:
    """The core over batches of ``rows`` rows, as the engine feeds it (arrays stay small)."""
    out = np.empty(len(mask), dtype=np.float32)
    for lo in range(0, len(offsets) - 1, rows):
        hi = min(lo + rows, len(offsets) - 1)
        a, b = offsets[lo], offsets[hi]
        part = offsets[lo : hi + 1] - a
        out[a:b] = gae_core(mask[a:b], values[a:b], reward[lo:hi], part)
    return out


def gae_loop(mask: np.ndarray, values: np.ndarray, reward: np.ndarray, offsets: np.ndarray):
    """The plain way: a Python loop over each rollout's action tokens, backwards."""
    out = np.zeros(len(mask), dtype=np.float32)
    for row in range(len(offsets) - 1):
        actions = [t for t in range(offsets[row], offsets[row + 1]) if mask[t]]
        advantage, next_value = 0.0, 0.0
        for i in range(len(actions) - 1, -1, -1):
            t = actions[i]
            r = float(reward[row]) if i == len(actions) - 1 else 0.0
            v = float(values[t])
            delta = r + GAMMA * next_value - v
            advantage = delta + GAMMA * LAM * advantage
            out[t] = advantage
            next_value = v
    return out


def timed(fn, *args, repeat: int = 3) -> tuple[float, np.ndarray]:
    """Best of ``repeat`` wall times."""
    best, result = np.inf, None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn(*args)
        best = min(best, time.perf_counter() - started)
    return best, result


def main(log: str, loop_tokens: float) -> dict:
    tune_allocator()  # as the advcli command does
    table = pq.read_table(log, columns=["action_mask", "values", "reward"])
    mask_col = table.column("action_mask").combine_chunks()
    offsets = mask_col.offsets.to_numpy().astype(np.int64)
    mask = mask_col.values.to_numpy().astype(bool)
    values = table.column("values").combine_chunks().values.to_numpy()
    reward = table.column("reward").to_numpy().astype(np.float64)
    seconds, full = timed(gae_core_batched, mask, values, reward, offsets)
    rows = int(np.searchsorted(offsets, loop_tokens)) or 1
    sub = offsets[: rows + 1]
    n_sub = int(sub[-1])
    loop_seconds, loop = timed(gae_loop, mask[:n_sub], values[:n_sub], reward[:rows], sub, repeat=1)
    return {
        "tokens": len(mask),
        "core_tokens_per_s": len(mask) / seconds,
        "loop_tokens": n_sub,
        "loop_tokens_per_s": n_sub / loop_seconds,
        "max_abs_difference": float(np.abs(loop - full[:n_sub]).max()),
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], float(sys.argv[2]))))
