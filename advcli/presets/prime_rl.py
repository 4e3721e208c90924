"""prime-rl: the orchestrator's file monitor (on by default), in either of its layouts.

**Step files** (until PR #3444) →
``{output_dir}/rollouts/step_{N}/{train,eval}/{all,effective}/traces.jsonl``. A line is one
verifiers episode: its ``id``, its ``group`` (``group.id`` is the GRPO group) and its
``traces``. A trace has ``rewards`` (``{name: {score, weight}}``: the reward is the sum of
score × weight) and a tree of message ``nodes`` (``parent``, ``token_ids``, ``mask``, and over
the sampled tokens ``logprobs``, ``advantages`` and, where the trainer's were written,
``trainer_logprobs``). Every path from the root to a leaf is one rollout of the group: its
nodes' tokens and masks, concatenated; the node advantages, placed on the sampled tokens, are
kept as ``source_advantages``, the sampler's and the trainer's log-probabilities as
``logprobs`` and ``trainer_logprobs`` (null on a path one of whose sampled nodes has none; no
column where no trace of the file has them). ``effective`` holds what was trained on
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
deep-merged; a branch's stream (the orchestrator's ``advantages``, the trainer's
``trainer_logprobs``: one value per token of the branch's root-to-leaf path) is cut along the
path by each node's token count, and its values at the sampled positions replace the node's.
``stream.index.jsonl`` (one row per episode: its group, trace ids and reward) gives the groups
without reading the chunks twice.

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

from pathlib import Path
from typing import Any

from advcli.errors import DataError, where
from advcli.io.arrow import list_array
from advcli.lazy_imports import np, pa
from advcli.presets.base import Converted, Preset, PresetOptions, Setting, json_records, step_of
from advcli.presets.prime_rl_stream import (
    TORN,
    StreamRun,
    chunk_form,
    chunk_records,
    is_stream_chunk,
    numbered,
    stream_run,
    written_state,
)
from advcli.presets.prime_rl_traces import (
    TraceTokens,
    Tree,
    trace_reward,
    trace_tokens,
    trace_tree,
)
from advcli.presets.slime_samples import passthrough

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
        return Converted(rollout_table(without_trainer_stream(rows)), np.array(row_lines), warnings)


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
        raise DataError(msg + ". Hint: check the file and `from_`")
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
        trainer_logprobs = tokens.trainer_logprobs[tree.positions]
        logged = np.r_[0, np.cumsum(tokens.logged[tree.path_nodes])]
        # a path has the trainer's stream where each of its sampled nodes has it
        untrained = np.r_[0, np.cumsum(untrained_nodes(nodes, tokens)[tree.path_nodes])]
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
                "trainer_logprobs": trainer_logprobs[at[k] : at[k + 1]]
                if untrained[nb[k + 1]] == untrained[nb[k]]
                else None,
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


def untrained_nodes(nodes: list[dict[str, Any]], tokens: TraceTokens) -> np.ndarray:
    """Per node: whether it holds sampled tokens and not the trainer's log-probabilities."""
    sampled = np.bincount(tokens.node_of[tokens.mask], minlength=len(nodes)) > 0
    out: np.ndarray = sampled & ~tokens.trained
    return out


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


def stream_chunk(path: str) -> Converted:
    """One chunk of a trace stream, its traces folded with the run's annotations; the rows of
    groups the run has not trained on left out (:func:`stream_run`)."""
    traces = Path(path).parent.parent
    run = stream_run(str(traces), written_state(traces), frozenset(numbered(traces / "stream")))
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
    return Converted(rollout_table(without_trainer_stream(rows)), np.array(row_lines), warnings)


def without_trainer_stream(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows, without a ``trainer_logprobs`` column where none of them has the trainer's
    log-probabilities (a run whose trainer annotates nothing, a file of episodes): a column
    null throughout would stand for a stream the log does not have."""
    if all(row["trainer_logprobs"] is None for row in rows):
        for row in rows:
            del row["trainer_logprobs"]
    return rows


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


PER_TOKEN = {"input_ids": "int32", "action_mask": "int8", "logprobs": "float32",
             "trainer_logprobs": "float32", "source_advantages": "float32"}  # fmt: skip
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
