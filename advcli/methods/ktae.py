"""KTAE (``ktae``, Key-token Advantage Estimation, xiaolizh1/KTAE @ ea9fb77f,
``verl/trainer/ppo/core_algos.py`` ``compute_ktae_outcome_advantage_and_keytokens``): GRPO's
sequence advantage plus a weight per token id, from how that id's presence tells the group's
correct rollouts (R > 0) from its wrong ones (R <= 0):

    A_t = (R − mean_g)/(std_g + eps) + w_g(token_t)     on action tokens, exactly 0 elsewhere

mean and std (ddof 1) over the group; a group of one has mean 0 and std 1 (A = R/(1 + eps)).
w_g is :func:`advcli.core.ktae.key_weights` over the 2x2 table of the group's rollouts that do
or do not contain the id among their action tokens (Fisher test, information gain, Cohen's h
and a BM25 term-frequency ratio). A group without a correct or without a wrong rollout has
w = 0 (GRPO). The weight is added whatever the sign of the rollout's advantage.

Two correct rollouts [5, 7], [7, 3] and two wrong ones [5, 9], [9, 3] (rewards 1, 1, 0, 0):
the sequence part is ±0.5/(0.57735 + 1e-6) = ±0.866024; token 7 is in every correct rollout
and no wrong one, w(7) = 1.0; token 9 the reverse, w(9) = −1.0; tokens 5 and 3, in one rollout
of each side, get w = 0. So the first rollout's advantages are [0.866024, 1.866024].

KTAE's trainer hard-codes its ``ComputeKeyTokens(alpha=1, beta_ig=1, gamma_tf=1, top=1)``
(its yaml's alpha, beta_ig, gamma_tf, top and bottom never reach it; bottom is unused), and
passes no epsilon: ``--eps`` (1e-6) and the ``--ktae-*`` options, at those values by default,
are the class's arguments. Its quirks, reproduced so that advcli's numbers are KTAE's:

- the Fisher p in float32 (:func:`advcli.core.ktae.fisher_p32`): the p of a table whose
  observed count is the mode rounds to 0.99999988 rather than 1, so KTAE's ``p != 1`` guard
  gives most "neutral" tokens F = exp(−2) instead of 0 (their weights move by a few hundredths), and
  exact ties between mirrored tables are broken by float32's rounding as KTAE's are;
- the weight of id 151643 (Qwen2.5's ``<|endoftext|>``, hard-coded) is 0, whatever the
  tokenizer: KTAE's code does so for every model, and a log of another tokenizer gets the
  same numbers KTAE's trainer would have given it.

Where KTAE's code crashes or divides by zero, advcli does not: a group of one gets w = 0 (KTAE's
table is one entry short, an IndexError for the batch's largest id), a batch without id
151643 is fine (KTAE: IndexError), and a side whose rollouts have no action token gets a term
frequency 0 (KTAE: NaN). A rollout in several segments (rows) counts once, with its last
segment's reward, containing an id if any of its segments does. Rollouts without a reward
(role ``unscored``) are in no count and get 0.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

from advcli.core import group as G
from advcli.core import ktae as K
from advcli.core.ragged import lengths, row_of
from advcli.lazy_imports import np
from advcli.methods import signals
from advcli.methods.base import Method, TokenPass
from advcli.methods.group import EPS, PANEL, OutcomeMethod, OutcomePlan, RolloutAdvantages
from advcli.params import Param, Params, Range

if TYPE_CHECKING:
    from advcli.core.conventions import Convention
    from advcli.io.rollouts import Rows
    from advcli.io.tokens import Tokens

IDS = "input_ids"  # read as a per-token column (tokens.extra), the only way a pass sees the ids


def _beta_check(value: Any, values: Any) -> str | None:
    if value + values.get("ktae_alpha", 1.0) <= 0:
        return "`ktae_alpha` and `ktae_beta_ig` are both 0: ktae's weight divides by their sum"
    return None


KTAE_ALPHA = Param(
    "ktae_alpha", float, 1.0,
    "ktae: α, the weight of the Fisher-test term (ComputeKeyTokens' alpha; KTAE's trainer: 1).",
    PANEL, range=Range(0),
)  # fmt: skip
KTAE_BETA_IG = Param(
    "ktae_beta_ig", float, 1.0,
    "ktae: β, the weight of the information-gain term (ComputeKeyTokens' beta_ig; KTAE's "
    "trainer: 1, its run scripts' 2 never reach it).",
    PANEL, check=_beta_check, range=Range(0),
)  # fmt: skip
KTAE_TF = Param(
    "ktae_tf", bool, True,
    "ktae: add the BM25 term-frequency ratio to Cohen's h (ComputeKeyTokens' gamma_tf, a flag).",
    PANEL,
)  # fmt: skip
KTAE_TOP = Param(
    "ktae_top", float, 1.0,
    "ktae: the largest |weight| a token gets (ComputeKeyTokens' top; KTAE's trainer: 1).",
    PANEL, range=Range(0),
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class KeyTable:
    """The key weights of every (group, id) with one not 0, sorted by ``key``."""

    ids: np.ndarray  # int64: the distinct ids with a weight
    key: np.ndarray  # int64: group * len(ids) + the id's index in ids, sorted
    weight: np.ndarray  # float64 per key

    def lookup(self, groups: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """w per (group, id) pair: 0 for a pair without a weight (or group −1)."""
        out = np.zeros(len(ids))
        if not len(self.key) or not len(ids):
            return out
        at = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
        key = groups * len(self.ids) + at
        pos = np.minimum(np.searchsorted(self.key, key), len(self.key) - 1)
        hit = (self.ids[at] == ids) & (groups >= 0) & (self.key[pos] == key)
        out[hit] = self.weight[pos[hit]]
        return out


@dataclass(frozen=True, kw_only=True)
class KtaePlan(OutcomePlan):
    group: np.ndarray  # int64 per row: its group, −1 where it gets no key weight
    side: np.ndarray  # int8 per row: 0 correct, 1 wrong, −1 not counted
    n_correct: np.ndarray  # int64 per group: correct rollouts (scored)
    n_wrong: np.ndarray
    table: KeyTable | None = None  # after the pass


def token_ids(tokens: Tokens) -> np.ndarray:
    """The batch's token ids, int64 (read as floats: exact below 2**53)."""
    return tokens.extra[IDS].astype(np.int64)


class Counts:
    """Sparse counts per (group·2 + side, id): occurrences and rollouts containing the id,
    merged as batches come (pending chunks are merged once they outgrow the merged part, so
    memory stays near the distinct pairs)."""

    def __init__(self) -> None:
        self.hi = np.zeros(0, dtype=np.int64)
        self.lo = np.zeros(0, dtype=np.int64)
        self.values = np.zeros((0, 2), dtype=np.int64)
        self.pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.n_pending = 0

    def add(self, hi: np.ndarray, lo: np.ndarray, values: np.ndarray) -> None:
        self.pending.append((hi, lo, values))
        self.n_pending += len(hi)
        if self.n_pending > max(len(self.hi), 1 << 16):
            self.merge()

    def merge(self) -> None:
        if not self.pending:
            return
        parts = [(self.hi, self.lo, self.values), *self.pending]
        self.hi, self.lo, self.values = K.reduce_pairs(
            np.concatenate([p[0] for p in parts]),
            np.concatenate([p[1] for p in parts]),
            np.concatenate([p[2] for p in parts]),
        )
        self.pending, self.n_pending = [], 0


class KeyTokenPass(TokenPass[KtaePlan]):
    """Per group: each id's occurrences and rollouts on either side, and each side's action
    tokens; then the groups' weight tables (:func:`advcli.core.ktae.key_weights`)."""

    title = "counting key tokens"

    def __init__(self, rows: Rows, p: Params):
        self.p = p
        codes = rows.rollout_codes
        self.rollout = codes
        first = np.full(rows.n_rollouts, rows.n_rows, dtype=np.int64)
        last = np.full(rows.n_rollouts, -1, dtype=np.int64)
        np.minimum.at(first, codes, np.arange(rows.n_rows))
        np.maximum.at(last, codes, np.arange(rows.n_rows))
        self.first_row, self.last_row = first, last
        self.counts = Counts()
        self.split: list[tuple[np.ndarray, ...]] = []  # (rollout, id, group·2 + side) of the
        # rollouts whose rows span batches: their ids are deduplicated at the end

    def measure(self, plan: KtaePlan, row0: int, tokens: Tokens) -> tuple[np.ndarray, ...]:
        n = len(tokens.offsets) - 1
        here = slice(row0, row0 + n)
        gs_row = np.where(plan.side[here] >= 0, plan.group[here] * 2 + plan.side[here], -1)
        token_row = row_of(tokens.offsets)
        on = tokens.mask & (gs_row[token_row] >= 0)
        ids = token_ids(tokens)[on]
        gs = gs_row[token_row[on]]
        rollout = self.rollout[row0 + token_row[on]]
        occ_hi, occ_lo, occ = K.reduce_pairs(gs, ids)  # occurrences
        r_hi, r_lo, _ = K.reduce_pairs(rollout, ids)  # each rollout's distinct ids
        rollouts, first = np.unique(rollout, return_index=True)
        r_gs = gs[first][np.searchsorted(rollouts, r_hi)]
        whole = (self.first_row[r_hi] >= row0) & (self.last_row[r_hi] < row0 + n)
        pres_hi, pres_lo, pres = K.reduce_pairs(r_gs[whole], r_lo[whole])  # rollouts with it
        values = np.zeros((len(occ) + len(pres), 2), dtype=np.int64)  # occurrences, rollouts
        values[: len(occ), 0] = occ[:, 0]
        values[len(occ) :, 1] = pres[:, 0]
        hi, lo = np.r_[occ_hi, pres_hi], np.r_[occ_lo, pres_lo]
        return hi, lo, values, r_hi[~whole], r_lo[~whole], r_gs[~whole]

    def add(self, plan: KtaePlan, row0: int, measured: tuple[np.ndarray, ...]) -> None:
        hi, lo, values, *split = measured
        self.counts.add(hi, lo, values)
        if len(split[0]):
            self.split.append(tuple(split))

    def finish(self, plan: KtaePlan) -> KtaePlan:
        counts = self.counts
        if self.split:
            rollout, ids, gs = (np.concatenate(part) for part in zip(*self.split, strict=True))
            r, v, _ = K.reduce_pairs(rollout, ids)
            rollouts, first = np.unique(rollout, return_index=True)
            r_gs = gs[first][np.searchsorted(rollouts, r)]
            ones = np.ones(len(r), dtype=np.int64)
            counts.add(r_gs, v, np.c_[np.zeros(len(r), dtype=np.int64), ones])
            self.split = []
        counts.merge()
        group, side = counts.hi // 2, counts.hi % 2
        f, present = counts.values[:, 0], counts.values[:, 1]
        correct = side == 0
        per_side = np.c_[present * correct, present * ~correct, f * correct, f * ~correct]
        g, ids, v = K.reduce_pairs(group, counts.lo, per_side)
        a, b, f_c, f_w = v.T
        n_groups = len(plan.n_correct)
        totals = np.bincount(counts.hi, weights=f, minlength=2 * n_groups).astype(np.int64)
        t_c, t_w = totals[0::2], totals[1::2]
        n_c, n_w = plan.n_correct, plan.n_wrong
        width = np.zeros(n_groups, dtype=np.int64)
        np.maximum.at(width, g, np.minimum(a + b, n_c[g]))
        p = self.p
        w = K.key_weights(a, b, n_correct=n_c[g], n_wrong=n_w[g], f_correct=f_c, f_wrong=f_w,
                          t_correct=t_c[g], t_wrong=t_w[g], width=width[g] + 1,
                          alpha=p.ktae_alpha, beta_ig=p.ktae_beta_ig, tf=p.ktae_tf,
                          top=p.ktae_top)  # fmt: skip
        keep = (w != 0.0) & (ids != K.QWEN_EOT)
        g, ids, w = g[keep], ids[keep], w[keep]
        distinct = np.unique(ids)
        key = g * len(distinct) + np.searchsorted(distinct, ids)
        order = np.argsort(key, kind="stable")
        table = KeyTable(ids=distinct, key=key[order], weight=w[order])
        stats = {**plan.stats, "key_weights": int(len(w)),
                 "key_weight_max_abs": float(np.abs(w).max()) if len(w) else 0.0}  # fmt: skip
        return replace(plan, table=table, stats=stats)


class SequencePart(OutcomeMethod):
    """KTAE's GRPO part, (R − mean_g)/(std_g + eps) per rollout (its rewards, less the KL of
    ``--kl-coef``, and its rollouts without a reward, as every outcome method's); only its
    :meth:`rollout_advantages` are used, :class:`Ktae` adds the key weights."""

    def advantages(self, rows: Rows, rewards: np.ndarray, p: Params) -> RolloutAdvantages:
        assert rows.group_keys is not None
        codes = rows.rollout_groups()
        stats = G.group_stats(rewards, codes, len(rows.group_keys), ddof=1, tol=0.0)
        mean = np.where(stats.singleton, 0.0, stats.mean)  # KTAE's singleton: mean 0, std 1
        std = np.where(stats.singleton, 1.0, stats.std)
        zero_var = stats.zero_variance[codes]
        with np.errstate(invalid="ignore", divide="ignore"):
            adv = np.where(zero_var, 0.0, (rewards - mean[codes]) / (std[codes] + p.eps))
        return RolloutAdvantages(
            advantage=adv,
            columns={
                "group_size": stats.size[codes],
                "group_mean": mean[codes],
                "group_std": std[codes],
                "zero_variance": zero_var,
                "singleton": stats.singleton[codes],
                "correct": rewards > 0.0,
            },
            zero_variance=zero_var,
            drop={},
            stats={
                "zero_variance_groups": int(stats.zero_variance.sum()),
                "singleton_groups": int(stats.singleton.sum()),
            },
        )


class Ktae(Method[KtaePlan]):
    """A_t = (R − mean_g)/(std_g + eps) + w_g(token_t) (KTAE)."""

    name = "ktae"
    summary = (
        "(R − mean_g)/(std_g + eps) + w_g(token), w from the 2×2 table of the group's correct "
        "(R > 0) and wrong rollouts containing the token id: Fisher test, information gain, "
        "Cohen's h, BM25 tf (KTAE `compute_ktae_outcome_advantage_and_keytokens`)"
    )
    roles = ("input_ids", "prompt_id", "reward")
    parameters: ClassVar[tuple[Param, ...]] = (EPS, KTAE_ALPHA, KTAE_BETA_IG, KTAE_TF, KTAE_TOP)
    outputs = (
        "advantages",
        "advantage",
        "group_size",
        "group_mean",
        "group_std",
        "zero_variance",
        "singleton",
        "correct",
    )

    def defaults(self, convention: Convention) -> dict[str, Any]:
        return {"eps": 1e-6}  # KTAE's function's default (its trainer passes none)

    def token_roles(self, p: Params) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*super().token_roles(p), IDS)))

    def plan(self, rows: Rows, p: Params) -> KtaePlan:
        assert rows.group_keys is not None
        r = SEQUENCE.rollout_advantages(rows, p)
        codes = rows.rollout_codes
        unscored = rows.unscored_rollouts()
        scored = np.ones(rows.n_rollouts, dtype=bool) if unscored is None else ~unscored
        correct = r.columns["correct"].astype(bool)
        groups = rows.rollout_groups()
        n_groups = len(rows.group_keys)
        n_correct = np.bincount(groups[scored & correct], minlength=n_groups)
        n_wrong = np.bincount(groups[scored & ~correct], minlength=n_groups)
        mixed = (n_correct > 0) & (n_wrong > 0)
        side = np.where(scored & mixed[groups], np.where(correct, 0, 1), -1).astype(np.int8)
        columns = {"advantage": r.advantage[codes].astype(np.float32)}
        columns.update({name: values[codes] for name, values in r.columns.items()})
        stats = {**r.stats, "mixed_groups": int(mixed.sum())}
        return KtaePlan(
            columns=columns,
            stats={**stats, **signals.kl_stats(rows, p)},
            advantage=r.advantage[codes],
            group=np.where(side[codes] >= 0, groups[codes], -1).astype(np.int64),
            side=side[codes],
            n_correct=n_correct.astype(np.int64),
            n_wrong=n_wrong.astype(np.int64),
        )

    def passes(self, rows: Rows, p: Params) -> list[TokenPass[KtaePlan]]:
        return [KeyTokenPass(rows, p)]

    def apply(self, plan: KtaePlan, tokens: Tokens, row0: int, p: Params) -> dict[str, np.ndarray]:
        """Each row's sequence advantage plus its group's weight of each action token's id,
        exactly 0 off the action tokens."""
        n = len(tokens.offsets) - 1
        per_token = np.repeat(plan.advantage[row0 : row0 + n], lengths(tokens.offsets))
        m = tokens.mask
        if plan.table is not None and m.any():
            groups = np.repeat(plan.group[row0 : row0 + n], lengths(tokens.offsets))[m]
            per_token[m] += plan.table.lookup(groups, token_ids(tokens)[m])
        adv = per_token.astype(np.float32)
        adv[~m] = 0.0
        return {"advantages": adv}


SEQUENCE = SequencePart()
METHODS = (Ktae(),)
