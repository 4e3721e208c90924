"""``--from NAME``: read a log as a framework wrote it, into advcli's schema.

One preset per framework dump format, each in its own module:

- :mod:`~advcli.presets.verl` (verl's rollout and validation JSONL, V1 and legacy, and its
  ``skip.rollout`` dump with tokens, read by :mod:`~advcli.presets.verl_proto`);
- :mod:`~advcli.presets.trl` (TRL's completions Parquet);
- :mod:`~advcli.presets.nemo_rl` (NeMo-RL's train and validation JSONL, with tokens);
- :mod:`~advcli.presets.slime` (slime's and miles' ``.pt`` rollout dumps, with tokens; their
  samples checked in :mod:`~advcli.presets.slime_samples`);
- :mod:`~advcli.presets.prime_rl` (prime-rl's episode traces, with tokens; their node trees
  in :mod:`~advcli.presets.prime_rl_traces`, the trace stream in
  :mod:`~advcli.presets.prime_rl_stream`);
- :mod:`~advcli.presets.roll` (ROLL's columnar step dump);
- :mod:`~advcli.presets.tinker` (tinker-cookbook's rollout summaries, per-step rewards);
- :mod:`~advcli.presets.nemo_gym` (NeMo-Gym's rollouts.jsonl, with tokens);
- :mod:`~advcli.presets.open_instruct` (open-instruct's rollout traces, with tokens);
- :mod:`~advcli.presets.text` (OpenRLHF, AReaL and SkyRL text dumps).

:mod:`~advcli.presets.base` holds the protocol and the log source that reads through a preset.
"""

from __future__ import annotations

from advcli.errors import UsageError, did_you_mean
from advcli.presets.base import SHARED_WITH_METHODS, Preset, PresetOptions, PresetSource, Setting
from advcli.presets.nemo_gym import NemoGym
from advcli.presets.nemo_rl import NemoRl
from advcli.presets.open_instruct import OpenInstruct
from advcli.presets.prime_rl import PrimeRl
from advcli.presets.roll import Roll
from advcli.presets.slime import Miles, Slime
from advcli.presets.text import Areal, OpenRlhf, SkyRl
from advcli.presets.tinker import Tinker
from advcli.presets.trl import Trl
from advcli.presets.verl import Verl

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Verl(),
        Trl(),
        OpenRlhf(),
        NemoRl(),
        Areal(),
        Slime(),
        Miles(),
        PrimeRl(),
        SkyRl(),
        Roll(),
        Tinker(),
        NemoGym(),
        OpenInstruct(),
    )
}
"""Every preset, by the name ``--from`` takes."""

__all__ = [
    "PRESETS",
    "Preset",
    "PresetOptions",
    "SHARED_WITH_METHODS",
    "PresetSource",
    "Setting",
    "convention_for",
    "get",
    "looks_like",
]


def get(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        hint = did_you_mean(name, PRESETS)
        msg = f"`from_={name!r}`: unknown framework.{hint} Frameworks: {', '.join(PRESETS)}"
        raise UsageError(msg) from None


def convention_for(convention: str | None, preset: str | None) -> str | None:
    """The convention a run takes: the one given, else the framework's own (``--from``), else
    None (advcli's own)."""
    if convention is not None or preset is None:
        return convention
    return get(preset).convention


def looks_like(names: set[str]) -> Preset | None:
    """The framework whose dump a table with these columns looks like, if any."""
    return next((p for p in PRESETS.values() if p.matches(names)), None)
