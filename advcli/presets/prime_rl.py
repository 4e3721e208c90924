"""prime-rl: the orchestrator's file monitor (on by default), in either of its layouts.

**Step files** (until PR #3444) →
``{output_dir}/rollouts/step_{N}/{train,eval}/{all,effective}/traces.jsonl``. A line is one
verifiers episode: its ``id``, its ``group`` (``group.id`` is the GRPO group) and its
``traces``. A trace has ``rewards`` (``{name: {score, weight}}``: the reward is the sum of
score × weight) and a tree of message ``nodes`` (``parent``, ``token_ids``, ``mask``, and over
the sampled tokens ``logprobs`` and ``advantages``). Every path from the root to a leaf is one
rollout of the group: its nodes' tokens and masks, concatenated; the node advantages, placed on
the sampled tokens, are kept as ``source_advantages``. ``effective`` holds what was trained on
(with advantages); ``all`` holds every episode, errors too: a folder is searched for the
``train/effective`` files only, and a file under ``all`` is read only when named.

**The trace stream** (PRs #3444, #3465) → ``{output_dir}/monitors/file/traces/``. Every
episode is written once, on arrival, to an arrival-ordered stream of numbered chunks,
``stream/NNNNN.jsonl`` (older ones sealed as ``NNNNN.jsonl.zst``; mid-seal both forms exist and
the plain one is read). What the trained cohort adds comes later, as update records under
``annotations/<producer>/`` (chunked the same way): ``{trace_id, info, branches: [{index,
<stream>: [...]}]}``. They are folded onto the episode's traces by trace id as prime-rl's own
reader folds them: producers in name order, each in write order, newest wins; ``info`` is
deep-merged; a branch's stream (``advantages``: one value per token of the branch's
root-to-leaf path) is cut along the path by each node's token count, and its values at the
sampled positions replace the node's. ``stream.index.jsonl`` (one row per episode: its group,
trace ids and reward) gives the groups without reading the chunks twice.

Which stream rollouts are read: the stream holds every arrival, trained or not. A group is
read when one of its traces was shipped (``info.effective``), or when it is complete (as many
episodes as the smallest trained group) with one reward for all (prime-rl drops such a group,
every advantage 0, from the batch). Groups still in flight, or not yet shipped, are left out,
said in a warning. A trace of a read group that was never annotated has no logged advantage:
prime-rl ships only traces with a non-zero advantage, and one may wait for the next batch. A
failed episode (``ok`` false: no tokens, no reward) is left out, as prime-rl leaves it out of
its group's scoring. The orchestrator's annotations hold advantages unrounded; an episode
record rounds its floats to 4 decimals (``float_decimals``): the step files' advantages, and
the log-probabilities everywhere.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advcli.errors import DataError, where
from advcli.io import jsonl
from advcli.io.arrow import list_array
from advcli.lazy_imports import np, pa
from advcli.presets.base import Converted, Preset, PresetOptions, Setting, json_records, step_of
from advcli.presets.slime import passthrough

STREAM_PATTERNS = (
    "monitors/file/traces/stream/*.jsonl*",
    "traces/stream/*.jsonl*",
    "stream/*.jsonl*",
)
"""The chunks of a run's stream, in the folders a user may give: the run's output folder,
its ``monitors/file`` folder, or its ``traces`` folder."""

FAILED = (
    "{path}: left out {failed} failed episode(s) (ok false: no tokens, no reward), as prime-rl "
    "does: it scores their groups over the other episodes"
)

UNTRAINED = (
    "prime-rl's trace stream: left out {groups} group(s) ({episodes} episode(s)) that were "
    "still in flight or not yet trained on (no trace shipped, and not complete with one reward)"
)


class PrimeRl(Preset):
    name = "prime-rl"
    framework = "prime-rl"
    switch = "the orchestrator's file monitor (on by default)"
    writes = (
        "OUTPUT_DIR/monitors/file/traces/ (the trace stream), or, before PR #3444, "
        "OUTPUT_DIR/rollouts/step_{N}/train/effective/traces.jsonl"
    )
    patterns = (
        "step_*/train/effective/traces.jsonl",
        "rollouts/step_*/train/effective/traces.jsonl",
        "train/effective/traces.jsonl",
        "effective/traces.jsonl",
        *STREAM_PATTERNS,
    )
    marks = (frozenset({"group", "traces"}),)
    convention = "prime-rl"
    logged = "source_advantages"

    def files(self, inputs: list[str]) -> list[str]:
        return without_sealed_twins(super().files(inputs))

    def settings(self, names: list[str], options: PresetOptions) -> list[Setting]:
        return [
            Setting("grpo", own=True),
            Setting("grpo-length", note="[orchestrator.algo.length_penalty] type linear, its "
                    "default weights", own=True),
        ]  # fmt: skip

    def convert(self, path: str, options: PresetOptions) -> Converted:
        if is_stream_chunk(path):
            return stream_chunk(path)
        records, lines = json_records(path)
        rows: list[dict[str, Any]] = []
        row_lines: list[int] = []
        step = step_of(path, r"step_(\d+)")
        failed = 0
        for episode, line in zip(records, lines.tolist(), strict=True):
            found = episode_rows(path, line, episode, step)
            failed += not found and episode.get("ok") is False
            rows += found
            row_lines += [line] * len(found)
        if not rows:
            raise DataError(f"{path}: no rollouts in the episodes. Hint: check the file")
        if not _logs_advantages(records):  # an 'all' file: none to compare with, not zeros
            for row in rows:
                del row["source_advantages"]
        warnings = turn_reward_warnings(path, rows)
        if failed:
            warnings.append(FAILED.format(path=path, failed=failed))
        if "/all/" in Path(path).as_posix():
            warnings.append(
                f"{path}: prime-rl's 'all' traces hold every finished episode, errors too, "
                "not what was trained on ('effective')"
            )
        return Converted(rollout_table(rows), np.array(row_lines), warnings)


def _logs_advantages(records: list[dict[str, Any]]) -> bool:
    """Whether any node of any trace carries advantages (``effective`` files do)."""
    return any(
        "advantages" in node
        for episode in records
        for trace in episode.get("traces") or []
        for node in trace.get("nodes") or []
    )


def episode_rows(
    path: str, line: int, episode: dict[str, Any], step: int | None, *, stream: bool = False
) -> list[dict[str, Any]]:
    """One row per root-to-leaf path of every trace of an episode; from the stream, also
    whether the trace was trained on (``effective``), and its step the one it shipped at."""
    group = episode.get("group")
    if not isinstance(group, dict) or group.get("id") is None:
        msg = f"{where(path, line, 'group', line=True)}: no group.id, which a prime-rl episode has"
        raise DataError(msg + ". Hint: check the file and --from")
    work = (episode.get("run") or {}).get("work") or {}
    out = []
    for t, trace in enumerate(episode.get("traces") or []):
        nodes = trace.get("nodes") or []
        if not nodes and episode.get("ok") is False:  # an episode that failed: no tokens
            continue
        info = trace.get("info") or {}
        shipped = (info.get("ship") or {}).get("step")
        for leaf, branch in tree_paths(path, line, t, nodes):
            path_nodes = [nodes[i] for i in branch]
            ids, mask, logprobs, advantages = concatenate(path, line, path_nodes)
            row = {
                "prompt_id": str(group["id"]),
                "rollout_id": f"{episode.get('id')}/{t}/{leaf}",
                "input_ids": ids,
                "action_mask": mask,
                "reward": trace_reward(trace),
                "logprobs": logprobs,
                "source_advantages": advantages,
                "step": shipped if shipped is not None else work.get("step", step),
                "ok": episode.get("ok"),
                "env": (episode.get("env") or {}).get("name"),
                "task": (episode.get("task") or {}).get("key"),
                # who wrote the trace, in which interaction (hierarchical-grpo, rae)
                "agent": agent.get("name")
                if isinstance(agent := trace.get("agent"), dict)
                else None,
                "episode": None if episode.get("id") is None else str(episode.get("id")),
                **trace_costs(trace, nodes),
            }
            if stream:
                row["effective"] = info.get("effective") is True
                if not any(isinstance(n, dict) and "advantages" in n for n in path_nodes):
                    # not annotated: not shipped yet, or left out for an advantage of 0
                    row["source_advantages"] = np.full(len(ids), np.nan, np.float32)
            if isinstance(info.get("turn_rewards"), list):
                kept = path_turn_rewards(nodes, branch, mask, info["turn_rewards"])
                row["turn_rewards"] = False if kept is None else kept  # False: said, left out
            out.append(row)
    return out


def path_turn_rewards(
    nodes: list[dict[str, Any]], branch: list[int], mask: np.ndarray, rewards: list[Any]
) -> list[float | None] | None:
    """The turn rewards of one root-to-leaf path: ``info.turn_rewards`` holds one per sampled
    node of the trace, in node order; the path keeps its sampled nodes'. None where they do
    not line up with the path's action spans (a count that differs, two sampled nodes with
    no token between them)."""
    sampled = [i for i, node in enumerate(nodes) if isinstance(node, dict) and node.get("sampled")]
    if len(sampled) != len(rewards) or not all(
        r is None or (isinstance(r, int | float) and not isinstance(r, bool)) for r in rewards
    ):
        return None
    reward_of = dict(zip(sampled, rewards, strict=True))
    kept = [reward_of[i] for i in branch if i in reward_of]
    m = mask.astype(bool)
    spans = int(np.count_nonzero(m & ~np.r_[False, m[:-1]]))
    return [None if r is None else float(r) for r in kept] if spans == len(kept) else None


def turn_reward_warnings(path: str, rows: list[dict[str, Any]]) -> list[str]:
    """Every row with a ``turn_rewards`` key (None where its trace logs none; no key where no
    trace does), and a warning for the rows whose turn rewards were left out
    (:func:`path_turn_rewards`)."""
    if not any("turn_rewards" in row for row in rows):
        return []
    dropped = 0
    for row in rows:
        if row.setdefault("turn_rewards", None) is False:
            row["turn_rewards"], dropped = None, dropped + 1
    if not dropped:
        return []
    return [
        f"{path}: {dropped} rollout(s) have no turn rewards kept: their trace's "
        "info.turn_rewards does not hold one number per sampled turn of the path"
    ]


def trace_costs(trace: dict[str, Any], nodes: list[dict[str, Any]]) -> dict[str, int | None]:
    """What prime-rl's length penalty weighs (``score_group``): the trace's output tokens, its
    input tokens (total less output) and its turns (sampled nodes); None where not logged."""
    out, total = trace.get("num_output_tokens"), trace.get("num_total_tokens")
    numbers = isinstance(out, int) and isinstance(total, int)
    return {
        "num_output_tokens": out if numbers else None,
        "num_input_tokens": total - out if numbers else None,  # type: ignore[operator]
        "num_turns": sum(1 for node in nodes if isinstance(node, dict) and node.get("sampled")),
    }


def trace_reward(trace: dict[str, Any]) -> float:
    """A trace's reward: the sum of its rewards' score × weight."""
    rewards = trace.get("rewards") or {}
    return sum(float(r.get("score", 0.0)) * float(r.get("weight", 1.0)) for r in rewards.values())


def stream_chunk(path: str) -> Converted:
    """One chunk of a trace stream, its traces folded with the run's annotations; the rows of
    groups the run has not trained on left out (:func:`stream_run`)."""
    traces = Path(path).parent.parent
    run = stream_run(str(traces), _written(traces))
    records, lines, torn = chunk_records(path)
    rows: list[dict[str, Any]] = []
    row_lines: list[int] = []
    failed = 0
    for episode, line in zip(records, lines.tolist(), strict=True):
        if str((episode.get("group") or {}).get("id")) not in run.kept_groups:
            continue
        run.fold(path, line, episode)
        found = episode_rows(path, line, episode, None, stream=True)
        failed += not found and episode.get("ok") is False
        rows += found
        row_lines += [line] * len(found)
    warnings = turn_reward_warnings(path, rows)
    if failed:
        warnings.append(FAILED.format(path=path, failed=failed))
    if torn:
        warnings.append(f"{path}: its last line is cut short (the run was writing it): left out")
    if run.left_out[0]:
        warnings.append(UNTRAINED.format(groups=run.left_out[0], episodes=run.left_out[1]))
    if not rows:
        return Converted(pa.table({}), np.zeros(0, np.int64), warnings)
    if not run.annotated:  # nothing shipped yet: no advantages to compare with, not zeros
        for row in rows:
            del row["source_advantages"]
    return Converted(rollout_table(rows), np.array(row_lines), warnings)


EXPANDED_TOKENS = 1 << 25
"""Most tokens the root-to-leaf paths of one episode may hold in all: each path is a rollout
that repeats its shared prefix, so a deep tree of few tokens can expand past any memory."""


def tree_paths(path: str, line: int, t: int, nodes: list[Any]) -> list[tuple[int, list[int]]]:
    """``(leaf, node indices from the root)`` for every root-to-leaf path of trace ``t``'s
    node tree, checked first: every parent another node of the trace (or null for a root),
    no cycle, and the paths within :data:`EXPANDED_TOKENS`."""
    at = where(path, line, "traces", line=True)
    if not nodes:  # (a failed episode's traces may have none: skipped before)
        raise DataError(f"{at}: trace {t} has no nodes, so no tokens. Hint: check the file")
    n = len(nodes)
    parent: list[int | None] = []
    for i, node in enumerate(nodes):
        p = node.get("parent") if isinstance(node, dict) else "missing"
        if p is not None and (type(p) is not int or not 0 <= p < n or p == i):
            msg = (
                f"{at}: trace {t}, node {i}: parent {p!r} is not another node of the trace "
                f"(0 to {n - 1}, or null for a root). Hint: check the file"
            )
            raise DataError(msg)
        parent.append(p)
    tokens = [len(node.get("token_ids") or []) for node in nodes]
    reach = [-1] * n  # tokens from the root to the node, once known
    for i in range(n):
        chain: list[int] = []
        j: int | None = i
        while j is not None and reach[j] < 0:
            if j in chain:
                msg = f"{at}: trace {t}: node {j}'s parents form a cycle. Hint: check the file"
                raise DataError(msg)
            chain.append(j)
            j = parent[j]
        above = 0 if j is None else reach[j]
        for k in reversed(chain):
            above = reach[k] = above + tokens[k]
    leaves = sorted(set(range(n)) - {p for p in parent if p is not None})
    expanded = sum(reach[leaf] for leaf in leaves)
    if expanded > EXPANDED_TOKENS:
        msg = (
            f"{at}: trace {t}'s tree expands to {len(leaves):,} root-to-leaf paths of "
            f"{expanded:,} tokens in all (each path a rollout, its prefix repeated), beyond "
            f"advcli's limit of {EXPANDED_TOKENS:,}. Hint: split the episode, or drop it"
        )
        raise DataError(msg)
    out = []
    for leaf in leaves:
        branch = []
        j = leaf
        while j is not None:
            branch.append(j)
            j = parent[j]
        out.append((leaf, branch[::-1]))
    return out


def concatenate(path: str, line: int, nodes: list[dict[str, Any]]) -> tuple[np.ndarray, ...]:
    """Tokens and masks of a path's nodes end to end; log-probabilities and advantages, given
    over each node's sampled tokens, placed on them (0 elsewhere)."""
    ids: list[np.ndarray] = []
    masks: list[np.ndarray] = []
    logprobs: list[np.ndarray] = []
    advantages: list[np.ndarray] = []
    for node in nodes:
        tokens = np.asarray(node.get("token_ids") or [], dtype=np.int32)
        mask = np.asarray(node.get("mask") or [False] * len(tokens), dtype=bool)
        if len(mask) != len(tokens):
            msg = (
                f"{where(path, line, 'nodes', line=True)}: a node has {len(tokens)} token ids "
                f"and {len(mask)} mask entries. Hint: check the file"
            )
            raise DataError(msg)
        for name, out in (("logprobs", logprobs), ("advantages", advantages)):
            values = np.zeros(len(tokens), dtype=np.float32)
            given = node.get(name)
            if given is not None:
                if len(given) != int(mask.sum()):
                    msg = (
                        f"{where(path, line, 'nodes', line=True)}: a node's {name} has "
                        f"{len(given)} values for {int(mask.sum())} sampled tokens. "
                        "Hint: check the file"
                    )
                    raise DataError(msg)
                values[mask] = given
            out.append(values)
        ids.append(tokens)
        masks.append(mask)
    return (
        np.concatenate(ids) if ids else np.zeros(0, np.int32),
        np.concatenate(masks).astype(np.int8) if masks else np.zeros(0, np.int8),
        np.concatenate(logprobs) if logprobs else np.zeros(0, np.float32),
        np.concatenate(advantages) if advantages else np.zeros(0, np.float32),
    )


def rollout_table(rows: list[dict[str, Any]]) -> pa.Table:
    lengths = [len(r["input_ids"]) for r in rows]
    offsets = np.r_[0, np.cumsum(lengths)].astype(np.int64)
    columns: dict[str, pa.Array] = {}
    for name in rows[0]:
        values = [r[name] for r in rows]
        if isinstance(values[0], np.ndarray):
            columns[name] = list_array(np.concatenate(values), offsets)
        else:
            columns[name] = passthrough(values)
    columns["reward"] = pa.array([r["reward"] for r in rows], pa.float64())
    if "turn_rewards" in columns:  # a list even where no row keeps one
        columns["turn_rewards"] = pa.array(
            [r["turn_rewards"] for r in rows], pa.list_(pa.float64())
        )
    for name in ("agent", "episode"):  # text even where no trace names one
        columns[name] = pa.array([r[name] for r in rows], pa.string())
    return pa.table(columns)


# --------------------------------------------------------------------------- the stream
def is_stream_chunk(path: str) -> bool:
    """Whether ``path`` is a chunk of a trace stream (``traces/stream/NNNNN.jsonl[.zst]``)."""
    p = Path(path)
    return (
        p.parent.name == "stream"
        and p.parent.parent.name == "traces"
        and re.fullmatch(r"\d+\.jsonl(\.zst)?", p.name) is not None
    )


def without_sealed_twins(paths: list[str]) -> list[str]:
    """``paths`` less each ``.jsonl.zst`` chunk whose plain twin is there too (a chunk caught
    mid-seal: prime-rl reads the plain one)."""
    plain = set(paths)
    return [p for p in paths if not (p.endswith(".jsonl.zst") and p[: -len(".zst")] in plain)]


def chunks(folder: Path) -> list[Path]:
    """A folder's chunks in number order, the plain form where both exist."""
    by_number: dict[int, Path] = {}
    for p in folder.iterdir():
        match = re.fullmatch(r"(\d+)\.jsonl(\.zst)?", p.name)
        if match and (int(match[1]) not in by_number or not match[2]):
            by_number[int(match[1])] = p
    return [by_number[n] for n in sorted(by_number)]


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

    updates: dict[str, list[dict[str, Any]]]  # per trace id, in fold order
    kept_groups: frozenset[str]
    left_out: tuple[int, int]  # groups, episodes
    annotated: bool  # some update carries advantages

    def fold(self, path: str, line: int, episode: dict[str, Any]) -> None:
        """The updates of each of the episode's traces folded onto it, in place."""
        for t, trace in enumerate(episode.get("traces") or []):
            for update in self.updates.get(str(trace.get("id")), []):
                info = update.get("info")
                if isinstance(info, dict):
                    _merge(trace.setdefault("info", {}), info)
                for branch in update.get("branches") or []:
                    if isinstance(branch, dict) and branch.get("advantages") is not None:
                        _fold_advantages(path, line, t, trace, branch)


def _fold_advantages(
    path: str, line: int, t: int, trace: dict[str, Any], branch: dict[str, Any]
) -> None:
    """A branch's advantages (one per token of its root-to-leaf path) cut along the path onto
    its nodes: each node's sampled values replace its own, unless one of them is null. (The
    trainer's streams, log-probabilities and entropies, are not read.)"""
    nodes = trace.get("nodes") or []
    if not nodes:
        return
    at = where(path, line, "traces", line=True)
    paths = tree_paths(path, line, t, nodes)
    index, values = branch.get("index"), branch["advantages"]
    if type(index) is not int or not 0 <= index < len(paths):
        msg = (
            f"{at}: trace {trace.get('id')}'s annotation names branch {index!r}, which the "
            f"trace does not have (0 to {len(paths) - 1}). Hint: check the annotations folder"
        )
        raise DataError(msg)
    order = paths[index][1]
    sizes = [len(nodes[i].get("token_ids") or []) for i in order]
    if not isinstance(values, list) or len(values) != sum(sizes):
        count = len(values) if isinstance(values, list) else "no list of"
        msg = (
            f"{at}: trace {trace.get('id')}'s annotation gives {count} advantages for a "
            f"branch of {sum(sizes)} tokens. Hint: check the annotations folder"
        )
        raise DataError(msg)
    start = 0
    for i, size in zip(order, sizes, strict=True):
        mask = nodes[i].get("mask") or [False] * size
        sampled = [v for v, m in zip(values[start : start + size], mask, strict=False) if m]
        if sampled and all(v is not None for v in sampled):
            nodes[i]["advantages"] = sampled
        start += size


def _written(traces: Path) -> tuple[tuple[str, int, int], ...]:
    """Name, size and time of each file of a run's index and annotations: a run still being
    written is read again when they change."""
    found = [traces / "stream.index.jsonl", *(traces / "annotations").glob("**/*")]
    return tuple(sorted((str(f), s.st_size, s.st_mtime_ns) for f in found
                        if f.is_file() and (s := f.stat())))  # fmt: skip


@functools.lru_cache(maxsize=4)
def stream_run(traces_dir: str, written: tuple[tuple[str, int, int], ...]) -> StreamRun:
    """The folded annotations and the groups to read of the run whose ``traces`` folder this
    is: read once per folder and state of its files (``written``, :func:`_written`)."""
    traces = Path(traces_dir)
    updates: dict[str, list[dict[str, Any]]] = {}
    annotations = traces / "annotations"
    producers = (
        sorted(p for p in annotations.iterdir() if p.is_dir()) if annotations.is_dir() else []
    )
    for producer in producers:
        for chunk in chunks(producer):
            for record in chunk_records(str(chunk))[0]:
                updates.setdefault(str(record.get("trace_id")), []).append(record)
    effective = set()
    annotated = False
    for trace_id, records in updates.items():
        info: dict[str, Any] = {}
        for record in records:
            _merge(info, record.get("info") or {})
            annotated |= any("advantages" in b for b in record.get("branches") or [])
        if info.get("effective") is True:
            effective.add(trace_id)
    groups = _groups(traces)
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
    return StreamRun(
        updates=updates,
        kept_groups=frozenset(kept),
        left_out=(len(left), sum(len(groups[g]) for g in left)),
        annotated=annotated,
    )


def _groups(traces: Path) -> dict[str, list[tuple[list[str], float | None]]]:
    """Each group's episodes: their trace ids and their one reward (None when the episode
    failed or its traces differ), from the index where there is one, else from the chunks."""
    groups: dict[str, list[tuple[list[str], float | None]]] = {}
    index = traces / "stream.index.jsonl"
    if index.is_file():
        for row in json_records(str(index))[0]:
            ids = [str(t) for t in row.get("trace_ids") or []]
            reward = row.get("reward") if row.get("ok") and len(ids) == 1 else None
            groups.setdefault(str(row.get("group")), []).append((ids, reward))
        return groups
    for chunk in chunks(traces / "stream"):
        for episode in chunk_records(str(chunk))[0]:
            found = episode.get("traces") or []
            rewards = {trace_reward(t) for t in found}
            reward = rewards.pop() if episode.get("ok") and len(rewards) == 1 else None
            group = (episode.get("group") or {}).get("id")
            groups.setdefault(str(group), []).append(([str(t.get("id")) for t in found], reward))
    return groups
