"""CUDA check of ``advcli.critic``: the same critic and log on CUDA and on the CPU, in one run.

For a machine with an NVIDIA GPU and onnxruntime-gpu; it imports numpy, onnx, onnxruntime and
advcli's critic and core only (no polars, no orjson), so it runs where the CLI's dependencies are
missing:

    python -m bench.gpu_check --rows 2000 --model-dim 128

The table printed last gives the provider each session actually used, the largest difference of
the CUDA values from the CPU ones, and tokens/s of each; beside each ``score`` row, tokens/s of
bare ONNX Runtime (one ``InferenceSession.run`` per batch on the same provider) over the very
batches ``score`` made, padded beforehand and outside the clock, so the ratio is what advcli's
batching, padding, unpadding and checks cost on top of the model. Exits 1 when CUDA did not run
or the values disagree by more than ``--tol``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime

from advcli.critic import DEFAULT_BATCH_TOKENS, Critic, batching, load_critic
from advcli.errors import UsageError
from bench.critic_bench import make_log
from bench.critic_model import build_critic, make_weights


def timed(critic: Critic, ids: np.ndarray, offsets: np.ndarray, budget: int) -> tuple:
    """Values and tokens/s, the better of two runs (the first one grows the memory arenas)."""
    seconds = []
    for _ in range(2):
        start = time.perf_counter()
        values = critic.score(ids, offsets, batch_tokens=budget).values
        seconds.append(time.perf_counter() - start)
    return values, len(ids) / min(seconds)


def bare_rate(critic: Critic, ids: np.ndarray, offsets: np.ndarray, budget: int) -> float:
    """Tokens/s of plain ``session.run`` over the batches ``critic.score`` makes (best of two)."""
    providers = list(dict.fromkeys([critic.provider, "CPUExecutionProvider"]))
    session = onnxruntime.InferenceSession(str(critic.path), providers=providers)
    starts, lens, _ = batching.keep_last(offsets, int(np.diff(offsets).max()))
    feeds = []
    for rows, width in batching.batches(lens, budget):
        batch = batching.pad(
            ids, starts[rows], lens[rows], len(rows), width, ids_dtype=np.int64, mask_dtype=np.int64
        )
        feeds.append({critic.input_name: batch.ids, critic.mask_name: batch.mask})
    seconds = []
    for _ in range(2):
        start = time.perf_counter()
        for feed in feeds:
            session.run([critic.output_name], feed)
        seconds.append(time.perf_counter() - start)
    return len(ids) / min(seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--model-dim", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=32_000)
    parser.add_argument("--tol", type=float, default=1e-3, help="largest |CUDA - CPU| accepted")
    parser.add_argument(
        "--batch-tokens",
        type=int,
        nargs="+",
        default=[DEFAULT_BATCH_TOKENS, 4 * DEFAULT_BATCH_TOKENS, 16 * DEFAULT_BATCH_TOKENS],
        help="budgets to time on CUDA (the CPU runs the first)",
    )
    args = parser.parse_args()
    print(f"onnxruntime {onnxruntime.__version__}: {onnxruntime.get_available_providers()}")

    ids, offsets = make_log(args.rows, args.vocab, 1000, 8192, seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "critic.onnx"
        build_critic(path, make_weights(args.vocab, args.model_dim, args.hidden, seed=0))
        cpu = load_critic(path, device="cpu")
        try:
            cuda = load_critic(path, device="cuda")
        except UsageError as e:
            print(f"CUDA: {e}")
            cuda = None
        reference, cpu_rate = timed(cpu, ids, offsets, args.batch_tokens[0])
        rows = [
            (
                "cpu",
                cpu.provider,
                args.batch_tokens[0],
                0.0,
                cpu_rate,
                bare_rate(cpu, ids, offsets, args.batch_tokens[0]),
            )
        ]
        worst = 0.0
        for budget in args.batch_tokens if cuda is not None else []:
            values, rate = timed(cuda, ids, offsets, budget)
            if not np.array_equal(np.isnan(values), np.isnan(reference)):
                diff = float("inf")  # NaN in different places
            else:
                finite = ~np.isnan(reference)
                diff = float(np.abs(values[finite] - reference[finite]).max(initial=0.0))
            worst = max(worst, diff)
            rows.append(
                ("cuda", cuda.provider, budget, diff, rate, bare_rate(cuda, ids, offsets, budget))
            )

    print(f"\n{args.rows} rows, {len(ids):,} tokens, d={args.model_dim}, hidden={args.hidden}")
    head = (
        "device",
        "provider used",
        "batch_tokens",
        "max|diff|",
        "score tok/s",
        "bare ORT",
        "ratio",
    )
    print(
        f"{head[0]:<6} {head[1]:<24} {head[2]:>12} {head[3]:>10} {head[4]:>12} {head[5]:>12} "
        f"{head[6]:>6}"
    )
    for device, provider, budget, diff, rate, bare in rows:
        print(
            f"{device:<6} {provider:<24} {budget:>12,} {diff:>10.2e} {rate:>12,.0f} {bare:>12,.0f} "
            f"{rate / bare:>6.2f}"
        )
    ok = cuda is not None and cuda.provider == "CUDAExecutionProvider" and worst <= args.tol
    print(f"CUDA check: {'PASS' if ok else 'FAIL'} (tolerance {args.tol:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
