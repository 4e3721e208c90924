"""verl's ``skip.rollout`` dump: ``{dump_dir}/{experiment}_{project}/GBS{batch}_N{n}_in{prompt}_
out{response}/{step}/gen_batch.dp``, the output of the rollout's ``generate_sequences``, read as
token ids without verl, torch or tensordict, and without running code from the file.

verl (0.9.1, ``verl/utils/skip/rollout_skip.py``) writes it with ``DataProto.save_to_disk``: a
plain pickle of ``verl.protocol.DataProto``, whose ``__getstate__`` gives three things:

- the batch as the bytes of a ``torch.save`` archive of a consolidated TensorDict: one byte
  storage holding every tensor, ``tensordict._reductions._rebuild_tensordict_files_consolidated``
  naming each one's element type, shape and byte range (its ``leaves``). The archive is read
  by :mod:`advcli.presets.torch_file`, that global rebuilt here from those ranges;
- ``non_tensor_batch``: numpy arrays, of numbers or of Python values (``dtype=object``);
- ``meta_info``: a dict of plain values and numpy numbers.

Anything else in the file (another class, a torch or tensordict global, a nested tensor) is
refused in one line naming it; the bounds on what a file may expand to are torch_file's.

The rows, as verl's trainer reads them: each row's ``prompts`` (left-padded) and ``responses``
(right-padded) without the padding the ``attention_mask`` marks are its ``input_ids``; the action
mask is ``response_mask`` (0 on tool and environment tokens; the response's attention where
there is none); the reward is the sum over the response of ``token_level_scores``, else
``rm_scores`` (the reward at the last response token, as the agent loop scores it), summed in
float32 as verl's rollout dump writes its ``score``; ``rollout_log_probs`` become ``logprobs``.
The generation output holds no uid: its rows are the prompts repeated ``n`` times, interleaved
(``repeat(n, interleave=True)``), so a group is each block of ``n`` rows, ``n`` read from the
``N{n}`` of the folder verl names (else ``group_size``) and checked against the rows' prompts.
A ``uid`` in the file, where there is one, is the group. The step is the folder's number.
"""

from __future__ import annotations

import io
import math
import os
import pickle
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from advcli.errors import DataError, UsageError, where
from advcli.io.arrow import list_array
from advcli.lazy_imports import np, pa
from advcli.presets import torch_file
from advcli.presets.base import Converted, PresetOptions
from advcli.presets.torch_file import ELEMENTS, ElementType, RestrictedUnpickler, naturals

FOLDER = re.compile(r"^GBS\d+_N(\d+)_in\d+_out\d+$")
"""The folder RolloutSkip writes a run's steps in; its ``N`` is rollout.n."""
KIND = "verl gen_batch.dp files"
"""What the refusals' hint says advcli reads."""
OBJECT_DTYPE_STATE = (3, "|", None, None, None, -1, -1, 63)
"""What numpy pickles as the state of ``dtype('O')``."""
TENSORDICT_KEYS = ("cls", "cls_metadata", "leaves", "non_tensors", "size")
"""A consolidated TensorDict's metadata; every other key is a sub-TensorDict's."""


_DATA_PROTO = object()
"""``verl.protocol.DataProto`` in a pickle: only made empty (``NEWOBJ`` with no arguments), its
state set next (the class itself is never imported)."""


@dataclass
class DataProto:
    """A ``DataProto`` as read: ``batch`` its tensors as numpy arrays, ``non_tensor_batch`` its
    arrays (those of Python values as lists), ``meta_info`` its plain values."""

    batch: dict[str, np.ndarray]
    non_tensor_batch: dict[str, Any]
    meta_info: dict[str, Any]


class _Unbuilt:
    """A DataProto made, awaiting its state (the three things its ``__getstate__`` gives)."""

    state: tuple[Any, Any, Any] | None = None


class ProtoUnpickler(RestrictedUnpickler):
    """torch_file's restricted unpickler, reading also a ``DataProto`` and numpy arrays of
    Python values (``non_tensor_batch``)."""

    dispatch: ClassVar[dict[int, Any]] = dict(RestrictedUnpickler.dispatch)

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("verl.protocol", "DataProto"):
            return _DATA_PROTO
        return super().find_class(module, name)

    def _dtype(self, spec: Any, align: Any = False, copy: Any = True) -> np.dtype:
        """``numpy.dtype``: of numbers, or ``O8`` (Python values)."""
        if spec != "O8":
            return super()._dtype(spec, align, copy)
        dtype = np.dtype("O", False, True)
        self._unbuilt[id(dtype)] = dtype
        return dtype

    def _newobj(self) -> None:
        """NEWOBJ: only an empty ``DataProto``."""
        args, cls = self.stack.pop(), self.stack.pop()
        if cls is not _DATA_PROTO or args != ():
            raise pickle.UnpicklingError("an object made by its class, other than a DataProto")
        made = _Unbuilt()
        self._unbuilt[id(made)] = made
        self.append(made)

    def _build(self) -> None:
        """BUILD: a DataProto's state, an array of Python values, their dtype; else numpy's
        arrays of numbers (torch_file's)."""
        state, target = self.stack[-1], self.stack[-2] if len(self.stack) > 1 else None
        made = self._unbuilt.get(id(target))
        if isinstance(made, _Unbuilt) and isinstance(state, tuple) and len(state) == 3:
            made.state = state
        elif isinstance(made, np.ndarray) and _object_array_state(state):
            self._make(8 * len(state[4]))
            made.__setstate__(state)
        elif isinstance(made, np.dtype) and made.kind == "O" and state == OBJECT_DTYPE_STATE:
            pass  # the state of every object dtype: nothing to set
        else:
            return super()._build()
        self.stack.pop()
        del self._unbuilt[id(made)]
        return None


ProtoUnpickler.dispatch[pickle.NEWOBJ[0]] = ProtoUnpickler._newobj
ProtoUnpickler.dispatch[pickle.BUILD[0]] = ProtoUnpickler._build


class TensorDictUnpickler(RestrictedUnpickler):
    """torch_file's restricted unpickler, reading also a consolidated TensorDict: a dict of
    its tensors by name (a sub-TensorDict's as ``outer.inner``)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("tensordict._reductions", "_rebuild_tensordict_files_consolidated"):
            return self._consolidated
        return super().find_class(module, name)

    def _rebuild_tensor_v2(
        self, storage: Any, offset: Any, size: Any, stride: Any, *rest: Any
    ) -> np.ndarray:
        """The consolidated storage's bytes as they were read, not copied (a TensorDict's one
        storage is as large as the file); any other tensor as torch_file rebuilds it."""
        stored = id(storage) in self._storage_ids  # an array, then
        if (
            stored
            and storage.dtype == np.uint8
            and (offset, size, stride) == (0, (len(storage),), (1,))
        ):
            return storage
        return super()._rebuild_tensor_v2(storage, offset, size, stride, *rest)

    def _consolidated(self, metadata: Any, storage: Any) -> dict[str, np.ndarray]:
        if not (isinstance(storage, np.ndarray) and storage.dtype == np.uint8
                and storage.ndim == 1):  # fmt: skip
            raise pickle.UnpicklingError("a consolidated TensorDict without its byte storage")
        tensors: dict[str, np.ndarray] = {}
        self._leaves(metadata, storage, "", tensors)
        return tensors

    def _leaves(self, metadata: Any, storage: np.ndarray, prefix: str,
                into: dict[str, np.ndarray]) -> None:  # fmt: skip
        """The tensors ``metadata`` names (``leaves``: element type, shape, byte range, whether
        padded) cut from ``storage`` into ``into``; its sub-TensorDicts' under their names."""
        if not (isinstance(metadata, dict) and isinstance(metadata.get("leaves"), dict)):
            raise pickle.UnpicklingError("a consolidated TensorDict without its leaves")
        if len(prefix) > 1000:
            raise pickle.UnpicklingError("TensorDicts nested too deep")
        for key, leaf in metadata["leaves"].items():
            if key.startswith("<NJT"):
                raise pickle.UnpicklingError(f"a nested (jagged) tensor {key[:60]!r}")
            into[prefix + key] = self._leaf(leaf, storage)
        for key, inner in metadata.items():
            if key not in TENSORDICT_KEYS:
                self._leaves(inner, storage, f"{prefix}{key}.", into)

    def _leaf(self, leaf: Any, storage: np.ndarray) -> np.ndarray:
        """One tensor: ``(element type, shape, start, stop, padded[, ragged dim])``, its bytes
        ``storage[start:stop]`` (padded: the shape's elements first)."""
        if not (isinstance(leaf, tuple | list) and len(leaf) in (5, 6)):
            raise pickle.UnpicklingError("a TensorDict leaf other than its type, shape and range")
        dtype, shape, start, stop = leaf[:4]
        element = dtype.removeprefix("torch.") if isinstance(dtype, str) else None
        if element not in ELEMENTS or element == dtype:
            raise pickle.UnpicklingError(f"a tensor of {str(dtype)[:40]}")
        if not (isinstance(shape, list | tuple) and naturals(tuple(shape))
                and naturals((start, stop))):  # fmt: skip
            raise pickle.UnpicklingError("a TensorDict leaf's shape or range is not integers")
        kind = ElementType(element)
        nbytes = math.prod(shape) * kind.stored.itemsize
        if not (start <= stop <= len(storage) and nbytes <= stop - start):
            raise pickle.UnpicklingError("a TensorDict leaf reaches past its storage")
        self._make(nbytes * (2 if element == "bfloat16" else 1))
        return kind.decoded(storage[start : start + nbytes], self._order).reshape(shape)


def _object_array_state(state: Any) -> bool:
    """Whether ``state`` is what numpy pickles for an array of Python values: version, shape,
    dtype('O'), Fortran order and one value per element."""
    return (
        isinstance(state, tuple)
        and len(state) == 5
        and state[0] == 1
        and naturals(state[1])
        and isinstance(state[2], np.dtype)
        and state[2].kind == "O"
        and type(state[3]) is bool
        and isinstance(state[4], list)
        and len(state[4]) == math.prod(state[1])
    )


def load(path: str) -> DataProto:
    """The ``DataProto`` a ``gen_batch.dp`` file holds, read without running code from it,
    within torch_file's expansion bound of the file's size."""
    bound = torch_file.expansion_bound(os.path.getsize(path))
    made = _unpickled(path, bound)  # the file's bytes freed before the batch is read
    if not isinstance(made, _Unbuilt) or made.state is None:
        msg = f"{path}: not a pickled verl DataProto (verl's DataProto.save_to_disk writes one)"
        raise DataError(msg + ". Hint: check the file")
    packed, non_tensor, meta = made.state
    if not (isinstance(non_tensor, dict) and isinstance(meta, dict)
            and all(isinstance(v, np.ndarray) for v in non_tensor.values())):  # fmt: skip
        msg = f"{path}: a DataProto whose non_tensor_batch is not a dict of numpy arrays"
        raise DataError(msg + ". Hint: check the file")
    non_tensor = {k: v.tolist() if v.dtype.kind == "O" else v for k, v in non_tensor.items()}
    torch_file.flattened_size(path, {"non_tensor_batch": non_tensor, "meta_info": meta}, bound)
    return DataProto(_batch(path, packed, bound), non_tensor, meta)


def _unpickled(path: str, bound: int) -> Any:
    with open(path, "rb") as fh:
        data = fh.read()
    with torch_file.refusals(path, bound, KIND):
        return ProtoUnpickler(data, None, "", bound).load()


def _batch(path: str, packed: Any, bound: int) -> dict[str, np.ndarray]:
    """The DataProto's batch: its tensors, from the ``torch.save`` archive's bytes."""
    if packed is None:
        return {}
    try:
        archive = zipfile.ZipFile(io.BytesIO(packed)) if isinstance(packed, bytes) else None
    except (zipfile.BadZipFile, ValueError):
        archive = None
    if archive is None:
        msg = (
            f"{path}: the DataProto's batch is not a torch.save archive (verl writes one unless "
            "VERL_DATAPROTO_SERIALIZATION_METHOD=numpy). Hint: dump it with that variable unset"
        )
        raise DataError(msg)
    with archive:
        tensors = torch_file.read_archive(path, archive, bound, TensorDictUnpickler, KIND)
    if not isinstance(tensors, dict):
        msg = f"{path}: the DataProto's batch is not a consolidated TensorDict"
        raise DataError(msg + ". Hint: check the file")
    return tensors


def convert(path: str, options: PresetOptions) -> Converted:
    """A ``gen_batch.dp`` file's rows in advcli's schema (see the module's docstring)."""
    proto = load(path)
    batch, rows = proto.batch, _rows(path, proto.batch)
    prompts = batch["prompts"]
    real = batch["attention_mask"].astype(bool)
    offsets = np.r_[0, np.cumsum(real.sum(axis=1))].astype(np.int64)

    def tokens(on_prompt: Any, on_response: np.ndarray, dtype: Any) -> pa.Array:
        """A per-token column: the prompt's and response's values, without the padding."""
        whole = np.concatenate([np.broadcast_to(on_prompt, prompts.shape), on_response], 1)
        return list_array(whole[real].astype(dtype), offsets)

    acting = batch.get("response_mask", real[:, prompts.shape[1] :])
    columns: dict[str, pa.Array] = {
        "input_ids": tokens(prompts, batch["responses"], np.int64),
        "action_mask": tokens(0, acting, np.int8),
    }
    if "rollout_log_probs" in batch:
        columns["logprobs"] = tokens(0.0, batch["rollout_log_probs"], np.float32)
    scores = batch.get("token_level_scores", batch.get("rm_scores"))
    if scores is None:
        msg = (
            f"{path}: no rm_scores or token_level_scores: verl scored this batch after "
            "generation, so its gen_batch.dp holds no reward. Hint: read the rollout dump "
            "(trainer.rollout_data_dir) instead"
        )
        raise DataError(msg)
    columns["reward"] = pa.array(scores.sum(axis=1, dtype=np.float32).astype(np.float64))
    step = _step(path)
    scope = "" if step is None else f"{step}:"
    groups = _groups(path, proto, prompts, options)
    columns["prompt_id"] = pa.array([f"{scope}{g}" for g in groups], pa.string())
    columns["rollout_id"] = pa.array([f"{scope}{row}" for row in range(rows)], pa.string())
    if step is not None:
        columns["step"] = pa.array(np.full(rows, step, dtype=np.int64))
    columns["batch"] = pa.array([str(step if step is not None else path)] * rows, pa.string())
    for name, values in proto.non_tensor_batch.items():
        numeric = isinstance(values, np.ndarray) and values.dtype.kind in "biuf"
        if numeric and values.shape == (rows,) and name not in columns:
            columns[name] = pa.array(values)
    return Converted(pa.table(columns))


REQUIRED = ("prompts", "responses", "attention_mask")


def _rows(path: str, batch: dict[str, np.ndarray]) -> int:
    """The batch's rows, its tensors checked: the ones read there, 2-D, of whole numbers
    where they are ids and masks, one row each per sample and as long as the prompt and
    response together."""
    missing = [name for name in REQUIRED if name not in batch]
    if missing:
        msg = f"{path}: the DataProto's batch has no {', '.join(missing)}, which verl's "
        raise DataError(msg + "generation output has. Hint: check the file is a gen_batch.dp")
    rows, prompt = batch["prompts"].shape[0], batch["prompts"].shape[-1]
    response = batch["responses"].shape[-1]
    widths = {"prompts": prompt, "responses": response, "attention_mask": prompt + response,
              "response_mask": response, "rm_scores": response,
              "token_level_scores": response, "rollout_log_probs": response}  # fmt: skip
    for name, width in widths.items():
        tensor = batch.get(name)
        if tensor is None:
            continue
        if tensor.shape != (rows, width):
            problem = f"shape {list(tensor.shape)}, where {[rows, width]} is expected"
            raise DataError(f"{where(path, None, name)}: {problem}. Hint: check the file")
        kind = "f" if name.endswith(("scores", "log_probs")) else "biu"
        if tensor.dtype.kind not in kind:
            verls = "floats" if kind == "f" else "integers"
            problem = f"a tensor of {tensor.dtype}, where verl writes {verls}"
            raise DataError(f"{where(path, None, name)}: {problem}. Hint: check the file")
    return rows


def _step(path: str) -> int | None:
    """The step RolloutSkip dumped the file at: the number of its folder."""
    name = Path(path).parent.name
    return int(name) if name.isdigit() else None


def _groups(path: str, proto: DataProto, prompts: np.ndarray, options: PresetOptions) -> list[Any]:
    """Each row's group: its ``uid`` where the file has one, else its block of ``n`` rows
    (rollout.n, from verl's folder name or ``group_size``), checked to share one prompt."""
    uid = proto.non_tensor_batch.get("uid")
    rows = len(prompts)
    if isinstance(uid, list) and len(uid) == rows and all(isinstance(u, str) for u in uid):
        return uid
    found = FOLDER.match(Path(path).parent.parent.name)
    n = options.group_size or (int(found.group(1)) if found else None)
    if n is None:
        msg = (
            f"{path}: no uid, and no GBS{{batch}}_N{{n}}_in{{prompt}}_out{{response}} folder "
            "naming rollout.n: verl's generation output holds n rollouts of each prompt in "
            "blocks, and nothing says how many. Hint: pass `group_size` (rollout.n)"
        )
        raise UsageError(msg)
    if rows % n:
        msg = f"{path}: {rows} rows are not blocks of {n} rollouts of a prompt (rollout.n)"
        raise DataError(msg + ". Hint: check `group_size`, or the folder's N")
    blocks = prompts.reshape(rows // n, n, -1)
    differ = np.flatnonzero((blocks != blocks[:, :1]).any(axis=2).ravel())
    if differ.size:
        row = int(differ[0])
        msg = (
            f"{where(path, row, 'prompts')}: not the prompt of the rows before it in its block of "
            f"{n} (rollout.n): verl writes each prompt's n rollouts one after another. Hint: "
            "check `group_size`, or the folder's N"
        )
        raise DataError(msg)
    return list(np.arange(rows) // n)
