"""Empirical ε lower bound from many runs: a likelihood-ratio (threshold) test with Clopper–Pearson bounds.

The classic audit (Jagielski, Ullman & Oprea 2020; Nasr et al. 2021): a membership test "score ≥ t" has
true-positive rate TPR on runs with the canary and false-positive rate FPR on runs without it; (ε, δ)-DP
implies TPR ≤ e^ε FPR + δ and, for the complementary test, 1 − FPR ≤ e^ε (1 − TPR) + δ. With a one-sided
Clopper–Pearson lower bound TPR_lo and upper bound FPR_hi,

    ε ≥ max_t max( log((TPR_lo(t) − δ) / FPR_hi(t)),  log((1 − FPR_hi(t) − δ) / (1 − TPR_lo(t))) ).

Both directions use the same two one-sided bounds per threshold, so with G thresholds every bound is taken at
level (1 − c)/(2G) (Bonferroni) and all of them hold together with probability ≥ c: the maximum over
thresholds keeps confidence c. The thresholds are G quantiles of the pooled scores (chosen without the coins).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ampfl.accounting._checks import check_int, check_probability

__all__ = ["LikelihoodRatioAudit", "clopper_pearson", "likelihood_ratio_audit"]


def clopper_pearson(successes: int, *, trials: int, level: float) -> tuple[float, float]:
    """One-sided Clopper–Pearson bounds ``(lower, upper)``: each fails with probability ≤ ``level``."""
    n = check_int("trials", trials, minimum=1)
    k = check_int("successes", successes, minimum=0, maximum=n)
    a = check_probability("level", level, allow_one=False)
    lower = 0.0 if k == 0 else float(stats.beta.ppf(a, k, n - k + 1))
    upper = 1.0 if k == n else float(stats.beta.ppf(1.0 - a, k + 1, n - k))
    return lower, upper


@dataclass(frozen=True)
class LikelihoodRatioAudit:
    """The result of :func:`likelihood_ratio_audit`: the bound, its threshold and the counts behind it."""

    epsilon_lower: float
    threshold: float
    true_positives: int
    false_positives: int
    positives: int
    negatives: int
    thresholds: int
    confidence: float

    @property
    def correct(self) -> int:
        """Correct decisions of the best threshold (TP + TN)."""
        return self.true_positives + (self.negatives - self.false_positives)


def _log_ratio(num: float, den: float) -> float:
    if num <= 0.0:
        return 0.0
    return max(0.0, math.log(num / den)) if den > 0.0 else math.inf


def likelihood_ratio_audit(
    scores_in: Sequence[float] | np.ndarray,
    *,
    scores_out: Sequence[float] | np.ndarray,
    delta: float,
    confidence: float = 0.95,
    thresholds: int = 20,
    cuts: Sequence[float] | np.ndarray | None = None,
) -> LikelihoodRatioAudit:
    """ε lower bound from scores of trials with the canary (``scores_in``) and without (``scores_out``).

    Args:
        scores_in: one score per trial where the canary was included (higher: more likely included).
        scores_out: one score per trial where it was not.
        delta: δ of the claim under test.
        confidence: the confidence c of the bound (over the trials).
        thresholds: G, the number of candidate thresholds (quantiles of the pooled scores).
        cuts: the candidate thresholds themselves, fixed independently of the scores (then ``thresholds`` is
            not used; G is their number).
    """
    s_in = np.asarray(scores_in, dtype=np.float64).reshape(-1)
    s_out = np.asarray(scores_out, dtype=np.float64).reshape(-1)
    n_in = check_int("positives", s_in.size, minimum=1)
    n_out = check_int("negatives", s_out.size, minimum=1)
    if not (np.all(np.isfinite(s_in)) and np.all(np.isfinite(s_out))):
        raise ValueError("scores must be finite.")
    d = check_probability("delta", delta, allow_zero=True, allow_one=False)
    c = check_probability("confidence", confidence, allow_one=False)
    if cuts is None:
        g = check_int("thresholds", thresholds, minimum=1)
        pooled = np.concatenate([s_in, s_out])
        grid = np.unique(np.quantile(pooled, np.linspace(0.0, 1.0, g + 2)[1:-1], method="higher"))
    else:
        grid = np.unique(np.asarray(cuts, dtype=np.float64).reshape(-1))
        if grid.size == 0 or not np.all(np.isfinite(grid)):
            raise ValueError("cuts must be a non-empty sequence of finite thresholds.")
    level = (1.0 - c) / (2.0 * grid.size)
    best = LikelihoodRatioAudit(0.0, float(grid[0]), 0, 0, n_in, n_out, int(grid.size), c)
    for t in grid:
        tp, fp = int((s_in >= t).sum()), int((s_out >= t).sum())
        tpr_lo, _ = clopper_pearson(tp, trials=n_in, level=level)
        _, fpr_hi = clopper_pearson(fp, trials=n_out, level=level)
        eps = max(_log_ratio(tpr_lo - d, fpr_hi), _log_ratio(1.0 - fpr_hi - d, 1.0 - tpr_lo))
        if eps > best.epsilon_lower:
            best = LikelihoodRatioAudit(eps, float(t), tp, fp, n_in, n_out, int(grid.size), c)
    return best
