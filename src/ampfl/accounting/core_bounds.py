"""Registry bounds of the events no paper owns: the Gaussian and Laplace mechanisms, Poisson sampling and
sampling without replacement, public participation, composition (:mod:`ampfl.accounting.mechanisms`).

Curves (each bounds both directions of the relation it is registered under):

- Gaussian: α/(2z²). Poisson-subsampled Gaussian: the exact integer-order sum (Mironov, Talwar & Zhang 2019,
  Sec. 3.3; :func:`ampfl.accounting.rdp.rdp_poisson_gaussian`). Poisson sampling of an event whose entry has
  no ``poisson_rdp``: the Zhu & Wang (2019) general bound
  (:func:`ampfl.accounting.rdp.rdp_poisson_subsampled_general`).
- Laplace and sampling without replacement (replace-one): dp-accounting's RDP accountant; a fixed-size cohort
  of Gaussians: :func:`~ampfl.accounting.accountants.rdp_wor.rdp_sample_wor_gaussian` (the same bound,
  computed without cancellation).
- :class:`~ampfl.accounting.events.PublicParticipationEvent`: the outcomes "ran"/"did not run" have disjoint
  supports, so E_Q[(P/Q)^α] = 1 − p + p·exp((α − 1)·R(α)), i.e. R_p(α) = log(1 − p + p e^{(α−1)R(α)})/(α − 1);
  its PLD is the mixture p·PLD + (1 − p)·identity (dp-accounting's ``compute_mixture``).
- Composition: RDP curves add; PLDs convolve (:mod:`~ampfl.accounting.accountants.pld_fast`).

Signatures: ``rdp(event, alphas, relation[, recurse])``, ``pld(event, h[, recurse])``; ``recurse`` is the
accountant's own dispatcher (``event_rdp``, ``event_pld``, the support predicate, ``without_amplification``).
Heavy imports (dp-accounting, scipy) stay inside the functions (start-up).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ampfl.accounting._checks import UnsupportedEventError
from ampfl.accounting.events import (
    ComposedEvent,
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    PrivacyEvent,
    PublicParticipationEvent,
    SampledWithoutReplacementEvent,
    SelfComposedEvent,
)
from ampfl.accounting.mechanisms import ADD_REMOVE, lookup, outside_relations
from ampfl.accounting.orders import on_cheap_orders
from ampfl.accounting.relations import NeighboringRelation, dp_accounting_relation

Recurse = Callable[..., Any]


def _identity(h: float) -> Any:
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    return pld_lib.identity(h)


# ------------------------------------------------------------------------------------- Gaussian, Laplace
def gaussian_rdp(event: GaussianEvent, alphas: np.ndarray, relation: NeighboringRelation) -> np.ndarray:
    z = event.noise_multiplier
    return np.zeros(alphas.size) if math.isinf(z) else alphas.astype(np.float64) / (2.0 * z * z)


def _gaussian_pld(z: float, rate: float, h: float) -> Any:
    from ampfl.accounting.accountants import pld_fast
    from ampfl.accounting.pld_grid import check_pld_size, dp_accounting_guard

    if rate == 0.0 or math.isinf(z):
        return _identity(h)
    check_pld_size(z, h)
    with dp_accounting_guard("Gaussian PLD"):
        return pld_fast.gaussian_pld(z, rate, h)  # connect-the-dots, vectorised


def gaussian_pld(event: GaussianEvent, h: float) -> Any:
    return _gaussian_pld(event.noise_multiplier, 1.0, h)


def poisson_gaussian_pld(event: PoissonSampledEvent, h: float, recurse: Recurse | None = None) -> Any:
    assert isinstance(event.event, GaussianEvent)
    return _gaussian_pld(event.event.noise_multiplier, event.sampling_rate, h)


def _dense(z: float, rate: float, h: float) -> Any:
    """:func:`pld_dense.gaussian_pld`: :func:`_gaussian_pld`'s PMFs without importing dp-accounting (``None``
    where that one returns the identity)."""
    from ampfl.accounting.accountants import pld_dense
    from ampfl.accounting.pld_grid import check_pld_size, dp_accounting_guard

    if rate == 0.0 or not math.isfinite(z):
        return None
    check_pld_size(z, h)
    with dp_accounting_guard("Gaussian PLD"):
        return pld_dense.gaussian_pld(z, rate, h)


def gaussian_dense_pld(event: GaussianEvent, h: float) -> Any:
    return _dense(event.noise_multiplier, 1.0, h)


def poisson_dense_pld(event: PoissonSampledEvent, h: float) -> Any:
    if not isinstance(event.event, GaussianEvent):
        return None
    return _dense(event.event.noise_multiplier, event.sampling_rate, h)


def laplace_pld(event: LaplaceEvent | PoissonSampledEvent, h: float, recurse: Recurse | None = None) -> Any:
    """The Laplace mechanism's PLD, Poisson-subsampled when ``event`` is (dp-accounting)."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    from ampfl.accounting.pld_grid import dp_accounting_guard

    rate, base = (
        (event.sampling_rate, event.event) if isinstance(event, PoissonSampledEvent) else (1.0, event)
    )
    assert isinstance(base, LaplaceEvent)
    if rate == 0.0 or math.isinf(base.noise_multiplier):
        return _identity(h)
    with dp_accounting_guard("Laplace PLD"):
        return pld_lib.from_laplace_mechanism(
            parameter=base.noise_multiplier,
            sensitivity=1.0,
            sampling_prob=rate,
            pessimistic_estimate=True,
            value_discretization_interval=h,
        )


def dp_accounting_rdp(event: PrivacyEvent, alphas: np.ndarray, relation: NeighboringRelation) -> np.ndarray:
    """dp-accounting's RDP accountant on the orders ≤ 256."""
    from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc

    def kernel(orders: np.ndarray) -> np.ndarray:
        acc = rdp_acc.RdpAccountant(
            orders=[float(a) for a in orders], neighboring_relation=dp_accounting_relation(relation)
        )
        dp = event.to_dp_accounting()
        if dp is None or not acc.supports(dp):
            raise UnsupportedEventError(f"no RDP bound for {type(event).__name__} under {relation.name}.")
        acc.compose(dp)
        return np.asarray(acc.rdp, dtype=np.float64)

    return on_cheap_orders(alphas, kernel)


# ------------------------------------------------------------------------------------------- sampling
def poisson_gaussian_rdp(
    event: PoissonSampledEvent,
    alphas: np.ndarray,
    relation: NeighboringRelation,
    recurse: Recurse | None = None,
) -> np.ndarray:
    from ampfl.accounting.rdp import rdp_poisson_gaussian

    inner = event.event
    assert isinstance(inner, GaussianEvent)
    if event.sampling_rate == 0.0 or math.isinf(inner.noise_multiplier):
        return np.zeros(alphas.size)
    return rdp_poisson_gaussian(
        orders=alphas, sampling_rate=event.sampling_rate, noise_multiplier=inner.noise_multiplier
    )


def poisson_rdp_support(
    event: PoissonSampledEvent, relation: NeighboringRelation, recurse: Recurse
) -> str | None:
    reason = outside_relations(event, ADD_REMOVE, relation)
    if reason is not None or isinstance(event.event, GaussianEvent):
        return reason
    return recurse(event.event, relation)  # type: ignore[no-any-return]


def poisson_rdp(
    event: PoissonSampledEvent, alphas: np.ndarray, relation: NeighboringRelation, recurse: Recurse
) -> np.ndarray:
    """The inner entry's ``poisson_rdp``, else Zhu & Wang's general bound on the inner curve."""
    reason = outside_relations(event, ADD_REMOVE, relation)
    if reason is not None:
        raise UnsupportedEventError(reason)
    inner = lookup(event.event)
    if inner.poisson_rdp is not None:
        return inner.poisson_rdp(event, alphas, relation, recurse=recurse)  # type: ignore[no-any-return]
    from ampfl.accounting.rdp import rdp_poisson_subsampled_general

    def general(orders: np.ndarray) -> np.ndarray:
        base = recurse(event.event, np.arange(2, int(orders.max()) + 1), relation)
        return rdp_poisson_subsampled_general(orders=orders, sampling_rate=event.sampling_rate, base_rdp=base)

    return on_cheap_orders(alphas, general)


def poisson_pld(event: PoissonSampledEvent, h: float, recurse: Recurse) -> Any:
    """The inner entry's ``poisson_pld`` (the identity at rate 0)."""
    inner = lookup(event.event)
    if inner.poisson_pld is None:
        raise UnsupportedEventError(f"no PLD for {type(event.event).__name__} yet (use the rdp accountant).")
    if event.sampling_rate == 0.0:
        return _identity(h)
    return inner.poisson_pld(event, h, recurse=recurse)


def swor_gaussian_rdp(
    event: SampledWithoutReplacementEvent, alphas: np.ndarray, relation: NeighboringRelation
) -> np.ndarray:
    from ampfl.accounting.accountants.rdp_wor import rdp_sample_wor_gaussian

    assert isinstance(event.event, GaussianEvent)
    q, z = event.sample_size / event.source_size, event.event.noise_multiplier
    return on_cheap_orders(alphas, lambda o: rdp_sample_wor_gaussian(q, z, o))


def swor_rdp_support(event: SampledWithoutReplacementEvent, relation: NeighboringRelation) -> str | None:
    reason = f"no RDP bound for {type(event).__name__} under {relation.name}."
    if relation != NeighboringRelation.REPLACE_ONE:
        return reason
    if lookup(event.event).swor_rdp is not None:
        return None
    from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc  # another inner event: ask dp-accounting

    dp = event.to_dp_accounting()
    acc = rdp_acc.RdpAccountant(orders=[2.0], neighboring_relation=dp_accounting_relation(relation))
    return None if dp is not None and acc.supports(dp) else reason


def swor_rdp(
    event: SampledWithoutReplacementEvent, alphas: np.ndarray, relation: NeighboringRelation
) -> np.ndarray:
    """Fixed-size cohorts (replace-one): the inner entry's ``swor_rdp``, else dp-accounting's."""
    inner = lookup(event.event)
    if inner.swor_rdp is not None and relation == NeighboringRelation.REPLACE_ONE:
        return inner.swor_rdp(event, alphas, relation)  # type: ignore[no-any-return]
    return dp_accounting_rdp(event, alphas, relation)


# ----------------------------------------------------------------------------- participation, composition
def public_participation_rdp(
    event: PublicParticipationEvent, alphas: np.ndarray, relation: NeighboringRelation, recurse: Recurse
) -> np.ndarray:
    p = event.participation
    if p == 0.0:
        return np.zeros(alphas.size)
    inner = recurse(event.event, alphas, relation)
    if p == 1.0:
        return inner  # type: ignore[no-any-return]
    af = alphas.astype(np.float64)
    with np.errstate(over="ignore"):
        log_mgf = np.logaddexp(math.log1p(-p), math.log(p) + (af - 1.0) * inner)
    return np.asarray(np.maximum(log_mgf, 0.0) / (af - 1.0), dtype=np.float64)


def public_participation_support(
    event: PublicParticipationEvent, relation: NeighboringRelation, recurse: Recurse
) -> str | None:
    return None if event.participation == 0.0 else recurse(event.event, relation)


def public_participation_pld(event: PublicParticipationEvent, h: float, recurse: Recurse) -> Any:
    from ampfl.accounting.pld_grid import dp_accounting_guard

    p = event.participation
    if p == 0.0:
        return _identity(h)
    inner = recurse(event.event, h)
    if p == 1.0:
        return inner
    from ampfl.accounting.pld_grid import mixture

    with dp_accounting_guard("PLD mixture"):
        return mixture([(p, inner), (1.0 - p, _identity(h))])


def self_composed_rdp(
    event: SelfComposedEvent, alphas: np.ndarray, relation: NeighboringRelation, recurse: Recurse
) -> np.ndarray:
    return event.count * recurse(event.event, alphas, relation) if event.count else np.zeros(alphas.size)


def self_composed_support(
    event: SelfComposedEvent, relation: NeighboringRelation, recurse: Recurse
) -> str | None:
    return recurse(event.event, relation) if event.count else None


def self_composed_pld(event: SelfComposedEvent, h: float, recurse: Recurse) -> Any:
    from ampfl.accounting.accountants import pld_fast
    from ampfl.accounting.pld_grid import dp_accounting_guard

    if event.count == 0:
        return _identity(h)
    with dp_accounting_guard("PLD self-composition"):
        return pld_fast.self_compose(recurse(event.event, h), event.count)


def composed_rdp(
    event: ComposedEvent, alphas: np.ndarray, relation: NeighboringRelation, recurse: Recurse
) -> np.ndarray:
    total = np.zeros(alphas.size)
    for e in event.events:
        total = total + recurse(e, alphas, relation)
    return total


def composed_support(event: ComposedEvent, relation: NeighboringRelation, recurse: Recurse) -> str | None:
    return next((r for r in (recurse(e, relation) for e in event.events) if r is not None), None)


def composed_pld(event: ComposedEvent, h: float, recurse: Recurse) -> Any:
    from ampfl.accounting.accountants import pld_fast
    from ampfl.accounting.pld_grid import dp_accounting_guard

    out = _identity(h)
    for e in event.events:
        with dp_accounting_guard("PLD composition"):
            out = pld_fast.compose(out, recurse(e, h))
    return out


# ------------------------------------------------------------------------- dominating pairs, unamplified
def dominating(event: Any) -> PrivacyEvent:
    """The paper's dominating pair of a round event (``event.dominating()``)."""
    return event.dominating()  # type: ignore[no-any-return]


def itself(event: PrivacyEvent) -> PrivacyEvent:
    return event


def gaussian_of_noise(event: Any) -> PrivacyEvent:
    """The Gaussian at the event's noise multiplier: the record is in the round and observed."""
    return GaussianEvent(noise_multiplier=event.noise_multiplier)


def inner_unamplified(event: Any, recurse: Recurse) -> PrivacyEvent:
    return recurse(event.event)  # type: ignore[no-any-return]


def self_composed_unamplified(event: SelfComposedEvent, recurse: Recurse) -> PrivacyEvent:
    return SelfComposedEvent(event=recurse(event.event), count=event.count)


def composed_unamplified(event: ComposedEvent, recurse: Recurse) -> PrivacyEvent:
    return ComposedEvent(events=tuple(recurse(e) for e in event.events))
