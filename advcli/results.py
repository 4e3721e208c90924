"""What the public API returns: one typed, immutable result per command.

``as_dict()`` is what the command prints with ``--json``, its keys in the fields' order. A field
made with :func:`optional` is left out where it is None (the command has nothing to say there);
the fields made with :func:`spread` (a method's own counts) are merged in at their place.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


def optional() -> Any:
    """A field that is None where it does not apply, and then not in ``as_dict()``."""
    return field(default=None, metadata={"optional": True})


def spread() -> Any:
    """A dict field whose items ``as_dict()`` merges in at its place."""
    return field(default_factory=dict, metadata={"spread": True})


@dataclass(frozen=True)
class Result:
    """A command's result."""

    def as_dict(self) -> dict[str, Any]:
        """The result as the command prints it with ``--json``."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("spread"):
                out.update(value)
            elif value is not None or not f.metadata.get("optional"):
                out[f.name] = value
        return out


@dataclass(frozen=True)
class AnnotateResult(Result):
    """``annotate``: what was written, the advantages' range over the action tokens (over the
    rows of a log without token ids), and the method's own counts (``stats``: zero-variance
    and singleton groups, the KL penalty, ...)."""

    method: str
    convention: str
    rows: int  # rows read
    rows_written: int
    rollouts: int
    written: str  # per-token advantages, or the per-row advantage only
    tokens_written: int | None = optional()
    action_tokens_written: int | None = optional()
    dropped: dict[str, int] = field(default_factory=dict)  # rows left out, by reason
    advantage_min: float = 0.0
    advantage_max: float = 0.0
    advantage_mean: float = 0.0
    groups: int | None = optional()
    stats: dict[str, Any] = spread()
    found: str | None = optional()  # settings found from a framework's logged advantages
    logged_advantages: str | None = optional()  # how ours compare with those
    correction: dict[str, Any] | None = optional()  # the rollout correction, what it masked
    prompts_removed: str | None = optional()  # by keep_prompts / drop_prompts
    nonfinite_nulls: int | None = optional()  # NaN or infinity written as null (JSONL)
    output: str = ""
    engine: str | None = optional()  # "ray": output is a folder of parts
    parts: int | None = optional()
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ScoreResult(Result):
    """``score``: the values written, and how fast the critic ran where."""

    nonfinite_nulls: int | None = optional()
    parts: int | None = optional()  # --engine ray
    rows: int = 0
    tokens: int = 0
    provider: str = ""  # ONNX Runtime's execution provider(s)
    gpus: int | None = optional()  # --engine ray: the cluster's
    tokens_per_second: float | None = None
    truncated_rows: int = 0
    output: str = ""
    engine: str | None = optional()
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)  # the log's (token ids made from text)


@dataclass(frozen=True)
class ReportResult(Result):
    """``report``: the page written and what it holds."""

    output: str
    bytes: int
    rollouts: int
    groups: int
    groups_listed: int
    detail_groups: int
    advantages_from: str
    seconds: float
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ShardResult(Result):
    """``shard``: the folder written, its totals and what was left out."""

    output: str
    method: str | None
    annotated_input: bool
    layout: str  # rows, or packed (--pack)
    trainer_layout: str  # --layout: advcli, verl or trl
    rows: int
    samples: int
    tokens: int
    action_tokens: int
    shards: int
    splits: dict[str, int]  # samples per split
    dropped: dict[str, Any]
    truncated: dict[str, Any]
    warnings: list[str]
    seconds: float
    prompts_removed: str | None = optional()  # by keep_prompts / drop_prompts


@dataclass(frozen=True)
class PromptsResult(Result):
    """``prompts``: how prompts were matched and passed, and one record per prompt selected
    (``records``: as ``--json`` prints them; ``out``: the file they were written to)."""

    files: list[str]
    matched_by: str
    success: float  # a rollout passes when its reward >= this
    steps: list[int | float | None]
    prompts: int  # in the log
    selected: int  # by the filters given
    records: list[dict[str, Any]]
    out: str | None = optional()
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CheckResult(Result):
    """``check``: the logged advantages against advcli's, the worst rows first."""

    method: str
    convention: str
    compared: str  # per token, or per row
    rows: int
    tol: float
    max_abs_difference: float
    rows_beyond_tol: int
    groups_beyond_tol: int
    worst: list[dict[str, Any]]
    ok: bool
    reproduced_by: str | None  # the flags that give the logged advantages, if ours differ
    found: str | None = optional()  # settings found from the logged advantages (Log.settled)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Description(Result):
    """``schema``: the log's columns and roles, its rows and tokens, what each command can run
    on it, and every problem found reading it (with the file, row and column)."""

    files: list[str]
    columns: dict[str, tuple[str, str]]  # column: (type, role)
    missing_roles: list[str]
    rows: int
    sampled: str | None = optional()  # the log was read in part: how much
    rollouts: int | None = optional()
    segmented: bool | None = optional()
    groups: int | None = None
    tokens: int | None = None
    action_tokens: int | None = optional()
    tokens_per_row_min: int | None = optional()
    tokens_per_row_mean: float | None = optional()
    tokens_per_row_max: int | None = optional()
    actions: str = ""  # where the action tokens come from
    # the columns of the sampler's and the trainer's log-probs, and which the KL penalty and
    # distillation read (advcli.io.schema.POLICY_STREAMS)
    logprob_streams: dict[str, str | None] | None = optional()  # None: the log has neither
    can_run: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    looks_like: str | None = optional()  # the preset of a framework's dump read without --from


@dataclass(frozen=True)
class Verification(Result):
    """``verify``: a folder of shards or of parts re-read against its manifest."""

    folder: str
    ok: bool
    parts: int | None = optional()
    rows: int = 0
    samples: int | None = optional()
    tokens: int = 0
    action_tokens: int | None = optional()
    shards: int | None = optional()


@dataclass(frozen=True)
class MethodLine(Result):
    """One method in ``methods``' list: its name, the advantage it computes (naming the
    framework code it follows) and the columns it needs."""

    name: str
    summary: str
    needs: list[str]


@dataclass(frozen=True)
class MethodList(Result):
    """``methods``: every registered method, built-in or plugin, in ``--method``'s order."""

    methods: list[MethodLine]

    def as_dict(self) -> dict[str, Any]:
        return {"methods": [line.as_dict() for line in self.methods]}


@dataclass(frozen=True)
class MethodParameter(Result):
    """One parameter of a method: its flag (its keyword in Python is ``name``), what it takes,
    its default (advcli's convention) and, where a convention's differs, that convention's."""

    flag: str
    name: str
    type: str  # int, float, str or bool
    choices: list[str]
    default: Any
    by_convention: dict[str, Any]  # convention: default, where it differs from ``default``
    help: str
    shared: bool  # a modifier every method takes (KL, distillation, clipping), not its own


@dataclass(frozen=True)
class MethodDescription(Result):
    """``methods NAME``: one method's formula (``summary``, naming the framework code it
    follows; ``definition``, its class's own account where it has one), the columns it needs
    and writes, and its parameters."""

    name: str
    summary: str
    definition: str
    needs: list[str]
    outputs: list[str]
    parameters: list[MethodParameter]

    def as_dict(self) -> dict[str, Any]:
        return {**super().as_dict(), "parameters": [p.as_dict() for p in self.parameters]}
