"""The rows of ``tests/fixtures/refs/health/log.parquet`` as trainers lay them out, for
``make_health_verl.py`` and ``make_health_trl.py`` (each runs in its framework's venv: numpy and
pyarrow only here, no torch, no advcli).

A row is one sequence: a prompt (the leading tokens with action_mask 0, 3 in this log) then the
response, every token after the prompt. Trainers hold the response only, right-padded to the
batch's longest response, as (B, T) tensors:

- sampler (the inference engine's log-probs, advcli's ``logprobs``) and trainer (its recompute,
  advcli's ``trainer_logprobs``) over the response, padded with 0.0 (what verl's agent loop and
  TRL's ``pad`` write);
- ``response_mask``: the action mask over the response (0 on an observation span inside it and
  on padding); a row with no action token keeps its row of zeros;
- ``response_lengths``: each row's response length (TRL's ``completion_mask`` is 1 on these).

Outputs go back to advcli's order: per row, the values at its action tokens (action_mask 1,
all of them after the prompt), left to right.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

import numpy as np
import pyarrow.parquet as pq
from health_inputs import PROMPT_TOKENS  # the scripts run with tools/refs/ on sys.path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOG = os.path.join(ROOT, "tests", "fixtures", "refs", "health", "log.parquet")
OUT = os.path.join(ROOT, "tests", "fixtures", "refs", "health")


@dataclass
class Batch:
    prompt_ids: list[str]
    sampler: np.ndarray  # (B, T) float32, response only, right-padded with 0.0
    trainer: np.ndarray  # (B, T) float32
    response_mask: np.ndarray  # (B, T) int64: action tokens of the response
    response_lengths: np.ndarray  # (B,) int64
    prompt_length: int


def log_sha256() -> str:
    with open(LOG, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def read_batch() -> Batch:
    rows = pq.read_table(LOG).to_pylist()
    prompt = PROMPT_TOKENS
    lengths = np.array([len(row["action_mask"]) - prompt for row in rows], dtype=np.int64)
    width = int(lengths.max())
    shape = (len(rows), width)
    sampler, trainer = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
    mask = np.zeros(shape, np.int64)
    for i, row in enumerate(rows):
        assert not any(row["action_mask"][:prompt]), "an action token inside the prompt"
        n = lengths[i]
        sampler[i, :n] = row["logprobs"][prompt:]
        trainer[i, :n] = row["trainer_logprobs"][prompt:]
        mask[i, :n] = row["action_mask"][prompt:]
    return Batch([r["prompt_id"] for r in rows], sampler, trainer, mask, lengths, prompt)


def per_action_token(values: np.ndarray, batch: Batch, kind: type = float) -> list[list]:
    """A (B, T) array (or (B, 1), broadcast) as per-row lists over each row's action tokens."""
    values = np.broadcast_to(values, batch.response_mask.shape)
    return [[kind(v) for v in values[i][batch.response_mask[i] == 1]] for i in range(len(values))]


def action_token_counts(batch: Batch) -> list[int]:
    return [int(n) for n in batch.response_mask.sum(axis=1)]


def row_records(batch: Batch) -> list[dict]:
    """What a fixture says of each row: its prompt id, response length and action tokens."""
    return [
        {"prompt_id": p, "response_length": int(n), "action_tokens": k}
        for p, n, k in zip(
            batch.prompt_ids, batch.response_lengths, action_token_counts(batch), strict=True
        )
    ]


def write(name: str, fixture: dict) -> str:
    path = os.path.join(OUT, name)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(fixture, fh, indent=1, allow_nan=False)
        fh.write("\n")
    return path
