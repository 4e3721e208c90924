"""The ``.pt`` reader (:mod:`advcli.presets.torch_file`) on files built opcode by opcode as
``torch.save`` writes them, and as an attacker would: it never imports torch or runs code
from the file, reads every dense tensor kind torch writes, and refuses in one line what it does
not read, a value that contains itself, and a file that would expand beyond its bound, before
the memory is taken (peak memory measured around the command, run in-process)."""

from __future__ import annotations

import functools
import io
import pickle
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from advcli.presets import torch_file
from tests.conftest import run
from tests.fuzz import main, peak_memory

SMALL_BOUND = 1 << 20
"""ADVCLI_MAX_EXPANSION in the bound tests: each bomb below expands to 256 MiB or more."""
PEAK = 128 << 20
"""How far a refused bomb may raise a command's peak memory (it would take 256 MiB or more)."""


def archive(path: Path, pkl: bytes, storages: dict[str, bytes] | None = None, *,
            compression: int = zipfile.ZIP_STORED, byteorder: str = "little") -> Path:  # fmt: skip
    """A ``torch.save`` archive, ``rollout_data/0.pt`` under ``path``, holding ``pkl`` as its
    ``data.pkl`` and ``storages`` as ``data/<key>``."""
    file = path / "rollout_data" / "0.pt"
    file.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(file, "w", compression=compression) as z:
        z.writestr("0/data.pkl", pkl)
        z.writestr("0/byteorder", byteorder)
        for key, raw in (storages or {}).items():
            z.writestr(f"0/data/{key}", raw)
    return file


def ops(value: object, *, shared: bool = False) -> bytes:
    """The opcodes that push ``value`` (a protocol-2 pickle without its header and STOP); with
    no memo (whose indices would overwrite those of the pickle around them), unless ``shared``
    (a value referenced twice is then written once)."""
    if shared:
        return pickle.dumps(value, protocol=2)[2:-1]
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=2)
    pickler.fast = True
    pickler.dump(value)
    return buffer.getvalue()[2:-1]


def put(value: bytes, index: int) -> bytes:
    """``value``'s opcodes, then memo[10^6 + index] = it, popped off the stack."""
    return value + b"r" + (1_000_000 + index).to_bytes(4, "little") + b"0"


def get(index: int) -> bytes:
    return b"j" + (1_000_000 + index).to_bytes(4, "little")


def tensor(size: tuple[int, ...], stride: tuple[int, ...], numel: int) -> bytes:
    """A float32 tensor's opcodes, as torch.save writes one: ``_rebuild_tensor_v2`` of the
    storage ``("storage", torch.FloatStorage, "0", "cpu", numel)``, offset 0, size, stride."""
    storage = b"(" + ops("storage") + b"ctorch\nFloatStorage\n" + ops("0") + ops("cpu")
    return (b"ctorch._utils\n_rebuild_tensor_v2\n(" + storage + ops(numel) + b"tQ" + ops(0)
            + ops(size) + ops(stride) + b"\x89ccollections\nOrderedDict\n)RtR")  # fmt: skip


def dump(extra: bytes) -> bytes:
    """A rollout dump of one valid sample, whose field ``extra`` is pushed by ``extra``."""
    sample = {"group_index": 0, "index": 0, "tokens": [1, 2, 3], "response_length": 2,
              "reward": 1.0}  # fmt: skip
    head = pickle.dumps({"rollout_id": 0, "samples": [sample]}, protocol=2)
    assert head.endswith(b"uau.")  # the sample's SETITEMS, its APPEND to the list, the dump's
    return head[:-4] + ops("extra") + extra + head[-4:]


def one_line(proc: subprocess.CompletedProcess) -> str:
    text = proc.stderr.decode()
    assert proc.returncode == 1 and text.count("\n") == 1, text
    assert text.startswith("advcli: error: "), text
    return text


# ------------------------------------------------------------------------------ no code

GLOBALS = [
    "torch\nload",
    "torch._C\n_set_grad_enabled",
    "torch._utils\n_rebuild_sparse_tensor",
    "torch\nfloat8_e4m3fn",
    "torch.nn\nModule",
    "torch._utils\n_rebuild_parameter",
]


@pytest.mark.parametrize("name", GLOBALS)
def test_a_torch_global_it_does_not_read_is_refused_in_one_line(tmp_path, name):
    """A 40-byte pickle naming a torch global used to be handed to ``torch.load``, a known
    code-execution hole before torch 2.6: the reader reads what it knows itself and refuses
    the rest, naming it."""
    archive(tmp_path, b"\x80\x02c" + name.encode() + b"\nq\x00.")
    text = one_line(run("schema", str(tmp_path), "--from", "slime"))
    assert f"the file holds {name.replace(chr(10), '.')}, which advcli does not read" in text


def test_torch_is_never_imported(tmp_path):
    """Not for the files above, nor for a train dump of tensors (torch installed or not)."""
    files = [str(archive(tmp_path / str(k), b"\x80\x02c" + name.encode() + b"\nq\x00."))
             for k, name in enumerate(GLOBALS)]  # fmt: skip
    files.append(
        str(Path(__file__).parents[1] / "fixtures/real/slime-train/default/train_data/0.pt")
    )
    code = (
        "import sys\nfrom advcli.presets import torch_file\n"
        f"for file in {files!r}:\n"
        "    try:\n        torch_file.load(file)\n    except Exception as e:\n        print(e)\n"
        "print('torch' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)  # fmt: skip
    assert proc.stdout.splitlines()[-1] == "False", proc.stdout


def test_every_dense_tensor_kind_torch_writes_is_read_as_torch_reads_it(tmp_path):
    """bfloat16 (widened to float32), half, unsigned (``_rebuild_tensor_v3``), complex, bool,
    transposed, expanded, sliced, scalar and empty tensors, and numpy arrays beside them."""
    torch = pytest.importorskip("torch")
    tensors = {
        "bfloat16": torch.tensor([1.5, -2.25, 3e38, float("nan")], dtype=torch.bfloat16),
        "half": torch.tensor([0.5, -1.0], dtype=torch.half),
        "uint16": torch.tensor([1, 65535], dtype=torch.uint16),
        "uint64": torch.tensor([2**63 + 5], dtype=torch.uint64),
        "complex": torch.tensor([1 + 2j]),
        "bool": torch.tensor([True, False]),
        "transposed": torch.arange(12).reshape(3, 4).t(),
        "expanded": torch.zeros(1).expand(5),
        "sliced": torch.arange(10)[3:7],
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 3),
    }
    path = tmp_path / "t.pt"
    torch.save({**tensors, "numpy": np.arange(4, dtype=np.int32)}, path)
    read = torch_file.load(str(path))
    for name, t in tensors.items():
        expected = (t.float() if t.dtype == torch.bfloat16 else t).numpy()
        assert read[name].dtype == expected.dtype and read[name].shape == expected.shape, name
        np.testing.assert_array_equal(read[name], expected)
    assert read["numpy"].tolist() == [0, 1, 2, 3]


def test_tensors_of_a_big_endian_file_are_read_in_its_byte_order(tmp_path):
    raw = np.array([1.5, -2.0], dtype=">f4").tobytes()
    file = archive(tmp_path, dump(tensor((2,), (1,), 2)), {"0": raw}, byteorder="big")
    assert torch_file.load(str(file))["samples"][0]["extra"].tolist() == [1.5, -2.0]


# ------------------------------------------------------------------------------ cycles


@pytest.mark.parametrize(
    "cycle",
    [b"]" + put(b"", 1)[:-1] + get(1) + b"a",  # a list that holds itself
     b"}" + put(b"", 1)[:-1] + ops("a") + get(1) + b"s",  # a dict that holds itself
     b"]" + put(b"", 1)[:-1] + b"(}" + ops("b") + get(1) + b"\x85se",  # in a tuple, in a dict
    ],
)  # fmt: skip
def test_a_value_that_contains_itself_is_one_line(tmp_path, cycle):
    """Flattening one crashed pyarrow (SIGSEGV); it is refused before anything reads it."""
    archive(tmp_path, dump(cycle))
    text = one_line(run("annotate", str(tmp_path), "--from", "slime", "--method", "grpo",
                        "-o", str(tmp_path / "o.parquet")))  # fmt: skip
    assert "contains itself, which no rollout has" in text


def test_values_nested_too_deep_are_one_line(tmp_path):
    archive(tmp_path, dump(b"]" * 200 + b"a" * 199))
    text = one_line(run("schema", str(tmp_path), "--from", "slime"))
    assert f"values nested deeper than {torch_file.MAX_DEPTH} levels" in text


# ------------------------------------------------------------------------------ bounds


def shared_lists(levels: int) -> bytes:
    """[x, x] of [x, x] ... ``levels`` times over 8 numbers, pickle's memo sharing each x:
    2^levels x 80 - 8 bytes once flattened."""
    value: object = list(range(8))
    for _ in range(levels):
        value = [value, value]
    return ops(value, shared=True)


def shared_dicts(levels: int) -> bytes:
    value: object = {"a": 1.0}
    for _ in range(levels):
        value = {"x": value, "y": value}
    return ops(value, shared=True)


def latin1_copies(size: int, copies: int) -> bytes:
    """A list of ``copies`` bytes objects, each one text of ``size`` bytes encoded anew."""
    text = b"X" + size.to_bytes(4, "little") + b"a" * size
    return (put(text, 1) + put(b"c_codecs\nencode\n", 2)
            + b"(" + (get(2) + b"(" + get(1) + ops("latin1") + b"tR") * copies + b"l")  # fmt: skip


def array_copies(size: int, copies: int) -> bytes:
    """A list of ``copies`` numpy arrays (as numpy pickles one), each set to one bytes object
    of ``size`` bytes."""
    state = ops((3, "|", None, None, None, -1, -1, 0))
    dtype = b"cnumpy\ndtype\n(" + ops("u1") + b"\x89\x88tR" + state + b"b"
    data = b"B" + size.to_bytes(4, "little") + bytes(size)
    new = b"cnumpy.core.multiarray\n_reconstruct\n"
    prefix = put(new, 1) + put(b"cnumpy\nndarray\n", 2) + put(dtype, 3) + put(data, 4)
    one = (get(1) + b"(" + get(2) + ops((0,)) + ops(b"b") + b"tR"
           + b"(" + ops(1) + ops((size,)) + get(3) + b"\x89" + get(4) + b"tb")  # fmt: skip
    return prefix + b"(" + one * copies + b"l"


def codec_chain(times: int) -> bytes:
    """``_codecs.encode`` applied to its own output (hex: each doubles the text)."""
    return (put(b"c_codecs\nencode\n", 1) + (get(1) + b"(") * times + ops("a")
            + (ops("hex") + b"tR") * times)  # fmt: skip


BOMBS = {  # each 256 MiB or more once read, from a file of a few kilobytes
    "shared lists": lambda: shared_lists(22),
    "shared dicts": lambda: shared_dicts(24),
    "a stride-0 tensor": lambda: tensor((1 << 26,), (0,), 1 << 14),
    "overlapping views": lambda: tensor((1 << 13, 1 << 13), (1, 1), 1 << 14),
    "text encoded again and again": lambda: latin1_copies(1 << 16, 4096),
    "an array's bytes set again and again": lambda: array_copies(1 << 16, 4096),
    "a codec applied to its own output": lambda: codec_chain(30),
}


@pytest.mark.parametrize("name", BOMBS)
def test_a_file_that_would_expand_beyond_its_bound_is_refused_before_it_does(
    tmp_path, monkeypatch, name
):
    """Small files that unpickled (or flattened) to gigabytes: each is refused in one line,
    and the command's peak memory stays far below what the bomb would take."""
    storage = np.zeros(1 << 14, np.float32).tobytes()
    archive(tmp_path, dump(BOMBS[name]()), {"0": storage})
    monkeypatch.setenv("ADVCLI_MAX_EXPANSION", str(SMALL_BOUND))
    with peak_memory() as grown:
        code, err = main("annotate", str(tmp_path), "--from", "slime", "--method", "grpo",
                         "-q", "-o", str(tmp_path / "o.parquet"))  # fmt: skip
    assert code == 1 and err.count("\n") == 1, err
    assert "would take more than" in err or "latin-1 text only" in err, err
    assert grown[0] is None or grown[0] < PEAK, f"{grown[0]:,} bytes"
    assert not (tmp_path / "o.parquet").exists()


def test_the_bound_is_the_files_size_times_64_or_the_variable(tmp_path, monkeypatch):
    """A file of 2 KB flattening to 5.2 MB: read under the default bound (1 GiB), refused
    under ADVCLI_MAX_EXPANSION=1 MiB, read under it again where the file is large enough that
    64 times its size is more; a variable that is not a number is a usage error."""
    archive(tmp_path, dump(shared_lists(16)))
    args = ("schema", str(tmp_path), "--from", "slime")
    assert main(*args)[0] == 0
    monkeypatch.setenv("ADVCLI_MAX_EXPANSION", str(SMALL_BOUND))
    assert "would take more than 1,048,576 bytes" in main(*args)[1]
    padded = archive(tmp_path, dump(b"(" + shared_lists(16) + ops("x" * 100_000) + b"t"))
    assert padded.stat().st_size * 64 > 5_242_872 + 100_000 and main(*args)[0] == 0
    monkeypatch.setenv("ADVCLI_MAX_EXPANSION", "lots")
    code, err = main(*args)
    assert code == 2 and "ADVCLI_MAX_EXPANSION='lots': expected a number of bytes" in err


def test_a_storage_member_larger_than_its_storage_is_refused_uninflated(tmp_path):
    """A 1-element storage whose zip member inflates to 256 MiB of zeros: refused from the
    sizes the archive declares, without inflating it."""
    file = archive(tmp_path, dump(tensor((1,), (1,), 1)), {"0": bytes(256 << 20)},
                   compression=zipfile.ZIP_DEFLATED)  # fmt: skip
    assert file.stat().st_size < 1 << 20
    with peak_memory() as grown:
        code, err = main("schema", str(tmp_path), "--from", "slime")
    assert code == 1 and "storage '0' holds 268435456 bytes, and its 1 elements take 4" in err
    assert grown[0] is None or grown[0] < PEAK, f"{grown[0]:,} bytes"


@functools.cache
def compressed_zeros(method: int) -> tuple[bytes, zipfile.ZipInfo]:
    """256 MiB of zeros as an archive member compressed with ``method``: its compressed bytes
    (bzip2: 0.3 KB, lzma: 38 KB) and the member's info (made once: compressing takes a second)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("x", bytes(256 << 20), compress_type=method)
        info = z.getinfo("x")
    raw = buffer.getvalue()
    name_length, extra_length = struct.unpack_from("<HH", raw, info.header_offset + 26)
    start = info.header_offset + 30 + name_length + extra_length  # past its local header
    return raw[start : start + info.compress_size], info


COMPRESSED = {"bzip2": zipfile.ZIP_BZIP2, "lzma": zipfile.ZIP_LZMA}
"""The compressions zipfile inflates a whole chunk of input at a time, without a limit."""


@pytest.mark.parametrize("compression", COMPRESSED)
@pytest.mark.parametrize("member", ["0/data.pkl", "0/data/0", "0/byteorder"])
def test_a_member_compressed_other_than_stored_or_deflated_is_refused_uninflated(
    tmp_path, monkeypatch, member, compression
):
    """A member (the pickle, a storage, the byte order) of a kilobyte in bzip2 or lzma, which
    zipfile would inflate to 256 MiB at once: refused naming it and its compression, before
    it is read."""
    payload, compressed = compressed_zeros(COMPRESSED[compression])
    members = {"0/data.pkl": dump(tensor((1,), (1,), 1)), "0/byteorder": b"little",
               "0/data/0": bytes(4)}  # fmt: skip
    file = tmp_path / "rollout_data" / "0.pt"
    file.parent.mkdir()
    with zipfile.ZipFile(file, "w") as z:
        for name, data in members.items():
            z.writestr(name, payload if name == member else data)
        info = z.getinfo(member)  # its bytes declared compressed (zipfile reads the directory's)
        for field in ("compress_type", "file_size", "CRC", "flag_bits"):
            setattr(info, field, getattr(compressed, field))
    assert file.stat().st_size < 64 << 10
    monkeypatch.setenv("ADVCLI_MAX_EXPANSION", str(SMALL_BOUND))
    with peak_memory() as grown:
        code, err = main("schema", str(tmp_path), "--from", "slime")
    assert code == 1 and err.count("\n") == 1, err
    assert f"archive member {member!r} is compressed with {compression}" in err, err
    assert grown[0] is None or grown[0] < PEAK, f"{grown[0]:,} bytes"


def test_a_pickle_that_names_a_huge_memo_index_takes_no_memory(tmp_path):
    """Python's C unpickler allocates a memo of twice the largest index a file names (here
    256 MiB for 6 bytes); the reader's memo holds only what the file puts in it."""
    archive(tmp_path, dump(b"]r\x00\x00\x00\x01"))  # LONG_BINPUT 2^24
    with peak_memory() as grown:
        code, err = main("schema", str(tmp_path), "--from", "slime")
    assert code == 0, err
    assert grown[0] is None or grown[0] < PEAK, f"{grown[0]:,} bytes"


def test_dict_keys_other_than_text_and_integers_are_refused(tmp_path):
    """Tuples, or integers past 64 bits: a file could make their hashes collide, and inserting
    many would take quadratic time."""
    for key in ((1, 2), 1 << 70):
        archive(tmp_path, dump(ops({key: 1})))
        text = one_line(run("schema", str(tmp_path), "--from", "slime"))
        assert "a dict key other than text or an integer" in text


def test_the_bound_is_documented_as_the_code_has_it():
    docs = " ".join((Path(__file__).parents[2] / "docs" / "errors.md").read_text().split())
    assert torch_file.EXPANSION == 64 and torch_file.FLOOR_BYTES == 1 << 30
    assert "64 times its size" in docs and "`ADVCLI_MAX_EXPANSION` bytes (default 1 GiB)" in docs
