"""The run's privacy ledger: one accountant per run, each round's events composed exactly once.

The spine (issue 10, part 6; docs/architecture.md): an algorithm reports what ran as events
(:meth:`ampfl.fl.algorithms.base.Algorithm.round_events`), :class:`RunAccountant` composes them in one
accountant built from the ``[privacy]`` table (``ampfl.accounting.accountants.make_accountant`` with the
algorithm's neighbouring relation), answers ε at the run's δ after any round without re-composing history,
and is saved in (and restored from) every checkpoint, so a resumed run reports the same ε as an
uninterrupted one. Before each round, :meth:`RunAccountant.would_exceed` tells the run whether that round
would push ε above ``max_epsilon``.

A non-private algorithm (``privacy_unit`` None: FedAvg, or zero noise) has no accountant; its ε is ``inf``
(written as ``1e999`` in JSON), whatever δ.

:func:`calibrate_noise` is the one way the simulator turns a target ε into a noise multiplier: it hands the
algorithm's own per-round event to :func:`ampfl.accounting.calibrate.calibrate` with the run's accountant,
δ and relation, so the calibrated run composes exactly the event that was calibrated.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ampfl.accounting.accountants import Accountant, NeighboringRelation, make_accountant
from ampfl.accounting.accountants.base import UnsupportedEventError, relation_name
from ampfl.accounting.events import ComposedEvent, PrivacyEvent, SelfComposedEvent
from ampfl.accounting.unamplified import without_amplification

if TYPE_CHECKING:
    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.fl.config import PrivacyConfig

__all__ = ["RunAccountant", "accounted", "as_one_event", "calibrate_noise"]

Events = Sequence[tuple[PrivacyEvent, int]]


def as_one_event(events: Events) -> tuple[PrivacyEvent, int] | None:
    """One ``(event, count)`` for a round's events (``None`` when the round has none)."""
    kept = [(e, int(n)) for e, n in events if int(n) > 0]
    if not kept:
        return None
    if len(kept) == 1:
        return kept[0]
    parts = tuple(e if n == 1 else SelfComposedEvent(event=e, count=n) for e, n in kept)
    return ComposedEvent(events=parts), 1


def accounted(events: Events, privacy: PrivacyConfig) -> list[tuple[PrivacyEvent, int]]:
    """The events the run's accountant composes: as reported or without amplification (``accounting``)."""
    if privacy.accounting == "amplified":
        return list(events)
    return [(without_amplification(event), count) for event, count in events]


def _unsupported(kind: str, who: str, reason: str) -> ValueError:
    return ValueError(f"privacy.accountant: the {kind!r} accountant cannot account {who}'s events: {reason}")


def _check_supported(accountant: Accountant, kind: str, who: str, events: Events) -> None:
    for event, _ in events:
        if not accountant.supports(event):
            try:
                accountant.compose(event, 0)  # raises with the reason; the state is unchanged
            except UnsupportedEventError as exc:
                raise _unsupported(kind, who, str(exc)) from None
            raise _unsupported(kind, who, type(event).__name__)  # pragma: no cover - compose raised


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
        self.relation: NeighboringRelation = algorithm.neighboring_relation
        self.rounds_composed = 0
        self._kinds: list[str] = []
        self.accountant: Accountant | None = None
        if self.unit is None:
            if privacy.max_epsilon is not None:
                raise ValueError(
                    f"privacy.max_epsilon: {algorithm.name} gives no privacy guarantee here (epsilon = inf); "
                    "remove max_epsilon."
                )
            return
        self.accountant = make_accountant(privacy.accountant, neighboring_relation=self.relation)
        try:
            first = accounted(algorithm.round_events(0), privacy)
        except ValueError as exc:
            raise ValueError(f"privacy.{exc}") from None
        _check_supported(self.accountant, privacy.accountant, algorithm.name, first)
        self._kinds = sorted({event.kind for event, _ in first})

    @property
    def private(self) -> bool:
        """Whether the run has a guarantee (and so an accountant)."""
        return self.accountant is not None

    @property
    def delta(self) -> float:
        return float(self.privacy.delta)

    def would_exceed(self, events: Events) -> bool:
        """Whether composing ``events`` would push ε(δ) above ``max_epsilon`` (False without a budget)."""
        if self.accountant is None or self.privacy.max_epsilon is None:
            return False
        one = as_one_event(accounted(events, self.privacy))
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
        for event, count in accounted(events, self.privacy):
            if int(count) > 0:
                self.accountant.compose(event, int(count))

    def epsilon(self) -> float:
        """ε at the run's δ of everything composed so far (``inf`` without a guarantee)."""
        if self.accountant is None:
            return math.inf
        return float(self.accountant.get_epsilon(self.privacy.delta))

    def analysis(self) -> str:
        """How ε is obtained, in words (the ``analysis`` key of ``summary.json``)."""
        if self.accountant is None:
            return "none (no privacy guarantee)"
        kinds = ", ".join(self._kinds) or "no"
        unamplified = ", no amplification" if self.privacy.accounting == "no-amplification" else ""
        return (
            f"{self.privacy.accountant} accountant over {kinds} events "
            f"({relation_name(self.relation)}, one {self.unit}{unamplified})"
        )

    def state_dict(self) -> dict[str, Any]:
        """JSON-safe: the accountant's ``state_dict()`` (None without one) and the rounds composed."""
        return {
            "rounds_composed": self.rounds_composed,
            "accountant": None if self.accountant is None else self.accountant.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict` (ValueError when written by another kind of accountant)."""
        saved = state.get("accountant")
        if self.accountant is None or saved is None:
            if (saved is None) != (self.accountant is None):
                raise ValueError("--resume: the checkpoint's privacy accountant does not match this run.")
        else:
            self.accountant.load_state_dict(saved)
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
) -> float:
    """Smallest noise multiplier z (within 0.5%) with ε(``rounds`` × ``make_event(z)``) ≤ ``target_epsilon``.

    The event is accounted as the run would (``privacy.accounting``: as reported or without amplification).
    Uses :func:`ampfl.accounting.calibrate.calibrate` with the run's accountant and ``relation``, at δ =
    ``target_delta`` (default: the run's ``privacy.delta``).

    Raises:
        ValueError: one line naming ``privacy.accountant`` when it cannot account the event.
        ampfl.accounting.calibrate.UnreachableTarget: no noise multiplier up to 1e4 meets the target.
    """
    from ampfl.accounting.calibrate import calibrate

    def accounted_event(z: float) -> PrivacyEvent:
        event = make_event(z)
        return event if privacy.accounting == "amplified" else without_amplification(event)

    probe = make_accountant(privacy.accountant, neighboring_relation=relation)
    _check_supported(probe, privacy.accountant, who, [(accounted_event(1.0), 1)])
    return calibrate(
        accounted_event,
        target_epsilon=target_epsilon,
        target_delta=privacy.delta if target_delta is None else target_delta,
        accountant=privacy.accountant,
        count=rounds,
        accountant_kwargs={"neighboring_relation": relation},
    )
