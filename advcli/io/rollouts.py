"""Validate a log and turn it into flat numpy arrays (the core's input).

Two halves, so that a log larger than memory can be read in two passes:

- :func:`extract_rows` reads the per-row scalar columns (ids, rewards, times, flags) of the
  whole log: small even for a huge log;
- :func:`~advcli.io.tokens.extract_tokens` reads the token columns of one batch of rows (mask or
  spans, values, token rewards), in :mod:`advcli.io.tokens`.

Every check is vectorised and reports the first offending row with its file, row (JSONL: line)
and column, what was seen, and a hint. Nothing here computes an estimator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from advcli.core.ragged import lengths, ranges, row_of
from advcli.errors import DataError, SchemaError, closest, columns_found, file_list, where
from advcli.io.arrow import flat_list
from advcli.io.retokenize import COMPLETION_COLUMNS, PROMPT_COLUMNS, TOKENIZER_FILE
from advcli.io.schema import POLICY_LOGPROBS, POLICY_STREAMS, Roles
from advcli.io.sources import Sources
from advcli.lazy_imports import np, pa, pc

FLOAT32_MAX = 3.4028234663852886e38  # the largest number advcli can write


@dataclass
class Rows:
    """The per-row scalar columns of a whole log, validated."""

    n_rows: int
    reward: np.ndarray | None  # float64 per row
    group_codes: np.ndarray | None  # int64 per row
    group_keys: pa.Array | None  # the prompt id of each group code
    rollout_codes: np.ndarray  # int64 per row; segments of one rollout share it
    rollout_keys: pa.Array | None  # rollout id of each rollout code (None: row numbers)
    segment_rank: np.ndarray  # int64 per row: 0 for the first segment
    segmented: bool  # the log has rows that are segments of a longer rollout
    completion_time: np.ndarray | None  # float64 per row
    truncated: np.ndarray  # bool per row: the rollout was cut, not finished
    bootstrap: np.ndarray  # float64 per row: the value after the last token (0 unless truncated;
    # NaN for a truncated row without a finite bootstrap_value: only temporal methods need one)
    has_bootstrap: bool  # the log has a bootstrap_value column
    baseline_reward: np.ndarray | None = None  # float64 per row (ReMax's greedy reward)
    steps: StepRewards | None = None  # process rewards (step_rewards, step_ends)
    named: dict[str, np.ndarray] = field(default_factory=dict)  # numeric columns asked by name
    # (float64 per row, NaN where null): what a method reads beyond the roles (GDPO's rewards)
    sums: dict[str, np.ndarray] = field(default_factory=dict)  # per-row sums of token columns,
    # filled by the engine before planning when a method asks (Method.row_sums)
    unscored: np.ndarray | None = None  # bool per row: its rollout has no reward (left out of
    # the statistics, advantage 0)
    batch_codes: np.ndarray | None = None  # int64 per row: the batch (a framework's step)
    step_reward: np.ndarray | None = None  # float64 per row: the agent step's own reward, NaN
    # where null (the methods that read it take a null as 0)
    labels: dict[str, np.ndarray] = field(default_factory=dict)  # int64 codes per row of the
    # key roles the log has (LABEL_ROLES: agent, episode, state); -1: null
    label_keys: dict[str, pa.Array] = field(default_factory=dict)  # the value of each code

    def unscored_rollouts(self) -> np.ndarray | None:
        """Per rollout: it has no reward (None: every rollout has one)."""
        if self.unscored is None or not self.unscored.any():
            return None
        unscored: np.ndarray = self.unscored[self.last_segment_row()]
        return unscored

    def rollout_batches(self) -> np.ndarray | None:
        """The batch code of each rollout (None: the log does not say)."""
        return None if self.batch_codes is None else self.batch_codes[self.last_segment_row()]

    def scored(self) -> Rows:
        """These rows less those of rollouts without a reward, rollouts numbered again in
        order (groups keep their codes: a group may be left empty)."""
        if self.unscored is None:
            return self
        keep = ~self.unscored
        codes, rollout_codes = np.unique(self.rollout_codes[keep], return_inverse=True)

        def cut(x: np.ndarray | None) -> np.ndarray | None:
            return None if x is None else x[keep]

        steps = None
        if self.steps is not None:
            lo, hi = self.steps.offsets[:-1][keep], self.steps.offsets[1:][keep]
            picked = ranges(lo, hi - lo)
            steps = StepRewards(self.steps.rewards[picked], self.steps.ends[picked],
                                np.r_[0, np.cumsum(hi - lo)].astype(np.int64))  # fmt: skip
        return Rows(
            n_rows=int(keep.sum()),
            reward=cut(self.reward),
            group_codes=cut(self.group_codes),
            group_keys=self.group_keys,
            rollout_codes=rollout_codes.astype(np.int64),
            rollout_keys=None if self.rollout_keys is None else self.rollout_keys.take(codes),
            segment_rank=self.segment_rank[keep],
            segmented=self.segmented,
            completion_time=cut(self.completion_time),
            truncated=self.truncated[keep],
            bootstrap=self.bootstrap[keep],
            has_bootstrap=self.has_bootstrap,
            baseline_reward=cut(self.baseline_reward),
            steps=steps,
            named={k: v[keep] for k, v in self.named.items()},
            sums={k: v[keep] for k, v in self.sums.items()},
            batch_codes=cut(self.batch_codes),
            step_reward=cut(self.step_reward),
            labels={k: v[keep] for k, v in self.labels.items()},
            label_keys=self.label_keys,
        )

    @property
    def n_rollouts(self) -> int:
        return int(self.rollout_codes.max()) + 1 if self.n_rows else 0

    def last_segment_row(self) -> np.ndarray:
        """For every rollout, the row of its last segment."""
        out = np.zeros(self.n_rollouts, dtype=np.int64)
        order = np.lexsort((self.segment_rank, self.rollout_codes))
        out[self.rollout_codes[order]] = order  # later (higher rank) rows overwrite earlier
        return out

    def is_last_segment(self) -> np.ndarray:
        last = np.zeros(self.n_rows, dtype=bool)
        last[self.last_segment_row()] = True
        return last

    def rollout_rewards(self) -> np.ndarray:
        """One reward per rollout: its last segment's."""
        assert self.reward is not None, "the log has no reward column"
        rewards: np.ndarray = self.reward[self.last_segment_row()]
        return rewards

    def rollout_labels(self, role: str) -> np.ndarray:
        """The code of each rollout's ``role`` (a :data:`LABEL_ROLES` role the log has)."""
        codes: np.ndarray = self.labels[role][self.last_segment_row()]
        return codes

    def rollout_groups(self) -> np.ndarray:
        """The group code of each rollout."""
        assert self.group_codes is not None, "the log has no prompt_id column"
        groups: np.ndarray = self.group_codes[self.last_segment_row()]
        return groups

    def completion_order(self) -> np.ndarray:
        """Rollouts by completion: ``completion_time``, then rollout id; row order if no time."""
        first_row = np.full(self.n_rollouts, self.n_rows, dtype=np.int64)
        np.minimum.at(first_row, self.rollout_codes, np.arange(self.n_rows))
        if self.completion_time is None:
            return np.argsort(first_row, kind="stable")
        key_rank = np.zeros(self.n_rollouts, dtype=np.int64)
        if self.rollout_keys is not None:
            order = np.argsort(self.rollout_keys.to_numpy(zero_copy_only=False), kind="stable")
            key_rank[order] = np.arange(self.n_rollouts)
        finished = self.completion_time[self.last_segment_row()]
        return np.lexsort((first_row, key_rank, finished))


@dataclass(frozen=True)
class StepRewards:
    """Process rewards of every row: ``rewards[offsets[r]:offsets[r + 1]]`` are row r's step
    rewards, and ``ends`` (same layout) the index, within the row's tokens, of each step's last
    token, increasing."""

    rewards: np.ndarray  # float64
    ends: np.ndarray  # int64
    offsets: np.ndarray  # int64, from 0


def numeric(values: pa.Array, fill: float = float("nan"), *, floats: bool = False) -> np.ndarray:
    """As float64 numpy (nulls filled); ``floats=True`` keeps float32 as it is (no copy)."""
    if values.null_count:
        values = pc.fill_null(values.cast(pa.float64()), fill)
    out: np.ndarray = values.to_numpy(zero_copy_only=False)
    if floats and out.dtype.kind == "f":
        return out
    return out.astype(np.float64, copy=False)


def first_index(bad: np.ndarray) -> int:
    """The index of the first True of ``bad`` (it has one)."""
    return int(np.flatnonzero(bad)[0])


class Checker:
    """Raises the first problem found, located by file, row and column.

    ``row0`` is the global row of the table's first row (a batch of a larger log).
    """

    def __init__(self, table: pa.Table, sources: Sources, row0: int = 0):
        self.table = table
        self.sources = sources
        self.row0 = row0

    def fail(self, row: int, column: str | None, problem: str, hint: str) -> None:
        msg = f"{self.sources.at(self.row0 + row, column)}: {problem}. Hint: {hint}"
        raise DataError(msg)

    def no_nulls(self, column: str, what: str) -> None:
        col = self.table.column(column)
        if col.null_count:
            row = first_index(col.is_null().to_numpy(zero_copy_only=False))
            self.fail(row, column, f"{what} is missing (null)", f"every row needs a {what}")

    def same_rollout_in_two_files(self, a: int, b: int, column: str, rollout: str) -> None:
        """Rows ``a`` and ``b`` hold the same rollout: if in two files, say which."""
        file_a, at_a, line_a = self.sources.locate(self.row0 + a)
        file_b, at_b, line_b = self.sources.locate(self.row0 + b)
        if file_a != file_b:
            msg = (
                f"{where(file_b, at_b, column, line=line_b)}: rollout {rollout} is also at "
                f"{file_a} {'line' if line_a else 'row'} {at_a}; two files hold the same "
                "rollouts (one log in two formats in one folder?). Hint: give only one of them"
            )
            raise DataError(msg)

    def utf8(self, column: str) -> None:
        """Text is valid UTF-8 (Parquet readers do not check it; a corrupt page can break it)."""
        col = self.table.column(column)
        if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            return
        try:
            col.validate(full=True)
        except pa.ArrowInvalid:
            raw = col.cast(pa.large_binary()).to_pylist()
            row = next(i for i, v in enumerate(raw) if v is not None and not _decodes(v))
            self.fail(row, column, "text that is not valid UTF-8", "check the file is intact")

    def finite(
        self,
        column: str,
        x: np.ndarray,
        offsets: np.ndarray | None = None,
        positions: np.ndarray | None = None,
    ) -> None:
        """Every ``x`` finite and within float32's range (advcli writes float32: a larger
        number would come out infinite); ``x`` is per row, or per token (``offsets``) at
        ``positions``."""
        bad = ~(np.abs(x) <= FLOAT32_MAX)  # NaN too
        if bad.any():
            i = first_index(bad)
            row = i
            if offsets is not None:
                token = i if positions is None else int(positions[i])
                row = int(np.searchsorted(offsets, token, side="right")) - 1
            if np.isfinite(x[i]):
                problem = f"value {x[i]:g} is beyond float32's range (±3.4e38), which advcli writes"
                self.fail(row, column, problem, "scale the column")
            self.fail(row, column, f"value {x[i]} is not a finite number", "fix or drop the row")


def require(
    roles: Roles,
    columns: list[str],
    sources: Sources,
    needs: set[str],
    *,
    what: str = "this",
    without_tokens: str = "",
    hint: str | None = None,
) -> None:
    """A :class:`SchemaError` for the first needed role the log has no column for.

    ``what`` needs them (a method, a command); ``without_tokens`` says what works on a log
    without token ids, for the hint when ``input_ids`` is the one missing; ``hint`` replaces
    the hint (a log that looks like a framework's dump: use ``--from``)."""
    files, found = file_list(sources.files), columns_found(columns)
    if "input_ids" in needs and roles["input_ids"] is None:
        text = has_text(columns) and hint is None  # a dump read without --from: that first
        msg = (
            f"{files}: {what} needs token ids, and the log has no 'input_ids' column (a log of "
            f"decoded text has none). {found}. Hint: "
            + (f"make them from the text with `tokenizer` PATH (the {TOKENIZER_FILE} or model "
               "folder the run used)" + (f"; or {without_tokens}" if without_tokens else "")
               if text else
               hint or (f"{without_tokens}; or " if without_tokens else "")
               + "name the token column with `col`")
        )  # fmt: skip
        raise SchemaError(msg)
    for role in sorted(needs):
        if role == POLICY_LOGPROBS and roles[role] is None:
            streams = " or ".join(f"'{r}'" for r in POLICY_STREAMS)
            default = f"name one with `col={['logprobs=COLUMN']!r}`"
            msg = f"{files}: no policy log-probs ({streams}). {found}. Hint: {hint or default}"
            raise SchemaError(msg)
        if roles[role] is None:
            near = closest(role, columns)
            default = (
                f"name it with `col={[f'{role}={near}']!r}`"
                if near
                else "name its column with `col`"
            )
            msg = f"{files}: no '{role}' column. {found}. Hint: {hint or default}"
            raise SchemaError(msg)


def has_text(columns: list[str]) -> bool:
    """Whether a log holds a prompt and a completion as text (``tokenizer`` makes ids of them)."""
    return any(c in columns for c in PROMPT_COLUMNS) and any(
        c in columns for c in COMPLETION_COLUMNS
    )


ROW_ROLES = (
    "agent",
    "episode",
    "state",
    "step_reward",
    "prompt_id",
    "rollout_id",
    "segment_index",
    "reward",
    "completion_time",
    "truncated",
    "bootstrap_value",
    "baseline_reward",
    "unscored",
    "batch",
)
STEP_ROLES = ("step_rewards", "step_ends")  # per-row lists, read only when asked


def row_columns(roles: Roles, *, steps: bool = False, named: tuple[str, ...] = ()) -> list[str]:
    """The columns :func:`extract_rows` reads: the scalar roles, the process rewards
    (``steps``) and columns asked by name."""
    found = [c for r in (*ROW_ROLES, *(STEP_ROLES if steps else ())) if (c := roles[r])]
    return [*found, *(name for name in named if name not in found)]


def extract_rows(
    table: pa.Table,
    roles: Roles,
    sources: Sources,
    *,
    steps: bool = False,
    named: tuple[str, ...] = (),
) -> Rows:
    """Validate the scalar columns of a whole log (``table`` may hold only those), and the
    process rewards (``steps``) and numeric columns asked by name (``named``)."""
    check = Checker(table, sources)
    unscored = None
    if roles["unscored"] is not None:
        flags = table.column(roles["unscored"]).combine_chunks()
        unscored = pc.fill_null(flags, False).to_numpy(zero_copy_only=False).astype(bool)
    reward = None
    if roles["reward"] is not None:
        reward = numeric(table.column(roles["reward"]).combine_chunks())
        if unscored is None:
            check.no_nulls(roles["reward"], "reward")
        reward = np.where(unscored, 0.0, reward) if unscored is not None else reward
        check.finite(roles["reward"], reward)

    group_codes = group_keys = None
    if roles["prompt_id"] is not None:
        check.no_nulls(roles["prompt_id"], "prompt id")
        check.utf8(roles["prompt_id"])
        group_codes, group_keys = _codes(table.column(roles["prompt_id"]))

    if roles["rollout_id"] is not None:
        check.no_nulls(roles["rollout_id"], "rollout id")
        check.utf8(roles["rollout_id"])
        rollout_codes, rollout_keys = _codes(table.column(roles["rollout_id"]))
    else:
        rollout_codes, rollout_keys = np.arange(table.num_rows, dtype=np.int64), None
    segment_rank = _segments(check, roles, table, rollout_codes, rollout_keys)
    if group_codes is not None and roles["segment_index"] is not None:
        first = np.full(int(rollout_codes.max()) + 1, -1, dtype=np.int64)
        first[rollout_codes[::-1]] = group_codes[::-1]
        bad = first[rollout_codes] != group_codes
        if bad.any():
            check.fail(
                first_index(bad),
                roles["prompt_id"],
                "segments of one rollout have different prompt ids",
                "segments of a rollout share its prompt_id",
            )

    completion = None
    if roles["completion_time"] is not None:
        check.no_nulls(roles["completion_time"], "completion time")
        col = table.column(roles["completion_time"]).combine_chunks()
        if pa.types.is_timestamp(col.type):
            col = col.cast(pa.int64())
        completion = numeric(col)

    truncated = np.zeros(table.num_rows, dtype=bool)
    bootstrap = np.zeros(table.num_rows)
    if roles["truncated"] is not None:
        flags = table.column(roles["truncated"]).combine_chunks()
        truncated = pc.fill_null(flags, False).to_numpy(zero_copy_only=False).astype(bool)
    if truncated.any():
        boot_col = roles["bootstrap_value"]
        boot = np.full(table.num_rows, np.nan)
        if boot_col is not None:
            boot = numeric(table.column(boot_col).combine_chunks())
        bootstrap = np.where(truncated, boot, 0.0)
        if boot_col is not None:  # a missing one (NaN) is for the temporal methods to refuse
            check.finite(boot_col, np.where(np.isnan(bootstrap), 0.0, bootstrap))

    baseline = None  # NaN where null: only the methods that read it check it
    if (col := roles["baseline_reward"]) is not None:
        baseline = numeric(table.column(col).combine_chunks())

    step_reward = None
    if (col := roles["step_reward"]) is not None:
        values = table.column(col).combine_chunks()
        step_reward = numeric(values)
        null = values.is_null().to_numpy(zero_copy_only=False)
        check.finite(col, np.where(null, 0.0, step_reward))  # a NaN in the file is an error

    named_columns: dict[str, np.ndarray] = {}
    for name in named:
        values = table.column(name).combine_chunks()
        if not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)
                or pa.types.is_null(values.type)):  # fmt: skip
            msg = f"{check.sources.at(0, name)}: column '{name}' is {values.type}, not numbers"
            raise SchemaError(msg)
        x = numeric(values)
        check.finite(name, np.where(np.isnan(x), 0.0, x))  # null or NaN: no value here
        named_columns[name] = x

    return Rows(
        n_rows=table.num_rows,
        reward=reward,
        group_codes=group_codes,
        group_keys=group_keys,
        rollout_codes=rollout_codes,
        rollout_keys=rollout_keys,
        segment_rank=segment_rank,
        # a log with a segment column but no rollout in two rows is not segmented
        segmented=roles["segment_index"] is not None
        and (int(rollout_codes.max()) + 1 if len(rollout_codes) else 0) < table.num_rows,
        completion_time=completion,
        truncated=truncated,
        bootstrap=bootstrap,
        has_bootstrap=roles["bootstrap_value"] is not None,
        baseline_reward=baseline,
        steps=_step_rewards(check, roles) if steps else None,
        named=named_columns,
        unscored=unscored,
        batch_codes=_codes(table.column(roles["batch"]))[0] if roles["batch"] else None,
        step_reward=step_reward,
        **_labels(check, roles, table),
    )


LABEL_ROLES = ("agent", "episode", "state")
"""Key roles read as codes per row (``Rows.labels``) where the log has them."""


def _labels(check: Checker, roles: Roles, table: pa.Table) -> dict[str, Any]:
    """``Rows.labels`` and ``Rows.label_keys`` of the label roles the log has: codes, -1 where
    null (the methods that read a label refuse a null)."""
    labels, keys = {}, {}
    for role in LABEL_ROLES:
        if (col := roles[role]) is not None:
            check.utf8(col)
            encoded = table.column(col).combine_chunks().dictionary_encode()
            labels[role] = pc.fill_null(encoded.indices, -1).to_numpy().astype(np.int64)
            keys[role] = encoded.dictionary
    return {"labels": labels, "label_keys": keys}


def _step_rewards(check: Checker, roles: Roles) -> StepRewards:
    """The process rewards: one reward per step end, step ends increasing and within the row
    (checked against the tokens when they are read)."""
    r_col, e_col = roles.column("step_rewards"), roles.column("step_ends")
    check.no_nulls(r_col, "step reward list")
    check.no_nulls(e_col, "step end list")
    rewards, offsets = flat_list(check.table.column(r_col))
    ends, end_offsets = flat_list(check.table.column(e_col))
    bad = lengths(offsets) != lengths(end_offsets)
    if bad.any():
        row = first_index(bad)
        problem = f"{lengths(offsets)[row]} step rewards but {lengths(end_offsets)[row]} step ends"
        check.fail(row, e_col, problem, "give one step end per step reward")
    x = numeric(rewards)
    check.finite(r_col, x, offsets)
    e = numeric(ends, fill=-1).astype(np.int64)
    rows = row_of(offsets)
    negative = e < 0
    if negative.any():
        i = first_index(negative)
        check.fail(int(rows[i]), e_col, f"step end {e[i]} is not a token index",
                   "a step end is the index of the step's last token, from 0")  # fmt: skip
    same_row = rows[1:] == rows[:-1]
    unordered = same_row & (e[1:] <= e[:-1])
    if unordered.any():
        i = first_index(unordered)
        check.fail(int(rows[i]), e_col, f"step ends {e[i]} then {e[i + 1]}",
                   "step ends increase along the row")  # fmt: skip
    return StepRewards(x, e, offsets)


def needs_ids(roles: Roles) -> bool:
    """Whether a pass must read the token ids: only they give the rows' lengths when the log
    has no action mask column (spans, or every token an action)."""
    return roles["action_mask"] is None


def _decodes(raw: bytes) -> bool:
    try:
        raw.decode()
    except UnicodeDecodeError:
        return False
    return True


def _codes(column: pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """Dense int64 codes in order of first appearance, and the key of each code."""
    encoded = column.combine_chunks().dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return codes, encoded.dictionary


def _segments(
    check: Checker,
    roles: Roles,
    table: pa.Table,
    rollout_codes: np.ndarray,
    rollout_keys: pa.Array | None,
) -> np.ndarray:
    """0-based rank of each row among its rollout's segments; checks repeats and gaps."""
    col = roles["segment_index"]
    n = table.num_rows
    if col is None:
        sorted_codes = np.sort(rollout_codes)
        repeats = np.diff(sorted_codes) == 0
        if roles["rollout_id"] is not None and repeats.any():
            assert rollout_keys is not None
            dup_code = sorted_codes[first_index(repeats)]
            first, second = (int(r) for r in np.flatnonzero(rollout_codes == dup_code)[:2])
            rid = rollout_keys[dup_code].as_py()
            check.same_rollout_in_two_files(first, second, roles["rollout_id"], f"{rid!r}")
            check.fail(
                second,
                roles["rollout_id"],
                f"rollout id {rid!r} appears on several rows but the log has no segment_index",
                "give segments a 'segment_index' column, or make rollout ids unique",
            )
        return np.zeros(n, dtype=np.int64)
    if roles["rollout_id"] is None:
        msg = (
            f"{file_list(check.sources.files)}: the log has '{col}' but no rollout_id column. "
            "Hint: segments of one rollout share a rollout_id; name its column with `col`"
        )
        raise SchemaError(msg)
    check.no_nulls(col, "segment index")
    seg = table.column(col).combine_chunks()
    if not pa.types.is_integer(seg.type):
        msg = f"{check.sources.at(0, col)}: segment indices must be integers, saw {seg.type}"
        raise SchemaError(msg)
    seg = seg.to_numpy(zero_copy_only=False).astype(np.int64)
    base = int(seg.min())
    if base < 0:
        row = int(np.argmin(seg))
        check.fail(row, col, f"segment index {base} is negative", "number segments 0, 1, ...")
    order = np.lexsort((seg, rollout_codes))
    codes_sorted, seg_sorted = rollout_codes[order], seg[order]
    first = np.r_[True, codes_sorted[1:] != codes_sorted[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    rank_sorted = np.arange(n) - start
    expected = base + rank_sorted
    bad = seg_sorted != expected
    if bad.any():
        assert rollout_keys is not None
        i = first_index(bad)
        rid = rollout_keys[codes_sorted[i]].as_py()
        repeated = i > 0 and not first[i] and seg_sorted[i] == seg_sorted[i - 1]
        if repeated:
            what = f"{rid!r} (segment {seg_sorted[i]})"
            check.same_rollout_in_two_files(int(order[i - 1]), int(order[i]), col, what)
        problem = (
            f"rollout {rid!r} has segment {seg_sorted[i]} twice"
            if repeated
            else f"rollout {rid!r} has segment {seg_sorted[i]} but no segment {expected[i]}"
        )
        check.fail(
            int(order[i]),
            col,
            problem,
            f"segments of a rollout are numbered {base}, {base + 1}, ... without gaps",
        )
    rank = np.empty(n, dtype=np.int64)
    rank[order] = rank_sorted
    return rank
