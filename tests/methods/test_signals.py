"""The modifiers every method takes (:mod:`advcli.methods.signals`): the advantages' clamp, and
which log-prob stream the KL penalty and distillation read."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import advcli
from advcli.errors import SchemaError, UsageError
from tests.conftest import rollout


def test_advantages_are_clamped_last_per_row_and_per_token():
    """NeMo-RL's advantage_clip_low/high: the advantages (per row and on action tokens; 0
    elsewhere stays 0) clamped after the method; a low bound above the high one is refused."""
    rows = [rollout("a", r) for r in (0.0, 1.0, 1.0, 1.0)]
    table = pa.Table.from_pylist(rows)
    plain = advcli.annotate_table(table, method="grpo")
    clamped = advcli.annotate_table(table, method="grpo", advantage_clip_low=-1.0,
                                    advantage_clip_high=0.25)  # fmt: skip
    want = np.clip(plain.column("advantage").to_numpy(), -1.0, 0.25)
    assert np.allclose(clamped.column("advantage").to_numpy(), want)
    for row, adv in zip(rows, clamped.column("advantages").to_pylist(), strict=True):
        mask = np.asarray(row["action_mask"], bool)
        assert (np.asarray(adv)[~mask] == 0).all()
        assert max(adv) <= 0.25 and min(adv) >= -1.0
    above = "`advantage_clip_low=1.0` is above `advantage_clip_high=0.0`"
    with pytest.raises(UsageError, match=above):
        advcli.annotate_table(table, method="grpo", advantage_clip_low=1.0,
                              advantage_clip_high=0.0)  # fmt: skip


def _log(**streams: list[float]) -> pa.Table:
    """One rollout of three tokens, the middle one not an action, with the given per-token
    log-prob columns."""
    columns = {name: pa.array([v], pa.list_(pa.float32())) for name, v in streams.items()}
    return pa.table({
        "prompt_id": ["a"], "input_ids": pa.array([[1, 2, 3]], pa.list_(pa.int32())),
        "action_mask": pa.array([[1, 0, 1]], pa.list_(pa.int8())), "reward": [1.0], **columns,
    })  # fmt: skip


SAMPLER = [-1.0, -0.5, -2.0]
TRAINER = [-1.25, -0.5, -2.0]
REF = [-1.5, -0.5, -1.0]


@pytest.mark.parametrize(
    ("streams", "want"),
    [
        # sampler only: k1 = [0.5, ., -1.0]; rewards -0.25 and 1 + 0.5; returns 1.25, 1.5
        ({"logprobs": SAMPLER}, [1.25, 0.0, 1.5]),
        # the trainer's read where the log has it (verl's apply_kl_penalty, slime's KL):
        # k1 = [0.25, ., -1.0]; rewards -0.125 and 1.5; returns 1.375, 1.5
        ({"logprobs": SAMPLER, "trainer_logprobs": TRAINER}, [1.375, 0.0, 1.5]),
        ({"trainer_logprobs": TRAINER}, [1.375, 0.0, 1.5]),
        # verl's trainer stream by its own name, beside advcli's sampler name
        ({"old_logprobs": SAMPLER, "old_log_probs": TRAINER}, [1.375, 0.0, 1.5]),
    ],
)
def test_the_kl_penalty_reads_the_trainers_stream_where_the_log_has_it(
    streams: dict[str, list[float]], want: list[float]
) -> None:
    out = advcli.annotate_table(_log(**streams, ref_logprobs=REF), method="reinforce-pp",
                                whiten="none", kl_coef=0.5)  # fmt: skip
    assert out.column("advantages").to_pylist()[0] == pytest.approx(want, abs=1e-7)


@pytest.mark.parametrize(
    ("streams", "want"),
    [
        # teacher − sampler on the actions: [-0.5 + 1, ., -1 + 2]
        ({"logprobs": SAMPLER}, [0.5, 0.0, 1.0]),
        # teacher − trainer (NeMo-RL's OPD subtracts prev_logprobs, slime its log_probs)
        ({"logprobs": SAMPLER, "prev_logprobs": TRAINER}, [0.75, 0.0, 1.0]),
    ],
)
def test_distillation_reads_the_trainers_stream_where_the_log_has_it(
    streams: dict[str, list[float]], want: list[float]
) -> None:
    teacher = [-0.5, 0.0, -1.0]
    out = advcli.annotate_table(_log(**streams, teacher_logprobs=teacher), method="opd")
    assert out.column("advantages").to_pylist()[0] == pytest.approx(want, abs=1e-7)
    # slime's --opd-coef on grpo (a single rollout: advantage 0), A_t -= c · (policy − teacher)
    shaped = advcli.annotate_table(_log(**streams, teacher_logprobs=teacher), method="grpo",
                                   opd_coef=2.0)  # fmt: skip
    assert shaped.column("advantages").to_pylist()[0] == pytest.approx(
        [2 * w for w in want], abs=1e-7
    )


def test_a_log_without_either_stream_is_one_line_naming_both() -> None:
    with pytest.raises(
        SchemaError, match=r"no policy log-probs \('trainer_logprobs' or 'logprobs'\)"
    ):
        advcli.annotate_table(_log(ref_logprobs=REF), method="grpo", kl_coef=0.1)
