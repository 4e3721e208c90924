"""What reading a framework's dump costs: ``annotate --from NAME`` on a dump against
``annotate`` on the same rollouts written in advcli's own JSONL, same method, same run.

- verl V1 (decoded text, the common case): ``{step}.jsonl`` with input, output, gts, score,
  step, uid; advcli's own: prompt_id, rollout_id, reward and the same texts;
- NeMo-RL (tokens): ``train_data_step{N}.jsonl``, every value in a one-element list, token lists
  padded to each step's longest row; advcli's own: input_ids, action_mask, reward and the same
  per-token log-probabilities, unpadded.

``python -m bench.presets [--rollouts 20000]``; ``python -m bench`` runs it too.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import orjson

STEP_ROWS = 1024  # rollouts per step (one dump file each)
GROUP = 8


def write_lines(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))


def make(work: Path, n: int, seed: int = 0) -> dict[str, tuple[Path, list[str]]]:
    """The dumps and advcli's own logs of the same ``n`` rollouts; returns the annotate
    arguments of each."""
    rng = np.random.default_rng(seed)
    verl, nemo = work / "verl", work / "nemo-rl"
    own_text, own_tokens = [], []
    for step in range(n // STEP_ROWS):
        v1, wrapped, lens = [], [], rng.integers(200, 2000, STEP_ROWS)
        width = int(lens.max())
        prompts = rng.integers(1, 150_000, (STEP_ROWS // GROUP, 100)).tolist()
        for i in range(STEP_ROWS):
            g = i // GROUP
            uuid = f"{step:08d}-{g:04d}-4000-8000-000000000000"
            text = "x" * int(lens[i])
            reward = float(rng.integers(0, 2))
            v1.append({"input": "q" * 400, "output": text, "gts": "1", "score": reward,
                       "step": step, "uid": f"{uuid}_{i % GROUP}_0"})  # fmt: skip
            own_text.append({"prompt_id": uuid, "rollout_id": f"{uuid}_{i % GROUP}",
                             "input": "q" * 400, "output": text, "reward": reward})  # fmt: skip
            prompt = 100  # the group's prompt tokens, then the response's
            ids = prompts[g] + rng.integers(1, 150_000, int(lens[i]) - prompt).tolist()
            mask = [0] * prompt + [1] * (len(ids) - prompt)
            logp = [0.0] * prompt + [-0.5] * (len(ids) - prompt)
            pad = width - len(ids)
            wrapped.append({"content": [["q", text[:20]]], "rewards": [reward],
                            "input_lengths": [len(ids)], "token_ids": [ids + [0] * pad],
                            "token_loss_mask": [mask + [0] * pad], "sample_loss_mask": [1.0],
                            "generation_logprobs": [logp + [0.0] * pad], "idx": i})  # fmt: skip
            own_tokens.append({"prompt_id": f"{step}:{g}", "rollout_id": f"{step}:{i}",
                               "input_ids": ids, "action_mask": mask, "reward": reward,
                               "generation_logprobs": logp})  # fmt: skip
        write_lines(verl / f"{step}.jsonl", v1)
        write_lines(nemo / f"train_data_step{step}.jsonl", wrapped)
    write_lines(work / "own-text.jsonl", own_text)
    write_lines(work / "own-tokens.jsonl", own_tokens)
    return {
        "verl V1 --from verl": (verl, ["--from", "verl"]),
        "verl V1, advcli's own JSONL": (work / "own-text.jsonl", []),
        "NeMo-RL --from nemo-rl": (nemo, ["--from", "nemo-rl"]),
        "NeMo-RL, advcli's own JSONL": (work / "own-tokens.jsonl", []),
    }


def timed(args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(args, check=True, capture_output=True)
    return time.perf_counter() - started


def run(work: Path, rollouts: int, repeat: int) -> list[str]:
    logs = make(work, rollouts)
    times: dict[str, list[float]] = {name: [] for name in logs}
    for _ in range(repeat):  # taking turns
        for name, (path, extra) in logs.items():
            cmd = [sys.executable, "-m", "advcli", "annotate", str(path), *extra,
                   "--method", "grpo", "--out", str(work / "out.parquet"), "--force", "-q",
                   "--json"]  # fmt: skip
            times[name].append(timed(cmd))
    med = {name: statistics.median(t) for name, t in times.items()}
    lines = [f"presets ({rollouts:,} rollouts; median of {repeat}):"]
    for preset, own in (("verl V1 --from verl", "verl V1, advcli's own JSONL"),
                        ("NeMo-RL --from nemo-rl", "NeMo-RL, advcli's own JSONL")):  # fmt: skip
        lines.append(
            f"  {preset}: {med[preset]:.2f} s; the same rollouts in advcli's own JSONL "
            f"{med[own]:.2f} s: the preset costs {med[preset] / med[own] - 1:+.0%}"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=20 * STEP_ROWS)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", default="bench_out/presets")
    args = parser.parse_args()
    print("\n".join(run(Path(args.workdir), args.rollouts, args.repeat)))


if __name__ == "__main__":
    main()
