"""RDP of the Gaussian mechanism on a sample drawn without replacement (replace-one), without dp-accounting.

Why: a fixed-size-cohort DP run (m of N clients without replacement) paid ≈ 1 CPU-s at set-up, most of
it dp-accounting's ``_compute_rdp_sample_wor_gaussian`` (Wang, Balle & Kasiviswanathan 2019, Theorem 27, with
its strengthening for the subsampled Gaussian), which recomputes the forward differences of exp(cgf) — O(α²)
pure-Python steps — for every order, plus the import of dp-accounting itself (≈ 1 s).

This is the same bound (the same terms, assembled with the same floating-point operations as dp-accounting)
with one correction: dp-accounting takes the forward differences of e^cgf in floating point, where they
cancel — its value was 4e-6 (relative) *below* the bound at q = 0.9, σ = 12, α = 32 (an ε too small: a
soundness bug) and 5.6× above it at σ = 20, α = 200. Here they are exact decimal sums
(:func:`_forward_diffs`), computed once for the largest order and shared (the i-th difference depends only
on the first i + 2 points). Where dp-accounting's differences do not cancel the two agree to ~1e-12; checked
against an independent mpmath evaluation of the theorem (``tests/accounting/test_rdp_wor.py``).

Orders above 256 (dp-accounting's Stirling branch) are not computed: the accountant evaluates this kernel on
the orders ≤ 256 only and reports ``inf`` above (sound: ε minimises over orders).
"""

from __future__ import annotations

import decimal
import itertools
import math
from collections.abc import Iterable
from decimal import Decimal

import numpy as np

from ampfl.accounting._checks import NumericalError

__all__ = ["MAX_ORDER", "rdp_sample_wor_gaussian"]

#: dp-accounting's ``max_alpha``: the exact (non-Stirling) bound up to this order.
MAX_ORDER = 256


def _log_add(a: float, b: float) -> float:
    """dp-accounting's ``_log_add``: log(e^a + e^b)."""
    lo, hi = (a, b) if a <= b else (b, a)
    if lo == -math.inf:
        return hi
    return math.log1p(math.exp(lo - hi)) + hi


_LN10 = math.log(10.0)


def _log_abs(value: Decimal) -> float:
    """ln |value| as a float (−inf for 0), from the decimal's exponent and leading digits."""
    if value == 0:
        return -math.inf
    exponent = value.adjusted()
    return math.log(float(abs(value).scaleb(-exponent))) + exponent * _LN10


def _forward_diffs_at(sigma: float, n: int, digits: int) -> tuple[list[float], float]:
    """(log |Δ^(i+1)| at 0 of (1, e^cgf(0), …, e^cgf(n+1)) for i = 0..n+1, the fewest significant digits any
    of them kept), in decimal arithmetic with ``digits`` digits; cgf(x) = x(x + 1)/(2σ²), σ exact.

    Each subtraction errs by at most half an ulp of its larger operand, and every intermediate of Δ^k at 0 is
    at most 2^k · max_{j ≤ k} of the points, so Δ^k carries at least ``digits`` − log10(2^k · max / |Δ^k|)
    correct digits (the returned minimum)."""
    ctx = decimal.Context(prec=digits, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
    two_var = ctx.multiply(Decimal(2), ctx.multiply(Decimal(sigma), Decimal(sigma)))
    values = [Decimal(1)] + [ctx.exp(ctx.divide(Decimal(x * (x + 1)), two_var)) for x in range(n + 2)]
    tops = list(itertools.accumulate((_log_abs(v) / _LN10 for v in values), max))  # log10 max of points ≤ j
    deltas, kept = [], math.inf
    for k in range(1, n + 3):
        values = [ctx.subtract(values[j + 1], values[j]) for j in range(len(values) - 1)]
        deltas.append(_log_abs(values[0]))  # Δ^k at 0 depends on points 0..k only
        if deltas[-1] > -math.inf:
            kept = min(kept, digits - (tops[k] + k * math.log10(2.0) - deltas[-1] / _LN10))
    return deltas, kept


def _forward_diffs(sigma: float, n: int) -> list[float]:
    """log |Δ^(i+1)| of (1, e^cgf(0), …) at 0, i = 0..n+1: the quantities of dp-accounting's
    ``_get_forward_diffs(cgf, n)[0]``, computed without cancellation.

    In floating point (dp-accounting's way) the k-th difference of values ≈ 1 loses about k·log10 2 +
    (k/2)·log10(2σ²) digits: at q = 0.9, σ = 12, α = 32 the RDP came out 4e-6 below the bound, at σ = 20,
    α = 200 3.3× above it. Here the differences are decimal sums carried with enough digits that each keeps
    at least 20 correct ones (a bound on the rounding, :func:`_forward_diffs_at`; else more digits)."""
    digits = 30 + math.ceil((n + 2) * (math.log10(2.0) + 0.25 * math.log10(max(10.0, 2.0 * sigma * sigma))))
    for _ in range(8):
        deltas, kept = _forward_diffs_at(sigma, n, digits)
        if kept >= 20:
            return deltas
        digits += math.ceil(40 - kept)
    raise NumericalError(f"forward differences of the subsampled Gaussian did not converge (σ = {sigma:g}).")


def _log_a(q: float, sigma: float, alpha: int, deltas: list[float], lgamma: np.ndarray) -> float:
    """dp-accounting's ``_compute_rdp_sample_wor_gaussian_int`` (α ≤ 256) on precomputed ``deltas`` and
    ``lgamma[k] = gammaln(k)``."""
    two_var = 2.0 * sigma**2

    def log_comb(n: int, k: int) -> float:
        return float(lgamma[n + 1] - lgamma[k + 1] - lgamma[n - k + 1])

    func2 = 1.0 * 2.0 / two_var  # func(2.0): the Gaussian's RDP at order 2
    log_f2m1 = func2 + math.log1p(-np.exp(-func2))
    log_q, log2, log4 = float(np.log(q)), float(np.log(2)), float(np.log(4))
    log_a = 0.0
    for i in range(2, alpha + 1):
        if i == 2:
            s = 2 * log_q + log_comb(alpha, 2) + min(log4 + log_f2m1, func2 + log2)
        else:
            lo = deltas[2 * (i // 2) - 1]
            hi = deltas[2 * ((i + 1) // 2) - 1]
            s = min(log4 + 0.5 * (lo + hi), log2 + (i - 1) * 1.0 * i / two_var)
            s += i * log_q + log_comb(alpha, i)
        log_a = _log_add(log_a, s)
    return log_a


def rdp_sample_wor_gaussian(q: float, noise_multiplier: float, orders: Iterable[int]) -> np.ndarray:
    """RDP at integer ``orders`` (2 ≤ α ≤ 256) of the Gaussian mechanism (noise multiplier relative to the
    replace-one sensitivity) on a sample of a fraction ``q`` drawn without replacement: dp-accounting's
    ``_compute_rdp_sample_wor_gaussian(q, noise_multiplier, orders)``."""
    alphas = [int(a) for a in orders]
    if any(a < 2 or a > MAX_ORDER for a in alphas):
        raise ValueError(f"orders must be integers in [2, {MAX_ORDER}]. Found {alphas}.")
    sigma = float(noise_multiplier)
    if q == 0.0 or math.isinf(sigma) or not alphas:
        return np.zeros(len(alphas))
    if q == 1.0:
        return np.array([a / (2 * sigma**2) for a in alphas], dtype=np.float64)
    from scipy import special

    top = max(alphas)
    deltas = _forward_diffs(sigma, top)
    lgamma = special.gammaln(np.arange(top + 2, dtype=np.float64))
    return np.array([_log_a(q, sigma, a, deltas, lgamma) / (a - 1) for a in alphas], dtype=np.float64)
