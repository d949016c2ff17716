"""Privacy amplification by Poisson subsampling in closed form, optimal (ε₀, δ₀) composition, and the guards
around dp-accounting calls.

Symbols: ``sampling_rate`` (q) is the Poisson inclusion probability of each unit; ``noise_multiplier`` (z) the
Gaussian noise std over the L2 sensitivity of adding or removing one unit (docs/units.md). ε is in nats.

The closed form here is Theorem 2.5 of paper 004 (Hasırcıoğlu & Gündüz, arXiv:2205.01556v1), i.e. Balle,
Barthe & Gaboardi, "Privacy amplification by subsampling", NeurIPS 2018 (arXiv:1807.01647), Theorem 8:
if M is (ε, δ)-DP then M ∘ Poisson(q) is (log(1 + q(e^ε − 1)), qδ)-DP for the add/remove relation.
Provenance: [V]. For the Poisson-subsampled Gaussian the bound is tight in the "remove" direction (advanced
joint convexity, Balle et al. 2018 Thm 2, holds with equality) and dominates the "add" direction.

Composition of events (PLD, RDP) is the accountants' job (:mod:`ampfl.accounting.accountants`, over
dp-accounting). A generic (ε₀, δ₀) composition helper (Kairouz, Oh & Viswanath 2015, Thm 3.3) is here, for
analyses that only give a per-step (ε, δ) pair.
"""

from __future__ import annotations

import math

import numpy as np

from ampfl.accounting._checks import (
    check_int,
    check_nonnegative,
    check_positive,
    check_probability,
)
from ampfl.accounting._numerics import log_sub_exp

_ULP = float(np.finfo(np.float64).eps)


def amplified_epsilon(epsilon: float, *, sampling_rate: float) -> float:
    """ε' = log(1 + q(e^ε − 1)) of 004 Thm 2.5 (stable for all ε ≥ 0)."""
    eps = check_nonnegative("epsilon", epsilon)
    q = check_probability("sampling_rate", sampling_rate)
    return _amplified(eps, math.log(q))


def base_epsilon(amplified: float, *, sampling_rate: float) -> float:
    """Inverse of :func:`amplified_epsilon`: ε with log(1 + q(e^ε − 1)) = ``amplified``."""
    eps = check_nonnegative("amplified", amplified)
    q = check_probability("sampling_rate", sampling_rate)
    return _deamplified(eps, math.log(q))


def poisson_amplification(*, epsilon: float, delta: float, sampling_rate: float) -> tuple[float, float]:
    """(ε', δ') = (log(1 + q(e^ε − 1)), qδ) of 004 Thm 2.5 for an (ε, δ)-DP mechanism."""
    dlt = check_probability("delta", delta, allow_zero=True, allow_one=False)
    q = check_probability("sampling_rate", sampling_rate)
    return amplified_epsilon(epsilon, sampling_rate=q), q * dlt


def _amplified(eps: float, log_q: float) -> float:
    # log(1 + q(e^ε − 1)) = log1p(q·expm1(ε)); for large ε: ε + log(q) + log1p((1 − q) e^{−ε} / q).
    if eps > 30.0:
        return eps + log_q + math.log1p(-math.expm1(log_q) * math.exp(-eps - log_q))
    return math.log1p(math.exp(log_q) * math.expm1(eps))


def _deamplified(eps: float, log_q: float) -> float:
    # log(1 + (e^ε − 1)/q); for large ε: ε − log(q) + log1p(−(1 − q) e^{−ε}).
    if eps > 30.0:
        return eps - log_q + math.log1p(math.expm1(log_q) * math.exp(-eps))
    return math.log1p(math.expm1(eps) * math.exp(-log_q))


def subsampled_gaussian_log_delta(*, sampling_rate: float, noise_multiplier: float, epsilon: float) -> float:
    """log δ(ε) of one Poisson-subsampled Gaussian by 004 Thm 2.5 + Thm 2.4 (004 Thm 5.1, Eq. 8–9).

    δ = q · δ_G(ε₀) with ε₀ = log(1 + (e^ε − 1)/q) and δ_G the exact Gaussian profile (Balle–Wang) at noise
    multiplier z. Exact for the add/remove relation (the remove direction attains it, the add direction is
    below).
    """
    from ampfl.accounting.gaussian import gaussian_log_delta

    q = check_probability("sampling_rate", sampling_rate)
    eps = check_nonnegative("epsilon", epsilon)
    z = check_positive("noise_multiplier", noise_multiplier)
    # ε₀ rounded down by a few ulps (a smaller ε₀ gives a larger δ); exact at q = 1 (no amplification)
    base = eps if q == 1.0 else _deamplified(eps, math.log(q)) * (1.0 - 4.0 * _ULP)
    return math.log(q) + gaussian_log_delta(sigma=z, epsilon=base)


def optimal_composition_log_delta(*, epsilon0: float, delta0: float, count: int, epsilon: float) -> float:
    """log δ of the k-fold adaptive composition of (ε₀, δ₀)-DP mechanisms at ε (optimal composition).

    Kairouz, Oh & Viswanath, "The composition theorem for differential privacy", ICML 2015 (arXiv:1311.0776),
    Theorem 3.3, extended to every ε by its dominating pair (k-fold randomised response):
    δ = 1 − (1 − δ₀)^k (1 − δ_RR(ε)), δ_RR(ε) = Σ_ℓ C(k, ℓ)[e^{(k−ℓ)ε₀} − e^{ε} e^{ℓε₀}]₊ / (1 + e^{ε₀})^k.
    Tight for the class of all (ε₀, δ₀)-DP mechanisms; provenance [V].
    """
    from scipy import special

    e0 = check_nonnegative("epsilon0", epsilon0)
    d0 = check_probability("delta0", delta0, allow_zero=True, allow_one=True)
    k = check_int("count", count, minimum=1)
    eps = check_nonnegative("epsilon", epsilon)
    ell = np.arange(k + 1, dtype=np.float64)
    loss = (k - 2.0 * ell) * e0  # privacy loss of outcome ℓ
    keep = loss > eps
    if e0 == 0.0 or not keep.any():
        log_rr = -math.inf
    else:
        l_keep = ell[keep]
        log_binom = (
            special.gammaln(k + 1.0) - special.gammaln(l_keep + 1.0) - special.gammaln(k - l_keep + 1.0)
        )
        log_terms = (
            log_binom
            + (k - l_keep) * e0
            - k * float(np.logaddexp(0.0, e0))
            + np.log(-np.expm1(eps - loss[keep]))
        )
        log_rr = min(float(special.logsumexp(log_terms)), 0.0)
    if d0 >= 1.0 or log_rr >= 0.0:
        return 0.0
    # log(1 − δ_RR) through expm1: δ_RR within an ulp of 1 (e^{log_rr} rounding to 1.0) stays finite
    log_keep_all = k * math.log1p(-d0) + log_sub_exp(0.0, log_rr)
    if log_keep_all >= 0.0:
        return -math.inf
    return float(math.log(-math.expm1(log_keep_all)))
