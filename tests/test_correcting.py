"""``annotate --correction``: the weights and masks written per token equal the core's
:func:`~advcli.core.correction.corrected` and a float64 loop, for every mode; the options
resolve to each framework's defaults; bad options and logs are one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import advcli
from advcli.core.correction import (
    DEFAULT_HI,
    MODES,
    TRL_DEFAULT_HI,
    Correction,
    corrected,
    mode_named,
)
from advcli.errors import SchemaError, UsageError
from advcli.run.correcting import correction_of
from advcli.shards import ShardOptions
from tests.conftest import SAMPLE, metadata_of, one_line, run
from tests.core.health_refs import case
from tests.core.test_correction import (
    BOUNDS,
    LOG,
    REJECT_HI,
    framework_cases,
    health_log,
    loop,
    per_action_token,
)


def bounds_of(name: str) -> str:
    """Bounds that keep some tokens of the health log and mask others, per mode (those of the
    core's tests)."""
    mode = MODES[name]
    if mode.kind == "reject":
        hi = REJECT_HI[mode.statistic or ""] * (4 if mode.reduce == "sum" else 1)
        return f"{1 / hi!r},{hi!r}" if mode.statistic == "k1" else repr(hi)
    lo, hi = BOUNDS[mode.kind]
    return f"{lo!r},{hi!r}"


def written(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The flat ``is_weights`` and ``is_mask`` of an annotated Parquet file."""
    table = pq.read_table(path)
    weights = table.column("is_weights").combine_chunks()
    masks = table.column("is_mask").combine_chunks()
    assert weights.type.value_type == pa.float32() and masks.type.value_type == pa.int8()
    return weights.values.to_numpy(), masks.values.to_numpy()


@pytest.mark.parametrize("name", list(MODES))
def test_every_mode_writes_the_cores_weights_and_the_loops(tmp_path: Path, name: str) -> None:
    out = tmp_path / "a.parquet"
    bounds = bounds_of(name)
    result = advcli.annotate(LOG, out, method="grpo", correction=name, correction_bounds=bounds)
    weights, masks = written(out)
    trainer, sampler, action, offsets = health_log()
    lo, hi = (float(x) for x in bounds.split(",")) if "," in bounds else (0.0, float(bounds))
    if MODES[name].statistic == "k1" and "," not in bounds:
        lo = 1 / hi
    c = Correction(MODES[name], lo, hi)
    core = corrected(trainer, sampler, action, offsets, c)
    np.testing.assert_array_equal(weights, core.weights.astype(np.float32))
    np.testing.assert_array_equal(masks, core.masked.astype(np.int8))
    loop_weights, loop_masked = loop(trainer, sampler, action, offsets, c)
    np.testing.assert_allclose(weights, loop_weights, rtol=1e-6, atol=0)
    np.testing.assert_array_equal(masks.astype(bool), loop_masked)
    assert 0 < masks.sum() < action.sum() or MODES[name].kind == "truncate"
    row_masked = np.add.reduceat(masks, offsets[:-1]) > 0
    assert result.correction == {
        "mode": name, "lo": lo, "hi": hi, "flavour": "advcli",
        "tokens_masked": int(masks.sum()), "rows_masked": int(row_masked.sum()),
    }  # fmt: skip
    assert metadata_of(out)["correction"] == {"mode": name, "lo": lo, "hi": hi,
                                              "flavour": "advcli"}  # fmt: skip


def test_the_command_line_writes_what_the_api_does(tmp_path: Path) -> None:
    """A worked case through the command: token-mask in [0.9, 1.1]: a kept action token
    weighs its own ratio, a masked one 0, the others 1."""
    out = tmp_path / "a.parquet"
    proc = run("annotate", LOG, "--method", "grpo", "--out", out, "--correction", "token_mask",
               "--correction-bounds", "0.9,1.1", "-q")  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    weights, masks = written(out)
    trainer, sampler, action, _ = health_log()
    ratio = np.exp(trainer - sampler)
    inside = (ratio >= 0.9) & (ratio <= 1.1)
    np.testing.assert_array_equal(masks, (action & ~inside).astype(np.int8))
    expected = np.where(action, np.where(inside, ratio, 0.0), 1.0)
    np.testing.assert_allclose(weights, expected, rtol=1e-6)
    assert (weights[~action] == 1).all() and 0 < masks.sum() < action.sum()


@pytest.mark.parametrize(
    ("convention", "flavour", "hi"),
    [
        (None, "advcli", DEFAULT_HI),
        ("verl", "verl", DEFAULT_HI),
        ("trl", "trl", TRL_DEFAULT_HI),
        ("nemo-rl", "nemo-rl", DEFAULT_HI),
        ("slime", "miles", DEFAULT_HI),
        ("miles", "miles", DEFAULT_HI),
        ("openrlhf", "advcli", DEFAULT_HI),
    ],
)
def test_the_convention_gives_the_frameworks_arithmetic_and_cap(
    convention: str | None, flavour: str, hi: float
) -> None:
    c = correction_of("token-truncate", None, convention)
    assert c == Correction(MODES["token-truncate"], 0.0, hi, flavour)


def test_bounds_resolve_as_each_mode_takes_them() -> None:
    assert correction_of("icepop", "0.5,3", None) == Correction(MODES["token-mask"], 0.5, 3.0)
    assert correction_of("tis", "1.5", "verl") == Correction(
        MODES["token-truncate"], 0.0, 1.5, "verl"
    )
    k1 = correction_of("seq_mean_k1", "2", "verl")
    assert k1 == Correction(MODES["seq-mean-k1"], 0.5, 2.0, "verl")  # verl's LO: 1 / HI
    assert correction_of(None, None, "verl") is None


def test_from_carries_the_frameworks_flavour(tmp_path: Path) -> None:
    """``--from verl`` reads verl's dump under verl's convention, so its arithmetic too (its
    rollout dump records no rollout_corr settings: the bounds stay advcli's defaults)."""
    log = str(SAMPLE / "verl" / "rollout")
    job = advcli.run.jobs.job([log], preset="verl", method="grpo", correction="token-mask")
    assert job.correction == Correction(MODES["token-mask"], 0.0, DEFAULT_HI, "verl")


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        (["--correction", "tokn-mask"],
         "--correction tokn-mask: expected one of token-truncate, token-mask"),
        (["--correction", "tokn-mask"], "Did you mean 'token-mask'?"),
        (["--correction-bounds", "2"], "--correction-bounds bound a correction: add --correction"),
        (["--correction", "token-mask", "--correction-bounds", "2,1"],
         "--correction-bounds 2,1 for token-mask: the lower bound must be from 0 to the upper"),
        (["--correction", "token-mask", "--correction-bounds", "a,b"],
         "--correction-bounds a,b: expected HI or LO,HI"),
        (["--correction", "token-mask", "--correction-bounds", "0"],
         "the upper bound must be a positive number"),
        (["--correction", "token-k2", "--correction-bounds", "0.1,2"],
         "--correction-bounds 0.1,2 for token-k2: token-k2 takes one bound"),
        (["--correction", "seq-sum-k3"],
         "--correction seq-sum-k3 rejects by a threshold with no default"),
    ],
)  # fmt: skip
def test_bad_options_are_one_line_exit_2(tmp_path: Path, options: list[str], needle: str) -> None:
    out = tmp_path / "a.parquet"
    proc = run("annotate", LOG, "--method", "grpo", "--out", out, *options)
    assert proc.returncode == 2 and needle in one_line(proc)
    assert not out.exists()


def test_a_log_without_the_trainers_stream_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "a.parquet"
    proc = run("annotate", SAMPLE / "rollouts.parquet", "--method", "grpo", "--out", out,
               "--correction", "token-truncate")  # fmt: skip
    line = one_line(proc)
    assert proc.returncode == 1 and not out.exists()
    assert "--correction weighs the trainer's log-probs against the sampler's" in line
    assert "no 'trainer_logprobs' column" in line and "--col trainer_logprobs=COLUMN" in line
    log = tmp_path / "one_stream.parquet"
    pq.write_table(pq.read_table(LOG).drop_columns(["logprobs"]), log)
    with pytest.raises(SchemaError, match=r"no 'logprobs' column \(the sampler's"):
        advcli.annotate(log, out, method="grpo", correction="tis")


def test_a_log_without_token_ids_is_refused(tmp_path: Path) -> None:
    table = pq.read_table(LOG).drop_columns(["input_ids"])
    log = tmp_path / "ids.parquet"
    pq.write_table(table, log)
    with pytest.raises(SchemaError, match="`correction` needs token ids"):
        advcli.annotate(log, tmp_path / "a.parquet", method="grpo", correction="tis")


def test_an_unknown_mode_from_python_names_the_keyword(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"`correction='tis2'`: expected one of"):
        advcli.annotate(LOG, tmp_path / "a.parquet", method="grpo", correction="tis2")


def test_rows_the_method_drops_take_their_weights_along(tmp_path: Path) -> None:
    """A dropped row leaves with its tokens' weights: the rows written line up."""
    table = pq.read_table(LOG)
    ties = pa.array([1.0 if p == "p0" else r for p, r in  # group p0 all correct: dropped
                     zip(table["prompt_id"].to_pylist(), table["reward"].to_pylist(),
                         strict=True)])  # fmt: skip
    log = tmp_path / "ties.parquet"
    pq.write_table(table.set_column(table.schema.get_field_index("reward"), "reward", ties), log)
    full, dropped = tmp_path / "full.parquet", tmp_path / "dropped.parquet"
    kw = {"method": "grpo", "correction": "sequence-mask", "correction_bounds": "0.9,1.1"}
    advcli.annotate(log, full, **kw)
    advcli.annotate(log, dropped, zero_variance="drop", **kw)
    a, b = pq.read_table(full), pq.read_table(dropped)
    kept = {tuple(r): i for i, r in enumerate(a.column("input_ids").to_pylist())}
    for row, weights in zip(b.column("input_ids").to_pylist(),
                            b.column("is_weights").to_pylist(), strict=True):  # fmt: skip
        assert weights == a.column("is_weights")[kept[tuple(row)]].as_py()
    assert b.num_rows < a.num_rows


CONVENTION = {"verl": "verl", "trl": "trl", "nemo_rl": "nemo-rl", "miles": "miles"}


def given_bounds(ref: dict[str, Any]) -> str:
    """A fixture's bounds as ``correction_bounds`` spells them (HI alone for k2 and k3)."""
    mode = mode_named(ref["advcli"]["correction"])
    assert mode is not None
    lo, hi = ref["advcli"]["correction_bounds"]
    return f"{lo!r},{hi!r}" if mode.two_sided else repr(hi)


def on_actions(table: pa.Table, name: str, action: np.ndarray, offsets: np.ndarray) -> list:
    flat = table.column(name).combine_chunks().values.to_numpy().astype(np.float64)
    return per_action_token(flat, action, offsets)


@pytest.mark.parametrize(
    ("framework", "name"),
    [(f, c["name"]) for f in CONVENTION for c in framework_cases(f)],
)
def test_annotate_writes_each_frameworks_own_weights(
    tmp_path: Path, framework: str, name: str
) -> None:
    """``annotate --convention F --correction M --correction-bounds LO,HI`` against verl's
    rollout_corr_helper, TRL's GRPOTrainer, NeMo-RL's ClippedPGLossFn and miles' TIS functions
    run on the same log (their float64 outputs, tools/refs/make_health_*.py), within 1e-6."""
    ref = case(framework, name)
    out = tmp_path / "a.parquet"
    advcli.annotate(LOG, out, method="grpo", convention=CONVENTION[framework],
                    correction=ref["advcli"]["correction"],
                    correction_bounds=given_bounds(ref))  # fmt: skip
    _, _, action, offsets = health_log()
    table = pq.read_table(out)
    weights = on_actions(table, "is_weights", action, offsets)
    masked = on_actions(table, "is_mask", action, offsets)
    want = ref["float64"]
    mode = mode_named(ref["advcli"]["correction"])
    assert mode is not None
    if framework in ("nemo_rl", "miles"):
        expected, want_masked = want["is_weights"], want["is_mask"]
    elif framework == "trl":
        expected = want["importance_sampling_ratio"]
        if mode.level == "sequence":  # TRL keeps one ratio per row
            expected = [[w] * len(row) for w, row in zip(expected, weights, strict=True)]
        want_masked = [[float(w == 0) for w in row] for row in expected]
    elif mode.kind == "reject":  # verl rejects by zeroing its response mask
        expected = want["response_mask"]
        want_masked = [[1.0 - k for k in row] for row in expected]
    else:
        expected = want["rollout_is_weights"]
        want_masked = [[float(w == 0) for w in row] for row in expected]
    for got_row, want_row in zip(weights, expected, strict=True):
        np.testing.assert_allclose(got_row, want_row, rtol=1e-6, atol=1e-12)
    if mode.kind != "truncate":
        for got_row, want_row in zip(masked, want_masked, strict=True):
            np.testing.assert_array_equal(got_row, want_row)


def test_trls_convention_carries_its_cap(tmp_path: Path) -> None:
    """Under TRL's convention, no bounds: TRL's default vllm_importance_sampling_clip_max, 3."""
    ref = case("trl", "token_truncate")
    out = tmp_path / "a.parquet"
    advcli.annotate(LOG, out, method="grpo", convention="trl", correction="token_truncate")
    _, _, action, offsets = health_log()
    weights = on_actions(pq.read_table(out), "is_weights", action, offsets)
    for got_row, want_row in zip(weights, ref["float64"]["importance_sampling_ratio"],
                                 strict=True):  # fmt: skip
        np.testing.assert_allclose(got_row, want_row, rtol=1e-6)


def response_actions(mask: list[int]) -> np.ndarray:
    """Which tokens of a row's response (from its first action token) are actions."""
    first = mask.index(1) if 1 in mask else len(mask)  # a row without actions: no response
    return np.asarray(mask[first:], dtype=bool)


@pytest.mark.parametrize("name", [c["name"] for c in framework_cases("verl")])
def test_the_verl_layout_holds_what_verls_own_code_gives(tmp_path: Path, name: str) -> None:
    """``shard --layout verl``: ``rollout_is_weights`` as verl's rollout_is gives them, and a
    rejection mode's ``response_mask`` as verl's rollout_rs leaves it."""
    ref = case("verl", name)
    out = tmp_path / "shards"
    advcli.shard(LOG, out, ShardOptions(layout="verl"), method="grpo", convention="verl",
                 correction=ref["advcli"]["correction"],
                 correction_bounds=given_bounds(ref))  # fmt: skip
    table = pq.read_table(out)
    _, _, action, _ = health_log()
    log_masks = pq.read_table(LOG).column("action_mask").to_pylist()
    mode = mode_named(ref["advcli"]["correction"])
    assert mode is not None
    want = ref["float64"]
    for i, mask in enumerate(log_masks):
        acting = response_actions(mask)
        weights = np.asarray(table.column("rollout_is_weights")[i].as_py())[acting]
        response_mask = np.asarray(table.column("response_mask")[i].as_py())[acting]
        if mode.kind == "reject":
            np.testing.assert_array_equal(response_mask, want["response_mask"][i])
            assert (weights == np.asarray(want["response_mask"][i])).all()
        else:
            np.testing.assert_allclose(weights, want["rollout_is_weights"][i], rtol=1e-6)
            assert (response_mask == 1).all()
    assert action.any()


@pytest.mark.parametrize("name", [c["name"] for c in framework_cases("trl")])
def test_the_trl_layout_holds_trls_own_ratio(tmp_path: Path, name: str) -> None:
    """``shard --layout trl``: ``importance_sampling_ratio`` as GRPOTrainer computes it, per
    completion token or one per sequence."""
    ref = case("trl", name)
    out = tmp_path / "shards"
    advcli.shard(LOG, out, ShardOptions(layout="trl"), method="grpo", convention="trl",
                 correction=ref["advcli"]["correction"],
                 correction_bounds=given_bounds(ref))  # fmt: skip
    ratio = pq.read_table(out).column("importance_sampling_ratio").to_pylist()
    want = ref["float64"]["importance_sampling_ratio"]
    log_masks = pq.read_table(LOG).column("action_mask").to_pylist()
    for row, expected, mask in zip(ratio, want, log_masks, strict=True):
        if isinstance(row, list):
            acting = response_actions(mask)
            np.testing.assert_allclose(np.asarray(row)[acting], expected, rtol=1e-6)
        else:
            assert row == pytest.approx(expected, rel=1e-6)


def test_a_split_log_gets_its_weights_over_the_response(tmp_path: Path) -> None:
    """A ``prompt_ids`` + ``response_ids`` log: the weights and masks written over the response,
    as its log-probs are (the prompt's weights of 1 left out, as its advantages of 0 are)."""
    whole = pq.read_table(LOG).to_pylist()
    rows = []
    for r in whole:
        mask = r["action_mask"]
        first = mask.index(1) if 1 in mask else len(mask)
        if 0 in mask[first:]:
            continue  # an observation inside the response: the split layout has no such mask
        rows.append({"prompt_id": r["prompt_id"], "prompt_ids": r["input_ids"][:first],
                     "response_ids": r["input_ids"][first:], "reward": r["reward"],
                     "logprobs": r["logprobs"][first:],
                     "trainer_logprobs": r["trainer_logprobs"][first:]})  # fmt: skip
    split = tmp_path / "split.parquet"
    pq.write_table(pa.Table.from_pylist(rows), split)
    kw = {"method": "grpo", "correction": "token-mask", "correction_bounds": "0.9,1.1"}
    advcli.annotate(split, tmp_path / "out.parquet", **kw)
    out = pq.read_table(tmp_path / "out.parquet")
    for row, weights, masks in zip(rows, out["is_weights"].to_pylist(),
                                   out["is_mask"].to_pylist(), strict=True):  # fmt: skip
        ratio = np.exp(np.float64(row["trainer_logprobs"]) - np.float64(row["logprobs"]))
        inside = (ratio >= 0.9) & (ratio <= 1.1)
        assert masks == (~inside).astype(int).tolist()
        np.testing.assert_allclose(weights, np.where(inside, ratio, 0.0), rtol=1e-6)
    assert sum(map(sum, out["is_mask"].to_pylist())) > 0


def test_a_table_in_memory_takes_a_correction_too(tmp_path: Path) -> None:
    on_disk = tmp_path / "a.parquet"
    kw: dict[str, Any] = {"correction": "seq-mask-tis", "correction_bounds": "0.8,1.25"}
    advcli.annotate(LOG, on_disk, method="grpo", **kw)
    in_memory = advcli.annotate_table(pq.read_table(LOG), method="grpo", **kw)
    for name in ("is_weights", "is_mask"):
        assert in_memory[name].to_pylist() == pq.read_table(on_disk)[name].to_pylist()
