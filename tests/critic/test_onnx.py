"""advcli.critic on a tiny causal critic built with onnx (bench.critic_model), on the CPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from advcli import installed
from advcli.core.ragged import offsets_from_lengths
from advcli.critic import load_critic
from advcli.errors import DataError, UsageError
from bench.critic_model import build_critic, make_weights, reference
from tests.conftest import one_line, run

WEIGHTS = make_weights(vocab=50, dim=8, hidden=16, seed=3)


def make_log(lens: list[int], seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    offsets = offsets_from_lengths(np.array(lens, dtype=np.int64))
    return rng.integers(0, 50, size=int(offsets[-1]), dtype=np.int64), offsets


def expected(ids: np.ndarray, offsets: np.ndarray, shift: bool = True) -> np.ndarray:
    """The numpy reference, row by row, with the shift convention applied."""
    out = []
    for a, b in zip(offsets[:-1], offsets[1:], strict=True):
        row = reference(WEIGHTS, ids[a:b]) if b > a else np.zeros(0, dtype=np.float32)
        out.append(np.concatenate([[np.nan], row[:-1]]) if shift and b > a else row)
    return np.concatenate(out).astype(np.float32) if out else np.zeros(0, dtype=np.float32)


def same_values(got: np.ndarray, want: np.ndarray) -> None:
    """Equal up to float32 rounding: other batch shapes may sum in another order."""
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.fixture(scope="module")
def critic_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("critic") / "critic.onnx"
    build_critic(path, WEIGHTS)
    return path


@pytest.fixture(scope="module")
def critic(critic_path):
    return load_critic(critic_path, device="cpu")


def test_load_reads_names_provider_and_hash(critic, critic_path):
    import hashlib

    assert critic.provider == "CPUExecutionProvider"
    assert (critic.input_name, critic.mask_name, critic.output_name) == (
        "input_ids",
        "attention_mask",
        "values",
    )
    assert critic.max_len is None
    assert critic.sha256 == hashlib.sha256(critic_path.read_bytes()).hexdigest()


@pytest.mark.parametrize("shift", [True, False])
def test_values_match_numpy_reference(critic, shift):
    ids, offsets = make_log([5, 1, 12, 3, 7])
    got = critic.score(ids, offsets, shift=shift).values
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected(ids, offsets, shift), rtol=1e-5, atol=1e-6)


def test_first_position_is_nan_with_shift_only(critic):
    ids, offsets = make_log([4, 2])
    assert np.isnan(critic.score(ids, offsets).values[[0, 4]]).all()
    assert np.isfinite(critic.score(ids, offsets, shift=False).values).all()


def test_squeezed_output_and_other_input_names(tmp_path):
    ids, offsets = make_log([6, 2, 9])
    squeezed = tmp_path / "squeezed.onnx"
    build_critic(squeezed, WEIGHTS, squeeze=True)
    renamed = tmp_path / "renamed.onnx"
    build_critic(renamed, WEIGHTS, input_names=("tokens", "mask"), output_name="v")
    want = expected(ids, offsets)
    np.testing.assert_allclose(load_critic(squeezed).score(ids, offsets).values, want, rtol=1e-5)
    critic = load_critic(renamed)
    assert (critic.input_name, critic.mask_name, critic.output_name) == ("tokens", "mask", "v")
    np.testing.assert_allclose(critic.score(ids, offsets).values, want, rtol=1e-5)


def test_overrides_pick_the_inputs(tmp_path):
    path = tmp_path / "renamed.onnx"
    build_critic(path, WEIGHTS, input_names=("a_mask", "b_ids"))
    critic = load_critic(path, input_name="b_ids", mask_name="a_mask", output_name="values")
    assert (critic.input_name, critic.mask_name) == ("b_ids", "a_mask")
    assert load_critic(path, mask_name="a_mask").input_name == "b_ids"


def test_independent_of_batch_composition_and_order(critic):
    lens = [30, 1, 17, 0, 8, 25, 2, 13, 40, 5]
    ids, offsets = make_log(lens, seed=1)
    want = expected(ids, offsets)
    for batch_tokens in (1, 7, 64, 10**9):
        got = critic.score(ids, offsets, batch_tokens=batch_tokens).values
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # Shuffled rows give each row the same values.
    perm = np.random.default_rng(2).permutation(len(lens))
    rows = [ids[offsets[i] : offsets[i + 1]] for i in perm]
    shuffled_ids = np.concatenate(rows)
    shuffled_offsets = offsets_from_lengths(np.array([lens[i] for i in perm]))
    got = critic.score(shuffled_ids, shuffled_offsets, batch_tokens=50).values
    for j, i in enumerate(perm):
        a, b = shuffled_offsets[j], shuffled_offsets[j + 1]
        same_values(got[a:b], critic.score(rows[j], np.array([0, lens[i]])).values)
        np.testing.assert_allclose(got[a:b], want[offsets[i] : offsets[i + 1]], rtol=1e-5)


def test_batches_respect_the_token_budget(critic):
    ids, offsets = make_log([3, 10, 3, 8, 9, 3])
    calls = []
    scored = critic.score(ids, offsets, batch_tokens=20, progress=lambda d, t: calls.append((d, t)))
    # Sorted by length: [10, 9] padded to 2 x 10, [8, 3] to 2 x 8, [3, 3] to 2 x 3.
    assert calls == [(19, 36), (30, 36), (36, 36)]
    assert scored.padded_tokens == 20 + 16 + 6
    scored = critic.score(ids, offsets, batch_tokens=5)  # rows longer than the budget run alone
    assert scored.padded_tokens == 36


def test_causality(critic):
    ids, offsets = make_log([20])
    base = critic.score(ids, offsets).values
    for t in (0, 7, 19):
        changed = ids.copy()
        changed[t] = (changed[t] + 1) % 50
        got = critic.score(changed, offsets).values
        np.testing.assert_array_equal(got[: t + 1], base[: t + 1])  # values[..t] see tokens < t
        assert (got[t + 1 :] != base[t + 1 :]).all()


def test_shift_is_unshifted_moved_by_one(critic):
    ids, offsets = make_log([6, 11, 1])
    shifted = critic.score(ids, offsets).values
    unshifted = critic.score(ids, offsets, shift=False).values
    for a, b in zip(offsets[:-1], offsets[1:], strict=True):
        np.testing.assert_array_equal(shifted[a + 1 : b], unshifted[a : b - 1])


def test_empty_rows_and_no_rows(critic):
    ids, offsets = make_log([0, 3, 0, 0])
    got = critic.score(ids, offsets).values
    np.testing.assert_allclose(got, expected(ids, offsets), rtol=1e-5)
    calls = []
    none = critic.score(
        np.zeros(0, np.int64), np.zeros(1, np.int64), progress=lambda *a: calls.append(a)
    ).values
    assert none.shape == (0,) and none.dtype == np.float32 and calls == []
    assert critic.score(np.zeros(0, np.int64), np.zeros(3, np.int64)).values.shape == (0,)


def test_max_len_error_text(critic):
    ids, offsets = make_log([3, 6])
    with pytest.raises(DataError) as err:
        critic.score(ids, offsets, max_len=5)
    assert str(err.value) == (
        "row 1: column 'input_ids': row has 6 tokens, more than the critic's maximum of 5. "
        "Hint: pass `max_len_truncate='left'` to score only the last 5 tokens, "
        "or split the rollout into segments."
    )
    with pytest.raises(DataError, match=r"^log\.parquet: row 1: column 'input_ids': row has 6"):
        critic.score(ids, offsets, max_len=5, describe_row=lambda i: f"log.parquet: row {i}")


def test_truncate_left_scores_the_last_tokens(critic):
    ids, offsets = make_log([3, 9, 5])
    scored = critic.score(ids, offsets, max_len=4, truncate="left")
    got = scored.values
    assert scored.truncated_rows == 2
    for a, b in zip(offsets[:-1], offsets[1:], strict=True):
        keep = max(a, b - 4)
        alone = critic.score(ids[keep:b], np.array([0, b - keep])).values
        same_values(got[keep:b], alone)
        assert np.isnan(got[a:keep]).all()


def test_static_sequence_length_is_max_len(tmp_path):
    path = tmp_path / "static.onnx"
    build_critic(path, WEIGHTS, seq_len=8)
    critic = load_critic(path)
    assert critic.max_len == 8
    ids, offsets = make_log([8, 3, 0, 5])
    np.testing.assert_allclose(critic.score(ids, offsets).values, expected(ids, offsets), rtol=1e-5)
    ids, offsets = make_log([9])
    with pytest.raises(DataError, match="row has 9 tokens, more than the critic's maximum of 8"):
        critic.score(ids, offsets)
    got = critic.score(ids, offsets, truncate="left").values
    same_values(got[1:], critic.score(ids[1:], np.array([0, 8])).values)


def test_static_batch_and_int32_inputs(tmp_path):
    path = tmp_path / "fixed.onnx"
    build_critic(path, WEIGHTS, batch_size=2, seq_len=6, index_type=TensorProto.INT32)
    critic = load_critic(path)
    ids, offsets = make_log([6, 1, 0, 4, 2])
    scored = critic.score(ids, offsets, batch_tokens=10**6)
    np.testing.assert_allclose(scored.values, expected(ids, offsets), rtol=1e-5)
    assert scored.padded_tokens == 2 * 2 * 6  # two batches of the static [2, 6] shape


def save_model(path, inputs, outputs, nodes):
    graph = helper.make_graph(nodes, "bad", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def tensor(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


HINT = (
    "a critic takes integer token ids and attention mask [batch, seq] and returns float values "
    "[batch, seq] or [batch, seq, 1]. This model has inputs {inputs} and outputs {outputs}. "
    "Hint: choose the tensors with `input_name`, `mask_name` and `output_name`, "
    "or export the critic to this contract."
)


def test_wrong_models_are_refused_with_what_they_have(tmp_path):
    ids = tensor("ids", TensorProto.INT64, ["b", "s"])
    mask = tensor("mask", TensorProto.INT64, ["b", "s"])
    out = tensor("out", TensorProto.FLOAT, ["b", "s"])
    cast = helper.make_node("Cast", ["ids"], ["out"], to=TensorProto.FLOAT)

    one_input = save_model(tmp_path / "one.onnx", [ids], [out], [cast])
    with pytest.raises(UsageError) as err:
        load_critic(one_input)
    assert str(err.value) == f"{one_input}: the model has 1 inputs, not 2; " + HINT.format(
        inputs="ids: int64 [b, s]", outputs="out: float [b, s]"
    )

    fids = tensor("ids", TensorProto.FLOAT, ["b", "s"])
    add = helper.make_node("Add", ["ids", "mask"], ["out"])
    float_input = save_model(
        tmp_path / "float.onnx", [fids, tensor("mask", TensorProto.FLOAT, ["b", "s"])], [out], [add]
    )
    with pytest.raises(UsageError) as err:
        load_critic(float_input)
    assert str(
        err.value
    ) == f"{float_input}: input 'ids' is float, not int64 or int32; " + HINT.format(
        inputs="ids: float [b, s], mask: float [b, s]", outputs="out: float [b, s]"
    )

    out4 = tensor("out", TensorProto.FLOAT, ["b", "s", 1, 1])
    nodes = [
        helper.make_node("Add", ["ids", "mask"], ["sum"]),
        helper.make_node("Cast", ["sum"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["f", "axes"], ["out"]),
    ]
    four_d = tmp_path / "four_d.onnx"
    graph = helper.make_graph(
        nodes,
        "bad",
        [ids, mask],
        [out4],
        [onnx.numpy_helper.from_array(np.array([2, 3], dtype=np.int64), "axes")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(four_d))
    with pytest.raises(UsageError) as err:
        load_critic(four_d)
    assert str(err.value) == (
        f"{four_d}: output 'out' has shape [b, s, 1, 1], not [batch, seq] or [batch, seq, 1]; "
        + HINT.format(
            inputs="ids: int64 [b, s], mask: int64 [b, s]", outputs="out: float [b, s, 1, 1]"
        )
    )


def test_unknown_override_names(critic_path):
    with pytest.raises(UsageError, match=r"`input_name='tokens'` is not an input of the model; "):
        load_critic(critic_path, input_name="tokens")
    with pytest.raises(UsageError, match=r"`output_name='v'` is not an output of the model; "):
        load_critic(critic_path, output_name="v")
    with pytest.raises(UsageError, match=r"This model has inputs input_ids: int64 \[batch, seq\]"):
        load_critic(critic_path, mask_name="input_ids", input_name="input_ids")


def test_cuda_without_cuda_provider_is_a_usage_error(critic_path):
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has CUDA")
    with pytest.raises(UsageError) as err:
        load_critic(critic_path, device="cuda")
    providers = ", ".join(onnxruntime.get_available_providers())
    assert str(err.value) == (
        f"`device='cuda'`: this ONNX Runtime has no CUDA provider (providers: {providers}). "
        f"Hint: {installed.pip_install('gpu')} (onnxruntime-gpu, CUDA 13, NVIDIA driver R580+; "
        "on a CUDA 12 host: pip install 'onnxruntime-gpu<1.27'), in place of the onnx extra."
    )
    assert load_critic(critic_path, device="auto").provider == "CPUExecutionProvider"


def test_bad_arguments(critic, tmp_path):
    with pytest.raises(UsageError, match="`device` must be one of auto, cuda, cpu, not 'gpu'"):
        load_critic(tmp_path / "x.onnx", device="gpu")
    with pytest.raises(UsageError, match="missing.onnx'`: no such file"):
        load_critic(tmp_path / "missing.onnx")
    with pytest.raises(UsageError, match=r": a folder without a model.onnx\. Hint: give a"):
        load_critic(tmp_path)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not a model")
    with pytest.raises(UsageError, match=r"garbage\.onnx: cannot load the critic: "):
        load_critic(garbage)
    ids, offsets = make_log([2])
    with pytest.raises(UsageError, match="truncate must be 'error' or 'left'"):
        critic.score(ids, offsets, truncate="right")


def test_a_failing_run_is_a_data_error(critic):
    ids = np.array([1, 2, 50], dtype=np.int64)  # 50 is outside the vocabulary of 50
    with pytest.raises(DataError, match=r"critic\.onnx: the critic failed on a batch of 1 x 3 "):
        critic.score(ids, np.array([0, 3]))


def test_import_does_not_load_onnxruntime():
    code = "import sys, advcli.critic; print('onnxruntime' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_missing_onnxruntime_is_a_usage_error(critic_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # makes `import onnxruntime` fail
    with pytest.raises(UsageError) as err:
        load_critic(critic_path)
    assert str(err.value) == (
        f"ONNX Runtime is not installed: {installed.pip_install('onnx')} (CPU) or "
        f"{installed.pip_install('gpu')} (CUDA)"
    )


def _critic(path: Path, op: str) -> str:
    """A critic whose output is log(-id) (NaN for ids > 0) or 1 / (id - id) (infinite)."""
    ids = tensor("input_ids", TensorProto.INT64, ["b", "s"])
    mask = tensor("attention_mask", TensorProto.INT64, ["b", "s"])
    out = tensor("values", TensorProto.FLOAT, ["b", "s"])
    nodes = [helper.make_node("Cast", ["input_ids"], ["x"], to=TensorProto.FLOAT)]
    if op == "nan":
        nodes += [helper.make_node("Neg", ["x"], ["n"]), helper.make_node("Log", ["n"], ["y"])]
    else:
        nodes += [helper.make_node("Sub", ["x", "x"], ["z"]),
                  helper.make_node("Reciprocal", ["z"], ["y"])]  # fmt: skip
    mask_f = helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT)
    nodes += [mask_f, helper.make_node("Mul", ["y", "m"], ["values"])]
    return str(save_model(path, [ids, mask], [out], nodes))


@pytest.mark.parametrize("op", ["nan", "inf"])
def test_a_critic_returning_non_finite_values_is_named(small_log, tmp_path, op):
    critic = _critic(tmp_path / f"{op}.onnx", op)
    seen = "nan" if op == "nan" else "inf"
    for command in (["score", "--critic", critic],
                    ["annotate", "--method", "gae", "--critic", critic]):  # fmt: skip
        out = tmp_path / "o.parquet"
        proc = run(command[0], small_log, *command[1:], "--out", str(out))
        assert proc.returncode == 1
        assert one_line(proc).startswith(
            f"advcli: error: {small_log}: line 1, column 'input_ids': the critic returned {seen} "
            "for token 1"
        )
        assert not out.exists()
