"""Docs that cannot drift from the code, and a package whose imports point one way, in no circle."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer

from tests.conftest import ROOT
from tools import docs, site_checks

PACKAGE = ROOT / "advcli"

# Layers, lowest first: a module imports from its own layer's component or from lower layers.
LAYERS = [
    ("advcli.lazy_imports", "advcli.run"),  # advcli.run: the package, a docstring
    (
        "advcli.errors",
        "advcli.core",
        "advcli._malloc",
        "advcli.installed",
        "advcli._version",
        "advcli.results",
        "advcli.progress",
    ),
    ("advcli.versions",),
    ("advcli.io", "advcli.params"),
    ("advcli.methods", "advcli.critic", "advcli.presets"),
    ("advcli.run.correcting",),
    ("advcli.run.logs",),
    ("advcli.run.prompts",),
    ("advcli.run.reproduce",),
    ("advcli.run.engine", "advcli.run.accounting", "advcli.run.settling"),
    ("advcli.run.health", "advcli.run.summary"),
    ("advcli.on_ray",),
    ("advcli.run.jobs",),
    ("advcli.shards", "advcli.reports"),
    ("advcli.commands",),
    ("advcli.api", "advcli.render", "advcli.torch"),
    ("advcli.cli",),
    ("advcli.__main__",),
]


def component(module: str) -> tuple[int, str]:
    """The layer and component of ``module``: the longest component name it falls under
    (``advcli.run.jobs`` is the jobs layer, the package ``advcli.run`` its own)."""
    found = [
        (len(name), rank, name)
        for rank, names in enumerate(LAYERS)
        for name in names
        if module == name or module.startswith(name + ".")
    ]
    if not found:
        raise AssertionError(f"{module} is in no layer")
    _, rank, name = max(found)
    return rank, name


def imports(path, *, for_types_too: bool = False) -> set[str]:
    """The advcli modules a file imports at run time, in functions too (not under ``if
    TYPE_CHECKING`` unless ``for_types_too``)."""
    tree = ast.parse(path.read_text())
    skip = (
        set()
        if for_types_too
        else {
            id(n)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)
        }
    )
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("advcli"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(
                    full
                    if (PACKAGE.parent / (full.replace(".", "/") + ".py")).exists()
                    or (PACKAGE.parent / full.replace(".", "/")).is_dir()
                    else node.module
                )
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("advcli")}
    return found - {"advcli"}


def test_generated_docs_are_current():
    stale = docs.stale()
    if typer.__version__ != docs.help_typer():  # the floors (make test-min): older typer and
        # rich lay out help and tables their own way, so the commands' shown outputs differ too
        stale = [path for path in stale if path.name != "cli.md" and not docs.shows_runs(path)]
    assert stale == [], "run make docs"


def modules() -> Iterator[tuple[str, Path]]:
    """Every module of the package and its file, but the lazy public API (``advcli``)."""
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if module != "advcli.__init__":
            yield module.removesuffix(".__init__"), path


def test_imports_point_one_way():
    for module, path in modules():
        rank, name = component(module)
        for imported in imports(path):
            other_rank, other = component(imported)
            assert other_rank < rank or other == name, f"{module} imports {imported}"


def test_no_import_circle() -> None:
    """No module imports one that imports it back, by any path: inside a layer the ladder
    allows both ways. Every import counts, those in functions (none here is there to break a
    circle: the lazy imports are of numpy, polars and pyarrow) and those under ``if
    TYPE_CHECKING`` (a circle only the type checker sees still ties two modules together)."""
    graph = {module: imports(path, for_types_too=True) for module, path in modules()}
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            raise AssertionError(" -> ".join([*path[path.index(module) :], module]))
        if module in done or module not in graph:
            return
        for imported in sorted(graph[module]):
            visit(imported, [*path, module])
        done.add(module)

    for module in graph:
        visit(module, [])


def test_the_architecture_page_names_every_module():
    layout = ROOT.joinpath("docs", "architecture.md").read_text().split("# Layout", 1)[1]
    layout = layout.split("\n## ")[0]
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name in ("__init__.py", "__main__.py"):
            continue
        rel = path.relative_to(PACKAGE)
        named = path.name if len(rel.parts) > 1 else f"advcli/{path.name}"
        assert re.search(rf"`{re.escape(named)}`", layout), f"Layout misses {rel}"
    for folder in (p for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"):
        assert f"`advcli/{folder.name}/`" in layout, f"Layout misses {folder.name}/"


def test_the_shards_page_loads_what_its_shard_command_writes(tmp_path, monkeypatch):
    """The shards page's `datasets` snippet, run on the folder its `shard` command writes."""
    import shlex

    from tests.conftest import SAMPLE, run

    pytest.importorskip("datasets")
    readme = (ROOT / "docs" / "shards.md").read_text()
    command = re.search(r"^advcli shard logs/ (.+?) && advcli verify", readme, re.S | re.M)
    assert command is not None
    args = shlex.split(command.group(1).replace("\\\n", " "))
    assert run("shard", str(SAMPLE / "rollouts.parquet"), *args, cwd=tmp_path).returncode == 0
    snippet = re.search(r"```python\n(from datasets import load_dataset\n.*?)```", readme, re.S)
    assert snippet is not None
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    seen: dict = {}
    exec(snippet.group(1), seen)  # the snippet as a user runs it
    assert len(seen["ids"]) == len(seen["adv"]) == len(seen["mask"]) > 0


@pytest.mark.parametrize(("page", "least"), [("README.md", 5), ("docs/python.md", 10)])
def test_the_python_examples_run_as_shown(tmp_path, monkeypatch, page, least):
    """Every ``>>>`` example of the page, run as doctests in a folder holding sample_data/."""
    import doctest

    (tmp_path / "sample_data").symlink_to(ROOT / "sample_data")
    monkeypatch.chdir(tmp_path)
    text = (ROOT / page).read_text()
    test = doctest.DocTestParser().get_doctest(text, {}, page, page, 0)
    assert len(test.examples) >= least
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def build_site(project: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of the project whose ``mkdocs.yml`` is in ``project``."""
    pytest.importorskip("mkdocs")
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=project, capture_output=True, text=True, check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip


def test_the_site_builds_strict(tmp_path):
    """``mkdocs build --strict`` with the checks of tools/site_checks.py: a broken link (raw
    HTML's and README's as GitHub reads it too), a malformed table or a page left out of the
    nav fails."""
    done = build_site(ROOT, tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "index.html").exists() and (tmp_path / "methods" / "index.html").exists()


def test_a_broken_link_or_a_malformed_table_fails_the_site_build(tmp_path):
    """What strict mode alone lets through: links in raw HTML, a row split by a ``|``."""
    docs_dir = tmp_path / "docs"
    docs_dir.mkdir()
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: t\nstrict: true\nmarkdown_extensions: [tables]\n"
        f"hooks: [{ROOT / 'tools' / 'site_checks.py'}]\nnav: [index.md, other.md]\n"
    )
    (docs_dir / "other.md").write_text("# Other\n\n## Real one\n")
    good = (
        '# Home\n\n<a href="other/#real-one">there</a> <img src="other/">\n\n'
        f"| method | advantage |\n|---|---|\n{docs.table_row('opo', 'R − Σ|o_j|·R_j')}\n"
    )
    (docs_dir / "index.md").write_text(good)
    built = build_site(tmp_path, tmp_path / "site")
    assert built.returncode == 0, built.stderr

    bad = (
        '# Home\n\n<a href="other/#nowhere">there</a> <img src="gone.png">\n\n'
        "| method | advantage |\n|---|---|\n| opo | R − Σ|o_j|·R_j |\n"
    )
    (docs_dir / "index.md").write_text(bad)
    failed = build_site(tmp_path, tmp_path / "site")
    assert failed.returncode == 1
    warnings = [line for line in failed.stderr.splitlines() if line.startswith("WARNING")]
    assert [w.split("-  ", 1)[1] for w in warnings] == [
        "index.md:7: a table row of 4 cells under a header of 2 (a | in a cell parts it: "
        "escape it as \\|, or reword one in `code`)",
        "index.md: a link to 'other/#nowhere': no such anchor",
        "index.md: a link to 'gone.png': the site has no such file",
    ]


def test_every_page_has_well_formed_tables_and_links_that_hold():
    """What the site build's hook checks in the Markdown, without MkDocs (make test-min)."""
    problems = [
        p
        for page in docs.pages()
        for p in site_checks.malformed_tables(page.read_text(), page.name)
    ]
    for page in site_checks.markdown_outside_docs(ROOT, ROOT / "docs"):
        problems += site_checks.broken_repo_links(page, ROOT)
    assert problems == []


def test_tables_count_every_unescaped_bar_as_github_does():
    rows = "| a | b |\n|:---|---:|\n| `x | y` | z |\n| x \\| y | z |\n\n| one |\n"
    assert site_checks.malformed_tables(rows, "p.md") == [
        "p.md:3: a table row of 3 cells under a header of 2 (a | in a cell parts it: "
        "escape it as \\|, or reword one in `code`)"
    ]
    fenced = "```\n| a | b |\n|---|---|\n| 1 | 2 | 3 |\n```\n"
    assert site_checks.malformed_tables(fenced, "p.md") == []


def test_links_outside_the_site_are_read_as_github_reads_them(tmp_path):
    """README's ``docs/X`` links are ``X`` in the site's copy: they are checked in place."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# Page\n\n## Atomic and deterministic\n")
    readme = tmp_path / "README.md"
    readme.write_text(
        "[ok](docs/page.md#atomic-and-deterministic) [gone](docs/missing.md)\n"
        '[no heading](docs/page.md#nowhere) <img src="page.md"> `[code](not/a/link.md)`\n'
        "[web](https://example.com/x.md)\n"
    )
    assert site_checks.broken_repo_links(readme, tmp_path) == [
        "README.md:1: a link to 'docs/missing.md': no such file",
        "README.md:2: a link to 'docs/page.md#nowhere': no such heading",
        "README.md:2: a link to 'page.md': no such file",
    ]
