"""The samples of slime's and miles' dumps (:mod:`advcli.presets.slime`) are read as the
Parquet and JSONL readers read a log: ids and counts are integers (a whole float too, as the
JSONL reader takes ids) and token ids are integers, so a fraction is refused at its row and
field, never truncated (two groups 0.25 and 0.75 were one group 0)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from advcli.presets import torch_file
from tests.conftest import run
from tests.presets import frameworks as fw

RS = [r for r in fw.rollouts() if r.step == 1]
REAL = Path(__file__).parents[1] / "fixtures" / "real"


def edited(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """The ``.pt`` file ``path`` read, edited and written back (its tensors as numpy arrays,
    which the reader reads too)."""
    data = torch_file.load(str(path))
    edit(data)
    fw.torch_save(data, path)


def first(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda data: data["samples"][0].update({field: value})


def refused(dump: Path, *options: str) -> str:
    proc = run("annotate", str(dump), *options, "--method", "grpo", "-o",
               str(dump.parent / "o.parquet"))  # fmt: skip
    text = proc.stderr.decode()
    assert proc.returncode == 1 and text.count("\n") == 1, text
    return text


ROLLOUT_CASES = {
    "fractional token ids": (first("tokens", [1, 5.9, 6.9, 7, 8, 9]),
                             "row 0, column 'tokens': expected a list of 64-bit integers, saw "
                             "[1, 5.9, 6.9, 7, 8, 9]"),
    "whole floats as token ids (as the Parquet and JSONL readers)": (
        first("tokens", [1.0, 5.0, 6.0, 7.0, 8.0, 9.0]),
        "row 0, column 'tokens': expected a list of 64-bit integers"),
    "negative token ids": (first("tokens", [1, -2, 3, 4, 5, 6]),
                           "row 0, column 'tokens': token id -2 is negative at token 1"),
    "fractional group indices": (
        lambda d: [s.update(group_index=0.25 if i % 2 else 0.75)
                   for i, s in enumerate(d["samples"])],
        "row 0, column 'group_index': expected an integer, saw 0.75"),
    "a fractional index": (first("index", 1.5), "column 'index': expected an integer, saw 1.5"),
    "a fractional response length": (first("response_length", 2.5),
                                     "column 'response_length': expected an integer, saw 2.5"),
    "a fractional rollout id": (first("rollout_id", 0.5),
                                "column 'rollout_id': expected an integer, saw 0.5"),
    "a fractional step": (lambda d: d.update(rollout_id=1.5),
                          "column 'rollout_id': expected an integer, saw 1.5"),
    "a mask of text": (first("loss_mask", ["1", 1]),
                       "column 'loss_mask': expected a list of numbers, saw ['1', 1]"),
    "a reward of text": (first("reward", {"acc": "1.0"}),
                         "column 'reward': expected a number, saw '1.0'"),
}  # fmt: skip


@pytest.mark.parametrize("case", ROLLOUT_CASES)
def test_a_rollout_dumps_ids_counts_and_tokens_are_integers(tmp_path, case):
    dump = fw.slime(tmp_path / "dump", RS)
    edit, message = ROLLOUT_CASES[case]
    edited(dump / "rollout_data" / "1.pt", edit)
    assert message in refused(dump, "--from", "slime", "--reward-key", "acc")


def test_whole_float_ids_and_counts_are_read_as_integers(tmp_path):
    """As the JSONL reader takes a whole float as an id: the same table as with integers."""
    dump = fw.slime(tmp_path / "ints", RS)
    floats = fw.slime(tmp_path / "floats", RS)

    def whole_floats(data: dict[str, Any]) -> None:
        data["rollout_id"] = float(data["rollout_id"])
        for s in data["samples"]:
            for field in ("group_index", "index", "response_length"):
                s[field] = float(s[field])

    edited(floats / "rollout_data" / "1.pt", whole_floats)
    tables = []
    for folder in (dump, floats):
        out = folder.parent / f"{folder.name}.parquet"
        proc = run("annotate", str(folder), "--from", "slime", "--reward-key", "acc",
                   "--method", "grpo", "-q", "-o", str(out))  # fmt: skip
        assert proc.returncode == 0, proc.stderr.decode()
        tables.append(pl.read_parquet(out))
    assert tables[0]["prompt_id"].dtype == pl.Int64
    assert tables[0].equals(tables[1])


def _sample(data: dict[str, Any], field: str, value: Any) -> None:
    if "samples" in data:  # slime's train dump
        data["samples"][0][field] = value
    else:  # miles': one list per field
        data["rollout_data"][field][0] = value


TRAIN_CASES = {
    "slime: a fractional rollout position": (
        "slime-train", "train_data/0.pt", lambda d: _sample(d, "rollout_position", 0.5),
        "row 0, column 'rollout_position': expected an integer, saw 0.5"),
    "slime: fractional token ids": (
        "slime-train", "train_data/0.pt", lambda d: d["samples"][0].update(
            tokens=d["samples"][0]["tokens"] + 0.5),
        "row 0, column 'tokens': expected a list of 64-bit integers"),
    "miles: a fractional sample index": (
        "miles-train", "train_data/0_0.pt", lambda d: _sample(d, "sample_indices", 0.5),
        "column 'sample_indices': expected a list of 64-bit integers"),
    "miles: a fractional total length": (
        "miles-train", "train_data/0_0.pt", lambda d: _sample(d, "total_lengths", 20.5),
        "row 0, column 'total_lengths': expected an integer, saw 20.5"),
    "miles: a fractional context-parallel size": (
        "miles-train", "train_data/0_0.pt", lambda d: d.update(cp_size=1.5),
        "column 'cp_size': expected an integer, saw 1.5"),
}  # fmt: skip


@pytest.mark.parametrize("case", TRAIN_CASES)
def test_a_train_dumps_ids_counts_and_tokens_are_integers(tmp_path, case):
    framework, victim, edit, message = TRAIN_CASES[case]
    dump = tmp_path / "dump"
    shutil.copytree(REAL / framework / "default", dump)
    edited(dump / victim, edit)
    preset = "miles" if framework == "miles-train" else "slime"
    assert message in refused(dump, "--from", preset)


MASKS = {  # a dump kind: its fixture, the file and its field holding a mask, --from
    "slime rollout dump": ("slime/multi_turn", "rollout_data/0.pt", "loss_mask", "slime"),
    "miles rollout dump": ("miles-train/default", "rollout_data/0.pt", "loss_mask", "miles"),
    "slime train dump": ("slime-train/default", "train_data/0.pt", "loss_masks", "slime"),
    "miles train dump": ("miles-train/default", "train_data/0_0.pt", "loss_masks", "miles"),
}


def _first_mask_value(data: dict[str, Any], field: str, value: Any) -> None:
    """The first sample's mask (a list or an array) made a list whose first value is ``value``."""
    at: str | int  # a sample's field, or a sample in a field's list
    if "samples" in data:  # a rollout dump, or slime's train dump
        masks, at = data["samples"][0], field
    else:  # miles' train dump: one list per field
        masks, at = data["rollout_data"][field], 0
    masks[at] = [value, *list(masks[at])[1:]]


@pytest.mark.parametrize("value", [float("nan"), -1, 0.5, 2])
@pytest.mark.parametrize("kind", MASKS)
def test_a_mask_value_other_than_0_or_1_is_refused_at_its_token(tmp_path, kind, value):
    """As every layout's mask: a value other than 0 or 1 was read as 1 (an action)."""
    fixture, victim, field, preset = MASKS[kind]
    dump = tmp_path / "dump"
    shutil.copytree(REAL / fixture, dump)
    edited(dump / victim, lambda data: _first_mask_value(data, field, value))
    text = refused(dump, "--from", preset)
    problem = f"mask value {value} at token 0; a mask holds only 0 and 1"
    assert f"{victim}: row 0, column '{field}': {problem}" in text, text


def _masks_as(form: Callable[[int], Any], data: dict[str, Any]) -> None:
    for sample in data["samples"]:
        sample["loss_mask"] = [form(v) for v in sample["loss_mask"]]


@pytest.mark.parametrize("form", [bool, float])
def test_a_mask_of_booleans_or_whole_floats_is_read_as_its_0s_and_1s(tmp_path, form):
    """The same advantages and action mask as from the dump's integer masks (some 0)."""
    outputs = []
    for name in ("integers", form.__name__):
        dump = tmp_path / name
        shutil.copytree(REAL / "slime" / "multi_turn", dump)
        if name != "integers":
            edited(dump / "rollout_data" / "0.pt", lambda data: _masks_as(form, data))
        proc = run("annotate", str(dump), "--from", "slime", "--method", "grpo", "-q",
                   "-o", str(dump / "o.parquet"))  # fmt: skip
        assert proc.returncode == 0, proc.stderr.decode()
        outputs.append(pl.read_parquet(dump / "o.parquet"))
    assert 0 in outputs[0]["action_mask"].explode().to_list()
    assert outputs[0].equals(outputs[1])
