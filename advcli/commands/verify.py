"""``advcli verify``: a folder of shards or of parts re-read against its manifest."""

from __future__ import annotations

import os

from advcli.io import manifests
from advcli.io.folders import Folder
from advcli.results import Verification
from advcli.shards.manifest import verify as verify_shards


def verify(folder: str | os.PathLike[str]) -> Verification:
    """``advcli verify``: a folder of shards (``advcli shard``) or of parts (``annotate
    --engine ray``), re-read against its manifest; raises on the first problem."""
    from advcli.on_ray import tasks as on_ray  # imports no Ray

    read = manifests.read_json(Folder(os.fspath(folder)))
    if read is not None and on_ray.is_parts_manifest(read[1]):
        return on_ray.verify_parts(os.fspath(folder))
    return verify_shards(folder)
