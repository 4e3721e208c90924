"""TRL's dumps with the token ids TRL generated beside them (``tools/dumps/trl_tokens.py``: a
real ``GRPOTrainer.train()`` of TRL 1.16.0 with a chat dataset, a tool-calling run and a reward
function logging ``completion_ids``) are dumps the TRL reader reads as it reads any: advcli's
advantages equal the ``advantage`` TRL logged, and the ids beside them belong to the rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import run

TRL = Path(__file__).parent.parent / "fixtures" / "real" / "trl"
CASES = ["chat_ids", "completion_ids_logged", "tools_ids"]


def files(case: str) -> list[Path]:
    return sorted((TRL / case / "completions").glob("*.parquet"))


def logged(case: str, column: str) -> list[Any]:
    """A column of every completions file of ``case``, in file order, as TRL wrote it (read
    file by file: TRL orders a message's struct fields as each file first met them)."""
    return [
        v for f in files(case) for v in pq.read_table(f, columns=[column]).column(0).to_pylist()
    ]


def generated(case: str) -> list[dict]:
    """The ids TRL generated for ``case``'s rows, in the order of ``logged``."""
    by_file = json.loads((TRL / case / "generated_ids.json").read_text())
    return [row for name in sorted(by_file) for row in by_file[name]]


@pytest.mark.parametrize("case", CASES)
def test_advantages_equal_trls_logged_ones(tmp_path: Path, case: str) -> None:
    out = tmp_path / "out.parquet"
    proc = run("annotate", TRL / case / "completions", "--from", "trl", "--method", "grpo",
               "--out", out, "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    summary = json.loads(proc.stdout)
    assert summary["rows_written"] == 72
    assert summary["found"].startswith("--group-size 4 ")
    ours = pq.read_table(out).column("advantage").to_numpy()
    theirs = np.asarray(logged(case, "advantage"), dtype=np.float32)
    assert np.abs(ours - theirs).max() <= 2e-7  # float32: TRL computed them in float32 too


@pytest.mark.parametrize("case", CASES)
def test_one_generated_row_per_logged_row(case: str) -> None:
    rows = generated(case)
    truth = json.loads((TRL / case / "truth.json").read_text())
    assert len(rows) == len(logged(case, "advantage")) == truth["tokens"]["rows_checked"] == 72
    # some completions ended with <eos>, others were cut at max_completion_length
    limit = truth["settings"]["max_completion_length"]
    assert 0 < sum(r["eos"] for r in rows) < len(rows)
    assert all(r["eos"] or len(r["completion_ids"]) == limit for r in rows)


def test_logged_completion_ids_are_the_generated_ones() -> None:
    kind = pq.read_schema(files("completion_ids_logged")[0]).field("completion_ids").type
    assert pa.types.is_list(kind) and pa.types.is_int64(kind.value_type)
    want = [r["completion_ids"] for r in generated("completion_ids_logged")]
    assert logged("completion_ids_logged", "completion_ids") == want


def test_tool_results_are_masked_tokens_of_the_completion() -> None:
    rows = generated("tools_ids")
    completions = logged("tools_ids", "completion")
    with_tools = [
        (r, c)
        for r, c in zip(rows, completions, strict=True)
        if any(m["role"] == "tool" for m in c)
    ]
    assert len(with_tools) == 41
    for row, _ in with_tools:
        mask = row["tool_mask"]
        assert len(mask) == len(row["completion_ids"]) and mask[0] == 1
        # the tool's message: <|tool|> RESULT <eos> <|assistant|>, generated tokens on both sides
        assert mask.count(0) == 4
