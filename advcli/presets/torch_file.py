"""Read a ``torch.save`` file of plain Python values without torch, and without running any code
from the file.

``torch.save`` writes a zip archive whose ``<name>/data.pkl`` is a pickle of the object, tensors
stored beside it. slime and miles save their rollouts as a dict of plain types (numbers, text,
lists, dicts), so that pickle needs no class at all. The unpickler here refuses every class but
numpy's array rebuilders (data, no code: miles stores numpy arrays) and every tensor reference.
With torch installed, a file holding tensors is read by ``torch.load(weights_only=True)``, which
is safe as well.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from typing import Any

from advcli.errors import DataError

# Data-only constructors a plain-values file may use (miles' numpy arrays).
SAFE_GLOBALS = {
    ("collections", "OrderedDict"),
    ("_codecs", "encode"),  # bytes in a protocol-2 pickle (a numpy array's buffer)
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
}


class _Tensors(Exception):
    """The file holds tensors: only torch can read them."""


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in SAFE_GLOBALS:
            return super().find_class(module, name)
        if module.startswith("torch"):
            raise _Tensors(f"{module}.{name}")
        raise pickle.UnpicklingError(f"refused to load {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise _Tensors("a tensor storage")


def load(path: str) -> Any:
    """The object a ``torch.save`` file holds, if it is made of plain values."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
            if not names:
                msg = f"{path}: not a torch.save file (no data.pkl in the archive)"
                raise DataError(msg + ". Hint: check the file")
            data = archive.read(names[0])
    except zipfile.BadZipFile:
        msg = f"{path}: not a torch.save zip archive (a legacy torch file?)"
        raise DataError(msg + ". Hint: check the file is complete") from None
    try:
        return _Unpickler(io.BytesIO(data)).load()
    except _Tensors as exc:
        return _with_torch(path, str(exc))
    except (pickle.UnpicklingError, EOFError, ValueError) as exc:
        msg = f"{path}: cannot read the rollouts safely ({exc})"
        raise DataError(msg + ". Hint: advcli reads .pt files of plain values only") from None


def _with_torch(path: str, what: str) -> Any:
    try:
        import torch
    except ImportError:
        msg = (
            f"{path}: the file holds tensors ({what}), which need torch to read. Hint: pip "
            "install torch (advcli then reads it with torch.load(weights_only=True))"
        )
        raise DataError(msg) from None
    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except Exception as exc:  # torch raises many types for unreadable files
        msg = f"{path}: torch.load(weights_only=True) refused the file ({exc})"
        raise DataError(msg.splitlines()[0] + ". Hint: check the file") from None
