"""The Gaussian mechanism: classic and analytic (exact) calibration.

Symbols: ``sigma`` is the absolute noise standard deviation (``noise_std``), ``sensitivity`` the L2
sensitivity Δ₂ of the query, so the noise multiplier is ``sigma / sensitivity``; ε in nats.

References:
    - Paper 000 (MS-PAFL), Lemma 1: classic calibration σ² = 2 s² ln(1.25/δ) / ε², valid for ε ∈ (0, 1)
      (Dwork & Roth 2014, Thm A.1). Provenance: [V].
    - Paper 004 (Hasırcıoğlu & Gündüz), Theorem 2.4, i.e. Balle & Wang, "Improving the Gaussian
      mechanism for differential privacy", ICML 2018 (arXiv:1805.06530v2), Theorem 8: the mechanism
      with noise N(0, σ²I) is (ε, δ)-DP iff
      δ ≥ Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ). Provenance: [V].
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from ampfl.accounting._checks import check_delta, check_nonnegative, check_positive
from ampfl.accounting._numerics import EPS as _EPS
from ampfl.accounting._numerics import epsilon_from_delta_curve, smallest_feasible


def classic_gaussian_sigma(*, epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Noise std of the classic Gaussian mechanism (000 Lemma 1): σ = s √(2 ln(1.25/δ)) / ε.

    Args:
        epsilon: target ε; the classic analysis holds only for 0 < ε < 1.
        delta: target δ in (0, 1).
        sensitivity: L2 sensitivity s (> 0). MS-PAFL uses s = 2C (its Eq. C.3).

    Raises:
        ValueError: if ε is outside (0, 1) — the classic bound is not valid there; use
            :func:`analytic_gaussian_sigma` instead.
    """
    eps = check_positive("epsilon", epsilon)
    if eps >= 1.0:
        raise ValueError(
            f"epsilon must be in (0, 1) for the classic Gaussian mechanism (000 Lemma 1). Found {eps}; "
            "use the analytic Gaussian mechanism for larger epsilon."
        )
    dlt = check_delta("delta", delta)
    s = check_positive("sensitivity", sensitivity)
    return s * math.sqrt(2.0 * math.log(1.25 / dlt)) / eps


def gaussian_log_delta_array(mu: np.ndarray, epsilon: np.ndarray) -> np.ndarray:
    """log δ(ε) of the Gaussian mechanism, μ = sensitivity / σ, elementwise (004 Thm 2.4, Balle–Wang Thm 8).

    log(Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ)) in log space, rounded up by a bound on the error the cancellation
    amplifies (1/(1 − e^{b−a}) times a few ulps of |a| + |b|); where the difference cancels
    completely the first term alone (an upper bound) is returned.
    """
    mu = np.asarray(mu, dtype=np.float64)
    eps = np.asarray(epsilon, dtype=np.float64)
    la = special.log_ndtr(mu / 2.0 - eps / mu)
    lb = eps + special.log_ndtr(-mu / 2.0 - eps / mu)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        gap = -np.expm1(np.minimum(lb - la, 0.0))
        margin = 32.0 * _EPS * (np.abs(la) + np.where(np.isfinite(lb), np.abs(lb), 0.0) + 1.0) / gap
        value = la + np.log(gap) + margin
    out = np.where((gap > 0.0) & np.isfinite(value), value, la)
    return np.asarray(np.minimum(out, 0.0), dtype=np.float64)


def gaussian_log_delta(*, sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
    """log δ(ε) of the Gaussian mechanism (004 Thm 2.4 / Balle–Wang Thm 8), computed in log space.

    Rounded up by a bound on the floating-point error (an upper bound on the true log δ).
    """
    s = check_positive("sensitivity", sensitivity)
    sig = check_positive("sigma", sigma)
    eps = check_nonnegative("epsilon", epsilon)
    return float(gaussian_log_delta_array(np.asarray(s / sig), np.asarray(eps)))


def gaussian_delta(*, sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
    """Exact δ(ε) of the Gaussian mechanism with noise std ``sigma`` and L2 sensitivity ``sensitivity``."""
    return math.exp(gaussian_log_delta(sigma=sigma, epsilon=epsilon, sensitivity=sensitivity))


def gaussian_epsilon(*, sigma: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest ε with δ(ε) ≤ ``delta`` for the Gaussian mechanism (exact, by root search in ε)."""
    dlt = check_delta("delta", delta)
    sig = check_positive("sigma", sigma)
    s = check_positive("sensitivity", sensitivity)
    # δ(ε) decreases in ε; search the smallest ε meeting the target (the upper end: δ ≤ target there).
    return epsilon_from_delta_curve(
        lambda e: gaussian_log_delta(sigma=sig, epsilon=e, sensitivity=s),
        math.log(dlt),
        max_epsilon=1e300,
        xtol=1e-24,
        rtol=1e-12,
        name="gaussian_epsilon",
    )


def analytic_gaussian_sigma(*, epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest noise std making the Gaussian mechanism (ε, δ)-DP (analytic Gaussian, any ε > 0)."""
    eps = check_positive("epsilon", epsilon)
    dlt = check_delta("delta", delta)
    s = check_positive("sensitivity", sensitivity)
    log_target = math.log(dlt)
    multiplier = smallest_feasible(
        lambda m: gaussian_log_delta(sigma=m, epsilon=eps, sensitivity=1.0),
        log_target,
        name="sigma",
        initial=float(np.sqrt(2.0 * np.log(1.25 / dlt)) / eps),
        rtol=1e-10,
    )
    return multiplier * s
