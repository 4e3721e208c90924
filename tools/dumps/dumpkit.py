"""What the fixture generators of ``tools/dumps/`` share: seeding, a framework's source taken
from its bare git clone, stand-in modules, the word-level tokenizer and the tiny model they
build (nothing downloaded), the versions and values they write into ``truth.json``.

A generator runs as a script with its framework's venv (``python tools/dumps/NAME.py``): it
puts its own folder first on ``sys.path`` (a spawned child, or an import as
``tools.dumps.NAME``, lacks it) and imports this module from there (``import dumpkit``), before
it takes that folder off again where its name is its framework's (``trl.py``: leave_folder).
Only the standard library is imported here at load time: what the frameworks bring (numpy,
torch, tokenizers, transformers) is imported where it is used.
"""

from __future__ import annotations

import ast
import contextlib
import os
import random
import shutil
import subprocess
import sys
import textwrap
import types
from importlib import metadata
from pathlib import Path
from typing import Any

# The first four special tokens of every word-level tokenizer built by word_level_tokenizer.
PAD_EOS_BOS_UNK = ["<pad>", "<eos>", "<bos>", "<unk>"]


def leave_folder(script: str) -> None:
    """Take the folder of ``script`` off ``sys.path``: a generator named as its framework's
    package is (``trl.py``) must not shadow it. It imports this module first, with its folder
    put first on ``sys.path`` (a spawned child, which runs the script again, has it no more)."""
    folder = Path(script).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != folder]


def offline_on_cpu() -> None:
    """Nothing downloaded, nothing on a GPU: the Hugging Face hub and transformers offline,
    tokenizers on one thread, no CUDA device seen (a setting the environment has is kept)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


def seed_all(seed: int) -> None:
    """Python's, numpy's and torch's random number generators seeded alike."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def git(git_dir: str, *args: str) -> bytes:
    """``git --git-dir GIT_DIR ARGS``'s standard output (a failure raises)."""
    return subprocess.run(
        ["git", "--git-dir", git_dir, *args], check=True, capture_output=True
    ).stdout


def git_file(git_dir: str, commit: str, path: str) -> str:
    """The text of ``path`` at ``commit``."""
    return git(git_dir, "show", f"{commit}:{path}").decode()


def git_blob(git_dir: str, commit: str, path: str) -> str:
    """The git blob id of ``path`` at ``commit`` (what a fixture records its source by)."""
    return git(git_dir, "rev-parse", f"{commit}:{path}").decode().strip()


def prepare_source(src: str, scratch: Path, *paths: str) -> tuple[Path, str]:
    """The framework's source folder and commit: a bare git dir's HEAD unpacked (only
    ``paths``) into ``scratch/src`` with a ``COMMIT`` file, or a folder as it is (its commit
    from its ``COMMIT`` file, else ``unknown``)."""
    p = Path(src)
    if (p / "HEAD").is_file() and (p / "objects").is_dir():  # a bare git dir
        commit = git(src, "rev-parse", "HEAD").decode().strip()
        dest = scratch / "src"
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        archive = git(src, "archive", "HEAD", *paths)
        subprocess.run(["tar", "x", "-C", str(dest)], input=archive, check=True)
        (dest / "COMMIT").write_text(commit + "\n")
        return dest, commit
    commit = (p / "COMMIT").read_text().strip() if (p / "COMMIT").exists() else "unknown"
    return p, commit


def extract_functions(path: Path, class_name: str, names: list[str], namespace: dict) -> dict:
    """The methods ``names`` of the framework's class ``class_name`` in ``path``, their source
    unchanged, run in ``namespace`` (the stand-ins they call)."""
    source = path.read_text()
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    lines = source.splitlines(keepends=True)
    found = {}
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
            start = min([d.lineno for d in node.decorator_list] + [node.lineno]) - 1
            code = textwrap.dedent("".join(lines[start : node.end_lineno]))
            # keep the original line numbers in tracebacks
            code = "\n" * start + code
            # class-body semantics: the method's name binds locally, not in the module namespace
            local: dict = {}
            # compiled under this module's `from __future__ import annotations`, as the
            # generators that made the fixtures compiled it
            exec(compile(code, str(path), "exec"), namespace, local)
            found[node.name] = local[node.name]
    missing = set(names) - set(found)
    assert not missing, f"not found in {path}: {missing}"
    return found


def stub_module(name: str, marker: str, **attrs: Any) -> types.ModuleType:
    """A stand-in module ``name`` in ``sys.modules`` holding ``attrs``, flagged by the
    attribute ``marker``, and set on its parent package where that is already there."""
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    m.__dict__[marker] = True
    sys.modules[name] = m
    if "." in name:
        parent, _, child = name.rpartition(".")
        if parent in sys.modules:
            setattr(sys.modules[parent], child, m)
    return m


class NoCliArgs:
    """A stand-in for an argument class whose options the framework's parser takes in (sglang's
    ``ServerArgs``): it adds none."""

    @staticmethod
    def add_cli_args(parser: Any, *args: Any, **kwargs: Any) -> Any:
        return parser


def stub_ray_and_sglang(marker: str) -> None:
    """ray and sglang stood in (everything runs in this process): ``@ray.remote`` leaves what
    it wraps as it is, ``ray.get`` and ``ray.put`` give back what they are given; sglang's and
    its router's argument classes add no options."""

    def remote(*args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return lambda f: f

    stub_module("ray", marker, remote=remote, get=lambda x: x, put=lambda x, **kwargs: x)
    stub_module("sglang", marker)
    stub_module("sglang.srt", marker)
    stub_module("sglang.srt.server_args", marker, ServerArgs=NoCliArgs)
    stub_module("sglang_router", marker)
    stub_module("sglang_router.launch_router", marker, RouterArgs=NoCliArgs)


def word_level_tokenizer(
    vocab: dict[str, int],
    specials: list[str],
    pre_tokenizer: Any = None,
    decoder: Any = None,
    **settings: Any,
) -> Any:
    """A transformers fast tokenizer with one id per word of ``vocab`` (words split by
    ``pre_tokenizer``, whitespace and punctuation by default): ``specials`` begin with
    ``<pad> <eos> <bos> <unk>``, the rest are its additional special tokens; ``settings`` go
    to ``PreTrainedTokenizerFast`` (``padding_side``)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    assert specials[:4] == PAD_EOS_BOS_UNK, specials
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace() if pre_tokenizer is None else pre_tokenizer
    if decoder is not None:
        tok.decoder = decoder
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
        additional_special_tokens=specials[4:],
        **settings,
    )


def save_chat_tokenizer(folder: str, specials: list[str], words: list[str], template: str) -> Any:
    """The word-level tokenizer of ``specials + words`` with a chat template, padding on the
    left, saved into ``folder``; returned as ``AutoTokenizer`` loads it from there."""
    from transformers import AutoTokenizer

    vocab = {tok: i for i, tok in enumerate(specials + words)}
    fast = word_level_tokenizer(vocab, specials, padding_side="left")
    fast.chat_template = template
    fast.save_pretrained(folder)
    return AutoTokenizer.from_pretrained(folder)


def tiny_model_config(config_class: Any, vocab: dict[str, int], **settings: Any) -> Any:
    """A 2-layer model config, hidden size 32, for ``vocab``'s word-level tokenizer (its pad,
    eos and bos ids): tiny, so a CPU runs it; ``settings`` add to these."""
    return config_class(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
        pad_token_id=vocab["<pad>"],
        eos_token_id=vocab["<eos>"],
        bos_token_id=vocab["<bos>"],
        **settings,
    )


def installed_versions(dists: tuple[str, ...]) -> dict[str, str]:
    """The installed version of each distribution of ``dists`` (in that order) that is there."""
    found = {}
    for dist in dists:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[dist] = metadata.version(dist)
    return found


def jsonable(value: Any) -> Any:
    """A tensor as a list, a numpy scalar as a Python number, anything else as it is."""
    import numpy as np
    import torch

    if torch.is_tensor(value):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value
