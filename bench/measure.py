"""Running one benchmark step as its own process: its wall time and peak resident memory (what
every end-to-end benchmark reports)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time


def measured(args: list[str]) -> tuple[float, float]:
    """Run a command; return (seconds, peak resident MB)."""
    time_v = shutil.which("time") or "/usr/bin/time"
    use_time = os.path.exists(time_v)
    cmd = [time_v, "-v", *args] if use_time else args
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"benchmark step failed: {' '.join(args)}\n{proc.stderr[-2000:]}")
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    return seconds, int(peak.group(1)) / 1024 if peak else float("nan")
