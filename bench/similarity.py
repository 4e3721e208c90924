"""GiGPO's ``--similarity``: the clusters of one episode group's distinct states
(:func:`advcli.core.steps.similar_states`) against verl-agent's loop, which compares each state
with every cluster's first, a new ``SequenceMatcher`` each time.

``python -m bench.similarity`` (``python -m bench`` runs it too). Two groups of distinct text
states at threshold 0.9: observations of one environment (a room's description, a task, a
step: what verl-agent's environments send), and anagrams of one sentence, where no character
count tells two states apart (every pair is compared: the worst case, at the default bound of
states per group). The loop runs on fewer states (it takes minutes on the default bound's); the
two agree on those. One run each.
"""

from __future__ import annotations

import argparse
import time
from difflib import SequenceMatcher

import numpy as np

from advcli.core.steps import similar_states
from advcli.methods.steps import DEFAULT_SIMILARITY_STATES

WORDS = ("you", "see", "a", "cabinet", "drawer", "countertop", "garbagecan", "sinkbasin",
         "toilet", "towel", "soapbar", "in", "on", "the", "room", "go", "to", "take", "put",
         "open", "close", "1", "2", "3", "4")  # fmt: skip


def observations(n: int) -> list[str]:
    """Distinct observations of one environment: its words, in other orders."""
    rng = np.random.default_rng(0)
    return [" ".join(rng.choice(WORDS, 20)) + f". step {i}" for i in range(n)]


def anagrams(n: int) -> list[str]:
    """Distinct anagrams of one sentence."""
    rng = np.random.default_rng(0)
    letters = list("the agent moves left into the room")
    return list(dict.fromkeys("".join(rng.permutation(letters)) for _ in range(n)))[:n]


def verl_agent(texts: list[str], threshold: float) -> np.ndarray:
    """verl-agent's clusters: every cluster's first compared anew, in order."""
    firsts: list[str] = []
    out = np.empty(len(texts), dtype=np.int64)
    for i, text in enumerate(texts):
        same = (k for k, first in enumerate(firsts)
                if SequenceMatcher(None, text, first).ratio() >= threshold)  # fmt: skip
        match = next(same, None)
        if match is None:
            match = len(firsts)
            firsts.append(text)
        out[i] = match
    return out


def timed(fn, *args) -> tuple[float, np.ndarray]:
    started = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - started, result


def run(states: int = DEFAULT_SIMILARITY_STATES, loop_states: int = 300) -> list[str]:
    lines = []
    for name, make in (("observations", observations), ("anagrams", anagrams)):
        texts = make(states)
        seconds, _ = timed(similar_states, texts, 0.9)
        loop_seconds, loop = timed(verl_agent, texts[:loop_states], 0.9)
        same = bool((similar_states(texts[:loop_states], 0.9) == loop).all())
        lines.append(
            f"gigpo --similarity 0.9, {name}: {len(texts):,} distinct states of one group "
            f"{seconds:.2f} s; verl-agent's loop on {loop_states}: {loop_seconds:.2f} s "
            f"(same clusters: {same})"
        )
    return lines


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--states", type=int, default=DEFAULT_SIMILARITY_STATES)
    parser.add_argument("--loop-states", type=int, default=300)
    args = parser.parse_args()
    print("\n".join(run(args.states, args.loop_states)))
