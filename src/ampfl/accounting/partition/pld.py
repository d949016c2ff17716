"""Exact privacy-loss distributions of model splitting into d ≤ 2 sub-models and of dropout (paper 002).

Model splitting (002 Alg. 1, Thms 3.4/3.5): each unit's clipped gradient (norm ≤ C) lands on one of d disjoint
blocks, chosen uniformly and in secret; N(0, σ²I) is added to the sum. Removing a unit changes the output
distribution from P = (1/d) Σ_j N(C·v_j, σ²I) (v_j unit vectors in the d mutually orthogonal blocks) to
Q = N(0, σ²I), whatever the other units do (joint convexity and translation invariance). Norms c_j < C are
dominated: the coordinate-wise kernel x_j ↦ ρ_j x_j + √(1 − ρ_j²)·ξ_j (ρ_j = c_j / C) maps Q to itself and
N(C v_j) to N(c_j v_j), so (P, Q) is a dominating pair of the mechanism (add and remove).

For d = 2 the pair is exactly two-dimensional, and the 45° rotation u = (x₁ + x₂)/√2, w = (x₁ − x₂)/√2 makes
it a product: P = N(a, σ²) ⊗ ½[N(a, σ²) + N(−a, σ²)], Q = N(0, σ²) ⊗ N(0, σ²) with a = C/√2. Its PLD is the
Gaussian PLD at sensitivity a composed with the PLD of the symmetric mixture :func:`symmetric_mixture_pld`,
which is built here from its exact distribution: the privacy loss is a monotone function of |w|
(ln cosh), so the probability of each loss bucket is a difference of Gaussian tail probabilities. Buckets
are rounded up (pessimistic, as dp-accounting's privacy buckets): every ε and δ is an upper bound, loose by
at most the discretisation interval per composition; the tail beyond |w| with probability < 1e-22 goes to
the infinity mass (remove) or to the lowest bucket (add), both pessimistic.

Dropout at rate 1/2 (002 Thm 3.7, Alg. 2) is the d = 2 split. A partial split (002 §3.2.2) adds an
independent Gaussian mechanism for the non-split part (its own clip norm and noise): the PLDs compose.
d ≥ 3 has no product form: :mod:`ampfl.accounting.partition.allocation_pld` builds its PLD by log-sum
convolution (``PLD_MAX_SUBMODELS`` is the largest d with the exact form here).
"""

from __future__ import annotations

import math

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import special

from ampfl.accounting._checks import check_int, check_positive
from ampfl.accounting.pld_grid import cell_masses

__all__ = ["PLD_MAX_SUBMODELS", "dropout_pld", "model_split_pld", "symmetric_mixture_pld"]

#: Largest number of sub-models with an exact PLD (d ≤ 2: product form after a rotation).
PLD_MAX_SUBMODELS = 2

#: Probability of |w| beyond the truncation point of the loss grid (sent to the pessimistic side).
_TAIL = 1e-22
#: Most PMF points of one direction (memory guard; about 8 bytes each).
_MAX_POINTS = 20_000_000


def _arccosh_exp(y: np.ndarray) -> np.ndarray:
    """arccosh(exp(y)) for y ≥ 0, without overflow: y + ln(1 + √(1 − e^{−2y}))."""
    y = np.maximum(y, 0.0)
    return y + np.log1p(np.sqrt(-np.expm1(-2.0 * y)))


def _log_cosh(x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    return x + np.log1p(np.exp(-2.0 * x)) - math.log(2.0)


def _check_grid(width: float, interval: float) -> None:
    from ampfl.accounting._checks import NumericalError

    if not width / interval <= _MAX_POINTS:
        raise NumericalError(
            f"noise_multiplier too small for a PLD with discretisation {interval:g} "
            f"(about {width / interval:.3g} points)."
        )


def _remove_pmf(shift: float, sigma: float, interval: float) -> pld_pmf.DensePLDPmf:
    """w ~ ½N(a, σ²) + ½N(−a, σ²), loss ln cosh(a w/σ²) − a²/(2σ²), rounded up to the grid."""
    a, s2, h = shift, sigma * sigma, interval
    b = a * a / (2.0 * s2)

    def tail(t: np.ndarray) -> np.ndarray:  # P(|w| > t) under the mixture
        return np.asarray(special.ndtr((a - t) / sigma) + special.ndtr((-a - t) / sigma))

    t_max = a + sigma * 10.0  # tail(t_max) <= 2 * Phi(-10) ~ 1.5e-23
    while float(tail(np.array(t_max))) > _TAIL:
        t_max += sigma
    top = float(_log_cosh(np.array(a * t_max / s2))) - b
    _check_grid(top + b, h)
    i0, i1 = math.ceil(-b / h), max(math.ceil(-b / h), math.ceil(top / h))
    losses = np.arange(i0, i1 + 1, dtype=float) * h
    t = np.minimum(s2 / a * _arccosh_exp(losses + b), t_max)
    t[-1] = t_max
    return pld_pmf.DensePLDPmf(h, i0, cell_masses(tail(t), survival=True), float(tail(np.array(t_max))), True)


def _add_pmf(shift: float, sigma: float, interval: float) -> pld_pmf.DensePLDPmf:
    """w ~ N(0, σ²), loss a²/(2σ²) − ln cosh(a w/σ²), rounded up (the low tail into the lowest bucket)."""
    a, s2, h = shift, sigma * sigma, interval
    b = a * a / (2.0 * s2)

    def tail(t: np.ndarray) -> np.ndarray:  # P(|w| > t) under N(0, σ²)
        return np.asarray(special.erfc(t / (sigma * math.sqrt(2.0))))

    t_max = sigma * 10.0
    while float(tail(np.array(t_max))) > _TAIL:
        t_max += sigma
    low = b - float(_log_cosh(np.array(a * t_max / s2)))
    _check_grid(b - low, h)
    j0, j1 = math.floor(low / h), math.ceil(b / h)
    losses = np.arange(j0, j1 + 1, dtype=float) * h
    # |w| at which the loss equals each grid value (0 where the value is at or above the maximum b).
    t = s2 / a * _arccosh_exp(b - losses)
    t[losses >= b] = 0.0
    # P(loss <= grid value) = P(|w| >= t); the low tail joins the lowest bucket, none lies above the top
    return pld_pmf.DensePLDPmf(h, j0, cell_masses(tail(t)), 0.0, True)


def symmetric_mixture_pld(
    *, shift: float, noise_multiplier: float, value_discretization_interval: float = 1e-4
) -> pld_lib.PrivacyLossDistribution:
    """Pessimistic PLD of ½N(a, σ²) + ½N(−a, σ²) (one unit present) vs N(0, σ²) (absent), both directions.

    Args:
        shift: a > 0, in units of the clip norm.
        noise_multiplier: σ / C > 0.
        value_discretization_interval: the loss grid's spacing.
    """
    a = check_positive("shift", shift)
    sigma = check_positive("noise_multiplier", noise_multiplier)
    h = check_positive("value_discretization_interval", value_discretization_interval)
    return pld_lib.PrivacyLossDistribution(_remove_pmf(a, sigma, h), _add_pmf(a, sigma, h))


def gaussian_pld(sensitivity: float, sigma: float, h: float) -> pld_lib.PrivacyLossDistribution:
    """dp-accounting's pessimistic PLD of the Gaussian mechanism (noise std ``sigma``, ``sensitivity``) on a
    grid of ``h``, its size checked first (:func:`ampfl.accounting.pld_grid.check_pld_size`)."""
    from ampfl.accounting.pld_grid import check_pld_size

    check_pld_size(sigma / sensitivity, h)
    return pld_lib.from_gaussian_mechanism(
        standard_deviation=sigma,
        sensitivity=sensitivity,
        pessimistic_estimate=True,
        value_discretization_interval=h,
    )


def model_split_pld(
    *,
    num_submodels: int,
    noise_multiplier: float,
    nonsplit_noise_multiplier: float | None = None,
    value_discretization_interval: float = 1e-4,
) -> pld_lib.PrivacyLossDistribution:
    """Pessimistic PLD of one step of model splitting into d ≤ 2 sub-models (002 Thm 3.4's mechanism).

    Args:
        num_submodels: d ∈ {1, 2} (d = 1 is the Gaussian mechanism).
        noise_multiplier: σ_s / C_s of the split part.
        nonsplit_noise_multiplier: σ_ns / C_ns of a non-split part (002 §3.2.2), or None.
        value_discretization_interval: the loss grid's spacing.

    Raises:
        ValueError: d outside [1, 2] (use the RDP accountant for more sub-models).
    """
    d = check_int("num_submodels", num_submodels, minimum=1, maximum=PLD_MAX_SUBMODELS)
    z = check_positive("noise_multiplier", noise_multiplier)
    h = check_positive("value_discretization_interval", value_discretization_interval)
    from ampfl.accounting.pld_grid import dp_accounting_guard

    with dp_accounting_guard("model-split PLD"):
        if d == 1:
            out = gaussian_pld(1.0, z, h)
        else:
            a = 1.0 / math.sqrt(2.0)
            mix = symmetric_mixture_pld(shift=a, noise_multiplier=z, value_discretization_interval=h)
            out = gaussian_pld(a, z, h).compose(mix)
        if nonsplit_noise_multiplier is not None:
            z_ns = check_positive("nonsplit_noise_multiplier", nonsplit_noise_multiplier)
            out = out.compose(gaussian_pld(1.0, z_ns, h))
    return out


def dropout_pld(
    *,
    noise_multiplier: float,
    nonsplit_noise_multiplier: float | None = None,
    value_discretization_interval: float = 1e-4,
) -> pld_lib.PrivacyLossDistribution:
    """Pessimistic PLD of one dropout step at rate 1/2 (002 Thm 3.7: the d = 2 split)."""
    return model_split_pld(
        num_submodels=2,
        noise_multiplier=noise_multiplier,
        nonsplit_noise_multiplier=nonsplit_noise_multiplier,
        value_discretization_interval=value_discretization_interval,
    )
