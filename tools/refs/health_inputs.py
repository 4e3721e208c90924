"""The log every rollout-correction reference fixture is computed on (``tests/fixtures/refs/health/
log.parquet``): both log-prob streams over the same tokens, written once so that each framework's
code (``make_health_*.py``) and advcli read the same numbers.

Run (any venv with numpy and pyarrow; CI never runs it)::

    python tools/refs/health_inputs.py tests/fixtures/refs/health/log.parquet

Six groups of four rollouts (prompt ids ``p0`` … ``p5``), 1 to 14 tokens each; a prompt of 3 tokens
(action mask 0) then the response; rollouts of group ``p4`` hold an observation span (action mask 0)
inside the response, as a multi-turn rollout does; one rollout has no action token at all. δ =
trainer − sampler is drawn around 0 with spread growing by group (0.02 … 1.5), so each bound of
each mode both keeps and masks some tokens; one token carries δ = 25 (beyond verl's ±20 clamp) and
one about −25; log-probs stay below 0, so δ is cut where sampler + δ would pass it. Rewards are 0 or 1. The log-probs are float32, as engines and trainers write them.
"""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SEED = 51
GROUPS = 6
PER_GROUP = 4
PROMPT_TOKENS = 3
SPREADS = (0.02, 0.1, 0.3, 0.6, 1.0, 1.5)  # std of δ per group


def build() -> pa.Table:
    rng = np.random.default_rng(SEED)
    rows: dict[str, list[object]] = {
        k: []
        for k in ("prompt_id", "input_ids", "action_mask", "reward", "logprobs", "trainer_logprobs")
    }
    for g in range(GROUPS):
        for r in range(PER_GROUP):
            n_resp = int(rng.integers(1, 12))
            mask = [0] * PROMPT_TOKENS + [1] * n_resp
            if g == 4:  # a tool reply inside the response
                cut = PROMPT_TOKENS + n_resp // 2
                mask[cut:cut] = [0, 0]
            if g == 5 and r == 3:  # a rollout with no action token
                mask = [0] * PROMPT_TOKENS + [0] * 2
            n = len(mask)
            sampler = -rng.exponential(1.0, n).astype(np.float32)
            delta = rng.normal(0.0, SPREADS[g], n)
            if g == 5 and r == 0:  # the sampler all but ruled the token out
                sampler[PROMPT_TOKENS], delta[PROMPT_TOKENS] = -26.0, 25.0
            if g == 5 and r == 1:
                delta[PROMPT_TOKENS] = -25.0
            trainer = np.minimum(sampler + delta, -1e-3).astype(np.float32)  # log-probs are < 0
            rows["prompt_id"].append(f"p{g}")
            rows["input_ids"].append([int(t) for t in rng.integers(4, 60, n)])
            rows["action_mask"].append(mask)
            rows["reward"].append(float(rng.integers(0, 2)))
            rows["logprobs"].append(sampler.tolist())
            rows["trainer_logprobs"].append(trainer.tolist())
    schema = pa.schema(
        [
            ("prompt_id", pa.string()),
            ("input_ids", pa.list_(pa.int64())),
            ("action_mask", pa.list_(pa.int8())),
            ("reward", pa.float64()),
            ("logprobs", pa.list_(pa.float32())),
            ("trainer_logprobs", pa.list_(pa.float32())),
        ]
    )
    return pa.table(rows, schema=schema)


if __name__ == "__main__":
    pq.write_table(build(), sys.argv[1])
