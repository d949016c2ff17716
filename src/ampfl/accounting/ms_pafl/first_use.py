"""A tighter sound MS-PAFL analysis (label ``first-use``): nothing leaks before the record is first drawn.

Paper 000 (arXiv:2509.25906v1), record level, replace-one (the paper's Definitions 1–2), against the server
(participation public), private submodel persistent (Eq. 14). Proof (docs/ms_pafl.md, "First-use
analysis"): condition on the public participation pattern, with k participated rounds. Couple D and D' on
the position i of the changed record and on all randomness; let S be the first participated round whose
local draws contain i (data-independent; never with probability (1 − q)^k). Under both datasets the law is
(1 − γ_k) R + γ_k Σ_s a_s P_s (resp. Q_s), γ_k = 1 − (1 − q)^k, a_s = Pr(S = s | used): the runs agree until
S, and R (never used) is common. Given any past outputs, each participated round from S on is a mixture of
Gaussians with means in the ball of radius C, dominated by a Gaussian with sensitivity 2C and noise
multiplier z = σ/(2C); so P_s, Q_s and R differ pairwise by at most a Gaussian with sensitivity √m_s · 2C,
m_s = participated rounds from s on. Advanced joint convexity (Balle, Barthe, Gaboardi 2018, Thm 2) on the
common part R, then joint convexity over s, give

    δ(ε) ≤ Σ_k Bin(k; T, p) Σ_{m=1}^{k} (1 − q)^{k−m} q · δ_G(ε'_k; √m / z),
    ε'_k = log(1 + (e^ε − 1)/γ_k),

where δ_G(ε; μ) is the Gaussian δ at sensitivity/std ratio μ (Balle–Wang). For T = 1 it is the exact
δ of one freshly subsampled round (the ``amplified`` value, sound for the first round); for q = 1 it is the
recommended ``public-participation`` binomial sum, and it never exceeds that sum. Closed form
(``accountant`` = ``closed-form``), not a per-round event (S couples the rounds), so a run-level
accountant cannot compose it round by round. Provenance: [D]; audited on the
explicit counterexample of :mod:`ampfl.accounting.audit.ms_pafl`.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray
from scipy import special, stats

from ampfl.accounting._checks import (
    check_delta,
    check_int,
    check_nonnegative,
    check_positive,
    check_probability,
)
from ampfl.accounting._numerics import EPS, epsilon_from_delta_curve
from ampfl.accounting.gaussian import gaussian_log_delta_array

__all__ = [
    "ANALYSIS_FIRST_USE",
    "NOTE_FIRST_USE",
    "first_use_delta",
    "first_use_epsilon",
    "first_use_log_delta",
    "first_use_weights",
]

FloatArray = NDArray[np.float64]

ANALYSIS_FIRST_USE = "first-use"

NOTE_FIRST_USE = (
    "sound with the persistent private submodel, against the server (participation public): nothing leaks "
    "before the record's first draw; delta(eps) <= sum_k Bin(k;T,p) sum_m (1-q)^(k-m) q "
    "delta_G(eps'_k; sqrt(m)/z), eps'_k = log(1 + (e^eps - 1)/(1 - (1-q)^k)) (docs/ms_pafl.md); "
    "closed form, not composable round by round"
)

#: Binomial terms this far (in log) below the largest are bounded by their mass instead of computed.
_LOG_WINDOW = 80.0


def first_use_weights(*, participation: float, sampling_rate: float, rounds: int) -> FloatArray:
    """Pr(M = m) for m = 0..T: M = number of participated rounds from the record's first draw on (0: never).

    Pr(M = m) = q Σ_{k≥m} Bin(k; T, p)(1 − q)^{k−m} for m ≥ 1, by the backward recursion
    S_m = Bin(m; T, p) + (1 − q) S_{m+1} (positive terms only, no cancellation).
    """
    p = check_probability("participation", participation)
    q = check_probability("sampling_rate", sampling_rate)
    t = check_int("rounds", rounds)
    pmf = np.asarray(stats.binom.pmf(np.arange(t + 1), t, p), dtype=np.float64)
    tail = np.zeros(t + 2)
    for m in range(t, 0, -1):
        tail[m] = pmf[m] + (1.0 - q) * tail[m + 1]
    weights: FloatArray = q * tail[: t + 1]
    weights[0] = max(0.0, 1.0 - float(weights[1:].sum()))
    return weights


def first_use_log_delta(
    *, noise_multiplier: float, participation: float, sampling_rate: float, rounds: int, epsilon: float
) -> float:
    """log of the first-use bound on δ(ε) (rounded up). ``noise_multiplier`` is z = σ/(2C)."""
    z = check_positive("noise_multiplier", noise_multiplier)
    p = check_probability("participation", participation)
    q = check_probability("sampling_rate", sampling_rate)
    t = check_int("rounds", rounds)
    eps = check_nonnegative("epsilon", epsilon)
    ks = np.arange(1, t + 1)
    log_pmf = np.asarray(stats.binom.logpmf(ks, t, p), dtype=np.float64)
    keep = log_pmf >= log_pmf.max() - _LOG_WINDOW
    dropped = float(np.exp(log_pmf[~keep]).sum())  # their δ is at most their mass
    ks, log_pmf = ks[keep], log_pmf[keep]
    # γ_k = 1 − (1 − q)^k and ε'_k = log(1 + (e^ε − 1)/γ_k), rounded down by a few ulps (larger δ).
    log_gamma = np.log(-np.expm1(ks * math.log1p(-q))) if q < 1.0 else np.zeros(ks.size)
    if eps == 0.0:
        eps_k = np.zeros(ks.size)
    else:
        log_em1 = math.log(math.expm1(eps)) if eps < 30.0 else eps + math.log1p(-math.exp(-eps))
        eps_k = np.logaddexp(0.0, log_em1 - log_gamma) * (1.0 - 4.0 * EPS)
    # Pairs (k, m), m = 1..k: weight Bin(k) (1 − q)^{k−m} q, Gaussian with μ = √m / z at ε'_k.
    k_of = np.repeat(ks, ks)
    row = np.repeat(np.arange(ks.size), ks)
    m_of = np.arange(k_of.size) - np.repeat(np.cumsum(ks) - ks, ks) + 1
    log_w = log_pmf[row] + math.log(q) + (k_of - m_of) * (math.log1p(-q) if q < 1.0 else 0.0)
    if q >= 1.0:
        log_w = np.where(m_of == k_of, log_pmf[row], -np.inf)
    terms = log_w + gaussian_log_delta_array(np.sqrt(m_of) / z, eps_k[row])
    total = float(special.logsumexp(terms)) if terms.size else -math.inf
    total = float(np.logaddexp(total, math.log(dropped))) if dropped > 0.0 else total
    # Round-off of the log-sum-exp over many terms: a relative margin of (number of terms) · ulp.
    return total + 8.0 * EPS * (terms.size + 1) * (abs(total) + 1.0) if math.isfinite(total) else total


def first_use_delta(
    *, noise_multiplier: float, participation: float, sampling_rate: float, rounds: int, epsilon: float
) -> float:
    """δ at ``epsilon`` of the first-use bound (see module docstring)."""
    return math.exp(
        first_use_log_delta(
            noise_multiplier=noise_multiplier,
            participation=participation,
            sampling_rate=sampling_rate,
            rounds=rounds,
            epsilon=epsilon,
        )
    )


def first_use_epsilon(
    *, noise_multiplier: float, participation: float, sampling_rate: float, rounds: int, delta: float
) -> float:
    """Smallest ε (to 1e-9 relative, rounded up) with first-use δ(ε) ≤ ``delta``."""
    log_target = math.log(check_delta("delta", delta))

    def log_delta(e: float) -> float:
        return first_use_log_delta(
            noise_multiplier=noise_multiplier,
            participation=participation,
            sampling_rate=sampling_rate,
            rounds=rounds,
            epsilon=e,
        )

    # the upper end of the final bracket: δ(ε) ≤ delta holds there (never under-reports ε)
    return epsilon_from_delta_curve(
        log_delta, log_target, start=1e-3, max_epsilon=1e6, xtol=1e-14, rtol=1e-10, name="first_use_epsilon"
    )
