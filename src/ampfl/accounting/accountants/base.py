"""The accountant contract (dp-accounting's ``PrivacyAccountant``) plus what a training run needs.

``supports(event)``, ``compose(event, count=1)`` (returns ``self``), ``get_epsilon(delta)``,
``get_delta(epsilon)`` as in dp-accounting; ampfl adds ``would_exceed(event, epsilon, delta, count=1)`` (a dry
run: the state is unchanged) and ``state_dict()`` / ``load_state_dict()`` (JSON-safe; a loaded accountant
answers exactly as the one that was saved). Events are ampfl :mod:`~ampfl.accounting.events`; standard
dp-accounting events are converted with :func:`~ampfl.accounting.events.from_dp_accounting`.

Start-up: this module does not import dp-accounting (whose package imports scipy.signal and
scipy.stats, ~1 s), so :class:`Accountant` implements dp-accounting's ``PrivacyAccountant`` contract itself
(``supports``, ``compose``, ``_maybe_compose``, ``CompositionErrorDetails``, ``neighboring_relation``) instead
of subclassing it, and :class:`NeighboringRelation` is ampfl's copy of its enum (same names and values);
dp-accounting's members are accepted wherever a relation is (:func:`as_relation`) and converted back where
dp-accounting is called (:func:`dp_accounting_relation`).
"""

from __future__ import annotations

import abc
import copy
from dataclasses import dataclass
from typing import Any, Self

from ampfl.accounting._checks import UnsupportedEventError, check_delta, check_int, check_nonnegative
from ampfl.accounting.events import PrivacyEvent, event_from_dict, from_dp_accounting
from ampfl.accounting.relations import NeighboringRelation, as_relation, dp_accounting_relation

__all__ = [
    "Accountant",
    "CompositionErrorDetails",
    "NeighboringRelation",
    "UnsupportedEventError",
    "as_relation",
    "dp_accounting_relation",
]


@dataclass(frozen=True)
class CompositionErrorDetails:
    """dp-accounting's ``PrivacyAccountant.CompositionErrorDetails``: the offending (sub)event and why."""

    invalid_event: Any
    error_message: str | None


_RELATIONS = {
    "add_or_remove_one": NeighboringRelation.ADD_OR_REMOVE_ONE,
    "replace_one": NeighboringRelation.REPLACE_ONE,
}


def relation_name(relation: NeighboringRelation) -> str:
    for name, value in _RELATIONS.items():
        if value == as_relation(relation):
            return name
    raise ValueError(f"neighboring_relation must be one of {', '.join(_RELATIONS)}. Found {relation}.")


def relation_from_name(name: str) -> NeighboringRelation:
    if name not in _RELATIONS:
        raise ValueError(f"neighboring_relation must be one of {', '.join(_RELATIONS)}. Found {name!r}.")
    return _RELATIONS[name]


def as_ampfl_event(event: Any) -> PrivacyEvent:
    """An ampfl event, converting a standard dp-accounting one."""
    if isinstance(event, PrivacyEvent):
        return event
    from dp_accounting import dp_event  # only for an event that is not ampfl's (dp-accounting is loaded)

    if isinstance(event, dp_event.DpEvent):
        try:
            return from_dp_accounting(event)
        except ValueError as exc:
            raise UnsupportedEventError(str(exc)) from None
    raise UnsupportedEventError(
        f"event must be an ampfl or dp-accounting event. Found {type(event).__name__}."
    )


class Accountant(abc.ABC):
    """Base of ampfl's accountants (dp-accounting's ``PrivacyAccountant`` contract). Subclasses implement
    :meth:`_check` (support, with the reason) and :meth:`_add` (compose a supported event), and the state
    hooks."""

    #: ``"rdp"`` or ``"pld"``: the ``accountant`` key of reports and the ``[privacy] accountant`` setting.
    name: str = ""
    _FORMAT = "ampfl.accountant/1"

    def __init__(
        self, neighboring_relation: NeighboringRelation = NeighboringRelation.ADD_OR_REMOVE_ONE
    ) -> None:
        relation = as_relation(neighboring_relation)
        relation_name(relation)
        self._neighboring_relation = relation
        self._events: list[dict[str, Any]] = []  # distinct events, as dicts
        self._calls: list[tuple[int, int]] = []  # (index into _events, count), in composition order

    # --------------------------------------------------------------------------- dp-accounting contract
    @property
    def neighboring_relation(self) -> NeighboringRelation:
        """The neighbouring relation (fixed at construction)."""
        return self._neighboring_relation

    def supports(self, event: Any) -> bool:
        """Whether :meth:`compose` would accept ``event`` (nothing is composed)."""
        return self._maybe_compose(event, 0, False) is None

    @abc.abstractmethod
    def get_epsilon(self, target_delta: float) -> float:
        """ε at ``target_delta`` of everything composed so far."""

    @abc.abstractmethod
    def get_delta(self, target_epsilon: float) -> float:
        """δ at ``target_epsilon`` of everything composed so far."""

    def epsilon_reading(self, target_delta: float) -> tuple[float, bool]:
        """``(ε, exact)``: :meth:`get_epsilon`, or (``exact`` False) a cheaper certified upper bound on it —
        what a run reports every round. This accountant's readings are all exact."""
        return self.get_epsilon(target_delta), True

    def _maybe_compose(self, event: Any, count: int, do_compose: bool) -> CompositionErrorDetails | None:
        try:
            ev = as_ampfl_event(event)
            reason = self._check(ev)
        except UnsupportedEventError as exc:
            return CompositionErrorDetails(invalid_event=event, error_message=str(exc))
        if reason is not None:
            return CompositionErrorDetails(invalid_event=event, error_message=reason)
        if do_compose:
            n = check_int("count", count, minimum=0)
            self._add(ev, n)
            self._record(ev, n)
        return None

    def compose(self, event: Any, count: int = 1) -> Self:
        """Compose ``count`` × ``event``; raises :class:`UnsupportedEventError` naming the sub-event."""
        check_int("count", count, minimum=0)
        error = self._maybe_compose(event, count, False)
        if error is not None:
            raise UnsupportedEventError(f"{type(self).__name__}: {error.error_message}")
        self._maybe_compose(event, count, True)
        return self

    def _record(self, event: PrivacyEvent, count: int) -> None:
        as_dict = event.to_dict()
        try:
            idx = self._events.index(as_dict)
        except ValueError:
            self._events.append(as_dict)
            idx = len(self._events) - 1
        self._calls.append((idx, count))

    def would_exceed(self, event: Any, epsilon: float, delta: float, count: int = 1) -> bool:
        """Whether composing ``count`` × ``event`` would push ε(δ) above ``epsilon`` (state unchanged)."""
        eps = check_nonnegative("epsilon", epsilon)
        dlt = check_delta("delta", delta)
        trial = copy.deepcopy(self)
        trial.compose(event, count)
        return bool(trial.get_epsilon(dlt) > eps)

    # -------------------------------------------------------------------------------------- persistence
    def events(self) -> list[tuple[PrivacyEvent, int]]:
        """What was composed, in order: ``(event, count)`` per call."""
        return [(event_from_dict(self._events[i]), n) for i, n in self._calls]

    def state_dict(self) -> dict[str, Any]:
        """A JSON-safe snapshot: the composition history plus the accountant's own state."""
        return {
            "format": self._FORMAT,
            "accountant": self.name,
            "neighboring_relation": relation_name(self.neighboring_relation),
            "events": [dict(e) for e in self._events],
            "calls": [[i, n] for i, n in self._calls],
            "state": self._state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> Self:
        """Restore a snapshot written by :meth:`state_dict` of an accountant of the same kind and settings."""
        if (
            not isinstance(state, dict)
            or state.get("format") != self._FORMAT
            or state.get("accountant") != self.name
        ):
            raise ValueError(f"state must be a {self.name!r} accountant snapshot ({self._FORMAT}).")
        if relation_from_name(state["neighboring_relation"]) != self.neighboring_relation:
            raise ValueError("state was written under another neighboring_relation.")
        self._events = [dict(e) for e in state["events"]]
        self._calls = [(int(i), int(n)) for i, n in state["calls"]]
        self._restore(state["state"])
        return self

    # ------------------------------------------------------------------------------------- subclasses
    @abc.abstractmethod
    def _check(self, event: PrivacyEvent) -> str | None:
        """``None`` if ``event`` is supported, else a message naming the offending sub-event."""

    @abc.abstractmethod
    def _add(self, event: PrivacyEvent, count: int) -> None:
        """Compose a supported event ``count`` times."""

    @abc.abstractmethod
    def _state(self) -> dict[str, Any]:
        """The subclass's state (JSON-safe)."""

    @abc.abstractmethod
    def _restore(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`_state` (the composition history is already restored)."""
