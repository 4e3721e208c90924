"""A critic scoring the batches of a log: what ``advcli score`` and ``annotate --critic`` run."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from advcli.critic.onnx import DEFAULT_BATCH_TOKENS, load_critic
from advcli.io.arrow import flat_list, float_list
from advcli.io.rollouts import Tokens, extract_tokens
from advcli.io.schema import Roles
from advcli.io.sources import LogSource, Sources, prefetch


@dataclass(frozen=True)
class CriticOptions:
    """How to run an ONNX critic (the ``--critic`` options of ``score`` and ``annotate``)."""

    path: str
    device: str = "auto"
    batch_tokens: int | None = None
    shift: bool = True
    max_len: int | None = None
    truncate: str = "error"
    input_name: str | None = None
    mask_name: str | None = None
    output_name: str | None = None


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
        return scored.values

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
