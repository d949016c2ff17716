"""Neighbouring relations: ampfl's copy of dp-accounting's ``NeighboringRelation`` (same names and values), so
that importing the accountants and the mechanism registry does not import dp-accounting (its package
imports scipy.signal and scipy.stats, ~1 s); dp-accounting's members are accepted wherever a relation is
(:func:`as_relation`) and converted back where dp-accounting is called (:func:`dp_accounting_relation`)."""

from __future__ import annotations

import enum
from typing import Any

__all__ = ["NeighboringRelation", "as_relation", "dp_accounting_relation"]


class NeighboringRelation(enum.Enum):
    """dp-accounting's ``NeighboringRelation`` (same names and values)."""

    ADD_OR_REMOVE_ONE = 1
    REPLACE_ONE = 2
    REPLACE_SPECIAL = 3


def as_relation(relation: Any) -> NeighboringRelation:
    """ampfl's member for ``relation``: itself, or dp-accounting's member of the same name."""
    if isinstance(relation, NeighboringRelation):
        return relation
    name = getattr(relation, "name", None)
    if type(relation).__name__ == "NeighboringRelation" and name in NeighboringRelation.__members__:
        return NeighboringRelation[str(name)]
    raise ValueError(f"neighboring_relation must be a NeighboringRelation. Found {relation!r}.")


def dp_accounting_relation(relation: NeighboringRelation) -> Any:
    """dp-accounting's member of the same name (imports dp-accounting: call it where it is used)."""
    from dp_accounting.privacy_accountant import NeighboringRelation as DpRelation

    return DpRelation[relation.name]
