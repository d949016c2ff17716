"""The run calibrates: a target ε becomes a noise multiplier once, by the run's accountant.

An algorithm configured with a target (``target_epsilon``, a per-group budget, a per-round target) does not
calibrate in its constructor. It states what to calibrate as :class:`NoiseTarget` s
(:meth:`~ampfl.fl.algorithms.base.Algorithm.noise_targets`: the per-round event as a function of the noise
multiplier z, ``event_at``, the target (ε, δ) and the number of rounds) and receives the resolved values
(:meth:`~ampfl.fl.algorithms.base.Algorithm.set_noise`). :func:`calibrate_algorithm` does it for every run
(``ampfl run``, ``ampfl deploy``'s ServerApp and each ClientApp, which all build the algorithm through
:func:`ampfl.fl.run.experiment.build_algorithm`):

1. the accountant: ``[privacy] accountant``, or under ``"auto"`` the one that accounts every target's event
   (at :data:`~ampfl.fl.privacy.run_accountant.PROBE_NOISE_MULTIPLIER`): PLD where all have one, else RDP;
2. each target's z with that accountant (:func:`ampfl.fl.privacy.run_accountant.calibrate_noise`: the smallest
   z within 0.5 % whose ε after ``rounds`` rounds meets the target, re-checked, or ``UnreachableTarget``); a
   target with ``choices`` (alternative sound descriptions of the same mechanism: 002's split credit) takes
   the description needing the smallest z;
3. the run's accountant (:class:`~ampfl.fl.privacy.run_accountant.RunAccountant`) on the calibrated algorithm.
   Under ``"auto"`` it resolves on the events the run composes; in the rare case that is another accountant
   than step 1's (a calibrated z so small that its PLD cannot be built), the targets are calibrated again with
   the ledger's accountant, named, and the noise set again: never an algorithm built twice, and never a run
   that calibrates with one accountant and reports with another.

Closed forms a paper gives for its own analysis (004's Thm 4.1/5.1/Cor. 5.3, 001's planner) stay available
as named analyses of the algorithm (``analysis = "paper"`` ...), computed in the algorithm without the run's
accountant and labelled as such in their docs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ampfl.accounting.accountants import AUTO, NeighboringRelation, accountant_for

if TYPE_CHECKING:
    from ampfl.accounting.events import PrivacyEvent
    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.fl.config import PrivacyConfig
    from ampfl.fl.privacy.run_accountant import RunAccountant


@dataclass(frozen=True)
class NoiseTarget:
    """One noise multiplier the run calibrates for an algorithm.

    Attributes:
        key: the algorithm's name for it (``"noise_multiplier"``, ``"group 2"``, ...).
        event_at: one round's event at noise multiplier z (the event the run composes).
        target_epsilon: ε to meet after ``rounds`` rounds, at ``target_delta`` (None: the run's δ).
        rounds: the number of rounds the target covers.
        relation: the neighbouring relation of ``event_at``'s events.
        target_delta: δ of the target; None: ``[privacy] delta``.
        choices: alternative descriptions of the same round (name → ``event_at``), every one sound: the one
            needing the smallest z is used (empty: ``event_at`` only).
        who: the algorithm, for error messages.
    """

    key: str
    event_at: Callable[[float], PrivacyEvent]
    target_epsilon: float
    rounds: int
    relation: NeighboringRelation = NeighboringRelation.ADD_OR_REMOVE_ONE
    target_delta: float | None = None
    choices: Mapping[str, Callable[[float], PrivacyEvent]] = field(default_factory=dict)
    who: str = "the algorithm"


@dataclass(frozen=True)
class CalibratedNoise:
    """A resolved :class:`NoiseTarget`: the noise multiplier, the accountant that calibrated it and the
    chosen description (one of ``choices``; None without choices)."""

    noise_multiplier: float
    accountant: str
    choice: str | None = None


def calibration_accountant(targets: list[NoiseTarget], privacy: PrivacyConfig) -> str:
    """The accountant the targets are calibrated with: ``[privacy] accountant``, or under ``"auto"`` PLD when
    it accounts every target's event (every choice's) at the probe noise, else RDP."""
    if privacy.accountant != AUTO:
        return str(privacy.accountant)
    from ampfl.fl.privacy.run_accountant import PROBE_NOISE_MULTIPLIER, accounted, run_relation

    kinds = set()
    for target in targets:
        for event_at in (target.event_at, *target.choices.values()):
            probe = accounted([(event_at(PROBE_NOISE_MULTIPLIER), 1)], privacy, target.relation)
            relation = run_relation(privacy, target.relation)
            kinds.add(accountant_for(AUTO, [probe[0][0]], neighboring_relation=relation).name)
    return "rdp" if "rdp" in kinds else "pld"


def calibrate_targets(
    targets: list[NoiseTarget], privacy: PrivacyConfig, accountant: str
) -> dict[str, CalibratedNoise]:
    """Each target's noise multiplier with ``accountant`` (module docstring, step 2)."""
    from ampfl.fl.privacy.run_accountant import calibrate_noise

    resolved: dict[str, CalibratedNoise] = {}
    for target in targets:
        options = dict(target.choices) or {"": target.event_at}
        zs = {
            name: calibrate_noise(
                event_at,
                target_epsilon=target.target_epsilon,
                target_delta=target.target_delta,
                rounds=target.rounds,
                privacy=privacy,
                relation=target.relation,
                who=target.who,
                accountant=accountant,
            )
            for name, event_at in options.items()
        }
        best = min(zs, key=lambda name: zs[name])  # first of equals: the order the algorithm gave
        resolved[target.key] = CalibratedNoise(zs[best], accountant, best or None)
    return resolved


def calibrate_algorithm(algorithm: Algorithm, privacy: PrivacyConfig) -> RunAccountant:
    """Calibrate ``algorithm``'s :class:`NoiseTarget` s and return the run's accountant (module docstring)."""
    from ampfl.fl.privacy.run_accountant import RunAccountant

    targets = algorithm.noise_targets()
    if not targets:
        return RunAccountant(privacy, algorithm)
    accountant = calibration_accountant(targets, privacy)
    algorithm.set_noise(calibrate_targets(targets, privacy, accountant))
    ledger = RunAccountant(privacy, algorithm)
    if ledger.kind is not None and ledger.kind != accountant:  # "auto" resolved otherwise on the real events
        named = privacy.model_copy(update={"accountant": ledger.kind})
        algorithm.set_noise(calibrate_targets(targets, named, ledger.kind))
        ledger = RunAccountant(named, algorithm)
        ledger.requested = privacy.accountant
    return ledger
