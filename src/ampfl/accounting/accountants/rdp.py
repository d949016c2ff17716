"""The RDP accountant: per-order Rényi DP curves on one integer grid, added under composition.

Each event's curve comes from its entry in the mechanism registry (:mod:`ampfl.accounting.mechanisms`): the
Gaussian and its Poisson / without-replacement subsampling, Laplace, public participation and composition
(:mod:`ampfl.accounting.core_bounds`), model split, dropout and BIS (002,
:mod:`ampfl.accounting.partition.event_bounds`), Bernoulli masks (003, :mod:`ampfl.accounting.pm_sfl`), and
random check-in (004), MS-PAFL rounds (000) and GDPFed group rounds (001) through their dominating pairs.
Each curve bounds both directions of the relations its entry is registered under.

Conversion to (ε, δ): :func:`~ampfl.accounting.accountants.rdp_conversion.epsilon_from_rdp` (002 Prop. 2.3 /
Canonne, Kamath & Steinke 2020 Prop. 12 with the total-variation bound, as dp-accounting; rounded up).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ampfl.accounting._checks import check_delta, check_nonnegative, check_orders
from ampfl.accounting.accountants.base import Accountant, NeighboringRelation, UnsupportedEventError
from ampfl.accounting.events import PrivacyEvent
from ampfl.accounting.mechanisms import lookup, outside_relations
from ampfl.accounting.orders import DEFAULT_ORDERS

__all__ = ["RDPAccountant", "event_rdp", "unsupported"]

_ADD_REMOVE = NeighboringRelation.ADD_OR_REMOVE_ONE


def unsupported(event: PrivacyEvent, relation: NeighboringRelation = _ADD_REMOVE) -> str | None:
    """Why :func:`event_rdp` has no curve for ``event`` under ``relation`` (``None``: it has one), without
    computing a curve (the support check of a run, before its first round, used to compute the
    whole curve). The registry entry's ``rdp_support``, else its ``rdp_relations``; an entry with no curve of
    its own answers for its dominating pair."""
    mech = lookup(event)
    if mech.rdp is None:
        if mech.dominating is not None:
            return unsupported(mech.dominating(event), relation)
        return f"no RDP bound for {type(event).__name__}."
    if mech.rdp_support is not None:
        return mech.rdp_support(event, relation, recurse=unsupported)  # type: ignore[no-any-return]
    return outside_relations(event, mech.rdp_relations, relation)


def _curve(event: PrivacyEvent, alphas: np.ndarray, relation: NeighboringRelation) -> np.ndarray:
    mech = lookup(event)
    if mech.rdp is None:
        if mech.dominating is not None:
            return _curve(mech.dominating(event), alphas, relation)
        raise UnsupportedEventError(f"no RDP bound for {type(event).__name__}.")
    reason = None if mech.rdp_support is not None else outside_relations(event, mech.rdp_relations, relation)
    if reason is not None:
        raise UnsupportedEventError(reason)
    return np.asarray(mech.rdp(event, alphas, relation, recurse=_curve), dtype=np.float64)


def event_rdp(
    event: PrivacyEvent, orders: Iterable[object], relation: NeighboringRelation = _ADD_REMOVE
) -> np.ndarray:
    """RDP of one application of ``event`` at integer ``orders`` (``inf`` where no bound is computed).

    Raises:
        UnsupportedEventError: naming the (sub-)event without a sound RDP bound under ``relation``.
    """
    return _curve(event, check_orders("orders", orders), relation)


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
        from ampfl.accounting.accountants.rdp_conversion import epsilon_from_rdp

        return epsilon_from_rdp(
            orders=self._orders, rdp=self._rdp, delta=check_delta("delta", target_delta)
        ).epsilon

    def get_delta(self, target_epsilon: float) -> float:
        from ampfl.accounting.accountants.rdp_conversion import delta_from_rdp

        eps = check_nonnegative("epsilon", target_epsilon)
        return delta_from_rdp(orders=self._orders, rdp=self._rdp, epsilon=eps).delta

    def would_exceed(self, event: Any, epsilon: float, delta: float, count: int = 1) -> bool:
        from ampfl.accounting.accountants.base import as_ampfl_event
        from ampfl.accounting.accountants.rdp_conversion import epsilon_from_rdp

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
