"""Where an output folder keeps its manifest: inside the folder, in a form that the usual
readers of a folder of Parquet files load as it is.

The manifest is a Parquet file with the parts' schema and **no row group**
(:data:`NAME`); its JSON text and that text's sha256 are its footer's key-value metadata
(:data:`TEXT_KEY`, :data:`SHA256_KEY`). pyarrow, pandas and Ray Data skip it by its leading
``_``; polars reads it and finds no rows; Hugging Face ``datasets`` skips a file without row
groups (a file with an empty row group would break it). So ``pd.read_parquet("shards/")``,
``pq.read_table``, ``pl.scan_parquet``, ``load_dataset("parquet", data_dir=...)`` and
``ray.data.read_parquet`` read the folder's rows, in order, and nothing else. Written last, it
commits the folder. To read it::

    json.loads(pq.read_schema("shards/_advcli_manifest.parquet").metadata[b"advcli_manifest"])

Folders written before it kept the manifest as JSON beside the parts (a shard folder's
``manifest.json`` with ``manifest.sha256``; a parts folder's ``_advcli_manifest.json``, with
no checksum): :func:`find` reads those too.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advcli.errors import AdvcliError, DataError
from advcli.io import remote
from advcli.io.folders import Folder
from advcli.lazy_imports import pa, pq

NAME = "_advcli_manifest.parquet"
TEXT_KEY = "advcli_manifest"
SHA256_KEY = "advcli_manifest_sha256"
OLD_SHARDS, OLD_SHARDS_SUM, OLD_PARTS = "manifest.json", "manifest.sha256", "_advcli_manifest.json"
NAMES = (NAME, OLD_SHARDS, OLD_SHARDS_SUM, OLD_PARTS)
"""Every name a manifest has had: removed first, and written last, when a folder is replaced."""


def write(folder: Path, manifest: dict[str, Any], first_part: str) -> None:
    """The manifest file in ``folder``: no rows, the schema of ``first_part`` (a part's path,
    or its object in object storage), the manifest's text and its sha256 added to the
    schema's metadata."""
    schema = pq.read_schema(remote.open_input(first_part) if remote.is_remote(first_part)
                            else first_part)  # fmt: skip
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    metadata = {
        **(schema.metadata or {}),
        TEXT_KEY.encode(): text.encode(),
        SHA256_KEY.encode(): hashlib.sha256(text.encode()).hexdigest().encode(),
    }
    pq.ParquetWriter(str(folder / NAME), schema.with_metadata(metadata)).close()


def footer_value(meta: pq.FileMetaData, key: bytes, shown: str, hint: str) -> bytes | None:
    """The value of ``key`` in a Parquet file's footer (None: not there). A footer may hold
    it twice: in its key-value metadata (what ``pq.read_metadata(...).metadata`` and polars
    show) and inside the Arrow schema stored beside it (what ``pq.read_schema`` and pandas
    show). Two copies that differ are an edit of one of them: a :class:`DataError` naming the
    file ``shown``, with ``hint``."""
    plain = (meta.metadata or {}).get(key)
    in_schema = (meta.schema.to_arrow_schema().metadata or {}).get(key)
    if plain is not None and in_schema is not None and plain != in_schema:
        msg = (
            f"{shown}: edited after advcli wrote it (its footer holds two copies of "
            f"'{key.decode()}', and they differ). Hint: {hint}"
        )
        raise DataError(msg)
    return plain if plain is not None else in_schema


@dataclass(frozen=True)
class Found:
    """A folder's manifest as found: the file that holds it (``where``), its text, the sha256
    recorded for it (None: none was), and the manifest's own files (none of them data)."""

    where: str
    text: str
    recorded: str | None
    files: frozenset[str]

    def sha256_matches(self) -> bool:
        return self.recorded == hashlib.sha256(self.text.encode()).hexdigest()


def find(folder: Folder) -> Found | None:
    """The folder's manifest, in today's layout or an earlier one; None where it has none.
    Raises an :class:`AdvcliError` (or ``OSError``, ``ArrowException``) for a manifest file
    that cannot be read."""
    if folder.kind(NAME) == "file":
        with folder.open(NAME) as fh:
            meta = pq.read_metadata(fh)
        shown, hint = folder.path(NAME), "write the folder again (`force=True`)"
        text = (footer_value(meta, TEXT_KEY.encode(), shown, hint) or b"").decode(errors="replace")
        sha256 = footer_value(meta, SHA256_KEY.encode(), shown, hint)
        return Found(NAME, text, sha256.decode() if sha256 else None, frozenset({NAME}))
    if folder.kind(OLD_SHARDS) == "file":
        recorded = None
        if folder.kind(OLD_SHARDS_SUM) == "file":
            line = folder.read_text(OLD_SHARDS_SUM).split()
            recorded = line[0] if line[1:2] == [OLD_SHARDS] else ""
        files = frozenset({OLD_SHARDS, OLD_SHARDS_SUM})
        return Found(OLD_SHARDS, folder.read_text(OLD_SHARDS), recorded, files)
    if folder.kind(OLD_PARTS) == "file":
        return Found(OLD_PARTS, folder.read_text(OLD_PARTS), None, frozenset({OLD_PARTS}))
    return None


def read_json(folder: Folder) -> tuple[Found, Any] | None:
    """The manifest found, and its JSON (None where it does not parse); None without one or
    where it cannot be read."""
    try:
        found = find(folder)
    except (OSError, ValueError, pa.ArrowException, AdvcliError):
        return None
    if found is None:
        return None
    try:
        return found, json.loads(found.text)
    except ValueError:
        return found, None
