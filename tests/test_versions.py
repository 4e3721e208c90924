"""Dependency floors: read from advcli's metadata, and a dependency older than its floor is one
line naming it, from the command line and from the Python API."""

from __future__ import annotations

import os
import subprocess
import sys

from advcli import versions


def _shadowed(tmp_path, package: str, version: str) -> dict:
    """An environment where ``package`` looks installed at ``version``: its metadata ahead of
    site-packages on the path, as a second, older copy would be."""
    info = tmp_path / f"{package}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
    return {**os.environ, "PYTHONPATH": str(tmp_path)}


def test_the_floors_are_pyprojects():
    floors = versions.floors()
    assert set(floors) == {"typer", "polars", "pyarrow", "numpy", "rich", "orjson"}
    assert versions.floors("onnx") == {"onnxruntime": "1.18"}
    assert versions.release("1.37.0rc1") == (1, 37, 0) and versions.release("2") == (2,)
    versions.check()  # this environment meets them


def test_an_old_dependency_is_one_line_naming_it(tmp_path):
    needed = versions.floors()["polars"]
    env = _shadowed(tmp_path, "polars", "1.0.0")
    proc = subprocess.run([sys.executable, "-m", "advcli", "schema", "x.parquet"], env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr == (
        f"advcli: error: advcli needs polars >= {needed}; this environment has polars 1.0.0. "
        f"Hint: pip install 'polars>={needed}'\n"
    )
    code = (
        "import advcli\ntry:\n    advcli.audit\n"
        "except Exception as e:\n    print(type(e).__name__, e)"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=False)  # fmt: skip
    assert proc.stdout.startswith("DependencyError advcli needs polars")
