"""The RDP accountant: per-order Rényi DP curves on one integer grid, added under composition.

Curves per event (each bounds both directions of the accountant's neighbouring relation):

- Gaussian: α/(2z²). Poisson-subsampled Gaussian: the exact integer-order sum (Mironov, Talwar & Zhang 2019,
  Sec. 3.3; :func:`ampfl.accounting.rdp.rdp_poisson_gaussian`). Poisson sampling of any other event: the
  Zhu & Wang (2019) general bound (:func:`ampfl.accounting.rdp.rdp_poisson_subsampled_general`).
- Laplace and sampling without replacement (replace-one): dp-accounting's RDP accountant.
- :class:`~ampfl.accounting.events.PublicParticipationEvent`: the outcomes "ran"/"did not run" have disjoint
  supports, so E_Q[(P/Q)^α] = 1 − p + p·exp((α − 1)·R(α)), i.e. R_p(α) = log(1 − p + p e^{(α−1)R(α)})/(α − 1).
- Model split, dropout, Balanced Iteration Subsampling: paper 002 Theorems 3.4/3.5, 3.7, 3.8
  (:mod:`ampfl.accounting.partition`); Bernoulli masks: 003 (:mod:`ampfl.accounting.pm_sfl`).
- Random check-in (004), MS-PAFL rounds (000) and GDPFed group rounds (001) through their ``dominating()``.

Conversion to (ε, δ): :func:`ampfl.accounting.rdp.epsilon_from_rdp` (002 Prop. 2.3 / Canonne, Kamath &
Steinke 2020 Prop. 12 with the total-variation bound, as dp-accounting; rounded up).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from ampfl.accounting._checks import check_delta, check_nonnegative, check_orders
from ampfl.accounting.accountants.base import (
    Accountant,
    NeighboringRelation,
    UnsupportedEventError,
    dp_accounting_relation,
)
from ampfl.accounting.accountants.rdp_wor import rdp_sample_wor_gaussian
from ampfl.accounting.events import (
    BalancedIterationSubsamplingEvent,
    BernoulliMaskEvent,
    ComposedEvent,
    DropoutEvent,
    GaussianEvent,
    GroupRoundEvent,
    LaplaceEvent,
    ModelSplitEvent,
    MSPAFLRoundEvent,
    PoissonSampledEvent,
    PrivacyEvent,
    PublicParticipationEvent,
    RandomCheckInEvent,
    SampledWithoutReplacementEvent,
    SelfComposedEvent,
)
from ampfl.accounting.orders import CHEAP_ORDERS, DEFAULT_ORDERS

__all__ = ["RDPAccountant", "event_rdp", "unsupported"]

_ADD_REMOVE = NeighboringRelation.ADD_OR_REMOVE_ONE
_CHEAP_MAX = max(CHEAP_ORDERS)


def _on_cheap_orders(alphas: np.ndarray, fn: Any) -> np.ndarray:
    """Evaluate an α²-cost kernel on the orders ≤ 256 only; ``inf`` above (sound: ε minimises over α)."""
    out = np.full(alphas.size, np.inf)
    small = alphas <= _CHEAP_MAX
    if np.any(small):
        out[small] = fn(alphas[small])
    return out


def _dp_accounting_rdp(event: PrivacyEvent, alphas: np.ndarray, relation: NeighboringRelation) -> np.ndarray:
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

    return _on_cheap_orders(alphas, kernel)


def unsupported(event: PrivacyEvent, relation: NeighboringRelation = _ADD_REMOVE) -> str | None:
    """Why :func:`event_rdp` has no curve for ``event`` under ``relation`` (``None``: it has one), without
    computing a curve (issue 32: the support check of a run, before its first round, used to compute the
    whole curve). The same branches as :func:`event_rdp`, in the same order."""
    add_remove = relation == _ADD_REMOVE
    if isinstance(event, RandomCheckInEvent | MSPAFLRoundEvent | GroupRoundEvent):
        return unsupported(event.dominating(), relation)
    if isinstance(event, GaussianEvent | BernoulliMaskEvent | LaplaceEvent):
        return None  # Laplace: dp-accounting's RDP accountant takes it under every relation
    if isinstance(event, SelfComposedEvent):
        return unsupported(event.event, relation) if event.count else None
    if isinstance(event, ComposedEvent):
        return next((r for r in (unsupported(e, relation) for e in event.events) if r is not None), None)
    if isinstance(event, PublicParticipationEvent):
        return None if event.participation == 0.0 else unsupported(event.event, relation)
    if isinstance(event, SampledWithoutReplacementEvent):
        reason = f"no RDP bound for {type(event).__name__} under {relation.name}."
        if relation != NeighboringRelation.REPLACE_ONE:
            return reason
        if isinstance(event.event, GaussianEvent):
            return None
        from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc  # another inner event: ask it

        dp = event.to_dp_accounting()
        acc = rdp_acc.RdpAccountant(orders=[2.0], neighboring_relation=dp_accounting_relation(relation))
        return None if dp is not None and acc.supports(dp) else reason
    if not add_remove:
        return f"{type(event).__name__} is accounted under add/remove-one only; found {relation.name}."
    if isinstance(event, PoissonSampledEvent):
        return None if isinstance(event.event, GaussianEvent) else unsupported(event.event, relation)
    if isinstance(event, ModelSplitEvent | DropoutEvent | BalancedIterationSubsamplingEvent):
        return None
    return f"no RDP bound for {type(event).__name__}."


def event_rdp(
    event: PrivacyEvent, orders: Iterable[object], relation: NeighboringRelation = _ADD_REMOVE
) -> np.ndarray:
    """RDP of one application of ``event`` at integer ``orders`` (``inf`` where no bound is computed).

    Raises:
        UnsupportedEventError: naming the (sub-)event without a sound RDP bound under ``relation``.
    """
    alphas = check_orders("orders", orders)
    af = alphas.astype(np.float64)
    add_remove = relation == _ADD_REMOVE
    if isinstance(event, RandomCheckInEvent | MSPAFLRoundEvent | GroupRoundEvent):
        return event_rdp(event.dominating(), alphas, relation)
    if isinstance(event, GaussianEvent):
        z = event.noise_multiplier
        return np.zeros(alphas.size) if math.isinf(z) else af / (2.0 * z * z)
    if isinstance(event, SelfComposedEvent):
        return (
            event.count * event_rdp(event.event, alphas, relation) if event.count else np.zeros(alphas.size)
        )
    if isinstance(event, ComposedEvent):
        total = np.zeros(alphas.size)
        for e in event.events:
            total = total + event_rdp(e, alphas, relation)
        return total
    if isinstance(event, PublicParticipationEvent):
        p = event.participation
        if p == 0.0:
            return np.zeros(alphas.size)
        inner = event_rdp(event.event, alphas, relation)
        if p == 1.0:
            return inner
        with np.errstate(over="ignore"):
            log_mgf = np.logaddexp(math.log1p(-p), math.log(p) + (af - 1.0) * inner)
        return np.asarray(np.maximum(log_mgf, 0.0) / (af - 1.0), dtype=np.float64)
    if isinstance(event, BernoulliMaskEvent):
        from ampfl.accounting import pm_sfl

        return pm_sfl.bernoulli_mask_rdp(orders=[float(a) for a in alphas], c=event.c, dim=event.dim)
    if (
        isinstance(event, SampledWithoutReplacementEvent)
        and isinstance(event.event, GaussianEvent)
        and relation == NeighboringRelation.REPLACE_ONE
    ):  # fixed-size cohorts: dp-accounting's bound, computed without it (rdp_wor)
        q, z = event.sample_size / event.source_size, event.event.noise_multiplier
        return _on_cheap_orders(alphas, lambda o: rdp_sample_wor_gaussian(q, z, o))
    if isinstance(event, LaplaceEvent | SampledWithoutReplacementEvent):
        return _dp_accounting_rdp(event, alphas, relation)
    if not add_remove:
        raise UnsupportedEventError(
            f"{type(event).__name__} is accounted under add/remove-one only; found {relation.name}."
        )
    if isinstance(event, PoissonSampledEvent):
        from ampfl.accounting.rdp import rdp_poisson_gaussian, rdp_poisson_subsampled_general

        inner_event = event.event
        if isinstance(inner_event, GaussianEvent):
            if event.sampling_rate == 0.0 or math.isinf(inner_event.noise_multiplier):
                return np.zeros(alphas.size)
            return rdp_poisson_gaussian(
                orders=alphas,
                sampling_rate=event.sampling_rate,
                noise_multiplier=inner_event.noise_multiplier,
            )

        def general(orders: np.ndarray) -> np.ndarray:
            base = event_rdp(inner_event, range(2, int(orders.max()) + 1), relation)
            return rdp_poisson_subsampled_general(
                orders=orders, sampling_rate=event.sampling_rate, base_rdp=base
            )

        return _on_cheap_orders(alphas, general)
    from ampfl.accounting import partition  # paper 002's mechanisms

    if isinstance(event, ModelSplitEvent):
        return _on_cheap_orders(
            alphas,
            lambda o: partition.rdp_partial_split(
                orders=o,
                num_submodels=event.num_submodels,
                split_noise_multiplier=event.noise_multiplier,
                nonsplit_noise_multiplier=event.nonsplit_noise_multiplier,
            ),
        )
    if isinstance(event, DropoutEvent):
        return _on_cheap_orders(
            alphas,
            lambda o: partition.rdp_dropout(
                orders=o,
                noise_multiplier=event.noise_multiplier,
                nonsplit_noise_multiplier=event.nonsplit_noise_multiplier,
            ),
        )
    if isinstance(event, BalancedIterationSubsamplingEvent):
        return _on_cheap_orders(
            alphas,
            lambda o: partition.rdp_bis(
                orders=o,
                iterations=event.iterations,
                participations=event.participations,
                noise_multiplier=event.noise_multiplier,
            ),
        )
    raise UnsupportedEventError(f"no RDP bound for {type(event).__name__}.")


class RDPAccountant(Accountant):
    """Sum of per-order RDP curves on one grid (default :data:`~ampfl.accounting.orders.DEFAULT_ORDERS`).

    Example::

        acc = RDPAccountant()
        acc.compose(PoissonSampledEvent(sampling_rate=0.01, event=GaussianEvent(noise_multiplier=1.1)), 1000)
        acc.get_epsilon(1e-5)
    """

    name = "rdp"

    def __init__(
        self,
        orders: Iterable[object] = DEFAULT_ORDERS,
        neighboring_relation: NeighboringRelation = _ADD_REMOVE,
    ) -> None:
        super().__init__(neighboring_relation)
        self._orders = check_orders("orders", orders)
        self._rdp = np.zeros(self._orders.size)
        self._cache: dict[PrivacyEvent, np.ndarray] = {}

    @property
    def orders(self) -> np.ndarray:
        return self._orders.copy()

    @property
    def rdp(self) -> np.ndarray:
        """The composed RDP at each order (a copy)."""
        return self._rdp.copy()

    def curve(self, event: PrivacyEvent) -> np.ndarray:
        """RDP of one application of ``event`` on this accountant's orders (cached per event)."""
        if event not in self._cache:
            self._cache[event] = event_rdp(event, self._orders, self.neighboring_relation)
        return self._cache[event]

    def _check(self, event: PrivacyEvent) -> str | None:
        """A predicate on the event's structure (:func:`unsupported`): no curve is computed until composed."""
        if event in self._cache:
            return None
        return unsupported(event, self.neighboring_relation)

    def _add(self, event: PrivacyEvent, count: int) -> None:
        if count:
            self._rdp = self._rdp + count * self.curve(event)

    def get_epsilon(self, target_delta: float) -> float:
        from ampfl.accounting.rdp import epsilon_from_rdp

        return epsilon_from_rdp(
            orders=self._orders, rdp=self._rdp, delta=check_delta("delta", target_delta)
        ).epsilon

    def get_delta(self, target_epsilon: float) -> float:
        from ampfl.accounting.rdp import delta_from_rdp

        eps = check_nonnegative("epsilon", target_epsilon)
        return delta_from_rdp(orders=self._orders, rdp=self._rdp, epsilon=eps).delta

    def would_exceed(self, event: Any, epsilon: float, delta: float, count: int = 1) -> bool:
        from ampfl.accounting.accountants.base import as_ampfl_event
        from ampfl.accounting.rdp import epsilon_from_rdp

        eps = check_nonnegative("epsilon", epsilon)
        dlt = check_delta("delta", delta)
        ev = as_ampfl_event(event)
        reason = self._check(ev)
        if reason is not None:
            raise UnsupportedEventError(f"{type(self).__name__}: {reason}")
        trial = self._rdp + count * self.curve(ev)
        return bool(epsilon_from_rdp(orders=self._orders, rdp=trial, delta=dlt).epsilon > eps)

    def _state(self) -> dict[str, Any]:
        return {"orders": [int(a) for a in self._orders], "rdp": [float(r) for r in self._rdp]}

    def _restore(self, state: dict[str, Any]) -> None:
        orders = np.asarray(state["orders"], dtype=np.int64)
        if not np.array_equal(orders, self._orders):
            raise ValueError("state was written with another order grid.")
        values = np.asarray([float(v) for v in state["rdp"]], dtype=np.float64)
        if values.shape != self._rdp.shape or np.any(np.isnan(values)) or np.any(values < 0.0):
            raise ValueError("state['rdp'] must hold one non-negative number per order.")
        self._rdp = values
