"""A log less some prompts' rows: the rows left read as a log of their own, and an error on
one of them names its row in the whole file."""

from __future__ import annotations

import numpy as np
import pytest

from advcli.errors import DataError
from advcli.run.logs import open_log
from advcli.run.prompts import KeptRows, PromptList, hashed_strings, without_prompts
from tests.conftest import group_log, write_jsonl


def test_the_rows_left_and_where_they_came_from(tmp_path):
    path = write_jsonl(tmp_path / "log.jsonl", group_log(3, 4))
    log = open_log([path])
    log.source.columns(["prompt_id"])  # a first read counts the file's rows
    kept = np.array([i // 4 != 1 for i in range(12)])
    source = KeptRows(log.source, kept)
    assert source.n_rows == 8
    assert source.columns(["prompt_id"]).column("prompt_id").to_pylist() == ["p0"] * 4 + ["p2"] * 4
    batches = list(source.batches(["rollout_id"], 4))
    assert [row0 for row0, _ in batches] == [0, 4]  # the batch of p1's rows alone: gone
    assert [t.num_rows for _, t in batches] == [4, 4]
    batches = list(source.batches(["rollout_id"], 3))
    assert [row0 for row0, _ in batches] == [0, 3, 4, 5]
    assert [t.num_rows for _, t in batches] == [3, 1, 1, 3]
    assert source.sources.at(4, "reward") == f"{path}: line 9, column 'reward'"


def test_dropping_by_id_leaves_the_other_prompts(tmp_path):
    path = write_jsonl(tmp_path / "log.jsonl", group_log(3, 4))
    log = open_log([path])
    listed = PromptList("list.jsonl", "drop_prompts", {"id": hashed_strings_of(["p1"])})
    removed = without_prompts(log, listed)
    assert (removed.rows, removed.prompts) == (4, 1)
    assert log.source.n_rows == 8
    keep_all = PromptList("list.jsonl", "keep_prompts", {"id": hashed_strings_of(["p9"])})
    with pytest.raises(DataError, match="no row of .* is left"):
        without_prompts(open_log([path]), keep_all)


def hashed_strings_of(values: list[str]) -> np.ndarray:
    import pyarrow as pa

    return hashed_strings(pa.array(values))
