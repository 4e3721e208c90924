"""TRL (GRPOTrainer, 0.28 on): ``log_completions=True`` →
``{output_dir}/completions/completions_{step:05d}.parquet``.

A row per completion: ``step``, ``prompt``, ``completion`` (decoded text, or for a
conversational dataset lists of ``{role, content}`` messages, read as ``role: content`` lines),
one float column per reward function (NaN where it returned None), the columns reward functions
added with ``log_extra``, and TRL's own ``advantage`` (kept as ``source_advantage``).

What TRL 1.16 does, and so this preset (``trl/trainer/grpo_trainer.py``):

- The reward is the NaN-skipping weighted sum of the reward functions' columns
  (``reward_weights``, default 1); a completion every function returned None for is
  *unscorable*: left out of its group's mean and std, advantage 0 (``unscored``).
- Which float columns are reward functions is not in the file: ``log_extra`` columns come after
  them, before ``advantage``. ``--reward-columns`` names them; else the logged advantages decide
  (:mod:`advcli.run.settling`), and all the float columns are taken only when nothing tells.
- Groups are contiguous blocks of ``num_generations`` rows with the same prompt.
  ``--group-size`` gives it; else the logged advantages do. A run of rows with one prompt
  text is cut into blocks of that size (neighbouring dataset rows may share a prompt text).
- The file holds TRL's last ``generation_batch_size`` logged rows: with evaluation on, the
  evaluation's rows (groups of ``num_generations_eval``) come last and push out the first
  training rows, so the file's first group may be cut. A cut group's advantages came from
  rollouts the file lacks: its rows are skipped (a warning counts them). Evaluation rows (runs
  that are not whole groups) are groups of their own and a batch of their own; a warning
  names the steps whose file holds them (TRL writes no mode column).
- TRL's DistillationTrainer writes the same files with no reward columns: refused in one
  line, as there is no reward to take advantages of.
- The batch (``scale_rewards="batch"``, ``normalize_then_sum``) is one step's generation
  batch: the ``batch`` column is the step.
- One generation serves ``steps_per_generation`` micro-batches; with gradient accumulation it
  spans several optimizer steps, and TRL logs the same rows at each: a file that repeats the
  one before is skipped (a warning names it).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from advcli.errors import DataError, UsageError
from advcli.io.file_sources import read_parquet
from advcli.lazy_imports import np, pa, pc, pl
from advcli.presets.base import Converted, Preset, PresetOptions, Setting, need, step_of


class Trl(Preset):
    name = "trl"
    framework = "TRL"
    switch = "GRPOConfig(log_completions=True)"
    writes = "OUTPUT_DIR/completions/completions_{step:05d}.parquet"
    patterns = ("completions_*.parquet", "completions/completions_*.parquet")
    marks = (frozenset({"prompt", "completion", "advantage"}),)
    suffixes = (".parquet",)
    convention = "trl"
    logged = "source_advantage"

    def convert(self, path: str, options: PresetOptions) -> Converted:
        df = read(path)
        if not df.height:
            return Converted(pa.table({}))
        need(path, set(df.columns), ["prompt", "completion"], self.framework)
        columns = reward_columns(path, df, options)
        weights = options.reward_weights
        unknown = sorted(set(weights) - set(columns))
        if unknown:
            msg = (
                f"`reward_weights={unknown[0]!r}`: not a reward column of {path} (reward "
                f"columns: {', '.join(columns)}). Hint: name one of them"
            )
            raise UsageError(msg)
        values = {c: df[c].cast(pl.Float64).fill_null(np.nan).to_numpy() for c in columns}
        reward, unscored = self.reward_of(values, options)
        step = (
            df["step"]
            if "step" in df.columns
            else pl.Series([step_of(path, r"completions_(\d+)")] * df.height)
        )
        prompt = df["prompt"].to_numpy()
        groups = blocks(prompt, options.group_size)
        scope = step.cast(pl.String) + ":"
        canonical = {
            "prompt_id": scope + pl.Series(groups.key),
            "rollout_id": scope + pl.Series(np.arange(df.height)).cast(pl.String),
            "reward": pl.Series(reward),
            "unscored": pl.Series(unscored),
            "step": step,
            "batch": scope + pl.Series(np.where(groups.evaluation, "eval", "train")),
        }
        if "advantage" in df.columns:
            df = df.rename({"advantage": "source_advantage"})
        table = df.drop([c for c in canonical if c in df.columns]).with_columns(
            **{k: v.alias(k) for k, v in canonical.items()}
        )
        warnings = []
        if groups.evaluation.all():
            warnings.append(
                f"{path}: step {_steps(step, groups.evaluation)}: every row is an evaluation "
                f"row (no run of one prompt is a whole group of {options.group_size}): TRL's "
                "evaluation before its first training step, which marks no row as eval"
            )
        elif groups.evaluation.any():
            warnings.append(
                f"{path}: step {_steps(step, groups.evaluation)}: rows "
                f"{_spans(groups.evaluation)} are evaluation rows (runs of one prompt that are "
                f"not whole groups of {options.group_size}): TRL's evaluation log wrote this "
                "step's file again, over its training rows, and marks no row as eval"
            )
        if groups.cut.any():
            table = table.filter(pl.Series(~groups.cut))
            warnings.append(
                f"{path}: skipped {int(groups.cut.sum())} row(s) (rows {_spans(groups.cut)}), "
                "the rest of a group TRL's logging "
                "buffer cut (it keeps the last generation_batch_size rows; evaluation rows "
                "pushed the others out): their advantages came from rollouts the file lacks"
            )
        set_aside = int(groups.cut.sum() + groups.evaluation.sum())
        return Converted(table.to_arrow(), warnings=warnings, set_aside=set_aside)

    def settings(self, names: list[str], options: PresetOptions) -> list[Setting]:
        """scale_rewards group (the default), batch or none; multi_objective_aggregation
        normalize_then_sum (gdpo over the reward columns, with their weights)."""
        found = [
            Setting("grpo", own=True),
            Setting("grpo", (("scale", "batch"),), note='scale_rewards="batch"'),
            Setting("grpo", (("scale", "none"),), note='scale_rewards="none"'),
        ]
        if options.reward_columns:
            weights = ",".join(f"{k}={w!r}" for k, w in options.reward_weights.items()) or None
            given = (("reward_columns", ",".join(options.reward_columns)),
                     ("reward_weights", weights))  # fmt: skip
            found.append(
                Setting(
                    "gdpo", given, note='multi_objective_aggregation="normalize_then_sum"', own=True
                )
            )
        return found

    def unknowns(self) -> list[str]:
        return ["reward_weights"]

    def reward_of(
        self, columns: dict[str, np.ndarray], options: PresetOptions
    ) -> tuple[np.ndarray, np.ndarray]:
        """TRL's reward: ``nansum(w_k * r_k)``; unscorable (every ``r_k`` NaN) where every
        reward function returned None."""
        weights = options.reward_weights
        stack = np.stack([x * weights.get(name, 1.0) for name, x in columns.items()])
        unscored = np.asarray(np.isnan(stack).all(axis=0), dtype=bool)
        return np.where(unscored, 0.0, np.nansum(stack, axis=0)), unscored

    def leaves_out(self, options: PresetOptions) -> bool:
        return options.group_size is None or options.reward_columns is None

    def needs_group_size(self) -> bool:
        return True

    def group_sizes(self, log: Any) -> list[int]:
        """The divisors of the runs of one prompt text (num_generations, a multiple where
        neighbouring prompts share their text, evaluation groups, a cut group)."""
        keys = log.source.columns([log.roles.column("prompt_id")]).column(0)
        runs = np.unique(pc.value_counts(keys).field("counts").to_numpy())
        return [g for g in range(2, int(runs.max(initial=1)) + 1) if (runs % g == 0).any()]

    def repeats(self, previous: pa.Table, table: pa.Table) -> bool:
        """One generation serves ``steps_per_generation`` micro-batches: with gradient
        accumulation TRL logs its rows again at each optimizer step it spans, as a new step."""
        names = table.column_names
        scoped = [n for n in ("step", "prompt_id", "rollout_id", "batch") if n in names]
        if previous.schema != table.schema or previous.num_rows != table.num_rows:
            return False
        return bool(previous.drop_columns(scoped).equals(table.drop_columns(scoped)))

    def reward_components(self, schema: pa.Schema, options: PresetOptions) -> list[str]:
        if options.reward_columns:
            return list(options.reward_columns)
        return float_run(schema.names, lambda n: pa.types.is_floating(schema.field(n).type))


def read(path: str) -> pl.DataFrame:
    """A completions file, chat messages as text; the messages themselves are kept as
    ``prompt_messages`` and ``completion_messages`` (``--tokenizer`` renders them)."""
    df = pl.from_arrow(read_parquet(path))
    assert isinstance(df, pl.DataFrame)
    out = {name: messages_text(df[name]) for name in ("prompt", "completion") if name in df.columns}
    kept = {f"{name}_messages": df[name] for name, text in out.items() if is_chat(df[name])}
    return df.with_columns(**{k: v for k, v in out.items() if v is not None}, **kept)


def is_chat(column: pl.Series) -> bool:
    """A conversational column: a list of ``{role, content}`` per row."""
    dtype = column.dtype
    if not (isinstance(dtype, pl.List) and isinstance(dtype.inner, pl.Struct)):
        return False
    return {"role", "content"} <= {f.name for f in dtype.inner.fields}


def messages_text(column: pl.Series) -> pl.Series | None:
    """A conversational column (a list of ``{role, content}`` per row) as text, one
    ``role: content`` line per message; None for a text column."""
    dtype = column.dtype
    if not (isinstance(dtype, pl.List) and isinstance(dtype.inner, pl.Struct)):
        return None if dtype in (pl.String, pl.Null) else column.cast(pl.String)
    fields = {f.name for f in dtype.inner.fields}
    if not {"role", "content"} <= fields:
        return pl.Series(column.name, [None if v is None else str(v) for v in column.to_list()])
    lines = column.list.eval(
        pl.element().struct.field("role").cast(pl.String)
        + ": "
        + pl.element().struct.field("content").cast(pl.String)
    )
    return lines.list.join("\n").alias(column.name)


def float_run(names: list[str], is_float: Any) -> list[str]:
    """The float columns after ``completion`` up to ``advantage``: where TRL puts its reward
    functions' columns (first) and float ``log_extra`` columns (after them)."""
    if "completion" not in names:
        return []
    start = names.index("completion") + 1
    end = next((i for i in range(start, len(names)) if "advantage" in names[i]), len(names))
    return [n for n in names[start:end] if is_float(n)]


def reward_columns(path: str, df: pl.DataFrame, options: PresetOptions) -> list[str]:
    """The reward functions' columns: ``--reward-columns``, or the float columns between
    ``completion`` and ``advantage``."""
    if options.reward_columns:
        missing = [c for c in options.reward_columns if c not in df.columns]
        if missing:
            msg = (
                f"`reward_columns={missing[:1]!r}`: {path} has no such column (columns: "
                f"{', '.join(df.columns)}). Hint: name the reward functions' columns"
            )
            raise UsageError(msg)
        return list(options.reward_columns)
    found = float_run(df.columns, lambda n: df[n].dtype.is_float())
    if not found and "advantage" not in df.columns:
        msg = (
            f"{path}: no reward columns (columns: {', '.join(df.columns)}): TRL's "
            "DistillationTrainer writes its completions files without rewards, so there is no "
            "reward to take advantages of. Hint: give a GRPO run's completions, or name the "
            "reward columns with `reward_columns`"
        )
        raise DataError(msg)
    if not found:
        msg = (
            f"{path}: no float column between 'completion' and 'advantage' to take as a "
            "reward. Hint: name them with `reward_columns`"
        )
        raise DataError(msg)
    return found


class Blocks(NamedTuple):
    """TRL's groups in one file: a key per row, the rows of a cut group, evaluation rows."""

    key: np.ndarray
    cut: np.ndarray
    evaluation: np.ndarray


def prompt_runs(prompt: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row (at least one): its run of equal prompt text, its place in the run; and each
    run's length."""
    n = len(prompt)
    starts = np.r_[True, prompt[1:] != prompt[:-1]]
    run = np.cumsum(starts) - 1
    first = np.flatnonzero(starts)
    length = np.diff(np.r_[first, n])
    return run, np.arange(n) - first[run], length


def blocks(prompt: np.ndarray, group_size: int | None) -> Blocks:
    """TRL's groups from the prompt text: runs of one prompt, cut into blocks of
    ``group_size`` (None: each run a group). The file's first run, when it is not whole
    blocks, begins with the rest of a cut group; a later run that is not whole blocks holds
    evaluation rows (groups of ``num_generations_eval``), a group of its own; so does every
    run of a file without a whole block."""
    run, place, length = prompt_runs(prompt)
    n = len(prompt)
    cut = np.zeros(n, dtype=bool)
    evaluation = np.zeros(n, dtype=bool)
    if group_size is None:
        return Blocks(run.astype(str).astype(object), cut, evaluation)
    spare = length % group_size
    whole = spare[run] == 0
    # A file without a whole group holds evaluation rows only (TRL's evaluation before the
    # first step): nothing of it was cut
    first_run = (run == 0) & bool((spare == 0).any())
    cut = first_run & ~whole & (place < spare[run])
    evaluation = ~whole & ~first_run
    shifted = np.where(first_run, place - spare[run], place)
    block = np.where(whole | first_run, shifted // group_size, 0)
    key = np.char.add(np.char.add(run.astype(str), "."), block.astype(str))
    return Blocks(key.astype(object), cut, evaluation)


def _steps(step: pl.Series, flags: np.ndarray) -> str:
    """The steps of the flagged rows, as ``1, 3``."""
    return ", ".join(str(s) for s in sorted(set(step.filter(pl.Series(flags)).to_list())))


def _spans(flags: np.ndarray) -> str:
    """The 0-based row ranges where ``flags`` holds, as ``0-1, 7``."""
    rows = np.flatnonzero(flags)
    breaks = np.flatnonzero(np.diff(rows) != 1)
    lo = np.r_[rows[0], rows[breaks + 1]]
    hi = np.r_[rows[breaks], rows[-1]]
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in zip(lo, hi, strict=True))
