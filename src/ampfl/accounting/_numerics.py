"""Log-space numerics shared by every analysis (one implementation each).

Each function either is exact in floating point up to a few ulps or rounds its result *up* by a bound on its
round-off, so that a privacy loss computed from it is never understated.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

__all__ = ["EPS", "log1p_of_logsum", "log_comb_row", "log_expm1", "log_sub_exp"]

EPS = float(np.finfo(np.float64).eps)


def log_sub_exp(a: float, b: float) -> float:
    """log(exp(a) − exp(b)) for a ≥ b; −inf when equal."""
    if b == -math.inf:
        return a
    if b >= a:
        return -math.inf
    return a + math.log(-math.expm1(b - a))


def log_expm1(x: np.ndarray) -> np.ndarray:
    """log(eˣ − 1) for x ≥ 0, accurate for tiny x and without overflow for large x (−inf at 0)."""
    x = np.asarray(x, dtype=np.float64)
    small = x < 30.0
    with np.errstate(divide="ignore"):
        out = np.where(
            small, np.log(np.expm1(np.where(small, x, 1.0))), x + np.log1p(-np.exp(-np.where(small, 30.0, x)))
        )
    return np.asarray(out, dtype=np.float64)


def log1p_of_logsum(terms: np.ndarray, axis: int = -1) -> np.ndarray:
    """``log(1 + Σ exp(terms))`` along ``axis``, rounded up by a bound on its floating-point error.

    The error of a log-sum-exp is about eps · Σ wᵢ(|tᵢ| + 1) with weights wᵢ = exp(tᵢ − lse); through
    ``log1p`` it shrinks by the factor ``exp(lse) / (1 + exp(lse))``.
    """
    t = np.asarray(terms, dtype=np.float64)
    lse = np.asarray(special.logsumexp(t, axis=axis, keepdims=True), dtype=np.float64)
    with np.errstate(invalid="ignore"):
        w = np.where(np.isfinite(t), np.exp(t - lse), 0.0)
    spread = np.sum(w * (np.abs(np.where(np.isfinite(t), t, 0.0)) + 1.0), axis=axis)
    lse = np.squeeze(lse, axis=axis)
    value = np.logaddexp(0.0, lse)
    shrink = np.exp(np.minimum(lse, 0.0) - np.logaddexp(0.0, np.minimum(lse, 0.0)))
    err = 8.0 * EPS * (spread * shrink + value + 1.0 * shrink)
    return np.asarray(value + err * (t.shape[axis] + 2.0) ** 0.5, dtype=np.float64)


def log_comb_row(n: int) -> np.ndarray:
    """log C(n, ℓ) for ℓ = 0..n (gammaln; exact to a few ulps of its magnitude)."""
    ell = np.arange(n + 1, dtype=np.float64)
    return np.asarray(special.gammaln(n + 1.0) - special.gammaln(ell + 1.0) - special.gammaln(n - ell + 1.0))
