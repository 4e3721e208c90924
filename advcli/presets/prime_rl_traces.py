"""prime-rl's traces (:mod:`advcli.presets.prime_rl`): a trace's tree of message nodes, checked,
as its root-to-leaf paths (:class:`Tree`), the tokens of its nodes (:class:`TraceTokens`), and
its reward.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Any

from advcli.core.ragged import offsets_from_lengths, ranges
from advcli.errors import DataError, where
from advcli.lazy_imports import np
from advcli.presets.base import non_finite


def trace_reward(trace: dict[str, Any]) -> float:
    """A trace's reward: the sum of its rewards' score × weight."""
    rewards = trace.get("rewards") or {}
    return sum(float(r.get("score", 0.0)) * float(r.get("weight", 1.0)) for r in rewards.values())


EXPANDED_TOKENS = 1 << 25
"""Most tokens the root-to-leaf paths of one episode may hold in all: each path is a rollout
that repeats its shared prefix, so a deep tree of few tokens can expand past any memory."""


@dataclass(frozen=True)
class Tree:
    """A trace's node tree, checked, as its root-to-leaf paths (one per leaf, in node order):
    path k's nodes, root first, are ``path_nodes[node_bounds[k]:node_bounds[k + 1]]``, its
    tokens ``positions[token_bounds[k]:token_bounds[k + 1]]`` of the trace's tokens in node
    order (:class:`TraceTokens`)."""

    leaves: np.ndarray
    path_nodes: np.ndarray
    node_bounds: np.ndarray
    positions: np.ndarray
    token_bounds: np.ndarray


def trace_tree(path: str, line: int, t: int, nodes: list[Any]) -> Tree:
    """Trace ``t``'s node tree, checked first: every parent another node of the trace (or null
    for a root), no cycle, and its paths within :data:`EXPANDED_TOKENS` tokens and nodes in all,
    counted before a path is built."""
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
    sizes = [len(node.get("token_ids") or []) for node in nodes]
    reach = [-1] * n  # tokens from the root to the node, once known
    depth = [0] * n  # nodes from the root to the node
    for i in range(n):
        chain: list[int] = []
        j: int | None = i
        while j is not None and reach[j] < 0:
            if j in chain:
                msg = f"{at}: trace {t}: node {j}'s parents form a cycle. Hint: check the file"
                raise DataError(msg)
            chain.append(j)
            j = parent[j]
        above, steps = (0, 0) if j is None else (reach[j], depth[j])
        for k in reversed(chain):
            above, steps = above + sizes[k], steps + 1
            reach[k], depth[k] = above, steps
    leaves = np.array(sorted(set(range(n)) - {p for p in parent if p is not None}), np.int64)
    expanded = sum(reach[leaf] for leaf in leaves.tolist())
    visits = sum(depth[leaf] for leaf in leaves.tolist())
    if max(expanded, visits) > EXPANDED_TOKENS:
        held = f"{expanded:,} tokens" if expanded > EXPANDED_TOKENS else f"{visits:,} nodes"
        msg = (
            f"{at}: trace {t}'s tree expands to {len(leaves):,} root-to-leaf paths of "
            f"{held} in all (each path a rollout, its prefix repeated), beyond "
            f"advcli's limit of {EXPANDED_TOKENS:,}. Hint: split the episode, or drop it"
        )
        raise DataError(msg)
    # every path climbed from its leaf at once, its nodes written from its end
    up = np.array([-1 if p is None else p for p in parent], np.int64)
    node_bounds = offsets_from_lengths(np.array(depth, np.int64)[leaves])
    path_nodes = np.empty(int(node_bounds[-1]), np.int64)
    at_node, slot = leaves, node_bounds[1:] - 1
    while len(at_node):
        path_nodes[slot] = at_node
        at_node, slot = up[at_node], slot - 1
        climbing = at_node >= 0
        at_node, slot = at_node[climbing], slot[climbing]
    size = np.array(sizes, np.int64)
    return Tree(
        leaves=leaves,
        path_nodes=path_nodes,
        node_bounds=node_bounds,
        positions=ranges(offsets_from_lengths(size)[:-1][path_nodes], size[path_nodes]),
        token_bounds=offsets_from_lengths(np.array(reach, np.int64)[leaves]),
    )


@dataclass(frozen=True)
class TraceTokens:
    """A trace's tokens, its nodes' end to end in node order: ids, masks, and the
    log-probabilities (the sampler's and the trainer's) and advantages given over each node's
    sampled tokens placed on them (0 elsewhere); ``logged``: the nodes that carry advantages,
    ``trained``: those that carry the trainer's log-probabilities (the fold may add some)."""

    ids: np.ndarray
    mask: np.ndarray
    logprobs: np.ndarray
    trainer_logprobs: np.ndarray
    advantages: np.ndarray
    logged: np.ndarray
    trained: np.ndarray
    node_of: np.ndarray  # each token's node


def trace_tokens(path: str, line: int, t: int, nodes: list[dict[str, Any]]) -> TraceTokens:
    """Trace ``t``'s :class:`TraceTokens`, each node's lists checked against its tokens, and
    its logged advantages finite."""
    at = where(path, line, "nodes", line=True)
    ids: list[Any] = []
    masks: list[Any] = []
    sizes = []
    # per node: None or a list
    given: dict[str, list[Any]] = {"logprobs": [], "trainer_logprobs": [], "advantages": []}
    for i, node in enumerate(nodes):
        tokens = node.get("token_ids") or []
        mask = node.get("mask") or [False] * len(tokens)
        if not isinstance(tokens, list) or not isinstance(mask, list):
            msg = f"{at}: trace {t}, node {i}: token_ids and mask are not lists"
            raise DataError(msg + ". Hint: check the file")
        if len(mask) != len(tokens):
            msg = (
                f"{at}: a node has {len(tokens)} token ids and {len(mask)} mask entries. "
                "Hint: check the file"
            )
            raise DataError(msg)
        ids += tokens
        masks += mask
        sizes.append(len(tokens))
        for name, values in given.items():
            values.append(node.get(name))
    node_of = np.repeat(np.arange(len(nodes), dtype=np.int64), sizes)
    mask_flat = np.array(masks, dtype=bool)
    sampled = np.bincount(node_of[mask_flat], minlength=len(nodes)).tolist()
    placed = {}
    for name, values in given.items():
        for own, count in zip(values, sampled, strict=True):
            if own is not None and (not isinstance(own, list) or len(own) != count):
                held = len(own) if isinstance(own, list) else "no list of"
                msg = (
                    f"{at}: a node's {name} has {held} values for {count} sampled tokens. "
                    "Hint: check the file"
                )
                raise DataError(msg)
        flat = np.zeros(len(mask_flat), dtype=np.float32)
        has = np.array([v is not None for v in values], dtype=bool)
        flat[mask_flat & has[node_of]] = list(chain.from_iterable(v for v in values if v))
        placed[name] = flat
    not_finite = np.flatnonzero(mask_flat & ~np.isfinite(placed["advantages"]))
    if len(not_finite):
        first = int(not_finite[0])
        msg = (
            f"{at}: trace {t}, node {int(node_of[first])}: a logged advantage is "
            f"{non_finite(placed['advantages'][first])}, which prime-rl never trains on. "
            "Hint: check the file"
        )
        raise DataError(msg)
    return TraceTokens(
        ids=np.array(ids, dtype=np.int32),
        mask=mask_flat,
        logprobs=placed["logprobs"],
        trainer_logprobs=placed["trainer_logprobs"],
        advantages=placed["advantages"],
        logged=np.array([v is not None for v in given["advantages"]], dtype=bool),
        trained=np.array([v is not None for v in given["trainer_logprobs"]], dtype=bool),
        node_of=node_of,
    )
