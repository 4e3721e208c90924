"""Everything advcli shows a person: summaries, the audit report, schema, progress."""

from __future__ import annotations

import contextlib
import os
import sys
import textwrap
import time
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from advcli import progress
from advcli.core.audit import AuditReport
from advcli.lazy_imports import np
from advcli.progress import Reporter

# What is shown holds the user's text (file, column and id names, values, messages): shown as
# it is, never read as rich markup ("[/x]" is a name, not a closing tag) or emoji codes.
stderr = Console(stderr=True, markup=False, emoji=False)
stdout = Console(markup=False, emoji=False)


def _fmt(x: object) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, list):
        return ", ".join(str(v) for v in x)
    if isinstance(x, float):
        return f"{x:.6g}"
    if isinstance(x, int):
        return f"{x:,}"
    return str(x)


PLAIN_AFTER = 10.0  # auto without a terminal: the first plain line after this many seconds
PLAIN_EVERY = 30.0  # and then about every this many seconds, and at each pass


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Activity(Reporter):
    """Progress on stderr for long work: the pass ("pass 2/3: whitening moments"), the share
    of it done, rows read, tokens/s and the time left for the whole run (where the passes
    know their totals: the current pass's rest, plus each pass still to come as long as the
    passes so far took on average).

    ``mode``: ``bar``, one live line; ``plain``, one line per pass and about every 30 s,
    nothing animated (batch jobs' logs); ``none``; ``auto``, the bar on a terminal, else plain
    lines once the work has lasted 10 s (so a short run, or one that stops on an error, prints
    only its result). While it is open it is the reporter of :mod:`advcli.progress`: every pass
    reports to it, whichever code drives the pass.
    """

    def __init__(self, quiet: bool, mode: str = "auto", *, console: Console = stderr):
        mode = "none" if quiet else mode
        if mode == "auto":
            mode = "bar" if console.is_terminal else "plain"
            self.plain_after = PLAIN_AFTER
        else:
            self.plain_after = 0.0
        self.mode = mode
        self.console = console
        self._bar: Progress | None = None
        self._task = TaskID(0)
        self._reporting = contextlib.ExitStack()
        self._opened = self._started = self._printed = time.perf_counter()
        self._name = "starting"
        self._number: int | None = None
        self._total: int | None = None
        self._durations: list[float] = []  # of the numbered passes done
        self._rows = 0
        self._share: float | None = None
        self._rate = ""

    def __enter__(self) -> Activity:
        if self.mode == "bar":
            self._bar = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}", markup=False),
                BarColumn(bar_width=24),
                TaskProgressColumn(),
                TextColumn("{task.fields[rows]:,} rows"),
                TextColumn("{task.fields[rate]}"),
                TimeElapsedColumn(),
                TextColumn("{task.fields[left]}"),
                console=self.console,
                transient=True,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task("starting", total=None, rows=0, rate="", left="")
        if self.mode != "none":
            self._reporting.enter_context(progress.reporting(self))
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._reporting.close()
        if self._bar is not None:
            self._bar.__exit__(*exc_info)
            self._bar = None

    def passes(self, number: int, total: int | None) -> None:
        if self._number is not None and number > self._number:
            self._durations.append(time.perf_counter() - self._started)
        self._number, self._total = number, total

    def stage(self, name: str) -> None:
        now = time.perf_counter()
        self._name, self._started, self._rows, self._share, self._rate = name, now, 0, None, ""
        if self._bar is not None:
            self._bar.reset(self._task, description=name, total=None, rows=0, rate="", left="")
        self._plain(force=True)

    def read(self, rows: int, share: float | None) -> None:
        self._rows, self._share = rows, share
        if self._bar is not None:
            total = None if share is None else 1.0
            self._bar.update(self._task, total=total, completed=share or 0.0, rows=rows,
                             left=self.time_left())  # fmt: skip
        self._plain()

    def advance(self, rows: int, tokens: int) -> None:
        seconds = max(time.perf_counter() - self._started, 1e-9)
        self._rows, self._rate = rows, f"{tokens / seconds:,.0f} tokens/s"
        if self._bar is not None:
            self._bar.update(self._task, rows=rows, rate=self._rate)
        self._plain()

    def time_left(self) -> str:
        """The time left for the whole run, where it can be told ("" where not)."""
        share = self._share
        if not share or share >= 1.0:
            return ""
        this = (time.perf_counter() - self._started) / share  # the current pass, in all
        left = this * (1.0 - share)
        if self._number is not None:
            if self._total is None:
                return ""
            done = [*self._durations, this]
            left += (self._total - self._number) * sum(done) / len(done)
        return f"{_duration(left)} left"

    def _plain(self, force: bool = False) -> None:
        """A plain line, at a new pass or about every 30 s, once ``plain_after`` has passed."""
        if self.mode != "plain":
            return
        now = time.perf_counter()
        if now - self._opened < self.plain_after or (
            not force and now - self._printed < PLAIN_EVERY
        ):
            return
        self._printed = now
        facts = [f"{self._rows:,} rows" if self._rows else ""]
        facts.append(f"{self._share:.0%}" if self._share is not None else "")
        facts += [self._rate, self.time_left(), f"{_duration(now - self._opened)} in all"]
        line = f"advcli: {self._name}: " + ", ".join(f for f in facts if f)
        self.console.print(line, highlight=False, markup=False, soft_wrap=True)


def summary(title: str, data: dict[str, Any], console: Console = stderr) -> None:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for key, value in data.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items()) or "none"
        table.add_row(key.replace("_", " "), _fmt(value))
    console.print(table)


def audit_report(name: str, report: AuditReport) -> None:
    """The audit of one log: counts, shares, group sizes and a reward histogram."""
    t = Table(title=f"audit: {name}", show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column(justify="right")
    no_tokens = "n/a (no token ids)"
    rows: list[tuple[str, object]] = [
        ("groups", report.groups),
        ("rollouts", report.rollouts),
        ("action tokens", no_tokens if report.action_tokens is None else report.action_tokens),
        ("zero-variance groups", report.zero_variance_groups),
        ("  all-correct", report.zero_variance_all_correct),
        ("  all-wrong", report.zero_variance_all_wrong),
        ("  other", report.zero_variance_other),
        (f"near-tie groups (std < {report.near_tie_std_below:.3g})", report.near_tie_groups),
        ("singleton groups", report.singleton_groups),
        ("zero-variance rollouts", f"{report.zero_variance_rollout_share:.1%}"),
        ("rollouts without signal", f"{report.no_signal_rollout_share:.1%}"),
        (
            "action tokens without signal",
            no_tokens
            if report.no_signal_action_token_share is None
            else f"{report.no_signal_action_token_share:.1%}",
        ),
    ]
    if report.no_signal_step_share is not None:
        rows += [
            ("agent steps", report.steps),
            ("state groups", report.state_groups),
            ("  singletons", report.singleton_state_groups),
            ("  tied returns", report.tied_state_groups),
            ("steps with no signal", f"{report.no_signal_step_share:.1%}"),
        ]
    for key, value in rows:
        t.add_row(key, _fmt(value))
    stdout.print(t)
    sizes = Table(title="group sizes", title_justify="left")
    sizes.add_column("size", justify="right")
    sizes.add_column("groups", justify="right")
    for size, count in report.group_sizes.items():
        sizes.add_row(str(size), _fmt(count))
    stdout.print(sizes)
    hist = Table(title="rewards", title_justify="left")
    hist.add_column("range")
    hist.add_column("rollouts", justify="right")
    hist.add_column("")
    peak = max((c for _, _, c in report.reward_histogram), default=1)
    last = len(report.reward_histogram) - 1
    for i, (lo, hi, count) in enumerate(report.reward_histogram):
        bar = "█" * max(1, int(np.ceil(30 * count / peak)))
        close = "]" if i == last else ")"
        hist.add_row(f"[{lo:.3g}, {hi:.3g}{close}", _fmt(count), bar)
    stdout.print(hist)


PROMPT_SHOWN = 26  # characters of each prompt in the prompts table


def _distinct_parts(texts: list[str]) -> list[str]:
    """Each text less what all of them begin and end with (a template's system prompt and
    its closing words) where some are too long to show whole, cut to :data:`PROMPT_SHOWN`
    characters, "…" where cut."""
    if len(texts) < 2 or all(len(t) <= PROMPT_SHOWN for t in texts):
        return [t if len(t) <= PROMPT_SHOWN else t[: PROMPT_SHOWN - 1] + "…" for t in texts]
    head = len(os.path.commonprefix(texts))
    tail = len(os.path.commonprefix([t[head:][::-1] for t in texts]))
    out = []
    for t in texts:
        middle = t[head : len(t) - tail]
        shown = ("…" if head else "") + middle
        cut = len(shown) > PROMPT_SHOWN or tail
        out.append(shown[: PROMPT_SHOWN - 1] + "…" if cut else shown)
    return out


def log_name(files: list[str]) -> str:
    """A log's files in a few words: the file, or the folder that holds them all."""
    if len(files) == 1:
        return files[0]
    common = os.path.commonpath(files) if files else ""
    return f"{common or '.'} ({len(files)} files)"


def prompts_table(name: str, found: dict[str, Any], top: int) -> None:
    """``advcli prompts``: how prompts were matched and passed, then the first ``top``
    prompts (0: all), one row each (``name``: the log's, :func:`log_name`)."""
    facts = {
        "log": name,
        "prompts": found["prompts"],
        "selected": found["selected"],
        "matched by": found["matched_by"],
        "passes when reward >=": found["success"],
        "steps": len(found["steps"]),
    }
    if found.get("out"):
        facts["written to"] = found["out"]
    summary("prompts", facts, stdout)
    records = found["records"] if top == 0 else found["records"][:top]
    t = Table(title=f"{len(records)} of {found['selected']} prompts", title_justify="left",
              box=box.SIMPLE_HEAD)  # fmt: skip
    t.add_column("prompt", no_wrap=True, max_width=PROMPT_SHOWN)
    for column in ("steps", "rollouts", "pass", "reward", "var", "trend", "solved", "forgot"):
        t.add_column(column, justify="right", no_wrap=True, min_width=len(column))
    texts = [" ".join((r["prompt"] or str(r["prompt_id"])).split()) for r in records]
    for r, shown in zip(records, _distinct_parts(texts), strict=True):
        solved = (
            "never" if r["first_solved_step"] is None
            else f"{r['first_solved_step']}–{r['last_solved_step']}"
        )  # fmt: skip
        trend = "" if r["trend"] is None else f"{r['trend']:+.2g}" if r["trend"] else "0"
        t.add_row(shown, _fmt(r["steps_seen"]), _fmt(r["rollouts"]), f"{r['pass_rate']:.0%}",
                  f"{r['mean_reward']:.3g}", f"{r['reward_variance']:.3g}", trend, solved,
                  "yes" if r["forgotten"] else "")  # fmt: skip
    stdout.print(t)


def _cell(value: object) -> str:
    """A figure of a health section in one cell (a summary's or a histogram's entries inline)."""
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_cell(v)}" for k, v in value.items()) or "none"
    return _fmt(value)


def health_sections(sections: dict[str, Any]) -> None:
    """The audit's health sections that the log holds (a table each, and one per step with
    ``--by step``), the mismatch's line where its stream is missing, and the advisories."""
    for name in ("staleness", "lengths", "entropy", "mismatch"):
        section = sections.get(name)
        if not isinstance(section, dict):  # the log lacks its column: --json says which
            continue
        own = section.get("framework_metrics", {})  # a framework's metrics: a table of their own
        _figures(name, {k: v for k, v in section.items() if k not in ("by_step", *OWN_METRICS)})
        if own:
            _figures(f"{name}: {section['convention']}'s own metrics", own)
        if "by_step" in section:
            _by_step(f"{name} by step", section["by_step"])
    if "groups_by_step" in sections:
        _by_step("groups by step", sections["groups_by_step"])
    if isinstance(mismatch := sections.get("mismatch"), str):
        stdout.print(f"mismatch: {mismatch}")
    for name, line in sections.get("advisories", {}).items():
        stdout.print(f"advisory {name}: {line}")


OWN_METRICS = ("framework_metrics",)


def _figures(title: str, figures: dict[str, Any]) -> None:
    """A table of named figures, one a row."""
    t = Table(title=title, show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    for key, value in figures.items():
        t.add_row(key.replace("_", " ") if "/" not in key else key, _cell(value))
    stdout.print(t)


def _by_step(title: str, steps: dict[str, Any]) -> None:
    """One row per step: its scalar figures, and the mean of each summary."""
    t = Table(title=title, title_justify="left")
    t.add_column("step", justify="right")
    first = next(iter(steps.values()), None)
    keys = [k for k, v in first.items() if not isinstance(v, dict) or "mean" in v] if isinstance(
        first, dict) else []  # fmt: skip
    for key in keys or ["value"]:
        t.add_column(key.replace("_", " "), justify="right")
    for step, figures in steps.items():
        if not isinstance(figures, dict):
            t.add_row(step, _fmt(figures))
            continue
        t.add_row(step, *(_fmt(v["mean"] if isinstance(v := figures.get(k), dict) else v)
                          for k in keys))  # fmt: skip
    stdout.print(t)


def check_report(result: dict[str, Any]) -> None:
    """What ``check`` found: the largest difference, and the worst rows."""
    facts = {k: v for k, v in result.items() if k not in ("worst", "warnings")}  # to stderr
    summary("check", facts, stdout)
    if result["worst"]:
        t = Table(title="worst rows", title_justify="left")
        for name in ("prompt id", "rollout id", "logged", "recomputed", "difference"):
            t.add_column(name, justify="left" if "id" in name else "right")
        for row in result["worst"]:
            t.add_row(
                _fmt(row["prompt_id"]), _fmt(row["rollout_id"]), _fmt(row["logged"]),
                _fmt(row["recomputed"]), f"{row['difference']:.3g}",
            )  # fmt: skip
        stdout.print(t)


def schema_report(name: str, info: dict[str, Any]) -> None:
    t = Table(title=f"schema: {name}", title_justify="left")
    t.add_column("column")
    t.add_column("type")
    t.add_column("role")
    for column, (type_name, role) in info["columns"].items():
        t.add_row(column, type_name, role)
    stdout.print(t)
    # The title names the files, and the last table what each method lacks (--json has both).
    shown_apart = ("columns", "can_run", "problems", "warnings", "files", "missing_roles")
    facts = {k: v for k, v in info.items() if k not in shown_apart}
    summary("log", facts, stdout)
    runs = Table(title="what advcli can do with this log", title_justify="left")
    runs.add_column("runs?")
    runs.add_column("commands and methods")
    by_verdict: dict[str, list[str]] = {}  # "yes" first, then what each lacks
    for name, verdict in sorted(info["can_run"].items(), key=lambda item: item[1] != "yes"):
        by_verdict.setdefault(verdict, []).append(name)
    for verdict, names in by_verdict.items():
        runs.add_row(verdict, ", ".join(names))
    stdout.print(runs)
    for problem in info["problems"]:
        stderr.print(f"problem: {problem}", highlight=False)


def _wrapped(text: str, indent: int, first: str = "") -> str:
    """``first`` (padded to ``indent``) then ``text``, wrapped to the terminal's width with
    the later lines indented; flags and names are never cut."""
    return textwrap.fill(
        text,
        max(stdout.width, 60),
        initial_indent=first.ljust(indent),
        subsequent_indent=" " * indent,
        break_long_words=False,
        break_on_hyphens=False,
    )


def method_list(found: dict[str, Any]) -> None:
    """``advcli methods``: each method with the advantage it computes and what it needs."""
    indent = 2 + max(len(m["name"]) for m in found["methods"])
    lines = [
        _wrapped(f"{m['summary']}. Needs: {_fmt(m['needs'])}.", indent, m["name"])
        for m in found["methods"]
    ]
    lines.append("\nadvcli methods NAME shows a method's parameters, defaults and formula.")
    sys.stdout.write("\n".join(lines) + "\n")


def _default(parameter: dict[str, Any]) -> str:
    """A parameter's default, and each convention's where it differs."""
    shown = "none" if parameter["default"] is None else str(parameter["default"])
    differs = [f"{conv}: {value}" for conv, value in parameter["by_convention"].items()]
    return f"default {shown}" + (f" ({'; '.join(differs)})" if differs else "")


_TYPES = {"int": "INT", "float": "NUMBER", "str": "TEXT"}  # as --help shows them


def method_help(found: dict[str, Any]) -> None:
    """``advcli methods NAME``: the formula, the columns, then the parameters as flags (its own,
    then those every method takes)."""
    lines = [_wrapped(found["summary"], 2, f"{found['name']}: ")]
    if found["definition"]:
        lines += ["", found["definition"]]
    lines += ["", _wrapped(_fmt(found["needs"]) or "-", 2, "Needs: ")]
    lines += [_wrapped(_fmt(found["outputs"]), 2, "Writes: ")]
    for shared, title in ((False, "Its parameters"), (True, "What every method takes")):
        taken = [p for p in found["parameters"] if p["shared"] is shared]
        if taken:
            lines += ["", f"{title} (flags of annotate, check, report and shard):"]
        for p in taken:
            if p["type"] == "bool":
                flag = f"{p['flag']} / --no-{p['flag'][2:]}"
            else:
                flag = f"{p['flag']} {'|'.join(p['choices']) or _TYPES[p['type']]}"
            lines += [_wrapped(_default(p), 6, f"  {flag}  "), _wrapped(p["help"], 6)]
    sys.stdout.write("\n".join(lines) + "\n")
