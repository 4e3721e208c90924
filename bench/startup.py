"""Start-up: ``advcli --help`` against a minimal two-command typer app's ``--help``, same run.

``python -m bench.startup [--repeat 7]`` (``python -m bench`` runs it too). Each help is
generated anew by a fresh interpreter (nothing cached); the best of ``--repeat`` runs counts,
since start-up only ever gets slower from noise. Also says which of numpy, polars and pyarrow
the help imported.

The runs may write bytecode (``PYTHONDONTWRITEBYTECODE`` is dropped for them), as an installed
advcli has it: ``pip install`` compiles the modules, and an editable checkout run with the
variable set would otherwise compile all of advcli's modules on every start (about 0.14 s here).
"""

from __future__ import annotations

import argparse
import os
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


def best_of(command: list[str], repeat: int) -> float:
    subprocess.run(command, capture_output=True, check=True, env=WITH_BYTECODE)  # compiles
    seconds = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, capture_output=True, check=True, env=WITH_BYTECODE)
        seconds.append(time.perf_counter() - start)
    return min(seconds)


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


def run(repeat: int) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        app = Path(tmp) / "minimal.py"
        app.write_text(MINIMAL_APP)
        minimal = best_of([sys.executable, str(app), "--help"], repeat)
    advcli = [sys.executable, "-m", "advcli"]
    main_help = best_of([*advcli, "--help"], repeat)
    annotate_help = best_of([*advcli, "annotate", "--help"], repeat)
    return [
        f"start-up (best of {repeat}): a minimal two-command typer app's --help {minimal:.3f} s; "
        f"advcli --help {main_help:.3f} s ({main_help / minimal:.2f}x), advcli annotate --help "
        f"{annotate_help:.3f} s ({annotate_help / minimal:.2f}x); --help imports "
        f"{heavy_imports(['--help'])} of {list(HEAVY)}"
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    print("\n".join(run(parser.parse_args().repeat)))
