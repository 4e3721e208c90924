"""The engine: one method over one log, in passes, the same for every method.

1. the per-row columns of the whole log (ids, rewards, times, flags) are read and validated,
   and the method plans every row (:meth:`~advcli.methods.Method.plan`);
2. each token pass the method asks for streams the token columns it needs, batch by batch,
   and refines the plan (:class:`~advcli.methods.TokenPass`);
3. the final pass streams every column, the method turns each batch's tokens into per-token
   columns, and :meth:`Run.annotated` yields the batches annotated, in input order.

Inputs on disk are read again at every pass, so memory is bounded by a few batches, not by the
log; reading runs on its own thread. The engine knows nothing of any one method: what it needs,
which passes it makes and what it writes come from the method.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any, Protocol

from advcli import methods, progress
from advcli._version import __version__
from advcli.core.correction import Correction
from advcli.core.ragged import lengths, row_of
from advcli.errors import (
    DataError,
    OutputError,
    RowError,
    UsageError,
    columns_found,
)
from advcli.io.rollouts import (
    FLOAT32_MAX,
    Rows,
    extract_rows,
    needs_ids,
    row_columns,
)
from advcli.io.schema import Roles
from advcli.io.sources import (
    LogSource,
    Sources,
    prefetch,
)
from advcli.io.split_tokens import stored_roles
from advcli.io.tokens import Tokens, extract_tokens, token_columns
from advcli.lazy_imports import np, pa
from advcli.methods import Method, Plan, TokenPass, sum_rows
from advcli.params import Params
from advcli.presets import Setting
from advcli.run import correcting, reproduce
from advcli.run.logs import BATCH_ROWS, Log, group_warnings


class Scorer(Protocol):
    """Values for a batch of rows (a critic): float32 per token, and what it is."""

    metadata: dict[str, Any]

    def __call__(self, row0: int, table: pa.Table, tokens: Tokens) -> np.ndarray: ...


@contextlib.contextmanager
def room_in_tmpdir(what: str, size: str) -> Iterator[None]:
    """Writing ``what`` to an unnamed temporary file: a temporary folder that is full or not
    writable is one line saying what to do (``size``: the room it needs)."""
    try:
        yield
    except OSError as exc:
        msg = (
            f"{tempfile.gettempdir()}: no room to keep {what} ({exc.strerror or exc}). "
            f"Hint: point TMPDIR at a disk with {size} free"
        )
        raise OutputError(msg) from None


class ValueCache:
    """A scorer that runs on the first pass over a log only: its values (float32, as the
    critic gives them) go to an unnamed temporary file, and every later pass, which asks for
    the same batches from row 0 again, reads them back in order. Sent to another process (a
    Ray task, which reads a part of the log), it arrives empty: a cache of that process."""

    WHAT = "the critic's values", "4 bytes per token of the log"

    def __init__(self, scorer: Scorer):
        self.scorer = scorer
        self.metadata = scorer.metadata
        # Unnamed: nothing is left on disk, however the process ends.
        with room_in_tmpdir(*self.WHAT):
            self.file: IO[bytes] | None = tempfile.TemporaryFile(prefix="advcli-values-")  # noqa: SIM115
        self.scored_rows = 0  # rows scored so far: the first pass

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "file": None, "scored_rows": 0}

    def __call__(self, row0: int, table: pa.Table, tokens: Tokens) -> np.ndarray:
        if self.file is None:
            with room_in_tmpdir(*self.WHAT):
                self.file = tempfile.TemporaryFile(prefix="advcli-values-")  # noqa: SIM115
        if row0 == 0:
            self.file.seek(0)
        if row0 < self.scored_rows:  # a later pass
            n_tokens = int(tokens.offsets[-1])
            return np.fromfile(self.file, dtype=np.float32, count=n_tokens)
        values = self.scorer(row0, table, tokens)
        with room_in_tmpdir(*self.WHAT):  # not ndarray.tofile: it missed a short write
            self.file.write(np.asarray(values, dtype=np.float32).tobytes())
            self.file.flush()
        self.scored_rows = row0 + len(tokens.offsets) - 1
        return values

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


@contextlib.contextmanager
def located(sources: Sources, roles: Roles) -> Iterator[None]:
    """Raise a :class:`RowError` again with the file, row and column it is about."""
    try:
        yield
    except RowError as exc:
        column = next((roles[r] for r in exc.roles if roles[r]), exc.column)
        raise DataError(f"{sources.at(exc.row, column)}: {exc.problem}") from None


@dataclass(frozen=True)
class Batch:
    """One batch of the final pass: the annotated rows (dropped rows left out), and the flat
    advantages and action mask of the rows kept; for a log without token ids, one advantage
    per row and no mask."""

    table: pa.Table
    advantages: np.ndarray
    mask: np.ndarray | None


@dataclass
class Run:
    """A method planned over a log: :meth:`annotated` streams the result."""

    source: LogSource
    roles: Roles
    params: Params
    method: Method[Any]
    rows: Rows
    plan: Plan
    scorer: Scorer | None = None
    batch_rows: int = BATCH_ROWS
    warnings: list[str] = dataclasses.field(default_factory=list)
    agreement: reproduce.Agreement | None = None  # against the framework's logged advantages
    settled: str | None = None  # the log's settings found from those (Log.settled)
    reproduced_by: str | None = None  # flags that give the logged advantages where these differ
    log: Log | None = None  # the log it was planned on
    token_agreement: reproduce.TokenAgreement | None = None  # per-token advantages against the
    # logged ones, filled by the final pass
    correction: Correction | None = None  # the rollout correction the final pass writes
    reads_streams: bool = False  # the final pass reads both log-prob streams without one (the
    # report's δ)
    n_passes: int = 2  # over the log: reading the per-row columns, ..., the final one
    held: list[TokenPass[Any]] = dataclasses.field(default_factory=list)  # passes the final
    # pass runs itself, batch by batch (TokenPass.per_batch): each batch of the log is held
    # until its last row is read, measured, then annotated

    def __getstate__(self) -> dict[str, Any]:
        # Sent to a Ray task (a part of the log): the comparison with the logged advantages
        # stays here, and the log it searches is this process's
        return {**self.__dict__, "log": None, "token_agreement": None}

    def final_pass(self, name: str) -> contextlib.AbstractContextManager[None]:
        """The progress stage of the pass that streams :meth:`annotated`."""
        return progress.stage(name, number=self.n_passes, total=self.n_passes)

    @property
    def sources(self) -> Sources:
        return self.source.sources

    def tokens(
        self, names: list[str] | None, *, values: bool, cuts: np.ndarray | None = None
    ) -> Iterator[tuple[int, pa.Table, Tokens]]:
        """Batches of validated tokens (values from the log, or scored by the critic); a pass
        that reads only some columns (``names``) reads the token ids only if it must. ``cuts``:
        rows where a read batch is cut in two (where one of the log's batches begins)."""
        from_log = values and self.scorer is None
        extra = self.method.token_roles(self.params)
        if names is None and (self.correction is not None or self.reads_streams):
            extra = tuple(dict.fromkeys([*extra, *correcting.STREAMS]))
        ids = names is None or self.roles["input_ids"] in names
        for start, whole in prefetch(self.source.batches(names, self.batch_rows)):
            for row0, table in _cut(start, whole, cuts):
                tok = extract_tokens(
                    table, self.roles, self.sources, row0, values=from_log, extra=extra, ids=ids
                )
                if values and self.scorer is not None:
                    tok.values = self.scorer(row0, table, tok)
                    _check_scored(tok, row0)
                yield row0, table, tok

    def _held_batches(self) -> Iterator[tuple[int, pa.Table, Tokens]]:
        """The final pass's batches of tokens, each of the log's batches (rows in a row) held
        until its last row is read, the :attr:`held` passes run on it, and the plan refined.
        The first pass measures each piece on a worker thread as it arrives, while the next
        are read."""
        batch = self.held[0].batch_of_row
        cuts = np.flatnonzero(batch[1:] != batch[:-1]) + 1
        first = self.held[0]
        held: list[tuple[int, pa.Table, Tokens, concurrent.futures.Future[Any]]] = []
        pieces = self.tokens(None, values=self.method.reads_values, cuts=cuts)
        with concurrent.futures.ThreadPoolExecutor(PASS_WORKERS) as pool:
            for row0, table, tok in pieces:
                if held and batch[row0] != batch[held[0][0]]:
                    yield from self._released(held)
                    held = []
                held.append((row0, table, tok, pool.submit(first.measure, self.plan, row0, tok)))
            yield from self._released(held)

    def _released(
        self, held: list[tuple[int, pa.Table, Tokens, concurrent.futures.Future[Any]]]
    ) -> Iterator[tuple[int, pa.Table, Tokens]]:
        for i, token_pass in enumerate(self.held):
            for row0, _, tok, measured in held:
                found = measured.result() if i == 0 else token_pass.measure(self.plan, row0, tok)
                token_pass.add(self.plan, row0, found)
            self.plan = token_pass.finish(self.plan)
        for row0, table, tok, _ in held:
            yield row0, table, tok

    @property
    def has_tokens(self) -> bool:
        """Whether the log has token ids (else only per-row columns are written)."""
        return self.roles["input_ids"] is not None

    def annotated(self) -> Iterator[Batch]:
        """The final pass: every column, annotated, batch by batch in input order."""
        if not self.has_tokens:
            yield from self._annotated_rows()
            return
        for row0, table, tok, columns in self.computed():
            per_token = {n: correcting.token_list(flat, tok.offsets) for n, flat in columns.items()}
            out, kept = self._add_columns(table, row0, per_token)
            adv = columns["advantages"]
            if kept is None:
                yield Batch(out, adv, tok.mask)
            else:
                tokens_kept = np.repeat(kept, lengths(tok.offsets))
                yield Batch(out, adv[tokens_kept], tok.mask[tokens_kept])

    def computed(self) -> Iterator[tuple[int, pa.Table, Tokens, dict[str, np.ndarray]]]:
        """The final pass of a log with token ids, before any row is dropped: each batch's
        first row, its table and tokens, and the method's flat per-token columns."""
        with located(self.sources, self.roles), contextlib.ExitStack() as done:
            if isinstance(self.scorer, ValueCache):
                done.callback(self.scorer.close)  # the last pass that reads the values
            batches = (
                self._held_batches()
                if self.held
                else self.tokens(None, values=self.method.reads_values)
            )
            for row0, table, tok in batches:
                columns = self.method.annotate(self.plan, tok, row0, self.params)
                for name, flat in columns.items():
                    self._check_written(name, flat, row0, tok.offsets)
                if self.correction is not None:
                    columns.update(correcting.correction_columns(self.correction, tok))
                if self.token_agreement is not None:
                    self.token_agreement.add(row0, table, tok.mask, columns["advantages"])
                yield row0, table, tok, columns
        if self.token_agreement is not None:
            self.agreement, self.token_agreement = self.token_agreement.result(), None
            if self.agreement is not None:
                self.settle_agreement()

    def settle_agreement(self) -> None:
        """Where the advantages differ from the framework's logged ones, the warning that says
        so, naming the setting that gives those if one of the framework's does."""
        assert self.agreement is not None and self.log is not None
        if self.agreement.reproduces:
            return
        log = self.log
        found = reproduce.reproducing(log, self.params, log.roles["reward"], engine_fits)
        self.reproduced_by = found.sentence() if found is not None else None
        self.warnings.append(reproduce.disagreement(log, self.params, self.agreement, found))

    def token_names(self, *, values: bool) -> list[str]:
        """The token columns a pass before the final one reads (``values``: with the critic
        values; the token ids only where the rows' lengths need them)."""
        extra = self.method.token_roles(self.params)
        ids = needs_ids(self.roles) or self.scorer is not None  # a critic reads the ids
        return token_columns(self.roles, values=values, extra=extra, ids=ids)

    def row_sums(self, wanted: tuple[str, ...]) -> dict[str, np.ndarray]:
        """The per-row sums of token columns the method plans with (one pass)."""
        sums: dict[str, np.ndarray] = {}
        for row0, _, tok in self.tokens(self.token_names(values=False), values=False):
            for name, part in sum_rows(tok, wanted, self.params).items():
                whole = sums.setdefault(name, np.zeros(self.rows.n_rows, dtype=part.dtype))
                whole[row0 : row0 + len(part)] = part
        return sums

    def _annotated_rows(self) -> Iterator[Batch]:
        """The final pass of a log without token ids: the method's per-row columns only."""
        advantage = self.plan.columns["advantage"]
        for row0, table in prefetch(self.source.batches(None, self.batch_rows)):
            out, kept = self._add_columns(table, row0, {})
            adv = advantage[row0 : row0 + table.num_rows]
            yield Batch(out, adv if kept is None else adv[kept], None)

    def _add_columns(
        self, table: pa.Table, row0: int, per_token: dict[str, pa.Array]
    ) -> tuple[pa.Table, np.ndarray | None]:
        """The batch with the method's columns (an input column of the same name is replaced)
        and without the rows it drops; and which rows it kept (None: all)."""
        n = table.num_rows
        new = dict(per_token)
        for name, per_row in self.plan.columns.items():
            here = per_row[row0 : row0 + n]
            if here.dtype.kind == "f":  # NaN stands for no value here (null)
                self._check_written(name, np.where(np.isnan(here), 0.0, here), row0)
            new[name] = pa.array(here, from_pandas=True)
        for name, column in new.items():
            if name in table.column_names:
                table = table.drop_columns([name])
            table = table.append_column(name, column)
        kept = self.plan.kept[row0 : row0 + n] if self.plan.kept is not None else None
        if kept is None or kept.all():
            return table, None
        return table.filter(pa.array(kept)), kept

    def _check_written(
        self, name: str, x: np.ndarray, row0: int, offsets: np.ndarray | None = None
    ) -> None:
        """A number the method computed must be finite in float32, as written; else the run
        stops at its row (inputs near float32's limit can overflow a sum or a square)."""
        bad = ~(np.abs(x) <= FLOAT32_MAX)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            row = row0 + (i if offsets is None else int(row_of(offsets)[i]))
            msg = (
                f"{self.sources.at(row, name)}: the {self.method.name} result {x[i]:g} is not a "
                "finite float32 number (the row's inputs are too large or too small). "
                "Hint: scale the rewards and values"
            )
            raise DataError(msg)

    def metadata(self) -> dict[str, Any]:
        """What an annotated output records about the run."""
        meta: dict[str, Any] = {
            "advcli_version": __version__,
            "method": self.params.method,
            "params": self.params.as_dict(),
            "inputs": self.sources.files,
            "roles": stored_roles(self.source, self.roles.columns),
        }
        if self.correction is not None:
            meta["correction"] = correcting.described(self.correction)
        if self.log is not None and self.log.retokenized is not None:
            meta.update(self.log.retokenized.as_metadata())
        if self.scorer is not None and self.method.reads_values:
            meta.update(self.scorer.metadata)
            if self.roles["values"] is not None:  # the log's own values, not read
                meta["critic"] = {**meta["critic"], "replaced_column": self.roles["values"]}
        return meta


def _check_scored(tokens: Tokens, row0: int) -> None:
    assert tokens.values is not None
    bad = tokens.mask & ~np.isfinite(tokens.values)
    if bad.any():
        row = row0 + int(row_of(tokens.offsets)[np.flatnonzero(bad)[0]])
        problem = (
            "the critic gave no value for an action token (a row's first token has no earlier "
            "output to shift from). Hint: pass `shift=False` if the model outputs V(s_t) itself"
        )
        raise RowError(row, ("input_ids",), problem)


def plan_run(
    log: Log,
    method: Method[Any],
    params: Params,
    *,
    scorer: Scorer | None = None,
    batch_rows: int = BATCH_ROWS,
    measure: Measure | None = None,
    compare: bool = True,
    correction: Correction | None = None,
) -> Run:
    """Validate the log's per-row columns and plan ``method`` with ``params`` (running the
    passes it needs).

    ``scorer`` gives the values when the log has none (a critic); ``measure`` runs the token
    passes elsewhere (default: here, :func:`measured_here`); ``compare``: compare the
    advantages with those the framework logged, if the log has them (per row here, per token
    as the final pass streams); ``correction``: the rollout correction the final pass writes
    (``is_weights``, ``is_mask``), which reads both log-prob streams.
    """
    local = measure is None
    measure = measure or measured_here
    log.trust_reward()
    source, roles = log.source, log.roles
    if roles["input_ids"] is None and (plain := method.without_tokens(params)) is not None:
        method = plain
    needs = method.needs(params) - ({"values"} if scorer is not None else set())
    log.require(needs, what=method.reading_tokens(params), without_tokens=methods.without_tokens())
    if correction is not None:
        log.require({"input_ids"}, what="`correction`")
        correcting.require_streams(roles, source.schema.names, source.sources)
    named = method.named_columns(params)
    for name in named:
        if name not in source.schema.names:
            msg = f"{log.files}: no column '{name}' (named by {method.name}'s options)"
            raise UsageError(f"{msg}. {columns_found(source.schema.names)}")
    source.keep_parsed()  # the final pass reads every column again
    with progress.stage("reading per-row columns", number=1):
        steps = method.reads_steps
        table = source.columns(row_columns(roles, steps=steps, named=named))
        rows = extract_rows(table, roles, source.sources, steps=steps, named=named)
    warnings = [*log.warnings, *group_warnings(log, rows)]
    run = Run(source, roles, params, method, rows, Plan(columns={}), scorer, batch_rows, warnings)
    run.correction = correction
    with located(source.sources, roles):
        if wanted := method.row_sums(params):
            with progress.stage("summing tokens per row", number=2):
                rows.sums = run.row_sums(wanted)
        run.plan = method.plan(rows, params)
        passes = method.passes(rows, params)
        if local and held_per_batch(passes):
            run.held, passes = passes, []
            for token_pass in run.held:
                token_pass.hold()
        if scorer is not None and method.reads_values and any(p.reads_values for p in passes):
            run.scorer = ValueCache(scorer)  # several passes read the values: score them once
        done = 1 + bool(wanted)
        run.n_passes = done + len(passes) + 1  # and the final one, that writes
        for number, token_pass in enumerate(passes, done + 1):
            with progress.stage(token_pass.title, number=number, total=run.n_passes):
                for row0, measured in measure(run, token_pass):
                    token_pass.add(run.plan, row0, measured)
                run.plan = token_pass.finish(run.plan)
    run.settled = log.settled
    run.log = log
    if compare and reproduce.logs_advantages(log):
        run.agreement = reproduce.agreement(log, run.plan)
        if run.agreement is not None:
            run.settle_agreement()
        elif run.has_tokens and log.preset is not None and log.preset.logged == TOKENWISE:
            run.token_agreement = reproduce.TokenAgreement(log.preset.framework, TOKENWISE)
    return run


HELD_ROWS = 1 << 16
"""Most rows of one of the log's batches that the final pass holds to measure it itself."""


def held_per_batch(passes: list[TokenPass[Any]]) -> bool:
    """Whether the final pass can run ``passes`` itself, one of the log's batches at a time
    (a step of NeMo-RL's or verl's, a rollout file of slime's): each pass is
    :attr:`~advcli.methods.TokenPass.per_batch`, on the same batches, each batch consecutive
    rows (none comes back later) of at most :data:`HELD_ROWS`; so the log is read once."""
    if not passes or not all(p.per_batch for p in passes):
        return False
    batch = passes[0].batch_of_row
    if len(batch) < 2 or any(not np.array_equal(p.batch_of_row, batch) for p in passes):
        return False
    starts = np.flatnonzero(np.r_[True, batch[1:] != batch[:-1]])
    if len(starts) < 2 or len(starts) != len(np.unique(batch)):
        return False  # one batch (the whole log), or a batch whose rows come back later
    return int(np.diff(np.r_[starts, len(batch)]).max()) <= HELD_ROWS


def _cut(row0: int, table: pa.Table, cuts: np.ndarray | None) -> Iterator[tuple[int, pa.Table]]:
    """``table`` (rows from ``row0``) in pieces, cut at the rows ``cuts`` names."""
    if cuts is None:
        yield row0, table
        return
    inside = cuts[(cuts > row0) & (cuts < row0 + table.num_rows)] - row0
    for lo, hi in zip(np.r_[0, inside], np.r_[inside, table.num_rows], strict=True):
        yield row0 + int(lo), table.slice(int(lo), int(hi - lo))


TOKENWISE = "source_advantages"
"""The column of a framework's logged per-token advantages."""


def engine_fits(log: Log, setting: Setting, params: Params) -> reproduce.Agreement | None:
    """A setting of the framework's run on ``log`` by the engine (the reward column it names
    read as the reward), its advantages compared with the logged ones: per row where the
    method gives one advantage per rollout, else token by token as its final pass streams."""
    if setting.reward is not None:
        if setting.reward not in log.source.schema.names:
            return None
        log = dataclasses.replace(log, roles=Roles({**log.roles.columns, "reward": setting.reward}))
    assert log.preset is not None
    try:
        run = plan_run(log, params.estimator, params, compare=False)
        if per_row := reproduce.agreement(log, run.plan):
            return per_row
        if log.preset.logged != TOKENWISE or not run.has_tokens:
            return None
        agreement = reproduce.TokenAgreement(log.preset.framework, TOKENWISE)
        for row0, table, tok, columns in run.computed():
            agreement.add(row0, table, tok.mask, columns["advantages"])
    except (DataError, UsageError):
        return None
    return agreement.result()


Measure = Callable[["Run", TokenPass[Any]], Iterator[tuple[int, Any]]]
"""How a token pass is measured over a log: ``(first row, measured)`` of every batch, in log
order (the pass adds them up in that order)."""


def measured_here(run: Run, token_pass: TokenPass[Any]) -> Iterator[tuple[int, Any]]:
    """A token pass measured in this process, batch after batch."""
    names = run.token_names(values=token_pass.reads_values)
    batches = run.tokens(names, values=token_pass.reads_values)
    return measured_in_order(token_pass, run.plan, batches)


PASS_WORKERS = 2  # batches a token pass measures at once (numpy's arithmetic frees the GIL)


def measured_in_order(
    token_pass: TokenPass[Any], plan: Plan, batches: Iterator[tuple[int, pa.Table, Tokens]]
) -> Iterator[tuple[int, Any]]:
    """Each batch measured on a worker thread, a few at once; the results in batch order (so
    a pass adds them up exactly as one batch after another would, and the first error raised
    is the first batch's)."""
    with concurrent.futures.ThreadPoolExecutor(PASS_WORKERS) as pool:
        pending: collections.deque[tuple[int, concurrent.futures.Future[Any]]] = collections.deque()
        for row0, _, tok in batches:
            pending.append((row0, pool.submit(token_pass.measure, plan, row0, tok)))
            if len(pending) > PASS_WORKERS:
                first, future = pending.popleft()
                yield first, future.result()
        while pending:
            first, future = pending.popleft()
            yield first, future.result()
