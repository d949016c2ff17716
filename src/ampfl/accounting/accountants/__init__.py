"""Accountants behind dp-accounting's contract: :class:`RDPAccountant` and :class:`PLDAccountant`.

``make_accountant("rdp" | "pld")`` builds one by name (the ``--accountant`` flag and the run config's
``[privacy] accountant``).
"""

from __future__ import annotations

from typing import Any

from ampfl.accounting._checks import check_choice
from ampfl.accounting.accountants.base import Accountant, NeighboringRelation, UnsupportedEventError
from ampfl.accounting.accountants.pld import PLDAccountant
from ampfl.accounting.accountants.rdp import RDPAccountant, event_rdp

ACCOUNTANTS: tuple[str, ...] = ("rdp", "pld")

__all__ = [
    "ACCOUNTANTS",
    "Accountant",
    "NeighboringRelation",
    "PLDAccountant",
    "RDPAccountant",
    "UnsupportedEventError",
    "event_rdp",
    "make_accountant",
]


def make_accountant(name: str = "rdp", **kwargs: Any) -> Accountant:
    """A fresh accountant by name (``"rdp"`` or ``"pld"``); keyword arguments go to its constructor."""
    kind = check_choice("accountant", name, ACCOUNTANTS)
    return RDPAccountant(**kwargs) if kind == "rdp" else PLDAccountant(**kwargs)
