"""prime-rl: the orchestrator's file monitor (on by default) →
``{output_dir}/rollouts/step_{N}/{train,eval}/{all,effective}/traces.jsonl``.

A line is one verifiers episode: its ``id``, its ``group`` (``group.id`` is the GRPO group) and
its ``traces``. A trace has ``rewards`` (``{name: {score, weight}}``: the reward is the sum of
score × weight) and a tree of message ``nodes`` (``parent``, ``token_ids``, ``mask``, and over
the sampled tokens ``logprobs`` and ``advantages``). Every path from the root to a leaf is one
rollout of the group: its nodes' tokens and masks, concatenated; the node advantages, placed on
the sampled tokens, are kept as ``source_advantages``. ``effective`` holds what was trained on
(with advantages); ``all`` holds every episode, errors too: a folder is searched for the
``train/effective`` files only, and a file under ``all`` is read only when named.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from advcli.errors import DataError, where
from advcli.io.arrow import list_array
from advcli.presets.base import Converted, Preset, PresetOptions, json_records, step_of
from advcli.presets.slime import passthrough


class PrimeRl(Preset):
    name = "prime-rl"
    framework = "prime-rl"
    switch = "the orchestrator's file monitor (on by default)"
    writes = "OUTPUT_DIR/rollouts/step_{N}/train/effective/traces.jsonl"
    patterns = (
        "step_*/train/effective/traces.jsonl",
        "rollouts/step_*/train/effective/traces.jsonl",
        "train/effective/traces.jsonl",
        "effective/traces.jsonl",
    )
    marks = (frozenset({"group", "traces"}),)
    convention = "prime-rl"
    logged = "source_advantages"

    def convert(self, path: str, options: PresetOptions) -> Converted:
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
        warnings = []
        if failed:
            warnings.append(f"{path}: skipped {failed} failed episode(s) without tokens")
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
    path: str, line: int, episode: dict[str, Any], step: int | None
) -> list[dict[str, Any]]:
    """One row per root-to-leaf path of every trace of an episode."""
    group = episode.get("group")
    if not isinstance(group, dict) or group.get("id") is None:
        msg = f"{where(path, line, 'group', line=True)}: no group.id, which a prime-rl episode has"
        raise DataError(msg + ". Hint: check the file and --from")
    work = (episode.get("run") or {}).get("work") or {}
    out = []
    for t, trace in enumerate(episode.get("traces") or []):
        rewards = trace.get("rewards") or {}
        reward = sum(float(r.get("score", 0.0)) * float(r.get("weight", 1.0))
                     for r in rewards.values())  # fmt: skip
        nodes = trace.get("nodes") or []
        if not nodes and episode.get("ok") is False:  # an episode that failed: no tokens
            continue
        for leaf, branch in tree_paths(path, line, t, nodes):
            path_nodes = [nodes[i] for i in branch]
            ids, mask, logprobs, advantages = concatenate(path, line, path_nodes)
            out.append({
                "prompt_id": str(group["id"]),
                "rollout_id": f"{episode.get('id')}/{t}/{leaf}",
                "input_ids": ids,
                "action_mask": mask,
                "reward": reward,
                "logprobs": logprobs,
                "source_advantages": advantages,
                "step": work.get("step", step),
                "ok": episode.get("ok"),
                "env": (episode.get("env") or {}).get("name"),
                "task": (episode.get("task") or {}).get("key"),
            })  # fmt: skip
    return out


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
    return pa.table(columns)
