"""JSONL logs stream in chunks of whole lines: the same rows, types and errors as one read."""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Generator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

import advcli
from advcli.errors import DataError
from advcli.io import jsonl
from advcli.io.file_sources import JsonlSource, open_source, read_inputs
from advcli.io.jsonl import chunks as jsonl_chunks
from advcli.io.jsonl_checks import refuse_duplicate_keys
from advcli.run import logs
from tests.conftest import (
    READING_COMMANDS,
    annotate_in_memory,
    group_log,
    groups_of_four,
    one_line,
    refused,
    rollout,
    run,
    write_jsonl,
)
from tests.fuzz import main, peak_memory


def log_rows(n: int = 40, seed: int = 0) -> list[dict]:
    """Rollouts of 3-40 tokens; integer rewards on the first half, fractions after."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        n_action = int(rng.integers(1, 38))
        reward = int(rng.integers(0, 2)) if i < n // 2 else float(rng.random())
        row = rollout(f"q{i % 7}", reward, n_action=n_action, values=rng.random(n_action + 2))
        row["values"] = [round(float(v), 6) for v in row["values"]]
        rows.append(row)
    return rows


def jsonl_bytes(path: Path, rows: list[dict]) -> bytes:
    return Path(write_jsonl(path, rows)).read_bytes()


def whole(source) -> pa.Table:
    return pa.concat_tables(table for _, table in source.batches(None, 5))


def two_files(tmp_path: Path) -> tuple[list[str], pa.Table]:
    """A plain file of 40 rows and a gzipped one of 9 after two blank lines, and their table."""
    data = write_jsonl(tmp_path / "a.jsonl", log_rows(40))
    more = tmp_path / "b.jsonl.gz"
    more.write_bytes(gzip.compress(b"\n\n" + jsonl_bytes(tmp_path / "b", log_rows(9, 1))))
    files = [data, str(more)]
    return files, read_inputs(files)[0]


@pytest.mark.parametrize("chunk_bytes", [1, 300, 1 << 20])
def test_chunks_give_the_rows_of_one_read(tmp_path, chunk_bytes):
    """Any chunk size (1 byte: every chunk one line) gives the table of the in-memory reader,
    batch starts counting rows, and the first pass counts each file's rows."""
    files, expected = two_files(tmp_path)
    more = files[1]
    source = JsonlSource(files, {}, chunk_bytes=chunk_bytes)
    assert source.schema == expected.schema
    assert source.columns(["prompt_id", "reward"]).equals(expected.select(["prompt_id", "reward"]))
    assert source.sources.row_counts == [40, 9]
    starts = [start for start, _ in source.batches(["reward"], 5)]
    assert starts[0] == 0 and starts == sorted(set(starts))
    assert whole(source).equals(expected)
    assert source.sources.at(41, "reward") == f"{more}: line 4, column 'reward'"


def test_chunks_are_whole_lines(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"a": 1}\n\n{"a": 22}\n{"a": 333}')
    for size in (1, 4, 9, 100):
        chunks = list(jsonl_chunks(str(path), size))
        assert b"".join(chunk for _, chunk in chunks) == path.read_bytes()
        assert all(chunk.endswith(b"\n") for _, chunk in chunks[:-1])
        lines = [line for line, _ in chunks]
        assert lines == sorted(lines) and lines[0] == 1


def test_plain_and_compressed_files_stream(tmp_path):
    plain = write_jsonl(tmp_path / "log.jsonl", log_rows(12))
    packed = tmp_path / "log.jsonl.zst"
    packed.write_bytes(zstandard.ZstdCompressor().compress(Path(plain).read_bytes()))
    expected = read_inputs([plain])[0]
    for path in (plain, str(packed)):
        source = open_source([path])
        assert isinstance(source, JsonlSource)
        assert whole(source).equals(expected)


@pytest.mark.parametrize(
    ("row", "column"), [(26, "input_ids"), (126, "input_ids"), (127, "reward")]
)
def test_an_error_names_its_line_in_any_chunk(tmp_path, row, column):
    """Found while typing the columns (the first 100 rows) or in a later chunk."""
    rows = log_rows(130)
    rows[row][column] = "oops"
    path = write_jsonl(tmp_path / "log.jsonl", rows)
    with pytest.raises(DataError) as info:
        whole(JsonlSource([path], {}, chunk_bytes=500))
    assert str(info.value) == (
        f"{path}: line {row + 1}, column '{column}': expected "
        f'{"a list of 64-bit integers" if column == "input_ids" else "a number"}, saw "oops". '
        "Hint: every line must use the same types"
    )


def test_files_with_clashing_types_are_refused(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [rollout("q", 1.0)])
    b = write_jsonl(tmp_path / "b.jsonl", [rollout("q", 1.0) | {"reward": [1.0]}])
    with pytest.raises(DataError, match="the files have different columns or types"):
        JsonlSource([a, b], {})


def test_annotating_a_streamed_log_equals_the_in_memory_run(tmp_path, monkeypatch):
    """The same numbers whatever the batching: batches of 7 rows from chunks of 300 bytes."""

    def chunked(files: list[str], mapping: dict | None = None) -> JsonlSource:
        return JsonlSource(files, mapping or {}, chunk_bytes=300)

    path = write_jsonl(tmp_path / "log.jsonl", log_rows(40))
    runs: list[tuple[str, dict[str, Any]]] = [("grpo", {}), ("gae", {"gamma": 0.99})]
    for method, params in runs:
        expected = annotate_in_memory([path], method=method, **params)
        out = tmp_path / f"{method}.parquet"
        monkeypatch.setattr(logs, "open_source", chunked)
        advcli.annotate([path], str(out), method=method, **params, batch_rows=7)
        got = pq.read_table(out)
        assert got.column_names == expected.column_names
        for name in expected.column_names:
            assert got.column(name).to_pylist() == expected.column(name).to_pylist(), name


def test_integer_rewards_on_the_first_lines_do_not_type_the_column(tmp_path):
    """Polars would type `reward` from its first 100 rows as integers and fail on the 0.5."""
    rows = [rollout("q", i % 2) for i in range(120)] + [rollout("q", 0.5)]
    path = write_jsonl(tmp_path / "log.jsonl", rows)
    for table in (whole(JsonlSource([path], {})), read_inputs([path])[0]):
        assert table.column("reward").to_pylist()[-2:] == [1.0, 0.5]


def test_columns_null_on_the_first_lines_read_later_values(tmp_path):
    """Roles keep their type (float, bool); any other column is read as text. Polars' own
    inference would type them as null and fail on row 141."""
    rows = [rollout("q", 1.0, bootstrap_value=None, truncated=None, note=None) for _ in range(150)]
    rows[4]["bootstrap_value"] = 1  # a number first seen past the first line, an integer
    rows[140].update(bootstrap_value=0.35, truncated=True, note=7)
    path = write_jsonl(tmp_path / "log.jsonl", rows)
    for table in (whole(JsonlSource([path], {})), read_inputs([path])[0]):
        row = table.slice(140, 1).to_pylist()[0]
        assert (row["bootstrap_value"], row["truncated"], row["note"]) == (0.35, True, "7")
        assert table.column("bootstrap_value").to_pylist()[4] == 1.0


def test_a_later_value_of_another_type_is_named_by_line_and_column(tmp_path):
    rows = [rollout("q", 1.0, attempt=i) for i in range(150)]
    rows[140]["attempt"] = 2.5
    path = write_jsonl(tmp_path / "log.jsonl", rows)
    expected = (
        f"{path}: line 141, column 'attempt': expected a 64-bit integer, saw 2.5. "
        "Hint: every line must use the same types"
    )
    for read in (lambda: whole(JsonlSource([path], {})), lambda: read_inputs([path])):
        with pytest.raises(DataError) as info:
            read()
        assert str(info.value) == expected


@pytest.mark.parametrize("chunk_bytes", [1, 300, 1 << 20])
def test_kept_rows_are_the_rows_parsed_and_the_text_is_parsed_once(tmp_path, chunk_bytes):
    """keep_parsed(): the next pass parses every column and keeps them; the passes after it
    give the same tables without the files (renamed away here)."""
    files, expected = two_files(tmp_path)
    source = JsonlSource(files, {}, chunk_bytes=chunk_bytes)
    source.keep_parsed()
    assert source.columns(["prompt_id", "reward"]).equals(expected.select(["prompt_id", "reward"]))
    assert source.sources.row_counts == [40, 9]
    for f in files:
        os.rename(f, f"{f}.away")
    assert whole(source).equals(expected)
    rewards = pa.concat_tables(table for _, table in source.batches(["reward"], 5))
    assert rewards.equals(expected.select(["reward"]))
    starts = [start for start, _ in source.batches(None, 5)]
    assert starts[0] == 0 and starts == sorted(set(starts))


def test_every_pass_reads_the_batches_of_a_pass_over_the_text(tmp_path):
    """polars parses a chunk in pieces (one a thread); the kept rows give back whole chunks,
    so a later pass cuts the same batches as the text's (sums over batches add up alike)."""
    path = write_jsonl(tmp_path / "a.jsonl", log_rows(3000))
    parsed = JsonlSource([path], {}, chunk_bytes=1 << 18).batches(None, 256)
    text = [(start, t.num_rows) for start, t in parsed]
    source = JsonlSource([path], {}, chunk_bytes=1 << 18)
    source.keep_parsed()
    source.columns(["reward"])
    assert source._parsed is not None  # the later passes read the kept rows
    assert [(start, t.num_rows) for start, t in source.batches(None, 256)] == text
    assert len(text) > 3000 // 256  # a batch ends where a chunk of the text does


@pytest.mark.parametrize("chunk_bytes", [1, 7, 1 << 20])
def test_row_lines_are_the_lines_line_number_finds(tmp_path, chunk_bytes):
    """row_lines, one scan a chunk, gives every row's line as line_number does line by line:
    blank lines (spaces, tabs, form feeds, CRLF) hold no row; the last line may lack its
    newline."""
    rng = np.random.default_rng(3)
    blanks = [b"", b"  ", b"\t", b"\x0c", b" \r"]
    text = (
        b"".join(
            (blanks[rng.integers(len(blanks))] if rng.random() < 0.4 else b'{"a": %d}' % i) + b"\n"
            for i in range(60)
        )
        + b'{"a": "last"}'
    )
    path = tmp_path / "a.jsonl"
    path.write_bytes(text)
    found = jsonl.row_lines(jsonl_chunks(str(path), chunk_bytes))
    rows = sum(1 for line in text.splitlines() if line.strip())
    assert found.tolist() == [jsonl.line_number(text.splitlines(), r) for r in range(rows)]


def test_a_pass_left_halfway_keeps_nothing(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", log_rows(40))
    expected, _ = read_inputs([path])
    source = JsonlSource([path], {}, chunk_bytes=300)
    source.keep_parsed()
    batches = source.batches(None, 5)
    assert isinstance(batches, Generator)  # a pass that can be left halfway
    next(batches)
    batches.close()  # an error downstream, say
    assert whole(source).equals(expected)  # parsed again, in full (and kept this time)
    os.rename(path, f"{path}.away")
    assert whole(source).equals(expected)


@pytest.mark.parametrize("key", ["reward", "a.b*", "ключ", 'q"uote', "back\\slash", "[x]"])
def test_a_key_twice_is_found_whatever_its_characters(key):
    unique = "\n".join(json.dumps({key: i, "z": [1, 2]}, ensure_ascii=False) for i in range(3))
    chunk = unique.encode() + b"\n"
    refuse_duplicate_keys("log.jsonl", chunk, 1, 3, [key])  # no error
    quoted = json.dumps(key, ensure_ascii=False)
    chunk += f"{{{quoted}: 1, {quoted}: 2}}\n".encode()
    with pytest.raises(DataError, match="line 4, column .*the key appears twice"):
        refuse_duplicate_keys("log.jsonl", chunk, 1, 4, [key])


def test_no_room_for_the_parsed_rows_parses_again(tmp_path):
    """Keeping the parsed rows is only a speed-up: where TMPDIR has no room for them (here a
    file size limit, as a full disk would), every pass parses the text again, same output."""
    import resource
    import signal
    import subprocess
    import sys

    path = write_jsonl(tmp_path / "a.jsonl", log_rows(400))  # kept rows: 219 kB; output: 115

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed
        resource.setrlimit(resource.RLIMIT_FSIZE, (150_000, 150_000))

    outs = [tmp_path / "limited.parquet", tmp_path / "free.parquet"]
    for out, limit in zip(outs, (small_files, None), strict=True):
        cmd = [sys.executable, "-m", "advcli", "annotate", path, "--method", "gae", "--out"]
        proc = subprocess.run(
            [*cmd, str(out), "-q"], capture_output=True, text=True, preexec_fn=limit,
            env={**os.environ, "TMPDIR": str(tmp_path)},
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    assert pq.read_table(outs[0]).equals(pq.read_table(outs[1]))


def _packed(path: Path, data: bytes) -> Path:
    """``data`` compressed as ``path``'s suffix says (.gz or .zst)."""
    packed = (
        gzip.compress(data) if path.suffix == ".gz" else zstandard.ZstdCompressor().compress(data)
    )
    path.write_bytes(packed)
    return path


def test_a_long_line_decompresses_whole_in_one_pass(tmp_path, monkeypatch):
    """A 48 MiB line of a few kilobytes of zstd: each read takes its bytes at an offset of the
    piece decompressed (re-cutting the piece at every read made it quadratic: minutes)."""
    line = b'{"prompt_id": "p", "reward": 1.0, "pad": "' + b"a" * (48 << 20) + b'"}\n'
    path = _packed(tmp_path / "long.jsonl.zst", line + b'{"prompt_id": "q", "reward": 0.0}\n')
    monkeypatch.setenv(jsonl.RATIO_VARIABLE, "1e6")
    with jsonl.open_stream(str(path)) as fh:
        lines = list(fh)
    whole_text = jsonl.read_bytes(str(path))
    assert [len(x) for x in lines] == [len(line), 34]
    assert lines[0] == line and whole_text == line + lines[1]


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
def test_a_file_decompressing_past_its_bound_is_refused(tmp_path, monkeypatch, suffix):
    """A few kilobytes that decompress to 4 MiB: past ADVCLI_MAX_DECOMPRESSION_RATIO times the
    file's size (and 1 MiB), refused naming the variable; raised, read."""
    pad = "a" * (4 << 20)
    rows = [{"prompt_id": "p", "reward": float(i), "pad": pad if i == 0 else ""} for i in range(2)]
    text = "".join(json.dumps(r) + "\n" for r in rows).encode()
    path = str(_packed(tmp_path / f"log.jsonl{suffix}", text))
    monkeypatch.setenv(jsonl.RATIO_VARIABLE, "50")
    with pytest.raises(DataError) as info:
        advcli.audit([path])
    assert str(info.value).startswith(f"{path}: its ")
    assert f"bound of 50 times the file's size. Hint: set {jsonl.RATIO_VARIABLE}" in str(info.value)
    monkeypatch.setenv(jsonl.RATIO_VARIABLE, "1e6")
    assert advcli.audit([path]).report.rollouts == 2
    if suffix == ".zst":  # some 20,000 times: past the default bound too, one line
        monkeypatch.delenv(jsonl.RATIO_VARIABLE)
        proc = run("audit", path)
        assert proc.returncode == 1 and proc.stderr.count(b"\n") == 1
        assert b"bound of 1000 times" in proc.stderr


RAW, RLE = 0, 1  # zstd's block types


def _frame(*blocks: tuple[int, bytes], last: bool = True) -> bytes:
    """A zstd frame built by hand, without its content size (a 128 KiB window), of ``(type,
    bytes)`` blocks: raw (the bytes) or RLE (one byte repeated, 128 KiB times)."""
    frame = zstandard.MAGIC_NUMBER.to_bytes(4, "little") + bytes([0x00, 0x38])
    for i, (kind, data) in enumerate(blocks):
        size = len(data) if kind == RAW else zstandard.BLOCKSIZE_MAX
        end = last and i == len(blocks) - 1
        frame += (end | kind << 1 | size << 3).to_bytes(3, "little") + data
    return frame


def _decompressed(block: tuple[int, bytes]) -> bytes:
    return block[1] if block[0] == RAW else block[1] * zstandard.BLOCKSIZE_MAX


def _every_kind_of_frame() -> list[tuple[bytes, bytes]]:
    """``(frame, what it decompresses to)``: zstd's own frames with and without their content
    size and checksum, an empty one, a skippable one, and raw and RLE blocks."""
    rows = [json.dumps(rollout(f"q{i % 2}", float(i % 2))).encode() + b"\n" for i in range(8)]
    streamed = zstandard.ZstdCompressor(write_checksum=True, write_content_size=False)
    writer = streamed.compressobj()
    blocks = [(RAW, rows[3]), (RLE, b"\n"), (RAW, rows[4] + rows[5])]
    return [
        (zstandard.ZstdCompressor().compress(rows[0] + rows[1]), rows[0] + rows[1]),
        (writer.compress(rows[2]) + writer.flush(), rows[2]),
        (zstandard.ZstdCompressor().compress(b""), b""),
        ((0x184D2A53).to_bytes(4, "little") + (5).to_bytes(4, "little") + b"skip!", b""),
        (_frame(*blocks), b"".join(map(_decompressed, blocks))),
        (zstandard.ZstdCompressor(level=19).compress(rows[6] + rows[7]), rows[6] + rows[7]),
    ]


def test_zstd_frames_of_every_kind_decompress_whole(tmp_path):
    """Read whole, in chunks of lines, and a few bytes at a time: the same text."""
    frames = _every_kind_of_frame()
    path = tmp_path / "log.jsonl.zst"
    path.write_bytes(b"".join(frame for frame, _ in frames))
    text = b"".join(plain for _, plain in frames)
    assert jsonl.read_bytes(str(path)) == text
    assert b"".join(chunk for _, chunk in jsonl_chunks(str(path), chunk_bytes=100)) == text
    with jsonl.open_stream(str(path)) as fh:
        assert b"".join(iter(lambda: fh.read(7), b"")) == text
    assert advcli.audit([str(path)]).report.rollouts == 8


def test_a_zstd_file_cut_anywhere_is_refused_or_ends_with_a_whole_frame(tmp_path):
    """Cut at each of its bytes: the text of the frames before the cut where it falls between
    two, else a DataError naming the file (never the part of a frame decoded so far)."""
    frames = _every_kind_of_frame()
    data = b"".join(frame for frame, _ in frames)
    ends = {sum(len(f) for f, _ in frames[: i + 1]): i for i in range(len(frames))}
    path = tmp_path / "log.jsonl.zst"
    for cut in range(1, len(data)):
        path.write_bytes(data[:cut])
        if cut in ends:
            whole = b"".join(plain for _, plain in frames[: ends[cut] + 1])
            assert jsonl.read_bytes(str(path)) == whole, cut
        else:
            with pytest.raises(DataError, match=f"^{path}: the zstd data is truncated or corrupt"):
                jsonl.read_bytes(str(path))


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (_frame((RAW, b"{}\n")) + b"not zstd", "an unknown magic number"),
        (_frame((RAW, b"{}\n"), (3, b"x")), "a block of the reserved type"),
        (_frame((RAW, b"{}\n")) + _frame((RAW, b"{}\n"), last=False), "ends inside a frame"),
    ],
    ids=["garbage after a frame", "a reserved block", "no last block"],
)
def test_a_zstd_file_that_is_not_frames_is_refused(tmp_path, data, said):
    path = tmp_path / "log.jsonl.zst"
    path.write_bytes(data)
    with pytest.raises(DataError, match="truncated or corrupt") as raised:
        jsonl.read_bytes(str(path))
    assert said in str(raised.value)


@pytest.mark.parametrize("byte", [b"\n", b"a"])
def test_a_zstd_file_decompressed_past_its_bound_takes_no_more_memory(tmp_path, monkeypatch, byte):
    """Blocks of 4 bytes that each decompress to 128 KiB (blank lines, or one long line): the
    command stops at the bound, its peak memory near the bound rather than the 128 MiB each
    4 KiB of them give (the data is fed a few blocks at a time, not so many bytes at a time)."""
    rows = [rollout(f"q{i // 2}", float(i % 2)) for i in range(4)]
    path = tmp_path / "log.jsonl.zst"
    path.write_bytes(_packed(tmp_path / "rows.jsonl.zst", b"".join(
        json.dumps(r).encode() + b"\n" for r in rows)).read_bytes()
        + _frame(*[(RLE, byte)] * 4000))  # fmt: skip
    monkeypatch.setenv(jsonl.RATIO_VARIABLE, "100")  # a bound of 1 MiB (the floor)
    assert main("audit", str(tmp_path / "rows.jsonl.zst"))[0] == 0  # modules imported
    with peak_memory() as grown:
        code, err = main("audit", str(path))
    assert code == 1 and "beyond advcli's bound of 100 times the file's size" in err, err
    assert grown[0] is None or grown[0] < jsonl.FLOOR_BYTES + (16 << 20), f"{grown[0]:,} bytes"


def _ids(role: str, first: int | str, n: int) -> list[dict]:
    """Rows whose ``role`` ids are of the kind of ``first`` (an integer, or text)."""
    kind = type(first)
    return [rollout(f"q{i}", 1.0, **{role: kind(i)}) for i in range(n)]


@pytest.mark.parametrize("role", ["prompt_id", "rollout_id"])
@pytest.mark.parametrize("first", [0, "0"])
@pytest.mark.parametrize("line", [2, 141])  # among the lines that type the columns, and after
def test_ids_of_two_kinds_are_refused_at_the_first_of_the_other(tmp_path, role, first, line):
    """Rollout ids 1 and "1" were one rollout (read as text), its rows merged as segments:
    an id of the other kind than the column's first is refused at its line, in every reader."""
    rows = _ids(role, first, 150)
    rows[line - 1][role] = "0" if first == 0 else 0  # the first row's id, of the other kind
    path = write_jsonl(tmp_path / "log.jsonl", rows)
    for read in (lambda: whole(JsonlSource([path], {})), lambda: read_inputs([path])):
        with pytest.raises(DataError) as info:
            read()
        assert str(info.value).startswith(f"{path}: line {line}, column '{role}': ")


@pytest.mark.parametrize("first", [0, "0"])
def test_files_whose_ids_are_of_two_kinds_are_refused(tmp_path, first):
    """One file's integer ids and another's text were read as one column of text."""
    a = write_jsonl(tmp_path / "a.jsonl", _ids("rollout_id", first, 3))
    b = write_jsonl(tmp_path / "b.jsonl", _ids("rollout_id", "0" if first == 0 else 0, 3))
    with pytest.raises(DataError) as info:
        whole(JsonlSource([a, b], {}))
    other, first_kind, other_kind = (
        ('"0"', "an integer", "a string") if first == 0 else ("0", "a string", "an integer")
    )
    assert str(info.value).startswith(
        f"{b}: line 1, column 'rollout_id': the id {other} is {other_kind}, but the first is "
        f"{first_kind} ({a}: line 1, column 'rollout_id')"
    )


def test_segments_of_two_rollouts_with_ids_of_two_kinds_are_not_merged(tmp_path):
    rows = [rollout("q", r, rollout_id=i, segment_index=s)
            for r, i, s in ((1.0, 1, 0), (0.0, "1", 1), (0.5, 2, 0))]  # fmt: skip
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    proc = run("annotate", log, "--method", "grpo", "--out", tmp_path / "o.parquet")
    assert proc.returncode == 1 and not (tmp_path / "o.parquet").exists()
    assert proc.stderr.decode() == (
        f"advcli: error: {log}: line 2, column 'rollout_id': the id \"1\" is a string, but the "
        f"first is an integer ({log}: line 1, column 'rollout_id'): read as text, 1 and \"1\" "
        "would be one id. Hint: write every id of the column as a string\n"
    )


def _many_rows(n: int) -> bytes:
    return b"".join(orjson.dumps(rollout(f"p{i // 4}", float(i % 2))) + b"\n" for i in range(n))


def _zstd_frames(data: bytes, frames: int) -> bytes:
    step = len(data) // frames
    parts = [data[i * step : (i + 1) * step if i < frames - 1 else None] for i in range(frames)]
    return b"".join(zstandard.ZstdCompressor().compress(part) for part in parts)


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("cut.jsonl.zst", lambda d: _zstd_frames(d, 3)[: -len(_zstd_frames(d, 3)) // 6]),
        ("cut.jsonl.gz", lambda d: gzip.compress(d)[:-40]),
        ("plain.jsonl.gz", lambda d: d),
        ("plain.jsonl.zst", lambda d: d),
        ("flipped.jsonl.gz", lambda d: _flip(gzip.compress(d), 200)),
        ("flipped.jsonl.zst", lambda d: _flip(zstandard.ZstdCompressor().compress(d), 200)),
    ],
)
def test_truncated_or_corrupt_compressed_input_is_an_error(tmp_path, name, make):
    path = tmp_path / name
    path.write_bytes(make(_many_rows(3000)))
    out = tmp_path / "out.parquet"
    proc = run("annotate", str(path), "--method", "grpo", "--out", str(out))
    assert proc.returncode == 1
    line = one_line(proc)
    assert line.startswith(f"advcli: error: {path}:"), line
    assert not out.exists()


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


def test_schema_of_a_log_of_empty_objects_counts_its_rows(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text("{}\n\n{}\n")
    info = json.loads(run("schema", str(log), "--json").stdout)
    assert info["rows"] == 2 and info["columns"] == {}
    proc = run("annotate", str(log), "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 1
    assert "no 'prompt_id' column. Columns found: none." in one_line(proc)


def test_integers_beyond_64_bits(tmp_path):
    rows = [rollout(2**64 + 1, 1.0), rollout(2**64 + 1, 0.0), rollout(7, 1.0)]
    log = tmp_path / "log.jsonl"  # orjson writes no integer beyond 64 bits: json does
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "o.parquet"
    assert run("annotate", str(log), "--method", "grpo", "-q", "--out", str(out)).returncode == 0
    table = pq.read_table(out)
    assert table.column("prompt_id").to_pylist() == [str(2**64 + 1)] * 2 + ["7"]  # as text
    assert [a[-1] for a in table.column("advantages").to_pylist()] == pytest.approx(
        [1.0, -1.0, 0.0], abs=1e-5
    )
    rows = [rollout("a", 1.0), rollout("a", 0.0, input_ids=[1, 2, 3, 4, 2**64])]
    (tmp_path / "ids.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = run("annotate", str(tmp_path / "ids.jsonl"), "--method", "grpo", "--out", str(out),
               "--force")  # fmt: skip
    assert proc.returncode == 1
    assert "line 2, column 'input_ids': expected a list of 64-bit integers" in one_line(proc)


def _spans_log(path: Path, start: object, at_line: int) -> str:
    """A log typed by its first lines, whose line ``at_line`` has an odd span start."""
    spans = [{"start": 0, "end": 2, "kind": "prompt"}, {"start": 2, "end": 5, "kind": "action"}]
    rows = [rollout(f"p{i // 4}", float(i % 2), spans=spans) for i in range(300)]
    rows[at_line - 1] = {**rows[at_line - 1], "spans": [spans[0], {**spans[1], "start": start}]}
    for row in rows:
        del row["action_mask"]
    return write_jsonl(path, rows)


@pytest.mark.parametrize("start", ["2", 2.5])
@pytest.mark.parametrize("at_line", [3, 250])  # among the lines that type the log, or later
def test_a_span_start_that_is_no_integer(tmp_path, start, at_line):
    log = _spans_log(tmp_path / "log.jsonl", start, at_line)
    proc = run("annotate", log, "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 1
    line = one_line(proc)
    if at_line == 250:
        shown = orjson.dumps(start).decode()
        assert f"line 250, column 'spans': expected a 64-bit integer at spans[1].start, " \
            f"saw {shown}" in line  # fmt: skip
    else:  # the column's type itself is off
        assert "column 'spans' (spans) has type" in line


@pytest.mark.parametrize("spaced", [False, True])
def test_a_key_given_twice_is_refused(tmp_path, spaced):
    rows = group_log(2, 2)
    lines = [orjson.dumps(r).decode() for r in rows]
    colon = '": ' if spaced else '":'
    lines[2] = lines[2][:-1] + f', "prompt_id{colon}"7"}}'  # as a hand edit would
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(lines) + "\n")
    for command in (
        ["schema"],
        ["annotate", "--method", "grpo", "--out", str(tmp_path / "o.jsonl")],
    ):
        proc = run(command[0], str(log), *command[1:])
        assert proc.returncode == 1
        assert "line 3, column 'prompt_id': the key appears twice" in one_line(proc)
    nested = [{**r, "meta": {"prompt_id": "x"}} for r in rows]  # a nested key of that name
    out = tmp_path / "n.parquet"
    log = write_jsonl(tmp_path / "nested.jsonl", nested)
    assert run("annotate", log, "--method", "grpo", "-q", "--out", str(out)).returncode == 0


@pytest.mark.parametrize("value", [{}, [1], True, 1.5])
def test_an_id_that_is_not_a_string_or_an_integer_is_refused(tmp_path, value):
    rows = [rollout("p", 1.0), dict(rollout("p", 0.0), prompt_id=value)]
    rows.append(dict(rollout("q", 0.0), meta={"prompt_id": {}}))  # not the row's own: fine
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    proc = run("audit", log)
    assert proc.returncode == 1
    assert one_line(proc) == (
        f"advcli: error: {log}: line 2, column 'prompt_id': an id is a string or an integer, "
        f"saw {json.dumps(value, separators=(',', ':'))}. Hint: write the id as a string"
    )


def test_a_value_of_another_kind_on_a_later_line_names_line_and_column(tmp_path):
    rows = [rollout("p", 1.0), dict(rollout("p", 0.0), segment_index={})]
    rows[0]["segment_index"] = 0
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    proc = run("annotate", log, "--method", "grpo", "--out", str(tmp_path / "o.parquet"))
    assert proc.returncode == 1
    assert one_line(proc) == (
        f"advcli: error: {log}: line 2, column 'segment_index': expected a number (as on line "
        "1), saw {}. Hint: every line must use the same types"
    )


def test_json_nested_too_deep_is_one_line(tmp_path):
    deep = json.dumps(groups_of_four(1)[0])[:-1] + ', "x": ' + "[" * 10_000 + "]" * 10_000 + "}"
    path = tmp_path / "deep.jsonl"
    path.write_text(deep + "\n")
    for command in READING_COMMANDS:
        assert "line 1: not valid JSON" in refused(tmp_path, str(path), command)


@pytest.mark.parametrize("at_line", [4, 1501])  # among the lines that type the log, or later
def test_a_key_twice_inside_a_struct_a_role_reads_is_refused(tmp_path, at_line):
    rows = [{**r, "meta": {"group": r["prompt_id"], "b": 2}} for r in groups_of_four(2000)]
    lines = [json.dumps(r) for r in rows]
    lines[at_line - 1] = lines[at_line - 1].replace('"b": 2', '"group": "other"')
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(lines) + "\n")
    proc = run("audit", str(path), "--col", "prompt_id=meta.group")
    assert proc.returncode == 1
    assert f"line {at_line}, column 'meta.group': the key appears twice" in one_line(proc)
