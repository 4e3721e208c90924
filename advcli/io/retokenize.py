"""Token ids made from a text log (``--tokenizer PATH``): the dumps of verl, TRL, AReaL, SkyRL
and OpenRLHF hold the prompt and the completion as decoded text, or as chat messages.

The tokenizer is a local ``tokenizer.json`` (the Hugging Face ``tokenizers`` library), or a
model folder holding one, with the chat template of ``chat_template.jinja`` or of
``tokenizer_config.json``. Nothing is downloaded. Each row becomes
``input_ids = prompt ⧺ completion`` and ``action_mask`` (1 on the completion's own tokens):

- the prompt as the framework rendered it for generation: chat messages through the chat
  template with the generation prompt (a sandboxed Jinja2 environment, as transformers renders
  it), text as it stands; tokenized without added special tokens (TRL's and verl's
  ``add_special_tokens=False``);
- the completion tokenized on its own and appended. A completion of several messages (an agent's
  turns with tool results) is rendered message by message through the template: an assistant
  message's tokens are actions, a tool's or an environment's (with the template's markers
  around it) observations.

Text decoded with ``skip_special_tokens`` has lost the end-of-sequence token the engine sampled.
Where the dump records the completion's length in tokens (verl's ``response_length``), a row one
token short gets the tokenizer's EOS token back; rows whose length still differs are counted,
and refused above a share of the rows (``max_retokenize_mismatch``). The ids may differ from the
ids the engine sampled (a tokenizer does not always round-trip its own decoded text): the
summary says so, and the output records the tokenizer's sha256.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advcli import installed
from advcli.errors import AdvcliError, DataError, SchemaError, UsageError, file_list
from advcli.io.arrow import list_array
from advcli.io.sources import LogSource, TableSource
from advcli.lazy_imports import np, pa

TOKENIZER_FILE = "tokenizer.json"
TEMPLATE_FILE = "chat_template.jinja"
CONFIG_FILE = "tokenizer_config.json"
PROMPT_COLUMNS = ("prompt_messages", "prompt", "input", "query", "question")
COMPLETION_COLUMNS = ("completion_messages", "completion", "output", "response")
LENGTH_COLUMNS = ("response_length", "completion_length")  # the completion's tokens, as logged
LOGGED_IDS = ("completion_ids", "response_ids")  # the completion's ids as sampled (TRL's
# completion_ids, logged by a reward function's log_extra)
MAX_RETOKENIZE_MISMATCH = 0.05
ACTION_ROLES = ("assistant",)


@dataclass(frozen=True)
class TextTokenizer:
    """A local tokenizer: the ``tokenizers`` object, the sha256 of its ``tokenizer.json``, the
    chat template (None: none) and the special tokens a template reads."""

    path: str  # what --tokenizer named
    tokenizer: Any
    sha256: str
    chat_template: str | None
    special: dict[str, str] = field(default_factory=dict)  # bos_token, eos_token, ...

    @property
    def eos_id(self) -> int | None:
        """The end-of-sequence token's id (None: the tokenizer names none)."""
        eos = self.special.get("eos_token")
        found = self.tokenizer.token_to_id(eos) if eos else None
        return int(found) if found is not None else None

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Each text's ids, without added special tokens."""
        with native_stderr_muted():
            try:
                encoded = self.tokenizer.encode_batch(texts, add_special_tokens=False)
            except library_failures() as exc:
                msg = f"`tokenizer={self.path!r}`: the tokenizers library fails to encode the "
                raise UsageError(msg + f"log's text ({exc})") from None
        return [e.ids for e in encoded]

    def render(self, messages: list[dict[str, Any]], *, generation_prompt: bool) -> str:
        """``messages`` through the chat template (``add_generation_prompt``)."""
        if self.chat_template is None:
            msg = (
                f"`tokenizer={self.path!r}`: the log holds chat messages and the tokenizer has no "
                f"chat template. Hint: give the model folder, with its {TEMPLATE_FILE} or "
                f"{CONFIG_FILE}"
            )
            raise UsageError(msg)
        return compiled(self.chat_template).render(
            messages=messages, add_generation_prompt=generation_prompt, **self.special
        )


def compiled(template: str) -> Any:
    """A chat template compiled as transformers compiles it: a sandboxed, immutable Jinja2
    environment (a template cannot reach Python's objects), ``trim_blocks`` and
    ``lstrip_blocks``, loop controls, ``tojson`` and ``raise_exception``."""
    try:
        from jinja2.exceptions import TemplateError
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        msg = f"a chat template needs jinja2. Hint: {installed.pip_install('text')}"
        raise UsageError(msg) from None

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, **_: Any) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template)


def tokenizer_file(path: str) -> Path:
    """The ``tokenizer.json`` ``path`` names (itself, or in the model folder it names), refused
    in one line where there is none, or where it is no regular file (a FIFO, a device)."""
    hint = f"Hint: give a {TOKENIZER_FILE}, or the model folder that holds one"
    p = Path(path)
    if p.is_dir():
        p = p / TOKENIZER_FILE
        if not p.exists():
            raise UsageError(f"`tokenizer={path!r}`: a folder without a {TOKENIZER_FILE}. {hint}")
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise UsageError(f"`tokenizer={path!r}`: no such file or folder. {hint}") from None
    except OSError as exc:
        raise UsageError(f"`tokenizer={path!r}`: cannot open it ({exc.strerror}). {hint}") from None
    if not stat.S_ISREG(mode):
        msg = f"`tokenizer={path!r}`: {p} is not a regular file (a FIFO, a device or a socket)"
        raise UsageError(f"{msg}. {hint}")
    return p


def library_failures() -> tuple[type[BaseException], ...]:
    """What the tokenizers library raises: exceptions, and the panics of its Rust code
    (pyo3's PanicException derives from BaseException and is not importable by name)."""
    panics = [t for t in BaseException.__subclasses__() if t.__name__ == "PanicException"]
    return (Exception, *panics)


@contextmanager
def native_stderr_muted() -> Iterator[None]:
    """Standard error's file descriptor pointed at /dev/null: a panic in native code prints
    itself there (Rust's panic hook), beside the one line advcli says instead."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def load_tokenizer(path: str | os.PathLike[str]) -> TextTokenizer:
    """The tokenizer ``path`` names: a ``tokenizer.json``, or a folder holding one and its
    chat template (``chat_template.jinja``, else ``tokenizer_config.json``'s)."""
    path = os.fspath(path)
    try:
        from tokenizers import Tokenizer
    except ImportError:
        msg = f"`tokenizer` needs the tokenizers package. Hint: {installed.pip_install('text')}"
        raise UsageError(msg) from None
    file = tokenizer_file(path)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise UsageError(f"`tokenizer={path!r}`: cannot read {file} ({exc.strerror})") from None
    with native_stderr_muted():
        try:
            tokenizer = Tokenizer.from_str(raw.decode("utf-8", "replace"))
        except library_failures() as exc:  # the library raises its own (Rust) exceptions
            msg = f"`tokenizer={path!r}`: not a tokenizer.json the tokenizers library reads"
            raise UsageError(f"{msg} ({exc})") from None
    folder = file.parent
    config = read_config(path, folder / CONFIG_FILE)
    template = config_template(config)
    if (folder / TEMPLATE_FILE).is_file():
        template = (folder / TEMPLATE_FILE).read_text()
    special = {
        key: token
        for key in ("bos_token", "eos_token", "pad_token", "unk_token")
        if (token := token_text(config.get(key))) is not None
    }
    sha = hashlib.sha256(raw).hexdigest()
    return TextTokenizer(path, tokenizer, sha, template, special)


def read_config(path: str, config: Path) -> dict[str, Any]:
    """``tokenizer_config.json`` beside the tokenizer ({} where there is none)."""
    if not config.is_file():
        return {}
    try:
        found = json.loads(config.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"`tokenizer={path!r}`: {config} is not JSON ({exc})") from None
    if not isinstance(found, dict):
        raise UsageError(f"`tokenizer={path!r}`: {config} is not a JSON object")
    return found


def config_template(config: dict[str, Any]) -> str | None:
    """The chat template of ``tokenizer_config.json``: the text, or of a list of named
    templates the one named ``default``."""
    template = config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


def token_text(token: Any) -> str | None:
    """A special token as ``tokenizer_config.json`` writes it: text, or ``{"content": text}``."""
    if isinstance(token, dict):
        token = token.get("content")
    return token if isinstance(token, str) else None


@dataclass(frozen=True)
class Retokenized:
    """What tokenizing a text log did: the tokenizer, the columns read, the rows whose EOS was
    appended (their logged length counts it), and the rows compared with a logged length and
    how many of those still differ (None: the log records no length)."""

    tokenizer: str
    sha256: str
    prompt: str
    completion: str
    rows: int
    eos_appended: int
    length_column: str | None
    compared: int
    differ: int
    logged_ids: str | None = None  # the column of the completion's sampled ids, where logged

    def sentence(self) -> str:
        """What the summary says of the ids."""
        made = f"'{self.prompt}' and '{self.completion}'"
        if self.logged_ids is not None:
            made = f"'{self.prompt}' (the completion's from '{self.logged_ids}', as logged)"
        text = (
            f"token ids made from the text of {made} with {self.tokenizer} (sha256 "
            f"{self.sha256[:12]}…): they may differ from the ids the engine sampled"
        )
        if self.length_column is None:
            return text + "; the log records no completion length to compare, no EOS appended"
        return text + (
            f"; against '{self.length_column}', {self.differ} of {self.compared} rows differ, "
            f"EOS appended to {self.eos_appended} (decoded text drops it, the length counts it)"
        )

    def as_metadata(self) -> dict[str, Any]:
        return {"tokenizer_sha256": self.sha256, "retokenized": self.__dict__}


def text_column(schema: pa.Schema, names: tuple[str, ...]) -> str | None:
    """The first of ``names`` the log has as text or as a list of chat messages."""
    for name in names:
        if name in schema.names and (is_text(schema.field(name).type) or
                                     is_messages(schema.field(name).type)):  # fmt: skip
            return name
    return None


def is_text(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def is_ids(t: pa.DataType) -> bool:
    """A list of integers."""
    is_list = pa.types.is_list(t) or pa.types.is_large_list(t)
    return bool(is_list and pa.types.is_integer(t.value_type))


def is_messages(t: pa.DataType) -> bool:
    """A list of ``{role, content}`` structs."""
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return False
    inner = t.value_type
    return bool(pa.types.is_struct(inner) and {"role", "content"} <= {f.name for f in inner})


def text_columns(source: LogSource) -> tuple[str, str] | None:
    """The log's prompt and completion columns (text or chat messages); None without both."""
    prompt = text_column(source.schema, PROMPT_COLUMNS)
    completion = text_column(source.schema, COMPLETION_COLUMNS)
    return (prompt, completion) if prompt and completion else None


def retokenized(
    source: LogSource, tk: TextTokenizer, *, max_mismatch: float = MAX_RETOKENIZE_MISMATCH
) -> tuple[LogSource, Retokenized]:
    """The log with ``input_ids`` and ``action_mask`` columns made from its text (held in
    memory: a text dump is read into memory anyway), and what was done."""
    found = text_columns(source)
    files = file_list(source.sources.files)
    if found is None:
        msg = (
            f"{files}: `tokenizer` makes token ids from a prompt and a completion, and the log "
            f"has no text column for them (prompt: {', '.join(PROMPT_COLUMNS)}; completion: "
            f"{', '.join(COMPLETION_COLUMNS)}). Hint: leave `tokenizer` out"
        )
        raise SchemaError(msg)
    prompt, completion = found
    schema = source.schema
    length_col = next((c for c in LENGTH_COLUMNS if c in schema.names), None)
    ids_col = next((c for c in LOGGED_IDS if c in schema.names and is_ids(schema.field(c).type)),
                  None)  # fmt: skip
    table = source.columns(list(schema.names))
    rows = tokenized_rows(table, tk, source, prompt, completion, ids_col)
    ids, action, lengths = rows
    eos_appended, compared, differ = 0, 0, 0
    if length_col is not None:
        logged = table.column(length_col).to_numpy(zero_copy_only=False).astype(np.float64)
        ids, action, lengths, eos_appended = with_eos(ids, action, lengths, logged, tk.eos_id)
        known = np.isfinite(logged)
        compared = int(known.sum())
        differ = int((lengths[known] != logged[known]).sum())
        if compared and differ / compared > max_mismatch:
            row = int(np.flatnonzero(known & (lengths != logged))[0])
            msg = (
                f"{source.sources.at(row, length_col)}: {int(lengths[row])} completion tokens "
                f"made from the text, {int(logged[row])} logged; {differ} of {compared} rows "
                f"differ, above `max_retokenize_mismatch={max_mismatch:g}`. Hint: give the "
                "tokenizer the run used, or raise `max_retokenize_mismatch`"
            )
            raise DataError(msg)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in ids], out=offsets[1:])
    flat_ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    flat_mask = np.concatenate(action) if action else np.zeros(0, np.int8)
    for name in ("input_ids", "action_mask"):
        if name in table.column_names:
            table = table.drop_columns([name])
    table = table.append_column("input_ids", list_array(flat_ids.astype(np.int32), offsets))
    table = table.append_column("action_mask", list_array(flat_mask.astype(np.int8), offsets))
    done = Retokenized(tk.path, tk.sha256, prompt, completion, len(lengths), eos_appended,
                       length_col, compared, differ, ids_col)  # fmt: skip
    return TableSource(table, source.sources), done


def with_eos(
    ids: list[np.ndarray],
    action: list[np.ndarray],
    lengths: np.ndarray,
    logged: np.ndarray,
    eos: int | None,
) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray, int]:
    """Each row one completion token short of its logged length gets the EOS token back (the
    decoded text dropped it), as an action token."""
    if eos is None:
        return ids, action, lengths, 0
    short = np.flatnonzero(np.isfinite(logged) & (lengths + 1 == logged))
    for row in short.tolist():
        ids[row] = np.append(ids[row], eos)
        action[row] = np.append(action[row], 1)
    lengths = lengths.copy()
    lengths[short] += 1
    return ids, action, lengths, len(short)


def tokenized_rows(
    table: pa.Table,
    tk: TextTokenizer,
    source: LogSource,
    prompt: str,
    completion: str,
    logged: str | None = None,
) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    """Per row: its ids, its action mask and its completion's length in tokens. The texts of
    every row are tokenized in one call (the library's threads); ``logged``: a column of the
    completion's ids as sampled (a row that has them takes them instead of its text's)."""
    prompts = table.column(prompt).to_pylist()
    completions = table.column(completion).to_pylist()
    sampled = table.column(logged).to_pylist() if logged else [None] * len(prompts)
    pieces: list[str] = []
    owner: list[int] = []
    acting: list[bool] = []
    for row, (p, c, given) in enumerate(zip(prompts, completions, sampled, strict=True)):
        for name, value in ((prompt, p), (completion, c)):
            if value is None:
                raise DataError(f"{source.sources.at(row, name)}: null, expected text")
        rendered = prompt_text(tk, p, source, row, prompt)
        pieces.append(rendered)
        owner.append(row)
        acting.append(False)
        if given is not None:
            continue
        for text, is_action in completion_pieces(tk, p, c, rendered, source, row, completion):
            pieces.append(text)
            owner.append(row)
            acting.append(is_action)
    encoded = tk.encode(pieces)
    n = len(prompts)
    ids: list[list[np.ndarray]] = [[] for _ in range(n)]
    masks: list[list[np.ndarray]] = [[] for _ in range(n)]
    completion_tokens = np.zeros(n, dtype=np.int64)
    first = np.r_[True, np.diff(owner) != 0] if owner else np.zeros(0, bool)
    for i, (row, is_action, piece) in enumerate(zip(owner, acting, encoded, strict=True)):
        part = np.asarray(piece, dtype=np.int64)
        ids[row].append(part)
        masks[row].append(np.full(len(part), int(is_action), dtype=np.int8))
        if not first[i]:
            completion_tokens[row] += len(part)
    for row, given in enumerate(sampled):
        if given is not None:
            ids[row].append(np.asarray(given, dtype=np.int64))
            masks[row].append(np.ones(len(given), dtype=np.int8))
            completion_tokens[row] = len(given)
    return ([np.concatenate(x) for x in ids], [np.concatenate(m) for m in masks],
            completion_tokens)  # fmt: skip


def prompt_text(tk: TextTokenizer, value: Any, source: LogSource, row: int, column: str) -> str:
    """The prompt as generation saw it: messages through the chat template, text as it is."""
    if isinstance(value, str):
        return value
    return rendered(tk, messages_of(value, source, row, column), True, source, row, column)


def completion_pieces(
    tk: TextTokenizer,
    prompt: Any,
    value: Any,
    prompt_rendered: str,
    source: LogSource,
    row: int,
    column: str,
) -> list[tuple[str, bool]]:
    """The completion's texts, each an action or not: a text is one action; of messages, an
    assistant message's content alone where it is the only one (TRL decodes the sampled tokens
    into it), else each message as the template renders it after the ones before (the last
    one without the template's closing EOS, which decoded text does not hold)."""
    if isinstance(value, str):
        return [(value, True)]
    messages = messages_of(value, source, row, column)
    if len(messages) == 1 and messages[0]["role"] in ACTION_ROLES and is_plain(messages[0]):
        return [(str(messages[0].get("content") or ""), True)]
    history = [] if isinstance(prompt, str) else messages_of(prompt, source, row, column)
    pieces: list[tuple[str, bool]] = []
    before = prompt_rendered
    for k, message in enumerate(messages):
        is_action = message["role"] in ACTION_ROLES
        last = k == len(messages) - 1
        if is_action and last and is_plain(message):
            pieces.append((str(message.get("content") or ""), True))
            break
        upto = history + messages[: k + 1]
        # after an observation the template opens the next assistant turn, which is not sampled
        text = rendered(tk, upto, not is_action and not last, source, row, column)
        if not text.startswith(before):
            msg = (
                f"{source.sources.at(row, column)}: the chat template renders message {k + 1} "
                "of the completion so that the messages before it change, so its tokens cannot "
                "be told apart. Hint: give the tokenizer the run used"
            )
            raise DataError(msg)
        piece = text[len(before) :]
        if is_action and last:  # decoded text has no EOS: the template's closing one goes
            piece = without_eos(piece, tk.special.get("eos_token"))
        pieces.append((piece, is_action))
        before = text
    return pieces


def is_plain(message: dict[str, Any]) -> bool:
    """A message that is its content alone (no tool calls, which only the template spells)."""
    return not message.get("tool_calls")


def without_eos(text: str, eos: str | None) -> str:
    """``text`` without the EOS token the template closes a message with (and what follows)."""
    stripped = text.rstrip()
    return stripped[: -len(eos)] if eos and stripped.endswith(eos) else text


def messages_of(value: Any, source: LogSource, row: int, column: str) -> list[dict[str, Any]]:
    """A row's chat messages, each a ``{role, content}`` dict."""
    if not isinstance(value, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) for m in value
    ):
        raise DataError(f"{source.sources.at(row, column)}: expected text or chat messages")
    return [{k: v for k, v in m.items() if v is not None} for m in value]


def rendered(
    tk: TextTokenizer,
    messages: list[dict[str, Any]],
    generation_prompt: bool,
    source: LogSource,
    row: int,
    column: str,
) -> str:
    """The messages through the template, a failing template named at its row."""
    try:
        return tk.render(messages, generation_prompt=generation_prompt)
    except AdvcliError:
        raise
    except Exception as exc:  # jinja2's errors, and what a template's own code raises
        msg = f"{source.sources.at(row, column)}: the chat template of `tokenizer={tk.path!r}` "
        raise DataError(msg + f"fails on it ({exc})") from None
