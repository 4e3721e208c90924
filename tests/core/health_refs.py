"""Reference fixtures of rollout correction and mismatch metrics: what each framework's own
code computed on ``tests/fixtures/refs/health/log.parquet`` (``<framework>.json`` beside it,
written by ``tools/refs/make_health_<framework>.py``, which names the version and the source's
sha256). Per case: the framework's ``setting``, advcli's ``correction`` and ``correction_bounds``,
and per precision (``float64``: compare at 1e-6; ``float32``: as the trainer ran) the weights and
masks, one list per log row over its action tokens, and the ``metrics`` as the framework returned
them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow.parquet as pq

HEALTH = Path(__file__).resolve().parent.parent / "fixtures" / "refs" / "health"
LOG = HEALTH / "log.parquet"
FRAMEWORKS = ("verl", "trl")


def fixture(framework: str) -> dict[str, Any]:
    """The whole fixture of one framework."""
    loaded: dict[str, Any] = orjson.loads((HEALTH / f"{framework}.json").read_bytes())
    return loaded


def case(framework: str, name: str) -> dict[str, Any]:
    """One case of a framework's fixture, by its ``name``."""
    return next(c for c in fixture(framework)["cases"] if c["name"] == name)


def log_rows() -> list[dict[str, Any]]:
    """The log the fixtures were computed on, one dict per row."""
    rows: list[dict[str, Any]] = pq.read_table(LOG).to_pylist()
    return rows


def deltas() -> list[np.ndarray]:
    """δ = trainer − sampler, float64, at each row's action tokens."""
    out = []
    for row in log_rows():
        on = np.asarray(row["action_mask"]) == 1
        trainer = np.asarray(row["trainer_logprobs"], np.float64)[on]
        out.append(trainer - np.asarray(row["logprobs"], np.float64)[on])
    return out
