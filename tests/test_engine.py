"""Streaming in batches gives exactly the numbers of the whole log in one batch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import advcli
from advcli.errors import DataError
from advcli.methods import REGISTRY
from tests.conftest import METHOD_OPTIONS, annotate_in_memory, one_line, rollout, run, write_jsonl


def segmented_log(tmp_path, n_rollouts=40, seed=0):
    """Rollouts in 1-3 segments, segments shuffled across two Parquet files."""
    rng = np.random.default_rng(seed)
    more = np.random.default_rng(seed + 1)  # the extra columns, leaving rng's draws as they were
    rows = []
    for r in range(n_rollouts):
        n_seg = int(rng.integers(1, 4))
        truncated = bool(rng.uniform() < 0.2)
        for s in range(n_seg):
            n = int(rng.integers(3, 40))
            mask = (rng.uniform(size=n) < 0.7).astype(int).tolist()
            mask[0] = 0
            rewards = np.where(rng.uniform(size=n) < 0.1, 0.5, 0.0)
            rewards[: mask.index(1) + 1 if 1 in mask else n] = 0.0  # none before the first action
            rows.append(
                {
                    "prompt_id": f"p{r % 7}",
                    "rollout_id": f"r{r}",
                    "segment_index": s,
                    "input_ids": rng.integers(0, 100, n).tolist(),
                    "action_mask": mask,
                    "values": rng.uniform(-1, 1, n).tolist(),
                    "token_rewards": rewards.tolist(),
                    "reward": float(rng.integers(0, 2)),
                    "completion_time": float(rng.uniform(0, 10)),
                    "truncated": truncated and s == n_seg - 1,
                    "bootstrap_value": 0.3,
                    # what only some methods read (kl, opd, remax, grpo-process, gdpo,
                    # grpo-length, hierarchical-grpo, rae)
                    "logprobs": (-more.uniform(0, 2, n)).tolist(),
                    "ref_logprobs": (-more.uniform(0, 2, n)).tolist(),
                    "teacher_logprobs": (-more.uniform(0, 2, n)).tolist(),
                    "baseline_reward": float(more.uniform()),
                    "step_rewards": more.integers(0, 2, 2).astype(float).tolist(),
                    "step_ends": [n // 2, n - 1],
                    "acc": float(more.integers(0, 2)),
                    "fmt": float(more.integers(0, 2)),
                    "num_output_tokens": int(more.integers(1, 100)),
                    "num_input_tokens": int(more.integers(1, 100)),
                    "num_turns": int(more.integers(1, 5)),
                    "agent": ("proposer", "solver")[r % 2],  # hierarchical-grpo, rae
                    "episode": f"e{r // 4}",
                    "state": f"s{s}-{r % 3}",  # gigpo: agent steps' states and rewards
                    "step_reward": float(more.integers(0, 2)),
                }
            )
    order = rng.permutation(len(rows))
    rows = [rows[i] for i in order]
    half = len(rows) // 2
    paths = []
    for i, part in enumerate((rows[:half], rows[half:])):
        path = tmp_path / f"part{i}.parquet"
        pq.write_table(pa.Table.from_pylist(part), path)
        paths.append(str(path))
    return paths


# Every registered method with its defaults (a new one is covered as it is registered), then
# the options that add passes or change how rows meet.
CASES = [
    *({"method": name, **METHOD_OPTIONS.get(name, {})} for name in REGISTRY),
    {"method": "grpo", "kl_coef": 0.1, "opd_coef": 0.5},
    {"method": "rloo", "zero_variance": "drop"},
    {"method": "batch-mean", "batch_size": 7},
    {"method": "gae", "gamma": 0.99, "lam": 0.9},
    {"method": "gae", "gamma": 0.95, "lam": 0.8, "segments": "chain", "whiten": "batch"},
    {"method": "gae", "lam": "adaptive", "alpha": 1.5, "observations": "step"},
    {"method": "gae", "observations": "step", "whiten": "batch", "batch_size": 6},
    {"method": "mc", "convention": "openrlhf", "lam_critic": 0.9},
    {"method": "mc", "gamma": 0.9, "segments": "chain"},
    {"method": "td", "gamma": 0.9},
    {"method": "reinforce-pp", "gamma": 0.97, "batch_size": 10},
    {"method": "reinforce-pp-baseline", "segments": "chain"},
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_batches_change_nothing(tmp_path, case):
    inputs = segmented_log(tmp_path)
    tables = []
    for batch_rows in (1, 5, 64, 100_000):
        out = tmp_path / f"out{batch_rows}.parquet"
        advcli.annotate(inputs, str(out), **case, batch_rows=batch_rows)
        tables.append(pq.read_table(out))
    for other in tables[1:]:
        assert other.equals(tables[0])
    in_memory = annotate_in_memory(inputs, **case)
    streamed = tables[0].column("advantages")
    assert in_memory.column("advantages").cast(streamed.type).equals(streamed)


def test_chain_carries_match_concatenated_rollouts(tmp_path):
    """Chained segments equal the same rollout logged as one row."""
    inputs = segmented_log(tmp_path, n_rollouts=12, seed=3)
    table = pa.concat_tables([pq.read_table(p) for p in inputs]).to_pylist()
    table = [dict(r, truncated=False) for r in table]
    merged: dict[str, dict[str, Any]] = {}
    for row in sorted(table, key=lambda r: (r["rollout_id"], r["segment_index"])):
        m = merged.setdefault(
            row["rollout_id"], dict(row, input_ids=[], action_mask=[], values=[], token_rewards=[])
        )
        for key in ("input_ids", "action_mask", "values", "token_rewards"):
            m[key] = m[key] + row[key]
        m["reward"] = row["reward"]
    whole = [dict(m, segment_index=0) for m in merged.values()]
    seg_path, whole_path = tmp_path / "seg.parquet", tmp_path / "whole.parquet"
    pq.write_table(pa.Table.from_pylist(table), seg_path)
    pq.write_table(pa.Table.from_pylist(whole).drop_columns(["segment_index"]), whole_path)
    params = {"method": "gae", "gamma": 0.97, "lam": 0.9, "segments": "chain"}
    seg = annotate_in_memory([seg_path], **params)
    one = annotate_in_memory([whole_path], **params)
    by_rollout: dict[str, list] = {}
    for row in sorted(seg.to_pylist(), key=lambda r: (r["rollout_id"], r["segment_index"])):
        by_rollout.setdefault(row["rollout_id"], []).extend(row["advantages"])
    for row in one.to_pylist():
        np.testing.assert_allclose(by_rollout[row["rollout_id"]], row["advantages"], atol=1e-5)


def test_an_error_in_a_later_batch_leaves_nothing(tmp_path):
    """Batches already handed to the writer are discarded with the temporary file."""
    rows = [rollout(f"p{i % 3}", float(i % 2)) for i in range(12)]
    rows[9]["action_mask"] = [0, 0, 1, 2, 1]
    log = tmp_path / "log.parquet"
    pq.write_table(pa.Table.from_pylist(rows), log)
    out = tmp_path / "out.parquet"
    with pytest.raises(DataError, match="row 9"):
        advcli.annotate([str(log)], str(out), method="grpo", batch_rows=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.parquet"]


def test_schema_and_audit_report_progress_up_to_the_totals(tmp_path):
    """Both stream the token columns in batches, reporting rows and tokens as they go."""
    paths = [str(p) for p in segmented_log(tmp_path)]
    seen = []

    class Seen(advcli.Reporter):
        def advance(self, rows, tokens):
            seen.append((rows, tokens))

    with advcli.reporting(Seen()):
        info = advcli.describe(paths, batch_rows=16)
    assert len(seen) > 2 and seen == sorted(seen)
    assert seen[-1] == (info.rows, info.tokens)
    seen.clear()
    with advcli.reporting(Seen()):
        advcli.audit(paths, batch_rows=16)
    assert seen[-1][0] == info.rows and len(seen) > 2


def test_group_key_warnings(tmp_path):
    """Every group a single rollout, or groups of two or more of an uncommon size, are
    signs of a wrong group key; a singleton among groups of 4 is not (it is flagged)."""
    from advcli.io.rollouts import extract_rows, row_columns
    from advcli.run import logs

    def warnings_for(keys):
        rows = [rollout(k, float(i % 2)) for i, k in enumerate(keys)]
        path = tmp_path / "log.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path)
        log = logs.open_log([str(path)])
        source = log.source
        rows_ = extract_rows(source.columns(row_columns(log.roles)), log.roles, source.sources)
        return logs.group_warnings(log, rows_)

    assert warnings_for(["a"] * 4 + ["b"] * 4 + ["c"]) == []
    (wrong,) = warnings_for(["a"] * 4 + ["b"] * 4 + ["c"] * 8)
    assert wrong.startswith("1 of 3 groups do not have the common size of 4 rollouts (sizes 4, 8)")
    (single,) = warnings_for(["a", "b", "c"])
    assert single.startswith("every group has a single rollout: is 'prompt_id' really the prompt?")


CALLS: list[int] = []


class CountingScorer:
    """Values 0, 1, 2, … from the batch's first row; each call noted in CALLS."""

    metadata: dict = {}

    def __call__(self, row0, table, tokens):
        CALLS.append(row0)
        return np.arange(row0, row0 + int(tokens.offsets[-1]), dtype=np.float32)


def test_a_value_cache_scores_once_and_arrives_empty_elsewhere():
    """The first pass scores and keeps the values; a later pass from row 0 reads them back
    without scoring. Pickled (sent to a Ray task), it arrives empty and scores again."""
    import pickle

    from advcli.io.tokens import Tokens
    from advcli.run.engine import ValueCache

    def batch() -> Tokens:
        offsets = np.array([0, 2, 5])
        return Tokens(offsets=offsets, mask=np.ones(5, bool), values=None, token_rewards=None)

    CALLS.clear()
    cache = ValueCache(CountingScorer())
    first = [cache(row0, None, batch()) for row0 in (0, 2)]
    again = [cache(row0, None, batch()) for row0 in (0, 2)]
    assert CALLS == [0, 2] and all(map(np.array_equal, first, again))
    elsewhere = pickle.loads(pickle.dumps(cache))
    assert elsewhere.file is None and elsewhere.scored_rows == 0
    assert np.array_equal(elsewhere(2, None, batch()), first[1]) and CALLS == [0, 2, 2]
    cache.close()


def stepped_log(tmp_path, steps=4, seed=3) -> list[str]:
    """Rollouts of several steps (a ``batch`` column), each step a file, some with
    observation tokens and values; rows of a step in a row."""
    rng = np.random.default_rng(seed)
    paths = []
    for step in range(steps):
        rows = []
        for r in range(int(rng.integers(5, 12))):
            n = int(rng.integers(3, 30))
            mask = (rng.uniform(size=n) < 0.7).astype(int).tolist()
            mask[-1] = 1
            rows.append({"prompt_id": f"s{step}p{r % 3}", "batch": f"step {step}",
                         "input_ids": rng.integers(0, 100, n).tolist(), "action_mask": mask,
                         "values": rng.uniform(-1, 1, n).tolist(),
                         "reward": float(rng.normal())})  # fmt: skip
        path = tmp_path / f"step{step}.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path)
        paths.append(str(path))
    return paths


@pytest.mark.parametrize("case", [
    {"method": "reinforce-pp", "gamma": 0.9},
    {"method": "reinforce-pp-baseline", "convention": "nemo-rl"},
    {"method": "gae", "convention": "verl", "lam": 0.9},
    {"method": "gae", "convention": "openrlhf"},
])  # fmt: skip
def test_whitening_per_step_reads_the_log_once_with_the_numbers_of_two_passes(
    tmp_path, monkeypatch, case
):
    """Where each batch is a step of consecutive rows, the final pass holds a step until its
    last row, whitens it and writes it: one read of the tokens, the numbers of the pass that
    measures every step first (however the reads cut the steps), and each step whitened
    alone (its action tokens: mean 0, and the convention's variance)."""
    from advcli.io import file_sources as sources
    from advcli.run import engine

    inputs = stepped_log(tmp_path)
    reads = []
    batches = sources.ParquetSource.batches

    def counted(self, names, rows):
        reads.append(names)
        return batches(self, names, rows)

    monkeypatch.setattr(sources.ParquetSource, "batches", counted)
    outs = {}
    for held, batch_rows in ((True, 3), (True, 7), (True, 512), (False, 5)):
        monkeypatch.setattr(engine, "HELD_ROWS", (1 << 16) if held else 0)
        reads.clear()
        out = tmp_path / f"{held}{batch_rows}.parquet"
        advcli.annotate(inputs, str(out), **case, batch_rows=batch_rows)
        assert sum(names is None or "action_mask" in names for names in reads) == (
            1 if held else 2)  # fmt: skip
        outs[held, batch_rows] = pq.read_table(out)
    first = outs[True, 3]
    for other in outs.values():
        assert other.column("advantages").equals(first.column("advantages"))
    table = first.to_pydict()
    for step in set(table["batch"]):
        adv = np.concatenate(
            [
                np.asarray(a)[np.asarray(m) == 1]
                for a, m, b in zip(
                    table["advantages"], table["action_mask"], table["batch"], strict=True
                )
                if b == step
            ]
        )
        assert abs(adv.mean()) < 1e-5  # fmt: skip


def test_a_result_that_overflows_float32_names_its_row(tmp_path):
    n = 50
    rows = [rollout("a", 0.0, n_prompt=0, n_action=n, token_rewards=[0.0] * n, values=[0.0] * n)
            for _ in range(2)]  # fmt: skip
    rows[1]["token_rewards"] = [3e38] * n  # each fits; their sum does not
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    proc = run("annotate", log, "--method", "mc", "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 1
    assert one_line(proc).startswith(
        f"advcli: error: {log}: line 2, column 'advantages': the mc result inf is not a finite "
        "float32 number"
    )
    assert proc.stderr.count(b"Warning") == 0
