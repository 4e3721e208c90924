"""Reference fixtures: what an estimator's authors' own function computed on small logs
(``tests/fixtures/refs/<source>/<function>.json``, written by ``tools/refs/make_*.py``, which
names the repository, commit and file), as advcli tables and expected advantages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

REFS = Path(__file__).resolve().parent.parent / "fixtures" / "refs"

COLUMNS = {"token_ids": "input_ids"}
"""Fixture row keys that are another advcli column."""


def cases(source: str, function: str) -> list[dict[str, Any]]:
    """The cases of one fixture, each with its ``table`` added."""
    fixture = orjson.loads((REFS / source / f"{function}.json").read_bytes())
    out = []
    for case in fixture["cases"]:
        rows = [{COLUMNS.get(k, k): v for k, v in row.items()} for row in case["rows"]]
        for row in rows:  # a fixture without tokens: one per mask entry, else one action token
            row.setdefault("input_ids", [1] * len(row.get("action_mask", [1])))
            row.setdefault("action_mask", [1] * len(row["input_ids"]))
        keys = list(dict.fromkeys(k for row in rows for k in row))  # from_pylist reads the first
        rows = [{k: row.get(k) for k in keys} for row in rows]
        out.append({**case, "table": pa.Table.from_pylist(rows)})
    return out


def ids(source: str, function: str) -> list[str]:
    return [case["name"] for case in cases(source, function)]
