"""A critic exported to ONNX: the session, its device, and the model contract.

Contract. The model takes token ids and an attention mask, both integer [batch, seq] (int64, or
int32), and returns one float value per position, [batch, seq] or [batch, seq, 1]. The tensors
are picked by name: inputs named ``input_ids`` and ``attention_mask`` if the model has them,
otherwise its two inputs in order (ids first); the model's first output. ``input_name``,
``mask_name`` and ``output_name`` (the CLI's ``--input-name``, ``--mask-name``, ``--output-name``)
choose others. A model that does not fit is refused at load with a one-line :class:`UsageError`
that lists its inputs and outputs. A static sequence dimension is the longest row the critic
takes (``Critic.max_len``); a static batch dimension caps the rows per batch. Rows are padded on
the right (id 0, mask 0); :mod:`advcli.critic.batching` cuts the batches and aligns the outputs.

Shift. A causal value head's output at position j has seen tokens 0..j, so it is the value of the
state *after* token j. advcli's ``values[t]`` is V(s_t), the value *before* token t is chosen, so
by default ``values[t] = out[t - 1]``. Position 0 (the first scored position of a row) has no
earlier output and gets NaN: it is a prompt token in every row that has a prompt, and the
engine refuses a NaN value on an action token rather than invent one. ``shift=False`` is for
models that already output V(s_t): ``values[t] = out[t]``.

Device. ``"cpu"`` runs on ONNX Runtime's CPU provider. ``"cuda"`` and ``"auto"`` ask for
``["CUDAExecutionProvider", "CPUExecutionProvider"]`` when the installed ONNX Runtime lists CUDA,
then check the session's providers, because a session whose CUDA libraries fail to load comes
back CPU-only without an error. ``"auto"`` then runs on whatever the session got; ``"cuda"`` is a
:class:`UsageError` with the install hint. ``Critic.provider`` records the provider that ran.
onnxruntime is imported only when a critic is loaded, so the rest of advcli works without it.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from advcli import installed, versions
from advcli.critic import batching
from advcli.errors import DataError, DependencyError, UsageError
from advcli.io.checksum import file_sha256
from advcli.lazy_imports import np
from advcli.params import check_option_file

# Measured with ``python -m bench.critic_bench --rows 600 --repeat 5`` (2 shared vCPUs,
# onnxruntime 1.32, the bench's causal critic with d=128: 855k tokens, lengths lognormal with
# median 960, capped at 8k). Sorted batches, tokens/s (padding efficiency) by budget:
#   1 (a row per batch) 1.61M (100%) | 2k 1.66M (99.8%) | 4k 1.65M (99.5%) | 8k 1.53M (98.8%)
#   16k 1.42M (97.2%) | 32k 1.25M (94.2%) | 64k 1.18M (89.4%); unsorted at 16k: 0.78M (51.5%).
# On the CPU a 1k-token row already fills the cores, so larger batches only add padding and
# cache misses; 4k is at the top (runs on this shared machine vary by ~15%). Not measured on CUDA,
# where larger batches may pay: bench/gpu_check.py times several budgets.
DEFAULT_BATCH_TOKENS = 4096

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
DEVICES = ("auto", "cuda", "cpu")

_INSTALL_HINT = (
    f"Hint: {installed.pip_install('gpu')} (onnxruntime-gpu, CUDA 13, NVIDIA driver R580+; "
    "on a CUDA 12 host: pip install 'onnxruntime-gpu<1.27'), in place of the onnx extra."
)
_OVERRIDE_HINT = (
    "Hint: choose the tensors with `input_name`, `mask_name` and `output_name`, "
    "or export the critic to this contract."
)
_CONTRACT = (
    "a critic takes integer token ids and attention mask [batch, seq] and returns "
    "float values [batch, seq] or [batch, seq, 1]"
)
_INT_TYPES = {"tensor(int64)": "int64", "tensor(int32)": "int32"}  # numpy dtypes
_FLOAT_TYPES = ("tensor(float)", "tensor(float16)", "tensor(double)")


def _import_ort() -> Any:
    # The installed version first: an onnxruntime too old for this numpy fails on import.
    for package, extra in (("onnxruntime-gpu", "gpu"), ("onnxruntime", "onnx")):
        with contextlib.suppress(installed.NotInstalled):
            versions.check_optional(package, installed.version(package), extra)
    try:
        import onnxruntime
    except ImportError as exc:
        if importlib.util.find_spec("onnxruntime") is None:
            raise UsageError(
                f"ONNX Runtime is not installed: {installed.pip_install('onnx')} (CPU) or "
                f"{installed.pip_install('gpu')} (CUDA)"
            ) from None
        msg = f"ONNX Runtime is installed but cannot be imported ({_first_line(exc)})"
        raise DependencyError(f"{msg}. Hint: {installed.pip_install('onnx')} -U") from None
    return onnxruntime


def _dtype(arg: Any) -> str:
    kind: str = arg.type
    return kind.removeprefix("tensor(").removesuffix(")")


def _dims(arg: Any) -> str:
    return ", ".join("?" if d is None else str(d) for d in arg.shape)


def _describe(args: list[Any]) -> str:
    """``name: int64 [batch, seq]`` for each tensor, comma separated."""
    return ", ".join(f"{a.name}: {_dtype(a)} [{_dims(a)}]" for a in args) or "none"


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _static(dim: Any) -> int | None:
    return dim if isinstance(dim, int) and dim > 0 else None


def _open_session(ort: Any, path: Path, device: str) -> Any:
    options = ort.SessionOptions()
    # Fatal only: errors reach the user as our exceptions, a CUDA fallback through .provider.
    options.log_severity_level = 4

    def create(providers: list[str]) -> Any:
        try:
            return ort.InferenceSession(str(path), sess_options=options, providers=providers)
        except Exception as e:  # onnxruntime raises its own types for unreadable models
            raise UsageError(f"{path}: cannot load the critic: {_first_line(e)}") from None

    has_cuda = CUDA in ort.get_available_providers()
    if device == "cuda" and not has_cuda:
        raise UsageError(
            f"`device='cuda'`: this ONNX Runtime has no CUDA provider "
            f"(providers: {', '.join(ort.get_available_providers())}). {_INSTALL_HINT}"
        )
    if device == "cpu" or not has_cuda:
        return create([CPU])
    if hasattr(ort, "preload_dlls"):
        # Loads the CUDA and cuDNN libraries of the nvidia-* wheels, if present; missing ones
        # show up below as a CPU-only session.
        with contextlib.suppress(Exception):
            ort.preload_dlls()
    try:
        session = create([CUDA, CPU])
    except UsageError:
        if device == "cuda":
            raise
        return create([CPU])  # "auto": CUDA broke the session; the CPU may still load it
    if device == "cuda" and session.get_providers()[0] != CUDA:
        raise UsageError(
            "`device='cuda'`: ONNX Runtime could not start CUDA (the session fell back to "
            f"{', '.join(session.get_providers())}); check the NVIDIA driver and the CUDA/cuDNN "
            f"libraries. {_INSTALL_HINT}"
        )
    return session


class Critic:
    """A loaded ONNX critic; build it with :func:`load_critic`."""

    def __init__(
        self,
        path: Path,
        session: Any,
        ort: Any,
        input_name: str | None,
        mask_name: str | None,
        output_name: str | None,
    ) -> None:
        self.path = path
        self.sha256 = file_sha256(path)
        self.provider: str = session.get_providers()[0]
        self._session = session
        self._ort = ort
        inputs, outputs = session.get_inputs(), session.get_outputs()
        ids_arg, mask_arg = self._pick_inputs(inputs, outputs, input_name, mask_name)
        out_arg = self._pick_output(inputs, outputs, output_name)
        self.input_name: str = ids_arg.name
        self.mask_name: str = mask_arg.name
        self.output_name: str = out_arg.name
        self._ids_dtype = np.dtype(_INT_TYPES[ids_arg.type]).type
        self._mask_dtype = np.dtype(_INT_TYPES[mask_arg.type]).type
        self._static_batch = _static(ids_arg.shape[0])
        self.max_len: int | None = _static(ids_arg.shape[1])

    def _refuse(self, problem: str, inputs: list[Any], outputs: list[Any]) -> UsageError:
        return UsageError(
            f"{self.path}: {problem}; {_CONTRACT}. This model has inputs {_describe(inputs)} "
            f"and outputs {_describe(outputs)}. {_OVERRIDE_HINT}"
        )

    def _pick_inputs(
        self, inputs: list[Any], outputs: list[Any], ids_name: str | None, mask_name: str | None
    ) -> tuple[Any, Any]:
        by_name = {a.name: a for a in inputs}
        for option, name in (("input_name", ids_name), ("mask_name", mask_name)):
            if name is not None and name not in by_name:
                given = f"`{option}={name!r}`"
                raise self._refuse(f"{given} is not an input of the model", inputs, outputs)
        if len(inputs) != 2:
            raise self._refuse(f"the model has {len(inputs)} inputs, not 2", inputs, outputs)
        if ids_name is not None and ids_name == mask_name:
            raise self._refuse("`input_name` and `mask_name` name the same input", inputs, outputs)
        if (
            ids_name is None
            and mask_name is None
            and set(by_name) == {"input_ids", "attention_mask"}
        ):
            ids_name, mask_name = "input_ids", "attention_mask"
        names = [a.name for a in inputs]
        if ids_name is None:
            ids_name = next(n for n in names if n != mask_name)
        if mask_name is None:
            mask_name = next(n for n in names if n != ids_name)
        for name in (ids_name, mask_name):
            arg = by_name[name]
            if arg.type not in _INT_TYPES:
                raise self._refuse(
                    f"input '{name}' is {_dtype(arg)}, not int64 or int32", inputs, outputs
                )
            if len(arg.shape) != 2:
                problem = f"input '{name}' has rank {len(arg.shape)}, not 2"
                raise self._refuse(problem, inputs, outputs)
        return by_name[ids_name], by_name[mask_name]

    def _pick_output(self, inputs: list[Any], outputs: list[Any], name: str | None) -> Any:
        by_name = {a.name: a for a in outputs}
        if name is not None and name not in by_name:
            raise self._refuse(
                f"`output_name={name!r}` is not an output of the model", inputs, outputs
            )
        if not outputs:
            raise self._refuse("the model has no output", inputs, outputs)
        arg = by_name[name] if name is not None else outputs[0]
        if arg.type not in _FLOAT_TYPES:
            raise self._refuse(f"output '{arg.name}' is {_dtype(arg)}, not float", inputs, outputs)
        # A symbolic last dimension is allowed here; score() checks the actual shape.
        fits = len(arg.shape) == 2 or (len(arg.shape) == 3 and _static(arg.shape[2]) in (None, 1))
        if not fits:
            problem = (
                f"output '{arg.name}' has shape [{_dims(arg)}], not [batch, seq] or [batch, seq, 1]"
            )
            raise self._refuse(problem, inputs, outputs)
        return arg

    def _run(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        if self.provider != CUDA:
            feeds = {self.input_name: ids, self.mask_name: mask}
            values: np.ndarray = self._session.run([self.output_name], feeds)[0]
            return values
        # IO binding: inputs copied to the GPU once, the output allocated there and copied back.
        ort_value = self._ort.OrtValue.ortvalue_from_numpy
        binding = self._session.io_binding()
        binding.bind_ortvalue_input(self.input_name, ort_value(ids, "cuda", 0))
        binding.bind_ortvalue_input(self.mask_name, ort_value(mask, "cuda", 0))
        binding.bind_output(self.output_name, "cuda", 0)
        self._session.run_with_iobinding(binding)
        copied: np.ndarray = binding.copy_outputs_to_cpu()[0]
        return copied

    def score(
        self,
        input_ids: np.ndarray,
        offsets: np.ndarray,
        *,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        shift: bool = True,
        max_len: int | None = None,
        truncate: str = "error",
        describe_row: Callable[[int], str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> Scored:
        """Values for every token (float32, aligned with ``input_ids``, rows in their order).

        Rows are batched as :func:`~advcli.critic.batching.batches` says. A row over
        ``max_len`` (the smaller of the argument and the model's static length) is a
        :class:`DataError`, or with ``truncate="left"`` only its last ``max_len`` tokens are
        scored and the earlier ones get NaN. ``progress(tokens_done, tokens_total)`` is called
        after each batch.
        """
        if truncate not in ("error", "left"):
            raise UsageError(f"truncate must be 'error' or 'left', not '{truncate}'")
        if batch_tokens < 1:
            raise UsageError(f"the batch size in tokens must be at least 1, not {batch_tokens}")
        input_ids = np.asarray(input_ids)
        offsets = np.asarray(offsets, dtype=np.int64)
        if offsets[0] != 0 or offsets[-1] != len(input_ids):
            raise ValueError("offsets must start at 0 and end at len(input_ids)")
        limits = [n for n in (max_len, self.max_len) if n is not None]
        limit = min(limits) if limits else int(np.diff(offsets).max(initial=0))
        starts, lens, cut = batching.keep_last(offsets, limit)
        if len(cut) and truncate == "error":
            i = int(cut[0])
            where = describe_row(i) if describe_row is not None else f"row {i}"
            raise DataError(
                f"{where}: column 'input_ids': row has {int(offsets[i + 1] - offsets[i])} tokens, "
                f"more than the critic's maximum of {limit}. Hint: pass `max_len_truncate='left'` "
                f"to score only the last {limit} tokens, or split the rollout into segments."
            )

        values = np.full(len(input_ids), np.nan, dtype=np.float32)
        total = int(lens.sum())
        done = padded = 0
        for rows, width in batching.batches(
            lens, batch_tokens, width=self.max_len, max_rows=self._static_batch
        ):
            height = self._static_batch or len(rows)
            batch = batching.pad(
                input_ids,
                starts[rows],
                lens[rows],
                height,
                width,
                ids_dtype=self._ids_dtype,
                mask_dtype=self._mask_dtype,
            )
            try:
                out = self._run(batch.ids, batch.mask)
            except Exception as e:  # e.g. a token id outside the vocabulary, or out of memory
                raise DataError(
                    f"{self.path}: the critic failed on a batch of {height} x {width} tokens: "
                    f"{_first_line(e)}"
                ) from None
            if out.shape[:2] != (height, width) or out.size != height * width:
                raise UsageError(
                    f"{self.path}: output '{self.output_name}' has shape {list(out.shape)} for "
                    f"inputs of shape {[height, width]}; {_CONTRACT}."
                )
            written = batching.unpad(out.reshape(height, width), batch, values, shift=shift)
            if not np.isfinite(values[written]).all():
                _refuse_non_finite(values, written, offsets, describe_row)
            padded += height * width
            done += batch.tokens
            if progress is not None:
                progress(done, total)
        return Scored(values, truncated_rows=len(cut), padded_tokens=padded)


def _refuse_non_finite(
    values: np.ndarray,
    written: np.ndarray,
    offsets: np.ndarray,
    describe_row: Callable[[int], str] | None,
) -> NoReturn:
    token = int(written[~np.isfinite(values[written])].min())
    row = int(np.searchsorted(offsets, token, side="right")) - 1
    where = describe_row(row) if describe_row is not None else f"row {row}"
    raise DataError(
        f"{where}: the critic returned {values[token]} for token {token - int(offsets[row])} "
        "(a value must be a finite number). Hint: check the model's weights and its export"
    )


@dataclass(frozen=True)
class Scored:
    """What :meth:`Critic.score` gives: the values, and how the call went."""

    values: np.ndarray  # float32 per token; NaN where no output was taken
    truncated_rows: int  # rows whose earlier tokens were left out (``truncate="left"``)
    padded_tokens: int  # tokens fed to the model, padding included


def load_critic(
    path: str | Path,
    *,
    device: str = "auto",
    input_name: str | None = None,
    mask_name: str | None = None,
    output_name: str | None = None,
) -> Critic:
    """Load an ONNX critic on ``device`` ("auto", "cuda", "cpu"); check it fits the contract."""
    if device not in DEVICES:
        raise UsageError(f"`device` must be one of {', '.join(DEVICES)}, not '{device}'")
    path = Path(path)
    check_option_file("critic", str(path), "model.onnx")
    ort = _import_ort()
    session = _open_session(ort, path, device)
    return Critic(path, session, ort, input_name, mask_name, output_name)
