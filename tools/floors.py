"""The declared floors as exact pins, for ``make test-min``: ``python -m tools.floors``.

Prints ``package==floor`` for every runtime dependency of ``pyproject.toml``, for the extras
(zstd, onnx, report, ray, text) and for what the suite needs from ``dev`` (pytest, hypothesis, onnx,
moto's S3 server; not the linters), so the suite runs on the oldest versions advcli says it
supports.
"""

from __future__ import annotations

import re
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, as pip vendors it
    from pip._vendor import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
EXTRAS = ("zstd", "onnx", "report", "ray", "text")
# What the suite needs from the dev extra
TEST_TOOLS = (
    "pytest",
    "hypothesis",
    "onnx",
    "moto",
    "setuptools",
    "wheel",
    "pytest-xdist",
    "pytest-timeout",
)


def pins() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    wanted = list(project["dependencies"])
    for name in EXTRAS:
        wanted += extras[name]
    wanted += [r for r in extras["dev"] if re.match(r"[A-Za-z0-9_.-]+", r)[0] in TEST_TOOLS]
    out = []
    for requirement in wanted:
        match = re.match(r"^\s*([A-Za-z0-9_.-]+(?:\[[^\]]*\])?)\s*>=\s*([0-9][0-9.]*)", requirement)
        if match is None:
            raise SystemExit(f"pyproject.toml: {requirement!r} has no >= floor")
        out.append(f"{match.group(1)}=={match.group(2)}")
    return list(dict.fromkeys(out))


if __name__ == "__main__":
    print("\n".join(pins()))
