"""The parameters each framework's own implementation uses (docs/semantics.md, "Conventions").

A convention fixes defaults; every field can still be overridden by its own command-line flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

EpsPlacement = Literal["add", "max"]
Singleton = Literal["zero", "raw", "error", "drop"]
Observations = Literal["skip", "step"]
Whiten = Literal["none", "batch"]


@dataclass(frozen=True)
class Convention:
    """Defaults of one framework.

    ``eps_placement`` is ``"add"`` for ``std + eps`` and ``"max"`` for ``max(std, eps)``.
    ``temporal_whiten`` is the whitening the framework applies to GAE/MC/TD advantages;
    ``whiten_ddof`` the ddof of that whitening (REINFORCE++ always whitens).
    """

    name: str
    std_ddof: int
    eps: float
    eps_placement: EpsPlacement
    singleton: Singleton
    observations: Observations
    temporal_whiten: Whiten
    whiten_ddof: int


CONVENTIONS: dict[str, Convention] = {
    c.name: c
    for c in (
        Convention("seed", 0, 1e-6, "add", "zero", "skip", "none", 1),
        Convention("verl", 1, 1e-6, "add", "raw", "skip", "batch", 1),
        Convention("trl", 1, 1e-4, "add", "zero", "skip", "none", 1),
        Convention("openrlhf", 1, 1e-9, "add", "error", "step", "batch", 0),
        Convention("torchrl", 1, 1e-6, "max", "error", "skip", "none", 1),
    )
}

WHITEN_EPS = 1e-8
"""Whitening is ``(x - mean) / sqrt(var + WHITEN_EPS)``."""
