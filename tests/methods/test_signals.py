"""The modifiers every method takes (:mod:`advcli.methods.signals`): the advantages' clamp."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import advcli
from advcli.errors import UsageError
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
