"""Privacy amplification by Poisson subsampling, and thin helpers over dp-accounting.

Symbols: ``sampling_probability`` (q) is the Poisson inclusion probability of each record; ``noise_std`` (σ)
the absolute Gaussian noise standard deviation; ``sensitivity`` (C) the L2 sensitivity of the sum query to
adding or removing one record, so dp-accounting's ``noise_multiplier`` is σ / C. ε is in nats.

The closed form here is Theorem 2.5 of paper 004 (Hasırcıoğlu & Gündüz, arXiv:2205.01556v1), i.e. Balle,
Barthe & Gaboardi, "Privacy amplification by subsampling", NeurIPS 2018 (arXiv:1807.01647), Theorem 8:
if M is (ε, δ)-DP then M ∘ Poisson(q) is (log(1 + q(e^ε − 1)), qδ)-DP for the add/remove relation.
Provenance: [V]. For the Poisson-subsampled Gaussian the bound is tight in the "remove" direction (advanced
joint convexity, Balle et al. 2018 Thm 2, holds with equality) and dominates the "add" direction.

Everything that dp-accounting already does (PLD and RDP of Poisson-subsampled Gaussians and their
composition) is delegated to it: this module only builds the events and calls its accountants with
pessimistic (upper-bound) settings. A generic (ε₀, δ₀) composition helper (Kairouz, Oh & Viswanath 2015,
Thm 3.3) is also here, for analyses that only give a per-step (ε, δ) pair.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import numpy as np
from dp_accounting import dp_event, pld, rdp
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.privacy_accountant import NeighboringRelation
from scipy import special

from ampfl.accounting._checks import (
    NumericalError,
    check_delta,
    check_int,
    check_nonnegative,
    check_positive,
    check_probability,
)
from ampfl.accounting.gaussian import gaussian_log_delta

#: Default PLD discretisation (dp-accounting's); pessimistic rounding keeps every result an upper bound.
PLD_DISCRETIZATION = 1e-4
#: Default RDP orders for the optional RDP cross-check.
RDP_ORDERS: tuple[float, ...] = (1.5, 1.75, *(float(a) for a in range(2, 65)), 128.0, 256.0, 512.0, 1024.0)


_ULP = float(np.finfo(np.float64).eps)
#: Largest PLD grid (≈ privacy-loss range / discretisation) built before refusing with NumericalError.
_MAX_PLD_POINTS = 1e8


@contextlib.contextmanager
def dp_accounting_guard(what: str) -> Iterator[None]:
    """Turn dp-accounting's overflow/allocation failures on extreme inputs into :class:`NumericalError`."""
    try:
        yield
    except (OverflowError, ZeroDivisionError, MemoryError, FloatingPointError) as exc:
        raise NumericalError(f"{what}: dp-accounting failed on these extreme parameters ({exc}).") from exc


def check_pld_size(noise_multiplier: float, value_discretization_interval: float) -> None:
    """Refuse (NumericalError) a Gaussian PLD whose grid would be too large to build.

    The privacy loss of N(1, z²) vs N(0, z²) spans about 1/z² + 20/z; divided by the discretisation this is
    the number of PMF points dp-accounting allocates.
    """
    z = noise_multiplier
    width = (1.0 / (z * z) + 20.0 / z) if z * z > 0.0 else math.inf
    if not width / value_discretization_interval <= _MAX_PLD_POINTS:
        raise NumericalError(
            f"noise_multiplier {z:g} is too small for a PLD with discretisation "
            f"{value_discretization_interval:g} (about {width / value_discretization_interval:.3g} points)."
        )


def _check_interval(value: float) -> float:
    return check_positive("value_discretization_interval", value, upper=1.0 + 1e-12)


def amplified_epsilon(epsilon: float, *, sampling_probability: float) -> float:
    """ε' = log(1 + q(e^ε − 1)) of 004 Thm 2.5 (stable for all ε ≥ 0)."""
    eps = check_nonnegative("epsilon", epsilon)
    q = check_probability("sampling_probability", sampling_probability)
    return _amplified(eps, math.log(q))


def base_epsilon(amplified: float, *, sampling_probability: float) -> float:
    """Inverse of :func:`amplified_epsilon`: ε with log(1 + q(e^ε − 1)) = ``amplified``."""
    eps = check_nonnegative("amplified", amplified)
    q = check_probability("sampling_probability", sampling_probability)
    return _deamplified(eps, math.log(q))


def poisson_amplification(
    *, epsilon: float, delta: float, sampling_probability: float
) -> tuple[float, float]:
    """(ε', δ') = (log(1 + q(e^ε − 1)), qδ) of 004 Thm 2.5 for an (ε, δ)-DP mechanism."""
    dlt = check_probability("delta", delta, allow_zero=True, allow_one=False)
    q = check_probability("sampling_probability", sampling_probability)
    return amplified_epsilon(epsilon, sampling_probability=q), q * dlt


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


def subsampled_gaussian_log_delta(
    *, sampling_probability: float, noise_std: float, epsilon: float, sensitivity: float = 1.0
) -> float:
    """log δ(ε) of the Poisson-subsampled Gaussian by 004 Thm 2.5 + Thm 2.4 (004 Thm 5.1, Eq. 8–9).

    δ = q · δ_G(ε₀) with ε₀ = log(1 + (e^ε − 1)/q) and δ_G the exact Gaussian profile (Balle–Wang).
    Exact for the add/remove relation (the remove direction attains it, the add direction is below).
    """
    q = check_probability("sampling_probability", sampling_probability)
    eps = check_nonnegative("epsilon", epsilon)
    sig = check_positive("noise_std", noise_std)
    s = check_positive("sensitivity", sensitivity)
    # ε₀ rounded down by a few ulps (a smaller ε₀ gives a larger δ); exact at q = 1 (no amplification)
    base = eps if q == 1.0 else _deamplified(eps, math.log(q)) * (1.0 - 4.0 * _ULP)
    return math.log(q) + gaussian_log_delta(sigma=sig, epsilon=base, sensitivity=s)


def poisson_gaussian_event(*, sampling_probability: float, noise_multiplier: float) -> dp_event.DpEvent:
    """``PoissonSampledDpEvent(q, GaussianDpEvent(σ/C))`` (``GaussianDpEvent`` alone when q = 1)."""
    q = check_probability("sampling_probability", sampling_probability)
    z = check_positive("noise_multiplier", noise_multiplier)
    gaussian = dp_event.GaussianDpEvent(noise_multiplier=z)
    if q == 1.0:
        return gaussian
    return dp_event.PoissonSampledDpEvent(sampling_probability=q, event=gaussian)


def composed_event(event: dp_event.DpEvent, *, count: int) -> dp_event.DpEvent:
    """``SelfComposedDpEvent(event, count)`` (``event`` itself when count = 1)."""
    n = check_int("count", count, minimum=1)
    return event if n == 1 else dp_event.SelfComposedDpEvent(event=event, count=n)


def _pld_accountant(discretization: float) -> pld.PLDAccountant:
    return pld.PLDAccountant(
        neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
        value_discretization_interval=_check_interval(discretization),
    )


def pld_epsilon(
    event: dp_event.DpEvent, *, target_delta: float, value_discretization_interval: float = PLD_DISCRETIZATION
) -> float:
    """ε for ``target_delta`` by dp-accounting's PLD accountant (add/remove, pessimistic rounding)."""
    dlt = check_delta("target_delta", target_delta)
    accountant = _pld_accountant(value_discretization_interval)
    with dp_accounting_guard("pld_epsilon"):
        accountant.compose(event)
        return float(accountant.get_epsilon(dlt))


def pld_delta(
    event: dp_event.DpEvent,
    *,
    target_epsilon: float,
    value_discretization_interval: float = PLD_DISCRETIZATION,
) -> float:
    """δ for ``target_epsilon`` by dp-accounting's PLD accountant (add/remove, pessimistic rounding)."""
    eps = check_nonnegative("target_epsilon", target_epsilon)
    accountant = _pld_accountant(value_discretization_interval)
    with dp_accounting_guard("pld_delta"):
        accountant.compose(event)
        return float(accountant.get_delta(eps))


def rdp_epsilon(event: dp_event.DpEvent, *, target_delta: float) -> float:
    """ε for ``target_delta`` by dp-accounting's RDP accountant (add/remove; a looser cross-check)."""
    dlt = check_delta("target_delta", target_delta)
    accountant = rdp.RdpAccountant(
        orders=list(RDP_ORDERS), neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE
    )
    with dp_accounting_guard("rdp_epsilon"):
        accountant.compose(event)
        return float(accountant.get_epsilon(dlt))


def subsampled_gaussian_pld(
    *,
    sampling_probability: float,
    noise_multiplier: float,
    value_discretization_interval: float = PLD_DISCRETIZATION,
) -> pld_lib.PrivacyLossDistribution:
    """dp-accounting's pessimistic PLD of one Poisson-subsampled Gaussian step (add/remove, both ways)."""
    q = check_probability("sampling_probability", sampling_probability)
    z = check_positive("noise_multiplier", noise_multiplier)
    interval = _check_interval(value_discretization_interval)
    check_pld_size(z, interval)
    with dp_accounting_guard("subsampled_gaussian_pld"):
        return pld_lib.from_gaussian_mechanism(
            standard_deviation=z,
            sensitivity=1.0,
            sampling_prob=q,
            pessimistic_estimate=True,
            value_discretization_interval=interval,
        )


def participation_mixture_pld(
    step: pld_lib.PrivacyLossDistribution, *, participation_probability: float, count: int
) -> pld_lib.PrivacyLossDistribution:
    """PLD of ``count`` steps, each running ``step`` with probability p and a public no-op otherwise.

    When whether the step ran is public and independent of the data, the privacy loss of one step is 0 with
    probability 1 − p and distributed as ``step``'s with probability p; the mixture PMF composed ``count``
    times equals Σ_m Bin(m; count, p) · PLD(step)^{*m}, so its hockey-stick divergence is exactly
    δ(ε) = Σ_m Bin(m; count, p) δ_m(ε) in each direction (δ is linear in the PMF). dp-accounting's
    ``compute_mixture``, ``identity`` and ``self_compose`` (pessimistic tail truncation) do the work.
    """
    p = check_probability("participation_probability", participation_probability)
    n = check_int("count", count, minimum=1)
    one = step if p == 1.0 else step.compute_mixture(pld_lib.identity(_discretization(step)), p)
    return one if n == 1 else one.self_compose(n)


def _discretization(distribution: pld_lib.PrivacyLossDistribution) -> float:
    return float(distribution._pmf_remove._discretization)  # dp-accounting keeps it private


def optimal_composition_log_delta(*, epsilon0: float, delta0: float, count: int, epsilon: float) -> float:
    """log δ of the k-fold adaptive composition of (ε₀, δ₀)-DP mechanisms at ε (optimal composition).

    Kairouz, Oh & Viswanath, "The composition theorem for differential privacy", ICML 2015 (arXiv:1311.0776),
    Theorem 3.3, extended to every ε by its dominating pair (k-fold randomised response):
    δ = 1 − (1 − δ₀)^k (1 − δ_RR(ε)), δ_RR(ε) = Σ_ℓ C(k, ℓ)[e^{(k−ℓ)ε₀} − e^{ε} e^{ℓε₀}]₊ / (1 + e^{ε₀})^k.
    Tight for the class of all (ε₀, δ₀)-DP mechanisms; provenance [V].
    """
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
    log_keep_all = k * math.log1p(-d0) + (math.log1p(-math.exp(log_rr)) if log_rr > -math.inf else 0.0)
    if log_keep_all >= 0.0:
        return -math.inf
    return float(math.log(-math.expm1(log_keep_all)))
