"""What is installed, read from the metadata folders: the same answers as importlib.metadata
(for every distribution of this environment, a source tree's egg-info, a zip on the path)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from advcli import installed

_SAME_AS_IMPORTLIB = textwrap.dedent(
    """
    import importlib.metadata as md
    from advcli import installed
    reads_folders = installed._folders() is not None
    names = {installed._normalized(d.metadata["Name"]): d.metadata["Name"]
             for d in md.distributions()}
    differ = [n for n in names.values() if installed.version(n) != md.version(n)
              or installed.requires(n) != (md.requires(n) or [])]
    groups = {p.group for d in md.distributions() for p in d.entry_points}
    for group in groups:
        mine = sorted((p.name, p.value) for p in installed.entry_points(group))
        if mine != sorted((p.name, p.value) for p in md.entry_points(group=group)):
            differ.append(group)
    print((reads_folders, len(names), len(groups), differ))
    """
)


def _compared(cwd, extra_path: str = "") -> tuple[bool, int, int, list[str]]:
    env_path = {"PYTHONPATH": extra_path} if extra_path else {}
    done = subprocess.run(
        [sys.executable, "-c", _SAME_AS_IMPORTLIB], cwd=cwd, capture_output=True, text=True,
        env={**os.environ, **env_path}, check=True,
    )  # fmt: skip
    return eval(done.stdout)


def test_every_installed_distribution_reads_as_importlib_metadata_reads_it(tmp_path):
    reads_folders, distributions, groups, differ = _compared(tmp_path)
    assert reads_folders and distributions > 5 and groups > 0
    assert differ == []


def test_a_source_trees_egg_info_reads_the_same(tmp_path):
    """A checkout's ``NAME.egg-info`` (``pip install -e``), ahead on the path as the working
    folder of ``python -m``: its ``requires.txt`` sections become markers."""
    egg = tmp_path / "toy_pkg.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: toy-pkg\nVersion: 3.2.1\n")
    (egg / "requires.txt").write_text(
        'numpy>=1\n\n[fast]\norjson>=3\n\n[gpu:sys_platform == "linux"]\ncupy\n'
    )
    (egg / "entry_points.txt").write_text("[advcli.methods]\ntoy = toy_pkg:Toy\n")
    reads_folders, _, _, differ = _compared(tmp_path)
    assert reads_folders and differ == []
    code = "from advcli import installed; print(installed.requires('toy-pkg'))"
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, check=True)  # fmt: skip
    assert eval(done.stdout) == [
        "numpy>=1",
        'orjson>=3; extra == "fast"',
        'cupy; (sys_platform == "linux") and extra == "gpu"',
    ]


def test_a_zip_on_the_path_leaves_the_answers_to_importlib_metadata(tmp_path):
    archive = tmp_path / "bundle.zip"
    archive.write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip
    reads_folders, _, _, differ = _compared(tmp_path, str(archive))
    assert not reads_folders and differ == []


def test_an_entry_point_loads_its_object():
    point = installed.EntryPoint("x", "advcli.installed:EntryPoint.load [extra]")
    assert point.load() is installed.EntryPoint.load


def test_an_extras_hint_from_a_source_tree_installs_that_tree():
    """This checkout is a source tree (an editable install, or a clone on the path): PyPI's
    advcli[report] would be another advcli, or none; the hint installs this one's extra."""
    root = Path(__file__).resolve().parent.parent
    assert installed.source_tree() == str(root)
    assert installed.pip_install("report") == f"pip install -e '{root}[report]'"
    spaced = Path("/home/a user/advcli/advcli")
    assert installed.source_tree(str(spaced)) is None  # no pyproject.toml there


def _hint_from_site(tmp_path: Path, direct_url: str | None) -> str:
    """The report extra's hint of an advcli installed in a site-packages of its own (the
    package, and its dist-info with pip's ``direct_url.json`` where given), in a fresh
    interpreter: no pyproject.toml beside the package, as a wheel installs it."""
    site = tmp_path / "site-packages"
    no_bytecode = shutil.ignore_patterns("__pycache__")
    shutil.copytree(installed.PACKAGE, site / "advcli", ignore=no_bytecode)
    info = site / "advcli-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: advcli\nVersion: 0.1.0\n")
    if direct_url is not None:
        (info / "direct_url.json").write_text(direct_url)
    code = "from advcli import installed; print(installed.pip_install('report'))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(site)}, check=True,
    )  # fmt: skip
    return done.stdout


def test_an_extras_hint_from_an_index_names_pypis(tmp_path):
    assert _hint_from_site(tmp_path, None) == "pip install 'advcli[report]'\n"
    other = tmp_path / "other"
    (other / "advcli").mkdir(parents=True)
    (other / "pyproject.toml").write_text('[project]\nname = "not-advcli"\n')
    assert installed.source_tree(str(other / "advcli")) is None


def test_an_extras_hint_after_pip_install_of_a_clone_names_that_clone(tmp_path):
    """``pip install .`` in a clone: pip records the folder (PEP 610's direct_url.json)."""
    url = '{"url": "file:///home/a%20user/advcli", "dir_info": {}}'
    assert _hint_from_site(tmp_path, url) == "pip install '/home/a user/advcli[report]'\n"


def test_an_extras_hint_after_an_install_from_an_archive_names_pypis(tmp_path):
    url = '{"url": "https://example.org/advcli-0.1.0.tar.gz", "archive_info": {}}'
    assert _hint_from_site(tmp_path, url) == "pip install 'advcli[report]'\n"
