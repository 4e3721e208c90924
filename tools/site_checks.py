"""Checks of the docs site that ``mkdocs build --strict`` does not make, run by it as a hook
(``mkdocs.yml``: ``hooks``), so that ``make docs`` and the suite's site build fail on them:

- a malformed Markdown table in any page (README's copy included): a row whose cells are more
  or fewer than its header's, as an unescaped ``|`` inside a cell makes;
- a broken link or anchor in the built site, raw HTML's ``<a href>`` and ``<img src>`` included
  (mkdocs checks Markdown links only);
- a broken relative link in the Markdown files outside ``docs/`` as GitHub shows them (README's
  ``docs/X`` links are ``X`` in the site's copy, so the site cannot tell whether they hold).

Each problem is a warning on mkdocs' logger, which strict mode counts. The module takes nothing
outside the standard library: mkdocs loads it by its path.
"""

from __future__ import annotations

import logging
import re
import subprocess
from collections.abc import Iterator
from html.parser import HTMLParser
from itertools import pairwise
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

log = logging.getLogger("mkdocs.hooks.site_checks")

_FENCE = re.compile(r"^\s*(```|~~~)")
_DELIMITER = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_MD_LINK = re.compile(r"\]\(<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\)")
_HTML_LINK = re.compile(r"\b(?:href|src)=\"([^\"]+)\"")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")


def _outside_code(text: str) -> Iterator[tuple[int, str]]:
    """The lines of a Markdown page that are not in fenced code, with their 1-based numbers."""
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            yield number, line


def cells(row: str) -> int:
    """How many cells a table row has: an unescaped ``|`` parts two (in a code span too, as
    GitHub reads it), the row's outer pipes aside."""
    inner = row.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return len(re.split(r"(?<!\\)\|", inner))


def malformed_tables(text: str, name: str) -> list[str]:
    """``NAME:LINE: ...`` for each table row whose cells are not as many as its header's."""
    problems = []
    lines = list(_outside_code(text))
    header: int | None = None  # the cells of the table the lines are in, if any
    for (number, line), (_, following) in pairwise([*lines, (0, "")]):
        if header is not None and "|" in line and line.strip():
            if _DELIMITER.match(line):
                continue
            if cells(line) != header:
                problems.append(
                    f"{name}:{number}: a table row of {cells(line)} cells under a header of "
                    f"{header} (a | in a cell parts it: escape it as \\|, or reword one in `code`)"
                )
            continue
        is_header = "|" in line and "|" in following and _DELIMITER.match(following)
        header = cells(line) if is_header else None
    return problems


class _Page(HTMLParser):
    """A built page's links (``href`` and ``src``) and the anchors it defines (``id``)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.links: list[str] = []
        self.anchors: set[str] = set()
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for key, value in attrs:
            if value is None:
                continue
            if key == "id" or (tag == "a" and key == "name"):
                self.anchors.add(value)
            elif key in ("href", "src"):
                self.links.append(value)


def _source(page: Path, site: Path) -> str:
    """The Markdown page a built page comes from (``methods/index.html``: ``methods.md``)."""
    built = page.relative_to(site).as_posix()
    return "index.md" if built == "index.html" else built.removesuffix("/index.html") + ".md"


def broken_site_links(site: Path) -> list[str]:
    """``PAGE: ...`` for each link in the built site to a file it does not hold or an anchor
    its target does not define. 404.html is left out: its links are the site root's."""
    site = site.resolve()
    parsed: dict[Path, _Page] = {}

    def read(path: Path) -> _Page:
        if path not in parsed:
            parsed[path] = _Page(path.read_text(encoding="utf-8", errors="replace"))
        return parsed[path]

    problems = []
    for page in sorted(site.rglob("*.html")):
        if page.name == "404.html":
            continue
        where = _source(page, site)
        for link in read(page).links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc:
                continue  # another site's (or a data: URL): not ours to check
            path = unquote(parts.path)
            target = site / path.lstrip("/") if path.startswith("/") else page.parent / path
            target = target.resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file() or not target.is_relative_to(site):
                problems.append(f"{where}: a link to {link!r}: the site has no such file")
            elif target.suffix == ".html" and parts.fragment not in {"", *read(target).anchors}:
                problems.append(f"{where}: a link to {link!r}: no such anchor")
    return problems


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation but ``-`` and ``_`` dropped,
    spaces as ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a Markdown page's headings as GitHub makes them (repeats get -1, -2 …)."""
    found: set[str] = set()
    for _, line in _outside_code(text):
        heading = _HEADING.match(line)
        if heading:
            base = github_anchor(heading.group(1))
            anchor, repeat = base, 0
            while anchor in found:
                repeat += 1
                anchor = f"{base}-{repeat}"
            found.add(anchor)
    return found


def _has_heading(path: Path, anchor: str) -> bool:
    """Whether a link's anchor holds: none given, a file that is not Markdown, or a heading's."""
    return not anchor or path.suffix != ".md" or anchor in anchors(path.read_text(encoding="utf-8"))


def broken_repo_links(path: Path, root: Path) -> list[str]:
    """``FILE:LINE: ...`` for each relative link of a Markdown file, read as GitHub reads it
    (from the file's folder), to a file the repository does not hold or a heading it has not."""
    text = path.read_text(encoding="utf-8")
    name = path.relative_to(root).as_posix()
    problems = []
    for number, line in _outside_code(text):
        bare = _CODE_SPAN.sub("", line)
        for link in [*_MD_LINK.findall(bare), *_HTML_LINK.findall(bare)]:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith("/"):
                continue
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if not target.exists() or not target.is_relative_to(root):
                problems.append(f"{name}:{number}: a link to {link!r}: no such file")
            elif not _has_heading(target, parts.fragment):
                problems.append(f"{name}:{number}: a link to {link!r}: no such heading")
    return problems


def markdown_outside_docs(root: Path, docs: Path) -> list[Path]:
    """The repository's Markdown files that GitHub shows and the site does not build."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "*.md"], cwd=root, capture_output=True, text=True, check=False
    ).stdout
    files = [root / name for name in listed.split("\0") if name]
    return [path for path in files if path.exists() and not path.is_relative_to(docs)]


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """mkdocs hook: warn of each malformed table of a page."""
    for problem in malformed_tables(markdown, page.file.src_uri):
        log.warning(problem)
    return markdown


def on_post_build(config: Any, **_: Any) -> None:
    """mkdocs hook: warn of each broken link in the built site and in the Markdown outside it."""
    docs = Path(config["docs_dir"]).resolve()
    root = Path(config["config_file_path"]).resolve().parent
    problems = broken_site_links(Path(config["site_dir"]))
    for path in markdown_outside_docs(root, docs):
        problems += broken_repo_links(path, root)
        problems += malformed_tables(path.read_text(encoding="utf-8"), str(path.relative_to(root)))
    for problem in problems:
        log.warning(problem)
