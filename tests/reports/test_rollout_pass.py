"""The token view's overlay (:mod:`advcli.reports.rollout_pass`): each shown action token's
δ = trainer − sampler log-prob, and with ``--correction`` its weight and mask, against a
float64 loop over the log and :func:`advcli.core.correction.corrected`."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from advcli.core.correction import corrected
from advcli.run.correcting import correction_of
from tests.conftest import SAMPLE, run
from tests.reports.helpers import overlay, page_data, tokens

pytest.importorskip("bokeh")

LOG = Path(__file__).parents[1] / "fixtures" / "refs" / "health" / "log.parquet"


def _report(tmp_path: Path, *flags: str) -> dict:
    out = tmp_path / "report.html"
    proc = run("report", str(LOG), "--out", str(out), "--quiet", *flags)
    assert proc.returncode == 0, proc.stderr.decode()
    return page_data(out)


def _rollouts(data: dict) -> dict[str, dict]:
    """The detail rollouts by id (the log's row number: it has no rollout ids)."""
    return {r["id"]: r for group in data["details"].values() for r in group}


def _log_rows() -> list[dict]:
    return pq.read_table(LOG).to_pylist()


def test_each_action_tokens_delta_is_the_float64_loops(tmp_path):
    data = _report(tmp_path, "--method", "grpo")
    assert data["overlay"] == {"streams": True, "correction": None}
    shown = _rollouts(data)
    assert len(shown) == 24  # every rollout of the small log is in the detail sample
    for i, row in enumerate(_log_rows()):
        view = shown[str(i)]["tokens"]
        _, kind, _ = tokens(view)
        found = overlay(view)
        assert set(found) == {"delta"}  # no correction: no weight, no mask
        for t, (action, trainer, sampler) in enumerate(
            zip(row["action_mask"], row["trainer_logprobs"], row["logprobs"], strict=True)
        ):
            if action:
                assert kind[t] == 1
                assert found["delta"][t] == pytest.approx(float(trainer) - float(sampler), abs=1e-6)
            else:
                assert math.isnan(found["delta"][t])


@pytest.mark.parametrize(
    ("mode", "bounds"),
    [("token-mask", "0.9,1.1"), ("sequence-truncate", "2"), ("seq-mean-k3", "0.001")],
)
def test_weights_and_masks_are_corrections(tmp_path, mode, bounds):
    data = _report(tmp_path, "--correction", mode, "--correction-bounds", bounds)
    correction = correction_of(mode, bounds, None)
    assert correction is not None
    assert data["overlay"]["correction"]["mode"] == mode
    rows = _log_rows()
    trainer = np.concatenate([np.asarray(r["trainer_logprobs"], np.float32) for r in rows])
    sampler = np.concatenate([np.asarray(r["logprobs"], np.float32) for r in rows])
    action = np.concatenate([np.asarray(r["action_mask"], bool) for r in rows])
    offsets = np.cumsum([0] + [len(r["input_ids"]) for r in rows])
    want = corrected(trainer, sampler, action, offsets, correction)
    shown = _rollouts(data)
    masked_in_all = 0
    for i in range(len(rows)):
        found = overlay(shown[str(i)]["tokens"])
        at = slice(offsets[i], offsets[i + 1])
        np.testing.assert_array_equal(found["weight"], want.weights[at].astype(np.float32))
        np.testing.assert_array_equal(found["masked"], want.masked[at].astype(np.uint8))
        masked_in_all += int(found["masked"].sum())
    assert masked_in_all == int(want.masked.sum())


def test_a_hand_worked_token_mask(tmp_path):
    """ρ = e^δ per action token; token-mask [0.9, 1.1] keeps ρ inside, else weight 0."""
    data = _report(tmp_path, "--correction", "token-mask", "--correction-bounds", "0.9,1.1")
    row = _log_rows()[0]
    found = overlay(_rollouts(data)["0"]["tokens"])
    for t, action in enumerate(row["action_mask"]):
        if not action:
            assert (found["weight"][t], found["masked"][t]) == (1.0, 0)
            continue
        rho = math.exp(float(row["trainer_logprobs"][t]) - float(row["logprobs"][t]))
        inside = 0.9 <= rho <= 1.1
        assert found["masked"][t] == (0 if inside else 1)
        assert found["weight"][t] == pytest.approx(rho if inside else 0.0, rel=1e-6)


def test_without_the_trainer_stream_nothing_is_overlaid(tmp_path):
    out = tmp_path / "report.html"
    proc = run("report", str(SAMPLE / "rollouts.parquet"), "--method", "grpo", "--out", str(out))
    assert proc.returncode == 0, proc.stderr.decode()
    data = page_data(out)
    assert data["overlay"] == {"streams": False, "correction": None}
    for group in data["details"].values():
        for r in group:
            assert "tokens" not in r or overlay(r["tokens"]) == {}


def test_a_correction_without_the_trainer_stream_is_one_line(tmp_path):
    out = tmp_path / "report.html"
    proc = run("report", str(SAMPLE / "rollouts.parquet"), "--correction", "token-mask",
               "--out", str(out))  # fmt: skip
    err = proc.stderr.decode()
    assert proc.returncode == 1 and len(err.strip().splitlines()) == 1, err
    assert "'trainer_logprobs'" in err and "--correction" in err and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--correction", "tokn-mask"), "--correction tokn-mask: expected one of"),
        (("--correction-bounds", "0.5,2"), "--correction-bounds bound a correction"),
        (("--correction", "token-mask", "--correction-bounds", "2,x"), "expected HI or LO,HI"),
    ],
)
def test_bad_correction_options_are_one_line(tmp_path, flags, says):
    proc = run("report", str(LOG), "--out", str(tmp_path / "r.html"), *flags)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and len(err.strip().splitlines()) == 1, err
    assert says in err
