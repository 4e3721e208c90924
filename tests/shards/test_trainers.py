"""``shard --layout verl|trl``: the columns each trainer's update reads, on a worked example with
an observation inside the response, from an annotated log, and the refusals."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.conftest import read_manifest, run, write_jsonl

# One prompt of two rollouts, rewards 1 and 0: GRPO gives +-0.5 / (0.5 + 1e-6) (advcli's
# default: the population std, epsilon 1e-6). Each: 2 prompt tokens, 2 action tokens, a tool's
# output, one more action token and a closing observation.
MASK = [0, 0, 1, 1, 0, 1, 0]
LOGPROBS = [0.0, 0.0, -0.5, -1.0, 0.0, -2.0, 0.0]
A = 0.5 / (0.5 + 1e-6)


def rows() -> list[dict]:
    return [
        {"prompt_id": "p", "input_ids": [1, 2, 3, 4, 5, 6, 7], "action_mask": MASK,
         "old_logprobs": LOGPROBS, "reward": reward}
        for reward in (1.0, 0.0)
    ]  # fmt: skip


def shard(tmp_path, layout: str, *extra: str, log: str | None = None) -> list[dict]:
    log = log or write_jsonl(tmp_path / "log.jsonl", rows())
    out = tmp_path / f"shards-{layout}"
    done = run("shard", log, "--method", "grpo", "--layout", layout, "--out", str(out), *extra)
    assert done.returncode == 0, done.stderr.decode()
    assert run("verify", str(out)).returncode == 0
    return pq.read_table(out).to_pylist()


def test_verl_splits_at_the_first_action_and_keeps_the_rest_response_long(tmp_path):
    first, second = shard(tmp_path, "verl")
    assert first["prompts"] == [1, 2]
    assert first["responses"] == [3, 4, 5, 6, 7]
    assert first["response_mask"] == [1, 1, 0, 1, 0]
    assert first["attention_mask"] == [1] * 7
    assert first["position_ids"] == list(range(7))
    assert first["advantages"] == pytest.approx([A, A, 0, A, 0], rel=1e-6)
    assert second["advantages"] == pytest.approx([-A, -A, 0, -A, 0], rel=1e-6)
    assert first["returns"] == first["advantages"]  # GRPO: verl returns the advantages
    # the sampler's stream alone: verl's bypass mode, old_log_probs = rollout_log_probs
    assert first["old_log_probs"] == first["rollout_log_probs"] == [-0.5, -1.0, 0.0, -2.0, 0.0]
    assert first["prompt_id"] == "p"
    assert "input_ids" not in first and "loss_mask" not in first


def test_trl_writes_one_advantage_per_sequence_and_the_action_mask_as_tool_mask(tmp_path):
    first, second = shard(tmp_path, "trl")
    assert first["prompt_ids"] == [1, 2]
    assert first["completion_ids"] == [3, 4, 5, 6, 7]
    assert first["completion_mask"] == [1] * 5
    assert first["tool_mask"] == [1, 1, 0, 1, 0]
    assert first["advantages"] == pytest.approx(A, rel=1e-6)
    assert second["advantages"] == pytest.approx(-A, rel=1e-6)
    assert first["old_per_token_logps"] == [-0.5, -1.0, 0.0, -2.0, 0.0]
    assert first["sampling_per_token_logps"] == [-0.5, -1.0, 0.0, -2.0, 0.0]


TRAINER = [0.0, 0.0, -0.25, -1.5, 0.0, -2.5, 0.0]


@pytest.mark.parametrize(
    ("layout", "trainers", "samplers"),
    [("verl", "old_log_probs", "rollout_log_probs"),
     ("trl", "old_per_token_logps", "sampling_per_token_logps")],
)  # fmt: skip
@pytest.mark.parametrize("trainer_name", ["trainer_logprobs", "old_log_probs", "prev_logprobs"])
def test_both_streams_go_under_the_trainers_names(tmp_path, layout, trainers, samplers,
                                                  trainer_name):  # fmt: skip
    """The trainer's log-probs (by advcli's name, verl's or NeMo-RL's) are what verl's actor
    and TRL's loss read as the old policy's; the sampler's (advcli's ``old_logprobs``) go under
    the sampler's name, over the same response tokens."""
    log = [dict(r, **{trainer_name: TRAINER}) for r in rows()]
    path = write_jsonl(tmp_path / "both.jsonl", log)
    first, _ = shard(tmp_path, layout, log=path)
    assert first[trainers] == [-0.25, -1.5, 0.0, -2.5, 0.0]
    assert first[samplers] == [-0.5, -1.0, 0.0, -2.0, 0.0]
    assert trainer_name == trainers or trainer_name not in first  # a role, not passed through


def test_the_trainers_stream_alone_is_the_old_policys(tmp_path):
    log = [{k: v for k, v in r.items() if k != "old_logprobs"} | {"log_probs": TRAINER}
           for r in rows()]  # fmt: skip
    first, _ = shard(tmp_path, "verl", log=write_jsonl(tmp_path / "t.jsonl", log))
    assert first["old_log_probs"] == [-0.25, -1.5, 0.0, -2.5, 0.0]
    assert "rollout_log_probs" not in first


def test_log_probs_over_the_response_of_a_split_log_are_the_responses(tmp_path):
    split = [
        {"prompt_id": "p", "prompt_ids": [1, 2], "response_ids": [3, 4, 5],
         "response_mask": [1, 0, 1], "rollout_log_probs": [-0.25, 0.0, -0.75], "reward": r}
        for r in (1.0, 0.0)
    ]  # fmt: skip
    log = write_jsonl(tmp_path / "split.jsonl", split)
    first, _ = shard(tmp_path, "verl", log=log)
    assert first["prompts"] == [1, 2] and first["responses"] == [3, 4, 5]
    assert first["response_mask"] == [1, 0, 1]
    assert first["old_log_probs"] == first["rollout_log_probs"] == [-0.25, 0.0, -0.75]
    # verl's own names for both streams, over the response: old_log_probs the trainer's
    both = [dict(r, old_log_probs=[-0.5, 0.0, -1.25]) for r in split]
    (tmp_path / "both").mkdir()
    first, _ = shard(tmp_path / "both", "verl", log=write_jsonl(tmp_path / "both.jsonl", both))
    assert first["old_log_probs"] == [-0.5, 0.0, -1.25]
    assert first["rollout_log_probs"] == [-0.25, 0.0, -0.75]


def test_a_kept_per_token_column_covers_the_response(tmp_path):
    log = [dict(r, entropy=[9.0, 9.0, 1.0, 2.0, 3.0, 4.0, 5.0], step=7) for r in rows()]
    path = write_jsonl(tmp_path / "kept.jsonl", log)
    first, _ = shard(tmp_path, "verl", "--keep", "entropy", "--keep", "step", log=path)
    assert first["entropy"] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert first["step"] == 7


def test_an_annotated_log_shards_in_the_trl_layout(tmp_path):
    raw = write_jsonl(tmp_path / "log.jsonl", rows())
    annotated = tmp_path / "annotated.parquet"
    done = run("annotate", raw, "--method", "grpo", "--out", str(annotated))
    assert done.returncode == 0, done.stderr.decode()
    first, _ = shard(tmp_path, "trl", log=str(annotated))
    assert first["advantages"] == pytest.approx(A, rel=1e-6)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--layout", "verl", "--method", "grpo", "--pack", "64"], "--layout verl with --pack"),
        (["--layout", "trl", "--method", "grpo", "--loss-weights", "token-mean"], "loss weights"),
        (["--layout", "verl", "--method", "grpo", "--keep", "responses"], "--keep responses"),
        (["--layout", "megatron", "--method", "grpo"], "expected one of advcli, verl, trl"),
    ],
)
def test_what_a_layout_cannot_take_is_refused_in_one_line(tmp_path, args, said):
    log = write_jsonl(tmp_path / "log.jsonl", rows())
    done = run("shard", log, "--out", str(tmp_path / "out"), *args)
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert said in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def test_log_probs_of_another_length_are_refused_at_their_row(tmp_path):
    log = rows()
    log[1]["old_logprobs"] = [-1.0, -1.0]
    path = write_jsonl(tmp_path / "log.jsonl", log)
    done = run("shard", path, "--method", "grpo", "--layout", "verl", "--out", str(tmp_path / "o"))
    err = done.stderr.decode()
    assert done.returncode == 1, err
    assert "line 2" in err and "old_logprobs" in err and "2 values but 7 tokens" in err, err
    assert not (tmp_path / "o").exists()


# Runs whose advantages vary along a sequence's action tokens, each on columns it reads:
# (options, extra columns per row)
VARYING = [
    (["--method", "grpo", "--param", "entropy-coef=0.5"],
     {"entropies": [0.0, 0.0, 0.1, 0.9, 0.0, 0.4, 0.0]}),
    (["--method", "grpo", "--param", "opd-coef=0.5"],
     {"teacher_logprobs": [0.0, 0.0, -0.1, -3.0, 0.0, -0.7, 0.0]}),
    (["--method", "mc", "--param", "gamma=0.5"], {"values": [0.0] * 7}),
    (["--method", "gae"], {"values": [0.0, 0.0, 0.2, 0.7, 0.0, 0.1, 0.0]}),
]  # fmt: skip


@pytest.mark.parametrize(("args", "columns"), VARYING)
def test_trl_refuses_advantages_that_vary_along_a_sequence_whatever_gives_them(
    tmp_path, args, columns
):
    """One advantage per sequence would drop what varies (an entropy bonus, the OPD term, a
    discount): the advantages themselves are checked, row by row, not the method's name; the
    verl layout takes them."""
    log = write_jsonl(tmp_path / "log.jsonl", [dict(r, **columns) for r in rows()])
    out = tmp_path / "out"
    done = run("shard", log, "--layout", "trl", "--out", str(out), *args)
    err = done.stderr.decode()
    assert done.returncode == 2, err
    said = f"holds one advantage per sequence, and {' '.join(args[:2])}"
    assert err.startswith(f"advcli: error: {log}: line 1, column 'advantages': --layout trl {said}")
    assert "vary along the row's action tokens" in err and "Hint: --layout verl" in err
    assert err.count("\n") == 1 and not out.exists()
    done = run("shard", log, "--layout", "verl", "--out", str(out), *args)
    assert done.returncode == 0, done.stderr.decode()


CONSTANT = [
    ["--method", "reinforce-pp"],
    ["--method", "grpo", "--param", "advantage-clip-high=0.5"],
]


@pytest.mark.parametrize("args", CONSTANT)
def test_trl_takes_any_run_whose_advantages_are_one_per_sequence(tmp_path, args):
    """A per-token method whose advantages do not vary along a row (an outcome reward, no
    discount) is written, each row's value the one on its action tokens (the clamped one too)."""
    log = write_jsonl(tmp_path / "log.jsonl", rows())
    verl, trl = tmp_path / "verl", tmp_path / "trl"
    for layout, out in (("verl", verl), ("trl", trl)):
        done = run("shard", log, "--layout", layout, "--out", str(out), *args)
        assert done.returncode == 0, done.stderr.decode()
    for v, t in zip(pq.read_table(verl).to_pylist(), pq.read_table(trl).to_pylist(), strict=True):
        on_actions = {a for a, m in zip(v["advantages"], v["response_mask"], strict=True) if m}
        assert on_actions == {t["advantages"]}


# The trainer's log-probs of the worked example: ratios 3, 1 and 0.25 on its action tokens
RATIOS = [1.0, 1.0, 3.0, 1.0, 1.0, 0.25, 1.0]


def corrected_log(tmp_path) -> str:
    both = [{**row, "trainer_logprobs": [lp + float(np.log(r)) for lp, r in zip(
        LOGPROBS, RATIOS, strict=True)]} for row in rows()]  # fmt: skip
    return write_jsonl(tmp_path / "both.jsonl", both)


def test_advcli_layout_carries_the_weights_and_masks_per_token(tmp_path):
    first, _ = shard(tmp_path, "advcli", "--correction", "token-mask", "--correction-bounds",
                     "0.5,2", log=corrected_log(tmp_path))  # fmt: skip
    assert first["is_weights"] == pytest.approx([1, 1, 0, 1, 1, 0, 1], abs=1e-6)
    assert first["is_mask"] == [0, 0, 1, 0, 0, 1, 0]


def test_verl_takes_the_weights_as_rollout_is_weights_and_a_rejection_out_of_the_mask(tmp_path):
    """verl's rollout_rs drops what it rejects from response_mask; its rollout_is leaves the
    mask and weighs a masked token 0."""
    log = corrected_log(tmp_path)
    rejected, _ = shard(tmp_path, "verl", "--correction", "token-k1", "--correction-bounds", "2",
                        log=log)  # fmt: skip
    assert rejected["rollout_is_weights"] == [0, 1, 1, 0, 1]
    assert rejected["response_mask"] == [0, 1, 0, 0, 0]
    masked, _ = shard(tmp_path, "verl", "--correction", "token-mask", "--correction-bounds",
                      "0.5,2", "--force", log=log)  # fmt: skip
    assert masked["rollout_is_weights"] == pytest.approx([0, 1, 1, 0, 1], abs=1e-6)
    assert masked["response_mask"] == [1, 1, 0, 1, 0]
    assert "is_weights" not in masked and "is_mask" not in masked


def test_trl_takes_importance_sampling_ratio_per_token_or_per_sequence(tmp_path):
    """As TRL's loss multiplies it in: (B, T) for a token mode, (B, 1) for a sequence mode."""
    log = corrected_log(tmp_path)
    token, _ = shard(tmp_path, "trl", "--correction", "token_truncate", "--correction-bounds",
                     "2", log=log)  # fmt: skip
    assert token["importance_sampling_ratio"] == pytest.approx([2, 1, 1, 0.25, 1], rel=1e-6)
    sequence, _ = shard(tmp_path, "trl", "--correction", "sequence_truncate",
                        "--correction-bounds", "10", "--force", log=log)  # fmt: skip
    assert sequence["importance_sampling_ratio"] == pytest.approx(0.75, rel=1e-6)


def test_an_annotated_log_keeps_its_correction_in_every_layout(tmp_path):
    annotated = tmp_path / "annotated.parquet"
    done = run("annotate", corrected_log(tmp_path), "--method", "grpo", "--out", annotated,
               "--correction", "token-k1", "--correction-bounds", "2")  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    first, _ = shard(tmp_path, "verl", log=str(annotated))
    manifest = read_manifest(tmp_path / "shards-verl")
    assert manifest["correction"] == {"mode": "token-k1", "lo": 0.5, "hi": 2.0, "flavour": "advcli"}
    assert first["rollout_is_weights"] == [0, 1, 1, 0, 1]
    assert first["response_mask"] == [0, 1, 0, 0, 0]
    again = run("shard", annotated, "--out", tmp_path / "again", "--correction", "tis")
    assert again.returncode == 2
    assert "`convention`, `correction`" not in again.stderr.decode()  # spelled as flags
    assert "--correction and the method's parameters apply to raw logs" in again.stderr.decode()
