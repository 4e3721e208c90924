"""The manifest of a shard folder (written last: a folder without one is incomplete), and
``advcli verify``, which checks a folder against its manifest."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from advcli import __version__
from advcli.errors import DataError, UsageError
from advcli.io.checksum import file_sha256
from advcli.io.jsonl import STDIN, is_jsonl
from advcli.io.sources import Sources
from advcli.shards.inputs import Input
from advcli.shards.options import ShardOptions
from advcli.shards.plan import ShardPlan
from advcli.shards.write import schema_list

FORMAT = "advcli-shards/1"
MANIFEST = "manifest.json"


def input_record(path: str, sources: Sources) -> dict[str, Any]:
    """An input's size and checksum (and its ``.meta.json``'s, for an annotated JSONL log)."""
    if path == STDIN:
        data = sources.stdin or b""
        return {"path": path, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    record: dict[str, Any] = {
        "path": path,
        "bytes": os.path.getsize(path),
        "sha256": file_sha256(Path(path)),
    }
    meta = Path(f"{path}.meta.json")
    if is_jsonl(path) and meta.exists():
        record["meta"] = {"path": str(meta), "sha256": file_sha256(meta)}
    return record


def totals(records: list[dict[str, Any]]) -> dict[str, int]:
    keys = ("rows", "samples", "tokens", "action_tokens")
    out = {k: sum(r[k] for r in records) for k in keys}
    out["shards"] = len(records)
    return out


def build_manifest(
    inp: Input, plan: ShardPlan, opts: ShardOptions, records: list[dict[str, Any]]
) -> dict[str, Any]:
    dropped: dict[str, Any] = dict(plan.dropped)
    if inp.dropped_by_method:
        dropped["by_method"] = inp.dropped_by_method
    return {
        "format": FORMAT,
        "advcli_version": __version__,
        "method": inp.metadata.get("method"),
        "params": inp.metadata.get("params"),
        "roles": inp.metadata.get("roles"),
        "annotated_input": inp.annotated_input,
        "inputs": [input_record(f, inp.sources) for f in inp.sources.files],
        "options": opts.as_dict(),
        "layout": "packed" if opts.pack is not None else "rows",
        "splits": {
            sp.name: totals([r for r in records if r["split"] == sp.name]) for sp in plan.splits
        },
        "shards": records,
        "totals": totals(records),
        "dropped": dropped,
        "truncated": plan.truncated,
    }


def _fail(problem: str, hint: str) -> NoReturn:
    raise DataError(f"{problem}. Hint: {hint}")


def verify(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """``advcli verify``: re-read every shard against the manifest; raise on the first problem."""
    folder = os.fspath(folder)
    root = Path(folder)
    if not root.is_dir():
        msg = f"{folder}: no such folder. Hint: give the --out folder of advcli shard"
        raise UsageError(msg)
    mpath = root / MANIFEST
    regen = "write the shards again with advcli shard --force"
    if not mpath.is_file():
        _fail(f"{mpath}: no manifest, so the folder is not a complete shard output", regen)
    try:
        manifest: Any = json.loads(mpath.read_text())
    except ValueError:
        manifest = None
    if not (
        isinstance(manifest, dict)
        and manifest.get("format") == FORMAT
        and isinstance(manifest.get("shards"), list)
    ):
        _fail(f"{mpath}: not an advcli shard manifest ({FORMAT})", regen)
    records = manifest["shards"]
    listed = set()
    for rec in records:
        rel = str(rec.get("path", ""))
        path = root / rel
        if not rel or Path(rel).is_absolute() or ".." in Path(rel).parts:
            _fail(f"{mpath}: shard path {rel!r} is not inside the folder", regen)
        listed.add(Path(rel).as_posix())
        if not path.is_file():
            _fail(f"{path}: missing (the manifest lists it)", regen)
        size = path.stat().st_size
        if size != rec["bytes"]:
            _fail(f"{path}: {size} bytes, the manifest says {rec['bytes']} (truncated?)", regen)
        digest = file_sha256(path)
        if digest != rec["sha256"]:
            _fail(
                f"{path}: sha256 {digest[:12]}…, the manifest says {rec['sha256'][:12]}… "
                "(the file was altered)",
                regen,
            )
        try:
            pf = pq.ParquetFile(path)
            schema = pf.schema_arrow
        except (OSError, pa.ArrowException) as exc:
            _fail(f"{path}: not a readable Parquet file ({exc})", regen)
        if schema_list(schema) != rec["schema"]:
            seen = ", ".join(f"{n}: {t}" for n, t in schema_list(schema))
            _fail(f"{path}: schema ({seen}) differs from the manifest's", regen)
        if pf.metadata.num_rows != rec["rows"]:
            _fail(f"{path}: {pf.metadata.num_rows} rows, the manifest says {rec['rows']}", regen)
        cols = pf.read(columns=["input_ids", "loss_mask"])
        tokens = sum(len(c.flatten()) for c in cols.column("input_ids").chunks)
        actions = sum(
            int(np.asarray(c.flatten()).astype(np.int64).sum())
            for c in cols.column("loss_mask").chunks
        )
        if tokens != rec["tokens"] or actions != rec["action_tokens"]:
            _fail(
                f"{path}: {tokens} tokens ({actions} action tokens), the manifest says "
                f"{rec['tokens']} ({rec['action_tokens']})",
                regen,
            )
    for path in sorted(root.rglob("*.parquet")):
        rel = path.relative_to(root).as_posix()
        if rel not in listed and not any(part.startswith(".") for part in Path(rel).parts):
            _fail(f"{path}: a shard the manifest does not list", "remove it, or " + regen)
    if totals(records) != manifest.get("totals"):
        _fail(f"{mpath}: the totals do not add up to the shards' counts", regen)
    return {"folder": folder, "ok": True, **totals(records)}
