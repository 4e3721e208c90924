"""CPU throughput of ``advcli.critic`` by batch budget, and sorted against unsorted batches.

    python -m bench.critic_bench --rows 600 --model-dim 128

Builds the causal critic of :mod:`bench.critic_model`, generates a log of rows with lognormal
lengths (median ~1k tokens, capped at 8k), and scores it with several ``batch_tokens`` budgets
(best of ``--repeat`` runs).
"padding" is real tokens / padded tokens. "unsorted" cuts batches in arrival order by the same
padded-token budget, the way a loader that does not sort would.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from advcli.core.ragged import offsets_from_lengths
from advcli.critic import DEFAULT_BATCH_TOKENS, Critic, load_critic
from bench.critic_model import build_critic, make_weights


def make_log(rows: int, vocab: int, median: int, cap: int, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    lens = np.clip(rng.lognormal(np.log(median), 0.9, size=rows), 1, cap).astype(np.int64)
    offsets = offsets_from_lengths(lens)
    return rng.integers(0, vocab, size=int(offsets[-1]), dtype=np.int64), offsets


def unsorted_batches(lens: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Consecutive rows while rows x longest row fits the budget (a longer row runs alone)."""
    out, start, width = [], 0, 0
    for i, n in enumerate(lens):
        width_if_added = max(width, int(n))
        if i > start and (i - start + 1) * width_if_added > budget:
            out.append((start, i))
            start, width_if_added = i, int(n)
        width = width_if_added
    if start < len(lens):
        out.append((start, len(lens)))
    return out


def time_sorted(critic: Critic, ids: np.ndarray, offsets: np.ndarray, budget: int) -> tuple:
    batches = []
    start = time.perf_counter()
    scored = critic.score(
        ids, offsets, batch_tokens=budget, progress=lambda d, t: batches.append(d)
    )
    seconds = time.perf_counter() - start
    return len(batches), len(ids) / scored.padded_tokens, seconds


def time_unsorted(critic: Critic, ids: np.ndarray, offsets: np.ndarray, budget: int) -> tuple:
    lens = np.diff(offsets)
    batches = unsorted_batches(lens, budget)
    padded = 0
    start = time.perf_counter()
    for a, b in batches:
        # One call per batch with an unlimited budget scores the batch as it is, unsorted.
        sub_offsets = offsets[a : b + 1] - offsets[a]
        scored = critic.score(ids[offsets[a] : offsets[b]], sub_offsets, batch_tokens=2**62)
        padded += scored.padded_tokens
    seconds = time.perf_counter() - start
    return len(batches), len(ids) / padded, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=600)
    parser.add_argument("--model-dim", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=32_000)
    parser.add_argument("--median", type=int, default=1000)
    parser.add_argument("--cap", type=int, default=8192)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3, help="report the best of this many runs")
    parser.add_argument(
        "--batch-tokens",
        type=int,
        nargs="+",
        default=[1, 2048, 4096, 8192, 16_384, 65_536],
        help="budgets to time; 1 runs every row alone",
    )
    args = parser.parse_args()

    ids, offsets = make_log(args.rows, args.vocab, args.median, args.cap, args.seed)
    lens = np.diff(offsets)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "critic.onnx"
        weights = make_weights(args.vocab, args.model_dim, args.hidden, args.seed)
        build_critic(path, weights)
        critic = load_critic(path, device="cpu")
        critic.score(ids[:64], np.array([0, 64]))  # warm-up
        print(
            f"{args.rows} rows, {len(ids):,} tokens (median {int(np.median(lens))}, max "
            f"{lens.max()}), d={args.model_dim}, hidden={args.hidden}, {critic.provider}"
        )
        print(
            f"{'batching':<10} {'batch_tokens':>12} {'batches':>8} {'padding':>8} {'tokens/s':>12}"
        )
        runs = [("sorted", b, time_sorted) for b in args.batch_tokens]
        runs.append(("unsorted", DEFAULT_BATCH_TOKENS, time_unsorted))
        # Rounds over all settings, so that a slow spell of a shared machine hits them alike.
        best: dict[int, tuple] = {}
        for _ in range(args.repeat):
            for i, (_, budget, timer) in enumerate(runs):
                timing = timer(critic, ids, offsets, budget)
                if i not in best or timing[2] < best[i][2]:
                    best[i] = timing
        for i, (name, budget, _) in enumerate(runs):
            n_batches, efficiency, seconds = best[i]
            print(
                f"{name:<10} {budget:>12,} {n_batches:>8} {efficiency:>8.1%} "
                f"{len(ids) / seconds:>12,.0f}"
            )


if __name__ == "__main__":
    main()
