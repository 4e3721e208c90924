"""The samples of a slime or miles rollout dump (:mod:`advcli.presets.slime`): their fields
checked and typed, each refused in one line naming the file, the sample and the field; the
samples as a table; a field advcli does not read passed through as a column.
"""

from __future__ import annotations

import reprlib
from typing import Any

import orjson

from advcli.errors import DataError, UsageError, where
from advcli.io.arrow import list_array
from advcli.io.sources import Sources
from advcli.lazy_imports import np, pa, pc
from advcli.presets.base import PresetOptions

PER_TOKEN = {"rollout_log_probs": "logprobs", "teacher_log_probs": "teacher_logprobs"}
"""Per-response-token fields, and the advcli column each becomes (0 over the prompt)."""
OWN = ("group_index", "index", "rollout_id", "tokens", "loss_mask", "reward", "status",
       *PER_TOKEN)  # fields that become advcli's columns  # fmt: skip


def bad_field(path: str, row: int | None, field: str, problem: str) -> DataError:
    """A sample's field refused: one line naming the file, the sample and the field."""
    return DataError(f"{where(path, row, field)}: {problem}. Hint: check the file")


_shown = reprlib.Repr()
_shown.maxstring = _shown.maxother = 40


def shown(value: Any) -> str:
    """``value`` in a message: short, however large or deep (a file may share one value many
    times over)."""
    try:
        return _shown.repr(value)
    except ValueError:  # an integer of more digits than Python converts
        return type(value).__name__


def _python(value: Any) -> Any:
    """A numpy scalar, or a tensor of one value (a 0-d array), as the Python number it holds."""
    return value.item() if isinstance(value, np.ndarray | np.generic) and not value.shape else value


def integer(path: str, row: int | None, field: str, value: Any) -> int:
    """An id or count: a 64-bit integer, or a whole float (as the JSONL reader takes ids)."""
    number = _python(value)
    if type(number) is float and number.is_integer():
        number = int(number)
    if type(number) is not int or not -(1 << 63) <= number < 1 << 63:
        raise bad_field(path, row, field, f"expected an integer, saw {shown(value)}")
    return number


def rollout_id(path: str, row: int | None, field: str, value: Any) -> int | str:
    """A rollout id: text, or an :func:`integer`."""
    return value if isinstance(value, str) else integer(path, row, field, value)


def array_of(path: str, row: int | None, field: str, values: Any, kinds: str) -> np.ndarray:
    """A list (or array) of ``values``, each of one of the numpy ``kinds``, as a flat array."""
    array = None
    if isinstance(values, np.ndarray):
        array = values.ravel()
    elif isinstance(values, list | tuple):
        try:  # Arrow, not numpy: [1, 2.5] stays double, [True, 2] is refused
            arrow = pa.array(values)
            if not arrow.null_count and not pa.types.is_nested(arrow.type):
                array = arrow.to_numpy(zero_copy_only=False)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            pass
    if array is not None and (len(array) == 0 or array.dtype.kind in kinds):
        return array
    what = "64-bit integers" if kinds == "iu" else "numbers"
    raise bad_field(path, row, field, f"expected a list of {what}, saw {shown(values)}")


def numbers(path: str, row: int | None, field: str, values: Any) -> np.ndarray:
    """A list (or array) of numbers, as float64."""
    return array_of(path, row, field, values, "biuf").astype(np.float64)


def mask_of(path: str, row: int, field: str, values: Any) -> np.ndarray:
    """A loss mask (a list or array of 0s and 1s, or booleans) as booleans; any other value
    (NaN, -1, 0.5, 2) refused at its token, as every layout's mask is
    (:func:`advcli.io.tokens.mask_flags`)."""
    from advcli.io.rollouts import Checker  # here: the log readers, which --help never needs
    from advcli.io.tokens import mask_flags

    given = array_of(path, row, field, values, "biuf")
    check = Checker(pa.table({}), Sources([path], [row + 1]), row0=row)  # the sample's row
    return mask_flags(check, field, pa.array(given), np.array([0, len(given)]))


def token_ids(path: str, row: int | None, field: str, values: Any) -> np.ndarray:
    """Token ids: vocabulary indices (integers, not floats: the Parquet and JSONL readers
    refuse those too), from 0 to 2^31 - 1, as int32."""
    ids = array_of(path, row, field, values, "iu")
    bad = np.flatnonzero((ids < 0) | (ids > np.iinfo(np.int32).max))
    if len(bad):
        k = int(bad[0])
        what = "negative" if ids[k] < 0 else "beyond 2^31 - 1"
        msg = f"{where(path, row, field)}: token id {ids[k]} is {what} at token {k}"
        raise DataError(msg + ". Hint: token ids are vocabulary indices, 0 or more")
    return ids.astype(np.int32)


def checked_samples(path: str, samples: list[Any]) -> list[dict[str, Any]]:
    """The rollout dump's samples, with the fields advcli reads checked and typed: ids and
    counts integers (a whole float too, as the JSONL reader takes ids), ``tokens`` 32-bit
    vocabulary indices, ``loss_mask`` 0s and 1s (all 1 where it is missing) and the per-token
    values numbers, one per response token."""
    checked = []
    for row, s in enumerate(samples):
        if not isinstance(s, dict) or not all(type(k) is str for k in s):
            raise bad_field(path, row, "samples", f"expected a dict of fields, saw {shown(s)}")
        for name in ("group_index", "index", "tokens", "response_length", "reward"):
            if s.get(name) is None:
                raise bad_field(path, row, name, f"no '{name}', which a slime sample has")
        tokens = token_ids(path, row, "tokens", s["tokens"])
        n_resp = integer(path, row, "response_length", s["response_length"])
        if not 0 <= n_resp <= len(tokens):  # before a mask of that length is made
            problem = f"response_length {n_resp} is not within the row's {len(tokens)} tokens"
            raise bad_field(path, row, "response_length", problem)
        loss = s.get("loss_mask")
        loss = np.ones(n_resp, bool) if loss is None else mask_of(path, row, "loss_mask", loss)
        if len(loss) != n_resp or n_resp > len(tokens):
            problem = (
                f"loss_mask has {len(loss)} entries, response_length is {n_resp} and tokens "
                f"has {len(tokens)}: the mask covers the response, at the end of the tokens"
            )
            raise bad_field(path, row, "loss_mask", problem)
        sample = {**s, "tokens": tokens, "response_length": n_resp, "loss_mask": loss}
        for name in ("group_index", "index"):
            sample[name] = integer(path, row, name, s[name])
        if s.get("rollout_id") is not None:
            sample["rollout_id"] = rollout_id(path, row, "rollout_id", s["rollout_id"])
        if not isinstance(s.get("status", ""), str | None):
            raise bad_field(path, row, "status", f"expected text, saw {shown(s['status'])}")
        for name in PER_TOKEN:
            if s.get(name) is not None:
                sample[name] = numbers(path, row, name, s[name])
                if len(sample[name]) != n_resp:
                    problem = f"{name} has {len(sample[name])} entries for {n_resp} response tokens"
                    raise bad_field(path, row, name, problem)
        checked.append(sample)
    return checked


def samples_table(path: str, samples: list[dict[str, Any]], options: PresetOptions) -> pa.Table:
    """The table of :func:`checked_samples`."""
    ids, masks, lengths = [], [], []
    per_token: dict[str, list[np.ndarray | None]] = {name: [] for name in PER_TOKEN}
    rewards, groups, rollouts = [], [], []
    for row, s in enumerate(samples):
        tokens, n_resp = s["tokens"], s["response_length"]
        pad = np.zeros(len(tokens) - n_resp)
        ids.append(tokens)
        masks.append(np.concatenate([pad.astype(bool), s["loss_mask"]]))
        lengths.append(len(tokens))
        for name, kept in per_token.items():
            lp = s.get(name)
            kept.append(None if lp is None else np.concatenate([pad, lp]))
        rewards.append(reward_of(path, row, s["reward"], options))
        groups.append(s["group_index"])
        rid = s.get("rollout_id")
        rollouts.append(f"rollout {rid}" if rid is not None else f"sample {s['index']}")
    offsets = np.r_[0, np.cumsum(lengths)].astype(np.int64)
    columns: dict[str, pa.Array] = {
        "prompt_id": pa.array(groups, pa.int64()),
        "rollout_id": pa.array(rollouts, pa.string()),
        "input_ids": list_array(np.concatenate(ids), offsets),
        "action_mask": list_array(np.concatenate(masks).astype(np.int8), offsets),
        "reward": pa.array(rewards, pa.float64()),
    }
    for name, kept in per_token.items():
        given = [lp for lp in kept if lp is not None]
        if len(given) == len(kept):  # aligned with the tokens, 0 on the prompt
            flat = np.concatenate(given).astype(np.float32)
            columns[PER_TOKEN[name]] = list_array(flat, offsets)
        elif given:
            columns[name] = passthrough([s.get(name) for s in samples])
    index = np.array([s["index"] for s in samples], dtype=np.int64)
    # a sample's rank among its rollout's samples, by index (0 for a rollout of one sample:
    # a folder may mix compaction dumps and plain ones)
    order = np.lexsort((index, np.unique(rollouts, return_inverse=True)[1]))
    keys = np.array(rollouts, dtype=object)[order]
    first = np.r_[True, keys[1:] != keys[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order)) - start
    columns["segment_index"] = pa.array(rank)
    columns["index"] = pa.array(index)
    columns["status"] = pa.array([s.get("status") for s in samples], pa.string())
    for name in sorted({k for s in samples for k in s} - set(OWN)):
        columns.setdefault(name, passthrough([s.get(name) for s in samples]))
    return pa.table(columns)


def one_group(table: pa.Table) -> pa.Table:
    """The file as slime's reward normalisation sees a file of segmented rollouts: one group
    (keyed by its first group index), each sample a rollout of its own; the rollout it is a
    segment of kept as ``slime_rollout_id``."""
    n = table.num_rows
    first = pc.min(table.column("prompt_id")).as_py()
    index, rank = table.column("index").to_pylist(), table.column("segment_index").to_pylist()
    samples = pa.array([f"sample {i}.{k}" for i, k in zip(index, rank, strict=True)])
    ids = {
        "prompt_id": pa.array(np.full(n, first, dtype=np.int64)),
        "rollout_id": samples,
        "segment_index": pa.array(np.zeros(n, dtype=np.int64)),
    }
    table = table.append_column("slime_rollout_id", table.column("rollout_id"))
    for name, column in ids.items():
        table = table.set_column(table.schema.get_field_index(name), name, column)
    return table


def _holds_struct(t: pa.DataType) -> bool:
    """Whether ``t`` is a struct, or a list of them."""
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _holds_struct(t.value_type)
    return bool(pa.types.is_struct(t))


def reward_of(path: str, row: int, reward: Any, options: PresetOptions) -> float:
    """A sample's reward: a number, or the ``--reward-key`` entry of a dict."""
    if isinstance(reward, dict):
        keys = ", ".join(map(str, reward))
        if options.reward_key is None:
            msg = (
                f"{where(path, row, 'reward')}: the reward is a dict ({keys}). "
                "Hint: choose one with `reward_key`"
            )
            raise UsageError(msg)
        if options.reward_key not in reward:
            msg = (
                f"{where(path, row, 'reward')}: no '{options.reward_key}' in the reward dict "
                f"({keys}). Hint: choose one of them with `reward_key`"
            )
            raise DataError(msg)
        reward = reward[options.reward_key]
    number = _python(reward)
    if type(number) not in (int, float):  # not text, nor a boolean (as the other readers)
        raise bad_field(path, row, "reward", f"expected a number, saw {shown(reward)}")
    return float(number)


JSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
"""A field as JSON text: numpy arrays as lists, a dict's integer keys as text."""


def passthrough(values: list[Any]) -> pa.Array:
    """A sample field as a column: as it is when Arrow takes it, else as JSON text; dicts
    always as JSON text (slime's ``{}`` defaults make structs without fields, which Parquet
    cannot write, and their keys differ between a compaction dump and a plain one)."""
    try:
        array = pa.array(values)
        if not _holds_struct(array.type):
            return array
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        pass
    return pa.array(
        [None if v is None else orjson.dumps(v, option=JSON_OPTIONS).decode()
         for v in values],
        pa.string(),
    )  # fmt: skip
