"""RDP of the Gaussian and the Poisson-subsampled Gaussian at integer orders. The RDP → (ε, δ) conversion
(Prop. 2.3 below) is the RDP accountant's, in :mod:`ampfl.accounting.accountants.rdp_conversion`, and is
re-exported here.

References:
    - Paper 002 (Dong, Chen, Özgür), Theorem 3.11 (Zhu & Wang 2019): RDP of Poisson subsampling. The exact
      integer-α formula for the subsampled Gaussian (Mironov, Talwar & Zhang 2019, "Rényi differential
      privacy of the sampled Gaussian mechanism", Sec. 3.3) is RECOVERED_MATH.md §1.12, second form::

          ε'(α) = 1/(α−1) · log Σ_{ℓ=0}^{α} C(α, ℓ) (1−γ)^{α−ℓ} γ^ℓ exp((ℓ² − ℓ) / (2 z²))

      It equals dp-accounting's ``_compute_log_a_int`` / (α − 1). Provenance: [V] (standard).
    - Zhu & Wang 2019, general upper bound for any mechanism with integer-order RDP ε(ℓ)
      (RECOVERED_MATH §1.12 first form, [I]: the wording of the cited theorem was not recovered)::

          ε'(α) ≤ 1/(α−1) · log[(1−γ)^{α−1}(αγ−γ+1) + C(α,2) γ² (1−γ)^{α−2} e^{ε(2)}
                                + 3 Σ_{ℓ=3}^{α} C(α,ℓ) (1−γ)^{α−ℓ} γ^ℓ e^{(ℓ−1) ε(ℓ)}]
    - Paper 002, Proposition 2.3 as written in RECOVERED_MATH §1.2 [I, standard form; Canonne, Kamath &
      Steinke 2020 Prop. 12, Asoodeh et al. 2020]::

          ε_DP = ε + log((α − 1)/α) − (log δ + log α)/(α − 1)

      minimised over the orders. Its inverse gives δ(ε). Like dp-accounting, both directions also use the
      total-variation bound δ ≤ TV ≤ sqrt(1 − e^{−KL}) ≤ sqrt(1 − e^{−D_α}) (Bretagnolle–Huber; KL ≤ D_α),
      which only matters when δ is large or the RDP tiny (an empty ledger gives ε = 0).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence

import numpy as np
from scipy import special

from ampfl.accounting._checks import (
    NumericalError,
    check_int,
    check_orders,
    check_positive,
    check_probability,
)
from ampfl.accounting._numerics import EPS as _EPS
from ampfl.accounting._numerics import log_comb_row, log_expm1
from ampfl.accounting.accountants.rdp_conversion import (
    DeltaAtOrder,
    EpsilonAtOrder,
    delta_from_rdp,
    epsilon_from_rdp,
)
from ampfl.accounting.orders import CHEAP_ORDERS

__all__ = [
    "DEFAULT_ORDERS",
    "MAX_ORDER",
    "DeltaAtOrder",
    "EpsilonAtOrder",
    "delta_from_rdp",
    "epsilon_from_rdp",
    "rdp_gaussian",
    "rdp_poisson_gaussian",
    "rdp_poisson_subsampled_general",
]

#: Orders ≤ 256 of the one grid (:mod:`ampfl.accounting.orders`), the default of the α²-cost kernels.
DEFAULT_ORDERS: tuple[int, ...] = CHEAP_ORDERS

#: Largest order the binomial-sum kernels accept (their cost and memory grow linearly in α).
MAX_ORDER = 65_536


def _check_sum_orders(orders: Iterable[object]) -> np.ndarray:
    alphas = check_orders("orders", orders)
    if int(alphas.max()) > MAX_ORDER:
        raise ValueError(f"orders must be integers in [2, {MAX_ORDER}]. Found {int(alphas.max())}.")
    return alphas


def rdp_gaussian(*, orders: Iterable[object], noise_multiplier: float, steps: int = 1) -> np.ndarray:
    """RDP of ``steps`` Gaussian mechanisms, noise multiplier z (σ / L2 sensitivity): ``steps·α/(2z²)``."""
    alphas = check_orders("orders", orders).astype(np.float64)
    z = check_positive("noise_multiplier", noise_multiplier)
    t = check_int("steps", steps, minimum=1)
    out = t * alphas / (2.0 * z * z)
    if not np.all(np.isfinite(out)):
        raise NumericalError("Gaussian RDP overflowed; noise_multiplier is too small.")
    return np.asarray(out, dtype=np.float64)


_Ragged = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@functools.lru_cache(maxsize=8)
def _ragged_terms(alphas: tuple[int, ...]) -> _Ragged:
    """(α, ℓ, segment starts, segment ids, log C(α, ℓ)) for ℓ = 2..α of every order, concatenated."""
    sizes = [a - 1 for a in alphas]
    a = np.repeat(np.asarray(alphas, dtype=np.float64), sizes)
    ell = np.concatenate([np.arange(2, x + 1, dtype=np.float64) for x in alphas])
    starts = np.concatenate([[0], np.cumsum(sizes[:-1])]).astype(np.int64)
    seg = np.repeat(np.arange(len(alphas)), sizes)
    log_comb = special.gammaln(a + 1.0) - special.gammaln(ell + 1.0) - special.gammaln(a - ell + 1.0)
    return a, ell, starts, seg, np.asarray(log_comb, dtype=np.float64)


def rdp_poisson_gaussian(
    *, orders: Iterable[object], sampling_rate: float, noise_multiplier: float, steps: int = 1
) -> np.ndarray:
    """Exact integer-order RDP of ``steps`` Poisson-subsampled Gaussian mechanisms (002 Thm 3.11 comparison).

    Args:
        orders: integer orders α ≥ 2.
        sampling_rate: γ in [0, 1]; γ = 0 gives 0, γ = 1 the plain Gaussian.
        noise_multiplier: z = σ / C > 0.
        steps: number of composed steps T ≥ 1.

    Returns:
        Per-order RDP of the whole run (rounded up by a bound on the round-off).
    """
    alphas = _check_sum_orders(orders)
    gamma = check_probability("sampling_rate", sampling_rate, allow_zero=True)
    z = check_positive("noise_multiplier", noise_multiplier)
    t = check_int("steps", steps, minimum=1)
    if gamma == 0.0:
        return np.zeros(alphas.size)
    if gamma == 1.0:
        return rdp_gaussian(orders=alphas, noise_multiplier=z, steps=t)
    log_g, log_1mg = math.log(gamma), math.log1p(-gamma)
    if 2.0 * z * z == 0.0:
        raise NumericalError(f"noise_multiplier {z!r} is too small: 1/(2 z²) overflows.")
    inv2z2 = 1.0 / (2.0 * z * z)
    # A = E[exp(L(L−1)/(2z²))], L ~ Bin(α, γ); A − 1 = Σ_{ℓ≥2} pmf(ℓ) expm1(...) has positive terms only, so
    # log A = log1p(A − 1) keeps full relative precision even when A − 1 is tiny. All orders in one ragged
    # pass (segments ℓ = 2..α per order), rounded up as :func:`~ampfl.accounting._numerics.log1p_of_logsum`.
    a, ell, starts, seg, log_comb = _ragged_terms(tuple(int(x) for x in alphas))
    ells = np.arange(int(alphas.max()) + 1, dtype=np.float64)
    log_growth = log_expm1((ells * ells - ells) * inv2z2)
    terms = log_comb + (a - ell) * log_1mg + ell * log_g + log_growth[ell.astype(np.int64)]
    top = np.maximum.reduceat(terms, starts)
    # A huge z: every term of an order underflows (log expm1(ℓ(ℓ−1)/(2z²)) = −inf), so log A is below the
    # smallest positive double; that order's RDP is then reported as that smallest double (below).
    under = np.isneginf(top)
    top = np.where(under, 0.0, top)
    w = np.exp(terms - top[seg])
    total = np.add.reduceat(w, starts)
    safe = np.where(under, 1.0, total)
    lse = np.where(under, -np.inf, top + np.log(safe))
    spread = np.where(
        under,
        0.0,
        np.add.reduceat(w * (np.abs(np.where(np.isneginf(terms), 0.0, terms)) + 1.0), starts) / safe,
    )
    value = np.logaddexp(0.0, lse)
    shrink = np.exp(np.minimum(lse, 0.0) - np.logaddexp(0.0, np.minimum(lse, 0.0)))
    err = 8.0 * _EPS * (spread * shrink + value + shrink)
    af = alphas.astype(np.float64)
    log_a = value + err * np.sqrt(af + 1.0)  # (number of terms α − 1) + 2
    out = np.asarray(t * np.maximum(log_a, 0.0) / (af - 1.0), dtype=np.float64)
    out[under] = np.nextafter(0.0, 1.0)  # an upper bound of a positive value below every double
    if not np.all(np.isfinite(out)):
        raise NumericalError("Poisson-subsampled Gaussian RDP overflowed; noise_multiplier is too small.")
    return out


def rdp_poisson_subsampled_general(
    *, orders: Iterable[object], sampling_rate: float, base_rdp: Sequence[float] | np.ndarray, steps: int = 1
) -> np.ndarray:
    """Zhu & Wang (2019) general upper bound for Poisson subsampling of any RDP mechanism [I].

    Args:
        orders: integer orders α ≥ 2.
        sampling_rate: γ in [0, 1].
        base_rdp: RDP ε(ℓ) of the base mechanism at every integer order ℓ = 2, 3, ..., max(orders), in that
            order (``base_rdp[ℓ - 2]``). It must bound both neighbouring directions.
        steps: number of composed steps.

    Returns:
        Per-order RDP of ``steps`` subsampled mechanisms (the factor 3 of the general bound is kept).
    """
    alphas = _check_sum_orders(orders)
    gamma = check_probability("sampling_rate", sampling_rate, allow_zero=True)
    t = check_int("steps", steps, minimum=1)
    base = np.asarray(base_rdp, dtype=np.float64)
    a_max = int(alphas.max())
    if base.ndim != 1 or base.size < a_max - 1:
        raise ValueError(
            f"base_rdp must list the RDP at every integer order 2..{a_max}. Found {base.size} values."
        )
    if not np.all(base >= 0.0) or np.any(np.isnan(base)):
        raise ValueError("base_rdp must be non-negative numbers.")
    if gamma == 0.0:
        return np.zeros(alphas.size)
    if gamma == 1.0:
        return np.asarray(t * base[alphas - 2], dtype=np.float64)
    log_g, log_1mg = math.log(gamma), math.log1p(-gamma)
    out = np.empty(alphas.size)
    for idx, alpha in enumerate(alphas.tolist()):
        ell = np.arange(2, alpha + 1, dtype=np.float64)
        lc = log_comb_row(alpha)[2:]
        eps_ell = base[ell.astype(np.int64) - 2]
        terms = lc + (alpha - ell) * log_1mg + ell * log_g + (ell - 1.0) * eps_ell
        terms[1:] += math.log(3.0)
        head = (alpha - 1.0) * log_1mg + math.log1p((alpha - 1.0) * gamma)
        all_terms = np.concatenate([[head], terms])
        log_a = float(special.logsumexp(all_terms))
        log_a += 8.0 * _EPS * (alpha + 4.0) * (float(np.max(np.abs(all_terms))) + 1.0)
        out[idx] = max(log_a, 0.0) / (alpha - 1.0)
    return np.asarray(t * out, dtype=np.float64)


# ---------------------------------------------------------------------------------------------------------
# conversion
