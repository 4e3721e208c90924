"""The parts of the docs made from the code, so that they cannot drift from it.

``python -m tools.docs`` (``make docs``) rewrites them; ``python -m tools.docs --check`` exits 1
when one is stale (the test suite runs it):

- ``docs/cli.md``: every command's ``--help``;
- README.md, between ``<!-- generated:NAME -->`` and ``<!-- /generated -->``: the method table
  (from the registry), the conventions table (from ``advcli.core.conventions``) and the
  frameworks table (from the presets).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys
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

    from advcli.cli.commands import app

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


def method_table() -> str:
    from advcli.methods import REGISTRY

    rows = ["| method | advantage | needs |", "|---|---|---|"]
    for name, method in REGISTRY.items():
        needs = ", ".join((*method.roles, *([method.also_needs] if method.also_needs else [])))
        rows.append(f"| `{name}` | {method.summary} | {needs} |")
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
        rows.append(
            f"| {preset.framework} | {preset.switch} | {preset.writes} | "
            f"`advcli annotate DIR --from {name} --method grpo -o out.parquet` |"
        )
    return "\n".join(rows) + "\n"


README_SECTIONS: dict[str, Callable[[], str]] = {
    "methods": method_table,
    "conventions": convention_table,
    "frameworks": framework_table,
}


def readme(text: str) -> str:
    """README.md with every generated section made anew."""
    for name, make in README_SECTIONS.items():
        pattern = re.compile(
            rf"(<!-- generated:{name} -->\n).*?(<!-- /generated -->)", flags=re.DOTALL
        )
        if not pattern.search(text):
            raise SystemExit(f"README.md: no '<!-- generated:{name} -->' section")
        text = pattern.sub(lambda m, make=make: m.group(1) + make() + m.group(2), text)
    return text


def generated() -> dict[Path, str]:
    """Every generated file, as it should read now."""
    readme_path = ROOT / "README.md"
    return {
        ROOT / "docs" / "cli.md": cli_reference(),
        readme_path: readme(readme_path.read_text()),
    }


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
