"""numpy, polars and pyarrow, each imported on its first use.

Together they take about 0.3 s to import: more than all of typer's ``--help``. advcli's
modules take them from here (``from advcli.lazy_imports import np``) rather than importing
them, so that ``advcli --help`` and ``advcli COMMAND --help``, which only read the methods'
declarations, import none of them, while a command's first ``np.…`` imports numpy.

Each name is a stand-in module whose first attribute read imports the real one and keeps the
attribute, so later reads are a plain attribute lookup. The real modules are the ones in
``sys.modules`` (unlike :class:`importlib.util.LazyLoader`, whose lazy module a second
``import numpy`` elsewhere loads at once); a module's top level must not read these names.
ruff's banned-api rule keeps advcli's modules from importing the three themselves.
"""

from __future__ import annotations

import importlib
import types
from typing import TYPE_CHECKING, Any

__all__ = ["np", "pa", "pafs", "pc", "pl", "pq"]


class _OnFirstUse(types.ModuleType):
    """A stand-in for the module of its name, imported when an attribute is first read."""

    def __getattr__(self, attr: str) -> Any:
        value = getattr(importlib.import_module(self.__name__), attr)
        setattr(self, attr, value)  # later reads find it here, without this method
        return value


if TYPE_CHECKING:
    import numpy as np
    import polars as pl
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq
else:
    np = _OnFirstUse("numpy")
    pl = _OnFirstUse("polars")
    pa = _OnFirstUse("pyarrow")
    pc = _OnFirstUse("pyarrow.compute")
    pafs = _OnFirstUse("pyarrow.fs")
    pq = _OnFirstUse("pyarrow.parquet")
