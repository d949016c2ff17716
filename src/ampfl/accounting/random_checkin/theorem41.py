"""004 Theorem 4.1 as printed (the ``paper`` analysis of random check-in): Eq. 5–7, Eq. 28, σ → 0 limit.

Paper 004: B. Hasırcıoğlu & D. Gündüz, "Privacy Amplification via Random Participation in Federated
Learning", arXiv:2205.01556v1. ε′ = log(1 + (e^ε − 1)/(pq)), c̄₁ = (1 − e^{ε−ε′})(1 − p)/(1 − pq),
c̄₂ = p(1 − q)/(1 − pq)·(1 − e^{ε−ε′}) + e^{ε−ε′}, z* the root of Eq. 7 and δ by Eq. 6, which equals the
Eq. 28 integral pq∫[ξ₂ − α′c̄₁ξ₀ − α′c̄₂ξ₁]₊: the exact δ of ONE explicit dataset ("a = 1"). Provenance: [V]
for the formula, [X] as a DP bound (docs/audit.md). Symbols: p = ``participation``, q = ``sampling_rate``,
d = ``local_dataset_size``, s = ``noise_multiplier`` (σ/C; every quantity here depends on σ only through σ/C,
so the kernels work with C = 1 and z* is in units of C).

Numerics: δ is computed from survival functions in log space (``log_ndtr``), never from the printed
1 − α′c̄₂ + … form, which cancels catastrophically. z* is found by bracket expansion on the monotone
log-likelihood ratio h(z) (single crossing holds: the posterior over the binomial index is monotone in z).
The binomial weights are truncated where they fall below e^{−230} of the mode; the neglected mass of ξ₂ is
added to δ, so δ stays an upper bound of Eq. 28. Kernels (:func:`coefficients`, :func:`paper_log_delta`,
:func:`paper_noiseless_log_delta`, :func:`binomial_weights`) take validated inputs.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import integrate, optimize, special, stats

from ampfl.accounting._checks import NumericalError, check_nonnegative
from ampfl.accounting._numerics import log_sub_exp
from ampfl.accounting.random_checkin.analyses import check_mechanism, check_noisy_mechanism
from ampfl.accounting.subsampling import base_epsilon

__all__ = [
    "PaperTerms",
    "binomial_weights",
    "coefficients",
    "eq28_delta",
    "paper_log_delta",
    "paper_noiseless_delta",
    "paper_noiseless_log_delta",
    "paper_terms",
]

_LOG_WEIGHT_CUT = 230.0  # binomial weights below e^-230 of the mode are dropped (their ξ₂ mass is added to δ)


@dataclass(frozen=True, slots=True)
class PaperTerms:
    """The pieces of 004 Thm 4.1 for one (p, q, d, z, ε); ``z_star`` is in units of the clip norm C."""

    epsilon: float
    epsilon_prime: float  # ε′ with ε = log(1 + pq(e^{ε′} − 1)), Eq. 5
    beta: float  # e^{ε − ε′}
    c1_bar: float
    c2_bar: float
    epsilon_double_prime: float  # ε″ = ε′ + log c̄₂ (Thm 5.2) = log(α′ c̄₂)
    z_star: float  # root of Eq. 7
    delta: float  # Eq. 6 (= Eq. 28), from survival functions, truncated mass added


def coefficients(p: float, q: float, eps: float) -> tuple[float, float, float]:
    """(ε′, log α′c̄₁, log α′c̄₂) of Thm 4.1 (Eq. 5) in log space; α′ = e^{ε′}; log α′c̄₂ is Thm 5.2's ε″."""
    eps_prime = base_epsilon(eps, sampling_rate=p * q)
    log_gap = eps_prime + log_sub_exp(0.0, eps - eps_prime)  # log(e^{ε′} − e^{ε})
    if p == 1.0:
        log_a1 = -math.inf
    else:
        log_a1 = log_gap + math.log1p(-p) - math.log1p(-p * q)
    if p * q == 1.0 or q == 1.0:
        log_a2 = eps  # c₂ = 0 (q = 1) or β = 1 (pq = 1)
    else:
        log_c2 = math.log(p) + math.log1p(-q) - math.log1p(-p * q)
        log_a2 = float(np.logaddexp(log_gap + log_c2, eps))
    return eps_prime, log_a1, log_a2


@functools.lru_cache(maxsize=64)
def binomial_weights(d: int, q: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Indices i, log Bin(i; d, q) kept after truncation, and log of the dropped mass."""
    if q == 1.0:
        return np.array([float(d)]), np.array([0.0]), -math.inf
    i = np.arange(d + 1, dtype=np.float64)
    logw = stats.binom.logpmf(i, d, q)
    keep = logw >= logw.max() - _LOG_WEIGHT_CUT
    lo, hi = int(i[keep][0]), int(i[keep][-1])
    low_tail = float(stats.binom.logcdf(lo - 1, d, q)) if lo > 0 else -math.inf
    high_tail = float(stats.binom.logsf(hi, d, q)) if hi < d else -math.inf
    i_keep, w_keep = i[lo : hi + 1].copy(), logw[lo : hi + 1].copy()
    i_keep.flags.writeable = False
    w_keep.flags.writeable = False
    return i_keep, w_keep, float(np.logaddexp(low_tail, high_tail))


def _lse(x: np.ndarray) -> float:
    """log Σ e^x (fast; scipy's logsumexp has a large per-call overhead)."""
    m = float(np.max(x))
    if m == -math.inf:
        return -math.inf
    return m + math.log(float(np.sum(np.exp(x - m))))


def _log_ratio(z: float, i: np.ndarray, logw: np.ndarray, s: float, log_a1: float, log_a2: float) -> float:
    """h(z) = log ξ₂(z) − log(α′c̄₁ξ₀(z) + α′c̄₂ξ₁(z)) (common factor e^{−z²/2s²} removed); increasing in z."""
    inv = 1.0 / (s * s)
    num = _lse(logw + (z * (i + 1.0) - 0.5 * (i + 1.0) ** 2) * inv)
    den1 = _lse(logw + (z * i - 0.5 * i * i) * inv)
    return float(num - np.logaddexp(log_a1, log_a2 + den1))


def _z_star(i: np.ndarray, logw: np.ndarray, s: float, log_a1: float, log_a2: float) -> float:
    """Root of Eq. 7 (in units of C) by bracket expansion and Brent's method on h(z)."""

    def h(z: float) -> float:
        return _log_ratio(z, i, logw, s, log_a1, log_a2)

    z0 = float(np.exp(_lse(logw + np.log(i + 1.0)))) + 0.5  # near the bulk of ξ₂
    h0 = h(z0)
    if h0 == 0.0:
        return z0
    step = max(1.0, s)
    direction = 1.0 if h0 < 0.0 else -1.0
    near = z0
    for _ in range(200):
        far = near + direction * step
        if (h(far) > 0.0) == (direction > 0.0):
            lo, hi = (near, far) if direction > 0 else (far, near)
            return float(optimize.brentq(h, lo, hi, xtol=1e-12 * max(1.0, abs(far)), rtol=1e-14))
        near, step = far, step * 2.0
    raise NumericalError("z*: no sign change of Eq. 7 found by bracket expansion.")


def paper_log_delta(p: float, q: float, d: int, s: float, eps: float) -> tuple[float, PaperTerms]:
    """(log δ, terms) of Thm 4.1 (Eq. 6 at the root z* of Eq. 7) for validated p, q, d, z = s, ε."""
    eps_prime, log_a1, log_a2 = coefficients(p, q, eps)
    i, logw, log_tail = binomial_weights(d, q)
    z = _z_star(i, logw, s, log_a1, log_a2)
    log_a = _lse(logw + special.log_ndtr(-(z - i - 1.0) / s))
    log_b = np.logaddexp(
        log_a2 + _lse(logw + special.log_ndtr(-(z - i) / s)), log_a1 + special.log_ndtr(-z / s)
    )
    if not log_b < log_a:
        raise NumericalError(
            f"Thm 4.1: survival terms do not separate at z* = {z:g} (log A = {log_a}, log B = {log_b})."
        )
    log_diff = log_sub_exp(float(log_a), float(log_b))
    log_delta = math.log(p) + math.log(q) + float(np.logaddexp(log_diff, log_tail))
    beta = math.exp(eps - eps_prime)
    terms = PaperTerms(
        epsilon=eps,
        epsilon_prime=eps_prime,
        beta=beta,
        c1_bar=math.exp(log_a1 - eps_prime),
        c2_bar=math.exp(log_a2 - eps_prime),
        epsilon_double_prime=log_a2,
        z_star=z,
        delta=math.exp(log_delta),
    )
    return log_delta, terms


def paper_noiseless_log_delta(p: float, q: float, d: int, eps: float) -> float:
    """log of the σ → 0 limit of Eq. 28, pq Σ_i [w_i − α′c̄₂ w_{i+1}]₊ (+ dropped mass) = sup_σ Eq. 6."""
    _, _, log_a2 = coefficients(p, q, eps)
    _, logw, log_tail = binomial_weights(d, q)
    log_next = np.append(logw[1:], -math.inf) + log_a2
    pos = logw > log_next
    if not pos.any():
        return math.log(p) + math.log(q) + log_tail
    log_terms = logw[pos] + np.log(-np.expm1(log_next[pos] - logw[pos]))
    return math.log(p) + math.log(q) + float(np.logaddexp(_lse(log_terms), log_tail))


def paper_noiseless_delta(
    *, participation: float, sampling_rate: float, local_dataset_size: int, epsilon: float
) -> float:
    """The σ → 0 limit of Thm 4.1's δ, which is also its supremum over σ (δ of Eq. 28 falls as σ grows,
    by data processing: more noise is a common Markov kernel on all three mixtures).

    As σ → 0 the Gaussians of Eq. 28 separate on the lattice ℕ·C and δ/pq = Σ_i [w_i − α′c̄₂ w_{i+1}]₊ with
    w = Bin(d, q). When this is below a target δ, Thm 4.1 certifies (ε, δ) with NO noise at all, which
    exposes that its reduction to the dataset a = 1 is not a worst case (e.g. 004 Section 6.2).
    """
    p, q, d = check_mechanism(participation, sampling_rate, local_dataset_size)
    return math.exp(paper_noiseless_log_delta(p, q, d, check_nonnegative("epsilon", epsilon)))


def paper_terms(
    *,
    participation: float,
    sampling_rate: float,
    local_dataset_size: int,
    noise_multiplier: float,
    epsilon: float,
) -> PaperTerms:
    """ε′, c̄₁, c̄₂, ε″, z* and δ of 004 Thm 4.1 (Eq. 5–7) as printed; ``z_star`` in units of C."""
    p, q, d, s = check_noisy_mechanism(participation, sampling_rate, local_dataset_size, noise_multiplier)
    return paper_log_delta(p, q, d, s, check_nonnegative("epsilon", epsilon))[1]


def eq28_delta(
    *,
    participation: float,
    sampling_rate: float,
    local_dataset_size: int,
    noise_multiplier: float,
    epsilon: float,
) -> float:
    """δ of 004 Eq. 28 by adaptive quadrature of pq∫ξ₂(z)[1 − e^{−h(z)}]₊dz (no closed form, no z* formula).

    This is the exact δ ("with x′ vs without") of the explicit dataset in which every record of client 1 has
    the gradient of x′ (norm C, "a = 1") and all other clients contribute 0. Slow; a cross-check of Eq. 6.
    """
    p, q, d, s = check_noisy_mechanism(participation, sampling_rate, local_dataset_size, noise_multiplier)
    eps = check_nonnegative("epsilon", epsilon)
    _, log_a1, log_a2 = coefficients(p, q, eps)
    i, logw, log_tail = binomial_weights(d, q)
    z_split = _z_star(i, logw, s, log_a1, log_a2)
    log_norm = -0.5 * math.log(2.0 * math.pi) - math.log(s)

    def integrand(z: float) -> float:
        log_xi2 = _lse(logw - 0.5 * ((z - i - 1.0) / s) ** 2) + log_norm
        h = _log_ratio(z, i, logw, s, log_a1, log_a2)
        return float(math.exp(log_xi2) * -math.expm1(-h)) if h > 0.0 else 0.0

    lo, hi = float(i[0]) + 1.0 - 40.0 * s, float(i[-1]) + 1.0 + 40.0 * s
    pieces = [(lo, min(z_split, hi)), (max(z_split, lo), hi)]
    total = 0.0
    for a, b in pieces:
        if b > a:
            total += integrate.quad(integrand, a, b, epsabs=0.0, epsrel=1e-11, limit=2000)[0]
    if hi < z_split:  # the crossing sits beyond the bulk: integrate its tail in a shifted variable
        total += integrate.quad(
            lambda t: integrand(z_split + t), 0.0, math.inf, epsabs=0.0, epsrel=1e-11, limit=2000
        )[0]
    return p * q * (total + math.exp(log_tail))
