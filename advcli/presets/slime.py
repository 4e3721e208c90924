"""slime and miles: ``--save-debug-rollout-data PATH`` or ``--dump-details DIR`` →
``rollout_data/{rollout_id}.pt``, ``torch.save({"rollout_id": N, "samples": [...]})``.

Each sample is a dict of plain values (read without torch and without running code from the
file: :mod:`advcli.presets.torch_file`): ``group_index`` (the group), ``index``, ``tokens``
(prompt and response ids), ``response_length``, ``loss_mask`` (over the response only: it is
aligned to the end of ``tokens``), ``reward`` (a number, or a dict: ``--reward-key`` picks one),
``status`` (``truncated`` when cut at the length limit, which slime ends as any sample: no
value after it, so advcli's ``truncated`` is not set), ``rollout_log_probs`` and
``teacher_log_probs`` (over the response: advcli's ``logprobs`` and ``teacher_logprobs``, 0
over the prompt, for ``--kl-coef``, ``--opd-coef`` and ``opd``), and more, which passes
through. Samples sharing a ``rollout_id``
are segments of one rollout, in ``index`` order.

**The train dump** (slime ``--save-debug-train-data`` or ``--dump-details DIR`` →
``train_data/{rollout_id}.pt``, format_version 2, slime@624b824
``slime/observability/train_data_utils.py``): what the trainer used, per sample
(``rollout_position``: its place in the rollout dump's ``samples``; ``tokens``; over the
response, ``advantages``, ``returns``, ``log_probs``, ``ref_log_probs``, ``entropy``, ``kl``,
``loss_masks``), every rank's samples gathered in one file. Beside a rollout dump of the same
number (``DIR/rollout_data/N.pt`` with ``DIR/train_data/N.pt``) it is joined to it: the trainer's
advantages (on the loss mask: its loss reads no other) and returns become ``source_advantages``
and ``source_returns`` (what ``check`` compares), its recomputed log-probabilities
``trainer_logprobs`` (what its KL and distillation read; the sampler's stay ``logprobs``, at the
same positions), ``ref_logprobs``, ``entropies`` and ``source_kl``. A train dump named on its
own is read through its rollout dump.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from advcli.errors import DataError
from advcli.io.arrow import list_array
from advcli.io.sources import refuse_pickle
from advcli.lazy_imports import np, pa
from advcli.presets.base import Converted, Preset, PresetOptions, Setting
from advcli.presets.slime_samples import (
    array_of,
    bad_field,
    checked_samples,
    integer,
    mask_of,
    numbers,
    one_group,
    rollout_id,
    samples_table,
    shown,
    token_ids,
)


def _load_pt(path: str) -> Any:
    """A ``.pt`` dump's object (:func:`advcli.presets.torch_file.load`)."""
    from advcli.presets import torch_file  # here: pickle and zipfile, which --help never needs

    return torch_file.load(path)


class Slime(Preset):
    name = "slime"
    convention = "slime"
    framework = "slime"
    switch = "--save-debug-rollout-data DIR/{rollout_id}.pt, or --dump-details DIR"
    writes = "DIR/rollout_data/{rollout_id}.pt"
    patterns = ("[0-9]*.pt", "rollout_data/[0-9]*.pt")
    suffixes = (".pt",)
    logged = "source_advantages"  # where a train dump is joined

    def settings(self, names: list[str], options: PresetOptions) -> list[Setting]:
        return [
            Setting("grpo", note="advantage_estimator grpo", own=True),
            Setting("reinforce-pp-baseline",
                    note="advantage_estimator reinforce_plus_plus_baseline", own=True),
            Setting("reinforce-pp", note="advantage_estimator reinforce_plus_plus", own=True),
        ]  # fmt: skip

    def unknowns(self) -> list[str]:
        return ["kl_coef"]

    def files(self, inputs: list[str]) -> list[str]:
        """The rollout dumps: a train dump named (or found in a folder) stands for its rollout
        dump, read once however many ranks' train dumps name it."""
        found = [_train_and_rollout(path)[1] for path in super().files(inputs)]
        return list(dict.fromkeys(found))

    def convert(self, path: str, options: PresetOptions) -> Converted:
        refuse_pickle(path)
        train_paths, path = _train_and_rollout(path)
        dump = _load_pt(path)
        if not isinstance(dump, dict) or not isinstance(dump.get("samples"), list):
            msg = f"{path}: no 'samples' list, which a {self.framework} rollout dump has"
            raise DataError(msg + ". Hint: check the file and `from_`")
        if not dump["samples"]:
            raise DataError(f"{path}: the input has no rows. Hint: check the file")
        samples = checked_samples(path, dump["samples"])
        table = samples_table(path, samples, options)
        if train_paths:
            table = with_train_dump(train_paths, samples, table)
        # slime whitens (REINFORCE++) over one rollout's samples: the file is the batch
        step = dump.get("rollout_id")
        step = Path(path).stem if step is None else rollout_id(path, None, "rollout_id", step)
        batch = f"rollout {step}"
        table = table.append_column("batch", pa.array([batch] * table.num_rows, pa.string()))
        table = with_weight_versions(table, samples, step)
        rollouts = len(set(table.column("rollout_id").to_pylist()))
        if table.num_rows == rollouts:
            return Converted(table)
        warning = (
            f"{path}: {table.num_rows} samples for {rollouts} rollouts (segments): slime "
            "groups rewards by position only where a file holds n_samples_per_prompt x "
            "rollout_batch_size samples, else it normalises the whole file as one group of "
            "samples; so does advcli here, each sample a rollout"
        )
        return Converted(one_group(table), warnings=[warning])


def with_weight_versions(table: pa.Table, samples: list[dict[str, Any]], step: Any) -> pa.Table:
    """The rollout's step (its ``rollout_id``) and, where every sample's ``weight_versions``
    (the engine's weight version at each of its generation turns) is a whole number, the oldest
    as ``version`` and the newest as ``last_version``; SGLang's own names (``default`` before
    the first weight update) say nothing of a lag, and leave them out."""
    turns = [s.get("weight_versions") or [] for s in samples]
    if isinstance(step, int):
        table = table.append_column("step", pa.array([step] * table.num_rows, pa.int64()))
    if all(turns) and all(str(v).isdigit() for vs in turns for v in vs):
        versions = [[int(v) for v in vs] for vs in turns]
        table = table.append_column("version", pa.array([min(vs) for vs in versions]))
        table = table.append_column("last_version", pa.array([max(vs) for vs in versions]))
    return table


class Miles(Slime):
    name = "miles"
    framework = "miles"
    convention = "miles"  # REINFORCE++'s KL on every response token (slime: actions only)


TRAIN_PER_TOKEN = {
    "advantages": "source_advantages",
    "returns": "source_returns",
    "log_probs": "trainer_logprobs",
    "ref_log_probs": "ref_logprobs",
    "entropy": "entropies",
    "kl": "source_kl",
}
"""Per-response-token fields of the train dump, and the advcli column each becomes."""


def _train_and_rollout(path: str) -> tuple[list[str], str]:
    """The train dumps of the same rollouts (slime's one file, or miles' one per rank; none
    where there are none) and the rollout dump, for a file of either folder."""
    p = Path(path)
    if p.parent.name == "train_data":
        rollout = p.parent.parent / "rollout_data" / f"{p.stem.split('_')[0]}.pt"
        if not rollout.is_file():
            msg = (
                f"{path}: a slime or miles train dump is read with the rollout dump of the same "
                f"number (its rewards and groups), and {rollout} is not there. Hint: give the "
                "--dump-details folder, or put the rollout dump beside it"
            )
            raise DataError(msg)
        return train_dumps(rollout), str(rollout)
    return (train_dumps(p) if p.parent.name == "rollout_data" else []), path


def train_dumps(rollout: Path) -> list[str]:
    """The train dumps beside the rollout dump ``DIR/rollout_data/N.pt``: slime's
    ``DIR/train_data/N.pt``, or miles' ``DIR/train_data/N_{rank}.pt`` in rank order."""
    folder = rollout.parent.parent / "train_data"
    if (folder / rollout.name).is_file():
        return [str(folder / rollout.name)]
    ranks = [q for q in folder.glob(f"{rollout.stem}_*.pt") if q.stem.split("_")[1].isdigit()]
    return [str(q) for q in sorted(ranks, key=lambda q: int(q.stem.split("_")[1]))]


def with_train_dump(paths: list[str], samples: list[dict[str, Any]], table: pa.Table) -> pa.Table:
    """``table`` (a rollout dump's samples, in order) with the train dump's per-token values,
    placed on each sample's response (0 over the prompt)."""
    first = _load_pt(paths[0])
    if isinstance(first, dict) and isinstance(first.get("rollout_data"), dict):
        by_position = miles_train_samples(paths, [first], samples)
    elif isinstance(first, dict) and isinstance(first.get("samples"), list):
        by_position = slime_train_samples(paths[0], first["samples"], samples)
    else:
        msg = (
            f"{paths[0]}: neither a 'samples' list (a slime train dump) nor a 'rollout_data' "
            "dict (a miles one)"
        )
        raise DataError(msg + ". Hint: check the file")
    offsets = np.r_[0, np.cumsum([len(s["tokens"]) for s in samples])].astype(np.int64)
    for name, column in TRAIN_PER_TOKEN.items():
        if not all(by_position[i].get(name) is not None for i in range(len(samples))):
            continue
        values = []
        for i, sample in enumerate(samples):
            at = by_position[i]
            given = numbers(at["path"], at["row"], name, at[name])
            n_resp = sample["response_length"]
            if len(given) != n_resp:
                problem = f"{name} has {len(given)} entries for {n_resp} response tokens"
                raise bad_field(at["path"], at["row"], name, problem)
            if name == "advantages":  # the trainer's loss reads them on the loss mask only
                mask = at.get("loss_masks")
                mask = sample["loss_mask"] if mask is None else mask_of(
                    at["path"], at["row"], "loss_masks", mask)  # fmt: skip
                if len(mask) != n_resp:
                    problem = f"loss_masks has {len(mask)} entries for {n_resp} response tokens"
                    raise bad_field(at["path"], at["row"], "loss_masks", problem)
                given = np.where(mask, given, 0.0)
            values.append(np.concatenate([np.zeros(len(sample["tokens"]) - n_resp), given]))
        flat = np.concatenate(values).astype(np.float32)
        table = table.append_column(column, list_array(flat, offsets))
    return table


def slime_train_samples(
    path: str, train: list[Any], samples: list[dict[str, Any]]
) -> dict[int, dict[str, Any]]:
    """slime's train dump: each sample's values, by its place in the rollout dump
    (``rollout_position``), with where it was read (``path``, ``row``)."""
    by_position: dict[int, dict[str, Any]] = {}
    for row, s in enumerate(train):
        given = s.get("rollout_position") if isinstance(s, dict) else None
        position = None if given is None else integer(path, row, "rollout_position", given)
        if position is None or not 0 <= position < len(samples):
            problem = f"rollout_position {shown(given)} is not a sample of the rollout dump"
            raise bad_field(path, row, "rollout_position", problem)
        _same_tokens(path, row, s.get("tokens"), samples[position], position)
        by_position[position] = {**s, "path": path, "row": row}
    _all_there(path, "rollout_position", set(by_position), samples)
    return by_position


MILES_PER_TOKEN = ("advantages", "returns", "log_probs", "ref_log_probs", "entropy")
"""The per-token fields of a miles train dump, stored as each rank's context-parallel slice."""


def miles_train_samples(
    paths: list[str], loaded: list[Any], samples: list[dict[str, Any]]
) -> dict[int, dict[str, Any]]:
    """miles' train dumps (one per rank, each its data-parallel shard: ``rollout_data`` holds a
    list per field, ``sample_indices`` naming each entry's sample): each sample's values, by its
    place in the rollout dump, as miles@31f1ca9 ``dashboard/dump_reader.py`` joins them.

    Several ranks hold a sample where tensor or context parallelism split its work: each
    per-token field is taken from the ranks that hold it (pipeline stages without it hold
    none), one per context-parallel rank (``cp_rank``, the lowest rank first), and its slices
    put back in response order (:func:`cp_response_slices`)."""
    position = {s["index"]: i for i, s in enumerate(samples)}
    held: dict[int, list[tuple[str, dict[str, Any], int]]] = {}
    for n, path in enumerate(paths):
        pack = miles_pack(path, loaded[n] if n < len(loaded) else _load_pt(path))
        columns = pack["rollout_data"]
        for row, index in enumerate(columns["sample_indices"]):
            if index not in position:
                problem = f"sample_index {index} is not a sample of the rollout dump"
                raise bad_field(path, row, "sample_indices", problem)
            _same_tokens(path, row, columns["tokens"][row], samples[position[index]],
                         position[index])  # fmt: skip
            held.setdefault(position[index], []).append((path, pack, row))
    _all_there(paths[0], "sample_indices", set(held), samples)
    return {i: _miles_sample(i, holders, samples[i]) for i, holders in held.items()}


def miles_pack(path: str, pack: Any) -> dict[str, Any]:
    """A miles train dump, checked: ``rollout_data`` a dict with one entry per sample (as
    ``sample_indices`` names them) in each field it holds, the lengths integers; the
    context-parallel size and rank integers, the rank one of the size's."""
    columns = pack.get("rollout_data") if isinstance(pack, dict) else None
    if not isinstance(columns, dict) or columns.get("sample_indices") is None:
        msg = f"{path}: no 'rollout_data' with 'sample_indices', which a miles train dump has"
        raise DataError(msg + ". Hint: check the file")
    indices = array_of(path, None, "sample_indices", columns["sample_indices"], "iu")
    checked = {**columns, "sample_indices": [int(i) for i in indices]}
    qkv_format = pack.get("qkv_format", "thd")
    lengths = ("total_lengths", "response_lengths", *(("max_seq_lens",) * (qkv_format != "thd")))
    for name in ("tokens", *lengths, "loss_masks", *MILES_PER_TOKEN):
        values: Any = columns.get(name)
        if values is None and name in ("loss_masks", *MILES_PER_TOKEN):
            continue
        held = isinstance(values, list | tuple) or (
            isinstance(values, np.ndarray) and values.ndim > 0)  # fmt: skip
        if not held or len(values) != len(indices):
            problem = f"expected one entry per sample index ({len(indices)}), saw {shown(values)}"
            raise bad_field(path, None, name, problem)
        if name in lengths:
            checked[name] = [integer(path, row, name, v) for row, v in enumerate(values)]
    cp_size = integer(path, None, "cp_size", pack.get("cp_size") or 1)
    cp_rank = integer(path, None, "cp_rank", pack.get("cp_rank") or 0)
    if not 0 <= cp_rank < cp_size:
        problem = f"cp_rank {cp_rank} is not a rank of a context-parallel size of {cp_size}"
        raise bad_field(path, None, "cp_rank", problem)
    return {"rollout_data": checked, "cp_size": cp_size, "cp_rank": cp_rank,
            "qkv_format": qkv_format}  # fmt: skip


def _miles_sample(
    i: int, holders: list[tuple[str, dict[str, Any], int]], sample: dict[str, Any]
) -> dict[str, Any]:
    path, pack, row = holders[0]
    columns = pack["rollout_data"]
    total, n_resp = columns["total_lengths"][row], columns["response_lengths"][row]
    if n_resp != sample["response_length"] or total != len(sample["tokens"]):
        problem = (
            f"total and response lengths {total}, {n_resp} are not those of the rollout "
            f"dump's sample {i} ({len(sample['tokens'])}, {sample['response_length']})"
        )
        raise bad_field(path, row, "response_lengths", problem)
    values: dict[str, Any] = {"path": path, "row": row}
    if columns.get("loss_masks") is not None:
        values["loss_masks"] = columns["loss_masks"][row]
    cp_size = pack["cp_size"]
    # thd cuts the sequence itself into chunks, bshd its padded length
    cut = total if pack["qkv_format"] == "thd" else columns["max_seq_lens"][row]
    for field in MILES_PER_TOKEN:
        slices: dict[int, np.ndarray] = {}
        for other_path, other, other_row in holders:
            rank = other["cp_rank"]
            if other["rollout_data"].get(field) is None or rank in slices:
                continue
            held = numbers(other_path, other_row, field, other["rollout_data"][field][other_row])
            spans = cp_response_slices(cut, total, n_resp, rank, cp_size)
            share = sum(hi - lo for lo, hi in spans)
            if cp_size > 1 and held.size != share:
                problem = (
                    f"context-parallel rank {rank} holds {held.size} values of {field}, and its "
                    f"share of a {n_resp}-token response is {share}"
                )
                raise bad_field(other_path, other_row, field, problem)
            slices[rank] = held
        if not slices:
            continue
        if sorted(slices) != list(range(cp_size)):
            problem = (
                f"{field} is held by context-parallel ranks {sorted(slices)} of {cp_size}: "
                "its slices cannot be put together"
            )
            raise bad_field(path, row, field, problem + ". Hint: give every rank's train dump")
        values[field] = cp_joined(slices, (cut, total, n_resp), cp_size)
    return values


def cp_response_slices(
    cut: int, total: int, response: int, cp_rank: int, cp_size: int
) -> list[tuple[int, int]]:
    """The response positions ``[start, stop)`` whose per-token values a context-parallel rank
    holds, in the order it holds them (miles' ``get_logits_and_tokens_offset_with_cp``).

    A sequence of ``cut`` tokens (``total``, or the padded length in the ``bshd`` layout) is cut
    into ``2·cp_size`` chunks of ``c = ⌈cut / (2·cp_size)⌉``; rank ``r`` holds chunks ``r`` and
    ``2·cp_size − 1 − r``.
    A response token ``t`` is predicted from the logits at ``prompt + t − 1``, so a chunk
    ``[a, b)`` holds the response positions ``[max(a, p−1), min(b, total−1)) − (p−1)``."""
    chunk = -(-cut // (2 * cp_size))
    start = total - response - 1
    spans = []
    for first in (cp_rank, 2 * cp_size - cp_rank - 1):
        lo, hi = max(first * chunk, start), min((first + 1) * chunk, total - 1)
        if lo < hi:
            spans.append((lo - start, hi - start))
    return spans


def cp_joined(
    slices: dict[int, np.ndarray], lengths: tuple[int, int, int], cp_size: int
) -> np.ndarray:
    """One response's per-token values from its context-parallel ranks' slices (each of the
    size :func:`cp_response_slices` gives it); ``lengths`` are the chunked, total and response
    lengths."""
    if cp_size == 1:
        return slices[0]
    out = np.zeros(lengths[2], dtype=np.float64)
    for rank, values in slices.items():
        taken = 0
        for lo, hi in cp_response_slices(*lengths, rank, cp_size):
            out[lo:hi] = values[taken : taken + hi - lo]
            taken += hi - lo
    return out


def _same_tokens(path: str, row: int, tokens: Any, sample: dict[str, Any], at: int) -> None:
    if not np.array_equal(token_ids(path, row, "tokens", tokens), sample["tokens"]):
        problem = f"its tokens are not those of the rollout dump's sample {at}"
        raise bad_field(path, row, "tokens", problem)


def _all_there(path: str, key: str, found: set[int], samples: list[dict[str, Any]]) -> None:
    missing = sorted(set(range(len(samples))) - found)
    if missing:
        msg = (
            f"{path}: the train dump holds no sample for rollout dump positions "
            f"{', '.join(map(str, missing[:5]))}{', ...' if len(missing) > 5 else ''} of "
            f"{len(samples)} ({key}). Hint: give every rank's train dump, or read the rollout "
            "dump alone"
        )
        raise DataError(msg)
