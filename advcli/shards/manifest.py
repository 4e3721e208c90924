"""The manifest of a shard folder (written last: a folder without one is incomplete; kept as
:mod:`advcli.io.manifests` says), and ``advcli verify``, which checks a folder against it."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path, PurePosixPath
from typing import Any, NoReturn

from advcli._version import __version__
from advcli.errors import DataError, UsageError
from advcli.io import manifests, remote
from advcli.io.checksum import file_sha256
from advcli.io.folders import Folder
from advcli.io.jsonl import STDIN, is_jsonl
from advcli.io.outputs import existing_metadata
from advcli.io.sources import Sources
from advcli.lazy_imports import pa, pq
from advcli.results import Verification
from advcli.shards import trainers
from advcli.shards.inputs import Input
from advcli.shards.options import ShardOptions
from advcli.shards.plan import ShardPlan
from advcli.shards.write import schema_list

FORMAT = "advcli-shards/1"


def input_record(path: str, sources: Sources) -> dict[str, Any]:
    """An input's size and checksum (and its metadata file's, for an annotated JSONL log)."""
    if path == STDIN:
        data = sources.stdin or b""
        return {"path": path, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    if remote.is_remote(path):
        size, digest = remote.sha256(path)
        return {"path": path, "bytes": size, "sha256": digest}
    record: dict[str, Any] = {
        "path": path,
        "bytes": os.path.getsize(path),
        "sha256": file_sha256(Path(path)),
    }
    meta = existing_metadata(path) if is_jsonl(path) else None
    if meta is not None:
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
    correction = {"correction": inp.correction} if inp.correction else {}  # --correction's
    return {
        "format": FORMAT,
        "advcli_version": __version__,
        "method": inp.metadata.get("method"),
        "params": inp.metadata.get("params"),
        "roles": inp.metadata.get("roles"),
        **correction,
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


def write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    """The manifest file, with the first shard's schema and the text's sha256 (which lets
    ``verify`` tell an edited manifest)."""
    manifests.write(folder, manifest, str(folder / manifest["shards"][0]["path"]))


# The manifest's documented schema (docs/shards.md), as ``verify`` reads it: a dict is a record
# with these keys (more may follow), ``[X]`` a list of X, ``Map(X)`` names to X, a tuple any of
# its types. Counts are non-negative integers.
class Map:
    def __init__(self, of: Any):
        self.of = of


Count = "count"
_COUNTS = {"rows": Count, "samples": Count, "tokens": Count, "action_tokens": Count}
_TOTALS = {**_COUNTS, "shards": Count}
_SCHEMA = {
    "format": str,
    "advcli_version": str,
    "method": (str, type(None)),
    "params": (dict, type(None)),
    "roles": (dict, type(None)),
    "annotated_input": bool,
    "inputs": [{"path": str, "bytes": Count, "sha256": str}],
    "options": dict,
    "layout": str,
    "splits": Map(_TOTALS),
    "shards": [{"path": str, "split": str, "bytes": Count, "sha256": str, "schema": [[str]],
                **_COUNTS}],
    "totals": _TOTALS,
    "dropped": dict,
    "truncated": dict,
}  # fmt: skip


def _problem(value: Any, spec: Any, at: str) -> str | None:
    """What makes ``value`` differ from ``spec`` (None: nothing), located by ``at``."""
    if spec is Count:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        return None if ok else f"{at} is {value!r}, expected a count"
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return f"{at} is {type(value).__name__}, expected a record"
        for key, inner in spec.items():
            if key not in value:
                return f"{at} lacks {key!r}"
            if (found := _problem(value[key], inner, f"{at}.{key}")) is not None:
                return found
        return None
    if isinstance(spec, list):
        if not isinstance(value, list):
            return f"{at} is {type(value).__name__}, expected a list"
        problems = (_problem(v, spec[0], f"{at}[{i}]") for i, v in enumerate(value))
        return next((p for p in problems if p is not None), None)
    if isinstance(spec, Map):
        if not isinstance(value, dict):
            return f"{at} is {type(value).__name__}, expected a record"
        problems = (_problem(v, spec.of, f"{at}.{k}") for k, v in value.items())
        return next((p for p in problems if p is not None), None)
    ok = isinstance(value, spec) and not (isinstance(value, bool) and spec is not bool)
    return None if ok else f"{at} is {value!r}, expected {_type_name(spec)}"


def _type_name(spec: Any) -> str:
    kinds = spec if isinstance(spec, tuple) else (spec,)
    return " or ".join("null" if k is type(None) else k.__name__ for k in kinds)


def listed(folder: Folder) -> set[str] | None:
    """The files a shard folder's manifest names (itself and its checksum too); None where
    the folder has no readable advcli manifest."""
    read = manifests.read_json(folder)
    if read is None:
        return None
    found, manifest = read
    try:
        if manifest.get("format") != FORMAT:
            return None
        paths = (PurePosixPath(s["path"]).as_posix() for s in manifest["shards"])
        return {*found.files, *paths}
    except (TypeError, KeyError, AttributeError, ValueError):
        return None


def read_manifest(folder: Folder, regen: str) -> tuple[manifests.Found, dict[str, Any]]:
    """The folder's manifest (where it was found, and its JSON), checked against its sha256
    and its schema."""
    try:
        found = manifests.find(folder)
    except (OSError, ValueError, pa.ArrowException) as exc:
        reason = " ".join(str(exc).split())
        _fail(f"{folder.path(manifests.NAME)}: not a readable manifest ({reason})", regen)
    if found is None:
        _fail(
            f"{folder.path(manifests.NAME)}: no manifest, so the folder is not a complete shard "
            "output",
            regen,
        )
    mpath = folder.path(found.where)
    if found.recorded is None:
        sums = folder.path(manifests.OLD_SHARDS_SUM)
        _fail(f"{sums}: missing, so the manifest cannot be checked", regen)
    if not found.sha256_matches():
        _fail(f"{mpath}: edited after advcli wrote it (its sha256 differs from the recorded one)",
              regen)  # fmt: skip
    try:
        manifest: Any = json.loads(found.text)
    except ValueError:
        manifest = None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        _fail(f"{mpath}: not an advcli shard manifest ({FORMAT})", regen)
    if (problem := _problem(manifest, _SCHEMA, "manifest")) is not None:
        _fail(f"{mpath}: {problem}", regen)
    return found, manifest


def verify(location: str | os.PathLike[str]) -> Verification:
    """``advcli verify``: re-read every shard against the manifest; raise on the first problem.

    The manifest must match its checksum and schema; every file in the folder (hidden ones
    too) must be the manifest, its checksum or a shard it lists, none a symlink; each shard's
    size, sha256, schema, rows and tokens, and the method and parameters it records, must be
    the manifest's; its split one of the manifest's, whose counts add up. The folder may be in
    object storage.
    """
    location = os.fspath(location)
    folder = Folder(location)
    if not folder.exists():
        msg = f"{location}: no such folder. Hint: give the `out` folder of advcli shard"
        raise UsageError(msg)
    regen = "write the shards again with advcli shard `force=True`"
    found, manifest = read_manifest(folder, regen)
    mpath = folder.path(found.where)
    records = manifest["shards"]
    listed = set()
    for rec in records:
        rel = rec["path"]
        if not rel or PurePosixPath(rel).is_absolute() or ".." in PurePosixPath(rel).parts:
            _fail(f"{mpath}: shard path {rel!r} is not inside the folder", regen)
        listed.add(PurePosixPath(rel).as_posix())
        _verify_shard(folder, rel, rec, manifest, regen)
    for rel in folder.files():
        if folder.kind(rel) == "symlink":
            _fail(f"{folder.path(rel)}: a symlink; a shard folder holds only files advcli wrote",
                  regen)  # fmt: skip
        if rel not in listed | found.files:
            _fail(
                f"{folder.path(rel)}: a file the manifest does not list", "remove it, or " + regen
            )
    if totals(records) != manifest["totals"]:
        _fail(f"{mpath}: the totals do not add up to the shards' counts", regen)
    for name, split in manifest["splits"].items():
        if totals([r for r in records if r["split"] == name]) != split:
            _fail(f"{mpath}: split {name!r} does not add up to its shards' counts", regen)
    return Verification(folder=location, ok=True, **totals(records))


def _verify_shard(
    folder: Folder, rel: str, rec: dict[str, Any], manifest: dict[str, Any], regen: str
) -> None:
    path = folder.path(rel)
    if folder.kind(rel) != "file":
        _fail(f"{path}: missing or not a file (the manifest lists it)", regen)
    folders = PurePosixPath(rel).parts[:-1]
    if rec["split"] not in manifest["splits"] or (folders and folders[0] != rec["split"]):
        _fail(f"{path}: split {rec['split']!r} is not where the shard is", regen)
    size = folder.size(rel)
    if size != rec["bytes"]:
        _fail(f"{path}: {size} bytes, the manifest says {rec['bytes']} (truncated?)", regen)
    digest = folder.sha256(rel)
    if digest != rec["sha256"]:
        _fail(
            f"{path}: sha256 {digest[:12]}…, the manifest says {rec['sha256'][:12]}… "
            "(the file was altered)",
            regen,
        )
    try:
        with folder.open(rel) as fh:
            pf = pq.ParquetFile(fh, page_checksum_verification=True)
            schema = pf.schema_arrow
            own = json.loads(manifests.footer_value(pf.metadata, b"advcli", path, regen) or b"{}")
            trainer = trainers.get(manifest["options"].get("layout"))
            cols = pf.read(columns=[*trainer.tokens, trainer.actions])
    except (OSError, ValueError, pa.ArrowException) as exc:
        _fail(f"{path}: not a readable Parquet file ({' '.join(str(exc).split())})", regen)
    for key in ("method", "params"):
        if not isinstance(own, dict) or own.get(key) != manifest[key]:
            _fail(f"{path}: its {key} differs from the manifest's", regen)
    if schema_list(schema) != rec["schema"]:
        seen = ", ".join(f"{n}: {t}" for n, t in schema_list(schema))
        _fail(f"{path}: schema ({seen}) differs from the manifest's", regen)
    if pf.metadata.num_rows != rec["rows"]:
        _fail(f"{path}: {pf.metadata.num_rows} rows, the manifest says {rec['rows']}", regen)
    tokens, actions = trainer.count(cols)
    if tokens != rec["tokens"] or actions != rec["action_tokens"]:
        _fail(
            f"{path}: {tokens} tokens ({actions} action tokens), the manifest says "
            f"{rec['tokens']} ({rec['action_tokens']})",
            regen,
        )
