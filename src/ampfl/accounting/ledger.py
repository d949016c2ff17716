"""A composable RDP ledger: adds per-order RDP curves from ampfl's bounds and from dp-accounting events.

RDP composes additively over adaptive composition (002 Def. 2.2), so a run that mixes mechanisms (e.g. a
partial model split = Gaussian non-split part + Theorem 3.4 split part, repeated over several training runs)
is accounted for by summing curves on one grid of integer orders. The ledger holds only that sum and a list
of labelled entries; the math lives in pure functions (:mod:`ampfl.accounting.partition`, ``rdp``).

Curves given on other orders are moved onto the ledger's grid soundly: RDP is non-decreasing in α, so the
value at the nearest given order ≥ α bounds the value at α (orders above every given order get ``inf``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from ampfl.accounting._checks import check_int, check_orders
from ampfl.accounting.rdp import (
    DEFAULT_ORDERS,
    DeltaAtOrder,
    EpsilonAtOrder,
    delta_from_rdp,
    epsilon_from_rdp,
)

_FORMAT = "ampfl.ledger/1"


class Ledger:
    """Sum of RDP curves on a fixed grid of integer orders; answers ε(δ) and δ(ε).

    Example::

        ledger = Ledger()
        split = rdp_model_split(orders=ledger.orders, num_submodels=3, noise_multiplier=2.0, steps=100)
        ledger.compose_rdp(ledger.orders, split, count=3, label="3 runs of a 3-way split")
        ledger.compose_event(dp_event.GaussianDpEvent(20.0), count=300, label="non-split part")
        epsilon, order = ledger.epsilon(1e-5)
    """

    def __init__(self, orders: Iterable[object] = DEFAULT_ORDERS) -> None:
        self._orders = check_orders("orders", orders)
        self._rdp = np.zeros(self._orders.size)
        self._entries: list[dict[str, Any]] = []

    @property
    def orders(self) -> np.ndarray:
        """The ledger's orders (a copy)."""
        return self._orders.copy()

    @property
    def rdp(self) -> np.ndarray:
        """The composed RDP at each order (a copy)."""
        return self._rdp.copy()

    @property
    def entries(self) -> list[dict[str, Any]]:
        """What was composed, in order: ``{"label", "count", "source"}`` per call (a copy)."""
        return [dict(e) for e in self._entries]

    def _on_grid(self, orders: Iterable[object], rdp: Iterable[object]) -> np.ndarray:
        given = np.asarray([check_int("orders", o, minimum=2) for o in orders], dtype=np.int64)
        values = np.asarray(list(rdp), dtype=np.float64)
        if given.size == 0 or values.shape != given.shape:
            raise ValueError(f"rdp must have one value per order ({given.size}). Found {values.size} values.")
        if np.any(np.isnan(values)) or np.any(values < 0.0):
            raise ValueError("rdp must be non-negative numbers (inf allowed). Found a negative value or nan.")
        sort = np.argsort(given, kind="stable")
        given, values = given[sort], values[sort]
        # nearest given order >= each ledger order (RDP is non-decreasing in the order)
        idx = np.searchsorted(given, self._orders, side="left")
        out = np.full(self._orders.size, np.inf)
        ok = idx < given.size
        out[ok] = values[idx[ok]]
        return out

    def compose_rdp(
        self, orders: Iterable[object], rdp: Iterable[object], count: int = 1, *, label: str = "rdp"
    ) -> Ledger:
        """Add ``count`` copies of an RDP curve (given at ``orders``); returns ``self``."""
        n = check_int("count", count, minimum=0)
        curve = self._on_grid(orders, rdp)
        if n > 0:
            self._rdp = self._rdp + n * curve
        self._entries.append({"label": str(label), "count": n, "source": "rdp"})
        return self

    def compose_event(self, event: Any, count: int = 1, *, label: str | None = None) -> Ledger:
        """Add ``count`` copies of a dp-accounting ``DpEvent`` (via its RdpAccountant); returns ``self``.

        Uses the add-or-remove-one neighbouring relation (dp-accounting's default).

        Raises:
            ValueError: if dp-accounting's RDP accountant does not support the event.
        """
        from dp_accounting import dp_event as dpe
        from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc

        n = check_int("count", count, minimum=0)
        if not isinstance(event, dpe.DpEvent):
            raise ValueError(f"event must be a dp_accounting DpEvent. Found {type(event).__name__}.")
        accountant = rdp_acc.RdpAccountant(orders=[float(o) for o in self._orders])
        if not accountant.supports(event):
            raise ValueError(f"event is not supported by dp-accounting's RdpAccountant: {event!r}.")
        accountant.compose(event, n)
        # dp-accounting exposes no public RDP array; _rdp is the accountant's composed curve.
        curve = np.asarray(accountant._rdp, dtype=np.float64)
        if curve.shape != self._rdp.shape or np.any(np.isnan(curve)):
            raise ValueError("dp-accounting returned an unusable RDP curve for this event.")
        self._rdp = self._rdp + curve
        self._entries.append({"label": label or type(event).__name__, "count": n, "source": "dp_accounting"})
        return self

    def compose(self, event: Any, count: int = 1, *, label: str | None = None) -> Ledger:
        """Add an event: a dp-accounting ``DpEvent``, or any object with ``rdp(orders) -> array``.

        The second form lets ampfl's own events (e.g. a BIS run or a model-split step) report their curve at
        the ledger's orders; the curve must be an upper bound on the RDP in both neighbouring directions.
        """
        from dp_accounting import dp_event as dpe

        if isinstance(event, dpe.DpEvent):
            return self.compose_event(event, count, label=label)
        rdp_method = getattr(event, "rdp", None)
        if not callable(rdp_method):
            raise ValueError(
                "event must be a dp_accounting DpEvent or have an rdp(orders) method. "
                f"Found {type(event).__name__}."
            )
        curve = rdp_method(self.orders)
        return self.compose_rdp(self._orders, curve, count, label=label or type(event).__name__)

    def epsilon(self, delta: float) -> EpsilonAtOrder:
        """``(epsilon, order)``: smallest ε over the orders (002 Prop. 2.3, improved conversion)."""
        return epsilon_from_rdp(orders=self._orders, rdp=self._rdp, delta=delta)

    def delta(self, epsilon: float) -> DeltaAtOrder:
        """``(delta, order)``: smallest δ over the orders for the given ε."""
        return delta_from_rdp(orders=self._orders, rdp=self._rdp, epsilon=epsilon)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe snapshot (``inf`` stays a float; :func:`ampfl.io.dumps_json` writes it as 1e999)."""
        return {
            "format": _FORMAT,
            "orders": [int(o) for o in self._orders],
            "rdp": [float(r) for r in self._rdp],
            "entries": self.entries,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ledger:
        """Rebuild a ledger written by :meth:`to_dict`."""
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise ValueError(f"data must be a ledger snapshot with format {_FORMAT!r}.")
        ledger = cls(data["orders"])
        values = np.asarray([float(v) for v in data["rdp"]], dtype=np.float64)
        if values.shape != ledger._rdp.shape or np.any(np.isnan(values)) or np.any(values < 0.0):
            raise ValueError("data['rdp'] must hold one non-negative number per order.")
        if not np.array_equal(ledger._orders, np.asarray(data["orders"], dtype=np.int64)):
            raise ValueError("data['orders'] must be sorted, unique integers >= 2.")
        ledger._rdp = values
        ledger._entries = [dict(e) for e in data.get("entries", [])]
        return ledger

    def __repr__(self) -> str:
        eps = self.epsilon(1e-5).epsilon if np.all(np.isfinite(self._rdp)) else math.inf
        return f"Ledger(orders={self._orders.size}, entries={len(self._entries)}, epsilon@1e-5={eps:.4g})"
