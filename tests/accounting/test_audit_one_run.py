"""Empirical-audit estimators: the one-run bound (Steinke, Nasr & Jagielski 2023) and the likelihood-ratio
test with Clopper–Pearson intervals, checked against independent scipy computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ampfl.accounting.audit.likelihood_ratio import clopper_pearson, likelihood_ratio_audit
from ampfl.accounting.audit.one_run import (
    guess_grid,
    one_run_audit,
    one_run_epsilon_lower,
    one_run_p_value,
)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


@pytest.mark.parametrize(("v", "r", "eps"), [(60, 100, 0.3), (90, 100, 1.0), (10, 10, 2.0), (0, 5, 1.0)])
def test_p_value_without_delta_is_the_binomial_tail(v, r, eps):
    # Steinke et al. 2023, Thm 5.2 with δ = 0: P[Binomial(r, e^ε/(1+e^ε)) ≥ v]
    expected = stats.binom.sf(v - 1, r, _sigmoid(eps))
    assert one_run_p_value(v, guesses=r, canaries=200, epsilon=eps, delta=0.0) == pytest.approx(expected)


def test_delta_term_matches_a_direct_sum():
    v, r, m, eps, delta = 70, 100, 200, 0.5, 1e-3
    q = _sigmoid(eps)
    f = [stats.binom.sf(k - 1, r, q) for k in range(v + 1)]  # f(k) = P[B >= k]
    alpha = max((f[v - i] - f[v]) / i for i in range(1, v + 1))
    expected = f[v] + 2 * m * delta * alpha
    assert one_run_p_value(v, guesses=r, canaries=m, epsilon=eps, delta=delta) == pytest.approx(expected)


@pytest.mark.parametrize(("v", "r"), [(70, 100), (95, 100), (300, 500)])
def test_lower_bound_inverts_the_binomial_tail(v, r):
    # independent inversion: solve P[Binomial(r, sigmoid(ε)) >= v] = 0.05 for ε with scipy's brentq
    eps = one_run_epsilon_lower(v, guesses=r, canaries=r, delta=0.0, confidence=0.95)
    from scipy.optimize import brentq

    root = brentq(lambda e: stats.binom.sf(v - 1, r, _sigmoid(e)) - 0.05, 0.0, 50.0)
    assert eps == pytest.approx(root, abs=1e-5)


def test_all_guesses_right_has_a_closed_form():
    # P[all r right] = q^r = 1 - c  ->  q = (1 - c)^(1/r), ε = log(q / (1 - q))
    r = 250
    q = 0.05 ** (1 / r)
    eps = one_run_epsilon_lower(r, guesses=r, canaries=500, delta=0.0)
    assert eps == pytest.approx(math.log(q / (1 - q)), abs=1e-5)


def test_chance_level_gives_nothing_and_delta_only_lowers_the_bound():
    assert one_run_epsilon_lower(50, guesses=100, canaries=100, delta=0.0) == 0.0
    without = one_run_epsilon_lower(90, guesses=100, canaries=100, delta=0.0)
    with_delta = one_run_epsilon_lower(90, guesses=100, canaries=100, delta=1e-4)
    assert 0.0 < with_delta < without


def test_audit_is_valid_under_randomised_response():
    # ε-DP randomised response on every canary: the bound must exceed ε in ≤ 5% of trials (here: 0 of 40)
    rng = np.random.default_rng(0)
    eps, m = 1.0, 400
    above = 0
    for _ in range(40):
        coins = rng.random(m) < 0.5
        keep = rng.random(m) < _sigmoid(eps)
        scores = np.where(keep == coins, 1.0, -1.0) + 1e-3 * rng.normal(size=m)
        above += one_run_audit(scores, included=coins, delta=0.0).epsilon_lower > eps
    assert above <= 2


def test_audit_detects_separated_scores():
    coins = np.arange(200) % 2 == 0
    result = one_run_audit(coins.astype(float), included=coins, delta=1e-5)
    assert result.correct == result.guesses == 200
    assert result.epsilon_lower > 3.0
    assert guess_grid(200) == (200, 100, 50, 24, 12, 6)


def test_clopper_pearson_matches_scipy_exact_interval():
    for k, n in [(0, 10), (3, 10), (10, 10), (40, 100)]:
        lo, hi = clopper_pearson(k, trials=n, level=0.025)
        ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
        assert lo == pytest.approx(ci.low, abs=1e-9) and hi == pytest.approx(ci.high, abs=1e-9)


def test_likelihood_ratio_audit():
    rng = np.random.default_rng(1)
    same = likelihood_ratio_audit(rng.normal(size=500), scores_out=rng.normal(size=500), delta=1e-5)
    assert same.epsilon_lower < 0.5
    apart = likelihood_ratio_audit(np.ones(500), scores_out=np.zeros(500), delta=1e-5)
    # separated: TPR_lo = (β)^(1/500), FPR_hi = 1 - β^(1/500) at β = 0.05/(2·G)
    beta = 0.05 / (2 * apart.thresholds)
    expected = math.log((beta ** (1 / 500) - 1e-5) / (1 - beta ** (1 / 500)))
    assert apart.epsilon_lower == pytest.approx(expected, rel=1e-6)


def test_bad_input_names_the_parameter():
    with pytest.raises(ValueError, match="confidence"):
        one_run_epsilon_lower(5, guesses=10, canaries=10, delta=0.0, confidence=1.0)
    with pytest.raises(ValueError, match="correct"):
        one_run_p_value(11, guesses=10, canaries=10, epsilon=1.0, delta=0.0)
    with pytest.raises(ValueError, match="same length"):
        one_run_audit([1.0, 2.0], included=[True], delta=0.0)


def test_abstaining_on_the_low_end_when_some_canaries_were_never_used():
    # 150 of 200 included canaries seen (score 1); 50 included but never sampled tie with the excluded (0)
    coins = np.r_[np.zeros(200, bool), np.ones(200, bool)]
    scores = np.r_[np.zeros(250), np.ones(150)]  # ties keep index order: the low end mixes both
    result = one_run_audit(scores, included=coins, delta=1e-5)
    assert result.correct == result.guesses == 100  # top 100 guessed "in", nothing guessed "out"
    assert result.epsilon_lower > 2.5
