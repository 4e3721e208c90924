"""Seeded mutation fuzzing of every entry point: ``python -m tests.fuzz [MUTANTS [KIND ...]]``
runs the full set (300 mutants of each kind by default, every kind unless some are named);
``tests/test_fuzz.py`` runs a few of each kind in the suite.

Each kind is an input and the commands that read it:

- ``jsonl``, ``parquet-pages``, ``parquet-bytes``, ``parquet-columns``: the sample log, its
  bytes flipped, cut or repeated (anywhere in a Parquet file, its footer too, or only in its
  data pages), its JSON values swapped for odd ones, its Parquet columns dropped, retyped,
  emptied or nulled; through ``schema``, ``audit``, ``annotate``, ``shard`` (then ``verify``
  on what it wrote) and, every few mutants, ``report``;
- ``verl``, ``trl``: dumps the frameworks' own code wrote (``tests/fixtures/real``), mutated
  the same way and read with ``--from``;
- ``shards``: a shard folder with one of its files mutated, through ``verify``;
- ``pt``: slime's and miles' ``.pt`` dumps (a rollout dump, or a train dump beside it), their
  pickle mutated opcode by opcode (an integer made odd, a memo reference pointed elsewhere, a
  global swapped, a value replaced by a bomb: a list shared exponentially, one holding itself,
  a codec chain, deep nesting), a storage member cut, padded or replaced by a deflated bomb, or
  the archive's bytes flipped; read with ``--from``, ``ADVCLI_MAX_EXPANSION`` lowered, and
  each command's peak memory (``VmHWM``, reset before it) held under :data:`PT_PEAK_BYTES`;
- ``split``, ``split-jsonl``: the sample as a ``prompt_ids`` + ``response_ids`` +
  ``response_mask`` log, a list element nulled or set odd (a mask value 2 or 300, an id
  beyond 2^32), a column narrowed, widened or cut, or its JSON values swapped; through
  ``annotate`` (its output annotated again must be written as the first: per-token columns
  over the response), ``shard --layout verl|trl`` (``verify``, then ``advcli.torch.collate``
  on the rows, where torch is installed) with methods whose advantages vary along a sequence
  (``python -m tests.fuzz 1000 split split-jsonl``: these kinds alone).

Every command must exit 0 with a valid output (a table that reads back, a folder ``verify``
passes), or exit 1 or 2 with exactly one line on stderr and nothing left in its output folder;
never a traceback, a native panic, or another exit code. Runs are in-process (the real entry
point, ``advcli.cli.runner.main``) so that hundreds fit in seconds; stderr is read at the file
descriptor, where a native panic would print.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import pickletools
import re
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from advcli.cli import runner as cli
from advcli.io.writers import read_metadata

HERE = Path(__file__).parent
SAMPLE = HERE.parent / "sample_data"
REAL = HERE / "fixtures" / "real"
METHODS = ["grpo", "rloo", "gae", "reinforce-pp", "batch-mean", "mc"]
ODD_VALUES = [b"null", b"-1", b"1e999", b"-1e400", b'"7"', b"{}", b"[]", b"[[1]]", b"true",
              b"18446744073709551616", b'"\\u0000"', b"0.5", b"NaN", b""]  # fmt: skip
REPORT_EVERY = 10  # a report is the slowest command: every tenth mutant


@contextlib.contextmanager
def stderr_at_fd() -> Iterator[list[str]]:
    """What is written to file descriptor 2 inside the block (a native panic prints there)."""
    sys.stderr.flush()
    saved, python_stderr = os.dup(2), sys.stderr
    got: list[str] = []
    with tempfile.TemporaryFile() as sink, open(2, "w", closefd=False) as text:
        os.dup2(sink.fileno(), 2)
        sys.stderr = text  # Python's writes too (pytest replaces sys.stderr)
        try:
            yield got
        finally:
            sys.stderr.flush()
            sys.stderr = python_stderr
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            got.append(sink.read().decode(errors="replace"))


def main(*args: str) -> tuple[int, str]:
    """advcli ARGS in-process: the exit code and everything written to stderr."""
    with stderr_at_fd() as err, contextlib.redirect_stdout(io.StringIO()):
        try:
            cli.main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return code, err[0]


def assert_one_line(err: str, what: str) -> None:
    assert "Traceback" not in err and "panicked" not in err, f"{what}: {err}"
    assert err.count("\n") == 1 and err.startswith("advcli: error: "), f"{what}: {err}"


def command(out: Path, *args: str, valid: Callable[[], None], peak: int | None = None) -> int:
    """Run one command whose output goes into the empty folder ``out``; check the outcome (and
    that its peak memory grew by at most ``peak`` bytes, where given)."""
    with peak_memory() as grown:
        code, err = main(*args)
    what = " ".join(args)
    assert peak is None or grown[0] is None or grown[0] <= peak, f"{what}: {grown[0]:,} bytes"
    assert code in (0, 1, 2), f"{what}: exit {code}: {err}"
    if code:
        assert_one_line(err, what)
        assert list(out.iterdir()) == [], f"{what}: left {list(out.iterdir())}"
    else:
        valid()
    for path in out.iterdir():
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return code


@contextlib.contextmanager
def peak_memory() -> Iterator[list[int | None]]:
    """How far the process's peak resident memory rose above its size at the start of the
    block (Linux: the peak is reset through ``/proc/self/clear_refs``; elsewhere None)."""
    grown: list[int | None] = [None]
    try:
        Path("/proc/self/clear_refs").write_text("5")
        start = _resident("VmRSS")
    except OSError:
        yield grown
        return
    yield grown
    grown[0] = _resident("VmHWM") - start


def _resident(field: str) -> int:
    line = next(
        x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(field)
    )
    return int(line.split()[1]) * 1024


# ----------------------------------------------------------------------------- mutations


def flip_bytes(data: bytes, rng: np.random.Generator) -> bytes:
    out = bytearray(data)
    for at in rng.integers(0, len(out), rng.integers(1, 6)):
        out[at] = int(rng.integers(0, 256))
    return bytes(out)


def cut_or_repeat(data: bytes, rng: np.random.Generator) -> bytes:
    a, b = sorted(rng.integers(0, len(data), 2))
    return data[:a] + data[b:] if rng.random() < 0.5 else data[:b] + data[a:]


def odd_value(data: bytes, rng: np.random.Generator) -> bytes:
    """One JSON scalar (a number, a string, true/false/null) replaced by an odd value."""
    scalars = list(re.finditer(rb'-?\d+(\.\d+)?([eE][-+]?\d+)?|"[^"\\]*"|true|false|null', data))
    m = scalars[int(rng.integers(len(scalars)))]
    value = ODD_VALUES[int(rng.integers(len(ODD_VALUES)))]
    return data[: m.start()] + value + data[m.end() :]


def text_mutant(data: bytes, rng: np.random.Generator, i: int) -> bytes:
    return [flip_bytes, cut_or_repeat, odd_value, odd_value][i % 4](data, rng)


def page_bytes(data: bytes, rng: np.random.Generator) -> bytes:
    """Bytes flipped in the data pages; the footer (schema, offsets) intact."""
    footer = int.from_bytes(data[-8:-4], "little") + 8
    out = bytearray(data)
    for at in rng.integers(4, max(5, len(data) - footer), rng.integers(1, 9)):
        out[at] ^= int(rng.integers(1, 256))
    return bytes(out)


def binary_mutant(data: bytes, rng: np.random.Generator, i: int) -> bytes:
    """Anywhere: the magic, the footer, its length; or the file cut short."""
    if i % 3 == 2:
        return data[: int(rng.integers(0, len(data)))]
    return flip_bytes(data, rng) if i % 3 else cut_or_repeat(data, rng)


def column_change(table: pa.Table, rng: np.random.Generator) -> pa.Table:
    """A column dropped, nulled, emptied, negated or retyped."""
    name = table.column_names[int(rng.integers(table.num_columns))]
    i = table.column_names.index(name)
    column = table.column(i)
    kind = int(rng.integers(5))
    if kind == 0:
        return table.drop_columns([name])
    if kind == 1:
        nulls = pa.nulls(table.num_rows, column.type)
        mask = pa.array(rng.random(table.num_rows) < 0.3)
        return table.set_column(i, name, pc.if_else(mask, nulls, column))
    if kind == 2:
        return table.set_column(i, name, pa.array([None] * table.num_rows, column.type))
    if kind == 3 and (pa.types.is_floating(column.type) or pa.types.is_integer(column.type)):
        return table.set_column(i, name, pc.negate(column))
    text = pa.list_(pa.string()) if pa.types.is_list(column.type) else pa.string()
    return table.set_column(i, name, column.cast(text, safe=False))


def longer_log() -> bytes:
    """The sample eight times over (ids made unique): past the lines that type a JSONL log."""
    rows = [orjson.loads(line) for line in (SAMPLE / "rollouts.jsonl").read_bytes().splitlines()]
    return b"".join(
        orjson.dumps({**row, "prompt_id": f"{row['prompt_id']}-{k}",
                      "rollout_id": f"{row['rollout_id']}-{k}"}) + b"\n"
        for k in range(8)
        for row in rows
    )  # fmt: skip


PT_CASES = [("slime", REAL / "slime" / "default"), ("slime", REAL / "slime-train" / "default"),
            ("miles", REAL / "miles-train" / "default")]  # fmt: skip
PT_EXPANSION = 16 << 20
"""``ADVCLI_MAX_EXPANSION`` while the ``pt`` kind runs: the bound its files may expand to."""
PT_PEAK_BYTES = 512 << 20
"""How much a command's peak memory may rise over a ``pt`` mutant: the bound, several times
over (Python objects are larger than the bytes counted), and room for the first command's
imports; a bomb's gigabytes are far beyond."""
PT_GLOBALS = [b"torch._utils\n_rebuild_sparse_tensor", b"builtins\neval", b"numpy\nndarray",
              b"collections\nOrderedDict", b"_codecs\nencode", b"torch\nBFloat16Storage",
              b"torch.storage\nUntypedStorage", b"numpy.core.multiarray\n_reconstruct",
              b"numpy\ndtype", b"torch._utils\n_rebuild_tensor_v2",
              b"torch._utils\n_rebuild_tensor_v3", b"torch\nuint16", b"torch\nfloat8_e4m3fn",
              b"torch\nload", b"numpy.core.multiarray\nscalar", b"torch\nLongStorage"]  # fmt: skip
PT_ODD = [0, -1, 1, 3, 255, 1 << 20, 1 << 31, 1 << 40, -(1 << 63), 1 << 64, 0.5, 2.0, None,
          "7", True]  # fmt: skip
_VALUE_OPS = {"NONE", "BININT", "BININT1", "BININT2", "LONG1", "BINFLOAT", "NEWTRUE",
              "NEWFALSE", "SHORT_BINUNICODE", "BINUNICODE", "EMPTY_LIST", "EMPTY_DICT"}  # fmt: skip
"""Opcodes that push one value, each of which a mutant may replace by another value."""


def _ops(data: bytes) -> list[tuple[str, object, int, int]]:
    """The pickle's opcodes: name, argument, start and end."""
    found = [(op.name, arg, int(pos or 0)) for op, arg, pos in pickletools.genops(data)]
    ends = [pos for _, _, pos in found[1:]] + [len(data)]
    return [(name, arg, pos, end) for (name, arg, pos), end in zip(found, ends, strict=True)]


def bomb(kind: int) -> bytes:
    """A pickle fragment that pushes one value, made to expand, loop or nest (memo indices
    from 10^6 up, which no fixture uses)."""
    put = lambda k: b"r" + (1_000_000 + k).to_bytes(4, "little")  # noqa: E731
    get = lambda k: b"j" + (1_000_000 + k).to_bytes(4, "little")  # noqa: E731
    if kind == 0:  # [x, x] of [x, x] ... 40 times: 2^40 values once flattened
        return (
            b"(K\x01K\x02l"
            + put(0)
            + b"".join(b"(" + get(k) + get(k) + b"l" + put(k + 1) for k in range(40))
        )
    if kind == 1:  # a list that holds itself
        return b"]" + put(0) + get(0) + b"a"
    if kind == 2:  # a codec applied to its own output, 40 times
        text = b"X\x01\x00\x00\x00a"
        for _ in range(40):
            text = b"c_codecs\nencode\n(" + text + b"X\x03\x00\x00\x00hextR"
        return text
    if kind == 3:  # 1 MB of text encoded 1,000 times
        return (
            b"(X"
            + (1 << 20).to_bytes(4, "little")
            + b"a" * (1 << 20)
            + put(0)
            + b"".join(
                b"c_codecs\nencode\n(" + get(0) + b"X\x06\x00\x00\x00latin1tR" for _ in range(1000)
            )
            + b"l"
        )
    return b"]" * 5000 + b"a" * 4999  # nested 5,000 deep


def pickle_mutant(data: bytes, rng: np.random.Generator, way: int) -> bytes:
    """One opcode of a pickle changed, one ``way`` of six (an integer made odd, a memo
    reference pointed elsewhere, a global swapped, a value replaced by a bomb, an opcode dropped
    or doubled), or its bytes flipped or cut."""
    ops = _ops(data)

    def pick(names: set[str]) -> tuple[str, object, int, int]:
        fitting = [op for op in ops if op[0] in names] or ops[-2:-1]
        return fitting[int(rng.integers(len(fitting)))]

    if way == 0:
        _, _, start, end = pick({"BININT", "BININT1", "BININT2", "LONG1"})
        value = PT_ODD[int(rng.integers(len(PT_ODD)))]
        new = pickle.dumps(value, protocol=2)[2:-1]
    elif way == 1:
        _, _, start, end = pick({"BINGET", "LONG_BINGET"})
        puts = [arg for name, arg, _, _ in ops if name.endswith("BINPUT") and isinstance(arg, int)]
        new = b"j" + puts[int(rng.integers(len(puts)))].to_bytes(4, "little")
    elif way == 2:
        _, _, start, end = pick({"GLOBAL"})
        new = b"c" + PT_GLOBALS[int(rng.integers(len(PT_GLOBALS)))] + b"\n"
    elif way == 3:
        _, _, start, end = pick(_VALUE_OPS)
        new = bomb(int(rng.integers(5)))
    elif way == 4:
        _, _, start, end = pick(set(_VALUE_OPS) | {"BINGET", "APPEND", "APPENDS", "SETITEMS"})
        new = b"" if rng.random() < 0.5 else data[start:end] * 2
    else:
        return flip_bytes(data, rng) if rng.random() < 0.5 else cut_or_repeat(data, rng)
    return data[:start] + new + data[end:]


def pt_mutant(path: Path, rng: np.random.Generator, way: int) -> None:
    """A ``torch.save`` archive mutated in place, one ``way`` of eight: its pickle
    (:func:`pickle_mutant`'s six), a storage member cut or padded (or replaced by zeros that
    inflate far beyond it; a file without storages has its pickle mutated instead), or the
    archive's bytes."""
    with zipfile.ZipFile(path) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    storages = [name for name in members if "/data/" in name]
    if way == 7:
        path.write_bytes(binary_mutant(path.read_bytes(), rng, int(rng.integers(3))))
        return
    deflated: set[str] = set()
    if way < 6 or not storages:
        pkl = next(name for name in members if name.endswith("data.pkl"))
        members[pkl] = pickle_mutant(members[pkl], rng, way % 6)
    else:
        name = storages[int(rng.integers(len(storages)))]
        raw = members[name]
        if rng.random() < 0.5:
            members[name] = raw[: int(rng.integers(len(raw)))] + raw * int(rng.integers(2))
        else:
            members[name], deflated = bytes(64 << 20), {name}
    with zipfile.ZipFile(path, "w") as archive:
        for name, raw in members.items():
            compression = zipfile.ZIP_DEFLATED if name in deflated else zipfile.ZIP_STORED
            archive.writestr(name, raw, compress_type=compression)


# ----------------------------------------------------------------------------- kinds


def write_mutant(kind: str, i: int, rng: np.random.Generator, folder: Path) -> tuple[Path, list]:
    """Mutant ``i`` of ``kind`` under ``folder``: the input to give, and the --from options."""
    if kind == "jsonl":
        path = folder / "log.jsonl"
        path.write_bytes(text_mutant(longer_log(), rng, i))
        return path, []
    if kind in ("parquet-pages", "parquet-bytes", "parquet-columns"):
        source = SAMPLE / "rollouts.parquet"
        path = folder / "log.parquet"
        if kind == "parquet-columns":
            try:
                pq.write_table(column_change(pq.read_table(source), rng), path)
            except (pa.ArrowException, ValueError):  # a change pyarrow itself cannot write
                pq.write_table(pq.read_table(source), path)
        else:
            mutate = page_bytes if kind == "parquet-pages" else None
            data = source.read_bytes()
            path.write_bytes(mutate(data, rng) if mutate else binary_mutant(data, rng, i))
        return path, []
    if kind == "verl":
        dump = folder / "rollout"
        shutil.copytree(REAL / "verl" / ("v1" if i % 2 else "legacy") / "rollout", dump)
        victim = sorted(dump.iterdir())[i % 2]
        victim.write_bytes(text_mutant(victim.read_bytes(), rng, i))
        return dump, ["--from", "verl"]
    if kind == "trl":
        dump = folder / "completions"
        shutil.copytree(REAL / "trl" / "default" / "completions", dump)
        victim = sorted(dump.iterdir())[i % 3]
        data = victim.read_bytes()
        if i % 2:
            victim.write_bytes(binary_mutant(data, rng, i))
        else:
            with contextlib.suppress(pa.ArrowException, ValueError):
                pq.write_table(column_change(pq.read_table(victim), rng), victim)
        return dump, ["--from", "trl"]
    if kind == "pt":
        preset, case = PT_CASES[i % len(PT_CASES)]
        dump = folder / "dump"
        shutil.copytree(case, dump, ignore=shutil.ignore_patterns("truth.json"))
        files = sorted(dump.rglob("*.pt"))  # the rollout dump, or a train dump beside it
        pt_mutant(files[int(rng.integers(len(files)))], rng, i % 8)
        return dump, ["--from", preset]
    raise ValueError(kind)


def run_mutant(kind: str, i: int, rng: np.random.Generator, work: Path) -> list[int]:
    """Every entry point over mutant ``i`` of ``kind``; the exit codes."""
    for path in work.iterdir():
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    inputs, outputs = work / "in", work / "out"
    inputs.mkdir()
    outputs.mkdir()
    if kind == "shards":
        return [shard_folder_mutant(i, rng, inputs, outputs)]
    if kind in LAYOUT_KINDS:
        return run_layout_mutant(kind, i, rng, inputs, outputs)
    log, preset = write_mutant(kind, i, rng, inputs)
    method = ["--method", "grpo" if preset else METHODS[i % len(METHODS)]]
    table, shards, page = outputs / "o.parquet", outputs / "shards", outputs / "r.html"

    def annotated() -> None:
        assert read_metadata(str(table)) is not None and pq.read_table(table) is not None

    def verified() -> None:
        code, err = main("verify", str(shards))
        assert code == 0, f"verify after shard: {err}"

    def nothing() -> None:
        pass

    peak = PT_PEAK_BYTES if kind == "pt" else None
    codes = [
        command(outputs, "schema", str(log), "--json", *preset, valid=nothing, peak=peak),
        command(outputs, "audit", str(log), "--json", *preset, valid=nothing, peak=peak),
        command(outputs, "annotate", str(log), *method, *preset, "-q", "--out", str(table),
                valid=annotated, peak=peak),
        command(outputs, "shard", str(log), *method, *preset, "-q", "--out", str(shards),
                valid=verified, peak=peak),
    ]  # fmt: skip
    if i % REPORT_EVERY == 0 and _has_bokeh():
        codes.append(command(outputs, "report", str(log), *method, *preset, "-q", "--out",
                             str(page), valid=lambda: assert_page(page), peak=peak))  # fmt: skip
    return codes


def assert_page(page: Path) -> None:
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def shard_folder_mutant(i: int, rng: np.random.Generator, inputs: Path, outputs: Path) -> int:
    """``verify`` on a shard folder with one file mutated: exit 0 only where nothing changed."""
    shards = inputs / "shards"
    code, err = main("shard", str(SAMPLE / "rollouts.parquet"), "--method", "grpo", "-q",
                     "--rows-per-shard", "4", "--out", str(shards))  # fmt: skip
    assert code == 0, err
    files = sorted(p for p in shards.rglob("*") if p.is_file())
    victim = files[i % len(files)]
    before = victim.read_bytes()
    after = binary_mutant(before, rng, i) if i % 2 else text_mutant(before, rng, i)
    victim.write_bytes(after)
    code, err = main("verify", str(shards))
    assert code in (0, 1, 2), err
    if code:
        assert_one_line(err, f"verify {victim.name}")
    else:
        assert after == before, f"verify passed a changed {victim.name}"
    return code


def _has_bokeh() -> bool:
    try:
        import bokeh  # noqa: F401
    except ImportError:
        return False
    return True


KINDS = ["jsonl", "parquet-pages", "parquet-bytes", "parquet-columns", "verl", "trl", "shards",
         "pt"]  # fmt: skip


# ----------------------------------------------------------------------------- split layouts

LAYOUT_KINDS = ["split", "split-jsonl"]
KINDS += LAYOUT_KINDS
LAYOUT_RUNS = [  # (method options, trainer layout): some give advantages that vary per token
    (["--method", "grpo"], "trl"),
    (["--method", "grpo", "--param", "entropy-coef=0.5"], "trl"),
    (["--method", "gae"], "verl"),
    (["--method", "rloo"], "verl"),
    (["--method", "reinforce-pp"], "trl"),
    (["--method", "gae"], "trl"),
]
ODD_TOKENS = [None, -1, 2, 300, 2**32 + 12, 2**40]


def split_log() -> pa.Table:
    """The sample as a split log: the tokens before the first action are the prompt, the
    rest the response with its mask; values over the response, log-probs over the sequence."""
    rows = pq.read_table(SAMPLE / "rollouts.parquet").to_pylist()
    out = []
    for k, row in enumerate(rows):
        n = row["action_mask"].index(1) if 1 in row["action_mask"] else len(row["input_ids"])
        out.append({"prompt_id": row["prompt_id"], "rollout_id": f"{row['rollout_id']}-{k}",
                    "prompt_ids": row["input_ids"][:n], "response_ids": row["input_ids"][n:],
                    "response_mask": row["action_mask"][n:], "reward": row["reward"],
                    "values": row["values"][n:], "old_logprobs": row["old_logprobs"],
                    "entropies": [0.1 * (t % 7) for t in range(len(row["values"]))]})  # fmt: skip
    return pa.Table.from_pylist(out)


def split_mutant(table: pa.Table, rng: np.random.Generator, i: int) -> pa.Table:
    """One list element nulled or set odd, a list cut, a column retyped (narrowed, widened:
    int16 masks, int32 response ids beside int64 prompt ids), or any column changed."""
    name = ["prompt_ids", "response_ids", "response_mask", "values"][int(rng.integers(4))]
    rows = table.column(name).to_pylist()
    row = int(rng.integers(len(rows)))
    kind = i % 4
    if kind == 0 and rows[row]:
        at = int(rng.integers(len(rows[row])))
        rows[row][at] = ODD_TOKENS[int(rng.integers(len(ODD_TOKENS)))]
    elif kind == 1 and rows[row]:
        rows[row] = rows[row][:-1]
    elif kind == 3:
        return column_change(table, rng)
    value = pa.float32() if name == "values" else [pa.int16(), pa.int32(), pa.uint64(),
                                                   pa.int64()][int(rng.integers(4))]  # fmt: skip
    try:
        column = pa.array(rows, pa.list_(value))
    except (pa.ArrowException, OverflowError):  # a value that type cannot hold
        column = pa.array(rows, pa.list_(pa.int64() if name != "values" else pa.float64()))
    return table.set_column(table.schema.get_field_index(name), name, column)


def write_split_mutant(kind: str, i: int, rng: np.random.Generator, folder: Path) -> Path:
    table = split_log()
    if kind == "split-jsonl":
        path = folder / "split.jsonl"
        lines = b"".join(orjson.dumps(row) + b"\n" for row in table.to_pylist())
        path.write_bytes(text_mutant(lines, rng, i))
        return path
    path = folder / "split.parquet"
    try:
        pq.write_table(split_mutant(table, rng, i), path)
    except (pa.ArrowException, ValueError):
        pq.write_table(table, path)
    return path


def run_layout_mutant(kind: str, i: int, rng: np.random.Generator, inputs: Path,
                      outputs: Path) -> list[int]:  # fmt: skip
    """A mutated split log through annotate (twice: the second output in the first's layout)
    and shard in a trainer layout (verify, then the collator on its rows)."""
    log = write_split_mutant(kind, i, rng, inputs)
    method, layout = LAYOUT_RUNS[i % len(LAYOUT_RUNS)]
    first, again, shards = outputs / "first.parquet", outputs / "again.parquet", outputs / "s"

    def annotated_twice() -> None:
        table = pq.read_table(first)
        assert_response_aligned(table)
        code, err = main("annotate", str(first), *method, "-q", "--out", str(again))
        assert code == 0, f"annotate again: {err}"
        second = pq.read_table(again)
        for name in table.column_names:
            assert second.column(name).equals(table.column(name)), f"annotated again: {name}"
        again.unlink()

    def verified() -> None:
        code, err = main("verify", str(shards))
        assert code == 0, f"verify after shard: {err}"
        assert_collates(shards, layout)

    return [
        command(outputs, "annotate", str(log), *method, "-q", "--out", str(first),
                valid=annotated_twice),
        command(outputs, "shard", str(log), *method, "--layout", layout, "-q", "--out",
                str(shards), valid=verified),
    ]  # fmt: skip


def assert_response_aligned(table: pa.Table) -> None:
    """advcli's per-token columns of an annotated split log: one value per response token."""
    if "response_ids" not in table.column_names:
        return
    responses = pc.list_value_length(table.column("response_ids"))
    for name in ("advantages", "returns"):
        if name in table.column_names:
            lens = pc.list_value_length(table.column(name))
            assert pc.all(pc.equal(lens, responses)).as_py() is not False, name


def assert_collates(shards: Path, layout: str) -> None:
    """The collator makes tensors of the rows advcli wrote (torch installed), never a list
    where a tensor is due."""
    try:
        import torch
    except ImportError:
        return
    from advcli.torch import collate

    rows = pq.read_table(shards).to_pylist()
    batch = collate(layout=layout)(rows[:8])
    assert isinstance(batch["advantages"], torch.Tensor)


def fuzz(kind: str, mutants: int, work: Path, seed: int = 13) -> dict[int, int]:
    """Run ``mutants`` mutants of ``kind``; how many commands ended with each exit code."""
    rng = np.random.default_rng([seed, KINDS.index(kind)])
    seen: dict[int, int] = {}
    with _environment(kind):
        for i in range(mutants):
            for code in run_mutant(kind, i, rng, work):
                seen[code] = seen.get(code, 0) + 1
    return seen


@contextlib.contextmanager
def _environment(kind: str) -> Iterator[None]:
    """The ``pt`` kind's lowered ``ADVCLI_MAX_EXPANSION``, for the kind's mutants only."""
    saved = os.environ.get("ADVCLI_MAX_EXPANSION")
    if kind == "pt":
        os.environ["ADVCLI_MAX_EXPANSION"] = str(PT_EXPANSION)
    try:
        yield
    finally:
        os.environ.pop("ADVCLI_MAX_EXPANSION", None)
        if saved is not None:
            os.environ["ADVCLI_MAX_EXPANSION"] = saved


if __name__ == "__main__":  # python -m tests.fuzz [MUTANTS [KIND ...]]
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    for name in sys.argv[2:] or KINDS:
        with tempfile.TemporaryDirectory() as scratch:
            print(name, fuzz(name, count, Path(scratch)), flush=True)
