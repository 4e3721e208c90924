"""Method names, their parameters, and how a ``--convention`` fills in the ones not given."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from advcli.core.conventions import CONVENTIONS
from advcli.errors import UsageError

GROUP_METHODS = ("grpo", "rloo", "batch-mean")
TEMPORAL_METHODS = ("mc", "td", "gae", "reinforce-pp", "reinforce-pp-baseline")
METHODS = GROUP_METHODS + TEMPORAL_METHODS
VALUE_METHODS = ("mc", "td", "gae")


@dataclass
class Params:
    """Every parameter of a run, after the convention is applied. ``None`` means "not given"."""

    method: str
    convention: str = "seed"
    scale: str = "group"
    std_ddof: int | None = None
    eps: float | None = None
    eps_placement: str | None = None
    singleton: str | None = None
    zero_variance: str = "keep"
    zero_variance_tol: float = 1e-9
    batch_size: int | None = None
    partial: str = "drop"
    gamma: float = 1.0
    lam: float | str = 0.95
    alpha: float | None = None
    lam_critic: float = 1.0
    observations: str | None = None
    segments: str = "compaction"
    whiten: str | None = None
    whiten_ddof: int | None = None
    strict: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


_CHOICES = {
    "scale": ("group", "batch", "none"),
    "eps_placement": ("add", "max"),
    "singleton": ("zero", "raw", "error", "drop"),
    "zero_variance": ("keep", "drop"),
    "partial": ("drop", "keep"),
    "observations": ("skip", "step"),
    "segments": ("compaction", "chain"),
    "whiten": ("none", "batch"),
}


def resolve(params: Params) -> Params:
    """Check choices and ranges, and fill unset fields from the convention."""
    if params.method not in METHODS:
        msg = f"unknown method {params.method!r}. Methods: {', '.join(METHODS)}"
        raise UsageError(msg)
    if params.convention not in CONVENTIONS:
        msg = f"unknown convention {params.convention!r}. Conventions: {', '.join(CONVENTIONS)}"
        raise UsageError(msg)
    conv = CONVENTIONS[params.convention]
    defaults = {
        "std_ddof": conv.std_ddof,
        "eps": conv.eps,
        "eps_placement": conv.eps_placement,
        "singleton": conv.singleton,
        "observations": conv.observations,
        "whiten": conv.temporal_whiten if params.method in VALUE_METHODS else "none",
        "whiten_ddof": conv.whiten_ddof,
    }
    if params.method.startswith("reinforce-pp"):
        defaults["whiten"] = "batch"
    for f in fields(params):
        if getattr(params, f.name) is None and f.name in defaults:
            setattr(params, f.name, defaults[f.name])
    for name, choices in _CHOICES.items():
        if getattr(params, name) not in choices:
            flag = "--" + name.replace("_", "-")
            msg = f"{flag} {getattr(params, name)!r}: expected one of {', '.join(choices)}"
            raise UsageError(msg)
    if not 0.0 <= params.gamma <= 1.0:
        msg = f"--gamma {params.gamma}: expected a number in [0, 1]"
        raise UsageError(msg)
    if params.lam == "adaptive":
        if params.alpha is None or params.alpha <= 0:
            msg = "--lam adaptive needs --alpha A > 0 (VAPO uses 0.05, SAO 1.5)"
            raise UsageError(msg)
    else:
        try:
            params.lam = float(params.lam)
        except ValueError:
            msg = f"--lam {params.lam!r}: expected a number in [0, 1] or 'adaptive'"
            raise UsageError(msg) from None
        if not 0.0 <= params.lam <= 1.0:
            msg = f"--lam {params.lam}: expected a number in [0, 1] or 'adaptive'"
            raise UsageError(msg)
    if not 0.0 <= params.lam_critic <= 1.0:
        msg = f"--lam-critic {params.lam_critic}: expected a number in [0, 1]"
        raise UsageError(msg)
    if params.batch_size is not None and params.batch_size < 1:
        msg = f"--batch-size {params.batch_size}: expected a positive integer"
        raise UsageError(msg)
    if params.std_ddof not in (0, 1) or params.whiten_ddof not in (0, 1):
        msg = "--std-ddof and --whiten-ddof take 0 (population) or 1 (sample)"
        raise UsageError(msg)
    if params.eps < 0:
        msg = f"--eps {params.eps}: expected a number >= 0"
        raise UsageError(msg)
    return params
