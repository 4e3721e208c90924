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
the plain one is read; where the two disagree, the one holding more, said: :func:`chunk_form`).
What the trained cohort adds comes later, as update records under
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
from itertools import chain
from pathlib import Path
from typing import Any

from advcli.core.ragged import offsets_from_lengths, ranges
from advcli.errors import DataError, where
from advcli.io import jsonl
from advcli.io.arrow import list_array
from advcli.lazy_imports import np, pa
from advcli.presets.base import (
    Converted,
    Preset,
    PresetOptions,
    Setting,
    json_records,
    non_finite,
    step_of,
)
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

TORN = "{path}: its last line is cut short (the run was writing it): left out"

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
        found = super().files(inputs)
        read = [chunk_form(Path(p))[0] if is_stream_chunk(p) else Path(p) for p in found]
        return list(dict.fromkeys(str(p) for p in read))

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
            found, skipped = episode_rows(path, line, episode, step)
            failed += skipped > 0
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
    path: str,
    line: int,
    episode: dict[str, Any],
    step: int | None,
    run: StreamRun | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """One row per root-to-leaf path of every trace of an episode, and how many of its traces
    were left out (a failed episode's, without nodes); from the stream (``run``), the traces
    folded with the run's annotations, and each row says whether its trace was trained on
    (``effective``), its step the one it shipped at."""
    group = episode.get("group")
    if not isinstance(group, dict) or group.get("id") is None:
        msg = f"{where(path, line, 'group', line=True)}: no group.id, which a prime-rl episode has"
        raise DataError(msg + ". Hint: check the file and --from")
    work = (episode.get("run") or {}).get("work") or {}
    out = []
    skipped = 0
    for t, trace in enumerate(episode.get("traces") or []):
        nodes = trace.get("nodes") or []
        if not nodes and episode.get("ok") is False:  # an episode that failed: no tokens
            skipped += 1
            continue
        tree = trace_tree(path, line, t, nodes)
        tokens = trace_tokens(path, line, t, nodes)
        if run is not None:
            run.fold(path, line, t, trace, tree, tokens)
        info = trace.get("info") or {}
        shipped = (info.get("ship") or {}).get("step")
        ids, mask = tokens.ids[tree.positions], tokens.mask[tree.positions]
        logprobs, advantages = tokens.logprobs[tree.positions], tokens.advantages[tree.positions]
        logged = np.r_[0, np.cumsum(tokens.logged[tree.path_nodes])]
        turn_rewards = (
            path_turn_rewards(nodes, tree, mask, info["turn_rewards"])
            if isinstance(info.get("turn_rewards"), list)
            else None
        )
        costs = trace_costs(trace, nodes)
        at, nb = tree.token_bounds, tree.node_bounds
        for k, leaf in enumerate(tree.leaves.tolist()):
            row = {
                "prompt_id": str(group["id"]),
                "rollout_id": f"{episode.get('id')}/{t}/{leaf}",
                "input_ids": ids[at[k] : at[k + 1]],
                "action_mask": mask[at[k] : at[k + 1]].astype(np.int8),
                "reward": trace_reward(trace),
                "logprobs": logprobs[at[k] : at[k + 1]],
                "source_advantages": advantages[at[k] : at[k + 1]],
                "step": shipped if shipped is not None else work.get("step", step),
                "ok": episode.get("ok"),
                "env": (episode.get("env") or {}).get("name"),
                "task": (episode.get("task") or {}).get("key"),
                # who wrote the trace, in which interaction (hierarchical-grpo, rae)
                "agent": agent.get("name")
                if isinstance(agent := trace.get("agent"), dict)
                else None,
                "episode": None if episode.get("id") is None else str(episode.get("id")),
                **costs,
            }
            if run is not None:
                row["effective"] = info.get("effective") is True
                if logged[nb[k + 1]] == logged[nb[k]]:
                    # not annotated: not shipped yet, or left out for an advantage of 0
                    row["source_advantages"] = None
            if turn_rewards is not None:
                kept = turn_rewards[k]
                row["turn_rewards"] = False if kept is None else kept  # False: said, left out
            out.append(row)
    return out, skipped


def path_turn_rewards(
    nodes: list[dict[str, Any]], tree: Tree, mask: np.ndarray, rewards: list[Any]
) -> list[list[float | None] | None]:
    """The turn rewards of each root-to-leaf path (``mask``: the paths' masks end to end):
    ``info.turn_rewards`` holds one per sampled node of the trace, in node order; a path keeps
    its sampled nodes'. None where they do not line up with the path's action spans (a count
    that differs, two sampled nodes with no token between them)."""
    sampled = np.array([bool(node.get("sampled")) for node in nodes], dtype=bool)
    if int(sampled.sum()) != len(rewards) or not all(
        r is None or (isinstance(r, int | float) and not isinstance(r, bool)) for r in rewards
    ):
        return [None] * len(tree.leaves)
    reward_of = np.full(len(nodes), None, dtype=object)
    reward_of[sampled] = [None if r is None else float(r) for r in rewards]
    starts = np.zeros(len(mask), dtype=bool)
    starts[tree.token_bounds[:-1][np.diff(tree.token_bounds) > 0]] = True
    opens = mask & (starts | ~np.r_[False, mask[:-1]])  # a span of action tokens begins
    spans = np.diff(np.r_[0, np.cumsum(opens)][tree.token_bounds])
    out: list[list[float | None] | None] = []
    for k in range(len(tree.leaves)):
        on_path = tree.path_nodes[tree.node_bounds[k] : tree.node_bounds[k + 1]]
        kept = reward_of[on_path[sampled[on_path]]].tolist()
        out.append(kept if len(kept) == spans[k] else None)
    return out


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
    run = stream_run(str(traces), _written(traces), frozenset(numbered(traces / "stream")))
    records, lines, torn = chunk_records(path)
    twins = chunk_form(Path(path))[1]
    rows: list[dict[str, Any]] = []
    row_lines: list[int] = []
    failed = 0
    for episode, line in zip(records, lines.tolist(), strict=True):
        if str((episode.get("group") or {}).get("id")) not in run.kept_groups:
            continue
        found, skipped = episode_rows(path, line, episode, None, run)
        failed += skipped > 0
        rows += found
        row_lines += [line] * len(found)
    warnings = turn_reward_warnings(path, rows) + ([twins] if twins else [])
    if failed:
        warnings.append(FAILED.format(path=path, failed=failed))
    if torn:
        warnings.append(TORN.format(path=path))
    if run.left_out[0]:
        warnings.append(UNTRAINED.format(groups=run.left_out[0], episodes=run.left_out[1]))
    warnings += [*run.warnings, *unlisted(path, records, run)]
    if not rows:
        return Converted(pa.table({}), np.zeros(0, np.int64), warnings)
    if not run.annotated:  # nothing shipped yet: no advantages to compare with, not zeros
        for row in rows:
            del row["source_advantages"]
    return Converted(rollout_table(rows), np.array(row_lines), warnings)


def unlisted(path: str, records: list[dict[str, Any]], run: StreamRun) -> list[str]:
    """A warning for the episodes of groups read that the index lists in this chunk and the
    chunk lacks: left out, counted."""
    held = {str(r.get("id")) for r in records}
    lacking = run.listed.get(int(Path(path).name.split(".")[0]), frozenset()) - held
    if not lacking:
        return []
    return [
        f"{path}: {len(lacking)} episode(s) the index lists in this chunk are not in it "
        f"(one: {min(lacking)}): left out"
    ]


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
    log-probabilities and advantages given over each node's sampled tokens placed on them (0
    elsewhere); ``logged``: the nodes that carry advantages (the fold may add some)."""

    ids: np.ndarray
    mask: np.ndarray
    logprobs: np.ndarray
    advantages: np.ndarray
    logged: np.ndarray
    node_of: np.ndarray  # each token's node


def trace_tokens(path: str, line: int, t: int, nodes: list[dict[str, Any]]) -> TraceTokens:
    """Trace ``t``'s :class:`TraceTokens`, each node's lists checked against its tokens, and
    its logged advantages finite."""
    at = where(path, line, "nodes", line=True)
    ids: list[Any] = []
    masks: list[Any] = []
    sizes = []
    given: dict[str, list[Any]] = {"logprobs": [], "advantages": []}  # per node: None or list
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
        advantages=placed["advantages"],
        logged=np.array([v is not None for v in given["advantages"]], dtype=bool),
        node_of=node_of,
    )


PER_TOKEN = {"input_ids": "int32", "action_mask": "int8", "logprobs": "float32",
             "source_advantages": "float32"}  # fmt: skip
"""A row's per-token columns and their types."""


def rollout_table(rows: list[dict[str, Any]]) -> pa.Table:
    """The rows as a table; a per-token column of None (a trace not annotated) is null on
    each of its row's tokens."""
    lengths = [len(r["input_ids"]) for r in rows]
    offsets = np.r_[0, np.cumsum(lengths)].astype(np.int64)
    columns: dict[str, pa.Array] = {}
    for name in rows[0]:
        values = [r[name] for r in rows]
        if name in PER_TOKEN:
            flat = np.concatenate([np.zeros(n, PER_TOKEN[name]) if v is None else v
                                   for v, n in zip(values, lengths, strict=True)])  # fmt: skip
            unknown = np.repeat([v is None for v in values], lengths)
            array = pa.array(flat, mask=unknown) if unknown.any() else flat
            columns[name] = list_array(array, offsets)
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
        onto its ``tokens``."""
        for read_at, update in self.updates.get(str(trace.get("id")), []):
            info = update.get("info")
            if isinstance(info, dict):
                _merge(trace.setdefault("info", {}), info)
            for branch in update.get("branches") or []:
                if isinstance(branch, dict) and branch.get("advantages") is not None:
                    _fold_advantages(read_at, trace, tree, tokens, branch)


def _fold_advantages(
    at: str, trace: dict[str, Any], tree: Tree, tokens: TraceTokens, branch: dict[str, Any]
) -> None:
    """A branch's advantages (one per token of its root-to-leaf path) cut along the path onto
    its nodes: each node's sampled values replace its own, unless one of them is null. (The
    trainer's streams, log-probabilities and entropies, are not read.) ``at``: where the
    update was read, for errors."""
    index, values = branch.get("index"), branch["advantages"]
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
            f"{at}: trace {trace.get('id')}'s annotation gives {count} advantages for a "
            f"branch of {len(positions)} tokens. Hint: check the annotations folder"
        )
        raise DataError(msg)
    given = np.empty(len(values), dtype=object)
    try:
        given[:] = values
        null = given == None  # noqa: E711 (element by element on an object array)
        numbers = np.where(null, 0.0, given).astype(np.float64)
    except (TypeError, ValueError):
        msg = f"{at}: trace {trace.get('id')}'s annotation gives advantages that are not numbers"
        raise DataError(msg + ". Hint: check the annotations folder") from None
    sampled = tokens.mask[positions]
    node = tokens.node_of[positions]
    kept = sampled & ~np.isin(node, node[sampled & null])  # a node with a null keeps its own
    not_finite = np.flatnonzero(kept & ~np.isfinite(numbers))
    if len(not_finite):
        first = int(not_finite[0])
        msg = (
            f"{at}: trace {trace.get('id')}'s annotation gives advantage "
            f"{non_finite(numbers[first])} at token {first} of branch {index}, which prime-rl "
            "never trains on. Hint: check the annotations folder"
        )
        raise DataError(msg)
    tokens.advantages[positions[kept]] = numbers[kept]
    tokens.logged[node[kept]] = True


def _written(traces: Path) -> tuple[tuple[str, int, int], ...]:
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
    is: read once per folder and state of its files (``written``, :func:`_written`; ``present``:
    the numbers of the stream's chunks, whose episodes the index lists)."""
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
