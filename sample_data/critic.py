"""Regenerate the sample critic: ``python sample_data/critic.py`` (needs the ``onnx`` package;
deterministic, so it writes ``critic.onnx`` byte for byte again).

A toy causal value head, 7 KB, for trying ``advcli score`` and ``annotate --critic``: per row,
with ``m`` the attention mask and ``E`` a 64-row embedding table indexed by ``id mod 64``,

    h[j] = sum_{i <= j} m[i] * E[ids[i] mod 64] / max(1, sum_{i <= j} m[i])
    value[j] = tanh(h[j] @ W1 + b1) @ W2 + b2

so the value of token j depends on tokens 0..j only. It is the benchmarks' tiny critic
(``bench/critic_model.py``) with its seeded weights. Its values mean nothing: a real critic is
an export of your value model (see docs/critic.md for the inputs and output advcli expects).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))  # the checkout, for bench/

from bench.critic_model import build_critic, make_weights  # noqa: E402


def build(path: Path) -> None:
    weights = make_weights(vocab=64, dim=16, hidden=32, seed=0)
    build_critic(path, weights, wrap_ids=True, producer="advcli sample_data/critic.py")


if __name__ == "__main__":
    build(HERE / "critic.onnx")
