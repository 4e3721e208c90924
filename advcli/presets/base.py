"""What a preset is, and the log source that reads through one.

A preset reads the files a framework writes, one at a time, into a table in advcli's own schema
(``prompt_id``, ``rollout_id``, ``input_ids``, ``action_mask``, ``reward``, ...; every other field
passes through). :class:`PresetSource` converts each file once, into an Arrow file in a
temporary folder (removed when the source is closed or the process exits), and every pass then
reads those: a framework's format is parsed once however many passes a method makes. Errors
still name the framework's file, and its line where rows come from lines.
"""

from __future__ import annotations

import io
import re
import tempfile
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import orjson

from advcli import progress
from advcli.errors import AdvcliError, DataError, UsageError, file_list, where
from advcli.io import jsonl
from advcli.io.arrow import cast_table, fast_ipc
from advcli.io.sources import LogSource, Sources, refuse_pickle, refuse_unreadable
from advcli.lazy_imports import np, pa, pl
from advcli.params import Range, check_fields, option

FROM = "Logs as a framework wrote them"
"""The help panel of ``--from`` and its options."""


@dataclass(frozen=True)
class PresetOptions:
    """What some frameworks' dumps leave out, given on the command line (``--reward-columns
    a,b`` and ``--reward-weights a=1,b=0.5`` as text there, a list and a dict here)."""

    reward_columns: list[str] | None = field(default=None, metadata=option(
        "trl: the reward functions' columns, comma separated (default: found from TRL's logged "
        "advantages among the float columns after completion); gdpo: the reward columns it "
        "normalises.", panel=FROM))  # fmt: skip
    reward_weights: dict[str, float] = field(default_factory=dict, metadata=option(
        "trl, gdpo: their weights, e.g. acc=1,fmt=0.5 (default 1 each).", panel=FROM))  # fmt: skip
    group_size: int | None = field(default=None, metadata=option(
        "trl: rollouts per prompt, num_generations (default: found from TRL's logged "
        "advantages; no safe guess otherwise); nemo-rl: groups are blocks of this many lines, "
        "num_generations_per_prompt (rollout identity, NeMo-RL PR #3882; default: equal prompt "
        "tokens, unless the logged advantages say otherwise); verl gen_batch.dp outside "
        "verl's GBS{batch}_N{n}_... folder: rollout.n.", panel=FROM,
        range=Range(1)))  # fmt: skip
    reward_key: str | None = field(default=None, metadata=option(
        "slime, miles: the reward to take from a dict reward.", panel=FROM))  # fmt: skip
    merge_repeated_prompts: bool = field(default=False, metadata=option(
        "verl legacy, skyrl: score the rows of a step (skyrl: a file) that share a prompt text "
        "as one group (the framework scored each dataset row apart; the dump has no uid to tell "
        "them).",
        flag="--merge-repeated-prompts", panel=FROM))  # fmt: skip

    def __post_init__(self) -> None:
        check_fields(self)


SHARED_WITH_METHODS = ("reward_columns", "reward_weights")
"""The :class:`PresetOptions` that are method parameters too: TRL's reward columns are GDPO's,
given once (one ``--reward-columns``; :func:`advcli.run.jobs.shared_with_reader` wires them)."""


@dataclass
class Converted:
    """One framework file in advcli's schema: the table, and the 1-based line each row came
    from (None: rows are not lines; errors then name the row); ``set_aside``: rows the
    options made the reader skip or read as something else (TRL: not whole groups of
    ``--group-size``); ``reward_doubt``: why its reward may not be what the framework trained
    on, an error unless the user names the reward column (verl's DAPO dicts)."""

    table: pa.Table
    lines: np.ndarray | None = None
    warnings: list[str] = field(default_factory=list)
    set_aside: int = 0
    reward_doubt: str | None = None  # why its reward may not be the one trained on: an
    # error unless ``--col reward=`` names the column to read


@dataclass(frozen=True)
class Setting:
    """One of a framework's settings that shape its advantages, as advcli runs it: the method
    and the parameters given to it (under the framework's convention), the column read as the
    reward (None: the reader's), the framework's names for it, and whether it is one of the
    framework's estimators at its defaults (``own``: what naming the method alone asks for);
    ``convention``: where it runs under another convention than the framework's."""

    method: str
    given: tuple[tuple[str, Any], ...] = ()
    reward: str | None = None
    note: str = ""
    own: bool = False
    convention: str | None = None  # another than the framework's (an older release's)


class Preset(ABC):
    """One framework's dump format."""

    name: ClassVar[str]  # what --from takes
    framework: ClassVar[str]  # its name, for messages
    switch: ClassVar[str]  # how to make the framework write the files (README)
    writes: ClassVar[str]  # where it writes them (README)
    patterns: ClassVar[tuple[str, ...]]  # the dump files in a folder given as input
    marks: ClassVar[tuple[frozenset[str], ...]] = ()  # field sets that identify the format
    suffixes: ClassVar[tuple[str, ...]] = (".jsonl", ".jsonl.gz", ".jsonl.zst")
    convention: ClassVar[str] = "advcli"  # the framework's own (``--convention``), which every
    # command runs under unless told otherwise
    logged: ClassVar[str | None] = None  # where the dump carries the framework's own
    # advantages: ``source_advantage`` (one per row) or ``source_advantages`` (per token)
    clips: ClassVar[str | None] = None  # the framework's names for a clamp of its logged
    # advantages that its dump does not record (tried with the bounds they show)

    def files(self, inputs: list[str]) -> list[str]:
        """The dump files named by ``inputs``: files, or folders searched for ``patterns``,
        each in step order."""
        found: list[str] = []
        for item in inputs:
            path = Path(item)
            if path.is_dir():
                hits = sorted(
                    {str(p) for pattern in self.patterns for p in path.glob(pattern)},
                    key=natural_key,
                )
                if not hits:
                    msg = (
                        f"{item}: no {self.framework} dump files here (looked for "
                        f"{', '.join(self.patterns)}). Hint: give the folder the framework "
                        f"writes to ({self.writes}), or the files themselves"
                    )
                    raise UsageError(msg)
                found += hits
            elif path.exists():
                if not item.lower().endswith(self.suffixes):
                    refuse_pickle(item)
                    msg = (
                        f"{item}: not a {self.framework} dump file (expected "
                        f"{', '.join(self.suffixes)}). Hint: {self.framework} writes "
                        f"{self.writes}"
                    )
                    raise UsageError(msg)
                found.append(item)
            else:
                msg = f"{item}: no such file or folder. Hint: check the path"
                raise UsageError(msg)
        for hit in found:
            refuse_unreadable(hit)
        return list(dict.fromkeys(found))

    @abstractmethod
    def convert(self, path: str, options: PresetOptions) -> Converted:
        """One dump file as a table in advcli's schema."""

    def reward_components(self, schema: pa.Schema, options: PresetOptions) -> list[str]:
        """The columns of the converted log whose sum is the reward (TRL's reward functions),
        which ``report`` charts one by one; none for most frameworks."""
        return []

    def settings(self, names: list[str], options: PresetOptions) -> list[Setting]:
        """The framework's known settings that change its advantages, in combination, on a
        log with the columns ``names`` read with ``options``: tried when the logged advantages
        differ, to name the one that gives them (:mod:`advcli.run.reproduce`). The first is the
        default."""
        return [Setting("grpo", own=True)]

    def unknowns(self) -> list[str]:
        """The framework's settings that shape its advantages and its dump does not hold, by
        the keyword of the option that gives them: named, where the user has not given them,
        when none of :meth:`settings` reproduces the logged advantages."""
        return []

    def reward_of(
        self, columns: dict[str, np.ndarray], options: PresetOptions
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """The reward and the unscored flags of each row from the reward columns named in
        ``options`` (TRL's reward functions); None for frameworks that log their reward."""
        return None

    def leaves_out(self, options: PresetOptions) -> bool:
        """Whether the dump leaves out a setting that shapes the numbers and the options do
        not give it (TRL's group size), to be found from the logged advantages."""
        return False

    def needs_group_size(self) -> bool:
        """Whether rows cannot be grouped without the group size the dump leaves out (TRL);
        else, where the dump leaves one out, it is an alternative grouping the logged
        advantages may call for (NeMo-RL)."""
        return False

    def group_sizes(self, log: Any) -> list[int]:
        """Group sizes to try when the dump does not say (:meth:`leaves_out`)."""
        return []

    def repeats(self, previous: pa.Table, table: pa.Table) -> bool:
        """Whether ``table`` is the rows of the file before it logged again (TRL logs one
        generation at every optimizer step it serves)."""
        return False

    def matches(self, names: set[str]) -> bool:
        """Whether a table with these columns looks like this framework's dump."""
        return any(mark <= names for mark in self.marks)


def natural_key(path: str) -> list[Any]:
    """Sort key that puts ``step_2`` before ``step_10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path)]


def step_of(path: str, pattern: str) -> int | None:
    """The step a dump file belongs to: the number ``pattern`` (a regex with one group) finds
    last in its path, e.g. ``global_step_(\\d+)``."""
    found = re.findall(pattern, Path(path).as_posix())
    return int(found[-1]) if found else None


def json_records(path: str) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Every JSON object of a JSONL file, and the line of each. Python's ``json`` writes bare
    ``NaN`` and ``Infinity``: a line orjson refuses is read again with ``json``."""
    records: list[dict[str, Any]] = []
    lines: list[int] = []
    with jsonl.open_stream(path) as fh:
        for number, line in enumerate(fh, start=1):
            if line.strip():
                record = jsonl.parse_line(path, number, line, nan=True)
                if isinstance(record, dict) and any("\x00" in key for key in record):
                    msg = (
                        f"{path}: line {number}: a field name holds a NUL character. "
                        "Hint: rename the field"
                    )
                    raise DataError(msg)
                records.append(record)
                lines.append(number)
    if not records:
        msg = f"{path}: the input has no rows. Hint: check the file"
        raise DataError(msg)
    return records, np.array(lines, dtype=np.int64)


def json_frame(
    path: str, known: Callable[[set[str]], dict[str, Any] | None] | None = None
) -> tuple[pl.DataFrame, np.ndarray]:
    """A JSONL file as a frame, and the line of each row.

    polars' reader types the columns from the first rows (reading every row first would double
    the time), or takes the types ``known(fields)`` gives for the fields of a sample of lines;
    that sample, read with orjson, also checks that no field was left out. Where one was, or
    where polars refuses a line (a bare NaN, a type that changes), the file is read again: by
    polars over every row, then line by line (:func:`json_records`)."""
    data = jsonl.read_bytes(path)
    lines, sample = _lines(data)
    try:
        keys: set[str] = set().union(*(orjson.loads(t) for t in sample)) if sample else set()
    except (orjson.JSONDecodeError, TypeError):  # a line orjson refuses: the careful reader
        records, lines = json_records(path)
        return frame(records), lines
    attempts: list[dict[str, Any]] = [{}, {"infer_schema_length": None}]
    schema = known(keys) if known is not None else None
    if schema is not None:
        attempts.insert(0, {"schema": schema})
    for options in attempts:
        try:
            df = pl.read_ndjson(io.BytesIO(data), **options)
        except Exception:  # polars refuses NaN tokens and types that change
            continue
        if df.height == len(lines) and keys <= set(df.columns):
            return df, lines
    records, lines = json_records(path)
    return frame(records), lines


def _lines(data: bytes) -> tuple[np.ndarray, list[bytes]]:
    """The 1-based numbers of the lines that hold something, and a sample of them (the first,
    the last and some between)."""
    if b"\n\n" not in data and not data.startswith((b"\n", b"\r", b" ")):  # no blank line
        count = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
        lines = np.arange(1, count + 1, dtype=np.int64)
        sample = []
        for k in range(17):  # lines starting at 17 points through the data
            at = 0 if k == 0 else data.find(b"\n", len(data) * k // 17) + 1
            if 0 < at < len(data) or k == 0:
                end = data.find(b"\n", at)
                sample.append(data[at : end if end >= 0 else len(data)])
        return lines, [t for t in sample if t.strip()]
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == ord("\n"))
    if not data.endswith(b"\n"):
        ends = np.r_[ends, len(data)]
    starts = np.r_[0, ends[:-1] + 1]
    kept = np.flatnonzero([bool(data[a:b].strip()) for a, b in _short(starts, ends)])
    picks = kept[:: max(1, len(kept) // 16)].tolist() + kept[-1:].tolist()
    return kept + 1, [data[starts[i] : ends[i]] for i in picks]


def _short(starts: np.ndarray, ends: np.ndarray) -> Iterator[tuple[int, int]]:
    """Each line's span, cut to its first bytes: enough to tell a blank line."""
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        yield a, min(b, a + 64)


def frame(records: list[dict[str, Any]]) -> pl.DataFrame:
    """Records as a frame, every row typing the columns (a number then text: text). A field
    whose values polars cannot put in one type (a number on some rows, a list on others) is
    kept as JSON text."""
    try:
        return pl.DataFrame(records, infer_schema_length=None)
    except (pl.exceptions.PolarsError, TypeError, ValueError):
        pass
    keys = list(dict.fromkeys(k for r in records for k in r))
    columns = {}
    for key in keys:
        values = [r.get(key) for r in records]
        try:
            columns[key] = pl.Series(key, values)
        except (pl.exceptions.PolarsError, TypeError, ValueError):
            columns[key] = pl.Series(key, [json_text(v) for v in values], pl.String)
    return pl.DataFrame(columns)


def need(path: str, present: set[str] | list[str], fields: list[str], framework: str) -> None:
    """One line naming the first field a file of ``framework`` must have and lacks."""
    for name in fields:
        if name not in present:
            msg = (
                f"{path}: no '{name}' field, which a {framework} dump has. Fields found: "
                f"{', '.join(sorted(present)) or 'none'}. Hint: check the file and `from_`"
            )
            raise DataError(msg)


def repeated_prompts(
    path: str,
    lines: np.ndarray,
    keys: pl.Series,
    texts: pl.Series,
    *,
    column: str,
    within: str,
    apart: str,
    merge: bool,
) -> list[str]:
    """Refuse a dump without a group id where a prompt text (``keys``: the texts as grouped,
    ``texts``: as shown) has a multiple of the common number of rows: several dataset rows
    with one text, which the framework scored ``apart`` and the dump cannot tell apart. With
    ``merge`` (``--merge-repeated-prompts``), the warning that they are merged."""
    counts = keys.value_counts()
    sizes = counts["count"].to_numpy()
    values, times = np.unique(sizes, return_counts=True)
    common = int(values[np.argmax(times)])
    merged = np.flatnonzero((sizes >= 2 * common) & (sizes % common == 0))
    if not len(merged):
        return []
    at = int(merged[0])
    row = int(np.flatnonzero((keys == counts[keys.name][at]).to_numpy())[0])
    shown = str(texts[row])
    shown = shown if len(shown) <= 60 else "..." + shown[-57:]  # the question ends it
    at_line = where(path, int(lines[row]), column, line=True)
    if merge:
        return [
            f"{at_line}: {len(merged)} prompt text(s){within} with a multiple of the others' "
            f"{common} rows (this one {int(sizes[at])}), each scored as one group "
            "(`merge_repeated_prompts=True`): not the framework's numbers, which scored each "
            "dataset row apart"
        ]
    msg = (
        f"{at_line}: {int(sizes[at])} rows{within} share the prompt {shown!r}, where the "
        f"others have {common}: several dataset rows with one text, which {apart}"
    )
    raise DataError(msg)


def number(df: pl.DataFrame, column: str, path: str, lines: np.ndarray | None) -> pl.Series:
    """A column as float64: numbers, or numbers written as text ("0.5"); anything else is an
    error naming the line (or row)."""
    values = df[column]
    if values.dtype == pl.Boolean:
        floats: pl.Series = values.cast(pl.Float64)
        return floats
    numbers: pl.Series = values.cast(pl.Float64, strict=False)
    bad = (numbers.is_null() & values.is_not_null()).to_numpy()
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        loc = (
            where(path, int(lines[row]), column, line=True)
            if lines is not None
            else where(path, row, column)
        )
        msg = f"{loc}: expected a number, saw {values[row]!r}. Hint: fix or drop the row"
        raise DataError(msg)
    return numbers


def with_canonical(df: pl.DataFrame, canonical: dict[str, pl.Series]) -> pl.DataFrame:
    """The file's fields with advcli's columns (replacing fields of the same name)."""
    return df.drop([c for c in canonical if c in df.columns]).with_columns(
        **{k: v.alias(k) for k, v in canonical.items()}
    )


def to_json_text(df: pl.DataFrame) -> pl.DataFrame:
    """Nested columns whose values differ in shape (dicts of any keys) as JSON text, so every
    file converts to a plain table."""
    out = {}
    for name in df.columns:
        dtype = df[name].dtype
        if dtype == pl.Object:
            out[name] = pl.Series(name, [json_text(v) for v in df[name].to_list()], pl.String)
    return df.with_columns(**out) if out else df


def floats(values: list[Any], what: str) -> list[float]:
    """``values`` as floats (null as NaN); one that is not a number is a :class:`DataError`
    saying ``what`` (the file, line and column, and which value) is not."""
    try:
        return [np.nan if x is None else float(x) for x in values]
    except (TypeError, ValueError):
        raise DataError(f"{what} is not a number") from None


def non_finite(value: float) -> str:
    """A value that is no number, in words: ``NaN``, ``infinity`` or ``-infinity``."""
    return "NaN" if value != value else "infinity" if value > 0 else "-infinity"


def json_text(value: Any) -> str | None:
    """A value as JSON text (None stays None)."""
    return (
        None if value is None else orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY).decode()
    )


def _convert(preset: Preset, path: str, options: PresetOptions) -> Converted:
    """``preset.convert``, with what a malformed file makes a parser raise told in one line."""
    try:
        return preset.convert(path, options)
    except (AdvcliError, MemoryError):
        raise
    except (
        Exception,
        pl.exceptions.PanicException,
    ) as exc:  # polars, pyarrow and Python raise many
        # types on malformed data (a panic in polars' Rust is not an Exception)
        msg = (
            f"{path}: cannot read it as {preset.framework}'s dump ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}). Hint: check the file and `from_`"
        )
        raise DataError(msg) from None


def group_larger_than_files(size: int, rows: int, files: list[str]) -> UsageError:
    """``--group-size`` beyond the rows of every file: a group of a framework's dump is rows
    of one file (one step), so no row could be in one."""
    return UsageError(
        f"`group_size={size}`: more than the {rows} rows of {'any file of ' * (len(files) > 1)}"
        f"{file_list(files)}, and a group is rows of one file (one step). Hint: give the "
        "framework's rollouts per prompt (TRL's num_generations, NeMo-RL's "
        "num_generations_per_prompt)"
    )


def _listed(paths: list[str]) -> str:
    """The first three paths, and "..." for more."""
    return f"{', '.join(paths[:3])}{', ...' if len(paths) > 3 else ''}"


class PresetSource(LogSource):
    """A framework's dump files, each converted once by ``preset`` into an Arrow file in a
    temporary folder; the passes read those."""

    def __init__(self, preset: Preset, inputs: list[str], options: PresetOptions):
        self.preset = preset
        files = preset.files(inputs)
        self._folder = tempfile.TemporaryDirectory(prefix="advcli-from-")
        weakref.finalize(self, self._folder.cleanup)
        self.parts: list[Path] = []
        schemas = []
        lines: list[np.ndarray | None] = []
        counts: list[int] = []
        self.warnings: list[str] = []
        empty: list[str] = []
        self.set_aside = 0  # rows the options made the preset skip or relabel
        self.reward_doubt: str | None = None  # the first file's (Converted.reward_doubt)
        repeated: list[str] = []
        kept: list[str] = []
        previous = None
        for i, path in enumerate(files):
            converted = _convert(preset, path, options)
            self.warnings += [w for w in converted.warnings if w not in self.warnings]
            self.set_aside += converted.set_aside
            self.reward_doubt = self.reward_doubt or converted.reward_doubt
            progress.read(sum(counts), (i + 1) / len(files))
            if not converted.table.num_rows:  # TRL writes one when no step ran; a stream
                # chunk may hold only groups left out
                empty.append(path)
                continue
            if previous is not None and preset.repeats(previous, converted.table):
                repeated.append(path)
                continue
            previous = converted.table
            kept.append(path)
            part = Path(self._folder.name) / f"{i:06d}.arrow"
            with (
                pa.OSFile(str(part), "wb") as sink,
                pa.ipc.new_file(sink, converted.table.schema, options=fast_ipc()) as writer,
            ):
                writer.write_table(converted.table)
            self.parts.append(part)
            schemas.append(converted.table.schema)
            lines.append(converted.lines)
            counts.append(converted.table.num_rows)
        if empty and kept:
            self.warnings.append(
                f"skipped {len(empty)} file{'s' if len(empty) > 1 else ''} with no rows to read "
                f"({_listed(empty)})"
            )
        if repeated:
            self.warnings.append(
                f"skipped {len(repeated)} file(s) holding the rows of the file before, logged "
                f"again ({_listed(repeated)}; {preset.framework} logs a generation at every "
                "step it serves)"
            )
        if not sum(counts):
            msg = f"{file_list(files)}: the input has no rows. Hint: check the files"
            raise DataError(msg)
        if options.group_size is not None and options.group_size > max(counts):
            raise group_larger_than_files(options.group_size, max(counts), kept)
        self.sources = Sources(files=kept, row_counts=counts, lines=lines)
        try:
            self.schema = pa.unify_schemas(schemas, promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            msg = (
                f"{file_list(files)}: the files have fields of different types ({exc}). "
                "Hint: read them separately"
            )
            raise DataError(msg) from None

    def _tables(self, names: list[str] | None) -> Iterator[pa.Table]:
        for part in self.parts:
            with pa.memory_map(str(part)) as mm:
                table = pa.ipc.open_file(mm).read_all()
            for f in self.schema:  # columns a file lacks are null there
                if f.name not in table.column_names and (names is None or f.name in names):
                    table = table.append_column(f.name, pa.nulls(table.num_rows, f.type))
            wanted = self.schema.names if names is None else names
            target = pa.schema([self.schema.field(n) for n in wanted])
            yield cast_table(table.select(wanted), target)

    def columns(self, names: list[str]) -> pa.Table:
        return pa.concat_tables(self._tables(names))

    def batches(self, names: list[str] | None, rows: int) -> Iterator[tuple[int, pa.Table]]:
        start = 0
        for table in self._tables(names):
            for lo in range(0, table.num_rows, rows):
                part = table.slice(lo, rows)
                yield start, part
                start += part.num_rows
                progress.read(start, start / self.n_rows)
