"""Auditor of MS-PAFL with a persistent private submodel (paper 000, Eq. 14): exact δ(ε) of two datasets.

The counterexample to local-sampling amplification with persistent state. Mechanism (arXiv:2509.25906v1,
Algorithm 1, one client, p = 1, T = 2 rounds): the model is ``a·z + b`` with squared loss ½(a z + b − y)²;
``a`` is the private submodel (never reset, Eq. 14) and ``b`` the public one. Each round the client draws one
record (z, y) uniformly from its n records (q = 1/n, Eq. 9 with Q = b = 1), takes one SGD step at learning
rate 1 from (a, b̄) where b̄ is the global public model, and uploads clip_C(b) + N(0, σ²) (Eqs. 11–12). At
learning rate 1 the public step gives b = y − a z, which does not depend on b̄ (so the noisy global model
never enters a mean), and a ← a − (a z + b̄ − y) z, which matters only for round 3 on. Hence the law of the
two uploads (Y₁, Y₂) is an exact finite mixture of N((m₁, m₂), σ² I₂) over the n² draw sequences
(:func:`upload_mixture`).

Counterexample (:data:`COUNTEREXAMPLE_D`, :data:`COUNTEREXAMPLE_D_PRIME`): D = twelve copies of (0.5, −2)
plus the target (−0.5, 16); D' replaces the target by a thirteenth copy; a₀ = b₀ = 0, C = 1, ε_ℓ = 1,
δ_ℓ = 1e-4 (z = σ/(2C) = 4.344). Round 1 uploads −C (copy) or +C (target). If the target is drawn in round
1, a jumps to −8 and round 2's upload is +C whichever record is drawn; otherwise round 2 is −C or +C as in
round 1. So under D: (12/13)² N(−C, −C) + (12/169) N(−C, +C) + (1/13) N(+C, +C); under D': N(−C, −C).
A record not drawn in round 2 still changes round 2's upload, so amplification by subsampling per round
(the ``amplified`` analysis) is unsound here: it claims ε = 0.0817 at δ = 4.03e-5, while the exact δ at
that ε is 8.10e-4 and the exact ε at that δ is 0.151.

Numerics. δ = ∫∫ (P − e^ε Q)₊ dy, both orders (replace-one is symmetric). For fixed y₁ the integrand is a
signed 1-D Gaussian mixture in y₂ whose sign changes are roots of an exponential sum (at most as many as the
sign changes of its coefficients, Descartes' rule): closed form for two terms, else a scan of 8 points per σ
(bracketing outwards beyond it) refined with ``brentq``; the positive part between them is a sum of Φ-masses.
The outer integral over y₁ is ``scipy.integrate.quad`` over the means ± 14σ, with breakpoints where a
y₂-coefficient changes sign (the only points where the inner integral is not smooth). The result is exact
up to the quadrature error (about 1e-12 absolute here). Being the δ of two explicit datasets, it is a
*lower* bound on the mechanism's δ(ε): an analysis claiming less is wrong. Provenance: [C].
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import integrate, optimize, special

from ampfl.accounting._checks import NumericalError, check_delta, check_nonnegative, check_positive
from ampfl.accounting._numerics import epsilon_from_delta_curve
from ampfl.accounting.ms_pafl import (
    amplified_epsilon,
    first_use_delta,
    first_use_epsilon,
    ldp_noise_multiplier,
    public_participation_delta,
    public_participation_epsilon,
)

__all__ = [
    "COUNTEREXAMPLE_D",
    "COUNTEREXAMPLE_D_PRIME",
    "MSPAFLAudit",
    "UploadMixture",
    "audit_ms_pafl_counterexample",
    "exact_delta",
    "exact_epsilon",
    "hockey_stick",
    "upload_mixture",
]

FloatArray = NDArray[np.float64]
Record = tuple[float, float]

#: D of the counterexample: twelve copies of (z, y) = (0.5, −2) and the target (−0.5, 16).
COUNTEREXAMPLE_D: tuple[Record, ...] = ((0.5, -2.0),) * 12 + ((-0.5, 16.0),)
#: D': the target replaced by a thirteenth copy of (0.5, −2).
COUNTEREXAMPLE_D_PRIME: tuple[Record, ...] = ((0.5, -2.0),) * 13

_RANGE_SIGMAS = 14.0  # integrate over the means ± 14σ (the mass outside is below 1e-43)
_SCAN_PER_SIGMA = 8


@dataclass(frozen=True, slots=True)
class UploadMixture:
    """Law of the two rounds' clipped upload means: ``weights[k]`` on ``means[k] = (m₁, m₂)`` (merged)."""

    weights: FloatArray
    means: FloatArray


def _clip(value: float, clip: float) -> float:
    """Eq. (11) in one dimension: b / max(1, |b|/C)."""
    return value / max(1.0, abs(value) / clip)


def upload_mixture(
    records: Sequence[Record], *, clip: float = 1.0, private_init: float = 0.0, public_init: float = 0.0
) -> UploadMixture:
    """Exact law of the upload means of the two-round mechanism of the module docstring.

    Args:
        records: the client's records (z, y); each round draws one uniformly (q = 1/n).
        clip: C of Eq. (11).
        private_init: a₀ (the private submodel at the start of round 1).
        public_init: b₀ (the public submodel at the start of round 1).
    """
    c = check_positive("clip", clip)
    if not records:
        raise ValueError("records must be a non-empty list of (z, y) pairs. Found [].")
    n = len(records)
    mass: dict[tuple[float, float], float] = {}
    for z1, y1 in records:
        residual = private_init * z1 + public_init - y1
        a1 = private_init - residual * z1
        m1 = _clip(public_init - residual, c)
        for z2, y2 in records:
            m2 = _clip(y2 - a1 * z2, c)  # b̄ − (a₁z + b̄ − y): the global model cancels at learning rate 1
            mass[(m1, m2)] = mass.get((m1, m2), 0.0) + 1.0 / (n * n)
    keys = sorted(mass)
    return UploadMixture(np.asarray([mass[k] for k in keys]), np.asarray(keys, dtype=np.float64))


def _gauss_mass(left: float, right: float, mu: FloatArray, s: float) -> FloatArray:
    """P(left < N(mu, s²) < right) per component, using the tail on the far side (no 1 − Φ cancellation)."""
    a, b = (left - mu) / s, (right - mu) / s
    upper = a > 0.0
    return np.asarray(
        np.where(upper, special.ndtr(-a) - special.ndtr(-b), special.ndtr(b) - special.ndtr(a)),
        dtype=np.float64,
    )


def _merged(coef: FloatArray, mu: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Sum the coefficients of equal means; sorted by mean; zero coefficients dropped."""
    means, inverse = np.unique(mu, return_inverse=True)
    total = np.asarray(np.bincount(inverse, weights=coef, minlength=means.size), dtype=np.float64)
    keep = total != 0.0
    return total[keep], means[keep]


def _lse_rows(x: FloatArray) -> FloatArray:
    """log Σ_j exp(x_ij) per row (finite entries; a plain numpy log-sum-exp, much cheaper than scipy's)."""
    top = x.max(axis=1)
    return np.asarray(top + np.log(np.exp(x - top[:, None]).sum(axis=1)), dtype=np.float64)


def _roots(coef: FloatArray, mu: FloatArray, s: float) -> list[float]:
    """Sign changes of Σ_j coef_j N(y; mu_j, s²) (``mu`` sorted, distinct, ``coef`` non-zero), sorted.

    Two terms of opposite signs: the root of a linear equation. Otherwise the sign of the sum is that of
    L(y) = log A(y) − log B(y) (positive and negative parts by log-sum-exp, finite everywhere); roots of L are
    found on a scan of 8 points per s over the means ± 14 s and refined by ``brentq``, and a root outside the
    scan (very unequal coefficients) is bracketed by doubling outwards until L has the sign of the extreme
    coefficient, which dominates as y → ±∞.
    """
    if np.all(coef > 0.0) or np.all(coef < 0.0):
        return []
    log_abs = np.log(np.abs(coef))
    if coef.size == 2:
        return [float(0.5 * (mu[0] + mu[1]) + s * s * (log_abs[1] - log_abs[0]) / (mu[0] - mu[1]))]
    pos = coef > 0.0

    def ell_many(y: FloatArray) -> FloatArray:
        e = log_abs[None, :] - 0.5 * ((y[:, None] - mu[None, :]) / s) ** 2
        return _lse_rows(e[:, pos]) - _lse_rows(e[:, ~pos])

    def ell(y: float) -> float:
        return float(ell_many(np.asarray([y]))[0])

    lo, hi = float(mu[0] - _RANGE_SIGMAS * s), float(mu[-1] + _RANGE_SIGMAS * s)
    grid = np.linspace(lo, hi, int((hi - lo) / s * _SCAN_PER_SIGMA) + 2)
    values = ell_many(grid)
    roots = [
        float(optimize.brentq(ell, grid[i], grid[i + 1], xtol=1e-13 * s))
        for i in np.flatnonzero(np.sign(values[:-1]) * np.sign(values[1:]) < 0)
    ]
    for end, direction, sign in ((lo, -1.0, np.sign(coef[0])), (hi, 1.0, np.sign(coef[-1]))):
        if np.sign(ell(end)) != sign:
            step = s
            while np.sign(ell(end + direction * step)) != sign:
                step *= 2.0
                if step > 1e6 * s:
                    raise NumericalError("audit: cannot bracket a sign change of the integrand.")
            a, b = sorted((end, end + direction * step))
            roots.append(float(optimize.brentq(ell, a, b, xtol=1e-13 * s)))
    return sorted(roots)


def _positive_part(coef: FloatArray, mu: FloatArray, s: float) -> float:
    """∫ (Σ_j coef_j N(y; mu_j, s²))₊ dy: Φ-masses between the sign changes of :func:`_roots`."""
    nz = coef != 0.0
    coef, mu = coef[nz], mu[nz]
    if coef.size == 0 or np.all(coef < 0.0):
        return 0.0
    if np.all(coef > 0.0):
        return float(coef.sum())
    cuts = [-math.inf, *_roots(coef, mu, s), math.inf]
    total = 0.0
    for left, right in itertools.pairwise(cuts):
        if math.isinf(left):
            positive = coef[0] > 0.0
        elif math.isinf(right):
            positive = coef[-1] > 0.0
        else:
            mid = 0.5 * (left + right)
            positive = float(np.sum(coef * np.exp(-0.5 * ((mid - mu) / s) ** 2))) > 0.0
        if positive:
            total += float(np.sum(coef * _gauss_mass(left, right, mu, s)))
    return max(total, 0.0)


def hockey_stick(p: UploadMixture, q: UploadMixture, *, noise_std: float, epsilon: float) -> float:
    """H_{e^ε}(P ‖ Q) = ∫∫ (P − e^ε Q)₊ for the uploads' laws P, Q with noise N(0, noise_std² I₂).

    Inner integral over y₂ in closed form (:func:`_positive_part`); outer over y₁ by ``quad``, with
    breakpoints where a y₂-coefficient changes sign (the only places the inner integral is not smooth).
    """
    s = check_positive("noise_std", noise_std)
    eps = check_nonnegative("epsilon", epsilon)
    w = np.concatenate([p.weights, -math.exp(eps) * q.weights])
    means = np.concatenate([p.means, q.means])
    mu2 = np.unique(means[:, 1])
    index2 = np.searchsorted(mu2, means[:, 1])
    m1 = means[:, 0]
    kinks = set(m1.tolist())
    for j in range(mu2.size):
        coef_j, mu_j = _merged(w[index2 == j], m1[index2 == j])
        kinks.update(_roots(coef_j, mu_j, s))

    def inner(y1: float) -> float:
        dens = w * np.exp(-0.5 * ((y1 - m1) / s) ** 2) / (s * math.sqrt(2.0 * math.pi))
        coef = np.asarray(np.bincount(index2, weights=dens, minlength=mu2.size), dtype=np.float64)
        return _positive_part(coef, mu2, s)

    lo, hi = float(m1.min() - _RANGE_SIGMAS * s), float(m1.max() + _RANGE_SIGMAS * s)
    points = sorted(k for k in kinks if lo < k < hi)
    value, _ = integrate.quad(inner, lo, hi, points=points, epsabs=1e-13, epsrel=1e-10, limit=400)
    return max(float(value), 0.0)


def exact_delta(d: UploadMixture, d_prime: UploadMixture, *, noise_std: float, epsilon: float) -> float:
    """Exact δ(ε) of the pair: max of both orders (replace-one neighbours)."""
    return max(
        hockey_stick(d, d_prime, noise_std=noise_std, epsilon=epsilon),
        hockey_stick(d_prime, d, noise_std=noise_std, epsilon=epsilon),
    )


def exact_epsilon(d: UploadMixture, d_prime: UploadMixture, *, noise_std: float, delta: float) -> float:
    """Smallest ε with :func:`exact_delta` ≤ ``delta`` (root of the decreasing δ(ε), to 1e-9 relative)."""
    dlt = check_delta("delta", delta)
    return epsilon_from_delta_curve(
        lambda e: exact_delta(d, d_prime, noise_std=noise_std, epsilon=e),
        dlt,
        start=0.01,
        max_epsilon=1e3,
        xtol=1e-12,
        rtol=1e-10,
        name="exact_epsilon",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class MSPAFLAudit:
    """Result of :func:`audit_ms_pafl_counterexample`: each analysis' claim against the exact δ and ε.

    ``claimed_epsilon`` is the ``amplified`` analysis' ε at ``claimed_delta``; ``exact_delta`` is the true
    δ of the two datasets at ``claimed_epsilon`` and ``exact_epsilon`` the true ε at ``claimed_delta``.
    ``recommended_*`` and ``first_use_*`` are the sound analyses' δ at ``claimed_epsilon`` and ε at
    ``claimed_delta``; an analysis is ``*_violated`` when its δ lies below the exact δ at the same ε.
    """

    noise_multiplier: float
    sampling_rate: float
    rounds: int
    claimed_epsilon: float
    claimed_delta: float
    exact_delta: float
    exact_epsilon: float
    recommended_delta: float
    recommended_epsilon: float
    first_use_delta: float
    first_use_epsilon: float
    amplified_violated: bool
    recommended_violated: bool
    first_use_violated: bool


def audit_ms_pafl_counterexample(
    *,
    eps_local: float = 1.0,
    delta_local: float = 1e-4,
    claimed_delta: float = 4.03e-5,
    clip: float = 1.0,
    accountant: str = "pld",
    records: Sequence[Record] = COUNTEREXAMPLE_D,
    neighbour_records: Sequence[Record] = COUNTEREXAMPLE_D_PRIME,
) -> MSPAFLAudit:
    """Audit the MS-PAFL analyses on the two-round example (defaults: the counterexample of docs/ms_pafl.md).

    p = 1, T = 2, q = 1/n with n = len(records); z = σ/(2C) from Lemma 1 for (ε_ℓ, δ_ℓ).
    """
    if len(records) != len(neighbour_records):
        raise ValueError("neighbour_records must have as many records as records (replace-one neighbours).")
    z = ldp_noise_multiplier(eps_local=eps_local, delta_local=delta_local)
    c = check_positive("clip", clip)
    dlt = check_delta("claimed_delta", claimed_delta)
    q, t = 1.0 / len(records), 2
    law_d = upload_mixture(records, clip=c)
    law_d_prime = upload_mixture(neighbour_records, clip=c)
    noise_std = 2.0 * c * z
    claimed_eps = amplified_epsilon(
        participation=1.0, sampling_rate=q, noise_multiplier=z, rounds=t, delta=dlt, accountant=accountant
    )
    true_delta = exact_delta(law_d, law_d_prime, noise_std=noise_std, epsilon=claimed_eps)
    rec_delta = public_participation_delta(
        participation=1.0, noise_multiplier=z, rounds=t, epsilon=claimed_eps, accountant=accountant
    )
    fu_delta = first_use_delta(
        noise_multiplier=z, participation=1.0, sampling_rate=q, rounds=t, epsilon=claimed_eps
    )
    slack = 1e-10  # above the quadrature error of exact_delta
    return MSPAFLAudit(
        noise_multiplier=z,
        sampling_rate=q,
        rounds=t,
        claimed_epsilon=claimed_eps,
        claimed_delta=dlt,
        exact_delta=true_delta,
        exact_epsilon=exact_epsilon(law_d, law_d_prime, noise_std=noise_std, delta=dlt),
        recommended_delta=rec_delta,
        recommended_epsilon=public_participation_epsilon(
            participation=1.0, noise_multiplier=z, rounds=t, delta=dlt, accountant=accountant
        ),
        first_use_delta=fu_delta,
        first_use_epsilon=first_use_epsilon(
            noise_multiplier=z, participation=1.0, sampling_rate=q, rounds=t, delta=dlt
        ),
        amplified_violated=true_delta > dlt + slack,
        recommended_violated=true_delta > rec_delta + slack,
        first_use_violated=true_delta > fu_delta + slack,
    )
