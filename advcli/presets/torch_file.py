"""Read a ``torch.save`` file of plain Python values without torch, and without running any code
from the file.

``torch.save`` writes a zip archive whose ``<name>/data.pkl`` is a pickle of the object, tensors
stored beside it (``<name>/data/<key>``: each storage's raw bytes, in the byte order
``<name>/byteorder`` names). slime and miles save their rollouts as a dict of plain types
(numbers, text, lists, dicts), and slime's train dumps add dense CPU tensors. The unpickler here
takes numpy's array rebuilders (data, no code: miles stores numpy arrays), and torch's dense
tensors, rebuilt as numpy arrays from their storage, offset, shape and strides (as
``torch._utils._rebuild_tensor_v2`` does); it refuses every other class. A file with another
kind of tensor (sparse, quantized, bfloat16 ...) is read by ``torch.load(weights_only=True)``
where torch is installed, which is safe as well.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from typing import Any, Literal

from advcli.errors import DataError
from advcli.lazy_imports import np

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


STORAGES = {
    "DoubleStorage": "float64",
    "FloatStorage": "float32",
    "HalfStorage": "float16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
}
"""torch's typed storages of dense tensors, and the numpy dtype of their elements."""


class _Tensors(Exception):
    """The file holds tensors of a kind only torch can read."""


def _rebuild_tensor(
    storage: np.ndarray, offset: int, size: tuple[int, ...], stride: tuple[int, ...], *_: Any
) -> np.ndarray:
    """``torch._utils._rebuild_tensor_v2``'s tensor, as a numpy array of its own."""
    if not size:
        return np.array(storage[offset])
    extent = offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True)) + 1
    if min(size) > 0 and (offset < 0 or min(stride) < 0 or extent > len(storage)):
        raise pickle.UnpicklingError("a tensor reaches past its storage")
    view = np.lib.stride_tricks.as_strided(
        storage[offset:], shape=size, strides=[s * storage.itemsize for s in stride]
    )
    return np.array(view)


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, archive: zipfile.ZipFile, prefix: str):
        super().__init__(io.BytesIO(data))
        self._archive, self._prefix = archive, prefix
        self._storages: dict[str, np.ndarray] = {}
        order = f"{prefix}byteorder"
        little = order not in archive.namelist() or archive.read(order).strip() == b"little"
        self._order: Literal["<", ">"] = "<" if little else ">"

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in SAFE_GLOBALS:
            return super().find_class(module, name)
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if module == "torch" and name in STORAGES:
            return np.dtype(STORAGES[name])
        if module.startswith("torch"):
            raise _Tensors(f"{module}.{name}")
        raise pickle.UnpicklingError(f"refused to load {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        """A storage, ``("storage", its type, key, device, size)``: the bytes of
        ``data/<key>`` as a numpy array, read once however many tensors share it."""
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise _Tensors("a storage of another kind")
        _, dtype, key, _, numel = pid
        if not isinstance(dtype, np.dtype):
            raise _Tensors("an untyped storage")
        if str(key) not in self._storages:
            raw = self._archive.read(f"{self._prefix}data/{key}")
            values = np.frombuffer(raw, dtype=dtype.newbyteorder(self._order))
            if len(values) < int(numel):
                raise pickle.UnpicklingError(f"storage {key} is shorter than it says")
            self._storages[str(key)] = values.astype(dtype)
        return self._storages[str(key)]


def load(path: str) -> Any:
    """The object a ``torch.save`` file holds, if it is made of plain values."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
            if not names:
                msg = f"{path}: not a torch.save file (no data.pkl in the archive)"
                raise DataError(msg + ". Hint: check the file")
            prefix = names[0][: -len("data.pkl")]
            try:
                return _Unpickler(archive.read(names[0]), archive, prefix).load()
            except _Tensors as exc:
                return _with_torch(path, str(exc))
            except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError) as exc:
                msg = f"{path}: cannot read the rollouts safely ({exc})"
                hint = ". Hint: advcli reads .pt files of plain values and dense tensors only"
                raise DataError(msg + hint) from None
    except zipfile.BadZipFile:
        msg = f"{path}: not a torch.save zip archive (a legacy torch file?)"
        raise DataError(msg + ". Hint: check the file is complete") from None


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
