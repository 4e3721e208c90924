"""Regenerate the sample critic: ``python sample_data/critic.py`` (needs the ``onnx`` package;
deterministic, so it writes ``critic.onnx`` byte for byte again).

A toy causal value head, 7 KB, for trying ``advcli score`` and ``annotate --critic``: per row,
with ``m`` the attention mask and ``E`` a 64-row embedding table indexed by ``id mod 64``,

    h[j] = sum_{i <= j} m[i] * E[ids[i] mod 64] / max(1, sum_{i <= j} m[i])
    value[j] = tanh(h[j] @ W1 + b1) @ W2 + b2

so the value of token j depends on tokens 0..j only. Its values mean nothing: a real critic is
an export of your value model (see docs/critic.md for the inputs and output advcli expects).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).parent
VOCAB, DIM, HIDDEN = 64, 16, 32


def build(path: Path) -> None:
    rng = np.random.default_rng(0)

    def draw(*shape: int) -> np.ndarray:
        return rng.normal(0.0, 1.0 / np.sqrt(shape[0]), size=shape).astype(np.float32)

    weights = {
        "emb": draw(VOCAB, DIM),
        "w1": draw(DIM, HIDDEN),
        "b1": draw(HIDDEN),
        "w2": draw(HIDDEN, 1),
        "b2": draw(1),
    }
    constants = {
        "vocab": np.array(VOCAB, dtype=np.int64),
        "seq_axis": np.array(1, dtype=np.int64),
        "last_axis": np.array([2], dtype=np.int64),
        "one": np.array(1.0, dtype=np.float32),
    }
    nodes = [
        helper.make_node("Mod", ["input_ids", "vocab"], ["index"]),
        helper.make_node("Gather", ["emb", "index"], ["e"], axis=0),
        helper.make_node("Cast", ["attention_mask"], ["m2"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["m2", "last_axis"], ["m"]),
        helper.make_node("Mul", ["e", "m"], ["em"]),
        helper.make_node("CumSum", ["em", "seq_axis"], ["num"]),
        helper.make_node("CumSum", ["m", "seq_axis"], ["cnt"]),
        helper.make_node("Max", ["cnt", "one"], ["den"]),
        helper.make_node("Div", ["num", "den"], ["h"]),
        helper.make_node("MatMul", ["h", "w1"], ["z1"]),
        helper.make_node("Add", ["z1", "b1"], ["z2"]),
        helper.make_node("Tanh", ["z2"], ["z"]),
        helper.make_node("MatMul", ["z", "w2"], ["y"]),
        helper.make_node("Add", ["y", "b2"], ["values"]),
    ]
    graph = helper.make_graph(
        nodes,
        "sample_critic",
        [
            helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "seq"])
            for name in ("input_ids", "attention_mask")
        ],  # fmt: skip
        [helper.make_tensor_value_info("values", TensorProto.FLOAT, ["batch", "seq", 1])],
        [numpy_helper.from_array(v, k) for k, v in {**weights, **constants}.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # readable by onnxruntime >= 1.14
    model.producer_name = "advcli sample_data/critic.py"
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


if __name__ == "__main__":
    build(HERE / "critic.onnx")
