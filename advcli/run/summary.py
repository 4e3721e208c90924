"""What ``annotate`` says of a run once its batches are written: the advantages' range and
mean, and what a rollout correction masked (gathered as the batches stream past, merged from a
Ray run's parts)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from advcli.lazy_imports import np, pa
from advcli.results import AnnotateResult
from advcli.run.correcting import Masked, described
from advcli.run.engine import Batch, Run


class Summary:
    """The advantages written, gathered while the batches stream past: over the action tokens,
    or over the rows of a log without token ids."""

    def __init__(self) -> None:
        self.count = 0
        self.adv_min = np.inf
        self.adv_max = -np.inf
        self.adv_sum = 0.0
        self.masked = Masked()  # by the rollout correction, in the rows written

    def counted(self, batches: Iterator[Batch]) -> Iterator[tuple[pa.Table, int]]:
        """Pass the batches on as ``(table, tokens)``, counting their advantages."""
        for batch in batches:
            mask = batch.mask
            if mask is None:  # one advantage per row
                mask = np.ones(len(batch.advantages), dtype=bool)
            self.add(batch.advantages, mask)
            self.masked.add(batch.table)
            yield batch.table, 0 if batch.mask is None else len(mask)

    def add(self, adv: np.ndarray, mask: np.ndarray) -> None:
        """Count a batch; ``adv`` is exactly 0 off the action tokens (``mask``)."""
        n_actions = int(np.count_nonzero(mask))
        if not n_actions:
            return
        self.count += n_actions
        # Whole-array reductions, no gather: the zeros off actions add nothing to the sum, and
        # change the extremes only when every action is on one side of 0.
        lo, hi = float(adv.min()), float(adv.max())
        if lo >= 0.0 or hi <= 0.0:
            act = adv[mask]
            lo, hi = float(act.min()), float(act.max())
        self.adv_min = min(self.adv_min, lo)
        self.adv_max = max(self.adv_max, hi)
        self.adv_sum += float(adv.sum(dtype=np.float64))

    def result(
        self, run: Run, rows_written: int, tokens_written: int, **more: Any
    ) -> AnnotateResult:
        """What ``annotate`` returns: the counts, the run's statistics and ``more`` (the
        output, the time taken, ...)."""
        n = self.count
        return AnnotateResult(
            method=run.params.method,
            convention=run.params.convention,
            rows=run.rows.n_rows,
            rows_written=rows_written,
            rollouts=run.rows.n_rollouts,
            written="per-token advantages"
            if run.has_tokens
            else "per-row advantage only: the log has no token ids",
            tokens_written=tokens_written if run.has_tokens else None,
            action_tokens_written=n if run.has_tokens else None,
            dropped=run.plan.dropped,
            advantage_min=self.adv_min if n else 0.0,
            advantage_max=self.adv_max if n else 0.0,
            advantage_mean=self.adv_sum / n if n else 0.0,
            groups=len(run.rows.group_keys) if run.rows.group_keys is not None else None,
            stats=run.plan.stats,
            found=run.settled or None,
            logged_advantages=run.agreement.sentence() if run.agreement is not None else None,
            correction=self.correction(run),
            prompts_removed=run.log.prompts_removed if run.log is not None else None,
            warnings=run.warnings,
            **more,
        )

    def correction(self, run: Run) -> dict[str, Any] | None:
        """The run's rollout correction and what it masked (None: no correction)."""
        if run.correction is None:
            return None
        masked = {"tokens_masked": self.masked.tokens, "rows_masked": self.masked.rows}
        return {**described(run.correction), **masked}

    def merge(self, other: Summary) -> None:
        """Add another part's counts (a part of the log summarised elsewhere)."""
        self.masked.merge(other.masked)
        self.count += other.count
        self.adv_min = min(self.adv_min, other.adv_min)
        self.adv_max = max(self.adv_max, other.adv_max)
        self.adv_sum += other.adv_sum
