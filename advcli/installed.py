"""What is installed: versions, requirements and entry points, read from the ``*.dist-info``
folders on ``sys.path``.

:mod:`importlib.metadata` answers the same questions, but importing it brings in ``email``,
``zipfile``, ``socket`` and more: about 20 ms, a tenth of ``advcli --help``, which asks it for
the dependency floors and the estimator plugins before it can print. Wheels and pip's editable
installs leave one ``NAME-VERSION.dist-info`` folder each, and a source tree installed with
``pip install -e`` a ``NAME.egg-info`` folder: that is all this reads. Where it could miss
something, a path entry that is not a folder (a zip), an ``.egg`` or an egg-info that is a
single file, every question goes to :mod:`importlib.metadata` instead, so the answers are the
same.
Standard library only: this runs before typer, polars or pyarrow are imported.

It also says how to add one of advcli's extras to this install (:func:`pip_install`): from
the source tree this advcli runs from (an editable install, or a clone on the path), or the
folder pip installed it from (``pip install .`` in a clone), where ``pip install
'advcli[report]'`` would find nothing or another advcli; else from PyPI.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import shlex
import sys
from collections.abc import Iterable
from typing import Any, NamedTuple


class NotInstalled(LookupError):
    """The distribution of that name is not installed."""


class EntryPoint(NamedTuple):
    """One line of a distribution's ``entry_points.txt``: ``name = module:attribute``."""

    name: str
    value: str

    def load(self) -> Any:
        """The object the entry point names, imported."""
        module, _, attribute = self.value.partition("[")[0].strip().partition(":")
        found = importlib.import_module(module.strip())
        for part in filter(None, attribute.strip().split(".")):
            found = getattr(found, part)
        return found


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


@functools.cache
def _folders() -> dict[str, str] | None:
    """``{normalized name: its .dist-info or .egg-info folder}``, the first on ``sys.path``
    winning as with :mod:`importlib.metadata`; None where that must answer instead."""
    found: dict[str, str] = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except NotADirectoryError:  # a zip on the path
            return None
        except OSError:  # a path entry that does not exist
            continue
        for name in names:
            if not name.endswith((".dist-info", ".egg-info", ".egg")):
                continue
            folder = os.path.join(entry, name)
            if name.endswith(".egg") or not os.path.isdir(folder):  # an egg, a PKG-INFO file
                return None
            stem = name.rpartition(".")[0]  # NAME-VERSION, or NAME for a source tree's egg-info
            found.setdefault(_normalized(stem.partition("-")[0]), folder)
    return found


def _read(distribution: str, file_name: str) -> str | None:
    """A file of an installed distribution's metadata folder; None where it has none."""
    folders = _folders()
    assert folders is not None
    folder = folders.get(_normalized(distribution))
    if folder is None:
        raise NotInstalled(distribution)
    try:
        with open(os.path.join(folder, file_name), encoding="utf-8") as file:
            return file.read()
    except OSError:
        return None


def _headers(distribution: str) -> list[tuple[str, str]]:
    """The metadata headers (``METADATA``, or an egg-info's ``PKG-INFO``) in order."""
    text = _read(distribution, "METADATA")
    if text is None:
        text = _read(distribution, "PKG-INFO")
    if text is None:  # a broken install: importlib.metadata would not find it either
        raise NotInstalled(distribution)
    return [
        (key.strip(), value.strip())
        for key, sep, value in (
            line.partition(":") for line in text.partition("\n\n")[0].splitlines()
        )
        if sep and not key[:1].isspace()  # continuation lines belong to the header above
    ]


def _egg_requirements(text: str) -> list[str]:
    """An egg-info's ``requires.txt`` as ``Requires-Dist`` lines: ``[EXTRA:MARKERS]`` sections
    become markers, as :mod:`importlib.metadata` writes them."""
    requirements, section = [], ""
    for line in map(str.strip, text.splitlines()):
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif line and not line.startswith("#"):
            extra, _, markers = section.partition(":")
            condition = " and ".join(
                filter(None, (f"({markers})" if markers else "", extra and f'extra == "{extra}"'))
            )
            requirements.append(f"{line}; {condition}" if condition else line)
    return requirements


def version(distribution: str) -> str:
    """The installed version of ``distribution``; :class:`NotInstalled` without it."""
    if _folders() is None:
        from importlib import metadata

        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            raise NotInstalled(distribution) from None
    found = [value for key, value in _headers(distribution) if key == "Version"]
    if not found:
        raise NotInstalled(distribution)
    return found[0]


def requires(distribution: str) -> list[str]:
    """The requirements (``Requires-Dist``) of ``distribution``; :class:`NotInstalled` without."""
    if _folders() is None:
        from importlib import metadata

        try:
            return metadata.requires(distribution) or []
        except metadata.PackageNotFoundError:
            raise NotInstalled(distribution) from None
    if _read(distribution, "METADATA") is None:
        return _egg_requirements(_read(distribution, "requires.txt") or "")
    return [value for key, value in _headers(distribution) if key == "Requires-Dist"]


def entry_points(group: str) -> Iterable[Any]:
    """The entry points of ``group``, over every installed distribution (each has ``name``,
    ``value`` and ``load()``)."""
    folders = _folders()
    if folders is None:
        from importlib import metadata

        return metadata.entry_points(group=group)
    points = []
    for distribution in folders:
        section = None
        for line in (_read(distribution, "entry_points.txt") or "").splitlines():
            line = line.strip()
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1].strip()
            elif section == group and "=" in line and not line.startswith(("#", ";")):
                name, _, value = line.partition("=")
                points.append(EntryPoint(name.strip(), value.strip()))
    return points


PACKAGE = os.path.dirname(os.path.abspath(__file__))
"""The folder of the advcli package that is running."""


def source_tree(package: str = PACKAGE) -> str | None:
    """The source tree holding the advcli package folder ``package``: its parent, where a
    ``pyproject.toml`` names the project advcli (an editable install or a clone); None for an
    install from a wheel (site-packages holds no such file)."""
    root = os.path.dirname(package)
    try:
        with open(os.path.join(root, "pyproject.toml"), encoding="utf-8") as file:
            text = file.read()
    except OSError:
        return None
    return root if re.search(r'^name\s*=\s*"advcli"', text, flags=re.MULTILINE) else None


def installed_from(distribution: str = "advcli") -> tuple[str, bool] | None:
    """The folder ``distribution`` was installed from and whether the install is editable,
    as pip records it (``direct_url.json``, PEP 610: ``pip install .`` from a clone); None for
    an install from an index, or none."""
    try:
        if _folders() is None:
            from importlib import metadata

            text = metadata.distribution(distribution).read_text("direct_url.json")
        else:
            text = _read(distribution, "direct_url.json")
    except (LookupError, ImportError, OSError):  # not installed (a clone on the path)
        return None
    import json  # here: only a hint needs it

    try:
        found = json.loads(text or "{}")
    except ValueError:
        return None
    url = found.get("url", "") if isinstance(found, dict) else ""
    if not url.startswith("file://") or not isinstance(found.get("dir_info"), dict):
        return None  # from an index, an archive or a VCS URL: the index's name is the guess
    from urllib.parse import unquote, urlsplit

    return unquote(urlsplit(url).path), bool(found["dir_info"].get("editable"))


def pip_install(extra: str, package: str = PACKAGE) -> str:
    """The command that adds advcli's ``extra`` to this install (``package``: the running
    advcli's folder): from the source tree it runs from (``pip install -e
    '/path/to/advcli[report]'``), else from the folder pip installed it from, else from PyPI
    (``pip install 'advcli[report]'``)."""
    tree = source_tree(package)
    if tree is not None:
        return f"pip install -e {shlex.quote(f'{tree}[{extra}]')}"
    found = installed_from()
    if found is not None:
        folder, editable = found
        return f"pip install {'-e ' if editable else ''}{shlex.quote(f'{folder}[{extra}]')}"
    return f"pip install {shlex.quote(f'advcli[{extra}]')}"
