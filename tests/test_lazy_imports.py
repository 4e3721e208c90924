"""numpy, polars and pyarrow imported on first use: ``--help`` imports none of them, and a
stand-in module reads as the real one once used."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("numpy", "polars", "pyarrow", "pandas")


def imported_by(code: str, modules: tuple[str, ...] = HEAVY) -> list[str]:
    """Which of ``modules`` a fresh interpreter running ``code`` ends with."""
    probe = f"{code}\nimport sys\nprint(sorted(m for m in {modules!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return eval(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("argv", [["--help"], ["annotate", "--help"], ["shard", "--help"]])
def test_help_imports_none_of_them(argv):
    """The help is made from the methods', presets' and options' declarations alone."""
    code = (
        "import runpy, sys\n"
        f"sys.argv = {['advcli', *argv]!r}\n"
        "try:\n    runpy.run_module('advcli', run_name='__main__')\n"
        "except SystemExit as exc:\n    assert exc.code in (0, None), exc.code\n"
    )
    assert imported_by(code) == []


def test_the_main_help_leaves_out_what_only_commands_use():
    """importlib.metadata (20 ms: advcli.installed reads the same), OpenSSL's hashlib, ctypes
    (the allocator's setting) and socket: together a sixth of ``advcli --help``."""
    code = (
        "import runpy, sys\nsys.argv = ['advcli', '--help']\n"
        "try:\n    runpy.run_module('advcli', run_name='__main__')\nexcept SystemExit:\n    pass\n"
    )
    unused = ("importlib.metadata", "hashlib", "ctypes", "socket")
    assert imported_by(code, unused) == []


def test_importing_the_package_and_its_api_imports_none_of_them():
    assert imported_by("import advcli, advcli.api, advcli.cli.runner") == []


def test_the_first_use_imports_the_real_module():
    code = (
        "import sys\n"
        "from advcli.lazy_imports import np, pc\n"
        "assert 'numpy' not in sys.modules and 'pyarrow' not in sys.modules\n"
        "assert np.float32 is sys.modules['numpy'].float32\n"
        "assert 'float32' in vars(np)  # kept: the next read is a plain lookup\n"
        "assert pc.sum is sys.modules['pyarrow.compute'].sum\n"
        "assert float(np.sqrt(4.0)) == 2.0\n"
    )
    assert imported_by(code) == ["numpy", "pyarrow"]


def test_a_missing_attribute_is_an_attribute_error():
    from advcli.lazy_imports import np

    with pytest.raises(AttributeError):
        getattr(np, "no_such_thing")  # noqa: B009  (mypy knows numpy has none)


def test_schema_runs_without_importing_pandas():
    """pyarrow would import pandas (0.2 s) on its first numpy conversion; schema hides it."""
    code = (
        "import runpy, sys\n"
        "sys.argv = ['advcli', 'schema', 'sample_data/rollouts.jsonl', '--json']\n"
        "try:\n    runpy.run_module('advcli', run_name='__main__')\n"
        "except SystemExit as exc:\n    assert exc.code in (0, None), exc.code\n"
    )
    assert imported_by(code) == ["numpy", "polars", "pyarrow"]


def test_pandas_imports_as_usual_once_unseen_ends():
    code = (
        "import sys, pytest\n"
        "from advcli.lazy_imports import pandas_unseen, pa\n"
        "with pandas_unseen():\n"
        "    assert pa.array([1.5, 2.5]).to_numpy().sum() == 4.0  # pyarrow asks for pandas\n"
        "    with pytest.raises(ModuleNotFoundError):\n"
        "        import pandas\n"
        "assert 'pandas' not in sys.modules\n"
        "import pandas\n"
        "frame = pa.table({'x': [1.5, 2.5]}).to_pandas()\n"
        "assert isinstance(frame, pandas.DataFrame) and frame['x'].sum() == 4.0\n"
        "categories = pa.array(pandas.Series([1, 2], dtype='category'))  # seen as pandas again\n"
        "assert pa.types.is_dictionary(categories.type)\n"
    )
    assert imported_by(code) == ["numpy", "pandas", "pyarrow"]
