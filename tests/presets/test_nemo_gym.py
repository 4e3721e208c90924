"""``--from nemo-gym`` on ``rollouts.jsonl`` written by NeMo-Gym 0.7.0's own rollout collection
(``tools/dumps/nemo_gym.py``: its servers in-process, the model stood in)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.fuzz import main
from tests.presets.test_real_dumps import REAL, run

GYM = REAL / "nemo-gym"


def _annotated(tmp_path: Path, case: str) -> list[dict]:
    out = tmp_path / "out.parquet"
    proc = run("annotate", str(GYM / case), "--from", "nemo-gym", "--method", "grpo",
               "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return pq.read_table(out).to_pylist()


def _leave_one_out(rewards: list[float]) -> list[float]:
    """NeMo-RL's GRPO (the trainer of Gym rollouts): R minus the others' mean, over the
    others' std (ddof 1) + 1e-6 where that std is not 0; a float64 loop."""
    out = []
    for i, r in enumerate(rewards):
        others = np.array(rewards[:i] + rewards[i + 1 :])
        std = others.std(ddof=1) if len(others) > 1 else 0.0
        out.append((r - others.mean()) / (std + 1e-6) if std > 0 else r - others.mean())
    return out


@pytest.mark.parametrize("case", ["default", "duplicate-rows"])
def test_nemo_gym_groups_by_task(tmp_path: Path, case: str) -> None:
    """Rows in the order rollouts finished; a group is the task (identical input rows are one
    task: 8 rollouts in duplicate-rows); tokens from the response's generated messages."""
    rows = _annotated(tmp_path, case)
    truth = json.loads((GYM / case / "truth.json").read_text())["rows"]
    assert [(r["_ng_task_index"], r["_ng_rollout_index"], r["reward"]) for r in rows] == [
        (t["task_index"], t["rollout_index"], t["reward"]) for t in truth
    ]
    by_task: dict[int, list[int]] = {}
    for i, t in enumerate(truth):
        by_task.setdefault(t["task_index"], []).append(i)
    want = np.zeros(len(rows))
    for members in by_task.values():
        want[members] = _leave_one_out([truth[i]["reward"] for i in members])
    assert [r["advantage"] for r in rows] == pytest.approx(want.tolist(), abs=1e-6)
    assert [sum(r["action_mask"]) for r in rows] == [t["n_generation_tokens"] for t in truth]
    response = json.loads(rows[0]["response"])["output"][0]
    assert rows[0]["input_ids"] == response["prompt_token_ids"] + response["generation_token_ids"]
    assert max(len(v) for v in by_task.values()) == (8 if case == "duplicate-rows" else 4)


def _edited(tmp_path: Path, edit) -> Path:
    """The default case's rollouts.jsonl with each line edited by ``edit(index, record)``."""
    lines = (GYM / "default" / "rollouts.jsonl").read_text().splitlines()
    folder = tmp_path / "run"
    folder.mkdir(parents=True)
    records = [edit(i, json.loads(line)) for i, line in enumerate(lines)]
    (folder / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def _refused(folder: Path, tmp_path: Path) -> str:
    proc = run("annotate", str(folder), "--from", "nemo-gym", "--method", "grpo", "--out",
               str(tmp_path / "o.parquet"))  # fmt: skip
    assert proc.returncode != 0 and proc.stderr.count("\n") == 1, proc.stderr
    return proc.stderr


def _strip_tokens(record: dict) -> dict:
    for message in record["response"]["output"]:
        message.pop("generation_token_ids", None)
    return record


def test_nemo_gym_bad_responses_are_named(tmp_path: Path) -> None:
    mixed = _edited(tmp_path / "a", lambda i, r: _strip_tokens(r) if i == 2 else r)
    assert "rollouts.jsonl: line 3, column 'response': no token ids, which line 1 has" in (
        _refused(mixed, tmp_path)
    )

    def short(i: int, r: dict) -> dict:
        r["response"]["output"][0]["generation_log_probs"] = [-0.5]
        return r

    assert "rollouts.jsonl: line 1, column 'response': a message has 11 generation_token_ids " in (
        _refused(_edited(tmp_path / "b", short), tmp_path)
    )


@pytest.mark.parametrize("field", ["prompt_token_ids", "generation_token_ids"])
@pytest.mark.parametrize(("value", "seen"), [(None, "null"), ("missing", "missing"),
                                             ("1 2 3", "not a list")])  # fmt: skip
def test_a_generated_message_without_its_prompt_tokens_is_refused(tmp_path, field, value, seen):
    """A generated message's prompt_token_ids tell its prompt tokens from its actions: null or
    missing (or no list), its rollout would read every token as an action; refused at the
    line, on any line. (A missing generation_token_ids marks a message that generated nothing
    the server recorded: the line has no token ids, refused where others have them.)"""

    def edit(i: int, r: dict) -> dict:
        if i == 3:
            message = r["response"]["output"][0]
            if value == "missing":
                del message[field]
            else:
                message[field] = value
        return r

    stderr = _refused(_edited(tmp_path, edit), tmp_path)
    if field == "generation_token_ids" and value in (None, "missing"):
        assert "line 4, column 'response': no token ids, which line 1 has" in stderr
    else:
        assert (f"rollouts.jsonl: line 4, column 'response': output message 0 carries "
                f"generation_token_ids and its {field} is {seen}, so its prompt tokens cannot "
                "be told from its generated ones") in stderr  # fmt: skip


def _annotate_in_process(folder: Path, tmp_path: Path) -> tuple[int, str]:
    return main("annotate", str(folder), "--from", "nemo-gym", "--method", "grpo", "-q",
                "--out", str(tmp_path / "o.parquet"))  # fmt: skip


@pytest.mark.parametrize("key", ["_ng_task_index", "_ng_rollout_index"])
@pytest.mark.parametrize(
    ("value", "said"),
    [
        (2**70, "an index is an integer within int64, saw 1.1805916207174113e+21, a float"),
        (2**64 - 1, "an index is an integer within int64, saw 18446744073709551615."),
        (2.0, "an index is an integer within int64, saw 2.0, a float"),
        (2.5, "an id is a string or an integer, saw 2.5"),
        (True, "an id is a string or an integer, saw true"),
        ([2], "an id is a string or an integer, saw [2]"),
        ("2", 'the id "2" is a string, but the first is an integer ('),
    ],
)  # fmt: skip
def test_an_index_that_is_not_one_integer_kind_is_refused_at_its_line(tmp_path, key, value, said):
    """An index beyond int64 (orjson reads one beyond 64 bits as a float: 2**70 and 2**70 + 1
    would be one task), a float, or text among integers (read as text, 2 and "2" would be one
    task): refused at its line, never groups merged or split."""
    folder = _edited(tmp_path, lambda i, r: {**r, key: value} if i == 3 else r)
    code, err = _annotate_in_process(folder, tmp_path)
    assert code == 1 and err.count("\n") == 1, err
    assert f"rollouts.jsonl: line 4, column '{key}': {said}" in err, err


def test_indices_written_as_text_on_every_line_group_as_integers_do(tmp_path):
    def as_text(i: int, r: dict) -> dict:
        return {**r, "_ng_task_index": str(r["_ng_task_index"]),
                "_ng_rollout_index": str(r["_ng_rollout_index"])}  # fmt: skip

    for name, edit in (("ints", lambda i, r: r), ("text", as_text)):
        code, err = _annotate_in_process(_edited(tmp_path / name, edit), tmp_path / name)
        assert code == 0, err
    ints, text = (pq.read_table(tmp_path / n / "o.parquet") for n in ("ints", "text"))
    assert text["prompt_id"].to_pylist() == ints["prompt_id"].to_pylist()
    assert text["advantage"].to_pylist() == ints["advantage"].to_pylist()


@pytest.mark.parametrize("value", ["1", True, [1]])
def test_a_reward_that_is_not_a_number_is_refused_at_its_line(tmp_path, value):
    """Read as numbers, "1" and true would be 1: refused, as the JSONL reader refuses them."""
    folder = _edited(tmp_path, lambda i, r: {**r, "reward": value} if i == 3 else r)
    code, err = _annotate_in_process(folder, tmp_path)
    assert code == 1, err
    assert f"line 4, column 'reward': expected a number, saw {json.dumps(value)}" in err, err
