"""advcli's advantages against a framework's logged ones (:mod:`advcli.run.reproduce`)."""

from __future__ import annotations

import numpy as np

from advcli.run import reproduce


def test_logged_values_of_four_decimals_are_compared_to_half_their_last_digit():
    """prime-rl's episode records round their advantages to 4 decimals: a difference of
    3e-5 is that rounding (said); where every difference is within 1e-5 nothing is said;
    values of more decimals keep 1e-5."""
    ours = np.array([0.833333, -0.166667, -0.666667, 0.25])
    rounded = np.round(ours, 4)  # 0.8333, -0.1667, -0.6667, 0.25: up to 3.3e-5 off
    agreement = reproduce.compare(ours, rounded, None, "prime-rl")
    assert agreement.reproduces and agreement.tol == 5e-5
    assert agreement.sentence() == (
        "reproduces prime-rl's logged advantages (4 rows, max |Δ| 3.3e-05, to 5e-05: the "
        "logged values have 4 decimals)"
    )
    exact = reproduce.compare(np.array([0.75, -0.25]), np.array([0.75, -0.25]), None, "x")
    assert exact.tol == 1e-5 and exact.sentence().endswith("(2 rows, max |Δ| 0.0e+00)")
    unrounded = reproduce.compare(ours + 3e-5, ours, None, "TRL")
    assert unrounded.differ == 4 and unrounded.tol == 1e-5


def test_a_row_without_a_logged_value_is_not_compared():
    logged = np.array([0.5, np.nan, -0.5])
    agreement = reproduce.compare(np.array([0.5, 9.0, -0.5]), logged, None, "x")
    assert agreement.reproduces and agreement.compared == 2
