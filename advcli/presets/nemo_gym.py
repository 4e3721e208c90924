"""NeMo-Gym's rollout collection (``ng_collect_rollouts``, ``output_jsonl_fpath``) →
``rollouts.jsonl``, one line per rollout in the order they finished.

A line has ``_ng_task_index`` (one task = one distinct input row: the group),
``_ng_rollout_index`` (its repeat, from 0), ``reward`` and the Responses API ``response``. With
the training model server (``return_token_id_information: true``) each generated message of
``response.output`` carries ``prompt_token_ids`` (the whole context before it),
``generation_token_ids`` and ``generation_log_probs``: a rollout is the first context, then per
message the context it adds (observation tokens) and its generation (action tokens). NeMo-Gym
computes no advantages; NeMo-RL trains on these rollouts, so the convention is ``nemo-rl``.
The files written beside it (``rollouts_materialized_inputs.jsonl``, ``..._failures.jsonl``,
``..._reward_profiling.jsonl``) are not rollouts and are not read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from advcli.errors import DataError, where
from advcli.io import jsonl_checks
from advcli.lazy_imports import np, pl
from advcli.presets.base import (
    Converted,
    Preset,
    PresetOptions,
    floats,
    frame,
    json_records,
    json_text,
    need,
    number,
    with_canonical,
)


class NemoGym(Preset):
    name = "nemo-gym"
    framework = "NeMo-Gym"
    switch = "ng_collect_rollouts +output_jsonl_fpath=..."
    writes = "OUTPUT_JSONL_FPATH (rollouts.jsonl)"
    patterns = ("rollouts.jsonl", "*/rollouts.jsonl")
    marks = (frozenset({"_ng_task_index", "_ng_rollout_index", "reward"}),)
    convention = "nemo-rl"

    def convert(self, path: str, options: PresetOptions) -> Converted:
        records, lines = json_records(path)
        df = frame([{k: v for k, v in r.items() if k not in NESTED} for r in records])
        need(path, set(df.columns), ["_ng_task_index", "_ng_rollout_index", "reward"],
             self.framework)  # fmt: skip
        refuse_non_numbers(path, records, lines, "reward")
        scope = Path(path).parent.name + "/"
        task = scope + indices(path, records, lines, "_ng_task_index")
        canonical: dict[str, pl.Series] = {
            "prompt_id": task,
            "rollout_id": task + ":" + indices(path, records, lines, "_ng_rollout_index"),
            "reward": number(df, "reward", path, lines),
        }
        sequences = [sequence(path, int(line), r.get("response")) for r, line in
                     zip(records, lines.tolist(), strict=True)]  # fmt: skip
        have = [s is not None for s in sequences]
        if any(have) and not all(have):
            msg = (
                f"{path}: line {lines[have.index(False)]}, column 'response': no token ids, which "
                f"line {lines[have.index(True)]} has (a model server with "
                "return_token_id_information writes them for every rollout). Hint: read the "
                "files of one server setting together"
            )
            raise DataError(msg)
        if all(have):
            for name, dtype in (("input_ids", pl.Int32), ("action_mask", pl.Int8),
                                ("logprobs", pl.Float32)):  # fmt: skip
                canonical[name] = pl.Series([s[name] for s in sequences if s is not None],
                                            dtype=pl.List(dtype))  # fmt: skip
        nested = {n: pl.Series([json_text(r.get(n)) for r in records], dtype=pl.String)
                  for n in NESTED if any(n in r for r in records)}  # fmt: skip
        return Converted(with_canonical(df.with_columns(**nested), canonical).to_arrow(), lines)


NESTED = ("responses_create_params", "response", "agent_ref")
"""Fields kept as JSON text: the request, the Responses API object (the tokens are read from
it) and the agent, nested objects of any shape."""


INT64 = (-(2**63), 2**63 - 1)


def indices(path: str, records: list[dict[str, Any]], lines: np.ndarray, key: str) -> pl.Series:
    """The task or rollout index ``key`` of every line, as text ids. NeMo-Gym writes integers;
    every index of the file is of the first's kind (an integer, or text), and an integer one
    is within int64: a float is refused, a fraction or a whole one (orjson reads an integer
    beyond 64 bits as a float, which would make two tasks one)."""
    kinds: jsonl_checks.IdKinds = {}
    ids = []
    for record, line in zip(records, lines.tolist(), strict=True):
        value = record.get(key)
        jsonl_checks.check_id_kind(path, line, key, value, kinds)
        beyond = isinstance(value, int) and not INT64[0] <= value <= INT64[1]
        if isinstance(value, float) or beyond:
            read = ", a float (as an integer beyond 64 bits is read, its last digits lost)"
            msg = (
                f"{where(path, line, key, line=True)}: an index is an integer within int64, saw "
                f"{value!r}{read if isinstance(value, float) else ''}. Hint: the index NeMo-Gym "
                "wrote"
            )
            raise DataError(msg)
        ids.append(None if value is None else str(value))
    return pl.Series(ids, dtype=pl.String)


def refuse_non_numbers(
    path: str, records: list[dict[str, Any]], lines: np.ndarray, key: str
) -> None:
    """Refuse a line whose ``key`` is not a JSON number (or null): text or a boolean, as the
    JSONL reader refuses them (read as a number, "1" and true would be 1)."""
    for record, line in zip(records, lines.tolist(), strict=True):
        value = record.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            shown = orjson.dumps(value).decode()[:60]
            msg = f"{where(path, line, key, line=True)}: expected a number, saw {shown}"
            raise DataError(f"{msg}. Hint: the {key} NeMo-Gym wrote")


def sequence(path: str, line: int, response: Any) -> dict[str, list[Any]] | None:
    """A rollout's tokens from its response's generated messages; None where no message
    carries token ids (a model server without ``return_token_id_information``)."""
    output = (response or {}).get("output") or []
    messages = [(n, m) for n, m in enumerate(output)
                if isinstance(m, dict) and m.get("generation_token_ids") is not None]  # fmt: skip
    if not messages:
        return None
    ids: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    for n, m in messages:
        context = token_ids(path, line, n, m, "prompt_token_ids")
        generated = token_ids(path, line, n, m, "generation_token_ids")
        if context[: len(ids)] != ids:
            msg = (
                f"{path}: line {line}, column 'response': a message's prompt_token_ids do not "
                "begin with the tokens before it, so its rollout is not one sequence"
            )
            raise DataError(msg)
        added = context[len(ids) :]
        given = m.get("generation_log_probs") or [np.nan] * len(generated)
        if len(given) != len(generated):
            msg = (
                f"{path}: line {line}, column 'response': a message has {len(generated)} "
                f"generation_token_ids and {len(given)} generation_log_probs"
            )
            raise DataError(msg)
        values = floats(
            given, f"{path}: line {line}, column 'response': a generation_log_probs value"
        )
        ids += added + generated
        mask += [0] * len(added) + [1] * len(generated)
        logprobs += [np.nan] * len(added) + values
    return {"input_ids": ids, "action_mask": mask, "logprobs": logprobs}


def token_ids(path: str, line: int, n: int, message: dict[str, Any], field: str) -> list[int]:
    """A generated message's ``prompt_token_ids`` or ``generation_token_ids``: a list of token
    ids. Missing or null, the message's prompt cannot be told from what it generated."""
    value = message.get(field)
    if isinstance(value, list):
        return value
    seen = "missing" if field not in message else "null" if value is None else "not a list"
    msg = (
        f"{path}: line {line}, column 'response': output message {n} carries "
        f"generation_token_ids and its {field} is {seen}, so its prompt tokens cannot be told "
        "from its generated ones. Hint: a model server with return_token_id_information "
        "writes both for every generated message"
    )
    raise DataError(msg)
