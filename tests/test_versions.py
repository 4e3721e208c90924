"""Dependency floors: read from advcli's metadata, and a dependency older than its floor is one
line naming it, from the command line and from the Python API."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from advcli import versions
from tests.conftest import SAMPLE


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
    assert versions.floors("onnx") == {"onnxruntime": "1.19"}
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


def test_an_extra_older_than_its_floor_is_one_line_before_its_import(tmp_path):
    """onnxruntime 1.18.0 cannot even be imported beside numpy 2: the version comes first."""
    for package, old, args in (
        (
            "onnxruntime",
            "1.18.0",
            ["score", "x.parquet", "--critic", "c.onnx", "--out", "o.parquet"],
        ),
        ("ray", "2.8.0", ["audit", "x.parquet", "--engine", "ray"]),
    ):
        needed = versions.floors("onnx" if package == "onnxruntime" else package)[package]
        folder = tmp_path / package
        folder.mkdir()
        shutil.copy(SAMPLE / "rollouts.parquet", folder / "x.parquet")
        (folder / "c.onnx").write_bytes(b"not read: the version is checked first")
        env = _shadowed(folder, package, old)
        proc = subprocess.run([sys.executable, "-m", "advcli", *args], cwd=folder, env=env,
                              capture_output=True, text=True, check=False)  # fmt: skip
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr == (
            f"advcli: error: advcli needs {package} >= {needed}; this environment has {package} "
            f"{old}. Hint: pip install '{package}>={needed}'\n"
        )
