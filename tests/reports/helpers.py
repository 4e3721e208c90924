"""Read back what ``advcli report`` embedded in its page."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

TYPES = {"u4": np.uint32, "f8": np.float64}


def page_data(path: str | Path) -> dict[str, Any]:
    """The ``DATA`` object of a report page (the JSON of its ``report-data`` element)."""
    html = Path(path).read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html)
    assert found is not None, "no DATA in the page"
    return json.loads(found.group(1))


def tokens(view: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A rollout's token view decoded: ids, kinds (0 prompt, 1 action, 2 observation),
    advantages (None: no advantages)."""
    ids = np.frombuffer(base64.b64decode(view["ids"]), dtype=TYPES[view["ids_type"]])
    kind = np.frombuffer(base64.b64decode(view["kind"]), dtype=np.uint8)
    adv = np.frombuffer(base64.b64decode(view["adv"]), dtype=np.float32) if "adv" in view else None
    return ids, kind, adv


def overlay(view: dict[str, Any]) -> dict[str, np.ndarray]:
    """A rollout's token overlay decoded, by key: ``delta`` and ``weight`` (float32), ``masked``
    (uint8); a key the view lacks is left out."""
    types = {"delta": np.float32, "weight": np.float32, "masked": np.uint8}
    return {
        key: np.frombuffer(base64.b64decode(view[key]), dtype=dtype)
        for key, dtype in types.items()
        if key in view
    }


def tiny_tokenizer(path: Path, words: list[str]) -> str:
    """A word-level ``tokenizer.json`` built here (nothing downloaded): word k has id k."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0]))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(path))
    return str(path)
