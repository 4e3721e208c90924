"""What a framework's dump leaves out, settled from its logged advantages by the job
(:mod:`advcli.run.settling`), not by opening the log."""

from __future__ import annotations

import pytest

from advcli import presets
from advcli.errors import ContradictsLog
from advcli.presets import PresetOptions
from advcli.run import jobs, logs, settling
from tests.conftest import SAMPLE

TRL = [str(SAMPLE / "trl" / "completions")]
FOUND = (
    "`group_size=4` `reward_columns` accuracy_reward,format_reward "
    "(found from TRL's logged advantages)"
)


def test_opening_a_dump_reads_it_as_told_and_settles_nothing() -> None:
    """No group size given and none found: opening runs no estimator to find one."""
    log = logs.open_log(TRL, preset=presets.get("trl"))
    assert log.settled is None and log.options == PresetOptions()
    assert log.source.n_rows == 72 and log.roles["reward"] == "reward"


def test_the_job_settles_the_group_size_and_reward_columns_on_opening() -> None:
    log = jobs.job(TRL, preset="trl").open()
    assert log.settled == FOUND
    assert log.options.group_size == 4
    assert log.options.reward_columns == ["accuracy_reward", "format_reward"]


def test_a_group_size_the_logged_advantages_contradict_is_refused() -> None:
    trl = presets.get("trl")

    def open_with(options: PresetOptions) -> logs.Log:
        return logs.open_log(TRL, preset=trl, options=options)

    with pytest.raises(ContradictsLog) as refused:
        settling.settle(trl, PresetOptions(group_size=3), open_with)
    assert str(refused.value).startswith("`group_size=3`: ")
    assert str(refused.value).endswith(
        "completions_00003.parquet: 72 of its rows are not whole groups of 3 (read as "
        "evaluation rows or a cut group), and TRL's logged advantages fit `group_size=4`. "
        "Hint: `group_size=4`"
    )
