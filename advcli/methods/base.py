"""What a method is: the protocol every estimator follows, and the plan it makes.

A method runs in two steps, so that a log larger than memory streams through it:

1. :meth:`Method.plan` decides everything per row from the log's per-row columns (rewards,
   groups, completion times, ...): one small array per row, whatever the log's size;
2. :meth:`Method.apply` turns one batch of rows' tokens into per-token columns, needing
   nothing outside the batch and its plan. So any batching gives the same numbers.

A method that needs statistics of the tokens before it can apply (action counts, whitening
moments, values carried across segments) declares :class:`TokenPass` es: the engine streams
the token columns through each pass in turn, and each pass refines the plan.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from advcli.core import group as G
from advcli.core.steps import action_reward_moments, row_turn_returns, turn_counts
from advcli.lazy_imports import np
from advcli.methods import signals
from advcli.params import Param, Params, Range

if TYPE_CHECKING:
    from advcli.core.conventions import Convention
    from advcli.io.rollouts import Rows
    from advcli.io.tokens import Tokens

BATCHES_PANEL = "Group and batch baselines"


DDOF = Range(0, 1)
"""A ddof: 0 (population) or 1 (sample)."""


BATCH_SIZE = Param(
    "batch_size",
    int,
    None,
    "Rollouts per completion-ordered batch (batch-mean, whitening).",
    BATCHES_PANEL,
    range=Range(1),
)


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What a method decided per row before seeing the tokens of the final pass."""

    columns: dict[str, np.ndarray]  # per-row output columns, in output order
    kept: np.ndarray | None = None  # bool per row: the rows written; None: every row
    dropped: dict[str, int] = field(default_factory=dict)  # rows dropped, by reason
    stats: dict[str, Any] = field(default_factory=dict)  # for the summary


PlanT = TypeVar("PlanT", bound=Plan)


class TokenPass(ABC, Generic[PlanT]):
    """A pass over the token columns that a method needs before its final one.

    For every batch of rows the engine calls :meth:`measure` (on a worker thread: it must
    only read the plan and the batch) and then :meth:`add` with what it measured, in batch
    order; then :meth:`finish`, which returns the refined plan. So the batches' arithmetic
    runs on several cores and the result is the same as one batch after another. A pass
    ``per_batch`` may instead see one batch of its own (``batch_of_row``) at a time, in the
    final pass: :meth:`finish` after each, the plan then refined for that batch's rows.
    """

    title: ClassVar[str]  # what the progress line shows while it runs
    reads_values: bool = False  # whether it reads the critic values
    per_batch: ClassVar[bool] = False  # what :meth:`finish` gives the rows of one batch
    # (``batch_of_row``) depends on that batch's rows alone, and it is cheap: where batches
    # are consecutive rows, the engine measures each batch in the final pass itself
    batch_of_row: np.ndarray  # with per_batch: each row's batch

    @abstractmethod
    def measure(self, plan: PlanT, row0: int, tokens: Tokens) -> Any:
        """What the pass needs from one batch (no side effects)."""

    @abstractmethod
    def add(self, plan: PlanT, row0: int, measured: Any) -> None:
        """Take one batch's measure, in batch order."""

    @abstractmethod
    def finish(self, plan: PlanT) -> PlanT: ...

    def hold(self) -> None:
        """Told that the final pass runs it (``per_batch``): it may keep what it measured of
        a batch for that pass, which reads the same rows next."""


class Method(ABC, Generic[PlanT]):
    """One estimator. Subclasses set the class attributes and implement :meth:`plan` and
    :meth:`apply`; register an instance in :mod:`advcli.methods`."""

    name: ClassVar[str]  # what --method takes
    summary: ClassVar[str]  # the advantage it computes, for the README's method table
    roles: ClassVar[tuple[str, ...]]  # the columns it needs besides input_ids
    also_needs: ClassVar[str] = ""  # what else, for the README (columns named by an option)
    reads_values: ClassVar[bool] = False  # reads critic values (a --critic can score them)
    reads_steps: ClassVar[bool] = False  # reads the process rewards (``rows.steps``)
    parameters: ClassVar[tuple[Param, ...]] = ()  # the run parameters it reads
    shared: ClassVar[tuple[Param, ...]] = signals.PARAMETERS  # the modifiers it accepts
    outputs: ClassVar[tuple[str, ...]]  # the columns it writes: per token, then per row

    def defaults(self, convention: Convention) -> dict[str, Any]:
        """Defaults of this method under ``convention``, before the convention's own."""
        return {}

    @property
    def takes(self) -> tuple[Param, ...]:
        """Every parameter a run of it takes: its own, then the shared modifiers it accepts
        (:mod:`advcli.methods.signals`); the only names its :class:`Params` hold."""
        return (*self.parameters, *self.shared)

    def without_tokens(self, p: Params) -> Method[Any] | None:
        """The method to run instead of this one, with ``p``, on a log without token ids,
        where one gives each row the same advantage without them (None: none; :meth:`needs`
        says whether this one needs them)."""
        return None

    def token_roles(self, p: Params) -> tuple[str, ...]:
        """The per-token float columns it reads besides the mask, rewards and values
        (``tokens.extra``): by default those of the KL and distillation signals."""
        return signals.token_roles(p)

    def row_sums(self, p: Params) -> tuple[str, ...]:
        """The per-row sums of token columns :meth:`plan` reads from ``rows.sums``:
        ``"actions"`` (action tokens), ``"turns"`` (action spans), ``"turn_return"`` (Σ_k
        γ^k·r_k of the token rewards on its turns' last tokens, with ``"off_turn_rewards"``
        and the sums of :func:`~advcli.core.steps.action_reward_moments`; where the log has
        token rewards) and ``"kl"`` (sum of kl_t over them, with --kl-coef).
        The engine makes one pass for them before planning."""
        return ("actions", "kl") if signals.kl_coef(p) else ()

    def named_columns(self, p: Params) -> tuple[str, ...]:
        """Numeric per-row columns, named by a parameter, that :meth:`plan` reads from
        ``rows.named`` (GDPO's reward columns)."""
        return ()

    def needs(self, p: Params) -> set[str]:
        """The roles a run with ``p`` needs: its own, the signals', and token ids for sums."""
        extra = set(self.token_roles(p))
        if extra or self.row_sums(p):
            extra.add("input_ids")
        return set(self.roles) | extra

    def reading_tokens(self, p: Params) -> str:
        """What, in a run with ``p``, reads the token ids (for a message): the method, or the
        options that add a sum over its tokens."""
        if "input_ids" in self.roles:
            return self.name
        on = (
            ("kl_coef", signals.kl_coef(p)),
            ("opd_coef", p.opd_coef),
            ("entropy_coef", p.entropy_coef),
        )
        given = [f"`{name}`" for name, coef in on if coef]
        return f"{self.name} with {' and '.join(given)}" if given else self.name

    def annotate(self, plan: PlanT, tokens: Tokens, row0: int, p: Params) -> dict[str, np.ndarray]:
        """:meth:`apply`, then the entropy bonus of ``--entropy-coef``, the distillation term
        of ``--opd-coef`` and the clamp of ``--advantage-clip-low/high``."""
        columns = self.apply(plan, tokens, row0, p)
        shaped = signals.entropy_bonus(columns["advantages"], tokens, p)
        distilled = signals.distill(shaped, tokens, p)
        columns["advantages"] = signals.clamped(distilled, p, tokens.mask)
        return columns

    @abstractmethod
    def plan(self, rows: Rows, p: Params) -> PlanT:
        """The per-row plan, from the log's per-row columns."""

    def passes(self, rows: Rows, p: Params) -> list[TokenPass[PlanT]]:
        """The token passes to run before the final one, in order."""
        return []

    @abstractmethod
    def apply(self, plan: PlanT, tokens: Tokens, row0: int, p: Params) -> dict[str, np.ndarray]:
        """Per-token columns (``advantages`` first) of the batch whose first row is ``row0``."""


def sum_rows(tokens: Tokens, wanted: tuple[str, ...], p: Params) -> dict[str, np.ndarray]:
    """The per-row sums of :meth:`Method.row_sums` over one batch of rows."""
    sums = {"actions": tokens.action_counts()}
    if "turns" in wanted:
        sums["turns"] = turn_counts(tokens.mask, tokens.offsets)
    if "turn_return" in wanted and tokens.token_rewards is not None:
        sums["turn_return"], sums["off_turn_rewards"] = row_turn_returns(
            tokens.mask, tokens.offsets, tokens.token_rewards, p.step_gamma)  # fmt: skip
        sums.update(action_reward_moments(tokens.mask, tokens.offsets, tokens.token_rewards))
    if "kl" in wanted:
        sums["kl"] = signals.row_kl(tokens, p)
    return sums


def completion_batches(rows: Rows, batch_size: int | None) -> tuple[np.ndarray, np.ndarray, int]:
    """Per rollout: its batch (``--batch-size`` consecutive rollouts in completion order; else
    the log's ``batch`` column, e.g. a framework's step; else one batch) and whether that batch
    is a trailing short one; and the number of batches."""
    batches = rows.rollout_batches()
    if batch_size is None and batches is not None:
        _, batch_id = np.unique(batches, return_inverse=True)
        n_batches = int(batch_id.max()) + 1 if len(batch_id) else 0
        return batch_id.astype(np.int64), np.zeros(len(batch_id), dtype=bool), n_batches
    batch_id, partial = G.completion_batches(rows.completion_order(), batch_size)
    return batch_id, partial, int(batch_id.max()) + 1 if len(batch_id) else 0
