"""The README's pictures of ``advcli report``: ``python -m tools.screenshot``.

Writes the report of ``sample_data/rollouts.parquet`` (grpo), opens it in headless Chromium,
opens the group ``p-tool`` and its first rollout, and saves the page as ``docs/report.png``;
then the report of two steps of a made-up run (``--steps 10,200``: 60 questions, 8 rollouts
each, more of them right at step 200) and saves its Compare section as
``docs/report-compare.png``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

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
        log = two_steps(Path(work) / "steps.jsonl")
        subprocess.run(
            [sys.executable, "-m", "advcli", "report", str(log), "--steps", "10,200",
             "--method", "grpo", "--out", str(page_path), "--quiet", "--force"],
            check=True, cwd=ROOT,
        )  # fmt: skip
        with browser.browser_page(width=1100) as (page, errors):
            browser.open_report(page, str(page_path))
            out = ROOT / "docs" / "report-compare.png"
            page.locator("#compare").screenshot(path=str(out))
            if errors:
                sys.exit(f"the page logged errors: {errors}")
        print(f"wrote {out.relative_to(ROOT)}")


def two_steps(path: Path) -> Path:
    """A run's rollouts at steps 10 and 200: 60 questions of 8 rollouts, each question's
    chance of a right answer higher at step 200."""
    rng = np.random.default_rng(7)
    chance = rng.choice([0.0, 0.1, 0.3, 0.5, 0.8, 1.0], size=60)
    later = np.clip(chance + rng.choice([0.0, 0.2, 0.4], size=60), 0, 1)
    lines = []
    for step, p in ((10, chance), (200, later)):
        for q in range(60):
            for _ in range(8):
                answer = int(rng.integers(6, 40))
                lines.append({"prompt_id": f"{step}-{q}", "step": step,
                              "question": f"What is {q} + {q * 7 % 13}? Think step by step.",
                              "input_ids": [q + 1, 1000 + q, *range(2000, 2000 + answer)],
                              "action_mask": [0, 0] + [1] * answer,
                              "reward": float(rng.random() < p[q])})  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


if __name__ == "__main__":
    main()
