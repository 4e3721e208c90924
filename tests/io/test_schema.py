"""Column roles (advcli.io.schema): the two log-prob streams by their frameworks' names, and
advcli's ``old_logprobs`` one underscore from verl's ``old_log_probs``."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from advcli.errors import SchemaError
from advcli.io.schema import POLICY_LOGPROBS, resolve_roles
from tests.conftest import rollout, run, write_jsonl

FLOATS = pa.list_(pa.float32())


def _roles(*names: str):
    schema = pa.schema([("input_ids", pa.list_(pa.int32())), *((n, FLOATS) for n in names)])
    return resolve_roles(schema, {}, "log.parquet")


@pytest.mark.parametrize(
    ("name", "role"),
    [
        ("logprobs", "logprobs"),
        ("old_logprobs", "logprobs"),  # advcli's own (sample_data/): the sampler's
        ("rollout_log_probs", "logprobs"),  # verl, slime, miles
        ("generation_logprobs", "logprobs"),  # NeMo-RL
        ("trainer_logprobs", "trainer_logprobs"),  # prime-rl
        ("old_log_probs", "trainer_logprobs"),  # verl: the trainer's compute_log_prob
        ("prev_logprobs", "trainer_logprobs"),  # NeMo-RL
        ("log_probs", "trainer_logprobs"),  # slime and miles train dumps
    ],
)
def test_each_frameworks_name_is_its_stream(name: str, role: str) -> None:
    roles = _roles(name)
    assert roles[role] == name
    other = "trainer_logprobs" if role == "logprobs" else "logprobs"
    assert roles[other] is None
    assert roles[POLICY_LOGPROBS] == name  # the one stream there is: the policy's


def test_one_underscore_apart_the_two_names_are_the_two_streams() -> None:
    """advcli's ``old_logprobs`` is the sampler's, verl's ``old_log_probs`` the trainer's: a log
    with both reads both, and the policy's log-probs are the trainer's."""
    roles = _roles("old_logprobs", "old_log_probs")
    assert roles["logprobs"] == "old_logprobs"
    assert roles["trainer_logprobs"] == "old_log_probs"
    assert roles[POLICY_LOGPROBS] == "old_log_probs"


def test_two_trainer_names_are_ambiguous_and_col_chooses() -> None:
    with pytest.raises(SchemaError, match="'old_log_probs', 'log_probs' could each be"):
        _roles("old_log_probs", "log_probs")
    schema = pa.schema([("old_log_probs", FLOATS), ("log_probs", FLOATS)])
    roles = resolve_roles(schema, {"trainer_logprobs": "log_probs"}, "log.parquet")
    assert roles["trainer_logprobs"] == "log_probs"


def test_schema_shows_both_streams_and_which_the_kl_reads(tmp_path) -> None:
    rows = [rollout("p", 1.0, old_logprobs=[0.0] * 5, prev_logprobs=[0.0] * 5),
            rollout("p", 0.0, old_logprobs=[0.0] * 5, prev_logprobs=[0.0] * 5)]  # fmt: skip
    proc = run("schema", write_jsonl(tmp_path / "log.jsonl", rows), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["columns"]["old_logprobs"][1] == "logprobs"
    assert out["columns"]["prev_logprobs"][1] == "trainer_logprobs"
    assert out["logprob_streams"] == {"sampler": "old_logprobs", "trainer": "prev_logprobs",
                                      "kl_and_distillation_read": "trainer"}  # fmt: skip
    plain = run("schema", write_jsonl(tmp_path / "log.jsonl", rows))
    assert "logprob streams" in plain.stdout.decode()
    bare = [rollout("p", 1.0), rollout("p", 0.0)]
    proc = run("schema", write_jsonl(tmp_path / "bare.jsonl", bare), "--json")
    out = json.loads(proc.stdout)
    assert "logprob_streams" not in out  # neither stream
    assert {"logprobs", "trainer_logprobs"} <= set(out["missing_roles"])
