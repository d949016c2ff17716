"""Empirical ε lower bound from one training run: Steinke, Nasr & Jagielski (2023).

T. Steinke, M. Nasr, M. Jagielski, "Privacy auditing with one (1) training run", NeurIPS 2023
(arXiv:2305.08846), Theorem 5.2 (approximate DP). ``m`` canaries are each included in the training data
independently with probability 1/2 (the coins S ∈ {−1, +1}^m). From the output alone an auditor makes ``r``
guesses T_i ∈ {−1, +1} (abstaining on the other m − r canaries), of which W are correct. If the training
algorithm is (ε, δ)-DP with respect to each canary, then for every v

    P[W ≥ v] ≤ f(v) + 2 m δ · max_{i = 1..v} (f(v − i) − f(v)) / i,      f(v) = P[Binomial(r, p_ε) ≥ v],

with p_ε = e^ε / (1 + e^ε), the accuracy of ε-DP randomised response. For δ = 0 the bound is the binomial tail
itself. The right-hand side is the p-value of the observation ``W = v`` under the hypothesis "(ε, δ)-DP"; it
increases with ε, and the lower bound at confidence c is the largest ε whose p-value is below 1 − c: with
probability ≥ c over the coins and the run, an (ε, δ)-DP algorithm yields a bound ≤ ε.

:func:`one_run_audit` makes the guesses from scores (higher: more likely included): it guesses "in" for the
top k/2 and either "out" for the bottom k/2 or nothing more, for every k of a small fixed grid, and
Bonferroni-corrects the confidence over these rules, so picking the best one keeps the stated confidence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ampfl.accounting._checks import NumericalError, check_int, check_probability
from ampfl.accounting._numerics import find_root

__all__ = ["OneRunAudit", "guess_grid", "one_run_audit", "one_run_epsilon_lower", "one_run_p_value"]

_EPS_CAP = 200.0  # beyond any accounted ε; the bisection stops here


def _check_counts(correct: int, guesses: int, canaries: int) -> tuple[int, int, int]:
    m = check_int("canaries", canaries, minimum=1)
    r = check_int("guesses", guesses, minimum=0, maximum=m)
    v = check_int("correct", correct, minimum=0, maximum=r)
    return v, r, m


def one_run_p_value(correct: int, *, guesses: int, canaries: int, epsilon: float, delta: float) -> float:
    """P[W ≥ ``correct``] under (ε, δ)-DP, bounded by Theorem 5.2 of Steinke et al. (2023) (module docstring).

    Args:
        correct: v, the number of correct guesses.
        guesses: r, the number of guesses (not abstentions), ``correct <= guesses <= canaries``.
        canaries: m, the number of canaries (each included with probability 1/2).
        epsilon: ε ≥ 0 of the hypothesis.
        delta: δ in [0, 1] of the hypothesis.
    """
    v, r, m = _check_counts(correct, guesses, canaries)
    if not (epsilon >= 0.0):
        raise ValueError(f"epsilon must be in [0, inf). Found {epsilon}.")
    d = check_probability("delta", delta, allow_zero=True)
    if v == 0:
        return 1.0
    p = 1.0 / (1.0 + math.exp(-epsilon)) if epsilon < 700 else 1.0
    tail = float(stats.binom.sf(v - 1, r, p))  # f(v) = P[Binomial(r, p) >= v]
    alpha = 0.0
    if d > 0.0:
        # f(v − i) − f(v) = P[v − i <= B <= v − 1], i = 1..v
        pmf = stats.binom.pmf(np.arange(v - 1, -1, -1), r, p)  # B = v−1, v−2, ..., 0
        windows = np.cumsum(pmf) / np.arange(1, v + 1)
        alpha = float(np.max(windows))
    value = tail + 2.0 * m * d * alpha
    if not math.isfinite(value):
        raise NumericalError(f"the one-run p-value is not finite (v={v}, r={r}, epsilon={epsilon}).")
    return min(value, 1.0)


def one_run_epsilon_lower(
    correct: int, *, guesses: int, canaries: int, delta: float, confidence: float = 0.95
) -> float:
    """The largest ε whose p-value (:func:`one_run_p_value`) is below ``1 − confidence``; 0 if none is.

    With probability at least ``confidence`` an (ε, δ)-DP algorithm gives a value ≤ ε. Bisection to 1e-6
    (:func:`~ampfl.accounting._numerics.find_root`); :data:`_EPS_CAP` when still rejected there.
    """
    v, r, m = _check_counts(correct, guesses, canaries)
    c = check_probability("confidence", confidence, allow_one=False)
    level = 1.0 - c

    def rejected(eps: float) -> bool:
        return one_run_p_value(v, guesses=r, canaries=m, epsilon=eps, delta=delta) < level

    if not rejected(0.0):
        return 0.0
    try:  # the lower end of the final bracket: rejected there (never over-reports the lower bound)
        return find_root(
            lambda e: 1.0 if rejected(e) else -1.0,
            0.0,
            1.0,
            expand="upper",
            max_hi=_EPS_CAP,
            xtol=1e-6,
            rtol=0.0,
            end="lower",
            name="one-run epsilon lower bound",
        )
    except NumericalError:  # rejected even at the cap
        return _EPS_CAP


@dataclass(frozen=True)
class OneRunAudit:
    """The result of :func:`one_run_audit`.

    Attributes:
        epsilon_lower: the ε lower bound at the stated confidence (0: nothing shown).
        guesses: r, the guesses of the best grid point.
        correct: v, how many of them were right.
        canaries: m.
        confidence: the confidence of the bound (the grid is Bonferroni-corrected inside it).
        grid: the (guessed in, guessed out) counts tried.
    """

    epsilon_lower: float
    guesses: int
    correct: int
    canaries: int
    confidence: float
    grid: tuple[tuple[int, int], ...]


def guess_grid(canaries: int) -> tuple[int, ...]:
    """The guess counts k tried by :func:`one_run_audit`: m, m/2, m/4, ... (even, ≥ 2), at most 6 of them."""
    m = check_int("canaries", canaries, minimum=2)
    grid: list[int] = []
    k = m - (m % 2)
    while k >= 2 and len(grid) < 6:
        if k not in grid:
            grid.append(k)
        k = (k // 2) - ((k // 2) % 2)
    return tuple(grid)


def one_run_audit(
    scores: Sequence[float] | np.ndarray,
    *,
    included: Sequence[bool] | np.ndarray,
    delta: float,
    confidence: float = 0.95,
) -> OneRunAudit:
    """ε lower bound of one run from canary scores (higher: more likely included) and the true coins.

    For each k of :func:`guess_grid` the auditor guesses "included" for the k/2 highest scores and either
    "excluded" for the k/2 lowest or nothing more (abstaining: included canaries that never took part look
    like excluded ones, so the low end can be uninformative). The guesses depend on the scores only, never on
    the coins; each of the 2·len(grid) rules is evaluated at confidence ``1 − (1 − confidence)/(2·len(grid))``
    (Bonferroni), and the best bound is returned.
    """
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    coins = np.asarray(included, dtype=bool).reshape(-1)
    if s.shape != coins.shape:
        raise ValueError(f"scores and included must have the same length. Found {s.size} and {coins.size}.")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores must be finite.")
    m = check_int("canaries", s.size, minimum=2)
    c = check_probability("confidence", confidence, allow_one=False)
    rules = tuple((k // 2, out) for k in guess_grid(m) for out in (k // 2, 0))
    per_test = 1.0 - (1.0 - c) / len(rules)
    order = np.argsort(-s, kind="stable")  # highest first
    best = OneRunAudit(0.0, 0, 0, m, c, rules)
    for k_in, k_out in rules:
        top, bottom = order[:k_in], order[m - k_out :]
        v = int(coins[top].sum() + (~coins[bottom]).sum())
        r = k_in + k_out
        eps = one_run_epsilon_lower(v, guesses=r, canaries=m, delta=delta, confidence=per_test)
        if eps > best.epsilon_lower or best.guesses == 0:
            best = OneRunAudit(eps, r, v, m, c, rules)
    return best
