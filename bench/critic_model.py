"""A tiny causal critic built with the ``onnx`` package alone, and its numpy reference.

The network, per row (``m`` is the attention mask, ``E`` the embedding table):

    h[j] = sum_{i <= j} m[i] * E[ids[i]] / max(1, sum_{i <= j} m[i])   (causal prefix mean)
    out[j] = tanh(h[j] @ W1 + b1) @ W2 + b2

so ``out[j]`` depends on tokens 0..j only, like a causal value head. Tests and benchmarks use it;
the weights are drawn from a seeded generator, so :func:`reference` computes the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17  # old enough for every onnxruntime >= 1.18 the extras allow


@dataclass(frozen=True)
class Weights:
    emb: np.ndarray  # [vocab, dim]
    w1: np.ndarray  # [dim, hidden]
    b1: np.ndarray  # [hidden]
    w2: np.ndarray  # [hidden, 1]
    b2: np.ndarray  # [1]


def make_weights(vocab: int = 64, dim: int = 16, hidden: int = 32, seed: int = 0) -> Weights:
    rng = np.random.default_rng(seed)

    def draw(*shape: int) -> np.ndarray:
        return rng.normal(0.0, 1.0 / np.sqrt(shape[0]), size=shape).astype(np.float32)

    return Weights(draw(vocab, dim), draw(dim, hidden), draw(hidden), draw(hidden, 1), draw(1))


def reference(weights: Weights, ids: np.ndarray) -> np.ndarray:
    """The network's output for one unpadded row: ``out[j]`` for every position j (float32)."""
    emb = weights.emb[np.asarray(ids, dtype=np.int64)]
    count = np.arange(1, len(emb) + 1, dtype=np.float32)[:, None]
    h = np.cumsum(emb, axis=0, dtype=np.float32) / count
    return (np.tanh(h @ weights.w1 + weights.b1) @ weights.w2 + weights.b2)[:, 0]


def build_critic(
    path: str | Path,
    weights: Weights | None = None,
    *,
    input_names: tuple[str, str] = ("input_ids", "attention_mask"),
    output_name: str = "values",
    squeeze: bool = False,
    seq_len: int | None = None,
    batch_size: int | None = None,
    index_type: int = TensorProto.INT64,
    wrap_ids: bool = False,
    producer: str = "",
) -> Weights:
    """Write the critic to ``path`` and return its weights.

    ``squeeze`` gives a [batch, seq] output instead of [batch, seq, 1]; ``seq_len`` makes the
    sequence dimension static (inputs and output), as an export without dynamic axes does, and
    ``batch_size`` the batch dimension; ``index_type`` is the inputs' type (int64 or int32);
    ``wrap_ids`` embeds ``id mod vocab``, so any token id has a row (:func:`reference` then
    takes the ids so wrapped).
    """
    w = weights if weights is not None else make_weights()
    ids_name, mask_name = input_names
    batch = batch_size if batch_size is not None else "batch"
    seq = seq_len if seq_len is not None else "seq"
    out_shape = [batch, seq] if squeeze else [batch, seq, 1]
    inits = [
        numpy_helper.from_array(w.emb, "emb"),
        numpy_helper.from_array(w.w1, "w1"),
        numpy_helper.from_array(w.b1, "b1"),
        numpy_helper.from_array(w.w2, "w2"),
        numpy_helper.from_array(w.b2, "b2"),
        numpy_helper.from_array(np.array(1, dtype=np.int64), "seq_axis"),
        numpy_helper.from_array(np.array([2], dtype=np.int64), "last_axis"),
        numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one"),
    ]
    index = ids_name
    if wrap_ids:
        inits.append(numpy_helper.from_array(np.array(len(w.emb), dtype=np.int64), "vocab"))
        index = "wrapped"
    nodes = [
        *([helper.make_node("Mod", [ids_name, "vocab"], [index])] if wrap_ids else []),
        helper.make_node("Gather", ["emb", index], ["e"], axis=0),
        helper.make_node("Cast", [mask_name], ["m2"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["m2", "last_axis"], ["m"]),
        helper.make_node("Mul", ["e", "m"], ["em"]),
        helper.make_node("CumSum", ["em", "seq_axis"], ["num"]),
        helper.make_node("CumSum", ["m", "seq_axis"], ["cnt"]),
        helper.make_node("Max", ["cnt", "one"], ["den"]),
        helper.make_node("Div", ["num", "den"], ["h"]),
        helper.make_node("MatMul", ["h", "w1"], ["z1"]),
        helper.make_node("Add", ["z1", "b1"], ["z2"]),
        helper.make_node("Tanh", ["z2"], ["z"]),
        helper.make_node("MatMul", ["z", "w2"], ["y1"]),
        helper.make_node("Add", ["y1", "b2"], ["y" if squeeze else output_name]),
    ]
    if squeeze:
        nodes.append(helper.make_node("Squeeze", ["y", "last_axis"], [output_name]))
    graph = helper.make_graph(
        nodes,
        "tiny_causal_critic",
        [
            helper.make_tensor_value_info(ids_name, index_type, [batch, seq]),
            helper.make_tensor_value_info(mask_name, index_type, [batch, seq]),
        ],
        [helper.make_tensor_value_info(output_name, TensorProto.FLOAT, out_shape)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8  # readable by onnxruntime >= 1.14
    model.producer_name = producer
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return w
