"""Start-up: ``advcli --help`` against a minimal two-command typer app's ``--help``, same run.

``python -m bench.startup [--pairs 15]`` (``python -m bench`` runs it too). Each help is
generated anew by a fresh interpreter (nothing cached). The two run in alternating pairs, so a
slow spell of a shared machine hits both alike; the median of the pairs' ratios counts (the
goal: at most 1.5x). ``advcli annotate --help`` and ``advcli methods`` are timed the same way.
Also says which of numpy, polars and pyarrow the help imported.

The runs may write bytecode (``PYTHONDONTWRITEBYTECODE`` is dropped for them), as an installed
advcli has it: ``pip install`` compiles the modules, and an editable checkout run with the
variable set would otherwise compile all of advcli's modules on every start (about 0.14 s here).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MINIMAL_APP = '''
import typer

app = typer.Typer(add_completion=False)


@app.command()
def first(path: str, count: int = typer.Option(1, help="how many")) -> None:
    """The first command."""


@app.command()
def second(name: str = typer.Option("x", help="a name")) -> None:
    """The second command."""


app()
'''

HEAVY = ("numpy", "polars", "pyarrow")


WITH_BYTECODE = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _seconds(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, capture_output=True, check=True, env=WITH_BYTECODE)
    return time.perf_counter() - start


def paired(baseline: list[str], command: list[str], pairs: int) -> tuple[float, float, float]:
    """The median seconds of ``baseline`` and of ``command``, and the median of their ratios,
    over ``pairs`` pairs run one after the other (after a run of each that compiles)."""
    _seconds(baseline), _seconds(command)
    times = [(_seconds(baseline), _seconds(command)) for _ in range(pairs)]
    return (
        statistics.median(b for b, _ in times),
        statistics.median(c for _, c in times),
        statistics.median(c / b for b, c in times),
    )


def heavy_imports(argv: list[str]) -> str:
    """Which of :data:`HEAVY` ``advcli ARGV`` imports, as a list's text."""
    code = (
        "import runpy, sys\n"
        f"sys.argv = {['advcli', *argv]!r}\n"
        "try:\n    runpy.run_module('advcli', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return done.stderr.strip().splitlines()[-1]


def run(pairs: int) -> list[str]:
    advcli = [sys.executable, "-m", "advcli"]
    shown = []
    with tempfile.TemporaryDirectory() as tmp:
        app = Path(tmp) / "minimal.py"
        app.write_text(MINIMAL_APP)
        minimal = [sys.executable, str(app), "--help"]
        for args in (["--help"], ["annotate", "--help"], ["methods"]):
            base, took, ratio = paired(minimal, [*advcli, *args], pairs)
            shown.append(f"advcli {' '.join(args)} {took:.3f} s against {base:.3f} s: {ratio:.2f}x")
    return [
        f"start-up (medians of {pairs} alternating pairs against a minimal two-command typer "
        f"app's --help): {'; '.join(shown)}; --help imports {heavy_imports(['--help'])} of "
        f"{list(HEAVY)}"
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=15)
    print("\n".join(run(parser.parse_args().pairs)))
