"""What ``advcli report`` costs on a large log: ``python -m bench.report [--rollouts 1e6]``.

Writes a log of ``--rollouts`` rollouts (groups of 8 over 100 steps, 24 tokens each, a third
of the groups all-correct or all-wrong), runs ``advcli report --method grpo`` on it under
``/usr/bin/time -v``, then opens the page in headless Chromium ``--repeat`` times and reads the
time from the start of the navigation to the charts drawn. Targets: a page under 10 MB, drawn
in under 2 s. ``python -m bench`` runs it too.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.measure import measured

GROUP, STEPS, PROMPT, RESPONSE = 8, 100, 8, 16


def make_log(path: Path, rollouts: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    n = rollouts // GROUP * GROUP
    group = np.arange(n) // GROUP
    p_correct = rng.choice([0.0, 1.0, 0.3, 0.5, 0.7], size=n // GROUP)[group]
    reward = (rng.random(n) < p_correct).astype(np.float64)
    length = PROMPT + RESPONSE
    ids = rng.integers(1, 50_000, n * length, dtype=np.int64)
    mask = np.tile(np.r_[np.zeros(PROMPT, np.int8), np.ones(RESPONSE, np.int8)], n)
    offsets = pa.array(np.arange(n + 1, dtype=np.int32) * length)
    table = pa.table({
        "prompt_id": pa.array(group.astype(str)),
        "step": pa.array(group * STEPS // (n // GROUP)),
        "input_ids": pa.ListArray.from_arrays(offsets, pa.array(ids)),
        "action_mask": pa.ListArray.from_arrays(offsets, pa.array(mask)),
        "reward": pa.array(reward),
    })  # fmt: skip
    pq.write_table(table, path)


def run(work: Path, rollouts: int, repeat: int) -> list[str]:
    """The bench lines of the report."""
    from tools import browser

    work.mkdir(parents=True, exist_ok=True)
    log = work / f"report-log-{rollouts:.0f}.parquet"
    if not log.exists():
        print(f"generating {log} …", file=sys.stderr)
        make_log(log, rollouts)
    out = work / "report.html"
    cmd = [sys.executable, "-m", "advcli", "report", str(log), "--method", "grpo",
           "--out", str(out), "--force", "-q"]  # fmt: skip
    runs = [measured(cmd) for _ in range(repeat)]
    seconds = statistics.median(s for s, _ in runs)
    peak = max(p for _, p in runs)
    size = out.stat().st_size / 1e6
    line = (
        f"report ({rollouts:,.0f} rollouts, grpo): {seconds:.2f} s, {peak:.0f} MB peak; "
        f"page {size:.1f} MB"
    )
    if (why := browser.missing()) is not None:
        return [line + f"; not opened: {why}"]
    drawn = []
    for _ in range(repeat):
        with browser.browser_page() as (page, errors):
            drawn.append(browser.open_report(page, str(out)) / 1000)
            assert not errors, errors
    return [line + f"; charts drawn {statistics.median(drawn):.2f} s after opening (Chromium)"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=float, default=1e6)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--workdir", default=str(Path(__file__).resolve().parent.parent / "bench_out")
    )
    args = parser.parse_args()
    print("\n".join(run(Path(args.workdir), int(args.rollouts), args.repeat)))


if __name__ == "__main__":
    main()
