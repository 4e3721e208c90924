"""The parts of the docs made from the code, so that they cannot drift from it.

``python -m tools.docs`` (``make docs``) rewrites them; ``python -m tools.docs --check`` exits 1
when one is stale (the test suite runs it):

- ``docs/cli.md``: every command's ``--help``;
- in README.md, CONTRIBUTING.md and ``docs/*.md``, between ``<!-- generated:NAME -->`` and
  ``<!-- /generated -->``: the method table (from the registry), the conventions table (from
  ``advcli.core.conventions``) and the frameworks table (from the presets);
- between ``<!-- generated:run COMMAND -->`` and ``<!-- /generated -->``: ``$ COMMAND`` and
  what it prints, run in a scratch folder that holds ``sample_data/`` (the commands of one page
  run in order in one folder, so a later one reads what an earlier one wrote).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HELP_WIDTH = 100


def command_help(args: list[str]) -> str:
    """``advcli ARGS --help`` as printed on a terminal HELP_WIDTH wide, without colour."""
    from advcli.cli.runner import command

    env = {"COLUMNS": str(HELP_WIDTH), "TERM": "dumb", "NO_COLOR": "1"}
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        with contextlib.redirect_stdout(io.StringIO()) as out:
            command().main([*args, "--help"], prog_name="advcli", standalone_mode=False)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name)
            else:
                os.environ[name] = value
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    return "\n".join(lines).strip("\n") + "\n"


def cli_reference() -> str:
    import typer

    from advcli.cli.app import app

    commands = [c.name or c.callback.__name__ for c in app.registered_commands if c.callback]
    parts = [
        "# Command-line reference\n",
        "Every command's `--help`, generated from the code by `make docs`\n"
        f"(`python -m tools.docs`) with typer {typer.__version__}; a test fails when this page is "
        "stale.\n",
        "```text\n" + command_help([]) + "```\n",
    ]
    for name in commands:
        parts.append(f"## advcli {name}\n\n```text\n{command_help([name])}```\n")
    return "\n".join(parts)


def table_row(*cells: str) -> str:
    """A Markdown table row; a ``|`` in a cell's text (``Σ|o_j|``) escaped, not a new cell."""
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def method_table() -> str:
    from advcli.methods import REGISTRY

    rows = ["| method | advantage | needs |", "|---|---|---|"]
    for name, method in REGISTRY.items():
        needs = ", ".join((*method.roles, *([method.also_needs] if method.also_needs else [])))
        rows.append(table_row(f"`{name}`", method.summary, needs))
    return "\n".join(rows) + "\n"


def convention_table() -> str:
    from advcli.core.conventions import CONVENTIONS

    placement = {"add": "std + eps", "max": "max(std, eps)"}
    singleton = {"zero": "0, flagged", "raw": "raw reward", "error": "error", "drop": "dropped"}
    rows = [
        "| name | grpo baseline | grpo scale | std ddof | eps | eps placement | singleton | "
        "observations | whitening of mc/td/gae | zero-variance: max − min ≤ | "
        "zero-variance also when | std of equal rewards |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, c in enumerate(CONVENTIONS.values()):
        name = f"`{c.name}`" + (" (default without --from; was `seed`)" if i == 0 else "")
        whiten = "none" if c.temporal_whiten == "none" else f"batch, ddof {c.whiten_ddof}"
        rows.append(
            f"| {name} | {c.baseline} | {c.scale} | {c.std_ddof} | "
            f"{f'{c.eps:.0e}'.replace('e-0', 'e-')} | "
            f"{placement[c.eps_placement]} | "
            f"{singleton[c.singleton]} | {c.observations} | {whiten} | "
            f"{f'{c.zero_variance_tol:.0e}'.replace('e-0', 'e-') if c.zero_variance_tol else 0} | "
            + (f"std ≤ {c.zero_std:.0e} |".replace("e-0", "e-") if c.zero_std else "— |")
            + (" 0 |" if c.tied_std == "zero" else " float32 noise (NeMo-RL before #4158) |")
        )
    return "\n".join(rows) + "\n"


def framework_table() -> str:
    from advcli.presets import PRESETS

    rows = [
        "| framework | switch that makes it dump | where it writes | advcli |",
        "|---|---|---|---|",
    ]
    for name, preset in PRESETS.items():
        command = f"`advcli annotate DIR --from {name} --method grpo -o out.parquet`"
        rows.append(table_row(preset.framework, preset.switch, preset.writes, command))
    return "\n".join(rows) + "\n"


TABLES: dict[str, Callable[[], str]] = {
    "methods": method_table,
    "conventions": convention_table,
    "frameworks": framework_table,
}

_TABLE = re.compile(r"(<!-- generated:(\w+) -->\n).*?(<!-- /generated -->)", flags=re.DOTALL)
_RUN = re.compile(r"(<!-- generated:run (.+?) -->\n).*?(<!-- /generated -->)", flags=re.DOTALL)
_TIMING = re.compile(r"^.*│ (seconds|tokens per second) +│.*\n", flags=re.MULTILINE)


def pages() -> list[Path]:
    """The hand-written pages that may hold generated sections."""
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]


def shows_runs(path: Path) -> bool:
    """Whether a page shows commands' outputs (or is the site's copy of one that does)."""
    name = next((root for root, site in SITE_COPIES.items() if path.name == site), None)
    source = ROOT / name if name and path.parent.name == "docs" else path
    return bool(_RUN.search(source.read_text()))


def shown_run(command: str, folder: Path) -> str:
    """``$ command`` and what it prints (stderr and stdout, as a terminal shows them), run in
    ``folder``; the run's time and speed, which differ every run, are left out."""
    env = {**os.environ, "COLUMNS": str(HELP_WIDTH), "TERM": "dumb", "NO_COLOR": "1"}
    env.pop("ADVCLI_PROGRESS", None)
    out = []
    for part in command.split(" && "):
        words = shlex.split(part)
        if words[0] != "advcli":
            raise SystemExit(f"generated:run runs advcli only, not {words[0]!r}")
        done = subprocess.run(
            [sys.executable, "-m", "advcli", *words[1:]],
            cwd=folder, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"{command!r} failed ({done.returncode}): {done.stderr.strip()}")
        out.append(done.stderr + done.stdout)
    text = _TIMING.sub("", "".join(out))
    lines = [line.rstrip() for line in text.splitlines()]
    return "```console\n$ " + command + "\n" + "\n".join(lines).strip("\n") + "\n```\n"


def page(text: str, name: str) -> str:
    """A page with every generated section made anew."""
    for found in _TABLE.finditer(text):
        if found.group(2) not in TABLES:
            raise SystemExit(f"{name}: no table called {found.group(2)!r}")
    text = _TABLE.sub(lambda m: m.group(1) + TABLES[m.group(2)]() + m.group(3), text)
    if _RUN.search(text):
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "sample_data").symlink_to(ROOT / "sample_data")
            text = _RUN.sub(
                lambda m: m.group(1) + shown_run(m.group(2), Path(tmp)) + m.group(3), text
            )
    return text


SITE_COPIES = {"README.md": "index.md", "CONTRIBUTING.md": "contributing.md"}
"""Pages outside docs/ that the site shows too: copied in, their links made relative to docs/."""


def site_copy(text: str) -> str:
    """A page of the project's root as a page of docs/: ``docs/X`` links become ``X``."""
    text = re.sub(r"\]\(docs/", "](", text)
    text = re.sub(r'(src|href)="docs/', r'\1="', text)
    for root_name, site_name in SITE_COPIES.items():
        text = text.replace(f"]({root_name})", f"]({site_name})")
    return "<!-- made by make docs from the project's root: edit that one -->\n" + text


def generated() -> dict[Path, str]:
    """Every generated file, as it should read now."""
    found: dict[Path, str] = {ROOT / "docs" / "cli.md": cli_reference()}
    tables = []
    copies = {ROOT / "docs" / name for name in SITE_COPIES.values()}
    for path in pages():
        if path.name == "cli.md" or path in copies:
            continue
        text = path.read_text()
        tables += _TABLE.findall(text)
        found[path] = page(text, path.name)
    for root_name, site_name in SITE_COPIES.items():
        found[ROOT / "docs" / site_name] = site_copy(found[ROOT / root_name])
    missing = set(TABLES) - {name for _, name, _ in tables}
    if missing:
        raise SystemExit(f"no page holds '<!-- generated:{sorted(missing)[0]} -->'")
    return found


def help_typer() -> str | None:
    """The typer version ``docs/cli.md`` was made with (help layout is typer's own)."""
    found = re.search(r"with typer (\S+);", (ROOT / "docs" / "cli.md").read_text())
    return found.group(1) if found else None


def stale() -> list[Path]:
    return [p for p, text in generated().items() if not p.exists() or p.read_text() != text]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a file is stale")
    args = parser.parse_args()
    if args.check:
        old = stale()
        for path in old:
            print(f"{path.relative_to(ROOT)} is stale: run make docs", file=sys.stderr)
        return 1 if old else 0
    for path, text in generated().items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
