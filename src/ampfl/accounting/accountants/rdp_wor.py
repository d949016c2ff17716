"""RDP of the Gaussian mechanism on a sample drawn without replacement (replace-one), without dp-accounting.

Issue 32: a fixed-size-cohort DP run (m of N clients without replacement) paid ≈ 1 CPU-s at set-up, most of
it dp-accounting's ``_compute_rdp_sample_wor_gaussian`` (Wang, Balle & Kasiviswanathan 2019, Theorem 27, with
its strengthening for the subsampled Gaussian), which recomputes the forward differences of exp(cgf) — O(α²)
pure-Python steps — for every order, plus the import of dp-accounting itself (≈ 1 s).

This is the same algorithm with the same floating-point operations in the same order (NumPy's ``exp``,
``log``, ``log1p`` and SciPy's ``gammaln`` where dp-accounting calls them, ``math`` where it does), so the
same numbers bit for bit (``tests/accounting/test_rdp_wor.py``), with two changes that do not change a value:
the forward differences are computed once for the largest order and shared, since the i-th difference depends
only on the first i + 2 points (dp-accounting recomputes the same prefix for each order), and the running
values are Python floats instead of NumPy scalars. ~35 ms instead of ~1.2 s for the 77 default orders.

Known limit, unchanged (issue 32's report): forward differences of e^cgf in floating point cancel; for large
σ they can be off by far more than rounding (an mpmath evaluation of the same bound at q = 0.9, σ = 12, α = 32
is 4e-6 relative above this value, and at σ = 20, α = 200 this value is 5.6× the exact one).

Orders above 256 (dp-accounting's Stirling branch) are not computed: the accountant evaluates this kernel on
the orders ≤ 256 only and reports ``inf`` above (sound: ε minimises over orders).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

__all__ = ["MAX_ORDER", "rdp_sample_wor_gaussian"]

#: dp-accounting's ``max_alpha``: the exact (non-Stirling) bound up to this order.
MAX_ORDER = 256


def _log_add(a: float, b: float) -> float:
    """dp-accounting's ``_log_add``: log(e^a + e^b)."""
    lo, hi = (a, b) if a <= b else (b, a)
    if lo == -math.inf:
        return hi
    return math.log1p(math.exp(lo - hi)) + hi


def _forward_diffs(sigma: float, n: int) -> list[float]:
    """dp-accounting's ``_get_forward_diffs(cgf, n)[0]``: log |Δ^(i+1)| of (1, e^cgf(0), e^cgf(1), …) at 0,
    i = 0..n+1, with cgf(x) = x(x + 1)/(2σ²) (the signs are carried but not returned, as there)."""
    two_var = 2.0 * sigma**2
    vec = [0.0] + [float(x * 1.0 * (x + 1) / two_var) for x in range(n + 2)]
    signs = [True] * (n + 3)
    deltas = [0.0] * (n + 2)
    exp, log1p = np.exp, np.log1p
    for i in range(n + 2):
        for j in range(n + 2 - i):  # _stable_inplace_diff_in_log(vec, signs, n + 2 - i)
            a, b = vec[j + 1], vec[j]
            if signs[j] == signs[j + 1]:  # _log_sub_sign(a, b): log|e^a − e^b| and its sign
                if a > b:
                    sign, mag = True, a + math.log1p(-exp(b - a))
                elif a < b:
                    sign, mag = False, float(b + log1p(-exp(a - b)))
                else:
                    sign, mag = True, -math.inf
                vec[j] = float(mag)
                signs[j] = sign if signs[j + 1] else not sign
            else:
                vec[j] = _log_add(b, a)
                signs[j] = signs[j + 1]
        deltas[i] = vec[0]
    return deltas


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
