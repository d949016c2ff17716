"""The power of an audit (``ampfl.accounting.audit.power``): the ceiling with every guess right, its planned
value before the coins are drawn, monotone in the canary count, and the count needed for a target ε."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from ampfl.accounting.audit.one_run import guess_grid, one_run_epsilon_lower
from ampfl.accounting.audit.power import (
    LADDER,
    canaries_needed,
    certifiable_epsilon,
    ladder,
    max_certifiable,
    planned_ceiling,
)

CUTS = np.arange(0.25, 8.01, 0.25)


def test_ladder_is_even_increasing_and_public():
    assert LADDER[:3] == (2, 4, 6) and LADDER[-1] == 100_000
    assert all(m % 2 == 0 for m in LADDER) and all(a < b for a, b in itertools.pairwise(LADDER))
    assert all(b <= math.ceil(1.1 * a) + 1 for a, b in itertools.pairwise(LADDER) if a >= 64)
    assert ladder(100) == tuple(m for m in LADDER if m <= 100)


def test_planned_one_run_ceiling_is_the_best_rule_at_the_quantile_imbalance():
    """m = 500: 90 % of Binomial(500, 1/2) lies within 250 ± 18, so the plan has 232 included canaries. With
    perfect scores a rule guessing the top k/2 "in" is wrong on max(0, k/2 − 232) of them, and guessing the
    bottom k/2 "out" on max(0, k/2 − 268); each rule is tested at the Bonferroni share of the 12 rules."""
    imbalance = int(stats.binom.ppf(0.95, 500, 0.5)) - 250
    assert imbalance == 18
    n_in, n_out = 250 - imbalance, 250 + imbalance
    per_test = 1 - 0.05 / (2 * len(guess_grid(500)))
    best = 0.0
    for k in guess_grid(500):
        for out in (k // 2, 0):
            r = k // 2 + out
            v = r - max(0, k // 2 - n_in) - max(0, out - n_out)
            eps = one_run_epsilon_lower(v, guesses=r, canaries=500, delta=1e-5, confidence=per_test)
            best = max(best, eps)
    assert planned_ceiling(500, delta=1e-5) == pytest.approx(best, abs=1e-9)
    # balanced coins (assurance 0) are the all-correct bound logit((0.05/12)^(1/500)) at delta = 0
    p = (0.05 / 12) ** (1 / 500)
    assert planned_ceiling(500, delta=0.0, assurance=0.0) == pytest.approx(math.log(p / (1 - p)), abs=1e-5)


def test_fixed_cut_ceiling_has_a_closed_form():
    n_in = n_out = 1000
    coins = np.arange(2000) < n_in
    level = 0.05 / (2 * CUTS.size)
    tpr_lo, fpr_hi = level ** (1 / n_in), 1 - level ** (1 / n_out)  # Clopper-Pearson at n of n and 0 of n
    expected = math.log((tpr_lo - 1e-5) / fpr_hi)
    assert max_certifiable(coins, runs=1, delta=1e-5, confidence=0.95, cuts=CUTS) == pytest.approx(expected)
    assert planned_ceiling(2000, delta=1e-5, cuts=CUTS, assurance=0.0) == pytest.approx(expected)


@settings(max_examples=25, deadline=None)
@given(
    a=st.integers(min_value=2, max_value=4000),
    b=st.integers(min_value=2, max_value=4000),
    runs=st.sampled_from([1, 3]),
    fixed=st.booleans(),
)
def test_certifiable_epsilon_is_monotone_in_the_count(a, b, runs, fixed):
    small, large = sorted((a, b))
    cuts = CUTS if fixed else None
    assert certifiable_epsilon(small, runs=runs, delta=1e-5, cuts=cuts) <= certifiable_epsilon(
        large, runs=runs, delta=1e-5, cuts=cuts
    )


def test_raw_one_run_ceiling_is_not_monotone_but_the_certifiable_one_is():
    """With δ = 1e-5 the one-run bound's δ term 2mδ grows with m: the ceiling peaks (about 5.1 near 3000
    canaries, planned) and falls; an auditor holding more canaries can analyse fewer, so the certifiable ε
    keeps its maximum."""
    assert planned_ceiling(20_000, delta=1e-5) < planned_ceiling(3000, delta=1e-5)
    assert certifiable_epsilon(20_000, delta=1e-5) >= planned_ceiling(3000, delta=1e-5)


@pytest.mark.parametrize(
    ("epsilon", "runs", "cuts"), [(2.0, 1, None), (3.0, 1, None), (4.0, 4, None), (3.0, 1, CUTS)]
)
def test_canaries_needed_is_the_first_ladder_count_that_reaches(epsilon, runs, cuts):
    m = canaries_needed(epsilon, runs=runs, delta=1e-5, cuts=cuts)
    assert m is not None and m in LADDER
    assert planned_ceiling(m, runs=runs, delta=1e-5, cuts=cuts) >= epsilon
    before = LADDER[LADDER.index(m) - 1]
    assert certifiable_epsilon(before, runs=runs, delta=1e-5, cuts=cuts) < epsilon


def test_canaries_needed_says_none_when_out_of_reach():
    assert canaries_needed(3.0, delta=1e-5, maximum=100) is None  # needs 246
    assert canaries_needed(math.inf, delta=1e-5) is None
    assert canaries_needed(7.5, delta=1e-5, maximum=20_000) is None  # one run peaks near 5.1
