"""What polars reads from a JSONL line without a word and advcli refuses, in one line naming
file, line and key: a key given twice in an object (readers disagree on which to keep), and ids
that are not a string or an integer, or not of the kind of the log's first id.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from advcli.errors import DataError, where
from advcli.io.arrow import one_binary
from advcli.io.schema import ROLES
from advcli.lazy_imports import pa, pc, pl


def refuse_duplicate_keys(
    path: str, chunk: bytes, first_line: int, rows: int, keys: Iterable[str | tuple[str, ...]]
) -> None:
    """Refuse a line of ``chunk`` that holds one of ``keys`` twice (JSON readers disagree on
    which to keep: polars the first, Python's the last). ``rows``: the chunk's objects. A
    key given as a path (``("meta", "group")``, a struct field ``--col`` names) is checked at
    every level.

    A key counted once per object is unique (the common case, at the cost of one scan); else
    the lines are checked one by one, and those naming the key twice parsed."""
    text = one_binary(chunk)
    for key in keys:
        parts = list(key) if isinstance(key, tuple) else [key]
        quoted = orjson.dumps(parts[-1])
        if _occurrences(chunk, text, quoted) == rows:
            continue
        for number, line in enumerate(chunk.splitlines(), start=first_line):
            if line.count(quoted) > 1 and _twice(json.loads(line, object_pairs_hook=list), parts):
                at = where(path, number, ".".join(parts), line=True)
                msg = (
                    f"{at}: the key appears twice in the object (readers disagree on which to "
                    "keep). Hint: keep one"
                )
                raise DataError(msg)


def refuse_duplicate_fields(path: str, chunk: bytes, first_line: int, frame: pl.DataFrame) -> None:
    """Refuse a line of ``chunk`` holding a key twice inside an object of one of ``frame``'s
    columns of objects (a span's ``kind``: polars keeps the first, Python's readers the last).
    Each field's key counted in the text as often as the parsed values hold it is given once
    (one scan); else the lines naming it are parsed, their objects checked at every depth."""
    text = one_binary(chunk)
    for column in frame.columns:
        for name, count in _field_counts(frame.get_column(column)).items():
            quoted = orjson.dumps(name)
            if _occurrences(chunk, text, quoted) <= count:
                continue
            head = orjson.dumps(column)
            for number, line in enumerate(chunk.splitlines(), start=first_line):
                if quoted in line and head in line:
                    pairs = json.loads(line, object_pairs_hook=list)
                    values = [v for k, v in pairs if k == column] if _is_pairs(pairs) else []
                    if (key := next(filter(None, map(_repeated_key, values)), None)) is not None:
                        at = where(path, number, f"{column}.{key}", line=True)
                        msg = (
                            f"{at}: the key appears twice in one object (readers disagree on "
                            "which to keep). Hint: keep one"
                        )
                        raise DataError(msg)


def _field_counts(series: pl.Series) -> dict[str, int]:
    """Per field name of a column of objects (or lists of them, at any depth): how many
    values hold it, not null."""
    counts: dict[str, int] = {}
    while isinstance(series.dtype, pl.List):
        series = series.explode()
    if isinstance(series.dtype, pl.Struct):
        for field in series.dtype.fields:
            inner = series.struct.field(field.name)
            counts[field.name] = counts.get(field.name, 0) + inner.len() - inner.null_count()
            for name, count in _field_counts(inner).items():
                counts[name] = counts.get(name, 0) + count
    return counts


def _is_pairs(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(p, tuple) for p in value)


def _repeated_key(value: Any) -> str | None:
    """A key given twice in an object inside ``value`` (parsed as pairs), at any depth."""
    if _is_pairs(value):
        keys = [k for k, _ in value]
        if len(set(keys)) < len(keys):
            return next(k for i, k in enumerate(keys) if k in keys[:i])
        inner = [v for _, v in value]
    elif isinstance(value, list):
        inner = value
    else:
        return None
    return next(filter(None, map(_repeated_key, inner)), None)


def _twice(pairs: Any, parts: list[str]) -> bool:
    """Whether the path ``parts`` meets a key given twice, in an object parsed as pairs."""
    if not isinstance(pairs, list) or not all(isinstance(p, tuple) for p in pairs):
        return False
    found = [value for name, value in pairs if name == parts[0]]
    return len(found) > 1 or (len(parts) > 1 and bool(found) and _twice(found[0], parts[1:]))


IdKinds = dict[str, tuple[str, str]]
"""Per id key, the kind of the log's first id (a string, an integer) and where it is."""

_OTHER_KIND = {"a string": "-?[0-9]", "an integer": '"'}
"""How a JSON value of the other kind begins: a number after a string id, and the reverse."""


def refuse_non_scalar_ids(
    path: str, chunk: bytes, first_line: int, keys: Iterable[str], kinds: IdKinds
) -> None:
    """Refuse a line of ``chunk`` whose id ``keys`` (prompt and rollout ids, read as text) hold
    an object, a list, a boolean or a fraction (polars would write it as its JSON text), or an
    id of another kind than the log's first of that key, an integer where it was a string or
    the reverse (read as text, 1 and "1" would be one id). ``kinds`` holds the first ids' kinds
    for every chunk and file of the log. RE2 finds the candidates in one scan; each line that
    has one is parsed to look at its top level."""
    text = one_binary(chunk)
    for key in keys:
        if not key.isascii():
            continue
        if key not in kinds and (first := _first_id(path, chunk, first_line, key)) is not None:
            kinds[key] = first
        kind = kinds[key][0] if key in kinds else None
        quoted = "".join(c if c.isalnum() else f"\\x{ord(c):02x}" for c in json.dumps(key))
        begins = "[\\[{]|true|false|-?[0-9]+[.eE]" + (f"|{_OTHER_KIND[kind]}" if kind else "")
        if not pc.count_substring_regex(text, quoted + rf"\s*:\s*(?:{begins})")[0].as_py():
            continue
        for number, line in enumerate(chunk.splitlines(), start=first_line):
            if json.dumps(key).encode() in line:
                check_id_kind(path, number, key, orjson.loads(line).get(key), kinds)


def _first_id(path: str, chunk: bytes, first_line: int, key: str) -> tuple[str, str] | None:
    """The kind of the first id ``key`` holds in ``chunk`` (at the top level of its line),
    and where it is; None if no line of it has one."""
    for number, line in enumerate(chunk.splitlines(), start=first_line):
        if json.dumps(key).encode() in line:
            value = orjson.loads(line).get(key)
            if value is not None:
                return _id_kind(value), where(path, number, key, line=True)
    return None


def _id_kind(value: object) -> str:
    """A string or an integer (orjson reads an integer beyond 64 bits as a whole float)."""
    return "a string" if isinstance(value, str) else "an integer"


def id_columns(mapping: Mapping[str, str]) -> set[str]:
    """The columns that may hold prompt and rollout ids (``mapping``'s, or the roles' names)."""
    return {
        column
        for role in ("prompt_id", "rollout_id")
        for column in ((mapping[role],) if role in mapping else (role, *ROLES[role][1]))
    }


def check_id_kind(path: str, number: int, key: str, value: object, kinds: IdKinds) -> None:
    """An id (:func:`check_id`) of the kind of the log's first id of ``key`` in ``kinds`` (this
    one where none is there yet): read as text, 1 and "1" would be one id."""
    check_id(path, number, key, value)
    if value is None:
        return
    at = where(path, number, key, line=True)
    kind, first = kinds.setdefault(key, (_id_kind(value), at))
    if _id_kind(value) != kind:
        shown = orjson.dumps(value).decode()[:60]
        msg = (
            f"{at}: the id {shown} is {_id_kind(value)}, but the first is {kind} ({first}): "
            'read as text, 1 and "1" would be one id. Hint: write every id of the column as a '
            "string"
        )
        raise DataError(msg)


def check_id(path: str, number: int, key: str, value: object) -> None:
    """An id is a string or an integer (polars would write an object, say, as its JSON text;
    orjson reads an integer beyond 64 bits as a float, a whole one)."""
    fraction = isinstance(value, float) and not value.is_integer()
    if isinstance(value, (dict, list, bool)) or fraction:
        shown = orjson.dumps(value).decode()[:60]
        msg = (
            f"{where(path, number, key, line=True)}: an id is a string or an integer, saw "
            f"{shown}. Hint: write the id as a string"
        )
        raise DataError(msg)


def _occurrences(chunk: bytes, text: pa.Array, needle: bytes) -> int:
    """How often ``needle`` occurs in ``chunk`` (``text``: the same, as one binary value).
    RE2, through pyarrow, jumps from quote to quote where ``bytes.count`` reads every byte:
    10x faster on JSONL logs."""
    if not needle.isascii():  # RE2 would read a \xHH escape as a character, not a byte
        return chunk.count(needle)
    pattern = "".join(c if c.isalnum() else f"\\x{ord(c):02x}" for c in needle.decode())
    return int(pc.count_substring_regex(text, pattern)[0].as_py())
