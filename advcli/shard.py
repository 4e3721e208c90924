"""``advcli shard`` and ``advcli verify``: annotated logs as training-ready Parquet shards.

Shard streams: memory is bounded by one bucket of rows (:data:`BUCKET_TOKENS`) plus a few
batches, not by the log. The work is split into pure steps on per-row arrays (no Python loop
per token) and three passes over the log:

1. :func:`open_input` opens the inputs (planning the method for a raw log); :func:`measure`
   reads the token columns batch by batch for every row's token and action counts
   (:class:`Samples`);
2. :func:`plan` drops rows without signal, splits by prompt hash, orders (shuffle, groups),
   packs first-fit-decreasing and cuts shards; :func:`layout` cuts the output into pieces
   (one ``write_table`` each) and buckets (runs of pieces small enough to hold in memory);
3. :func:`route` streams the annotated rows (running the method on a raw log) and appends
   each row to its bucket, a temporary Arrow file, with its position in the output;
4. :func:`write_pieces` reads one bucket at a time, puts its rows in order and writes its
   pieces into the shards; then the manifest, then the folder is renamed into place;
5. :func:`verify` re-reads a shard folder against its manifest.

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
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from advcli import __version__
from advcli.core.ragged import lengths, offsets_from_lengths, ranges
from advcli.errors import DataError, OutputError, UsageError
from advcli.io.arrow import flat_list
from advcli.io.checksum import file_sha256
from advcli.io.jsonl import STDIN, is_jsonl
from advcli.io.rollouts import (
    Rows,
    extract_rows,
    extract_tokens,
    require,
    row_columns,
    token_columns,
)
from advcli.io.schema import Roles
from advcli.io.sources import LogSource, Sources, expand_inputs, prefetch
from advcli.io.writers import METADATA_KEY, ROW_GROUP_ROWS, parquet_options, read_metadata
from advcli.params import Params, resolve
from advcli.pipeline import BATCH_ROWS, Engine, Stage, _no_stage, engine, metadata, open_log

FORMAT = "advcli-shards/1"
MANIFEST = "manifest.json"
DEFAULT_TOKENS_PER_SHARD = 1 << 24  # 16 Mi tokens: ~64 MiB of int32 ids before compression
ROW_GROUP_TOKENS = 1 << 20  # a streaming reader decodes at most ~1 Mi tokens at a time
BUCKET_TOKENS = 1 << 23  # rows held in memory at once while writing (plus one piece)
LOSS_WEIGHTS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
POSITION = "__advcli_position__"  # a bucket row's position in the output
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
class Input:
    """The log to shard: where it streams from, and how its annotated rows come about."""

    source: LogSource
    roles: Roles
    rows: Rows  # the per-row columns of every input row, validated
    run: Engine | None  # the method, planned (a raw log); None: the log is annotated already
    metadata: dict  # method, params, roles (advcli metadata of the annotation)
    dropped_by_method: dict

    @property
    def annotated_input(self) -> bool:
        return self.run is None

    @property
    def sources(self) -> Sources:
        return self.source.sources

    @property
    def added(self) -> dict[str, np.ndarray]:
        """The per-row columns the method adds (or replaces) in the annotated log."""
        return self.run.plan.columns if self.run is not None else {}

    def columns(self) -> list[str]:
        """The columns of the annotated log that ``--keep`` may name."""
        return list(dict.fromkeys([*self.source.schema.names, *self.added]))

    def kept_rows(self) -> np.ndarray:
        """The input row of every sample (the method may drop rows)."""
        keep = self.run.plan.keep if self.run is not None else None
        if keep is None:
            return np.arange(self.rows.n_rows, dtype=np.int64)
        return np.flatnonzero(keep)


def _file_metadata(path: str) -> dict | None:
    if path == STDIN:
        return None
    try:
        return read_metadata(path)
    except (OSError, ValueError, pa.ArrowException):
        return None  # not readable: open_log() reports it properly


def _same_run(a: dict, b: dict) -> bool:
    return (a.get("method"), a.get("params")) == (b.get("method"), b.get("params"))


def open_input(
    inputs: list[str],
    *,
    method: str | None = None,
    convention: str | None = None,
    param: list[str] | None = None,
    col: list[str] | None = None,
    stage: Stage = _no_stage,
    batch_rows: int = BATCH_ROWS,
) -> Input:
    """Open ``inputs``; plan ``method`` on them unless advcli annotated them already."""
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
        source, roles = open_log(inputs, user_cols)
    if marked and "advantages" in source.schema.names:
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
        require(roles, source.schema.names, source.sources, set())
        with stage("reading per-row columns"):
            rows = extract_rows(source.columns(row_columns(roles)), roles, source.sources)
        info = {k: meta.get(k) for k in ("method", "params")}
        info["roles"] = {k: v for k, v in roles.columns.items() if v}
        return Input(source, roles, rows, None, info, {})
    if method is None:
        msg = (
            f"{', '.join(files)}: a raw log (no advcli annotation), so shard needs a method. "
            "Hint: pass --method grpo (or another method), or annotate the log first"
        )
        raise UsageError(msg)
    p = make_params(method, convention, param)
    run = engine(source, roles, p, stage=stage, batch_rows=batch_rows)
    info = {k: metadata(run)[k] for k in ("method", "params", "roles")}
    return Input(source, roles, run.rows, run, info, dict(run.plan.dropped))


def check_keep(inp: Input, keep: list[str]) -> list[str]:
    """``--keep`` names, each once; every one a column of the annotated log."""
    columns = inp.columns()
    for name in keep:
        if name not in columns:
            msg = (
                f"--keep {name}: no such column. Columns: {', '.join(columns)}. "
                "Hint: --keep takes a column name of the log"
            )
            raise UsageError(msg)
    return list(dict.fromkeys(keep))


@dataclass
class Samples:
    """What the plan needs of every sample (a row of the annotated log), as per-row arrays."""

    tokens: np.ndarray  # int64 tokens
    actions: np.ndarray  # int64 action tokens
    kept_actions: np.ndarray  # action tokens among the first --pack tokens (all without --pack)
    group: np.ndarray | None  # group code (prompt id), in order of first appearance
    group_keys: pa.Array | None  # the prompt id of each group code
    source_row: np.ndarray  # int64: the sample's row in the input log
    flags: dict[str, np.ndarray]  # zero_variance / singleton, where the annotated log has them

    @property
    def n_rows(self) -> int:
        return len(self.tokens)


def first_appearance(codes: np.ndarray, keys: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """Dense codes numbered in order of first appearance, and the key of each."""
    uniq, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    by_first = np.argsort(first)
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[by_first] = np.arange(len(uniq))
    return rank[inverse.reshape(-1)], keys.take(pa.array(uniq[by_first]))


def measure(inp: Input, pack: int | None, batch_rows: int = BATCH_ROWS) -> Samples:
    """Pass 1: every row's token and action counts (token columns, batch by batch)."""
    source, roles, n = inp.source, inp.roles, inp.rows.n_rows
    tokens, actions, kept_actions = (np.zeros(n, dtype=np.int64) for _ in range(3))
    names = token_columns(roles, values=False)
    for row0, table in prefetch(source.batches(names, batch_rows)):
        tok = extract_tokens(table, roles, source.sources, row0, values=False)
        starts, ends = tok.offsets[:-1], tok.offsets[1:]
        cut = ends if pack is None else np.minimum(ends, starts + pack)
        before = offsets_from_lengths(tok.mask)  # action tokens before each token
        at = slice(row0, row0 + len(starts))
        tokens[at] = ends - starts
        actions[at] = before[ends] - before[starts]
        kept_actions[at] = before[cut] - before[starts]
    rows = inp.kept_rows()
    group = keys = None
    if inp.rows.group_codes is not None:
        group, keys = first_appearance(inp.rows.group_codes[rows], inp.rows.group_keys)
    flags = {}
    for name in ("zero_variance", "singleton"):
        if name in inp.added:
            flags[name] = np.asarray(inp.added[name]).astype(bool)[rows]
        elif name in source.schema.names:
            column = source.columns([name]).column(0).combine_chunks().fill_null(False)
            flags[name] = column.to_numpy(zero_copy_only=False).astype(bool)[rows]
    return Samples(tokens[rows], actions[rows], kept_actions[rows], group, keys, rows, flags)


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


def plan(samples: Samples, opts: ShardOptions, locate: Callable[[int], str]) -> Plan:
    """Drop, split, order, pack and cut: every decision, before any byte is written.

    ``locate`` names an input row in an error (file, row, column).
    """
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

    tok = s.tokens
    lens = tok.copy()
    truncated = {}
    if opts.pack is not None:
        over = keep & (tok > opts.pack)
        if over.any() and not opts.truncate:
            row = int(np.flatnonzero(over)[0])
            msg = (
                f"{locate(int(s.source_row[row]))}: a rollout of {tok[row]} tokens does not fit "
                f"in --pack {opts.pack} ({int(over.sum())} rollouts are longer). Hint: raise "
                "--pack, or pass --truncate to cut them to --pack tokens (counted in the manifest)"
            )
            raise DataError(msg)
        lens = np.minimum(tok, opts.pack)
        truncated = {
            "rollouts": int(over.sum()),
            "tokens": int((tok - lens)[keep].sum()),
            "action_tokens": int((s.actions - s.kept_actions)[keep].sum()),
        }
    weight = None
    if opts.loss_weights is not None:
        weight = np.ones(n)
        if opts.loss_weights == "seq-mean-token-mean":
            act = s.kept_actions  # after --truncate
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


# --------------------------------------------------------------------------- layout


@dataclass
class Layout:
    """Where every sample goes, and the runs of output written and held in memory at once.

    Positions number the samples of all splits in output order. A *piece* is a run of output
    rows of one shard written by one ``write_table`` (the row groups of a shard are cut by
    tokens: at most ROW_GROUP_TOKENS, then at most ROW_GROUP_ROWS rows). A *bucket* is a run
    of pieces of at most ``bucket_tokens`` tokens (or one piece): pass 2 gathers its rows into
    one temporary file, pass 3 holds one bucket in memory at a time.
    """

    order: np.ndarray  # the sample at each position
    position: np.ndarray  # per sample: its position, -1 when dropped
    piece_split: np.ndarray  # per piece: its split, shard and output rows [row0, row1)
    piece_shard: np.ndarray
    piece_row0: np.ndarray
    piece_row1: np.ndarray
    piece_positions: np.ndarray  # piece i holds positions [piece_positions[i], ...[i + 1])
    bucket_pieces: np.ndarray  # bucket j holds pieces [bucket_pieces[j], bucket_pieces[j + 1])

    @property
    def bucket_positions(self) -> np.ndarray:
        return self.piece_positions[self.bucket_pieces]


def layout(p: Plan, bucket_tokens: int = BUCKET_TOKENS) -> Layout:
    """Cut every shard into pieces (its row groups) and the run of pieces into buckets."""
    cols: list[list[int]] = [[], [], [], [], [], []]  # split, shard, row0, row1, start, tokens
    base = 0  # positions before the split
    for k, sp in enumerate(p.splits):
        cum = offsets_from_lengths(p.lens[sp.order])[sp.row_offsets]  # tokens before a row
        row_tokens = np.diff(cum)
        for s in range(len(sp.shard_bounds) - 1):
            a, b = int(sp.shard_bounds[s]), int(sp.shard_bounds[s + 1])
            cuts = a + chunks(row_tokens[a:b], ROW_GROUP_TOKENS)
            r0, r1 = cuts[:-1], cuts[1:]
            values = (k, s, r0, r1, base + sp.row_offsets[r0], cum[r1] - cum[r0])
            for col, v in zip(cols, values, strict=True):
                col.extend(np.broadcast_to(v, len(r0)).tolist())
        base += len(sp.order)
    split, shard, row0, row1, start, tokens = (np.array(c, dtype=np.int64) for c in cols)
    order = np.concatenate([sp.order for sp in p.splits])
    position = np.full(len(p.lens), -1, dtype=np.int64)
    position[order] = np.arange(len(order))
    return Layout(
        order=order,
        position=position,
        piece_split=split,
        piece_shard=shard,
        piece_row0=row0,
        piece_row1=row1,
        piece_positions=np.r_[start, len(order)].astype(np.int64),
        bucket_pieces=chunks(tokens, bucket_tokens),
    )


# --------------------------------------------------------------------------- pass 2: routing


def _list(values: pa.Array, offsets: np.ndarray, large: bool | None = None) -> pa.Array:
    """A list array; a large list where the offsets (of the whole shard: ``large``) need it."""
    if not (offsets[-1] >= 2**31 if large is None else large):
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values)
    return pa.LargeListArray.from_arrays(pa.array(offsets.astype(np.int64)), values)


def per_token(column: pa.ChunkedArray, n_tokens: np.ndarray) -> pa.Array | None:
    """The flat values of a list column without nulls and with one value per token, else None."""
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
        return None
    if column.null_count:
        return None
    values, offsets = flat_list(column)
    return values if np.array_equal(lengths(offsets), n_tokens) else None


def _not_per_token(
    column: pa.ChunkedArray, name: str, n_tokens: np.ndarray, rows: np.ndarray, sources: Sources
) -> DataError:
    """The error for an ``advantages`` or ``returns`` column :func:`per_token` refused."""
    listed = pa.types.is_list(column.type) or pa.types.is_large_list(column.type)
    if listed and not column.null_count:
        count = lengths(flat_list(column)[1])
        row = int(np.flatnonzero(count != n_tokens)[0])
        msg = (
            f"{sources.at(int(rows[row]), name)}: {count[row]} values but {n_tokens[row]} "
            "tokens. Hint: an annotated log has one value per token"
        )
        return DataError(msg)
    msg = (
        f"{sources.at(0, name)}: expected a list of numbers without nulls, saw "
        f"{column.type}. Hint: annotate the raw log again"
    )
    return DataError(msg)


def annotated_batches(
    inp: Input, keep: list[str], batch_rows: int = BATCH_ROWS
) -> Iterator[tuple[pa.Table, np.ndarray]]:
    """The annotated log's rows in order, batch by batch, with their action masks."""
    if inp.run is not None:
        for table, _, mask in inp.run.annotated():
            yield table, mask
        return
    roles, schema = inp.roles, inp.source.schema.names
    names = [roles[r] for r in ("prompt_id", "rollout_id", "segment_index") if roles[r]]
    names += token_columns(roles, values=False)
    names += [n for n in ("advantages", "returns") if n in schema] + keep
    for row0, table in prefetch(inp.source.batches(list(dict.fromkeys(names)), batch_rows)):
        yield table, extract_tokens(table, inp.roles, inp.sources, row0, values=False).mask


def sample_table(
    table: pa.Table, mask: np.ndarray, inp: Input, keep: list[str], rows: np.ndarray
) -> pa.Table:
    """A batch of annotated rows under the shards' column names (``rows``: input rows)."""
    roles = inp.roles
    ids = table.column(roles["input_ids"])
    offsets = flat_list(ids)[1]
    n_tokens = lengths(offsets)
    cols: dict[str, pa.Array | pa.ChunkedArray] = {}
    for role in ("prompt_id", "rollout_id", "segment_index"):
        if roles[role] is not None:
            cols[role] = table.column(roles[role])
    if "rollout_id" not in cols:
        cols["rollout_id"] = pa.array(rows)
    cols["input_ids"] = ids
    cols["loss_mask"] = _list(pa.array(mask.astype(np.int8)), offsets)
    for name in ("advantages", "returns"):
        if name in table.column_names:
            values = per_token(table.column(name), n_tokens)
            if values is None:
                raise _not_per_token(table.column(name), name, n_tokens, rows, inp.sources)
            cols[name] = _list(values.cast(pa.float32()), offsets)
    for name in keep:
        cols[name] = table.column(name)
    return pa.table(cols)


IPC = pa.ipc.IpcWriteOptions(compression="lz4")  # buckets: fast to write and read back
SPARE_FILES = 64  # open files besides the buckets: inputs, shards, the interpreter's own


def allow_open_files(n_buckets: int, target: Path) -> None:
    """Pass 2 keeps every bucket file open (rows reach them in any order). Raise this
    process's soft limit on open files (``ulimit -n``, often 1024: a ~8 B-token log) up to
    its hard limit if needed; fail before writing anything if even that is too low."""
    try:
        import resource
    except ImportError:  # not a Unix: no such limit to raise
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = n_buckets + SPARE_FILES
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        msg = (
            f"{target}: sharding this log keeps {n_buckets:,} temporary bucket files open at "
            f"once, but this process may open at most {hard:,} files. "
            f"Hint: raise the limit (ulimit -n {need}) and run again"
        )
        raise OutputError(msg)
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def bucket_path(folder: Path, j: int) -> Path:
    return folder / f"bucket-{j:06d}.arrow"


def route(
    inp: Input,
    samples: Samples,
    lay: Layout,
    keep: list[str],
    folder: Path,
    batch_rows: int = BATCH_ROWS,
) -> set[str]:
    """Pass 2: append every sample to its bucket's file in ``folder``, with its position.

    Returns the ``--keep`` columns that are per-token: list columns without nulls whose
    lengths equal the token counts on every row.
    """
    folder.mkdir()
    token_keep = set(keep)
    starts = lay.bucket_positions[:-1]
    writers: dict[int, pa.ipc.RecordBatchStreamWriter] = {}
    done = 0
    with contextlib.ExitStack() as stack:
        for table, mask in annotated_batches(inp, keep, batch_rows):
            n = table.num_rows
            rows = samples.source_row[done : done + n]
            position = lay.position[done : done + n]
            done += n
            batch = sample_table(table, mask, inp, keep, rows)
            n_tokens = lengths(flat_list(batch.column("input_ids"))[1])
            token_keep -= {k for k in token_keep if per_token(batch.column(k), n_tokens) is None}
            take = np.flatnonzero(position >= 0)
            bucket = np.searchsorted(starts, position[take], side="right") - 1
            by_bucket = np.argsort(bucket, kind="stable")
            batch = batch.append_column(POSITION, pa.array(position)).take(take[by_bucket])
            bucket = bucket[by_bucket]
            cuts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1], True])
            for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
                j = int(bucket[a])
                if j not in writers:
                    writers[j] = stack.enter_context(
                        pa.ipc.new_stream(bucket_path(folder, j), batch.schema, options=IPC)
                    )
                writers[j].write_table(batch.slice(a, b - a))
    return token_keep


# --------------------------------------------------------------------------- pass 3: writing


def piece_table(
    t: pa.Table,
    lens: np.ndarray,
    weight: np.ndarray | None,
    row_offsets: np.ndarray,
    token_keep: set[str],
    *,
    packed: bool,
    large_tokens: bool,
    large_samples: bool,
) -> pa.Table:
    """Output rows of one piece. ``t`` holds its samples in order (as :func:`sample_table`),
    output row r holds samples ``[row_offsets[r], row_offsets[r + 1])``, ``lens`` tokens each;
    ``large_*``: whether the shard needs large lists."""

    def column(name: str) -> pa.Array:
        return t.column(name).combine_chunks()

    sample_offsets = offsets_from_lengths(lens)
    tok_offsets = sample_offsets[row_offsets]  # tokens per output row
    take_np = ranges(flat_list(column("input_ids"))[1][:-1], lens)
    take = pa.array(take_np)

    def tokens(name: str) -> pa.Array:
        return _list(flat_list(column(name))[0].take(take), tok_offsets, large_tokens)

    def per_row(name: str) -> pa.Array:
        values = column(name)
        values = values.cast(_narrow(values.type))
        return _list(values, row_offsets, large_samples) if packed else values

    mask = flat_list(column("loss_mask"))[0].to_numpy()[take_np]
    cols: dict[str, pa.Array] = {}
    for name in ("prompt_id", "rollout_id", "segment_index"):
        if name in t.column_names:
            cols[name] = per_row(name)
    cols["input_ids"] = tokens("input_ids")
    if packed:
        pos = np.arange(len(mask), dtype=np.int64) - np.repeat(sample_offsets[:-1], lens)
        cols["position_ids"] = _list(pa.array(pos.astype(np.int32)), tok_offsets, large_tokens)
        cols["seq_lens"] = _list(pa.array(lens.astype(np.int32)), row_offsets, large_samples)
    cols["loss_mask"] = _list(pa.array(mask), tok_offsets, large_tokens)
    for name in ("advantages", "returns"):
        if name in t.column_names:
            cols[name] = tokens(name)
    if weight is not None:
        w = np.repeat(weight, lens) * mask
        cols["loss_weight"] = _list(pa.array(w.astype(np.float32)), tok_offsets, large_tokens)
    kept = [n for n in t.column_names if n not in OWN_COLUMNS and n != POSITION]
    for name in kept:
        if name in token_keep:
            cols[name] = tokens(name)
    for name in kept:
        if name not in token_keep:
            cols[name] = per_row(name)
    return pa.table(cols)


def _narrow(t: pa.DataType) -> pa.DataType:
    """32-bit offsets for a per-row column (advcli's annotated Parquet has 64-bit ones), so a
    log and its annotated copy give the same shards."""
    if t == pa.large_string():
        return pa.string()
    if t == pa.large_binary():
        return pa.binary()
    if pa.types.is_large_list(t):
        return pa.list_(_narrow(t.value_type))
    return t


def schema_list(schema: pa.Schema) -> list[list[str]]:
    return [[f.name, str(f.type)] for f in schema]


class ShardFiles:
    """Writes the shards in order, piece by piece; one manifest record per shard."""

    def __init__(self, folder: Path, p: Plan, metadata: dict):
        self.folder = folder
        self.plan = p
        self.metadata = json.dumps(metadata, sort_keys=True)
        self.named = len(p.splits) > 1
        self.records: list[dict] = []
        self._writer: pq.ParquetWriter | None = None
        self._current: tuple[int, int] | None = None

    def write(self, split: int, shard: int, table: pa.Table) -> None:
        if self._current != (split, shard):
            self.close()
            self._open(split, shard, table.schema)
        table = table.replace_schema_metadata({METADATA_KEY: self.metadata})
        self._writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
        mask = table.column("loss_mask").chunk(0).values
        self._record.update(
            rows=self._record["rows"] + table.num_rows,
            tokens=self._record["tokens"] + len(mask),
            action_tokens=self._record["action_tokens"] + int(np.asarray(mask).sum()),
        )

    def _open(self, split: int, shard: int, schema: pa.Schema) -> None:
        sp = self.plan.splits[split]
        folder = self.folder / sp.name if self.named else self.folder
        folder.mkdir(exist_ok=True)
        width = max(5, len(str(len(sp.shard_bounds) - 2)))
        name = f"part-{shard:0{width}d}.parquet"
        self._path = folder / name
        a, b = sp.shard_bounds[shard], sp.shard_bounds[shard + 1]
        self._record = {
            "path": f"{sp.name}/{name}" if self.named else name,
            "split": sp.name,
            "rows": 0,
            "samples": int(sp.row_offsets[b] - sp.row_offsets[a]),
            "tokens": 0,
            "action_tokens": 0,
        }
        schema = schema.with_metadata({METADATA_KEY: self.metadata})
        self._writer = pq.ParquetWriter(self._path, schema, **parquet_options(schema))
        self._current = (split, shard)

    def close(self) -> None:
        if self._writer is None:
            return
        self._writer.close()
        self._writer = None
        path = self._path
        self._record.update(
            bytes=path.stat().st_size,
            sha256=file_sha256(path),
            schema=schema_list(pq.read_schema(path)),  # as readers see it
        )
        self.records.append(self._record)


def shard_totals(p: Plan) -> list[list[tuple[int, int]]]:
    """Per split and shard: its tokens and samples (to choose list or large list)."""
    out = []
    for sp in p.splits:
        cum = offsets_from_lengths(p.lens[sp.order])
        first = sp.row_offsets[sp.shard_bounds]
        out.append(list(zip(np.diff(cum[first]).tolist(), np.diff(first).tolist(), strict=True)))
    return out


def in_order(bucket: pa.Table) -> pa.Table:
    """A bucket's rows by position, column by column (each column freed once copied)."""
    order = pa.array(np.argsort(bucket.column(POSITION).to_numpy()))
    cols = {}
    for name in bucket.column_names:
        cols[name] = bucket.column(name).take(order).combine_chunks()
        bucket = bucket.drop_columns([name])
    return pa.table(cols)


def write_pieces(
    folder: Path,
    buckets: Path,
    p: Plan,
    lay: Layout,
    opts: ShardOptions,
    token_keep: set[str],
    metadata: dict,
) -> list[dict]:
    """Pass 3: bucket by bucket, put the rows in order and write the pieces into the shards."""
    files = ShardFiles(folder, p, metadata)
    totals = shard_totals(p)
    for j in range(len(lay.bucket_pieces) - 1):
        path = bucket_path(buckets, j)
        with pa.OSFile(str(path)) as fh:
            bucket = pa.ipc.open_stream(fh).read_all()
        path.unlink()
        bucket = in_order(bucket)
        first = int(lay.bucket_positions[j])
        for i in range(int(lay.bucket_pieces[j]), int(lay.bucket_pieces[j + 1])):
            k, s = int(lay.piece_split[i]), int(lay.piece_shard[i])
            a, b = int(lay.piece_positions[i]), int(lay.piece_positions[i + 1])
            sp = p.splits[k]
            row_offsets = sp.row_offsets[lay.piece_row0[i] : lay.piece_row1[i] + 1]
            samples = lay.order[a:b]
            n_tokens, n_samples = totals[k][s]
            table = piece_table(
                bucket.slice(a - first, b - a),
                p.lens[samples],
                None if p.weight is None else p.weight[samples],
                row_offsets - row_offsets[0],
                token_keep,
                packed=opts.pack is not None,
                large_tokens=n_tokens >= 2**31,
                large_samples=n_samples >= 2**31,
            )
            files.write(k, s, table)
        del bucket
    files.close()
    return files.records


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


def input_record(path: str, sources: Sources) -> dict:
    if path == STDIN:
        data = sources.stdin or b""
        return {"path": path, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    record = {"path": path, "bytes": os.path.getsize(path), "sha256": file_sha256(Path(path))}
    meta = Path(f"{path}.meta.json")
    if is_jsonl(path) and meta.exists():
        record["meta"] = {"path": str(meta), "sha256": file_sha256(meta)}
    return record


def write_shards(
    target: Path,
    inp: Input,
    samples: Samples,
    p: Plan,
    opts: ShardOptions,
    keep: list[str],
    *,
    force: bool,
    stage: Stage = _no_stage,
    batch_rows: int = BATCH_ROWS,
    bucket_tokens: int = BUCKET_TOKENS,
) -> dict:
    """Passes 2 and 3 into a temporary folder, then the manifest (last), then the rename."""
    lay = layout(p, bucket_tokens)
    allow_open_files(len(lay.bucket_pieces) - 1, target)
    shard_meta = {
        "format": FORMAT,
        "advcli_version": __version__,
        "method": inp.metadata.get("method"),
        "params": inp.metadata.get("params"),
        "pack": opts.pack,
        "loss_weights": opts.loss_weights,
    }
    with atomic_dir(target, force=force) as tmp:
        buckets = tmp / ".buckets"
        with stage("annotating" if inp.run is not None else "reading rows"):
            token_keep = route(inp, samples, lay, keep, buckets, batch_rows)
        with stage("writing shards"):
            records = write_pieces(tmp, buckets, p, lay, opts, token_keep, shard_meta)
        buckets.rmdir()
        manifest = build_manifest(inp, p, opts, records)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def _totals(records: list[dict]) -> dict:
    keys = ("rows", "samples", "tokens", "action_tokens")
    out = {k: sum(r[k] for r in records) for k in keys}
    out["shards"] = len(records)
    return out


def build_manifest(inp: Input, p: Plan, opts: ShardOptions, records: list[dict]) -> dict:
    dropped = dict(p.dropped)
    if inp.dropped_by_method:
        dropped["by_method"] = inp.dropped_by_method
    return {
        "format": FORMAT,
        "advcli_version": __version__,
        "method": inp.metadata.get("method"),
        "params": inp.metadata.get("params"),
        "roles": inp.metadata.get("roles"),
        "annotated_input": inp.annotated_input,
        "inputs": [input_record(f, inp.sources) for f in inp.sources.files],
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
    batch_rows: int = BATCH_ROWS,
    bucket_tokens: int = BUCKET_TOKENS,
) -> dict:
    """``advcli shard``: returns a summary; the folder ``out`` appears only when complete.

    ``batch_rows`` (rows read at a time) and ``bucket_tokens`` (tokens held in memory while
    writing) change memory and speed, never the output.
    """
    started = time.perf_counter()
    check_options(opts)
    if method is not None or convention is not None or param:
        make_params(method or "grpo", convention, param)  # bad options fail before reading
    target = check_out_dir(out, expand_inputs(inputs), force=force)
    inp = open_input(
        inputs,
        method=method,
        convention=convention,
        param=param,
        col=col,
        stage=stage,
        batch_rows=batch_rows,
    )
    keep = check_keep(inp, opts.keep)
    with stage("counting tokens"):
        samples = measure(inp, opts.pack, batch_rows)
    with stage("planning"):
        ids = inp.roles["input_ids"]
        p = plan(samples, opts, lambda row: inp.sources.at(row, ids))
    if not any(len(sp.order) for sp in p.splits):
        msg = (
            f"{', '.join(inp.sources.files)}: no rows left to write "
            f"(dropped: {p.dropped or inp.dropped_by_method}). "
            "Hint: drop --drop-zero-variance / --drop-singletons"
        )
        raise DataError(msg)
    manifest = write_shards(
        target,
        inp,
        samples,
        p,
        opts,
        keep,
        force=force,
        stage=stage,
        batch_rows=batch_rows,
        bucket_tokens=bucket_tokens,
    )
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
        digest = file_sha256(path)
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
