"""Log files read as one log (advcli.io.file_sources): files whose columns differ, Parquet files
that are broken, corrupt or checksummed wrong, and a JSONL file changed while it is parsed, each
refused in one line naming the file."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import (
    READING_COMMANDS,
    SAMPLE,
    group_log,
    groups_of_four,
    one_line,
    refused,
    run,
    write_jsonl,
    write_parquet,
)


def test_files_with_different_pass_through_columns_read_as_nulls(tmp_path):
    rows = group_log(2, 2)
    a = write_parquet(tmp_path / "a.parquet", [{**r, "note": "x"} for r in rows[:2]])
    b = write_parquet(tmp_path / "b.parquet", rows[2:])
    out = tmp_path / "out.parquet"
    assert run("annotate", a, b, "--method", "grpo", "-q", "--out", str(out)).returncode == 0
    assert pq.read_table(out).column("note").to_pylist() == ["x", "x", None, None]


def test_a_role_missing_in_one_file_names_that_file(tmp_path):
    rows = group_log(2, 2)
    a = write_parquet(tmp_path / "a.parquet", [{**r, "values": [0.0] * 5} for r in rows[:2]])
    b = write_parquet(tmp_path / "b.parquet", rows[2:])
    proc = run("annotate", a, b, "--method", "gae", "--out", str(tmp_path / "out.parquet"))
    assert proc.returncode == 1
    assert one_line(proc).startswith(f"advcli: error: {b}: no 'values' column")


def test_corrupt_parquet_pages_are_one_line(tmp_path):
    source = (SAMPLE / "rollouts.parquet").read_bytes()
    footer = int.from_bytes(source[-8:-4], "little") + 8
    rng = np.random.default_rng(0)
    seen = 0
    for i in range(12):  # more, in-process: tests/test_fuzz.py
        data = bytearray(source)
        for at in rng.integers(4, len(source) - footer, 8):
            data[at] ^= 0xFF
        path = tmp_path / f"m{i}.parquet"
        path.write_bytes(bytes(data))
        proc = run("annotate", str(path), "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
        assert proc.returncode in (0, 1), proc.stderr
        if proc.returncode:
            seen += 1
            assert one_line(proc).startswith(f"advcli: error: {path}")
        (tmp_path / "o.parquet").unlink(missing_ok=True)
    assert seen >= 3


def _footer(data: bytes) -> tuple[bytes, bytes]:
    size = struct.unpack("<i", data[-8:-4])[0]
    return data[: -8 - size], data[-8 - size : -8]


def _broken_parquet(tmp_path: Path, kind: str) -> str:
    good = Path(write_parquet(tmp_path / "good.parquet", groups_of_four()))
    data = good.read_bytes()
    path = tmp_path / f"{kind}.parquet"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "magic_only":
        path.write_bytes(b"PAR1")
    elif kind == "footer_beyond_file":
        path.write_bytes(data[:-8] + struct.pack("<i", 10**6) + b"PAR1")
    elif kind == "jsonl_named_parquet":
        path.write_text("\n".join(json.dumps(r) for r in groups_of_four()) + "\n")
    elif kind == "rows_without_row_groups":  # a footer that claims 8 rows, 0 row groups
        pq.ParquetWriter(path, pq.read_schema(good)).close()
        body, meta = _footer(path.read_bytes())
        at = meta.find(b"\x16\x00")  # num_rows (field 3, i64) = 0 in Thrift's compact form
        meta = meta[:at] + b"\x16\x10" + meta[at + 2 :]  # zigzag varint 16: 8 rows
        path.write_bytes(body + meta + struct.pack("<i", len(meta)) + b"PAR1")
        assert pq.read_metadata(path).num_rows == 8
    good.unlink()
    return str(path)


@pytest.mark.parametrize("command", sorted(READING_COMMANDS))
@pytest.mark.parametrize(
    "kind",
    ["empty", "magic_only", "footer_beyond_file", "jsonl_named_parquet", "rows_without_row_groups"],
)
def test_a_broken_parquet_file_is_one_line(tmp_path, kind, command):
    path = _broken_parquet(tmp_path, kind)
    line = refused(tmp_path, path, command)
    assert line.startswith(f"advcli: error: {path}: not a readable Parquet file")
    if kind == "jsonl_named_parquet":
        assert "it holds JSON lines: name it .jsonl" in line


def test_a_page_whose_checksum_fails_is_refused(tmp_path):
    path = tmp_path / "crc.parquet"
    pq.write_table(pa.Table.from_pylist(groups_of_four()), path, write_page_checksum=True,
                   compression="none")  # fmt: skip
    data = bytearray(path.read_bytes())
    data[data.find(b"p0")] = ord("q")  # a byte of a data page changed after it was written
    path.write_bytes(bytes(data))
    for command in ("audit", "annotate", "shard"):
        assert "CRC checksum verification failed" in refused(tmp_path, str(path), command)


def test_a_jsonl_file_changed_while_its_first_pass_reads_it_is_refused(tmp_path):
    """The window a JSONL log has: its first pass, which parses the text."""
    from advcli.errors import DataError
    from advcli.io import file_sources

    path = Path(write_jsonl(tmp_path / "log.jsonl", groups_of_four()))
    log = file_sources.JsonlSource([str(path)], {})
    frames = log._frames(None)
    next(frames)
    path.write_text(path.read_text().replace('"reward": 0.0', '"reward": 1.0'))
    with pytest.raises(DataError, match="changed while advcli read it"):
        list(frames)
