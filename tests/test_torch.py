"""``advcli.torch.collate``: shard rows padded as each trainer pads them. The verl layout against
the batch verl 0.9.1's own code built for the same rows; one real optimizer step per layout
through ``DataLoader(load_dataset(...))`` (CPU)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import advcli
from advcli.errors import UsageError
from tests.conftest import ROOT, run

if TYPE_CHECKING:
    import torch
else:
    torch = pytest.importorskip("torch")
datasets = pytest.importorskip("datasets")
collate = pytest.importorskip("advcli.torch").collate

VERL = ROOT / "tests" / "fixtures" / "real" / "verl" / "actor_batch"
SAMPLE = ROOT / "sample_data" / "rollouts.parquet"


def load(folder: Path):
    """The shard folder as HF ``datasets`` loads it (its cache beside it, not in ~/.cache)."""
    return datasets.load_dataset("parquet", data_dir=str(folder), split="train",
                                 cache_dir=str(folder.parent / ".hf-cache"))  # fmt: skip


def test_the_verl_layout_collates_to_the_batch_verls_own_code_built(tmp_path):
    truth = json.loads((VERL / "truth.json").read_text())
    verl = np.load(VERL / "batch.npz")
    out = tmp_path / "shards"
    done = run("shard", str(VERL / "rollouts.jsonl"), "--method", "grpo", "--convention", "verl",
               "--layout", "verl", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    rows = load(out)
    pad = collate(
        layout="verl",
        pad_token_id=truth["pad_token_id"],
        prompt_length=truth["prompt_length"],
        response_length=truth["response_length"],
    )
    batch = next(iter(torch.utils.data.DataLoader(rows, batch_size=len(rows), collate_fn=pad)))
    # What verl's rollout calls rollout_log_probs, its actor reads as old_log_probs where no
    # actor recomputes them (rollout_corr_helper.py: bypass mode).
    names = {"rollout_log_probs": "old_log_probs"}
    for key, dtype in truth["dtypes"].items():
        ours = batch[names.get(key, key)]
        assert str(ours.dtype) == dtype, key
        assert ours.shape == verl[key].shape, key
        if key in ("advantages", "returns"):  # ours from float64, verl's in float32
            np.testing.assert_allclose(ours.numpy(), verl[key], rtol=0, atol=1e-6, err_msg=key)
        else:
            np.testing.assert_array_equal(ours.numpy(), verl[key], err_msg=key)
    assert batch["advantages"].abs().max() > 0.5  # groups with signal are in the fixture


class Tiny(torch.nn.Module):
    """Next-token logits from an embedding and a linear layer."""

    def __init__(self, vocab: int):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, 8)
        self.out = torch.nn.Linear(8, vocab)

    def forward(self, ids):
        return self.out(self.embed(ids))


def token_logps(model, ids, targets):
    """log p(target_t | ids up to t) for every position of ``targets`` (ids ends where they do)."""
    logits = model(ids)[:, -targets.shape[1] - 1 : -1]
    return torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def policy_loss(layout: str, model, batch):
    """Each trainer's policy-gradient loss (token mean over the loss mask), as it reads a batch."""
    if layout == "verl":
        logp = token_logps(model, batch["input_ids"], batch["responses"])
        ratio = torch.exp(logp - batch["old_log_probs"])
        mask = batch["response_mask"]
        return -(batch["advantages"] * ratio * mask).sum() / mask.sum()
    if layout == "trl":
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        logp = token_logps(model, ids, batch["completion_ids"])
        ratio = torch.exp(logp - batch["old_per_token_logps"])
        mask = batch["completion_mask"] * batch["tool_mask"]
        return -(batch["advantages"].unsqueeze(1) * ratio * mask).sum() / mask.sum()
    logp = token_logps(model, batch["input_ids"], batch["input_ids"][:, 1:])
    mask = batch["loss_mask"][:, 1:]
    return -(batch["advantages"][:, 1:] * logp * mask).sum() / mask.sum()


@pytest.mark.parametrize("layout", ["advcli", "verl", "trl"])
def test_a_shard_folder_trains_one_optimizer_step(tmp_path, layout):
    out = tmp_path / "shards"
    advcli.shard(SAMPLE, out, advcli.ShardOptions(layout=layout), method="grpo")
    rows = load(out)
    loader = torch.utils.data.DataLoader(rows, batch_size=8, shuffle=False,
                                         collate_fn=collate(layout=layout))  # fmt: skip
    torch.manual_seed(0)
    model = Tiny(vocab=1 << 15)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    batch = next(iter(loader))
    loss = policy_loss(layout, model, batch)
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss)
    moved = [not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True)]
    assert all(moved)


def test_prompts_are_padded_on_the_left_and_completions_on_the_right():
    rows = [
        {"prompt_ids": [5, 6, 7], "completion_ids": [8], "completion_mask": [1],
         "tool_mask": [1], "advantages": 0.5, "prompt_id": "a"},
        {"prompt_ids": [9], "completion_ids": [10, 11, 12], "completion_mask": [1, 1, 1],
         "tool_mask": [1, 0, 1], "advantages": -0.5, "prompt_id": "b"},
    ]  # fmt: skip
    batch = collate(layout="trl", pad_token_id=0)(rows)
    assert batch["prompt_ids"].tolist() == [[5, 6, 7], [0, 0, 9]]
    assert batch["prompt_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
    assert batch["completion_ids"].tolist() == [[8, 0, 0], [10, 11, 12]]
    assert batch["completion_mask"].tolist() == [[1, 0, 0], [1, 1, 1]]
    assert batch["tool_mask"].tolist() == [[1, 1, 1], [1, 0, 1]]  # TRL pads it with 1
    assert batch["advantages"].tolist() == [0.5, -0.5]
    assert batch["advantages"].dtype == torch.float32
    assert batch["prompt_id"] == ["a", "b"]


def test_correction_weights_are_padded_as_each_trainer_reads_them():
    """TRL's ratio: (B, C) padded with 1 (exp(0) at a padded position) for a token mode, (B, 1)
    for a sequence mode; verl's rollout_is_weights and advcli's columns: 0 on padding."""
    trl = [
        {"prompt_ids": [5], "completion_ids": [8], "completion_mask": [1], "tool_mask": [1],
         "advantages": 0.5, "importance_sampling_ratio": [0.5]},
        {"prompt_ids": [9], "completion_ids": [10, 11], "completion_mask": [1, 1],
         "tool_mask": [1, 1], "advantages": -0.5, "importance_sampling_ratio": [2.0, 0.0]},
    ]  # fmt: skip
    token = collate(layout="trl")(trl)["importance_sampling_ratio"]
    assert token.tolist() == [[0.5, 1.0], [2.0, 0.0]] and token.dtype == torch.float32
    per_sequence = [
        {**row, "importance_sampling_ratio": w} for row, w in zip(trl, (0.75, 1.5), strict=True)
    ]
    assert collate(layout="trl")(per_sequence)["importance_sampling_ratio"].tolist() == [
        [0.75],
        [1.5],
    ]
    verl = [
        {"prompts": [1], "responses": [2], "response_mask": [1], "advantages": [1.0],
         "rollout_is_weights": [0.5]},
        {"prompts": [1], "responses": [2, 3], "response_mask": [1, 1], "advantages": [1.0, 1.0],
         "rollout_is_weights": [1.5, 0.0]},
    ]  # fmt: skip
    assert collate(layout="verl")(verl)["rollout_is_weights"].tolist() == [[0.5, 0], [1.5, 0]]
    own = [
        {"input_ids": [1], "loss_mask": [1], "is_weights": [0.5], "is_mask": [0]},
        {"input_ids": [1, 2], "loss_mask": [1, 1], "is_weights": [0.0, 1.0], "is_mask": [1, 0]},
    ]  # fmt: skip
    batch = collate(layout="advcli")(own)
    assert batch["is_weights"].tolist() == [[0.5, 0.0], [0.0, 1.0]]
    assert batch["is_mask"].tolist() == [[0, 0], [1, 0]] and batch["is_mask"].dtype == torch.int64


def test_an_advcli_row_pads_on_the_right_with_positions_from_the_mask():
    rows = [
        {"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1], "advantages": [0.0, 1.0, 1.0]},
        {"input_ids": [4], "loss_mask": [0], "advantages": [0.0]},
    ]
    batch = collate(pad_token_id=99)(rows)
    assert batch["input_ids"].tolist() == [[1, 2, 3], [4, 99, 99]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["position_ids"].tolist() == [[0, 1, 2], [0, 0, 0]]
    assert batch["loss_mask"].tolist() == [[0, 1, 1], [0, 0, 0]]
    assert batch["advantages"].tolist() == [[0.0, 1.0, 1.0], [0.0, 0.0, 0.0]]


@pytest.mark.parametrize(
    ("make", "rows", "said"),
    [
        (lambda: collate(layout="megatron"), [], "expected one of advcli, verl, trl"),
        (lambda: collate(layout="verl", prompt_length=1),
         [{"prompts": [1, 2], "responses": [3]}], "2 prompts tokens, more than prompt_length=1"),
        (lambda: collate(layout="verl"), [{"input_ids": [1]}], "no 'prompts' column"),
        (lambda: collate(prompt_length=4), [], "the advcli layout has no prompt"),
        (lambda: collate(layout="trl"),
         [{"prompt_ids": [1], "completion_ids": [2, 3], "tool_mask": [1]}],
         "column 'tool_mask' does not have one value per completion_ids token"),
        (lambda: collate(), [], "an empty batch"),
    ],
)  # fmt: skip
def test_what_cannot_be_padded_is_refused_with_a_hint(make, rows, said):
    with pytest.raises(UsageError, match="Hint") as raised:
        make()(rows)
    assert said in str(raised.value)


GOOD: dict[str, dict[str, Any]] = {
    "advcli": {"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1], "advantages": [0.0, 1.0, 1.0],
               "returns": [0.0, 1.0, 1.0]},
    "verl": {"prompts": [1], "responses": [2, 3], "response_mask": [1, 1],
             "advantages": [1.0, 1.0], "returns": [1.0, 1.0], "old_log_probs": [-0.5, -0.5]},
    "trl": {"prompt_ids": [1], "completion_ids": [2, 3], "completion_mask": [1, 1],
            "tool_mask": [1, 0], "advantages": 0.5, "old_per_token_logps": [-0.5, -0.5]},
}  # fmt: skip
SEQUENCE = {"advcli": "input_ids", "verl": "responses", "trl": "completion_ids"}
NUMBERS = {"advcli": "loss_weight", "verl": "old_log_probs", "trl": "old_per_token_logps"}
# (layout, column, value, said): a row no tensor can hold as it is (row 0 of the batch holds
# GOOD's row, with 0s in a column GOOD lacks)
BAD_ROWS = [
    (layout, column, value, said)
    for layout, row in GOOD.items()
    for n in [len(row[SEQUENCE[layout]])]  # tokens per row
    for column, value, said in [
        ("advantages", None, "None, expected"),
        ("advantages", "high", "expected"),
        *([] if layout == "trl" else [
            ("advantages", row["advantages"][:-1], "does not have one value per"),
            ("advantages", [1e300] * len(row["advantages"]), "beyond float32's range"),
        ]),
        *([("advantages", [0.5, 0.5], "expected one number per row"),
           ("advantages", 1e300, "beyond float32's range"),
           ("advantages", 10**400, "beyond float32's range"),
           ("advantages", float("nan"), "nan: not a finite number"),
           ("advantages", True, "expected one number per row"),
           ("advantages", "0.5", "expected one number per row")] if layout == "trl" else [
            ("returns", [float("nan")] * n, "nan at token 0: not a finite number"),
            ("advantages", [None] * n, "nan at token 0: not a finite number"),
            ("advantages", ["0.5"] * n, "expected a list of finite numbers"),
        ]),
        (next(iter(row)), [2**64, 1], "value 18446744073709551616 at token 0: token ids are"),
        (next(iter(row)), [10**400, 1], "token ids are integers from 0 within int64"),
        (next(iter(row)), [[1], [1, 2]], "expected a list of token ids"),
        (next(iter(row)), [-1, 1], "value -1 at token 0: token ids are integers from 0"),
        (next(iter(row)), [1.5, 1], "expected a list of token ids"),
        (next(iter(row)), [1, None], "expected a list of token ids"),
        ({"advcli": "loss_mask", "verl": "response_mask", "trl": "tool_mask"}[layout],
         [300] + [1] * (len(row[next(iter(row))]) - 1 if layout == "advcli" else 1),
         "value 300 at token 0: a mask holds only 0 and 1"),
        ("returns" if layout != "trl" else "old_per_token_logps", "missing", "missing"),
        (NUMBERS[layout], [0.5] * (n - 1) + [10**400], f"at token {n - 1}: beyond float32's"),
        (NUMBERS[layout], [[0.5], [0.5, 0.1]] + [0.5] * (n - 2), "expected a list of numbers"),
        # any other column of numbers, one per token or one per row, that no tensor holds
        ("extra", [0] * (n - 1) + [10**400], f"at token {n - 1}: beyond float32's range"),
        ("extra", 10**400, "beyond int64"),
        ("extra", 2**63, "beyond int64"),
    ]
]  # fmt: skip


@pytest.mark.parametrize(
    ("layout", "column", "value", "said"), BAD_ROWS, ids=[f"{r[0]}-{r[1]}-{r[3]}" for r in BAD_ROWS]
)
def test_a_row_no_tensor_can_hold_is_refused_naming_its_row_and_column(layout, column, value, said):
    """Never a list where a tensor is due, an OverflowError, nor an id or a value cast into
    another: one UsageError naming the row of the batch and the column."""
    good, bad = dict(GOOD[layout]), dict(GOOD[layout])
    good.setdefault(column, [0] * len(value) if isinstance(value, list) else 0)
    if value == "missing":
        del bad[column]
    else:
        bad[column] = value
    with pytest.raises(UsageError, match="Hint") as raised:
        collate(layout=layout)([good, bad])
    message = str(raised.value)
    assert f"row 1 of the batch, column {column!r}" in message and said in message, message


@pytest.mark.parametrize(
    "value", [[[1], [1, 2]], [[1, 2], [3, 4]], ["a", "b"], "ab", {"a": 1}, [1, "a"], [1, None, 2]]
)
def test_a_column_of_anything_else_than_numbers_is_passed_on_as_a_list(value):
    """Neither a list of numbers with one per token nor a number: nested or ragged lists, text,
    dicts, numbers not one per token."""
    row = dict(GOOD["verl"], extra=value)
    batch = collate(layout="verl")([row, row])
    assert batch["extra"] == [value, value]


@pytest.mark.parametrize("layout", ["verl", "trl"])
def test_padded_lengths_are_bounded_by_the_tokens_a_row_may_hold(layout, monkeypatch):
    """A length asked for (1e18) or a row longer than ADVCLI_MAX_ROW_TOKENS is refused before
    memory is taken; the variable raises the bound."""
    with pytest.raises(UsageError, match="more than the 33,554,432 tokens a row may hold"):
        collate(layout=layout, response_length=10**18)
    with pytest.raises(UsageError, match="pad_token_id"):
        collate(layout=layout, pad_token_id=2**70)
    monkeypatch.setenv("ADVCLI_MAX_ROW_TOKENS", "1")
    with pytest.raises(UsageError, match="ADVCLI_MAX_ROW_TOKENS"):
        collate(layout=layout, response_length=2)
    with pytest.raises(UsageError, match="row 0 of the batch has 2 .* the 1 a row may hold"):
        collate(layout=layout)([GOOD[layout]])
    monkeypatch.setenv("ADVCLI_MAX_ROW_TOKENS", "4")
    batch = collate(layout=layout, response_length=4)([GOOD[layout]])
    assert batch["advantages"].shape == ((1, 4) if layout == "verl" else (1,))
    monkeypatch.setenv("ADVCLI_MAX_ROW_TOKENS", "lots")
    with pytest.raises(UsageError, match="ADVCLI_MAX_ROW_TOKENS='lots': expected a number"):
        collate(layout=layout, response_length=4)


def test_a_null_among_numbers_is_nan_no_value():
    """A shard holds the logged log-probs off action tokens as they came, nulls too."""
    row = dict(GOOD["verl"], old_log_probs=[-0.5, None])
    batch = collate(layout="verl")([row, GOOD["verl"]])
    assert batch["old_log_probs"][0, 0] == -0.5 and torch.isnan(batch["old_log_probs"][0, 1])


@pytest.mark.parametrize(
    ("layout", "sampler"), [("verl", "rollout_log_probs"), ("trl", "sampling_per_token_logps")]
)
def test_the_samplers_stream_is_padded_beside_the_trainers(layout: str, sampler: str) -> None:
    """Rows of 2 and 1 response tokens: the sampler's log-probs right-padded with 0 as the
    trainer's, float32; one that is not a number refused at its row and column."""
    prompt = {"prompts", "prompt_ids"}
    short = {k: v[:1] for k, v in GOOD[layout].items() if isinstance(v, list) and k not in prompt}
    rows = [
        dict(GOOD[layout], **{sampler: [-0.25, -0.75]}),
        dict(GOOD[layout], **short, **{sampler: [-1.5]}),
    ]
    batch = collate(layout=layout)(rows)
    assert batch[sampler].dtype == torch.float32
    assert batch[sampler].tolist() == [[-0.25, -0.75], [-1.5, 0.0]]
    assert batch[NUMBERS[layout]].tolist() == [[-0.5, -0.5], [-0.5, 0.0]]
    with pytest.raises(UsageError, match=f"column '{sampler}'"):
        collate(layout=layout)([dict(GOOD[layout], **{sampler: ["x", "y"]})])
