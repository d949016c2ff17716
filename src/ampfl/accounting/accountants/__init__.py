"""Accountants behind dp-accounting's contract: :class:`RDPAccountant` and :class:`PLDAccountant`.

``make_accountant("rdp" | "pld")`` builds one by name (the ``--accountant`` flag and the run config's
``[privacy] accountant``). ``"auto"`` (the default of runs, :data:`ACCOUNTANT_CHOICES`) names the tightest
sound accountant for given events: :func:`resolve_accountant` turns it into ``"pld"`` when the PLD accountant
accounts every one of them (with the relation), else ``"rdp"``; every report names the resolved one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ampfl.accounting._checks import NumericalError, check_choice, check_delta, check_int, check_nonnegative
from ampfl.accounting.accountants.base import Accountant, NeighboringRelation, UnsupportedEventError
from ampfl.accounting.accountants.pld import PLDAccountant
from ampfl.accounting.accountants.rdp import RDPAccountant, event_rdp
from ampfl.accounting.events import PrivacyEvent

ACCOUNTANTS: tuple[str, ...] = ("rdp", "pld")
#: What a user may name: an accountant, or ``"auto"`` (resolved on the events by :func:`resolve_accountant`).
AUTO = "auto"
ACCOUNTANT_CHOICES: tuple[str, ...] = (AUTO, *ACCOUNTANTS)

__all__ = [
    "ACCOUNTANTS",
    "ACCOUNTANT_CHOICES",
    "AUTO",
    "Accountant",
    "NeighboringRelation",
    "PLDAccountant",
    "RDPAccountant",
    "UnsupportedEventError",
    "accountant_for",
    "composed",
    "delta_after",
    "epsilon_after",
    "event_rdp",
    "make_accountant",
    "resolve_accountant",
]


def make_accountant(name: str = "rdp", **kwargs: Any) -> Accountant:
    """A fresh accountant by name (``"rdp"`` or ``"pld"``); keyword arguments go to its constructor."""
    kind = check_choice("accountant", name, ACCOUNTANTS)
    return RDPAccountant(**kwargs) if kind == "rdp" else PLDAccountant(**kwargs)


def composed(event: PrivacyEvent, count: int = 1, accountant: str = "pld", **kwargs: Any) -> Accountant:
    """A fresh accountant by name (:func:`make_accountant`) that composed ``count`` × ``event``: what every
    paper's "build an accountant for this analysis" wrapper is."""
    return make_accountant(accountant, **kwargs).compose(event, check_int("count", count))


def epsilon_after(
    event: PrivacyEvent, count: int, delta: float, accountant: str = "pld", **kwargs: Any
) -> float:
    """ε at ``delta`` after ``count`` × ``event`` on a fresh accountant by name (an upper bound on ε)."""
    dlt = check_delta("delta", delta)
    return float(composed(event, count, accountant, **kwargs).get_epsilon(dlt))


def delta_after(
    event: PrivacyEvent, count: int, epsilon: float, accountant: str = "pld", **kwargs: Any
) -> float:
    """δ at ``epsilon`` after ``count`` × ``event`` on a fresh accountant by name (an upper bound on δ)."""
    eps = check_nonnegative("epsilon", epsilon)
    return float(composed(event, count, accountant, **kwargs).get_delta(eps))


def accountant_for(name: str, events: Iterable[PrivacyEvent], **kwargs: Any) -> Accountant:
    """A fresh accountant for ``events`` by requested name (keyword arguments go to its constructor).

    ``"rdp"`` / ``"pld"``: :func:`make_accountant`. ``"auto"``: the PLD accountant when it ``supports`` every
    event (with the given ``neighboring_relation``: the PLD accountant is add/remove-one only), returned with
    those events' PLDs already built; else the RDP accountant. A PLD that cannot be built at the
    accountant's discretisation (:class:`~ampfl.accounting._checks.NumericalError`, e.g. a tiny noise
    multiplier) also gives RDP. Deterministic in its inputs; ``.name`` is the resolved kind.
    """
    kind = check_choice("accountant", name, ACCOUNTANT_CHOICES)
    if kind != AUTO:
        return make_accountant(kind, **kwargs)
    pld = PLDAccountant(**kwargs)
    try:
        if all(pld.supports(event) for event in events):
            return pld
    except NumericalError:
        pass
    return RDPAccountant(**kwargs)


def resolve_accountant(
    name: str,
    events: Iterable[PrivacyEvent],
    neighboring_relation: NeighboringRelation = NeighboringRelation.ADD_OR_REMOVE_ONE,
) -> str:
    """``"rdp"`` or ``"pld"`` for a requested name: itself, or under ``"auto"`` the one
    :func:`accountant_for` picks (``"pld"`` when the PLD accountant accounts every event, else ``"rdp"``)."""
    return accountant_for(name, events, neighboring_relation=neighboring_relation).name
