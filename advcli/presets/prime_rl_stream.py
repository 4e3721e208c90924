"""prime-rl's trace stream (:mod:`advcli.presets.prime_rl`, whose docstring says what it
holds): its chunks in their plain and sealed forms, the run's annotations folded onto the traces
by trace id, and the groups read.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advcli.errors import DataError, where
from advcli.io import jsonl
from advcli.lazy_imports import np
from advcli.presets.base import json_records, non_finite
from advcli.presets.prime_rl_traces import TraceTokens, Tree, trace_reward

TORN = "{path}: its last line is cut short (the run was writing it): left out"


def is_stream_chunk(path: str) -> bool:
    """Whether ``path`` is a chunk of a trace stream (``traces/stream/NNNNN.jsonl[.zst]``)."""
    p = Path(path)
    return (
        p.parent.name == "stream"
        and p.parent.parent.name == "traces"
        and re.fullmatch(r"\d+\.jsonl(\.zst)?", p.name) is not None
    )


def numbered(folder: Path) -> dict[int, Path]:
    """A folder's chunks by number, in either form."""
    found = {}
    for p in folder.iterdir() if folder.is_dir() else []:
        match = re.fullmatch(r"(\d+)\.jsonl(\.zst)?", p.name)
        if match:
            found[int(match[1])] = p
    return found


def chunks(folder: Path) -> list[Path]:
    """A folder's chunks in number order, each in the form to read (:func:`chunk_form`)."""
    found = numbered(folder)
    return [chunk_form(found[n])[0] for n in sorted(found)]


def chunk_form(chunk: Path) -> tuple[Path, str | None]:
    """Which form of a chunk to read, and a warning where its plain and sealed forms are both
    there and disagree. Mid-seal both are there, the sealed one still being written: the plain
    one is read, as prime-rl reads it. Otherwise the one holding more whole lines is read,
    said, with the number of lines only the other holds."""
    plain = chunk.with_name(chunk.name.removesuffix(".zst"))
    sealed = plain.with_name(plain.name + ".zst")
    if not (plain.is_file() and sealed.is_file()):
        return chunk, None
    return _twins(str(plain), str(sealed), plain.stat().st_mtime_ns, sealed.stat().st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _twins(plain: str, sealed: str, *written: int) -> tuple[Path, str | None]:
    """:func:`chunk_form` of a chunk in both forms (``written``: their times, so that a file
    rewritten is compared again)."""
    data = Path(plain).read_bytes()
    plain_lines = [x for x in data[: data.rfind(b"\n") + 1].splitlines() if x.strip()]
    sealed_lines, cut = _sealed_lines(sealed)
    if sealed_lines == plain_lines[: len(sealed_lines)] and (cut or sealed_lines == plain_lines):
        return Path(plain), None  # a seal under way, or done and the plain one not yet removed
    chosen, other = (
        (sealed, plain_lines) if len(sealed_lines) > len(plain_lines) else (plain, sealed_lines)
    )
    held = set(sealed_lines if chosen == sealed else plain_lines)
    only_other = sum(line not in held for line in other)
    warning = (
        f"{plain} and {sealed}, one chunk of prime-rl's trace stream in two forms, disagree "
        f"({len(plain_lines)} and {len(sealed_lines)} whole lines"
        f"{', the sealed one cut short' if cut else ''}): read {chosen}, "
        + (
            f"the one holding more; {only_other} line(s) only the other holds are left out"
            if only_other
            else "which holds every line of the other"
        )
    )
    return Path(chosen), warning


def _sealed_lines(path: str) -> tuple[list[bytes], bool]:
    """The whole lines of a sealed chunk, and whether it stops short (cut or corrupt: still
    being written)."""
    parts: list[bytes] = []
    cut = False
    try:
        with jsonl.open_stream(path) as fh:
            while part := fh.read(1 << 20):
                parts.append(part)
    except DataError:
        cut = True
    data = b"".join(parts)
    return [x for x in data[: data.rfind(b"\n") + 1].splitlines() if x.strip()], cut


def chunk_records(path: str) -> tuple[list[dict[str, Any]], np.ndarray, bool]:
    """A chunk's records and their lines, and whether its last line was cut short: the live
    chunk of a running job may end inside a line, which is left out."""
    try:
        records, lines = json_records(path)
        return records, lines, False
    except DataError:
        data = Path(path).read_bytes() if path.endswith(".jsonl") else b""
        if not data or data.endswith(b"\n"):
            raise
    whole = data[: data.rfind(b"\n") + 1].splitlines()
    kept = [(n, line) for n, line in enumerate(whole, start=1) if line.strip()]
    records = [jsonl.parse_line(path, n, line, nan=True) for n, line in kept]
    return records, np.array([n for n, _ in kept], dtype=np.int64), True


def _merge(into: dict[str, Any], update: dict[str, Any]) -> None:
    """``update`` deep-merged into ``into``: nested objects merged, anything else replaced."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


@dataclass(frozen=True)
class StreamRun:
    """What the whole run says about each chunk's traces."""

    updates: dict[str, list[tuple[str, dict[str, Any]]]]  # per trace id, in fold order: where
    # each was read (file and line) and the update
    kept_groups: frozenset[str]
    left_out: tuple[int, int]  # groups, episodes
    annotated: bool  # some update carries advantages
    listed: dict[int, frozenset[str]]  # per chunk, the episodes of kept groups the index lists
    warnings: tuple[str, ...]  # about the annotations' chunks

    def fold(
        self, path: str, line: int, t: int, trace: dict[str, Any], tree: Tree, tokens: TraceTokens
    ) -> None:
        """The updates of trace ``t`` folded onto it: its ``info`` in place, the advantages
        (the orchestrator's) and log-probabilities (the trainer's) onto its ``tokens``."""
        for read_at, update in self.updates.get(str(trace.get("id")), []):
            info = update.get("info")
            if isinstance(info, dict):
                _merge(trace.setdefault("info", {}), info)
            for branch in update.get("branches") or []:
                for stream in FOLDED:
                    if isinstance(branch, dict) and branch.get(stream) is not None:
                        _fold_stream(read_at, trace, tree, tokens, branch, stream)


FOLDED = {"advantages": ("advantages", "advantage"),
          "trainer_logprobs": ("trainer log-probabilities", "trainer log-probability")}  # fmt: skip
"""The per-token streams of an annotation's branches read, and their names in a message, plural
and singular. (The trainer's entropies are not read.)"""


def _fold_stream(
    at: str,
    trace: dict[str, Any],
    tree: Tree,
    tokens: TraceTokens,
    branch: dict[str, Any],
    stream: str,
) -> None:
    """A branch's ``stream`` of :data:`FOLDED` (one value per token of its root-to-leaf path)
    cut along the path onto its nodes: each node's sampled values replace its own, unless one
    of them is null (the trainer's are null off the loss mask and at a sample's first
    position). ``at``: where the update was read, for errors."""
    index, values = branch.get("index"), branch[stream]
    what, one = FOLDED[stream]
    if type(index) is not int or not 0 <= index < len(tree.leaves):
        msg = (
            f"{at}: trace {trace.get('id')}'s annotation names branch {index!r}, which the "
            f"trace does not have (0 to {len(tree.leaves) - 1}). Hint: check the annotations "
            "folder"
        )
        raise DataError(msg)
    positions = tree.positions[tree.token_bounds[index] : tree.token_bounds[index + 1]]
    if not isinstance(values, list) or len(values) != len(positions):
        count = len(values) if isinstance(values, list) else "no list of"
        msg = (
            f"{at}: trace {trace.get('id')}'s annotation gives {count} {what} for a "
            f"branch of {len(positions)} tokens. Hint: check the annotations folder"
        )
        raise DataError(msg)
    given = np.empty(len(values), dtype=object)
    try:
        given[:] = values
        null = given == None  # noqa: E711 (element by element on an object array)
        numbers = np.where(null, 0.0, given).astype(np.float64)
    except (TypeError, ValueError):
        msg = f"{at}: trace {trace.get('id')}'s annotation gives {what} that are not numbers"
        raise DataError(msg + ". Hint: check the annotations folder") from None
    sampled = tokens.mask[positions]
    node = tokens.node_of[positions]
    kept = sampled & ~np.isin(node, node[sampled & null])  # a node with a null keeps its own
    not_finite = np.flatnonzero(kept & ~np.isfinite(numbers))
    if len(not_finite):
        first = int(not_finite[0])
        msg = (
            f"{at}: trace {trace.get('id')}'s annotation gives {one} "
            f"{non_finite(numbers[first])} at token {first} of branch {index}, which prime-rl "
            "never trains on. Hint: check the annotations folder"
        )
        raise DataError(msg)
    if stream == "advantages":
        tokens.advantages[positions[kept]] = numbers[kept]
        tokens.logged[node[kept]] = True
    else:
        tokens.trainer_logprobs[positions[kept]] = numbers[kept]
        tokens.trained[node[kept]] = True


def written_state(traces: Path) -> tuple[tuple[str, int, int], ...]:
    """Name, size and time of each file of a run's index and annotations: a run still being
    written is read again when they change."""
    found = [traces / "stream.index.jsonl", *(traces / "annotations").glob("**/*")]
    return tuple(sorted((str(f), s.st_size, s.st_mtime_ns) for f in found
                        if f.is_file() and (s := f.stat())))  # fmt: skip


@functools.lru_cache(maxsize=4)
def stream_run(
    traces_dir: str, written: tuple[tuple[str, int, int], ...], present: frozenset[int]
) -> StreamRun:
    """The folded annotations and the groups to read of the run whose ``traces`` folder this
    is: read once per folder and state of its files (``written``, :func:`written_state`;
    ``present``: the numbers of the stream's chunks, whose episodes the index lists)."""
    traces = Path(traces_dir)
    updates: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    annotations = traces / "annotations"
    producers = (
        sorted(p for p in annotations.iterdir() if p.is_dir()) if annotations.is_dir() else []
    )
    warnings: list[str] = []
    for producer in producers:
        for chunk in chunks(producer):
            if (twins := chunk_form(chunk)[1]) is not None:
                warnings.append(twins)
            records, lines, torn = chunk_records(str(chunk))
            if torn:
                warnings.append(TORN.format(path=chunk))
            for record, n in zip(records, lines.tolist(), strict=True):
                read_at = where(str(chunk), n, "branches", line=True)
                updates.setdefault(str(record.get("trace_id")), []).append((read_at, record))
    effective = set()
    annotated = False
    for trace_id, read in updates.items():
        info: dict[str, Any] = {}
        for _, record in read:
            _merge(info, record.get("info") or {})
            annotated |= any("advantages" in b for b in record.get("branches") or [])
        if info.get("effective") is True:
            effective.add(trace_id)
    groups, listed = _groups(traces)
    trained = {g for g, episodes in groups.items() if any(effective & set(t) for t, _ in episodes)}
    sizes = [len(groups[g]) for g in trained] or [len(e) for e in groups.values()] or [0]
    complete = min(sizes) if trained else max(sizes)
    kept = set(trained)
    for g, episodes in groups.items():
        rewards = {r for _, r in episodes}
        if (
            g not in trained
            and len(episodes) >= complete
            and len(rewards) == 1
            and None not in rewards
        ):
            kept.add(g)
    left = [g for g in groups if g not in kept]
    gone = {n: sum(g in kept for _, g in e) for n, e in listed.items() if n not in present}
    if any(gone.values()):
        warnings.append(
            f"prime-rl's trace stream: left out {sum(gone.values())} episode(s) the index lists "
            f"in chunk(s) {', '.join(str(n) for n in sorted(gone) if gone[n])}, which "
            f"{traces / 'stream'} does not hold"
        )
    return StreamRun(
        updates=updates,
        kept_groups=frozenset(kept),
        left_out=(len(left), sum(len(groups[g]) for g in left)),
        annotated=annotated,
        listed={
            n: frozenset(e for e, g in episodes if g in kept) for n, episodes in listed.items()
        },
        warnings=tuple(warnings),
    )


def _groups(
    traces: Path,
) -> tuple[dict[str, list[tuple[list[str], float | None]]], dict[int, list[tuple[str, str]]]]:
    """Each group's episodes: their trace ids and their one reward (None when the episode
    failed or its traces differ), from the index where there is one, else from the chunks;
    and per chunk, the episodes (id, group) the index lists in it."""
    groups: dict[str, list[tuple[list[str], float | None]]] = {}
    listed: dict[int, list[tuple[str, str]]] = {}
    index = traces / "stream.index.jsonl"
    if index.is_file():
        for row in json_records(str(index))[0]:
            ids = [str(t) for t in row.get("trace_ids") or []]
            reward = row.get("reward") if row.get("ok") and len(ids) == 1 else None
            groups.setdefault(str(row.get("group")), []).append((ids, reward))
            if type(row.get("chunk")) is int and row.get("id") is not None:
                listed.setdefault(row["chunk"], []).append((str(row["id"]), str(row["group"])))
        return groups, listed
    for chunk in chunks(traces / "stream"):
        for episode in chunk_records(str(chunk))[0]:
            found = episode.get("traces") or []
            rewards = {trace_reward(t) for t in found}
            reward = rewards.pop() if episode.get("ok") and len(rewards) == 1 else None
            group = (episode.get("group") or {}).get("id")
            groups.setdefault(str(group), []).append(([str(t.get("id")) for t in found], reward))
    return groups, listed
