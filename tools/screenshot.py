"""The README's picture of ``advcli report``: ``python -m tools.screenshot``.

Writes the report of ``sample_data/rollouts.parquet`` (grpo), opens it in headless Chromium,
opens the group ``p-tool`` and its first rollout, and saves the page as ``docs/report.png``.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from tools import browser

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    if (why := browser.missing()) is not None:
        sys.exit(f"cannot take the screenshot: {why}")
    with tempfile.TemporaryDirectory() as work:
        page_path = Path(work) / "report.html"
        subprocess.run(
            [sys.executable, "-m", "advcli", "report", "sample_data/rollouts.parquet",
             "--method", "grpo", "--out", str(page_path), "--quiet"],
            check=True, cwd=ROOT,
        )  # fmt: skip
        with browser.browser_page(width=1100) as (page, errors):
            browser.open_report(page, str(page_path))
            page.locator("#group-table tbody tr", has_text="p-tool").click()
            page.locator("#rollout-table tbody tr").nth(1).click()
            out = ROOT / "docs" / "report.png"
            page.screenshot(path=str(out), full_page=True)
            if errors:
                sys.exit(f"the page logged errors: {errors}")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
