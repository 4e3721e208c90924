"""Every command run both ways, through the command line and through the Python API, on the
same inputs and options: the same output files, byte for byte (a shard folder: its shards,
and its manifest's JSON), and the same result (``--json`` against ``as_dict()``), less the
seconds it took and where it wrote."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Protocol

import orjson
import pytest

import advcli
from advcli.cli.app import app
from advcli.cli.flags import result_on_command_line
from advcli.critic.options import CriticOptions
from advcli.io import manifests
from advcli.io.folders import Folder
from advcli.presets import PresetOptions
from advcli.reports import ReportOptions
from advcli.shards import ShardOptions
from tests.conftest import ROOT, SAMPLE, run

LOG = str(SAMPLE / "rollouts.parquet")
JSONL = str(SAMPLE / "rollouts.jsonl")
TRL = str(SAMPLE / "trl" / "completions")
VERL = str(SAMPLE / "verl" / "rollout")
HEALTH = str(SAMPLE / "health.parquet")  # both log-prob streams
NEMO_RL = str(ROOT / "tests" / "fixtures" / "real" / "nemo-rl" / "default")  # with token ids
HEALTH = str(ROOT / "tests" / "fixtures" / "refs" / "health" / "log.parquet")  # both streams
CRITIC = str(SAMPLE / "critic.onnx")
TRL_REWARDS = ["accuracy_reward", "format_reward"]
UNCOMPARED = ("seconds", "tokens_per_second", "output", "folder")  # how fast, where: not what


def printed(*args: str, code: int = 0) -> dict[str, Any]:
    """What ``advcli ARGS --json`` printed (its exit status ``code``)."""
    proc = run(*args, "--json")
    assert proc.returncode == code, proc.stderr.decode()
    found: dict[str, Any] = json.loads(proc.stdout)
    return found


class Found(Protocol):
    """A command's result (``audit``'s ``Audit`` too): what ``--json`` prints is its dict."""

    def as_dict(self) -> dict[str, Any]: ...


def same_result(by_cli: dict[str, Any], by_api: Found) -> None:
    """The same result, once the API's is written as ``--json`` writes it (its options spelled
    as flags, tuples as lists; the warnings last, an empty list where there are none)."""
    as_json = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
    said = result_on_command_line(by_api.as_dict(), app)  # its messages as the CLI spells them
    mine = json.loads(orjson.dumps(said, option=as_json))
    assert mine.pop("warnings", []) == by_cli.pop("warnings", [])
    assert list(mine) == list(by_cli)  # --json prints as_dict(), in its order
    for key in UNCOMPARED:
        by_cli.pop(key, None)
        mine.pop(key, None)
    assert mine == by_cli


SCHEMA = [
    ([LOG], {}),
    ([JSONL, "--col", "reward=reward"], {"col": ["reward=reward"]}),
    ([TRL, "--from", "trl"], {"from_": "trl"}),
    ([VERL, "--from", "verl"], {"from_": "verl"}),
]


@pytest.mark.parametrize(("args", "keywords"), SCHEMA)
def test_schema(args: list[str], keywords: dict[str, Any]) -> None:
    same_result(printed("schema", *args), advcli.schema(args[0], **keywords))


ANNOTATE = [
    ([LOG, "--method", "grpo"], {"method": "grpo"}),
    (
        [LOG, "--method", "gae", "--convention", "verl", "--gamma", "0.99", "--lam", "0.9"],
        {"method": "gae", "convention": "verl", "gamma": 0.99, "lam": 0.9},
    ),
    ([LOG, "--method", "rloo", "--singleton", "raw"], {"method": "rloo", "singleton": "raw"}),
    (
        [LOG, "--method", "gdpo", "--reward-columns", "reward"],
        {"method": "gdpo", "preset_options": PresetOptions(reward_columns=["reward"])},
    ),
    ([TRL, "--from", "trl", "--method", "gdpo"], {"from_": "trl", "method": "gdpo"}),
    (
        [TRL, "--from", "trl", "--method", "gdpo", "--reward-columns", ",".join(TRL_REWARDS)],
        {"from_": "trl", "method": "gdpo", "preset_options": PresetOptions(TRL_REWARDS)},
    ),
    (
        [
            TRL,
            "--from",
            "trl",
            "--method",
            "gdpo",
            "--reward-columns",
            ",".join(TRL_REWARDS),
            "--reward-weights",
            "accuracy_reward=1,format_reward=0.5",
            "--group-size",
            "4",
        ],
        {
            "from_": "trl",
            "method": "gdpo",
            "preset_options": PresetOptions(
                TRL_REWARDS,
                reward_weights={"accuracy_reward": 1.0, "format_reward": 0.5},
                group_size=4,
            ),
        },
    ),
    ([VERL, "--from", "verl", "--method", "rloo"], {"from_": "verl", "method": "rloo"}),
    (
        [JSONL, "--method", "grpo", "--format", "jsonl", "--nonfinite", "null"],
        {"method": "grpo", "format": "jsonl", "nonfinite": "null"},
    ),
    (
        [HEALTH, "--method", "grpo", "--correction", "seq-mean-k3", "--correction-bounds", "0.01"],
        {"method": "grpo", "correction": "seq-mean-k3", "correction_bounds": "0.01"},
    ),
    (
        [HEALTH, "--method", "grpo", "--convention", "trl", "--correction", "sequence_mask"],
        {"method": "grpo", "convention": "trl", "correction": "sequence_mask"},
    ),
    (
        [LOG, "--method", "gae", "--critic", CRITIC, "--device", "cpu"],
        {"method": "gae", "critic": CriticOptions(CRITIC, device="cpu")},
    ),
]


@pytest.mark.parametrize(("args", "keywords"), ANNOTATE)
def test_annotate(tmp_path: Path, args: list[str], keywords: dict[str, Any]) -> None:
    by_cli, by_api = tmp_path / "cli.parquet", tmp_path / "api.parquet"
    if keywords.get("format") == "jsonl":
        by_cli, by_api = tmp_path / "cli.jsonl", tmp_path / "api.jsonl"
    shown = printed("annotate", *args, "--out", str(by_cli))
    same_result(shown, advcli.annotate(args[0], by_api, **keywords))
    assert by_api.read_bytes() == by_cli.read_bytes()


def test_annotate_takes_the_trl_reward_columns_as_gdpo_given_none(tmp_path: Path) -> None:
    """The TRL reader's reward columns are gdpo's whether the reader found them or was told."""
    found, told = tmp_path / "found.parquet", tmp_path / "told.parquet"
    advcli.annotate(TRL, found, from_="trl", method="gdpo")
    advcli.annotate(
        TRL, told, from_="trl", method="gdpo", preset_options=PresetOptions(TRL_REWARDS)
    )
    assert found.read_bytes() == told.read_bytes()


SCORE = [
    ([LOG, "--critic", CRITIC, "--device", "cpu"], {"critic": CriticOptions(CRITIC, "cpu")}),
    (
        [JSONL, "--critic", CRITIC, "--device", "cpu", "--batch-tokens", "8"],
        {"critic": CriticOptions(CRITIC, "cpu", batch_tokens=8)},
    ),
]


@pytest.mark.parametrize(("args", "keywords"), SCORE)
def test_score(tmp_path: Path, args: list[str], keywords: dict[str, Any]) -> None:
    by_cli, by_api = tmp_path / "cli.parquet", tmp_path / "api.parquet"
    shown = printed("score", *args, "--out", str(by_cli))
    keywords = dict(keywords)
    same_result(shown, advcli.score(args[0], by_api, keywords.pop("critic"), **keywords))
    assert by_api.read_bytes() == by_cli.read_bytes()


AUDIT = [
    ([LOG], {}),
    ([LOG, "--zero-variance-tol", "0.5", "--near-tie", "0.1"], {"tol": 0.5, "near_tie": 0.1}),
    ([TRL, "--from", "trl"], {"from_": "trl"}),
    (
        [TRL, "--from", "trl", "--reward-columns", ",".join(TRL_REWARDS)],
        {"from_": "trl", "preset_options": PresetOptions(TRL_REWARDS)},
    ),
    ([VERL, "--from", "verl"], {"from_": "verl"}),
    (
        [HEALTH, "--correction", "token-mask", "--correction-bounds", "0.5,2", "--by", "step"],
        {"correction": "token-mask", "correction_bounds": "0.5,2", "by": "step"},
    ),
    ([HEALTH, "--convention", "nemo-rl"], {"convention": "nemo-rl"}),
]


@pytest.mark.parametrize(("args", "keywords"), AUDIT)
def test_audit(args: list[str], keywords: dict[str, Any]) -> None:
    same_result(printed("audit", *args), advcli.audit(args[0], **keywords))


REPORT = [
    ([LOG, "--method", "grpo"], {"method": "grpo"}),
    ([LOG], {}),
    (
        [LOG, "--method", "grpo", "--zero-variance-tol", "0.5"],
        {"method": "grpo", "zero_variance_tol": 0.5},
    ),
    ([LOG, "--zero-variance-tol", "0.5"], {"zero_variance_tol": 0.5}),
    (
        [LOG, "--method", "gae", "--gamma", "0.9", "--detail-groups", "1", "--seed", "3"],
        {"method": "gae", "gamma": 0.9, "options": ReportOptions(detail_groups=1, seed=3)},
    ),
    ([TRL, "--from", "trl", "--method", "gdpo"], {"from_": "trl", "method": "gdpo"}),
    (
        [TRL, "--from", "trl", "--method", "gdpo", "--reward-columns", ",".join(TRL_REWARDS)],
        {"from_": "trl", "method": "gdpo", "preset_options": PresetOptions(TRL_REWARDS)},
    ),
    ([VERL, "--from", "verl", "--method", "rloo"], {"from_": "verl", "method": "rloo"}),
]


@pytest.mark.parametrize(("args", "keywords"), REPORT)
def test_report(tmp_path: Path, args: list[str], keywords: dict[str, Any]) -> None:
    pytest.importorskip("bokeh")
    by_cli, by_api = tmp_path / "cli.html", tmp_path / "api.html"
    shown = printed("report", *args, "--out", str(by_cli))
    same_result(shown, advcli.report(args[0], by_api, **keywords))
    assert bokeh_ids_renumbered(by_api.read_bytes()) == bokeh_ids_renumbered(by_cli.read_bytes())


def bokeh_ids_renumbered(page: bytes) -> bytes:
    """The page with bokeh's model ids ("p1009") numbered from the first it holds: bokeh counts
    them up through the process, and this one has drawn other pages before."""
    first_seen: dict[bytes, bytes] = {}

    def renumbered(match: re.Match[bytes]) -> bytes:
        return first_seen.setdefault(match.group(0), b'"p%d"' % len(first_seen))

    return re.sub(rb'"p\d+"', renumbered, page)


SHARD = [
    ([LOG, "--method", "grpo"], {"method": "grpo"}),
    (
        [LOG, "--method", "gae", "--param", "gamma=0.9", "--param", "lam=0.8", "--pack", "64"],
        {"method": "gae", "param": ["gamma=0.9", "lam=0.8"], "opts": ShardOptions(pack=64)},
    ),
    (
        [LOG, "--method", "rloo", "--split", "val=0.3", "--shuffle", "--layout", "verl"],
        {"method": "rloo", "opts": ShardOptions(split="val=0.3", shuffle=True, layout="verl")},
    ),
    ([NEMO_RL, "--from", "nemo-rl", "--method", "rloo"], {"from_": "nemo-rl", "method": "rloo"}),
    (
        [HEALTH, "--method", "grpo", "--correction", "sequence-truncate", "--layout", "trl"],
        {"method": "grpo", "correction": "sequence-truncate", "opts": ShardOptions(layout="trl")},
    ),
    (
        [
            HEALTH,
            "--method",
            "grpo",
            "--correction",
            "token-k1",
            "--correction-bounds",
            "0.9,1.1",
            "--layout",
            "verl",
        ],
        {
            "method": "grpo",
            "correction": "token-k1",
            "correction_bounds": "0.9,1.1",
            "opts": ShardOptions(layout="verl"),
        },
    ),
    (
        [
            HEALTH,
            "--method",
            "grpo",
            "--correction",
            "token-truncate",
            "--pack",
            "64",
        ],
        {
            "method": "grpo",
            "correction": "token-truncate",
            "opts": ShardOptions(pack=64),
        },
    ),
]


def shard_folder(folder: Path) -> tuple[dict[str, bytes], Any]:
    """A shard folder's files but the manifest, each file's bytes; the manifest's JSON."""
    read = manifests.read_json(Folder(str(folder)))
    assert read is not None
    files = {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*.parquet"))
        if p.name != manifests.NAMES[0]
    }
    return files, read[1]


@pytest.mark.parametrize(("args", "keywords"), SHARD)
def test_shard_and_verify(tmp_path: Path, args: list[str], keywords: dict[str, Any]) -> None:
    by_cli, by_api = tmp_path / "cli", tmp_path / "api"
    shown = printed("shard", *args, "--out", str(by_cli))
    same_result(shown, advcli.shard(args[0], by_api, **keywords))
    (cli_files, cli_manifest), (api_files, api_manifest) = (
        shard_folder(by_cli),
        shard_folder(by_api),
    )
    assert cli_files and api_files == cli_files
    assert api_manifest == cli_manifest
    same_result(printed("verify", str(by_api)), advcli.verify(by_cli))


CHECK = [
    ([TRL, "--from", "trl"], {"from_": "trl"}, 0),
    ([NEMO_RL, "--from", "nemo-rl"], {"from_": "nemo-rl"}, 0),
    ([TRL, "--from", "trl", "--method", "gdpo"], {"from_": "trl", "method": "gdpo"}, 4),
    (
        [TRL, "--from", "trl", "--method", "gdpo", "--reward-columns", ",".join(TRL_REWARDS)],
        {"from_": "trl", "method": "gdpo", "preset_options": PresetOptions(TRL_REWARDS)},
        4,
    ),
    (
        [TRL, "--from", "trl", "--scale", "batch", "--tol", "0.001"],
        {"from_": "trl", "scale": "batch", "tol": 0.001},
        4,
    ),
]


@pytest.mark.parametrize(("args", "keywords", "code"), CHECK)
def test_check(args: list[str], keywords: dict[str, Any], code: int) -> None:
    same_result(printed("check", *args, code=code), advcli.check(args[0], **keywords))
