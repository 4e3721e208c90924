"""A critic scoring the batches of a log: what ``advcli score`` and ``annotate --critic`` run."""

from __future__ import annotations

import time
from collections.abc import Iterator

from advcli.critic.onnx import DEFAULT_BATCH_TOKENS, load_critic
from advcli.critic.options import CriticOptions
from advcli.errors import DataError
from advcli.io.arrow import flat_list, float_list
from advcli.io.schema import Roles
from advcli.io.sources import LogSource, Sources, prefetch
from advcli.io.tokens import Tokens, extract_tokens
from advcli.lazy_imports import np, pa


class CriticScorer:
    """The critic, loaded once, scoring one batch of rows at a time: values per token (float32).

    ``metadata`` describes the critic for the output's metadata; ``tokens``, ``seconds`` and
    ``truncated_rows`` add up what it has scored so far.
    """

    def __init__(self, opts: CriticOptions, sources: Sources, roles: Roles):
        self.opts = opts
        self.sources = sources
        self.ids_column = roles.column("input_ids")
        self.critic = load_critic(
            opts.path,
            device=opts.device,
            input_name=opts.input_name,
            mask_name=opts.mask_name,
            output_name=opts.output_name,
        )
        self.batch_tokens = opts.batch_tokens or DEFAULT_BATCH_TOKENS
        self.tokens = 0
        self.seconds = 0.0
        self.truncated_rows = 0
        alignment = "shifted: values[t] = output[t - 1]" if opts.shift else "unshifted"
        self.metadata = {
            "critic": {
                "file": str(opts.path),
                "sha256": self.critic.sha256,
                "provider": self.critic.provider,
                "alignment": alignment,
                "batch_tokens": self.batch_tokens,
            }
        }

    def __call__(self, row0: int, table: pa.Table, tokens: Tokens) -> np.ndarray:
        ids, _ = flat_list(table.column(self.ids_column))
        started = time.perf_counter()
        scored = self.critic.score(
            ids.to_numpy(zero_copy_only=False),
            tokens.offsets,
            batch_tokens=self.batch_tokens,
            shift=self.opts.shift,
            max_len=self.opts.max_len,
            truncate=self.opts.truncate,
            describe_row=lambda row: self.sources.at(row0 + row, self.ids_column),
        )
        self.seconds += time.perf_counter() - started
        self.tokens += int(tokens.offsets[-1])
        self.truncated_rows += scored.truncated_rows
        self._refuse_unvalued(row0, tokens, scored.values)
        return scored.values

    def _refuse_unvalued(self, row0: int, tokens: Tokens, values: np.ndarray) -> None:
        """An action token the critic gave no value (one ``--max-len-truncate left`` cut
        off, or a row's first under ``--shift``) is refused at its row: never a NaN value
        where the advantage needs one."""
        bad = np.flatnonzero(tokens.mask & ~np.isfinite(values))
        if not len(bad):
            return
        row = int(np.searchsorted(tokens.offsets, bad[0], side="right")) - 1
        length = int(tokens.offsets[row + 1] - tokens.offsets[row])
        limit = self.opts.max_len
        if limit is not None and length > limit:
            problem = (
                f"{length} tokens, and `max_len={limit}` leaves out the first "
                f"{length - limit}, action tokens among them, which would get no value. "
                "Hint: a larger `max_len` (the model's limit permitting), or split the "
                "rollout into segments"
            )
        else:
            problem = (
                "the critic gave no value for an action token (a row's first token has no "
                "earlier output to shift from). Hint: pass `shift=False` if the model outputs "
                "V(s_t) itself"
            )
        raise DataError(f"{self.sources.at(row0 + row, self.ids_column)}: {problem}")

    @property
    def tokens_per_second(self) -> int | None:
        return round(self.tokens / self.seconds) if self.seconds else None


def scored_batches(
    source: LogSource, roles: Roles, scorer: CriticScorer, column: str, batch_rows: int
) -> Iterator[tuple[pa.Table, int]]:
    """The log's batches with ``column`` (added, or replaced) holding the critic's values:
    ``(table, tokens)``, what ``advcli score`` writes."""
    for row0, table in prefetch(source.batches(None, batch_rows)):
        tok = extract_tokens(table, roles, source.sources, row0, values=False)
        values = scorer(row0, table, tok)
        if column in table.column_names:
            table = table.drop_columns([column])
        yield table.append_column(column, float_list(values, tok.offsets)), int(tok.offsets[-1])
