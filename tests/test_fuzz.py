"""A few seeded mutants of every input kind through every entry point (:mod:`tests.fuzz`,
where the mutations and the per-command assertions live; ``python -m tests.fuzz`` runs the
full set). Each command, per mutant: exit 0 with a valid output, or exit 1 or 2 with one line
on stderr and nothing left behind."""

from __future__ import annotations

import pytest

from tests import fuzz

MUTANTS = {"jsonl": 30, "parquet-pages": 30, "parquet-bytes": 40, "parquet-columns": 30,
           "verl": 20, "trl": 20, "shards": 20, "pt": 32}  # fmt: skip
MUTANTS.update({"split": 24, "split-jsonl": 24})  # split layouts, through trainer layouts


@pytest.mark.parametrize("kind", fuzz.KINDS)
def test_mutants_exit_cleanly_from_every_entry_point(kind, tmp_path):
    seen = fuzz.fuzz(kind, MUTANTS[kind], tmp_path)  # each command's outcome is checked there
    assert sum(seen.values()) >= MUTANTS[kind]  # every mutant reached its commands
    # The mutations reach the readers: some mutant is refused (a fuzzer whose every mutant
    # exits 0 mutates nothing that matters, and would pass whatever advcli does).
    assert seen.get(1, 0) + seen.get(2, 0) > 0, seen
