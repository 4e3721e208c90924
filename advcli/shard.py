"""``advcli shard`` and ``advcli verify``: annotated logs as training-ready Parquet shards.

The work is split into pure steps on flat arrays plus offsets (no Python loop per token):

1. :func:`prepare` reads the inputs (annotating raw logs first) into :class:`Samples`;
2. :func:`plan` drops rows without signal, splits by prompt hash, orders (shuffle, groups),
   packs first-fit-decreasing and cuts shards;
3. :func:`write_shards` writes every shard into a temporary folder beside ``DIR``, then the
   manifest, then renames the folder into place;
4. :func:`verify` re-reads a shard folder against its manifest.

A sample is one row of the annotated table: a rollout, or a segment of one when the log is
segmented (each segment is its own training sample, as in ``--segments compaction``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from advcli import __version__
from advcli.core.ragged import lengths, offsets_from_lengths, ranges
from advcli.errors import DataError, OutputError, UsageError
from advcli.io.readers import STDIN, expand_inputs, is_jsonl
from advcli.io.rollouts import Rollouts, extract, flat_list
from advcli.io.writers import METADATA_KEY, ROW_GROUP_ROWS, parquet_options, read_metadata
from advcli.params import Params, resolve
from advcli.pipeline import Log, Stage, _no_stage, annotate_log, load

FORMAT = "advcli-shards/1"
MANIFEST = "manifest.json"
DEFAULT_TOKENS_PER_SHARD = 1 << 24  # 16 Mi tokens: ~64 MiB of int32 ids before compression
ROW_GROUP_TOKENS = 1 << 20  # a streaming reader decodes at most ~1 Mi tokens at a time
LOSS_WEIGHTS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
SOURCE_ROW = "__advcli_source_row__"
# Columns advcli writes; a --keep column may not take one of these names.
OWN_COLUMNS = (
    "prompt_id",
    "rollout_id",
    "segment_index",
    "input_ids",
    "position_ids",
    "seq_lens",
    "loss_mask",
    "advantages",
    "returns",
    "loss_weight",
)


# --------------------------------------------------------------------------- options


@dataclass
class ShardOptions:
    """Everything ``advcli shard`` does besides the method (recorded in the manifest)."""

    rows_per_shard: int | None = None
    tokens_per_shard: int | None = None
    keep: list[str] = field(default_factory=list)
    drop_zero_variance: bool = False
    drop_singletons: bool = False
    shuffle: bool = False
    seed: int = 0
    keep_groups: bool = False
    pack: int | None = None
    truncate: bool = False
    loss_weights: str | None = None
    split: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def parse_split(spec: str | None) -> list[tuple[str, float]]:
    """``"val=0.02,test=0.01"`` as ``[("val", 0.02), ("test", 0.01)]``; train takes the rest."""
    if spec is None:
        return []
    out: list[tuple[str, float]] = []
    for item in spec.split(","):
        name, sep, frac = item.strip().partition("=")
        try:
            value = float(frac)
        except ValueError:
            value = float("nan")
        ok = sep and re.fullmatch(r"[A-Za-z0-9_-]+", name) and 0.0 < value < 1.0
        if not ok or name == "train" or name in dict(out):
            msg = (
                f"--split {spec!r}: expected NAME=FRACTION[,NAME=FRACTION...] with fractions "
                "in (0, 1) and names other than 'train' (train takes the rest). "
                "Hint: --split val=0.02"
            )
            raise UsageError(msg)
        out.append((name, value))
    if sum(v for _, v in out) >= 1.0:
        msg = f"--split {spec!r}: the fractions add up to 1 or more, leaving nothing to train"
        raise UsageError(msg + ". Hint: --split val=0.02")
    return out


def check_options(opts: ShardOptions) -> list[tuple[str, float]]:
    """Check ``opts`` before reading anything; return the parsed split."""

    def positive(flag: str, value: int | None) -> None:
        if value is not None and value < 1:
            msg = f"{flag} {value}: expected a positive integer. Hint: for example {flag} 4096"
            raise UsageError(msg)

    positive("--rows-per-shard", opts.rows_per_shard)
    positive("--tokens-per-shard", opts.tokens_per_shard)
    positive("--pack", opts.pack)
    if opts.rows_per_shard is not None and opts.tokens_per_shard is not None:
        msg = "--rows-per-shard and --tokens-per-shard: give one. Hint: drop one of them"
        raise UsageError(msg)
    if opts.truncate and opts.pack is None:
        msg = "--truncate cuts rollouts longer than --pack N; without --pack it does nothing"
        raise UsageError(msg + ". Hint: add --pack N, or drop --truncate")
    if opts.loss_weights is not None and opts.loss_weights not in LOSS_WEIGHTS:
        msg = (
            f"--loss-weights {opts.loss_weights!r}: expected one of {', '.join(LOSS_WEIGHTS)}. "
            "Hint: --loss-weights token-mean"
        )
        raise UsageError(msg)
    clash = sorted(set(opts.keep) & set(OWN_COLUMNS))
    if clash:
        msg = (
            f"--keep {clash[0]}: advcli writes a column of that name itself. "
            "Hint: it is already in the shards; drop this --keep"
        )
        raise UsageError(msg)
    return parse_split(opts.split)


_INT_PARAMS = ("std_ddof", "batch_size", "whiten_ddof")
_FLOAT_PARAMS = ("eps", "zero_variance_tol", "gamma", "alpha", "lam_critic")


def make_params(method: str, convention: str | None, items: list[str] | None) -> Params:
    """Params from ``--method``, ``--convention`` and ``--param KEY=VALUE`` (annotate's options)."""
    p = Params(method=method, convention=convention or "seed")
    names = [f.name for f in fields(Params) if f.name not in ("method", "convention")]
    for item in items or []:
        key, sep, raw = item.partition("=")
        name = key.strip().lstrip("-").replace("-", "_")
        if not sep or name not in names:
            msg = (
                f"--param {item!r}: expected KEY=VALUE with KEY one of "
                f"{', '.join(n.replace('_', '-') for n in names)}. Hint: --param gamma=0.99"
            )
            raise UsageError(msg)
        try:
            if name in _INT_PARAMS:
                value: object = int(raw)
            elif name in _FLOAT_PARAMS:
                value = float(raw)
            elif name == "strict":
                if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(raw)
                value = raw.lower() in ("true", "1", "yes")
            else:
                value = raw
        except ValueError:
            kind = "an integer" if name in _INT_PARAMS else "a number"
            kind = "true or false" if name == "strict" else kind
            msg = f"--param {item!r}: expected {kind}. Hint: --param {key}=VALUE"
            raise UsageError(msg) from None
        setattr(p, name, value)
    return resolve(p)


# --------------------------------------------------------------------------- inputs


@dataclass
class Samples:
    """The annotated log as flat arrays: one sample per table row, tokens in ``offsets``."""

    offsets: np.ndarray  # int64 per row
    mask: np.ndarray  # bool per token
    token_cols: dict[str, pa.Array]  # input_ids, advantages, returns, per-token --keep: flat
    row_cols: dict[str, pa.Array]  # prompt_id, rollout_id, segment_index, per-row --keep
    group: np.ndarray | None  # int64 group code per row (prompt id), None without prompts
    group_keys: pa.Array | None  # the prompt id of each group code
    source_row: np.ndarray  # int64 per row: its row in the input log (for error messages)
    flags: dict[str, np.ndarray]  # zero_variance / singleton per row, where the table has them

    @property
    def n_rows(self) -> int:
        return len(self.offsets) - 1


@dataclass
class Prepared:
    samples: Samples
    log: Log
    metadata: dict  # method, params, roles (advcli metadata of the annotation)
    annotated_input: bool
    dropped_by_method: dict


def _file_metadata(path: str) -> dict | None:
    if path == STDIN:
        return None
    try:
        return read_metadata(path)
    except (OSError, ValueError, pa.ArrowException):
        return None  # not readable: load() reports it properly


def _same_run(a: dict, b: dict) -> bool:
    return (a.get("method"), a.get("params")) == (b.get("method"), b.get("params"))


def prepare(
    inputs: list[str],
    opts: ShardOptions,
    *,
    method: str | None = None,
    convention: str | None = None,
    param: list[str] | None = None,
    col: list[str] | None = None,
    stage: Stage = _no_stage,
) -> Prepared:
    """Read ``inputs``; annotate them with ``method`` unless advcli annotated them already."""
    files = expand_inputs(inputs)
    metas = [_file_metadata(f) for f in files]
    marked = [m for m in metas if m and m.get("method")]
    if marked and len(marked) != len(metas):
        raw = files[next(i for i, m in enumerate(metas) if not (m and m.get("method")))]
        msg = (
            f"{raw}: a raw log among logs annotated by advcli; shard them as one kind. "
            "Hint: annotate the raw log first, or shard the raw logs with --method"
        )
        raise UsageError(msg)
    if any(not _same_run(m, marked[0]) for m in marked):
        other = files[next(i for i, m in enumerate(metas) if not _same_run(m, marked[0]))]
        msg = (
            f"{other}: annotated with method {metas[files.index(other)].get('method')!r} or "
            f"parameters other than {files[0]}'s. Hint: shard logs of one annotation run"
        )
        raise UsageError(msg)
    user_cols = list(col or [])
    if marked:  # the roles the annotation used, unless --col says otherwise
        given = {c.partition("=")[0] for c in user_cols}
        roles = marked[0].get("roles") or {}
        user_cols += [f"{r}={c}" for r, c in sorted(roles.items()) if r not in given]
    with stage("reading"):
        log = load(inputs, user_cols)
    annotated_input = bool(marked) and "advantages" in log.table.column_names
    if annotated_input:
        meta = marked[0]
        if method is not None and method != meta["method"]:
            msg = (
                f"{files[0]}: already annotated with method {meta['method']!r}, not {method!r}. "
                "Hint: drop --method, or shard the raw log"
            )
            raise UsageError(msg)
        if convention is not None or param:
            msg = (
                f"{files[0]}: already annotated (method {meta['method']!r}); --convention and "
                "--param apply to raw logs. Hint: drop them, or shard the raw log"
            )
            raise UsageError(msg)
        table = log.table
        ro = extract(table, log.roles, log.sources, needs=set())
        source_row = np.arange(table.num_rows, dtype=np.int64)
        metadata = {k: meta.get(k) for k in ("method", "params")} | {
            "roles": {k: v for k, v in log.roles.columns.items() if v}
        }
        dropped: dict = {}
    else:
        if method is None:
            msg = (
                f"{', '.join(files)}: a raw log (no advcli annotation), so shard needs a method. "
                "Hint: pass --method grpo (or another method), or annotate the log first"
            )
            raise UsageError(msg)
        p = make_params(method, convention, param)
        row_numbers = pa.array(np.arange(log.table.num_rows, dtype=np.int64))
        tagged = Log(log.table.append_column(SOURCE_ROW, row_numbers), log.sources, log.roles)
        done = annotate_log(tagged, p, stage=stage)
        table = done.table
        source_row = table.column(SOURCE_ROW).to_numpy().astype(np.int64)
        table = table.drop_columns([SOURCE_ROW])
        ro = done.rollouts
        if table.num_rows != ro.n_rows:  # the method dropped rows: extract the kept ones
            ro = extract(table, log.roles, log.sources, needs=set())
        metadata = {k: done.metadata[k] for k in ("method", "params", "roles")}
        dropped = dict(done.summary.get("dropped") or {})
    samples = collect(table, ro, log, opts.keep, source_row)
    return Prepared(samples, log, metadata, annotated_input, dropped)


def collect(
    table: pa.Table, ro: Rollouts, log: Log, keep: list[str], source_row: np.ndarray
) -> Samples:
    """The columns a trainer needs, as flat arrays; checks ``--keep`` and the token lists."""
    roles = log.roles
    offsets = ro.offsets
    n_tok = lengths(offsets)
    for name in keep:
        if name not in table.column_names or name == SOURCE_ROW:
            shown = [c for c in table.column_names if c != SOURCE_ROW]
            msg = (
                f"--keep {name}: no such column. Columns: {', '.join(shown)}. "
                "Hint: --keep takes a column name of the log"
            )
            raise UsageError(msg)

    def tokens_of(name: str, *, check: bool) -> pa.Array | None:
        column = table.column(name)
        if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
            return None
        if column.null_count:
            return None
        values, offs = flat_list(column)
        bad = lengths(offs) != n_tok
        if bad.any():
            if check:
                row = int(np.flatnonzero(bad)[0])
                msg = (
                    f"{log.sources.at(int(source_row[row]), name)}: {lengths(offs)[row]} values "
                    f"but {n_tok[row]} tokens. Hint: an annotated log has one value per token"
                )
                raise DataError(msg)
            return None
        return values

    token_cols: dict[str, pa.Array] = {}
    ids, _ = flat_list(table.column(roles["input_ids"]))
    token_cols["input_ids"] = ids
    for name in ("advantages", "returns"):
        if name in table.column_names:
            values = tokens_of(name, check=True)
            if values is None:
                msg = (
                    f"{log.sources.at(0, name)}: expected a list of numbers without nulls, saw "
                    f"{table.schema.field(name).type}. Hint: annotate the raw log again"
                )
                raise DataError(msg)
            token_cols[name] = values.cast(pa.float32())
    row_cols: dict[str, pa.Array] = {}
    for role in ("prompt_id", "rollout_id", "segment_index"):
        if roles[role] is not None:
            row_cols[role] = table.column(roles[role]).combine_chunks()
    if "rollout_id" not in row_cols:
        row_cols["rollout_id"] = pa.array(source_row)
    for name in keep:
        values = tokens_of(name, check=False)
        if values is not None:
            token_cols[name] = values
        else:
            row_cols[name] = table.column(name).combine_chunks()
    flags = {}
    for name in ("zero_variance", "singleton"):
        if name in table.column_names:
            column = table.column(name).combine_chunks()
            flags[name] = column.fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
    return Samples(
        offsets=offsets,
        mask=ro.mask,
        token_cols=token_cols,
        row_cols=row_cols,
        group=ro.group_codes,
        group_keys=ro.group_keys,
        source_row=source_row,
        flags=flags,
    )


# --------------------------------------------------------------------------- planning


def split_of_prompt(keys: pa.Array, splits: list[tuple[str, float]]) -> np.ndarray:
    """Split index of each prompt id (0 = train, i = the i-th named split).

    u = first 8 bytes of blake2b(str(prompt id)) / 2**64, uniform in [0, 1); split i takes
    u in [c_{i-1}, c_i) for the cumulative fractions c, train the rest. The same prompt id is
    in the same split in every run and every log.
    """
    bounds = np.cumsum([f for _, f in splits])
    u = np.array(
        [
            int.from_bytes(hashlib.blake2b(str(k).encode(), digest_size=8).digest(), "big")
            for k in keys.to_pylist()
        ],
        dtype=np.float64,
    )
    u /= 2.0**64
    idx = np.searchsorted(bounds, u, side="right")  # number of bounds <= u
    return np.where(idx < len(splits), idx + 1, 0).astype(np.int64)


def first_fit_decreasing(
    sizes: np.ndarray, capacity: int, segments: np.ndarray | None = None
) -> np.ndarray:
    """Bin of each item: by decreasing size (ties by index), each into the first bin with room.

    With ``segments`` (an int per item) items only share bins with items of the same segment.
    Bins are numbered in order of opening. O(n log n): a max segment tree over the bins' free
    space finds the first bin with room.
    """
    n = len(sizes)
    if n and int(np.max(sizes)) > capacity:
        msg = f"an item of {int(np.max(sizes))} does not fit in bins of {capacity}"
        raise ValueError(msg)
    seg = np.zeros(n, dtype=np.int64) if segments is None else np.asarray(segments)
    order = np.lexsort((np.arange(n), -np.asarray(sizes, dtype=np.int64), seg))
    bins = np.empty(n, dtype=np.int64)
    sorted_seg = seg[order]
    starts = np.flatnonzero(np.r_[True, sorted_seg[1:] != sorted_seg[:-1]]) if n else []
    ends = np.r_[starts[1:], n] if n else []
    opened = 0
    for a, b in zip(starts, ends, strict=True):
        items = order[a:b].tolist()
        item_sizes = sizes[order[a:b]].tolist()
        leaves = 1
        while leaves < len(items):
            leaves *= 2
        tree = [capacity] * (2 * leaves)
        used = 0
        for item, size in zip(items, item_sizes, strict=True):
            i = 1
            while i < leaves:
                i = 2 * i if tree[2 * i] >= size else 2 * i + 1
            slot = i - leaves
            used = max(used, slot + 1)
            tree[i] -= size
            i //= 2
            while i:
                tree[i] = max(tree[2 * i], tree[2 * i + 1])
                i //= 2
            bins[item] = opened + slot
        opened += used
    return bins


def chunks(weights: np.ndarray, budget: int, starts_ok: np.ndarray | None = None) -> np.ndarray:
    """Boundaries of consecutive chunks: each holds as many whole items as fit in ``budget``.

    A chunk holds at least one item (an item over the budget is a chunk of its own). With
    ``starts_ok`` (bool per item) a chunk may start only where it is True (group boundaries).
    Returns item indices ``[0, b1, b2, ..., n]``. One loop step per chunk.
    """
    n = len(weights)
    if n == 0:
        return np.zeros(1, dtype=np.int64)
    block_start = np.flatnonzero(starts_ok) if starts_ok is not None else np.arange(n)
    if len(block_start) == 0 or block_start[0] != 0:
        block_start = np.r_[0, block_start]
    block_w = np.add.reduceat(np.asarray(weights, dtype=np.int64), block_start)
    cum = np.r_[0, np.cumsum(block_w)]
    cuts = [0]
    b = 0
    while b < len(block_w):
        e = int(np.searchsorted(cum, cum[b] + budget, side="right")) - 1
        e = max(e, b + 1)
        cuts.append(e)
        b = e
    return np.r_[block_start, n][cuts].astype(np.int64)


@dataclass
class SplitPlan:
    """One split's output: samples in order, grouped into output rows, cut into shards."""

    name: str
    order: np.ndarray  # sample (table row) of each position
    row_offsets: np.ndarray  # output row r holds order[row_offsets[r]:row_offsets[r + 1]]
    shard_bounds: np.ndarray  # output rows [shard_bounds[s], shard_bounds[s + 1]) per shard


@dataclass
class Plan:
    splits: list[SplitPlan]
    lens: np.ndarray  # tokens written per sample (after --truncate)
    weight: np.ndarray | None  # loss weight per sample (times its loss_mask)
    dropped: dict
    truncated: dict


def plan(samples: Samples, opts: ShardOptions, log: Log) -> Plan:
    """Drop, split, order, pack and cut: every decision, before any byte is written."""
    s = samples
    n = s.n_rows
    keep = np.ones(n, dtype=bool)
    dropped: dict[str, int] = {}
    for flag, wanted in (
        ("singleton", opts.drop_singletons),
        ("zero_variance", opts.drop_zero_variance),
    ):
        if not wanted:
            continue
        if flag not in s.flags:
            option = "--drop-singletons" if flag == "singleton" else "--drop-zero-variance"
            msg = (
                f"{option}: the annotated log has no '{flag}' column (only group methods, "
                "grpo, rloo and batch-mean, flag rows). Hint: drop the option"
            )
            raise UsageError(msg)
        hit = s.flags[flag] & keep
        dropped[flag] = int(hit.sum())
        keep &= ~hit
    needs_groups = [
        o for o, on in (("--keep-groups", opts.keep_groups), ("--split", opts.split)) if on
    ]
    if needs_groups and s.group is None:
        msg = (
            f"{needs_groups[0]} needs prompt ids, and the log has no 'prompt_id' column. "
            "Hint: name it with --col prompt_id=COLUMN"
        )
        raise UsageError(msg)

    tok = lengths(s.offsets)
    lens = tok.copy()
    truncated = {}
    if opts.pack is not None:
        over = keep & (tok > opts.pack)
        if over.any() and not opts.truncate:
            row = int(np.flatnonzero(over)[0])
            where = log.sources.at(int(s.source_row[row]), log.roles["input_ids"])
            msg = (
                f"{where}: a rollout of {tok[row]} tokens does not fit in --pack {opts.pack} "
                f"({int(over.sum())} rollouts are longer). Hint: raise --pack, or pass "
                "--truncate to cut them to --pack tokens (counted in the manifest)"
            )
            raise DataError(msg)
        lens = np.minimum(tok, opts.pack)
        cum_mask = np.r_[0, np.cumsum(s.mask, dtype=np.int64)]
        kept_act = cum_mask[s.offsets[:-1] + lens] - cum_mask[s.offsets[:-1]]
        all_act = cum_mask[s.offsets[1:]] - cum_mask[s.offsets[:-1]]
        truncated = {
            "rollouts": int(over.sum()),
            "tokens": int((tok - lens)[keep].sum()),
            "action_tokens": int((all_act - kept_act)[keep].sum()),
        }
    weight = None
    if opts.loss_weights is not None:
        weight = np.ones(n)
        if opts.loss_weights == "seq-mean-token-mean":
            cum_mask = np.r_[0, np.cumsum(s.mask, dtype=np.int64)]
            act = cum_mask[s.offsets[:-1] + lens] - cum_mask[s.offsets[:-1]]
            weight = np.divide(1.0, act, out=np.zeros(n), where=act > 0)

    splits = parse_split(opts.split)
    split_code = np.zeros(n, dtype=np.int64)
    if splits:
        split_code = split_of_prompt(s.group_keys, splits)[s.group]

    # Global order: input order, groups together, or a seeded permutation (of groups).
    rows = np.flatnonzero(keep)
    if opts.shuffle:
        rng = np.random.default_rng(opts.seed)
        if opts.keep_groups:
            rank = rng.permutation(len(s.group_keys))
            rows = rows[np.lexsort((rows, rank[s.group[rows]]))]
        else:
            rows = rng.permutation(rows)
    elif opts.keep_groups:
        rows = rows[np.lexsort((rows, s.group[rows]))]

    out = []
    for code, name in enumerate(["train", *(nm for nm, _ in splits)]):
        order = rows[split_code[rows] == code]
        if opts.pack is not None:
            segments = s.group[order] if opts.keep_groups else None
            bins = first_fit_decreasing(lens[order], opts.pack, segments)
            first = np.full(int(bins.max()) + 1 if len(bins) else 0, len(order), dtype=np.int64)
            np.minimum.at(first, bins, np.arange(len(order)))
            pos = np.lexsort((np.arange(len(order)), first[bins]))
            key = first[bins][pos]
            order = order[pos]
            row_offsets = np.r_[np.flatnonzero(np.r_[True, key[1:] != key[:-1]]), len(order)]
            if not len(order):
                row_offsets = np.zeros(1, dtype=np.int64)
        else:
            row_offsets = np.arange(len(order) + 1, dtype=np.int64)
        row_offsets = row_offsets.astype(np.int64)
        starts_ok = None
        if opts.keep_groups and len(order):
            g = s.group[order[row_offsets[:-1]]]
            starts_ok = np.r_[True, g[1:] != g[:-1]]
        if opts.rows_per_shard is not None:
            weights = np.ones(len(row_offsets) - 1, dtype=np.int64)
            budget = opts.rows_per_shard
        else:
            cum = np.r_[0, np.cumsum(lens[order])]
            weights = np.diff(cum[row_offsets])
            budget = opts.tokens_per_shard or DEFAULT_TOKENS_PER_SHARD
        bounds = chunks(weights, budget, starts_ok)
        out.append(SplitPlan(name, order, row_offsets, bounds))
    return Plan(out, lens, weight, dropped, truncated)


# --------------------------------------------------------------------------- writing


def _list(values: pa.Array, offsets: np.ndarray) -> pa.Array:
    if offsets[-1] < 2**31:
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values)
    return pa.LargeListArray.from_arrays(pa.array(offsets.astype(np.int64)), values)


def shard_table(samples: Samples, p: Plan, sp: SplitPlan, a: int, b: int, packed: bool) -> pa.Table:
    """Output rows ``[a, b)`` of split ``sp`` as a table."""
    s = samples
    lo, hi = sp.row_offsets[a], sp.row_offsets[b]
    rows = sp.order[lo:hi]
    row_offs = sp.row_offsets[a : b + 1] - lo  # samples per output row
    slens = p.lens[rows]
    sample_offs = offsets_from_lengths(slens)
    tok_offs = sample_offs[row_offs]  # tokens per output row
    take = pa.array(ranges(s.offsets[:-1][rows], slens))
    take_rows = pa.array(rows)
    mask = s.mask[take.to_numpy()]
    cols: dict[str, pa.Array] = {}
    for name in ("prompt_id", "rollout_id", "segment_index"):
        if name in s.row_cols:
            values = s.row_cols[name].take(take_rows)
            cols[name] = _list(values, row_offs) if packed else values
    cols["input_ids"] = _list(s.token_cols["input_ids"].take(take), tok_offs)
    if packed:
        pos = np.arange(len(mask), dtype=np.int64) - np.repeat(sample_offs[:-1], slens)
        cols["position_ids"] = _list(pa.array(pos.astype(np.int32)), tok_offs)
        cols["seq_lens"] = _list(pa.array(slens.astype(np.int32)), row_offs)
    cols["loss_mask"] = _list(pa.array(mask.astype(np.int8)), tok_offs)
    for name in ("advantages", "returns"):
        if name in s.token_cols:
            cols[name] = _list(s.token_cols[name].take(take), tok_offs)
    if p.weight is not None:
        w = np.repeat(p.weight[rows], slens) * mask
        cols["loss_weight"] = _list(pa.array(w.astype(np.float32)), tok_offs)
    for name in s.token_cols:
        if name not in cols:
            cols[name] = _list(s.token_cols[name].take(take), tok_offs)
    for name in s.row_cols:
        if name not in cols:
            values = s.row_cols[name].take(take_rows)
            cols[name] = _list(values, row_offs) if packed else values
    return pa.table(cols)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def schema_list(schema: pa.Schema) -> list[list[str]]:
    return [[f.name, str(f.type)] for f in schema]


def write_parquet(table: pa.Table, path: Path, metadata: dict) -> None:
    """Write with fixed row groups: at most ROW_GROUP_TOKENS tokens or ROW_GROUP_ROWS rows."""
    schema = table.schema.with_metadata({METADATA_KEY: json.dumps(metadata, sort_keys=True)})
    table = table.replace_schema_metadata(schema.metadata)
    tokens = lengths(table.column("input_ids").chunk(0).offsets.to_numpy().astype(np.int64))
    bounds = chunks(tokens, ROW_GROUP_TOKENS)
    with pq.ParquetWriter(path, schema, **parquet_options(schema)) as writer:
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            writer.write_table(table.slice(a, b - a), row_group_size=ROW_GROUP_ROWS)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_dir(target: Path, *, force: bool) -> Iterator[Path]:
    """Yield a temporary folder beside ``target``; rename it onto ``target`` on success.

    An interrupted run leaves only a hidden ``.NAME.*.tmp`` folder, never ``target``. With
    ``force`` an existing ``target`` is moved aside, replaced, then removed.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    os.chmod(tmp, 0o777 & ~_umask())
    try:
        yield tmp
        if target.exists() or target.is_symlink():
            if not force:
                msg = f"{target}: appeared while writing. Hint: pass --force to replace it"
                raise OutputError(msg)
            old = Path(
                tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent)
            )
            os.rename(target, old / "previous")
            os.rename(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def check_out_dir(out: str, files: list[str], *, force: bool) -> Path:
    target = Path(out)
    for f in files:
        if f == STDIN:
            continue
        path = Path(f).resolve()
        if path == target.resolve() or target.resolve() in path.parents:
            msg = (
                f"{out}: holds the input {f}; advcli never overwrites its input. "
                "Hint: choose another --out"
            )
            raise OutputError(msg)
    here = Path.cwd().resolve()
    if target.resolve() == here or target.resolve() in here.parents:
        msg = f"{out}: the current folder or one above it. Hint: choose a new folder for --out"
        raise OutputError(msg)
    if (target.exists() or target.is_symlink()) and not force:
        msg = f"{out}: already exists. Hint: pass --force to replace it"
        raise OutputError(msg)
    return target


def input_record(path: str, log: Log) -> dict:
    if path == STDIN:
        data = log.sources._stdin_bytes or b""
        return {"path": path, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    record = {"path": path, "bytes": os.path.getsize(path), "sha256": _sha256(Path(path))}
    meta = Path(f"{path}.meta.json")
    if is_jsonl(path) and meta.exists():
        record["meta"] = {"path": str(meta), "sha256": _sha256(meta)}
    return record


def write_shards(
    target: Path, prepared: Prepared, p: Plan, opts: ShardOptions, *, force: bool
) -> dict:
    """Write every shard and the manifest (last) into a temporary folder, then rename it."""
    packed = opts.pack is not None
    shard_meta = {
        "format": FORMAT,
        "advcli_version": __version__,
        "method": prepared.metadata.get("method"),
        "params": prepared.metadata.get("params"),
        "pack": opts.pack,
        "loss_weights": opts.loss_weights,
    }
    records = []
    named = len(p.splits) > 1
    with atomic_dir(target, force=force) as tmp:
        for sp in p.splits:
            folder = tmp / sp.name if named else tmp
            folder.mkdir(exist_ok=True)
            n_shards = len(sp.shard_bounds) - 1
            width = max(5, len(str(n_shards - 1)))
            for i in range(n_shards):
                a, b = int(sp.shard_bounds[i]), int(sp.shard_bounds[i + 1])
                table = shard_table(prepared.samples, p, sp, a, b, packed)
                name = f"part-{i:0{width}d}.parquet"
                path = folder / name
                write_parquet(table, path, shard_meta)
                mask = table.column("loss_mask").chunk(0).values
                records.append(
                    {
                        "path": f"{sp.name}/{name}" if named else name,
                        "split": sp.name,
                        "rows": table.num_rows,
                        "samples": int(sp.row_offsets[b] - sp.row_offsets[a]),
                        "tokens": len(mask),
                        "action_tokens": int(np.asarray(mask).astype(np.int64).sum()),
                        "bytes": path.stat().st_size,
                        "sha256": _sha256(path),
                        "schema": schema_list(pq.read_schema(path)),  # as readers see it
                    }
                )
        manifest = build_manifest(prepared, p, opts, records)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def _totals(records: list[dict]) -> dict:
    keys = ("rows", "samples", "tokens", "action_tokens")
    out = {k: sum(r[k] for r in records) for k in keys}
    out["shards"] = len(records)
    return out


def build_manifest(prepared: Prepared, p: Plan, opts: ShardOptions, records: list[dict]) -> dict:
    dropped = dict(p.dropped)
    if prepared.dropped_by_method:
        dropped["by_method"] = prepared.dropped_by_method
    return {
        "format": FORMAT,
        "advcli_version": __version__,
        "method": prepared.metadata.get("method"),
        "params": prepared.metadata.get("params"),
        "roles": prepared.metadata.get("roles"),
        "annotated_input": prepared.annotated_input,
        "inputs": [input_record(f, prepared.log) for f in prepared.log.sources.files],
        "options": opts.as_dict(),
        "layout": "packed" if opts.pack is not None else "rows",
        "splits": {
            sp.name: _totals([r for r in records if r["split"] == sp.name]) for sp in p.splits
        },
        "shards": records,
        "totals": _totals(records),
        "dropped": dropped,
        "truncated": p.truncated,
    }


def shard(
    inputs: list[str],
    out: str,
    opts: ShardOptions,
    *,
    method: str | None = None,
    convention: str | None = None,
    param: list[str] | None = None,
    col: list[str] | None = None,
    force: bool = False,
    stage: Stage = _no_stage,
) -> dict:
    """``advcli shard``: returns a summary; the folder ``out`` appears only when complete."""
    started = time.perf_counter()
    check_options(opts)
    if method is not None or convention is not None or param:
        make_params(method or "grpo", convention, param)  # bad options fail before reading
    target = check_out_dir(out, expand_inputs(inputs), force=force)
    prepared = prepare(
        inputs, opts, method=method, convention=convention, param=param, col=col, stage=stage
    )
    with stage("planning"):
        p = plan(prepared.samples, opts, prepared.log)
    if not any(len(sp.order) for sp in p.splits):
        msg = (
            f"{', '.join(prepared.log.sources.files)}: no rows left to write "
            f"(dropped: {p.dropped or prepared.dropped_by_method}). "
            "Hint: drop --drop-zero-variance / --drop-singletons"
        )
        raise DataError(msg)
    with stage("writing shards"):
        manifest = write_shards(target, prepared, p, opts, force=force)
    summary = {
        "output": out,
        "method": manifest["method"],
        "annotated_input": manifest["annotated_input"],
        "layout": manifest["layout"],
        **manifest["totals"],
        "splits": {k: v["samples"] for k, v in manifest["splits"].items()},
        "dropped": manifest["dropped"],
        "truncated": manifest["truncated"],
        "seconds": round(time.perf_counter() - started, 3),
    }
    return summary


# --------------------------------------------------------------------------- verify


def _fail(problem: str, hint: str) -> None:
    raise DataError(f"{problem}. Hint: {hint}")


def verify(folder: str) -> dict:
    """``advcli verify``: re-read every shard against the manifest; raise on the first problem."""
    root = Path(folder)
    if not root.is_dir():
        msg = f"{folder}: no such folder. Hint: give the --out folder of advcli shard"
        raise UsageError(msg)
    mpath = root / MANIFEST
    regen = "write the shards again with advcli shard --force"
    if not mpath.is_file():
        _fail(f"{mpath}: no manifest, so the folder is not a complete shard output", regen)
    try:
        manifest = json.loads(mpath.read_text())
        records = manifest["shards"]
        assert manifest.get("format") == FORMAT and isinstance(records, list)
    except (ValueError, KeyError, AssertionError, TypeError):
        _fail(f"{mpath}: not an advcli shard manifest ({FORMAT})", regen)
    listed = set()
    for rec in records:
        rel = str(rec.get("path", ""))
        path = root / rel
        if not rel or Path(rel).is_absolute() or ".." in Path(rel).parts:
            _fail(f"{mpath}: shard path {rel!r} is not inside the folder", regen)
        listed.add(Path(rel).as_posix())
        if not path.is_file():
            _fail(f"{path}: missing (the manifest lists it)", regen)
        size = path.stat().st_size
        if size != rec["bytes"]:
            _fail(f"{path}: {size} bytes, the manifest says {rec['bytes']} (truncated?)", regen)
        digest = _sha256(path)
        if digest != rec["sha256"]:
            _fail(
                f"{path}: sha256 {digest[:12]}…, the manifest says {rec['sha256'][:12]}… "
                "(the file was altered)",
                regen,
            )
        try:
            pf = pq.ParquetFile(path)
            schema = pf.schema_arrow
        except (OSError, pa.ArrowException) as exc:
            _fail(f"{path}: not a readable Parquet file ({exc})", regen)
        if schema_list(schema) != rec["schema"]:
            seen = ", ".join(f"{n}: {t}" for n, t in schema_list(schema))
            _fail(f"{path}: schema ({seen}) differs from the manifest's", regen)
        if pf.metadata.num_rows != rec["rows"]:
            _fail(f"{path}: {pf.metadata.num_rows} rows, the manifest says {rec['rows']}", regen)
        cols = pf.read(columns=["input_ids", "loss_mask"])
        tokens = sum(len(c.flatten()) for c in cols.column("input_ids").chunks)
        actions = sum(
            int(np.asarray(c.flatten()).astype(np.int64).sum())
            for c in cols.column("loss_mask").chunks
        )
        if tokens != rec["tokens"] or actions != rec["action_tokens"]:
            _fail(
                f"{path}: {tokens} tokens ({actions} action tokens), the manifest says "
                f"{rec['tokens']} ({rec['action_tokens']})",
                regen,
            )
    for path in sorted(root.rglob("*.parquet")):
        rel = path.relative_to(root).as_posix()
        if rel not in listed and not any(part.startswith(".") for part in Path(rel).parts):
            _fail(f"{path}: a shard the manifest does not list", "remove it, or " + regen)
    totals = _totals(records)
    if totals != manifest.get("totals"):
        _fail(f"{mpath}: the totals do not add up to the shards' counts", regen)
    return {"folder": folder, "ok": True, **totals}
