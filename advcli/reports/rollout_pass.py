"""The report's one pass over a log's rows (:class:`RolloutPass`): every action token's
advantage into an exact histogram in bounded memory, each rollout's advantage, and the tokens and
text of the sampled rollouts the page shows; with the helpers the report's other modules share.
"""

from __future__ import annotations

import base64
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from advcli.core.correction import Correction, corrected
from advcli.core.ragged import first_where, lengths, prefix_hashes
from advcli.errors import DataError
from advcli.io.arrow import flat_list
from advcli.io.sources import prefetch
from advcli.io.tokens import extract_tokens, token_columns
from advcli.lazy_imports import np, pa
from advcli.reports.options import ReportOptions
from advcli.run.accounting import Audit
from advcli.run.correcting import STREAMS
from advcli.run.engine import Run, room_in_tmpdir
from advcli.run.logs import Log

PROMPT, ACTION, OBSERVATION = 0, 1, 2  # what a token is, in the token view
TEXT_CHARS = (200, 4000)  # of each text column shown with a rollout: at least, at most
TEXT_BUDGET = 2_000_000  # characters of text the page holds in all (a page under 10 MB)
MIN_TOKENS_SHOWN = 64  # per rollout, however many rollouts share the token budget
PROMPT_TAIL = 8  # the prompt tokens a rollout's token view keeps: its last ones
KEY_CHARS = 120  # of a prompt id shown in the groups table

LOGGED_HINT = "report a log annotated by advcli, or give `method`"


@dataclass(frozen=True)
class Shown:
    """A detail row's tokens as the page keeps them: ids, kinds, and per token (None where the
    page shows none; float32 in the page) the advantage, δ (trainer − sampler log-prob, NaN off
    actions), the correction's weight and mask; the row's length and the prompt tokens folded."""

    ids: np.ndarray
    kind: np.ndarray
    adv: np.ndarray | None
    delta: np.ndarray | None
    weight: np.ndarray | None
    masked: np.ndarray | None
    length: int
    folded: int


def histogram_of(
    chunks: Iterator[np.ndarray], lo: float, hi: float, bins: int, *, integers: bool = False
) -> dict[str, list[float]]:
    """Counts over equal bins from ``lo`` to ``hi`` of every chunk's values; ``integers``:
    bins of whole numbers."""
    if integers:
        step = max(1.0, float(np.ceil((hi - lo + 1) / bins)))
        edges = np.arange(lo, hi + step + 1, step) - 0.5
        edges = edges[: int(np.searchsorted(edges, hi, side="right")) + 1]
    else:
        edges = np.linspace(lo, hi, bins + 1) if hi > lo else np.array([lo - 0.5, hi + 0.5])
    counts = np.zeros(len(edges) - 1, dtype=np.int64)
    for chunk in chunks:
        counts += np.histogram(chunk, bins=edges)[0]
    return {"edges": edges.tolist(), "counts": counts.tolist()}


def floats_of(values: pa.Array | pa.ChunkedArray, where: str, hint: str) -> np.ndarray:
    """``values`` as float64 (nulls: NaN), or one line saying ``where`` holds no numbers."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    try:
        return np.asarray(values.cast(pa.float64()).to_numpy(zero_copy_only=False))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise DataError(f"{where} holds no numbers. Hint: {hint}") from None


def shortened(key: object, chars: int = KEY_CHARS) -> str:
    text = str(key)
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _b64(x: np.ndarray) -> str:
    return base64.b64encode(
        np.ascontiguousarray(x).astype(x.dtype.newbyteorder("<")).tobytes()
    ).decode()


class RolloutPass:
    """One pass over the log's rows: every action token's advantage into the histogram file
    and each rollout's advantage sum; the tokens and text of the detail rows kept."""

    def __init__(
        self,
        log: Log,
        found: Audit,
        run: Run | None,
        detail_rollout: np.ndarray,
        options: ReportOptions,
        batch_rows: int,
        *,
        hash_prompts: bool = False,
        correction: Correction | None = None,
    ):
        self.log, self.found, self.run = log, found, run
        self.roles = log.roles
        self.streams = all(self.roles[r] is not None for r in STREAMS)  # δ needs both
        if run is not None:  # the method's final pass reads them with the advantages
            run.reads_streams = self.streams
        self.correction = correction if self.streams else None
        # per row, with both streams: Σ|δ|, Σk3 and the masked tokens over its action tokens
        self.mismatch = np.zeros((found.rows.n_rows, 3)) if self.streams else None
        rows = found.rows
        self.detail_row = detail_rollout[rows.rollout_codes]
        n_detail = max(1, int(self.detail_row.sum()))
        self.cap = max(MIN_TOKENS_SHOWN, options.token_budget // n_detail)
        self.batch_rows = batch_rows
        names = log.source.schema.names
        self.logged_column: str | None = None
        if run is None:
            wanted = "advantages" if self.roles["input_ids"] is not None else "advantage"
            self.logged_column = wanted if wanted in names else None
        role_columns = {c for c in self.roles.columns.values() if c}
        self.text_columns = [
            f.name
            for f in log.source.schema
            if f.name not in role_columns
            and f.name != self.logged_column
            and (pa.types.is_string(f.type) or pa.types.is_large_string(f.type))
        ]
        share = TEXT_BUDGET // (n_detail * max(1, len(self.text_columns)))
        self.text_chars = min(max(share, TEXT_CHARS[0]), TEXT_CHARS[1])
        self.adv_sum = np.zeros(rows.n_rollouts)
        self.row_advantage: np.ndarray | None = None  # per row, a log without token ids
        self.adv_lo, self.adv_hi = np.inf, -np.inf
        self.adv_file: IO[bytes] | None = None  # the action tokens' advantages, float32
        self.room = f"{4 * (found.report.action_tokens or rows.n_rollouts):,} bytes"
        self.has_advantages = run is not None or self.logged_column is not None
        self.tokens: dict[int, Shown] = {}  # per detail row
        self.text: dict[int, dict[str, str]] = {}
        self.prompt_hash = (  # per row: the hash of its tokens before its first action
            np.zeros(rows.n_rows, dtype=np.uint64)
            if hash_prompts and self.roles["input_ids"] is not None
            else None
        )

    def walk(self) -> RolloutPass:
        if self.roles["input_ids"] is None:
            self._walk_rows()
        else:
            for row0, table, tokens, ids, adv in self._batches():
                self._add(row0, table, tokens, ids, adv)
        return self

    def _batches(self) -> Iterator[tuple[int, pa.Table, Any, np.ndarray, np.ndarray | None]]:
        ids_column = self.roles.column("input_ids")
        if self.run is not None:
            for row0, table, tok, columns in self.run.computed():
                ids = flat_list(table.column(ids_column))[0].to_numpy(zero_copy_only=False)
                yield row0, table, tok, ids, columns["advantages"]
            return
        source = self.log.source
        extra = STREAMS if self.streams else ()
        names = token_columns(self.roles, values=False, ids=True, extra=extra) + self.text_columns
        if self.logged_column is not None:
            names.append(self.logged_column)
        for row0, table in prefetch(source.batches(list(dict.fromkeys(names)), self.batch_rows)):
            tok = extract_tokens(table, self.roles, source.sources, row0, values=False, extra=extra)
            ids = flat_list(table.column(ids_column))[0].to_numpy(zero_copy_only=False)
            adv = None
            if self.logged_column is not None:
                adv = self._logged(table, row0, tok.offsets)
            yield row0, table, tok, ids, adv

    def _logged(self, table: pa.Table, row0: int, offsets: np.ndarray) -> np.ndarray:
        """The advantages an annotated log holds, one per token, checked."""
        name = self.logged_column
        assert name is not None
        column = table.column(name)
        if not pa.types.is_list(column.type) and not pa.types.is_large_list(column.type):
            msg = (
                f"{self.log.files}: column '{name}' is not a list of numbers, one per token. "
                f"Hint: {LOGGED_HINT}"
            )
            raise DataError(msg)
        flat, offs = flat_list(column.fill_null([]) if column.null_count else column)
        bad = lengths(offs) != lengths(offsets)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            msg = (
                f"{self.log.sources.at(row0 + row, name)}: {lengths(offs)[row]} advantages but "
                f"{lengths(offsets)[row]} tokens. Hint: {LOGGED_HINT}"
            )
            raise DataError(msg)
        return floats_of(flat, f"{self.log.files}: column '{name}'", LOGGED_HINT)

    def _add(
        self, row0: int, table: pa.Table, tok: Any, ids: np.ndarray, adv: np.ndarray | None
    ) -> None:
        offsets, mask = tok.offsets, tok.mask
        n = len(offsets) - 1
        rollouts = self.found.rows.rollout_codes[row0 : row0 + n]
        if adv is not None:
            act = adv[mask]
            if len(act):
                self._keep_advantages(act)
                self.adv_lo = min(self.adv_lo, float(np.nanmin(act)))
                self.adv_hi = max(self.adv_hi, float(np.nanmax(act)))
            summed = np.zeros(len(adv) + 1)
            np.cumsum(np.where(mask, np.nan_to_num(adv), 0.0), out=summed[1:])
            np.add.at(self.adv_sum, rollouts, summed[offsets[1:]] - summed[offsets[:-1]])
        if self.prompt_hash is not None:
            prompt_ends = first_where(offsets, mask)
            self.prompt_hash[row0 : row0 + n] = prefix_hashes(ids, offsets, prompt_ends)
        ranks = self.found.rows.segment_rank[row0 : row0 + n]
        detail = np.flatnonzero(self.detail_row[row0 : row0 + n])
        delta = weight = masked = None
        if self.mismatch is not None:
            delta, weight, masked = self._overlay(tok)
            self._add_mismatch(row0, tok.offsets, delta, masked)
        for i in detail:
            start, end = int(offsets[i]), int(offsets[i + 1])
            part = mask[start:end]
            first_action = int(np.argmax(part)) if part.any() else end - start
            kind = np.full(end - start, OBSERVATION, dtype=np.uint8)
            kind[:first_action] = PROMPT
            kind[part] = ACTION
            # the budget goes to the response: a rollout's prompt keeps its last few tokens
            folded = max(0, first_action - PROMPT_TAIL) if ranks[i] == 0 else 0
            begin = start + folded
            shown = min(end, begin + self.cap)
            self.tokens[row0 + int(i)] = Shown(
                ids=ids[begin:shown],
                kind=kind[folded : shown - start],
                adv=None if adv is None else adv[begin:shown],
                delta=None if delta is None else delta[begin:shown],
                weight=None if weight is None else weight[begin:shown],
                masked=None if masked is None else masked[begin:shown],
                length=end - start,
                folded=folded,
            )
            self._keep_text(table, int(i), row0)

    def _add_mismatch(
        self, row0: int, offsets: np.ndarray, delta: np.ndarray, masked: np.ndarray | None
    ) -> None:
        """Each row's sums of |δ|, k3 = exp(δ) − 1 − δ (as :mod:`advcli.core.mismatch`) and masked
        tokens over its action tokens, for the mismatch by step."""
        assert self.mismatch is not None
        d = np.nan_to_num(delta)  # 0 off actions: no |δ|, no k3
        k3 = np.expm1(d) - d
        flagged = np.zeros(len(d)) if masked is None else masked.astype(np.float64)
        for j, x in enumerate((np.abs(d), k3, flagged)):
            before = np.r_[0.0, np.cumsum(x)]
            self.mismatch[row0 : row0 + len(offsets) - 1, j] = (
                before[offsets[1:]] - before[offsets[:-1]]
            )

    def _overlay(self, tok: Any) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """A batch's δ per token (float64, NaN off actions) and, with a correction, each
        token's weight and mask as :func:`~advcli.core.correction.corrected` gives them (a
        method's final pass reads both streams: ``Run.reads_streams``)."""
        trainer, sampler, mask = tok.extra["trainer_logprobs"], tok.extra["logprobs"], tok.mask
        delta = np.where(mask, trainer.astype(np.float64) - sampler, np.nan)
        if self.correction is None:
            return delta, None, None
        found = corrected(trainer, sampler, mask, tok.offsets, self.correction)
        return delta, found.weights.astype(np.float32), found.masked.astype(np.uint8)

    def _keep_advantages(self, x: np.ndarray) -> None:
        with room_in_tmpdir("the advantages for the report", self.room):
            if self.adv_file is None:
                self.adv_file = tempfile.TemporaryFile()  # noqa: SIM115 (closed by histogram())
            self.adv_file.write(x.astype(np.float32).tobytes())

    def _keep_text(self, table: pa.Table, i: int, row0: int) -> None:
        texts = {}
        for name in self.text_columns:
            if name in table.column_names and (value := table.column(name)[i].as_py()):
                texts[name] = shortened(value, self.text_chars)
        if texts:
            self.text[row0 + i] = texts

    def _walk_rows(self) -> None:
        """A log without token ids: one advantage per row; the text of the detail rows."""
        rows = self.found.rows
        if self.run is not None:
            self.row_advantage = self.run.plan.columns["advantage"]
        elif self.logged_column is not None:
            name = self.logged_column
            column = self.log.source.columns([name]).column(name)
            where = f"{self.log.files}: column '{name}'"
            self.row_advantage = floats_of(column, where, LOGGED_HINT)
        if self.row_advantage is not None:
            adv = self.row_advantage
            last = rows.last_segment_row()
            self.adv_sum = adv[last].astype(np.float64)
            finite = adv[last][~np.isnan(adv[last])]
            if len(finite):
                self._keep_advantages(finite)
                self.adv_lo, self.adv_hi = float(finite.min()), float(finite.max())
        if not self.text_columns or not self.detail_row.any():
            return
        source = self.log.source
        for row0, table in prefetch(source.batches(self.text_columns, self.batch_rows)):
            for i in np.flatnonzero(self.detail_row[row0 : row0 + table.num_rows]):
                self._keep_text(table, int(i), row0)

    def rollout_advantages(self, lengths_: np.ndarray | None) -> np.ndarray | None:
        """Per rollout: its advantages' mean over its action tokens (without token ids, its
        advantage); None where the walk saw no advantages."""
        if not self.has_advantages:
            return None
        if lengths_ is None:
            return self.adv_sum
        with np.errstate(invalid="ignore", divide="ignore"):
            out: np.ndarray = np.where(lengths_ > 0, self.adv_sum / lengths_, np.nan)
        return out

    def histogram(self, bins: int) -> dict[str, list[float]] | None:
        """The advantages' histogram over every action token (rollout, without token ids)."""
        kept = self.adv_file
        if kept is None or not self.adv_lo <= self.adv_hi:  # no finite advantage
            return None
        kept.seek(0)

        def chunks() -> Iterator[np.ndarray]:
            while block := kept.read(1 << 24):
                yield np.frombuffer(block, dtype=np.float32)

        with kept:
            return histogram_of(chunks(), self.adv_lo, self.adv_hi, bins)

    def details(
        self, found: Audit, codes: np.ndarray, rewards: np.ndarray, lengths_: np.ndarray | None
    ) -> dict[str, list[dict[str, Any]]]:
        """Per detail group (by group code): its rollouts in log order, each with its reward,
        mean advantage over its action tokens, length, and its tokens and text where kept."""
        rows = found.rows
        keys = rows.rollout_keys
        out: dict[str, list[dict[str, Any]]] = {}
        by_rollout: dict[int, list[int]] = {}
        for row in np.flatnonzero(self.detail_row):
            by_rollout.setdefault(int(rows.rollout_codes[row]), []).append(int(row))
        for rollout, its_rows in by_rollout.items():
            its_rows.sort(key=lambda r: int(rows.segment_rank[r]))
            length = int(lengths_[rollout]) if lengths_ is not None else None
            advantage = None
            if self.has_advantages:
                if lengths_ is None:
                    advantage = float(self.adv_sum[rollout])
                elif length:
                    advantage = float(self.adv_sum[rollout] / length)
            entry: dict[str, Any] = {
                "id": str(keys[rollout].as_py()) if keys is not None else str(its_rows[0]),
                "reward": float(rewards[rollout]),
                "advantage": None if advantage is None or np.isnan(advantage) else advantage,
                "length": length,
                "segments": len(its_rows),
                "text": {k: v for r in its_rows for k, v in self.text.get(r, {}).items()},
            }
            per_row = self.run.plan.columns.get("advantage") if self.run is not None else None
            if per_row is not None and rows.segmented:  # each step's (segment's) own; a
                entry["steps"] = per_row[its_rows].tolist()  # per-token method has none
            if self.tokens:
                entry["tokens"] = self._token_view([self.tokens[r] for r in its_rows])
            out.setdefault(str(int(codes[rollout])), []).append(entry)
        return out

    def _token_view(self, parts: list[Shown]) -> dict[str, Any]:
        ids = np.concatenate([p.ids for p in parts]).astype(np.int64)
        kind = np.concatenate([p.kind for p in parts])
        wide = ids.size and (ids.min() < 0 or ids.max() >= 2**32)
        view: dict[str, Any] = {
            "ids": _b64(ids.astype(np.float64 if wide else np.uint32)),
            "ids_type": "f8" if wide else "u4",
            "kind": _b64(kind),
            "shown": int(ids.size),
            "total": int(sum(p.length for p in parts)),
            "folded": int(parts[0].folded),  # the prompt tokens before those shown
        }
        for key in ("adv", "delta", "weight", "masked"):
            kept = [x for p in parts if (x := getattr(p, key)) is not None]
            if kept:
                joined = np.concatenate(kept)
                view[key] = _b64(joined if key == "masked" else joined.astype(np.float32))
        return view
