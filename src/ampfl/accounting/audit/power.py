"""The power of an empirical audit: the largest ε lower bound a canary count can give, and the count needed.

An estimator of :mod:`ampfl.accounting.audit.one_run` or :mod:`ampfl.accounting.audit.likelihood_ratio`
cannot certify more than its bound for scores that separate the included canaries from the others perfectly
(every guess right): :func:`max_certifiable` of the realised coins. An accounted ε above it cannot be told
from a violation by that audit (its verdict is "inconclusive").

Before a run the coins are not drawn yet. :func:`planned_ceiling` evaluates :func:`max_certifiable` at coins
whose imbalance (|included − m/2|) is the ``assurance`` two-sided quantile of Binomial(m, 1/2): the realised
ceiling reaches it with probability at least ``assurance`` (the one-run estimator guesses "in" for the top
half, so every coin beyond half costs a wrong guess even with perfect scores). :func:`certifiable_epsilon` is
its running maximum over a public ladder of even counts (:data:`LADDER`), monotone in the count by
construction: an auditor holding m canaries can always analyse only m' ≤ m of them (the others are then part
of the mechanism's input), so the ceiling of a smaller count is within reach of a larger one.
:func:`canaries_needed` returns the smallest ladder count whose planned ceiling reaches a target ε.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from ampfl.accounting._checks import check_int, check_probability

__all__ = [
    "LADDER",
    "canaries_needed",
    "certifiable_epsilon",
    "ladder",
    "max_certifiable",
    "planned_ceiling",
    "verdict",
]

#: The largest canary count any audit plans for.
MAX_CANARIES = 100_000


def _ladder() -> tuple[int, ...]:
    counts = list(range(2, 65, 2))
    while counts[-1] < MAX_CANARIES:
        nxt = math.ceil(counts[-1] * 1.1)
        counts.append(min(MAX_CANARIES, nxt + (nxt % 2)))
    return tuple(counts)


#: The counts the planner chooses from: every even count to 64, then steps of about 10 %, to 100 000.
LADDER = _ladder()


def ladder(maximum: int) -> tuple[int, ...]:
    """The ladder counts ≤ ``maximum``."""
    return tuple(m for m in LADDER if m <= maximum)


def max_certifiable(
    coins: np.ndarray,
    *,
    runs: int,
    delta: float,
    confidence: float,
    cuts: Sequence[float] | np.ndarray | None = None,
) -> float:
    """The largest lower bound the audit's estimator could give with these coins: its bound for scores that
    separate the included canaries from the others perfectly (every guess right).

    ``runs = 1`` without ``cuts``: the one-run estimator; otherwise the likelihood-ratio test over the pooled
    trials, at its quantile thresholds or at ``cuts`` (fixed thresholds).
    """
    from ampfl.accounting.audit.likelihood_ratio import likelihood_ratio_audit
    from ampfl.accounting.audit.one_run import one_run_audit

    coins = np.asarray(coins, dtype=bool).reshape(-1)
    if runs == 1 and cuts is None:
        perfect = coins.astype(np.float64)
        return float(one_run_audit(perfect, included=coins, delta=delta, confidence=confidence).epsilon_lower)
    if coins.all() or not coins.any():
        return 0.0
    if cuts is None:
        high, low = np.ones(int(coins.sum())), np.zeros(int((~coins).sum()))
    else:  # above every cut / below every cut
        grid = np.asarray(cuts, dtype=np.float64)
        high = np.full(int(coins.sum()), float(grid.max()) + 1.0)
        low = np.full(int((~coins).sum()), float(grid.min()) - 1.0)
    bound = likelihood_ratio_audit(high, scores_out=low, delta=delta, confidence=confidence, cuts=cuts)
    return float(bound.epsilon_lower)


def verdict(epsilon_lower: float, epsilon_accounted: float, ceiling: float) -> str:
    """``"VIOLATION"`` when the lower bound exceeds the accounted ε (any positive bound against a run that
    claims none, ε = ∞), else ``"inconclusive"`` when the accounted ε is above the audit's ``ceiling``
    (:func:`max_certifiable`: it could not have told), else ``"consistent"``."""
    if epsilon_lower > epsilon_accounted or (math.isinf(epsilon_accounted) and epsilon_lower > 0.0):
        return "VIOLATION"
    return "inconclusive" if epsilon_accounted > ceiling else "consistent"


def _planned_coins(trials: int, assurance: float) -> np.ndarray:
    """``trials`` coins, the first ones included, with the ``assurance`` two-sided quantile imbalance."""
    upper = int(stats.binom.ppf(0.5 + assurance / 2.0, trials, 0.5))
    included = max(0, min(trials, trials - upper))  # = trials/2 − imbalance (symmetric)
    coins = np.zeros(trials, dtype=bool)
    coins[:included] = True
    return coins


def planned_ceiling(
    canaries: int,
    *,
    runs: int = 1,
    delta: float,
    confidence: float = 0.95,
    cuts: Sequence[float] | np.ndarray | None = None,
    assurance: float = 0.9,
) -> float:
    """:func:`max_certifiable` of ``canaries`` canaries in each of ``runs`` runs, at coins whose imbalance is
    the ``assurance`` quantile (module docstring): the realised ceiling is at least this with probability
    ≥ ``assurance``."""
    m = check_int("canaries", canaries, minimum=2, maximum=MAX_CANARIES)
    r = check_int("runs", runs, minimum=1)
    a = check_probability("assurance", assurance, allow_zero=True, allow_one=False)
    d = check_probability("delta", delta, allow_zero=True, allow_one=False)
    c = check_probability("confidence", confidence, allow_one=False)
    grid = None if cuts is None else tuple(float(t) for t in np.asarray(cuts, dtype=np.float64).reshape(-1))
    return _planned(m, r, d, c, grid, a)


@functools.lru_cache(maxsize=4096)
def _planned(
    m: int, runs: int, delta: float, confidence: float, cuts: tuple[float, ...] | None, assurance: float
) -> float:
    # one run: the canaries of that run; several runs or fixed cuts: the pooled trials (their sum's imbalance)
    coins = _planned_coins(m if runs == 1 and cuts is None else m * runs, assurance)
    return max_certifiable(coins, runs=runs, delta=delta, confidence=confidence, cuts=cuts)


def certifiable_epsilon(
    canaries: int,
    *,
    runs: int = 1,
    delta: float,
    confidence: float = 0.95,
    cuts: Sequence[float] | np.ndarray | None = None,
    assurance: float = 0.9,
) -> float:
    """The largest planned ceiling over the ladder counts ≤ ``canaries`` (0 below the first one): monotone
    non-decreasing in ``canaries`` (module docstring)."""
    m = check_int("canaries", canaries, minimum=2, maximum=MAX_CANARIES)
    return max(
        (
            planned_ceiling(k, runs=runs, delta=delta, confidence=confidence, cuts=cuts, assurance=assurance)
            for k in ladder(m)
        ),
        default=0.0,
    )


def canaries_needed(
    epsilon: float,
    *,
    runs: int = 1,
    delta: float,
    confidence: float = 0.95,
    maximum: int = MAX_CANARIES,
    cuts: Sequence[float] | np.ndarray | None = None,
    assurance: float = 0.9,
) -> int | None:
    """The smallest ladder count ≤ ``maximum`` whose planned ceiling reaches ``epsilon``; None if none does
    (an infinite ``epsilon`` is never reached)."""
    top = check_int("maximum", maximum, minimum=2, maximum=MAX_CANARIES)
    if not math.isfinite(epsilon):
        return None
    for k in ladder(top):
        ceiling = planned_ceiling(
            k, runs=runs, delta=delta, confidence=confidence, cuts=cuts, assurance=assurance
        )
        if ceiling >= epsilon:
            return k
    return None
