"""ampfl's events as dp-accounting ``DpEvent``s: export where the mechanism is exactly one, refuse otherwise.

:func:`to_dp_event` gives the dp-accounting event whose privacy loss is the ampfl event's *exactly* (the
same pair of output distributions under the same neighbouring relation), so that any dp-accounting
accountant, or a tool built on ``DpEvent``s, accounts it. An amplified event has such an equivalent only in
the cases below; for the others dp-accounting has no event with the same privacy loss (a revealed
participation coin, a secret choice among several coordinates, a fixed number of participations per
epoch), and an export would have to give up the amplification or claim one dp-accounting cannot check.
Those are refused with :class:`NotExpressibleError`, naming the event and the reason. The other direction,
``DpEvent`` to ampfl, is :func:`ampfl.accounting.events.from_dp_accounting`.

Exact equivalents:

- Gaussian, Laplace, Poisson and without-replacement sampling, composition: dp-accounting's own events
  (:meth:`~ampfl.accounting.events.PrivacyEvent.to_dp_accounting`), inner events exported recursively.
- :class:`~ampfl.accounting.events.GroupRoundEvent` (001 Alg. 1): ``PoissonSampledDpEvent(q_g,
  GaussianDpEvent(z_g))``, the mechanism itself (clients of the group sampled independently at q_g).
- :class:`~ampfl.accounting.events.RandomCheckInEvent` (004 Alg. 1) with ``participation = 1``: every
  client joins and samples each record at q: ``PoissonSampledDpEvent(q, GaussianDpEvent(z))``. With hidden
  participation and ``local_dataset_size = 0`` (the record is its client's only one, user-level DP with one
  record per user): the record is in the sum exactly when its client joins *and* samples it, independently
  with probability p·q, so ``PoissonSampledDpEvent(p·q, GaussianDpEvent(z))``.
- :class:`~ampfl.accounting.events.ModelSplitEvent` with one block (002 Alg. 1, d = 1): plain DP-SGD,
  ``GaussianDpEvent(z)``, composed with the non-split part's ``GaussianDpEvent`` if there is one.
- :class:`~ampfl.accounting.events.BernoulliMaskEvent` (003): each of the ``dim`` bits is a binary
  randomized response that keeps the true bit with probability 1 − c, the worst pair Bern(1 − c) vs Bern(c)
  of keep-probabilities in [c, 1 − c]: ``SelfComposedDpEvent(RandomizedResponseDpEvent(2c, 2), dim)``.
  dp-accounting accounts randomized response under replace-one only; the mask's bound holds for every pair
  of inputs, so use a replace-one dp-accounting accountant: its ε is the mask's under either relation.
"""

from __future__ import annotations

from typing import Any

from ampfl.accounting.events import (
    BalancedIterationSubsamplingEvent,
    BernoulliMaskEvent,
    ComposedEvent,
    DropoutEvent,
    GroupRoundEvent,
    ModelSplitEvent,
    MSPAFLRoundEvent,
    PoissonSampledEvent,
    PrivacyEvent,
    PublicParticipationEvent,
    RandomCheckInEvent,
    SampledWithoutReplacementEvent,
    SelfComposedEvent,
)

__all__ = ["NotExpressibleError", "to_dp_event"]


class NotExpressibleError(ValueError):
    """An ampfl event that no dp-accounting ``DpEvent`` expresses exactly (the message says why)."""


_REVEALED = (
    "the observer sees whether the unit took part, a loss that is 0 with probability 1 - p and the inner "
    "event's otherwise; dp-accounting has no event for a revealed participation coin"
)
_SECRET_BLOCK = (
    "the unit's update lands in one of several blocks chosen in secret, a multivariate Gaussian mixture; "
    "dp-accounting's MixtureOfGaussiansDpEvent is one-dimensional"
)
_REASONS: dict[type[PrivacyEvent], str] = {
    PublicParticipationEvent: _REVEALED,
    MSPAFLRoundEvent: _REVEALED + " (000: the server sees which clients upload)",
    DropoutEvent: _SECRET_BLOCK + " (dropout at rate 1/2 is a split into 2 blocks)",
    BalancedIterationSubsamplingEvent: (
        "each unit joins exactly k of T steps chosen in secret, a mixture over the k-subsets of T "
        "steps; dp-accounting has no event for it (compose it with ampfl's accountants)"
    ),
}


def _gaussian_under_poisson(rate: float, noise_multiplier: float) -> Any:
    from dp_accounting import dp_event

    return dp_event.PoissonSampledDpEvent(float(rate), dp_event.GaussianDpEvent(float(noise_multiplier)))


def _random_checkin(event: RandomCheckInEvent) -> Any:
    p, q, z = event.participation, event.sampling_rate, event.noise_multiplier
    if p == 1.0:
        return _gaussian_under_poisson(q, z)
    if event.participation_hidden and event.local_dataset_size == 0:
        return _gaussian_under_poisson(p * q, z)
    if not event.participation_hidden:
        why = _REVEALED
    else:
        why = (
            "with hidden participation and other records at the client (local_dataset_size "
            f"{event.local_dataset_size}), the sum reveals the client's coin through those records: a "
            "mixture no dp-accounting event expresses"
        )
    raise NotExpressibleError(
        f"{event!r} has no dp-accounting equivalent: {why}. PoissonSampledDpEvent({q}, GaussianDpEvent({z})) "
        "bounds it without the participation amplification"
    )


def _model_split(event: ModelSplitEvent) -> Any:
    from dp_accounting import dp_event

    if event.num_submodels != 1:
        raise NotExpressibleError(f"{event!r} has no dp-accounting equivalent: {_SECRET_BLOCK}")
    split = dp_event.GaussianDpEvent(float(event.noise_multiplier))
    if event.nonsplit_noise_multiplier is None:
        return split
    return dp_event.ComposedDpEvent([split, dp_event.GaussianDpEvent(float(event.nonsplit_noise_multiplier))])


def _bernoulli_mask(event: BernoulliMaskEvent) -> Any:
    from dp_accounting import dp_event

    bit = dp_event.RandomizedResponseDpEvent(noise_parameter=2.0 * float(event.c), num_buckets=2)
    return dp_event.SelfComposedDpEvent(bit, int(event.dim))


def to_dp_event(event: PrivacyEvent) -> Any:
    """The dp-accounting ``DpEvent`` with exactly ``event``'s privacy loss (module docstring).

    Raises:
        NotExpressibleError: for an event (or a part of one) no dp-accounting event expresses, naming it and
            saying why.
        ValueError: for something that is not an ampfl event.
    """
    from dp_accounting import dp_event

    if not isinstance(event, PrivacyEvent):
        raise ValueError(f"event must be an ampfl PrivacyEvent. Found {type(event).__name__}.")
    if isinstance(event, PoissonSampledEvent):
        return dp_event.PoissonSampledDpEvent(float(event.sampling_rate), to_dp_event(event.event))
    if isinstance(event, SampledWithoutReplacementEvent):
        inner = to_dp_event(event.event)
        return dp_event.SampledWithoutReplacementDpEvent(
            int(event.source_size), int(event.sample_size), inner
        )
    if isinstance(event, SelfComposedEvent):
        return dp_event.SelfComposedDpEvent(to_dp_event(event.event), int(event.count))
    if isinstance(event, ComposedEvent):
        return dp_event.ComposedDpEvent([to_dp_event(e) for e in event.events])
    if isinstance(event, GroupRoundEvent):
        return _gaussian_under_poisson(event.sampling_rate, event.noise_multiplier)
    if isinstance(event, RandomCheckInEvent):
        return _random_checkin(event)
    if isinstance(event, ModelSplitEvent):
        return _model_split(event)
    if isinstance(event, BernoulliMaskEvent):
        return _bernoulli_mask(event)
    reason = _REASONS.get(type(event))
    if reason is not None:
        raise NotExpressibleError(f"{event!r} has no dp-accounting equivalent: {reason}")
    converted = event.to_dp_accounting()
    if converted is None:
        raise NotExpressibleError(f"{event!r} has no dp-accounting equivalent")
    return converted
