"""Read a ``torch.save`` file of plain values and dense tensors, without torch, without running
any code from the file, and within a bound on what it may expand to.

``torch.save`` writes a zip archive whose ``<name>/data.pkl`` is a pickle of the object, tensors
stored beside it (``<name>/data/<key>``: each storage's raw bytes, in the byte order
``<name>/byteorder`` names). slime and miles save their rollouts as a dict of plain types
(numbers, text, lists, dicts), slime's train dumps add dense CPU tensors, and miles may store
numpy arrays. The pickle is read by Python's pure-Python unpickler, whose every step that could
run code, copy data or take time out of proportion is replaced here:

- globals: numpy's array rebuilders and torch's dense tensors (``_rebuild_tensor_v2`` and
  ``_v3``), rebuilt as numpy arrays from their storage, offset, shape and strides, for every
  element type numpy holds, and bfloat16 (widened to float32). Anything else (a class, a sparse
  or quantized tensor, float8) is refused, naming it; torch is never imported.
- expansion: what the file makes (storages, tensors, arrays, bytes) and what its values amount
  to once flattened (a value the pickle shares is counted wherever it is used: a list of two
  references to a list of two references ... is exponential) are bounded by
  :func:`expansion_bound`; a zip member is inflated only as far as its storage declares, and
  only stored or deflated members are read (zipfile inflates bzip2 and lzma a whole chunk of
  input at a time, without a limit on what it makes: a kilobyte can become a gigabyte).
- the C unpickler's own hazards: it allocates a memo as large as any index a file names (a
  12-byte file can ask for gigabytes), and numpy's array ``__setstate__`` crashes on a state
  of the wrong size; memo indices are bounded and array states checked before use. Dict keys
  are text or 64-bit integers (a file of colliding keys would make inserting them quadratic),
  values nest at most :data:`MAX_DEPTH` levels and never contain themselves.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import pickle
import re
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Literal

from advcli.errors import DataError, UsageError
from advcli.lazy_imports import np

EXPANSION = 64
"""A file may expand to this many times its size (a plain pickle takes 1 to 8 bytes for each
value it holds, which is counted at 8), or to :data:`FLOOR_BYTES`, whichever is larger."""
FLOOR_BYTES = 1 << 30
EXPANSION_VARIABLE = "ADVCLI_MAX_EXPANSION"
"""Environment variable: the bytes a ``.pt`` file may expand to, in place of :data:`FLOOR_BYTES`."""
MAX_DEPTH = 100
"""How deep values may nest (a rollout's are a few levels deep)."""

STORAGES = {
    "DoubleStorage": "float64",
    "FloatStorage": "float32",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
    "ComplexFloatStorage": "complex64",
    "ComplexDoubleStorage": "complex128",
}
"""torch's typed storages of dense tensors, and the element type each holds."""
ELEMENTS = {*STORAGES.values(), "uint16", "uint32", "uint64"}
"""The torch element types read (as the numpy dtype of the same name; bfloat16 as float32),
``torch.<name>`` in a pickle; torch writes the last three as ``_rebuild_tensor_v3`` of bytes."""
NUMERIC = "biufc"
"""The numpy dtype kinds a file's arrays may have (no objects, records or text)."""
COMPRESSIONS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
"""The compressions of archive members read: torch.save's (stored), and deflate, which zipfile
inflates only as far as the bytes asked for."""


class _Refused(Exception):
    """The file holds something advcli does not read (named in the message)."""


class ElementType:
    """A torch element type named in a pickle (``torch.FloatStorage``, ``torch.uint16``), or
    ``UntypedStorage`` (bytes)."""

    def __init__(self, name: str) -> None:
        self.name = name
        stored = "uint16" if name == "bfloat16" else name
        self.stored = np.dtype("uint8" if name == "untyped" else stored)

    def decoded(self, raw: bytes | np.ndarray, order: Literal["<", ">"]) -> np.ndarray:
        """The values of ``raw``, in the machine's byte order (bfloat16: the high half of a
        float32, widened by a shift)."""
        values = np.frombuffer(raw, dtype=self.stored.newbyteorder(order))
        if self.name == "bfloat16":
            return (values.astype(np.uint32) << 16).view(np.float32)
        return values.astype(self.stored, copy=False)  # a view where already native


def expansion_bound(size: int) -> int:
    """The bytes a ``.pt`` file of ``size`` bytes may expand to: :data:`EXPANSION` times its
    size, or ``ADVCLI_MAX_EXPANSION`` (default :data:`FLOOR_BYTES`) where larger."""
    given = os.environ.get(EXPANSION_VARIABLE)
    floor = FLOOR_BYTES
    if given is not None:
        try:
            floor = int(given)
        except ValueError:
            msg = f"{EXPANSION_VARIABLE}={given!r}: expected a number of bytes"
            raise UsageError(msg + f". Hint: e.g. {EXPANSION_VARIABLE}={4 * FLOOR_BYTES}") from None
    return max(EXPANSION * size, floor)


class RestrictedUnpickler(pickle._Unpickler):
    """The pure-Python unpickler, restricted (see the module's docstring)."""

    dispatch: ClassVar[dict[int, Callable[[Any], None]]] = dict(pickle._Unpickler.dispatch)
    stack: list[Any]
    metastack: list[list[Any]]
    append: Callable[[Any], None]
    _unframer: Any
    memo: dict[int, Any]
    pop_mark: Callable[[], list[Any]]
    readline: Callable[[], bytes]

    def __init__(self, data: bytes, archive: zipfile.ZipFile | None, prefix: str, bound: int):
        """``data``, the pickle of ``archive`` (None: a plain pickle, which holds no storage)
        under ``prefix``, read within ``bound`` bytes."""
        self._data, self._buffer = data, io.BytesIO(data)
        super().__init__(self._buffer)
        self._archive, self._prefix, self._bound = archive, prefix, bound
        self._made = 0  # bytes of storages, tensors, arrays and bytes made so far
        self._storages: dict[str, tuple[str, int, np.ndarray]] = {}
        self._typed: dict[tuple[int, str], np.ndarray] = {}  # bytes read as another type
        self._storage_ids: set[int] = set()  # every storage above (each held there)
        self._unbuilt: dict[int, Any] = {}  # arrays and dtypes made, awaiting their state
        order = f"{prefix}byteorder"
        big = (archive is not None and order in archive.namelist()
               and _member(archive, order, 8)[0].strip() == b"big")  # fmt: skip
        self._order: Literal["<", ">"] = ">" if big else "<"

    def _make(self, nbytes: int) -> None:
        self._made += nbytes
        if self._made > self._bound:
            raise _TooLarge

    def find_class(self, module: str, name: str) -> Any:
        found = {
            ("collections", "OrderedDict"): _empty_dict,
            ("_codecs", "encode"): self._latin1,
            ("numpy", "dtype"): self._dtype,
            ("numpy", "ndarray"): _NDARRAY,
            ("numpy.core.multiarray", "_reconstruct"): self._reconstruct,
            ("numpy._core.multiarray", "_reconstruct"): self._reconstruct,
            ("numpy.core.multiarray", "scalar"): _scalar,
            ("numpy._core.multiarray", "scalar"): _scalar,
            ("torch._utils", "_rebuild_tensor_v2"): self._rebuild_tensor_v2,
            ("torch._utils", "_rebuild_tensor_v3"): self._rebuild_tensor_v3,
            ("torch.storage", "UntypedStorage"): ElementType("untyped"),
        }.get((module, name))
        if found is not None:
            return found
        if module == "torch" and (name in STORAGES or name in ELEMENTS):
            return ElementType(STORAGES.get(name, name))
        if module.split(".")[0] == "torch":
            raise _Refused(f"{module}.{name}"[:80])
        raise pickle.UnpicklingError(f"refused to load {module}.{name}"[:100])

    # ------------------------------------------------------------------ what globals make

    def _latin1(self, text: Any, encoding: Any) -> bytes:
        """``_codecs.encode``: how a protocol-2 pickle writes bytes, and nothing else (another
        codec could expand text without bound)."""
        if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
            raise pickle.UnpicklingError("_codecs.encode is read for latin-1 text only")
        self._make(len(text))
        return text.encode("latin-1")

    def _dtype(self, spec: Any, align: Any = False, copy: Any = True) -> np.dtype:
        """``numpy.dtype``: a fresh one (its state is set next), of numbers."""
        dtype = np.dtype(spec, bool(align), True) if isinstance(spec, str) else None
        if dtype is None or dtype.kind not in NUMERIC or dtype.fields or dtype.subdtype:
            raise pickle.UnpicklingError("a numpy dtype other than of numbers")
        self._unbuilt[id(dtype)] = dtype
        return dtype

    def _reconstruct(self, kind: Any, shape: Any, typecode: Any) -> np.ndarray:
        """``numpy ... _reconstruct``: an empty array, whose state is set next."""
        if kind is not _NDARRAY or not (isinstance(shape, tuple) and shape == (0,)):
            raise pickle.UnpicklingError("a numpy array not as numpy pickles one")
        array = np.ndarray((0,), np.uint8)
        self._unbuilt[id(array)] = array
        return array

    def _rebuild_tensor_v2(
        self, storage: Any, offset: Any, size: Any, stride: Any, *_: Any
    ) -> np.ndarray:
        """``torch._utils._rebuild_tensor_v2``'s tensor, as a numpy array of its own."""
        if id(storage) not in self._storage_ids:
            raise pickle.UnpicklingError("a tensor without a storage")
        if not (
            naturals(size) and naturals(stride) and len(size) == len(stride) and naturals((offset,))
        ):
            raise pickle.UnpicklingError("a tensor's size, stride or offset is not integers")
        self._make(math.prod(size) * storage.itemsize)
        extent = offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True)) + 1
        if min(size, default=1) > 0 and extent > len(storage):
            raise pickle.UnpicklingError("a tensor reaches past its storage")
        view = np.lib.stride_tricks.as_strided(
            storage[offset:], shape=size, strides=[s * storage.itemsize for s in stride]
        )
        return np.array(view)

    def _rebuild_tensor_v3(
        self, storage: Any, offset: Any, size: Any, stride: Any, grad: Any, hooks: Any,
        element: Any, *_: Any,
    ) -> np.ndarray:  # fmt: skip
        """``torch._utils._rebuild_tensor_v3``'s tensor: its storage's bytes read as
        ``element``s."""
        if not isinstance(element, ElementType) or id(storage) not in self._storage_ids:
            raise pickle.UnpicklingError("a tensor without a storage or an element type")
        typed = self._typed.get((id(storage), element.name))
        if typed is None:
            self._make(storage.nbytes * (2 if element.name == "bfloat16" else 1))
            whole = len(storage) - len(storage) % element.stored.itemsize
            typed = element.decoded(storage[:whole].tobytes(), self._order)
            self._typed[(id(storage), element.name)] = typed
            self._storage_ids.add(id(typed))
        return self._rebuild_tensor_v2(typed, offset, size, stride)

    def persistent_load(self, pid: Any) -> Any:
        """A storage, ``("storage", its element type, key, device, size)``: the bytes of
        ``data/<key>`` (exactly as many as its elements take), read once however many tensors
        share it."""
        if self._archive is None or not (
            isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
        ):
            raise pickle.UnpicklingError("a persistent object other than an archive's storage")
        _, element, key, _, numel = pid
        if not (isinstance(element, ElementType) and isinstance(key, str) and naturals((numel,))):
            raise pickle.UnpicklingError("a storage without its element type, key or size")
        if key in self._storages:
            if self._storages[key][:2] != (element.name, numel):
                raise pickle.UnpicklingError(f"storage {key[:20]!r} is read as two storages")
            return self._storages[key][2]
        needed = numel * element.stored.itemsize
        self._make(needed * (2 if element.name == "bfloat16" else 1))
        raw, declared = _member(self._archive, f"{self._prefix}data/{key}", needed)
        if declared != needed or len(raw) != needed:
            msg = (
                f"storage {key[:20]!r} holds {declared} bytes, and its {numel} elements "
                f"take {needed}"
            )
            raise pickle.UnpicklingError(msg)
        values = element.decoded(raw, self._order)
        self._storages[key] = (element.name, numel, values)
        self._storage_ids.add(id(values))
        return values

    # ------------------------------------------------------------------ opcodes replaced

    def _build(self) -> None:
        """BUILD: only the state numpy pickles, of an array or a dtype made just before."""
        state = self.stack.pop()
        made = self._unbuilt.pop(id(self.stack[-1]), None)
        if isinstance(made, np.ndarray) and _array_state(state):
            self._make(len(state[4]))
            made.__setstate__(state)
        elif isinstance(made, np.dtype) and _dtype_state(state):
            made.__setstate__(state)  # type: ignore[attr-defined]  # numpy's, not in its stubs
        else:
            raise pickle.UnpicklingError("an object's state is set, which plain values' is not")

    def _setitems(self) -> None:
        items = self.pop_mark()
        _into_dict(self.stack[-1], items)

    def _setitem(self) -> None:
        value, key = self.stack.pop(), self.stack.pop()
        _into_dict(self.stack[-1], [key, value])

    def _dict(self) -> None:
        items = self.pop_mark()
        self.stack.append(_into_dict({}, items))

    def _put(self) -> None:
        index = int(self.readline()[:-1])  # text: any integer, whose hashes could collide
        if not 0 <= index < 1 << 32:
            raise pickle.UnpicklingError("a memo index beyond 32 bits")
        self.memo[index] = self.stack[-1]

    def _mark(self) -> None:
        """MARK; the numbers that follow it (a list's, up to the next memo or other opcode)
        read at once by the C unpickler, which a run of them cannot lead astray: 4x faster."""
        self.metastack.append(self.stack)
        self.stack = []
        self.append = self.stack.append
        if self._unframer.current_frame is None:  # protocol 4 frames: read one by one
            start = self._buffer.tell()
            run = _NUMBERS.match(self._data, start)
            if run is not None and run.end() - start > 64:
                self.stack.extend(pickle.loads(b"\x80\x02(" + run.group() + b"l."))
                self._buffer.seek(run.end())

    def _refuse(self) -> None:
        raise pickle.UnpicklingError("a set, or an object made by its class")

    def _unknown(self) -> None:
        raise pickle.UnpicklingError("an opcode pickle does not have")


def _into_dict(target: Any, items: list[Any]) -> dict[Any, Any]:
    """``items`` (key, value, key, ...) set in the dict ``target``; keys are text or 64-bit
    integers, whose hashes a file cannot make collide."""
    if type(target) is not dict:
        raise pickle.UnpicklingError("items are set in something other than a dict")
    keys = items[::2]
    if len(items) % 2:
        raise pickle.UnpicklingError("a dict's items are not pairs")
    if not all(type(k) is str or (type(k) is int and -(1 << 63) <= k < 1 << 64) for k in keys):
        raise pickle.UnpicklingError("a dict key other than text or an integer")
    target.update(zip(keys, items[1::2], strict=True))
    return target


_REPLACED = {
    pickle.BUILD: RestrictedUnpickler._build,
    pickle.SETITEMS: RestrictedUnpickler._setitems,
    pickle.SETITEM: RestrictedUnpickler._setitem,
    pickle.DICT: RestrictedUnpickler._dict,
    pickle.PUT: RestrictedUnpickler._put,
    pickle.MARK: RestrictedUnpickler._mark,
    **dict.fromkeys(
        [pickle.EMPTY_SET, pickle.ADDITEMS, pickle.FROZENSET, pickle.INST, pickle.OBJ,
         pickle.NEWOBJ, pickle.NEWOBJ_EX], RestrictedUnpickler._refuse,
    ),
}  # fmt: skip
RestrictedUnpickler.dispatch.update({op[0]: fn for op, fn in _REPLACED.items()})
for _byte in set(range(256)) - set(RestrictedUnpickler.dispatch):
    RestrictedUnpickler.dispatch[_byte] = RestrictedUnpickler._unknown


_NUMBERS = re.compile(rb"(?:K.|M..|J....|G.{8}|N|\x88|\x89)+", re.DOTALL)
"""Opcodes of numbers, None and booleans, one after the other (the bulk of a rollout: its
token ids, masks and log-probabilities)."""


class _TooLarge(Exception):
    """The file makes more than its bound."""


_NDARRAY = object()
"""``numpy.ndarray`` in a pickle: only the first argument of ``_reconstruct`` (the class itself,
called, would allocate any shape)."""


def _empty_dict() -> dict[Any, Any]:
    """``collections.OrderedDict()``, as torch's tensors hold one (a dict keeps order)."""
    return {}


def _scalar(dtype: Any, data: Any) -> Any:
    """``numpy.core.multiarray.scalar``: a numpy number from its bytes."""
    if not (isinstance(dtype, np.dtype) and dtype.kind in NUMERIC and isinstance(data, bytes)):
        raise pickle.UnpicklingError("a numpy scalar other than a number")
    if len(data) != dtype.itemsize:
        raise pickle.UnpicklingError("a numpy scalar of the wrong size")
    return np.frombuffer(data, dtype)[0]


def naturals(values: Any) -> bool:
    """Whether ``values`` is a tuple of natural numbers (integers, 0 or more)."""
    return isinstance(values, tuple) and all(type(v) is int and v >= 0 for v in values)


def _array_state(state: Any) -> bool:
    """Whether ``state`` is what numpy pickles for an array of numbers: version, shape, dtype,
    Fortran order and exactly the bytes the shape takes."""
    return (
        isinstance(state, tuple)
        and len(state) == 5
        and state[0] == 1
        and naturals(state[1])
        and isinstance(state[2], np.dtype)
        and state[2].kind in NUMERIC
        and not (state[2].fields or state[2].subdtype)
        and type(state[3]) is bool
        and isinstance(state[4], bytes)
        and len(state[4]) == math.prod(state[1]) * state[2].itemsize
    )


def _dtype_state(state: Any) -> bool:
    """Whether ``state`` is what numpy pickles for a dtype of numbers (its byte order)."""
    return (
        isinstance(state, tuple)
        and len(state) == 8
        and state[0] == 3
        and state[1] in ("<", ">", "|", "=")
        and state[2:] == (None, None, None, -1, -1, 0)
    )


def _member(archive: zipfile.ZipFile, name: str, needed: int) -> tuple[bytes, int]:
    """The first ``needed`` bytes of an archive member (never inflating more), and the size
    the archive declares for it."""
    info = archive.getinfo(name)
    with archive.open(info) as member:
        return member.read(needed), info.file_size


def flattened_size(path: str, value: Any, bound: int) -> int:
    """The bytes ``value`` amounts to once flattened (8 a number, text and arrays their size, a
    shared value wherever it is used); refused beyond ``bound``, deeper than
    :data:`MAX_DEPTH`, where a value contains itself, or holds anything but plain values."""
    sizes: dict[int, int] = {}
    inside: set[int] = set()
    plain = (int, float, bool, type(None), complex)
    plain_types = set(plain)

    def size(obj: Any, depth: int) -> int:
        if isinstance(obj, (*plain, np.generic)):
            return 8
        if isinstance(obj, str | bytes | bytearray):
            return 8 + len(obj)
        key = id(obj)
        if key in sizes:
            return sizes[key]
        if key in inside:
            msg = f"{path}: a {type(obj).__name__} that contains itself, which no rollout has"
            raise DataError(msg + ". Hint: check the file")
        if depth > MAX_DEPTH:
            msg = f"{path}: values nested deeper than {MAX_DEPTH} levels"
            raise DataError(msg + ". Hint: check the file")
        inside.add(key)
        if isinstance(obj, np.ndarray):
            total = 8 + obj.nbytes
        elif isinstance(obj, list | tuple):
            kinds = set(map(type, obj))
            if kinds <= plain_types:  # token ids, masks: no loop in Python
                total = 8 + 8 * len(obj)
            elif kinds <= {str}:
                total = 8 + 8 * len(obj) + sum(map(len, obj))
            else:
                total = 8 + sum(size(item, depth + 1) for item in obj)
        elif isinstance(obj, dict):
            total = 8 + sum(size(k, depth + 1) + size(v, depth + 1) for k, v in obj.items())
        else:  # a global left as a value: a dtype, a torch type, a function
            kind = "numpy dtype" if isinstance(obj, np.dtype) else "torch type" if isinstance(
                obj, ElementType) else "function"  # fmt: skip
            msg = f"{path}: the file holds a {kind} as a value, where rollouts hold plain values"
            raise DataError(msg + ". Hint: advcli reads .pt files of plain values and tensors")
        inside.discard(key)
        if total > bound:
            raise _too_large(path, bound)
        sizes[key] = total
        return total

    return size(value, 0)


def _too_large(path: str, bound: int) -> DataError:
    msg = (
        f"{path}: the file's values would take more than {bound:,} bytes once read (a .pt file "
        f"may expand to {EXPANSION} times its size, or {EXPANSION_VARIABLE} bytes, default "
        f"{FLOOR_BYTES >> 30} GiB; a value shared in the file counts wherever it is used). "
        f"Hint: if the file is a real dump, raise {EXPANSION_VARIABLE}"
    )
    return DataError(msg)


UNREADABLE = (
    pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError,
    AttributeError, OverflowError, struct.error, zlib.error, zipfile.BadZipFile,
    NotImplementedError, RuntimeError, OSError,
)  # fmt: skip
"""What a damaged pickle or archive raises while it is read (a pickle's own errors, a short
read, a bad CRC, an offset out of the file, a compression or encryption zipfile does not
read)."""


def _refuse_compressions(path: str, archive: zipfile.ZipFile) -> None:
    """A member compressed other than in :data:`COMPRESSIONS` refused before any is read."""
    for info in archive.infolist():
        if info.compress_type not in COMPRESSIONS:
            names = zipfile.compressor_names  # type: ignore[attr-defined]  # not in its stubs
            method = names.get(info.compress_type, "an unknown method")
            msg = (
                f"{path}: archive member {info.filename[:80]!r} is compressed with {method} "
                f"(method {info.compress_type}), which advcli does not read: it reads members "
                "stored (as torch.save writes them) or deflated, whose inflating it can bound. "
                "Hint: save the file with torch.save"
            )
            raise DataError(msg)


def load(path: str) -> Any:
    """The object a ``torch.save`` file holds, if it is made of plain values and dense tensors,
    within :func:`expansion_bound` of the file's size."""
    bound = expansion_bound(os.path.getsize(path))
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError):
        msg = f"{path}: not a torch.save zip archive (a legacy torch file?)"
        raise DataError(msg + ". Hint: check the file is complete") from None
    with archive:
        value = read_archive(path, archive, bound)
    flattened_size(path, value, bound)
    return value


def read_archive(
    path: str,
    archive: zipfile.ZipFile,
    bound: int,
    unpickler: type[RestrictedUnpickler] = RestrictedUnpickler,
    kind: str = ".pt files",
) -> Any:
    """The object the ``torch.save`` archive ``archive`` (of the file ``path``, or inside it)
    holds, read by ``unpickler`` within ``bound`` bytes (``kind``: as :func:`refusals`)."""
    _refuse_compressions(path, archive)
    names = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
    if not names:
        msg = f"{path}: not a torch.save file (no data.pkl in the archive)"
        raise DataError(msg + ". Hint: check the file")
    with refusals(path, bound, kind):
        data, _ = _member(archive, names[0], bound + 1)
        if len(data) > bound:
            raise _TooLarge
        return unpickler(data, archive, names[0][: -len("data.pkl")], bound).load()


@contextlib.contextmanager
def refusals(path: str, bound: int, kind: str = ".pt files") -> Iterator[None]:
    """What reading the pickle of ``path`` refuses or fails on, as one line naming the file
    (``kind``: the files the hint says advcli reads)."""
    try:
        yield
    except _Refused as exc:
        msg = (
            f"{path}: the file holds {exc}, which advcli does not read (it reads plain "
            "values, numpy arrays and dense tensors of numbers, without torch). Hint: "
            "save the rollouts as plain values or dense tensors"
        )
        raise DataError(msg) from None
    except _TooLarge:
        raise _too_large(path, bound) from None
    except UNREADABLE as exc:
        msg = f"{path}: cannot read the rollouts safely ({str(exc)[:200]})"
        hint = f". Hint: advcli reads {kind} of plain values and dense tensors only"
        raise DataError(msg + hint) from None
