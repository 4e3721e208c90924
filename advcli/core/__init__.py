"""The numerical core: numpy arrays in, numpy arrays out; no I/O, no printing.

Ragged data (one list per row) is a flat array plus ``offsets`` (int64, length rows + 1), the way
Arrow lays out a list column: row ``i`` is ``flat[offsets[i]:offsets[i + 1]]``.

- :mod:`advcli.core.ragged`: helpers on flat arrays and offsets.
- :mod:`advcli.core.group`: group and batch baselines (GRPO, RLOO, batch-mean).
- :mod:`advcli.core.temporal`: per-token estimators from values (TD, MC, GAE, REINFORCE++).
- :mod:`advcli.core.steps`: agent steps: returns, normalisations, anchor-state groups, turns.
- :mod:`advcli.core.scan`: the discounted reverse scan every temporal estimator runs on.
- :mod:`advcli.core.audit`: zero-variance and singleton accounting.
- :mod:`advcli.core.correction`: rollout-correction weights and masks (TIS, IcePop, rejection).
- :mod:`advcli.core.conventions`: the parameters other frameworks use.
"""
