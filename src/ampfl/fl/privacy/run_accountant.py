"""The run's privacy ledger: one accountant per run, each round's events composed exactly once.

The spine (docs/architecture.md): an algorithm reports what ran as events
(:meth:`ampfl.fl.algorithms.base.Algorithm.round_events`), :class:`RunAccountant` composes them in one
accountant built from the ``[privacy]`` table (``ampfl.accounting.accountants.make_accountant`` with the
algorithm's neighbouring relation), answers ε at the run's δ after any round without re-composing history,
and is saved in (and restored from) every checkpoint, so a resumed run reports the same ε as an
uninterrupted one. Before each round, :meth:`RunAccountant.would_exceed` tells the run whether that round
would push ε above ``max_epsilon``.

Per-group accounting (paper 001, GDPFed): a :class:`~ampfl.accounting.events.GroupRoundEvent` is composed
in its group's own accountant (one privacy curve per group; client datasets of different groups are
disjoint, so the run's ε is the max over groups, Corollary 1); :meth:`RunAccountant.groups_over_budget`
names the groups whose next round would exceed their budget. A run mixes no other events with them.

A non-private algorithm (``privacy_unit`` None: FedAvg, or zero noise) has no accountant; its ε is ``inf``
(written as ``1e999`` in JSON), whatever δ.

:func:`calibrate_noise` is the one way the simulator turns a target ε into a noise multiplier: it hands the
algorithm's own per-round event to :func:`ampfl.accounting.calibrate.calibrate` with the run's accountant,
δ and relation, so the calibrated run composes exactly the event that was calibrated. A run calls it once
per noise target of its algorithm (:mod:`ampfl.fl.privacy.calibration`), never inside the algorithm's
constructor.

Which accountant: ``[privacy] accountant = "auto"`` (the default) resolves to ``"pld"`` when the
PLD accountant accounts every event of the algorithm's first round (each group's, for per-group algorithms),
else ``"rdp"`` (:func:`ampfl.accounting.accountants.accountant_for`); :attr:`RunAccountant.kind` is the
resolved one (``summary.json``'s ``accountant``). :func:`planned_epsilon` resolves ``"auto"`` the same way on
the events it is given; a run's calibration names the accountant it calibrates with, and recalibrates with
the ledger's in the rare case that differs (:func:`ampfl.fl.privacy.calibration.calibrate_algorithm`), so a
run never calibrates with one accountant and reports with another.

Neighbouring: ``[privacy] neighbouring = "replace-one"`` declares the dataset sizes public, so an
algorithm may divide by sizes computed from the data; then every event of an add/remove algorithm is
accounted under replace-one (:func:`replace_one_event`: sensitivity 2C, amplification dropped) with the
accountant's relation REPLACE_ONE (:func:`run_relation`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ampfl.accounting.accountants import (
    Accountant,
    NeighboringRelation,
    accountant_for,
    make_accountant,
)
from ampfl.accounting.accountants.base import UnsupportedEventError, relation_name
from ampfl.accounting.events import (
    ComposedEvent,
    GaussianEvent,
    GroupRoundEvent,
    LaplaceEvent,
    PrivacyEvent,
    SelfComposedEvent,
)
from ampfl.accounting.unamplified import without_amplification

if TYPE_CHECKING:
    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.fl.config import PrivacyConfig

__all__ = [
    "RunAccountant",
    "accounted",
    "as_one_event",
    "calibrate_noise",
    "planned_epsilon",
    "replace_one_event",
    "run_relation",
]

Events = Sequence[tuple[PrivacyEvent, int]]

#: Relative slack of a per-group budget check (a calibration composed at once vs. round by round can differ
#: in the last bits of the floating-point sum).
GROUP_BUDGET_RTOL = 1e-9

#: The noise multiplier of the event :func:`calibrate_noise` checks support on (and resolves ``"auto"`` on):
#: support does not depend on z, and the PLD of a z = 10 event is about ten times smaller than at z = 1
#: (dp-accounting's grid spans about 1/z² + 20/z), so the check costs little next to the calibration.
PROBE_NOISE_MULTIPLIER = 10.0


def as_one_event(events: Events) -> tuple[PrivacyEvent, int] | None:
    """One ``(event, count)`` for a round's events (``None`` when the round has none)."""
    kept = [(e, int(n)) for e, n in events if int(n) > 0]
    if not kept:
        return None
    if len(kept) == 1:
        return kept[0]
    parts = tuple(e if n == 1 else SelfComposedEvent(event=e, count=n) for e, n in kept)
    return ComposedEvent(events=parts), 1


def run_relation(privacy: PrivacyConfig, relation: NeighboringRelation) -> NeighboringRelation:
    """The relation the run's accountant uses: the algorithm's, or REPLACE_ONE under ``[privacy]
    neighbouring = "replace-one"``."""
    return NeighboringRelation.REPLACE_ONE if privacy.neighbouring == "replace-one" else relation


def replace_one_event(event: PrivacyEvent) -> PrivacyEvent:
    """An add/remove-one event accounted under replace-one (dataset sizes public).

    Replacing a unit changes its contribution by at most twice the add/remove sensitivity (2C for clipped
    updates), so every noise multiplier is halved; and the amplification is dropped
    (:func:`~ampfl.accounting.unamplified.without_amplification`): both neighbours share the unit's sampling,
    participation and split coins, so by joint convexity of the hockey-stick divergence each round is at
    most the Gaussian mechanism at sensitivity 2C. Sound and conservative (no replace-one amplification
    bound is claimed for these mechanisms).
    """
    try:
        unamplified = without_amplification(event)
    except ValueError:  # its only protection is randomness (e.g. 003's Bernoulli masks): no Gaussian bound
        raise ValueError(
            f"neighbouring: {type(event).__name__} cannot be accounted under replace-one (its only "
            "protection is its randomness); use neighbouring = 'add-remove'."
        ) from None
    return _doubled_sensitivity(unamplified)


def _doubled_sensitivity(event: PrivacyEvent) -> PrivacyEvent:
    if isinstance(event, GaussianEvent):
        return GaussianEvent(noise_multiplier=event.noise_multiplier / 2.0)
    if isinstance(event, LaplaceEvent):
        return LaplaceEvent(noise_multiplier=event.noise_multiplier / 2.0)
    if isinstance(event, SelfComposedEvent):
        return SelfComposedEvent(event=_doubled_sensitivity(event.event), count=event.count)
    if isinstance(event, ComposedEvent):
        return ComposedEvent(events=tuple(_doubled_sensitivity(e) for e in event.events))
    raise ValueError(  # pragma: no cover - without_amplification returns only the kinds above
        f"neighbouring: {type(event).__name__} cannot be accounted under replace-one; use 'add-remove'."
    )


def accounted(
    events: Events,
    privacy: PrivacyConfig,
    relation: NeighboringRelation = NeighboringRelation.ADD_OR_REMOVE_ONE,
) -> list[tuple[PrivacyEvent, int]]:
    """The events the run's accountant composes: as reported or without amplification (``accounting``);
    under ``neighbouring = "replace-one"`` an add/remove algorithm's (``relation``) events are mapped by
    :func:`replace_one_event`."""
    if privacy.neighbouring == "replace-one" and relation == NeighboringRelation.ADD_OR_REMOVE_ONE:
        return [(replace_one_event(event), count) for event, count in events]
    if privacy.accounting == "amplified":
        return list(events)
    return [(without_amplification(event), count) for event, count in events]


def _unsupported(kind: str, who: str, reason: str, replace_one: bool = False) -> ValueError:
    if replace_one:  # the relation comes from [privacy] neighbouring, not from the algorithm
        return ValueError(
            f"privacy.neighbouring: the {kind!r} accountant cannot account {who}'s events under "
            f'"replace-one": {reason} Set [privacy] accountant = "rdp" (or "auto"), or neighbouring = '
            '"add-remove" with the declared public constants.'
        )
    return ValueError(f"privacy.accountant: the {kind!r} accountant cannot account {who}'s events: {reason}")


def _check_supported(
    accountant: Accountant, kind: str, who: str, events: Events, replace_one: bool = False
) -> None:
    """Raise one line naming ``privacy.accountant`` (or ``privacy.neighbouring`` when ``replace_one``: the
    relation was set by ``[privacy] neighbouring``) when ``accountant`` cannot account ``events``."""
    for event, _ in events:
        if not accountant.supports(event):
            try:
                accountant.compose(event, 0)  # raises with the reason; the state is unchanged
            except UnsupportedEventError as exc:
                raise _unsupported(kind, who, str(exc), replace_one) from None
            raise _unsupported(kind, who, type(event).__name__, replace_one)  # pragma: no cover


class RunAccountant:
    """The run-level accountant of one training run.

    Args:
        privacy: the run's ``[privacy]`` settings (accountant kind, δ, ``max_epsilon``).
        algorithm: the run's algorithm; its ``privacy_unit`` (None: no accountant, ε = ∞) and
            ``neighboring_relation`` choose the accountant.

    Raises:
        ValueError: one line naming ``privacy.accountant`` when the accountant cannot account the algorithm's
            first round, or ``privacy.max_epsilon`` when a budget is set for a run without any guarantee.
    """

    def __init__(self, privacy: PrivacyConfig, algorithm: Algorithm) -> None:
        self.privacy = privacy
        self.unit = algorithm.privacy_unit
        #: the relation of the algorithm's events, and the one the accountant uses (``run_relation``)
        self.event_relation: NeighboringRelation = algorithm.neighboring_relation
        self.relation: NeighboringRelation = run_relation(privacy, algorithm.neighboring_relation)
        self.rounds_composed = 0
        #: the requested accountant ("auto", "rdp" or "pld") and the resolved one (None: no ledger)
        self.requested = privacy.accountant
        self.kind: str | None = None
        self._kinds: list[str] = []
        self.accountant: Accountant | None = None
        self.groups: dict[int, Accountant] = {}
        if self.unit is None:
            if privacy.max_epsilon is not None:
                raise ValueError(
                    f"privacy.max_epsilon: {algorithm.name} gives no privacy guarantee here (epsilon = inf); "
                    "remove max_epsilon."
                )
            return
        try:
            first = accounted(algorithm.round_events(0), privacy, self.event_relation)
        except ValueError as exc:
            raise ValueError(f"privacy.{exc}") from None
        events = [event for event, _ in first]
        self.accountant = accountant_for(privacy.accountant, events, neighboring_relation=self.relation)
        self.kind = self.accountant.name
        _check_supported(
            self.accountant, self.kind, algorithm.name, first, self.relation != self.event_relation
        )
        self._kinds = sorted({event.kind for event, _ in first})

    @property
    def private(self) -> bool:
        """Whether the run has a guarantee (and so an accountant)."""
        return self.accountant is not None

    @property
    def delta(self) -> float:
        return float(self.privacy.delta)

    def _group(self, g: int) -> Accountant:
        if g not in self.groups:
            self.groups[g] = make_accountant(str(self.kind), neighboring_relation=self.relation)
        return self.groups[g]

    def _split(
        self, events: Events
    ) -> tuple[list[tuple[PrivacyEvent, int]], list[tuple[int, PrivacyEvent, int]]]:
        """(plain events, (group, accounted event, count) of the group events), as accounted."""
        plain: list[tuple[PrivacyEvent, int]] = []
        grouped: list[tuple[int, PrivacyEvent, int]] = []
        accounted_events = accounted(events, self.privacy, self.event_relation)
        for (raw, _), (event, count) in zip(events, accounted_events, strict=True):
            if isinstance(raw, GroupRoundEvent):
                grouped.append((int(raw.group), event, int(count)))
            else:
                plain.append((event, int(count)))
        if plain and (grouped or self.groups):
            raise ValueError("privacy: a run cannot mix per-group events (GroupRoundEvent) with others.")
        return plain, grouped

    def groups_over_budget(self, events: Events, budgets: dict[int, float]) -> list[int]:
        """Groups whose event in ``events`` would take their ε(δ) above min(budget, ``max_epsilon``)."""
        if self.accountant is None:
            return []
        over = []
        for g, event, count in self._split(events)[1]:
            limit = min(budgets.get(g, math.inf), self.privacy.max_epsilon or math.inf)
            if math.isfinite(limit) and self._group(g).would_exceed(
                event, limit * (1.0 + GROUP_BUDGET_RTOL), self.privacy.delta, count=count
            ):
                over.append(g)
        return over

    def epsilon_by_group(self) -> dict[int, float]:
        """ε at the run's δ of each group composed so far (empty without per-group events)."""
        return {g: float(acc.get_epsilon(self.privacy.delta)) for g, acc in sorted(self.groups.items())}

    def would_exceed(self, events: Events) -> bool:
        """Whether composing ``events`` would push ε(δ) above ``max_epsilon`` (False without a budget)."""
        if self.accountant is None or self.privacy.max_epsilon is None:
            return False
        if any(isinstance(event, GroupRoundEvent) for event, _ in events):
            return bool(self.groups_over_budget(events, {}))
        one = as_one_event(accounted(events, self.privacy, self.event_relation))
        if one is None:
            return False
        event, count = one
        return bool(
            self.accountant.would_exceed(event, self.privacy.max_epsilon, self.privacy.delta, count=count)
        )

    def compose(self, events: Events) -> None:
        """Compose one round's events (call exactly once per round)."""
        self.rounds_composed += 1
        if self.accountant is None:
            return
        plain, grouped = self._split(events)
        for g, event, count in grouped:
            if count > 0:
                self._group(g).compose(event, count)
        for event, count in plain:
            if count > 0:
                self.accountant.compose(event, count)

    def epsilon(self) -> float:
        """ε at the run's δ of everything composed so far (``inf`` without a guarantee)."""
        if self.accountant is None:
            return math.inf
        if self.groups:  # parallel composition over groups of disjoint clients (paper 001, Corollary 1)
            return max(self.epsilon_by_group().values())
        return float(self.accountant.get_epsilon(self.privacy.delta))

    def epsilon_reading(self) -> tuple[float, bool]:
        """``(ε, exact)``: what a run reports at an evaluation: :meth:`epsilon`, or (``exact``
        False) a certified upper bound on it that costs a fraction of a reading (the PLD accountant's
        :meth:`~ampfl.accounting.accountants.pld.PLDAccountant.epsilon_reading`; the RDP accountant's and
        per-group readings are exact). The summary and budget checks always use the exact :meth:`epsilon`."""
        if self.accountant is None or self.groups:
            return self.epsilon(), True
        return self.accountant.epsilon_reading(self.privacy.delta)

    def analysis(self) -> str:
        """How ε is obtained, in words (the ``analysis`` key of ``summary.json``)."""
        if self.accountant is None:
            return "none (no privacy guarantee)"
        kinds = ", ".join(self._kinds) or "no"
        if self.groups:
            kinds += f" (one {self.kind} accountant per group; ε = max over groups)"
        unamplified = ", no amplification" if self.privacy.accounting == "no-amplification" else ""
        return (
            f"{self.kind} accountant over {kinds} events "
            f"({relation_name(self.relation)}, one {self.unit}{unamplified})"
        )

    def state_dict(self) -> dict[str, Any]:
        """JSON-safe: the accountant's ``state_dict()`` (None without one) and the rounds composed."""
        return {
            "rounds_composed": self.rounds_composed,
            "accountant": None if self.accountant is None else self.accountant.state_dict(),
            "groups": {str(g): acc.state_dict() for g, acc in self.groups.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict` (ValueError when written by another kind of accountant)."""
        saved = state.get("accountant")
        if self.accountant is None or saved is None:
            if (saved is None) != (self.accountant is None):
                raise ValueError("--resume: the checkpoint's privacy accountant does not match this run.")
        else:
            kind = saved.get("accountant") if isinstance(saved, dict) else None
            if kind != self.kind:
                raise ValueError(
                    f"--resume: the checkpoint's privacy accountant ({kind}) does not match this run's "
                    f"({self.kind}); set [privacy] accountant = {kind!r}."
                )
            self.accountant.load_state_dict(saved)
            self.groups = {}
            for g, group_state in state.get("groups", {}).items():
                self._group(int(g)).load_state_dict(group_state)
        self.rounds_composed = int(state["rounds_composed"])


def calibrate_noise(
    make_event: Callable[[float], PrivacyEvent],
    *,
    target_epsilon: float,
    rounds: int,
    privacy: PrivacyConfig,
    relation: NeighboringRelation = NeighboringRelation.ADD_OR_REMOVE_ONE,
    who: str = "the algorithm",
    target_delta: float | None = None,
    accountant: str | None = None,
) -> float:
    """Smallest noise multiplier z (within 0.5%) with ε(``rounds`` × ``make_event(z)``) ≤ ``target_epsilon``.

    The event is accounted as the run would (``privacy.accounting``: as reported or without amplification).
    Uses :func:`ampfl.accounting.calibrate.calibrate` with ``accountant`` (default: the run's,
    ``privacy.accountant``, where ``"auto"`` resolves on the probe event
    ``make_event(PROBE_NOISE_MULTIPLIER)``) and ``relation``, at δ = ``target_delta`` (default: the run's
    ``privacy.delta``). A run calibrates its algorithm's targets through
    :func:`ampfl.fl.privacy.calibration.calibrate_algorithm`, which names the accountant.

    Raises:
        ValueError: one line naming ``privacy.accountant`` when it cannot account the event.
        ampfl.accounting.calibrate.UnreachableTarget: no noise multiplier up to 1e4 meets the target.
    """
    from ampfl.accounting.calibrate import calibrate

    event_relation = relation  # of make_event's events; the accountant's is run_relation(...)

    def accounted_event(z: float) -> PrivacyEvent:
        return accounted([(make_event(z), 1)], privacy, event_relation)[0][0]

    relation = run_relation(privacy, event_relation)

    probe_event = accounted_event(PROBE_NOISE_MULTIPLIER)
    if accountant is None:
        probe = _resolved(privacy, [probe_event], relation)
    else:
        probe = accountant_for(accountant, [probe_event], neighboring_relation=relation)
    kind = probe.name
    _check_supported(probe, kind, who, [(probe_event, 1)], relation != event_relation)
    return calibrate(
        accounted_event,
        target_epsilon=target_epsilon,
        target_delta=privacy.delta if target_delta is None else target_delta,
        accountant=kind,
        count=rounds,
        accountant_kwargs={"neighboring_relation": relation},
    )


def planned_epsilon(
    events: Events,
    *,
    privacy: PrivacyConfig,
    relation: NeighboringRelation = NeighboringRelation.ADD_OR_REMOVE_ONE,
) -> float:
    """ε at the run's δ of a planned schedule, accounted as the run would (to pick between sound analyses).

    Data-independent: an algorithm may compare the ε of alternative event descriptions of its mechanism
    before training (e.g. with or without a split credit) and report the smaller one; it never composes
    what actually ran (that is :class:`RunAccountant`'s job). ``"auto"`` resolves on ``events``.
    """
    schedule = accounted(events, privacy, relation)
    acc = _resolved(privacy, [event for event, _ in schedule], run_relation(privacy, relation))
    for event, count in schedule:
        acc.compose(event, count)
    return float(acc.get_epsilon(privacy.delta))


def _resolved(
    privacy: PrivacyConfig, events: Sequence[PrivacyEvent], relation: NeighboringRelation
) -> Accountant:
    """A fresh accountant of ``privacy.accountant`` resolved on (accounted) ``events`` ("auto": PLD or
    RDP)."""
    return accountant_for(privacy.accountant, events, neighboring_relation=relation)
