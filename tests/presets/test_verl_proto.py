"""verl's ``skip.rollout`` dump (``gen_batch.dp``, :mod:`advcli.presets.verl_proto`): read by
``--from verl`` as the token ids verl generated, written by verl 0.9.1's own RolloutSkip
(tools/dumps/verl_tokens.py), and refused in one line where a pickle holds anything else,
without running code from it."""

from __future__ import annotations

import io
import json
import pickle
import shutil
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from advcli.presets import verl_proto
from tests.conftest import run

REAL = Path(__file__).parents[1] / "fixtures" / "real" / "verl"
TOKENS = REAL / "tokens"
RUN = TOKENS / "skip" / "tokens_advcli_fixtures" / "GBS4_N4_in40_out10"
"""verl's own folder: ``{experiment}_{project}/GBS{batch}_N{n}_in{prompt}_out{response}``."""
CASES = {
    "tokens": "single-turn, responses cut at 10 tokens",
    "tokens_multiturn": "two turns, an observation between them (response_mask 0 on it)",
}


def annotated(tmp_path: Path, *inputs: Path | str, options: tuple[str, ...] = (),
              method: str = "grpo") -> list[dict]:  # fmt: skip
    out = tmp_path / f"out{len(list(tmp_path.glob('out*.parquet')))}.parquet"
    proc = run("annotate", *map(str, inputs), "--from", "verl", "--method", method, *options,
               "-o", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    return pq.read_table(out).to_pylist()


def refused(path: Path, *options: str) -> str:
    proc = run("annotate", str(path), "--from", "verl", "--method", "grpo", *options,
               "-o", str(path.parent / "o.parquet"))  # fmt: skip
    text = proc.stderr.decode()
    assert proc.returncode in (1, 2) and text.count("\n") == 1, text
    assert not (path.parent / "o.parquet").exists()
    return text


def dumped_rows(case: str) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    """Each JSONL line verl dumped from the same batches, by its step and the ids and
    log-probabilities verl generated for it (generated_ids.json): its truth.json row (score,
    verl's own advantages), with its action mask (the prompt's zeros, then response_mask)."""
    generated = json.loads((REAL / case / "generated_ids.json").read_text())
    truth = json.loads((REAL / case / "truth.json").read_text())["rows"]
    rows = defaultdict(list)
    for row in truth:
        entry = generated[row["file"]][row["line"] - 1]
        line = (REAL / case / row["file"]).read_text().splitlines()[row["line"] - 1]
        assert entry["uid"] == row["uid"] and json.loads(line)["score"] == row["score"]
        prompt = [0] * len(entry["prompt_ids"])
        key = (int(Path(row["file"]).stem), tuple(entry["prompt_ids"] + entry["response_ids"]),
               tuple(prompt + entry["rollout_log_probs"]))  # fmt: skip
        rows[key].append({**row, "action_mask": prompt + entry["response_mask"]})
    return rows


def matched(case: str, method: str, tmp_path: Path) -> list[tuple[dict, dict]]:
    """advcli's rows of the case's gen_batch.dp folder, each with verl's row of the same
    generated ids and log-probs, every row of each matched once."""
    expected = dumped_rows(case)
    got = annotated(tmp_path, next((REAL / case / "skip").glob("*/GBS4_N4_*")), method=method)
    assert len(got) == sum(map(len, expected.values())) == 32
    pairs = [(row, expected[(row["step"], tuple(row["input_ids"]), tuple(row["logprobs"]))]
              .pop()) for row in got]  # fmt: skip
    assert not any(expected.values())
    return pairs


@pytest.mark.parametrize("case", CASES)
def test_gen_batch_holds_the_ids_rewards_and_groups_verl_generated(tmp_path, case):
    """Every row's ids are a line's generated ids (prompt and response unpadded, the end of
    turn where the engine made one), its action mask verl's response_mask, its log-probs the
    engine's, its reward the line's score, and its GRPO advantage verl's own
    compute_advantage's, to float32."""
    pairs = matched(case, "grpo", tmp_path)
    for row, verl in pairs:
        assert row["reward"] == verl["score"] and row["action_mask"] == verl["action_mask"]
        assert row["advantage"] == pytest.approx(verl["grpo_advantage"], abs=2e-7, rel=2e-7)
    if case == "tokens_multiturn":  # the observation between the turns is no action
        assert all(0 in r["action_mask"][r["action_mask"].index(1) :] for r, _ in pairs)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize(("method", "verls"), [("reinforce-pp", "reinforce_plus_plus"),
                                                ("opo", "opo")])  # fmt: skip
def test_token_estimators_give_verls_own_advantages(tmp_path, case, method, verls):
    """verl's compute_advantage on the batch the rollout dump was written from, per response
    token (0 on the observation tokens), is advcli's under verl's convention, to float32."""
    for row, verl in matched(case, method, tmp_path):
        response = row["advantages"][row["action_mask"].index(1) :]
        assert response == pytest.approx(verl[f"{verls}_advantages"], abs=1e-6, rel=1e-6)


def test_its_advantages_are_a_float64_loop_over_its_blocks_of_n(tmp_path):
    """GRPO as verl computes it, in float64, over each step's blocks of 4 rows (rollout.n from
    the folder's N4): (r − mean) / (std + 1e-6), std with Bessel's correction."""
    got = annotated(tmp_path, RUN / "2" / "gen_batch.dp")
    assert [r["prompt_id"] for r in got] == [f"2:{i // 4}" for i in range(16)]
    for start in range(0, 16, 4):
        block = got[start : start + 4]
        rewards = [r["reward"] for r in block]
        mean = sum(rewards) / 4
        std = (sum((x - mean) ** 2 for x in rewards) / 3) ** 0.5
        for r in block:
            assert r["advantage"] == pytest.approx((r["reward"] - mean) / (std + 1e-6), rel=1e-6)
            assert len(set(map(tuple, (b["input_ids"][: b["action_mask"].index(1)]
                                       for b in block)))) == 1  # fmt: skip


def test_outside_verls_folder_the_group_size_is_asked_for_and_checked(tmp_path):
    lone = tmp_path / "7" / "gen_batch.dp"
    lone.parent.mkdir()
    shutil.copyfile(RUN / "1" / "gen_batch.dp", lone)
    text = refused(lone)
    assert "no uid, and no GBS{batch}_N{n}_in{prompt}_out{response} folder" in text
    assert "Hint: pass --group-size (rollout.n)" in text
    same = annotated(tmp_path, lone, options=("--group-size", "4"))
    assert [r["reward"] for r in same] == [r["reward"] for r in annotated(tmp_path, RUN / "1")]
    assert "16 rows are not blocks of 3 rollouts" in refused(lone, "--group-size", "3")
    assert "row 4, column 'prompts': not the prompt of the rows before it in its block of 8" in (
        refused(lone, "--group-size", "8"))  # fmt: skip


def test_without_from_it_names_the_reader():
    proc = run("schema", str(RUN / "1" / "gen_batch.dp"))
    text = proc.stderr.decode()
    assert proc.returncode == 2 and text.count("\n") == 1, text
    assert "a pickle of verl's DataProto (its skip.rollout dump)" in text
    assert "Hint: read it with --from verl" in text


# --------------------------------------------------------------------------- hostile pickles


def proto(state: bytes) -> bytes:
    """A DataProto pickle as verl's save_to_disk writes one (its class, made empty, its state
    set), around the opcodes ``state`` that push the state."""
    return b"\x80\x02cverl.protocol\nDataProto\n)\x81" + state + b"b."


def ops(value: Any) -> bytes:
    return pickle.dumps(value, protocol=2)[2:-1]


class Evil:
    def __reduce__(self):
        import os

        return (os.system, ("touch pwned",))


def nested(data_pkl: bytes) -> bytes:
    """A torch.save-style archive holding ``data_pkl``, as a DataProto's batch bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("archive/data.pkl", data_pkl)
        z.writestr("archive/byteorder", "little")
    return buffer.getvalue()


def bomb() -> list[Any]:
    value: list[Any] = [1]
    for _ in range(60):
        value = [value, value]  # 2^60 values once flattened, a few hundred bytes pickled
    return value


HOSTILE = {
    "a global that would run a command": (
        proto(ops((None, {"uid": np.array([Evil()], dtype=object)}, {}))),
        "refused to load posix.system"),
    "a plain pickle of a command": (pickle.dumps(Evil()), "refused to load posix.system"),
    "a class other than DataProto": (
        b"\x80\x02cverl.protocol\nDataProtoItem\n)\x81}b.",
        "refused to load verl.protocol.DataProtoItem"),
    "a global in the batch's archive": (
        proto(ops((nested(b"\x80\x02ctensordict._reductions\n_make_td\n)R."), {}, {}))),
        "refused to load tensordict._reductions._make_td"),
    "an exponential nest": (
        proto(ops((None, {}, {"timing": bomb()}))), "would take more than"),
    "a memo index never set": (b"\x80\x02cverl.protocol\nDataProto\n)\x81h\x07b.",
                               "cannot read the rollouts safely"),
    "a huge memo index": (b"\x80\x02cverl.protocol\nDataProto\n)\x81j\xff\xff\xff\x7fb.",
                          "cannot read the rollouts safely"),
    "a batch that is no archive": (proto(ops((b"not a zip", {}, {}))),
                                   "the DataProto's batch is not a torch.save archive"),
}  # fmt: skip


@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_pickle_is_refused_in_one_line_running_nothing(tmp_path, case):
    data, said = HOSTILE[case]
    path = tmp_path / "GBS1_N1_in1_out1" / "1" / "gen_batch.dp"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    text = refused(path)
    assert text.startswith(f"advcli: error: {path}: ") and said in text, text
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()


# ------------------------------------------------------------- batches written as tensordict does


def archive(leaves: dict[str, np.ndarray], metadata: dict[str, Any] | None = None) -> bytes:
    """A consolidated TensorDict of ``leaves`` (their torch element type named after their numpy
    one, ``bfloat16`` where a leaf is named so), as tensordict's torch.save writes it: one byte
    storage, and ``_rebuild_tensordict_files_consolidated`` of the metadata naming each leaf's
    type, shape and byte range; ``metadata`` adds to or replaces that metadata."""
    raw, described = b"", {}
    for name, values in leaves.items():
        kind = "bfloat16" if name.endswith("bf16") else str(values.dtype)
        data = (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes() if (
            kind == "bfloat16") else values.tobytes()  # fmt: skip
        described[name] = (f"torch.{kind}", list(values.shape), len(raw), len(raw) + len(data),
                           False)  # fmt: skip
        raw += data
    metadata = {"cls": "TensorDict", "non_tensors": {}, "leaves": described,
                "cls_metadata": {"batch_size": [4], "device": None, "is_locked": False},
                **(metadata or {})}  # fmt: skip
    storage = (b"(" + ops("storage") + b"ctorch\nByteStorage\n" + ops("0") + ops("cpu")
               + ops(len(raw)) + b"tQ")  # fmt: skip
    tensor = (b"ctorch._utils\n_rebuild_tensor_v2\n(" + storage + ops(0) + ops((len(raw),))
              + ops((1,)) + b"\x89ccollections\nOrderedDict\n)RtR")  # fmt: skip
    pkl = (b"\x80\x02ctensordict._reductions\n_rebuild_tensordict_files_consolidated\n("
           + ops(metadata) + tensor + b"tR.")  # fmt: skip
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/data/0", raw)
    return buffer.getvalue()


def batch(**changed: np.ndarray) -> dict[str, np.ndarray]:
    """Four rows of a prompt of up to 3 tokens (left-padded) and a response of up to 2
    (right-padded), the second response token of row 1 an observation (response_mask 0)."""
    tensors = {
        "prompts": np.array([[0, 5, 6], [0, 5, 6], [7, 8, 9], [7, 8, 9]]),
        "responses": np.array([[11, 12], [13, 14], [15, 0], [16, 0]]),
        "attention_mask": np.array(
            [[0, 1, 1, 1, 1], [0, 1, 1, 1, 1], [1, 1, 1, 1, 0], [1, 1, 1, 1, 0]]
        ),  # fmt: skip
        "response_mask": np.array([[1, 1], [1, 0], [1, 0], [1, 0]]),
        "rm_scores": np.array([[0, 1], [0, 0], [0.5, 0], [0.25, 0]], dtype=np.float32),
    }
    return {**tensors, **changed}


def written(tmp_path: Path, tensors: dict[str, np.ndarray], uid: list[str] | None = None,
            metadata: dict[str, Any] | None = None) -> Path:  # fmt: skip
    non_tensor = {} if uid is None else {"uid": np.array(uid, dtype=object)}
    path = tmp_path / "run_x" / "GBS2_N2_in3_out2" / "5" / "gen_batch.dp"
    path.parent.mkdir(parents=True)
    path.write_bytes(proto(ops((archive(tensors, metadata), non_tensor, {"step": 5}))))
    return path


def test_a_batch_is_read_as_verls_trainer_reads_it(tmp_path):
    """ids without the padding, the action mask verl's response_mask, the reward the sum of
    rm_scores; blocks of N2 from the folder, or the uid where the file has one."""
    rows = annotated(tmp_path, written(tmp_path, batch()))
    assert [r["input_ids"] for r in rows] == [[5, 6, 11, 12], [5, 6, 13, 14], [7, 8, 9, 15],
                                              [7, 8, 9, 16]]  # fmt: skip
    assert [r["action_mask"] for r in rows] == [[0, 0, 1, 1], [0, 0, 1, 0], [0, 0, 0, 1],
                                                [0, 0, 0, 1]]  # fmt: skip
    assert [r["reward"] for r in rows] == [1.0, 0.0, 0.5, 0.25]
    assert [r["prompt_id"] for r in rows] == ["5:0", "5:0", "5:1", "5:1"]
    crossed = batch(prompts=np.array([[0, 5, 6], [7, 8, 9], [0, 5, 6], [7, 8, 9]]))
    rows = annotated(tmp_path, written(tmp_path / "uid", crossed, uid=["a", "b", "a", "b"]))
    assert [r["prompt_id"] for r in rows] == ["5:a", "5:b", "5:a", "5:b"]


def test_bfloat16_tensors_and_sub_tensordicts_are_read(tmp_path):
    sub = {"cls": "TensorDict", "non_tensors": {}, "cls_metadata": {},
           "leaves": {"x": ("torch.int64", [4, 3], 0, 96, False)}}  # fmt: skip
    scores = np.array([[0, 1.5], [0, 0], [-2, 0], [0.25, 0]], dtype=np.float32)
    tensors = {**batch(), "rm_scores_bf16": scores}
    proto_read = verl_proto.load(str(written(tmp_path, tensors, metadata={"extra": sub})))
    assert proto_read.batch["rm_scores_bf16"].tolist() == scores.tolist()
    assert proto_read.batch["extra.x"].tolist() == batch()["prompts"].tolist()
    assert proto_read.meta_info == {"step": 5}


REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "a nested (jagged) tensor": (
        {"metadata": {"leaves": {"<NJT_VALUES>responses": ("torch.int64", [2], 0, 16, False)}}},
        "a nested (jagged) tensor '<NJT_VALUES>responses'"),
    "a leaf past the storage": (
        {"metadata": {"leaves": {"prompts": ("torch.int64", [4, 3], 0, 10_000, False)}}},
        "a TensorDict leaf reaches past its storage"),
    "a float8 tensor": (
        {"metadata": {"leaves": {"prompts": ("torch.float8_e4m3fn", [4], 0, 4, False)}}},
        "a tensor of torch.float8_e4m3fn"),
    "no reward": ({"drop": "rm_scores"}, "no rm_scores or token_level_scores"),
    "a response mask of another width": (
        {"response_mask": np.ones((4, 3), dtype=np.int64)},
        "column 'response_mask': shape [4, 3], where [4, 2] is expected"),
    "fractional prompts": ({"prompts": np.full((4, 3), 0.5)},
                           "column 'prompts': a tensor of float64, where verl writes integers"),
}  # fmt: skip


@pytest.mark.parametrize("case", REFUSED)
def test_a_batch_verl_does_not_write_is_refused_in_one_line(tmp_path, case):
    change, said = REFUSED[case]
    tensors = batch(**{k: v for k, v in change.items() if isinstance(v, np.ndarray)})
    tensors.pop(change.get("drop", ""), None)
    path = written(tmp_path, tensors, metadata=change.get("metadata"))
    assert said in refused(path)
