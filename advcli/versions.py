"""The versions of its dependencies advcli needs, checked before it uses them.

The floors are read from advcli's own installed metadata (``pyproject.toml``'s dependencies and
extras), so they are declared once. A dependency older than its floor is one line naming the
package, the version installed and the version needed, never an error deep inside a run.
Standard library only: this runs before polars, pyarrow or typer are imported.
"""

from __future__ import annotations

import re

from advcli import installed
from advcli.errors import DependencyError

_REQUIREMENT = re.compile(
    r"^\s*([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9.]*)\s*(?:;\s*extra\s*==\s*['\"]([^'\"]+)['\"])?"
)


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a version: ``"1.30.0rc1"`` -> ``(1, 30, 0)``."""
    parts = []
    for piece in version.split("."):
        digits = re.match(r"\d+", piece)
        if digits is None:
            break
        parts.append(int(digits.group()))
        if digits.group() != piece:
            break
    return tuple(parts)


def floors(extra: str | None = None) -> dict[str, str]:
    """``{package: lowest version}`` of the runtime dependencies, or of one extra's."""
    try:
        requires = installed.requires("advcli")
    except installed.NotInstalled:  # running from a source tree that is not installed
        return {}
    found = {}
    for line in requires:
        match = _REQUIREMENT.match(line)
        if match and match.group(3) == extra:
            found[match.group(1).lower()] = match.group(2)
    return found


def check() -> None:
    """A :class:`DependencyError` for the first runtime dependency missing or older than
    advcli's floor."""
    for package, needed in floors().items():
        try:
            version = installed.version(package)
        except installed.NotInstalled:
            msg = f"advcli needs {package} >= {needed}, which is not installed"
            raise DependencyError(f"{msg}. Hint: pip install '{package}>={needed}'") from None
        _compare(package, version, needed)


def check_optional(package: str, version: str, extra: str) -> None:
    """The same for a package of an extra, once imported (``version``: its ``__version__``;
    ``onnxruntime-gpu`` imports as ``onnxruntime`` too)."""
    needed = floors(extra).get(package)
    if needed is not None:
        _compare(package, version, needed)


def _compare(package: str, version: str, needed: str) -> None:
    if release(version) < release(needed):
        msg = f"advcli needs {package} >= {needed}; this environment has {package} {version}"
        raise DependencyError(f"{msg}. Hint: pip install '{package}>={needed}'")
