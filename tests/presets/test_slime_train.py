"""``--from slime`` on a ``--dump-details`` folder slime@624b824's own code wrote
(``tools/dumps/slime_train.py``: two data-parallel ranks, the train dump gathered by torch):
the rollout dump joined to the train dump, whose per-token advantages ``check`` compares."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.presets.test_real_dumps import REAL, run

SLIME = REAL / "slime-train"


def _check(inputs: Path, *options: str) -> dict:
    proc = run("check", str(inputs), "--from", "slime", *options, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _truth(case: str) -> list[dict]:
    return json.loads((SLIME / case / "truth.json").read_text())["samples"]


@pytest.mark.parametrize("inputs", ["default", "default/train_data/0.pt"])
def test_check_reproduces_slimes_grpo_advantages(inputs: str) -> None:
    """GRPO (slime's defaults): (R − mean) / (std + 1e-6) of the raw rewards, on every
    loss-mask token; a train dump named alone is read through its rollout dump."""
    result = _check(SLIME / inputs)
    assert result["ok"] and result["compared"] == "per token" and result["rows"] == 8
    assert result["max_abs_difference"] <= 1e-6


def test_check_reproduces_slimes_reinforce_plus_plus_with_kl(tmp_path: Path) -> None:
    """REINFORCE++ with kl_coef 0.05 against the reference model, whitened over the batch's
    loss-mask tokens: the KL of the trainer's own log-probabilities."""
    case = SLIME / "reinforce_plus_plus_kl"
    result = _check(case, "--method", "reinforce-pp", "--kl-coef", "0.05")
    assert result["ok"] and result["max_abs_difference"] <= 1e-6
    out = tmp_path / "o.parquet"
    proc = run("annotate", str(case), "--from", "slime", "--method", "grpo", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = pq.read_table(out).to_pylist()
    for row, sample in zip(rows, _truth("reinforce_plus_plus_kl"), strict=True):
        n = len(sample["log_probs"])
        assert row["trainer_logprobs"][-n:] == pytest.approx(sample["log_probs"], abs=1e-7)
        assert row["ref_logprobs"][-n:] == pytest.approx(sample["ref_log_probs"], abs=1e-7)
        assert row["entropies"][-n:] == pytest.approx(sample["entropy"], abs=1e-7)
        assert row["source_returns"][-n:] == pytest.approx(sample["returns"], abs=1e-7)
    # the sampler's stream beside it, at the same positions (the first sample's, read off the
    # rollout dump by hand: torch_file.load of rollout_data/0.pt)
    first = rows[0]
    assert first["logprobs"] == pytest.approx(
        [0.0] * 4 + [-6.1409010887146, -4.653786659240723, -7.375363349914551, -4.014739513397217]
    )
    assert first["trainer_logprobs"][4:] == pytest.approx(
        [-6.1399927, -4.651434, -7.3702264, -4.015406]
    )


def test_tensors_are_read_without_torch() -> None:
    """The train dump's tensors rebuilt from their storages with torch not importable."""
    code = (
        "import sys, json; sys.modules['torch'] = None\n"
        "from advcli.presets import torch_file\n"
        f"d = torch_file.load({str(SLIME / 'default' / 'train_data' / '0.pt')!r})\n"
        "print(json.dumps([s['advantages'].tolist() for s in d['samples']]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [s["advantages"] for s in _truth("default")]


def test_a_train_dump_without_its_rollout_dump_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "train_data").mkdir()
    shutil.copy(SLIME / "default" / "train_data" / "0.pt", tmp_path / "train_data" / "0.pt")
    proc = run("check", str(tmp_path / "train_data" / "0.pt"), "--from", "slime")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert "is read with the rollout dump of the same number" in proc.stderr


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.update(rollout_position=99),
         "row 0, column 'rollout_position': rollout_position 99 is not a sample of the rollout"),
        (lambda s: s.update(tokens=s["tokens"].flip(0)),
         "row 0, column 'tokens': its tokens are not those of the rollout dump's sample 0"),
    ],
)  # fmt: skip
def test_a_train_dump_that_does_not_fit_its_rollout_dump_is_one_line(
    tmp_path: Path, edit, message: str
) -> None:
    torch = pytest.importorskip("torch")
    folder = tmp_path / "dump"
    shutil.copytree(SLIME / "default", folder)
    train = folder / "train_data" / "0.pt"
    dump = torch.load(train, weights_only=True)
    edit(next(s for s in dump["samples"] if s["rollout_position"] == 0))
    torch.save(dump, train)
    proc = run("check", str(folder), "--from", "slime")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert message in proc.stderr


def test_weight_versions_give_the_staleness(tmp_path: Path) -> None:
    """SGLang's weight versions as numbers (after updates): a sample's oldest turn is its
    version, its newest its last; rollout 0's step is 0. The dump's own (``default``) give none."""
    torch = pytest.importorskip("torch")
    folder = tmp_path / "dump"
    shutil.copytree(SLIME / "default", folder)
    rollout = folder / "rollout_data" / "0.pt"
    dump = torch.load(rollout, weights_only=True)
    dump["rollout_id"] = 3
    for i, sample in enumerate(dump["samples"]):
        sample["weight_versions"] = [str(3 - i % 2)] + ["3"] * (len(sample["weight_versions"]) - 1)
    torch.save(dump, rollout)
    out = json.loads(run("audit", str(folder), "--from", "slime", "--json").stdout)
    n = len(dump["samples"])
    turns = [len(s["weight_versions"]) for s in dump["samples"]]
    assert out["staleness"]["lag_histogram"] == {"0": (n + 1) // 2, "1": n // 2}
    mixed = sum(1 for i, k in enumerate(turns) if i % 2 and k > 1)
    assert out["staleness"]["mixed_version_share"] == mixed / n
    plain = json.loads(run("audit", str(SLIME / "default"), "--from", "slime", "--json").stdout)
    assert plain["staleness"] == "omitted: the log has no version column (role `version`)"
