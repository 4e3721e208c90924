"""Headless Chromium for the report's tests, its bench line and its screenshot: Debian's
``chromium``, driven by Playwright (the Python package; it downloads no browser of its own)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

# What a sandboxed machine with no network needs: no sandbox (CI runs as root), no GPU, and
# none of Chromium's background connections, which a closed network refuses one by one.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str | None:
    """The Chromium executable, if the machine has one."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if found := shutil.which(name):
            return found
    return None


def missing() -> str | None:
    """Why the browser tests cannot run here (None: they can)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[dev]')"
    if chromium() is None:
        return "no Chromium on this machine (Debian: apt-get install chromium; .ci/run does)"
    return None


@contextlib.contextmanager
def browser_page(width: int = 1300) -> Iterator[tuple[Any, list[str]]]:
    """A fresh page in headless Chromium (``width`` pixels wide), and the list its console
    errors go to."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as profile, sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            profile, executable_path=chromium(), headless=True, args=FLAGS,
            viewport={"width": width, "height": 900},
        )  # fmt: skip
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        try:
            yield page, errors
        finally:
            context.close()


def open_report(page: Any, path: str) -> float:
    """Open a report page and wait for its charts; returns the milliseconds from the start of
    the navigation to the charts drawn (the page's own clock)."""
    from pathlib import Path

    page.goto(Path(path).resolve().as_uri())
    page.wait_for_function("document.body.dataset.ready === 'yes'", timeout=60_000)
    return float(page.evaluate("window.advcliChartsDrawn"))
