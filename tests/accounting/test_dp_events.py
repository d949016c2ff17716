"""Export of ampfl's events to dp-accounting: every exported event reads the ε ampfl's own accountant
reports for the ampfl event (both accountants, dp-accounting's on the export), and every event without an
exact equivalent is refused naming itself."""

from __future__ import annotations

import math

import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.privacy_accountant import NeighboringRelation
from dp_accounting.rdp import rdp_privacy_accountant
from hypothesis import given, settings
from hypothesis import strategies as st

from ampfl.accounting.accountants import PLDAccountant, RDPAccountant
from ampfl.accounting.dp_events import NotExpressibleError, to_dp_event
from ampfl.accounting.events import (
    BalancedIterationSubsamplingEvent,
    BernoulliMaskEvent,
    ComposedEvent,
    DropoutEvent,
    GaussianEvent,
    GroupRoundEvent,
    LaplaceEvent,
    ModelSplitEvent,
    MSPAFLRoundEvent,
    PoissonSampledEvent,
    PublicParticipationEvent,
    RandomCheckInEvent,
    SampledWithoutReplacementEvent,
    SelfComposedEvent,
    from_dp_accounting,
)

DELTA = 1e-5
REPLACE = NeighboringRelation.REPLACE_ONE


def _dp_pld_epsilon(
    event: object, relation: NeighboringRelation = NeighboringRelation.ADD_OR_REMOVE_ONE
) -> float:
    accountant = pld_privacy_accountant.PLDAccountant(relation, value_discretization_interval=1e-4)
    return float(accountant.compose(event).get_epsilon(DELTA))


def test_group_round_is_a_poisson_sampled_gaussian() -> None:
    event = GroupRoundEvent(sampling_rate=0.02, noise_multiplier=1.1, group=2)
    assert to_dp_event(event) == dp_event.PoissonSampledDpEvent(0.02, dp_event.GaussianDpEvent(1.1))


def test_full_participation_check_in_is_record_level_poisson_sampling() -> None:
    event = RandomCheckInEvent(
        participation=1.0, sampling_rate=0.05, noise_multiplier=1.3, local_dataset_size=7
    )
    assert to_dp_event(event) == dp_event.PoissonSampledDpEvent(0.05, dp_event.GaussianDpEvent(1.3))


def test_a_lone_record_behind_a_hidden_coin_is_sampled_at_p_times_q() -> None:
    event = RandomCheckInEvent(
        participation=0.4, sampling_rate=0.5, noise_multiplier=0.9, local_dataset_size=0
    )
    exported = to_dp_event(event)
    assert exported == dp_event.PoissonSampledDpEvent(0.2, dp_event.GaussianDpEvent(0.9))
    ampfl = PLDAccountant().compose(event, 50).get_epsilon(DELTA)
    theirs = _dp_pld_epsilon(dp_event.SelfComposedDpEvent(exported, 50))
    assert ampfl == pytest.approx(theirs, rel=0.02)


@settings(max_examples=15, deadline=None)
@given(
    c=st.floats(0.05, 0.45),
    dim=st.integers(1, 64),
)
def test_bernoulli_mask_is_binary_randomized_response(c: float, dim: int) -> None:
    """The export's ε (dp-accounting, both accountants) is ampfl's for the mask, whose RDP is exact.

    dp-accounting accounts randomized response under replace-one only; the mask's bound holds for every pair
    of inputs, so it is the same under either relation."""
    event = BernoulliMaskEvent(c=c, dim=dim)
    exported = to_dp_event(event)
    assert exported == dp_event.SelfComposedDpEvent(dp_event.RandomizedResponseDpEvent(2 * c, 2), dim)
    ours = RDPAccountant().compose(event).get_epsilon(DELTA)
    theirs = rdp_privacy_accountant.RdpAccountant(RDPAccountant().orders, REPLACE).compose(exported)
    assert ours == pytest.approx(theirs.get_epsilon(DELTA), rel=1e-6)
    # one bit is pure DP with eps = log((1 - c) / c), whatever accountant reads it
    single = _dp_pld_epsilon(to_dp_event(BernoulliMaskEvent(c=c, dim=1)), REPLACE)
    assert single == pytest.approx(math.log((1 - c) / c), abs=2e-3)


def test_model_split_with_one_block_is_dp_sgd() -> None:
    assert to_dp_event(ModelSplitEvent(num_submodels=1, noise_multiplier=1.5)) == dp_event.GaussianDpEvent(
        1.5
    )
    partial = to_dp_event(
        ModelSplitEvent(num_submodels=1, noise_multiplier=1.5, nonsplit_noise_multiplier=2.0)
    )
    assert partial == dp_event.ComposedDpEvent([dp_event.GaussianDpEvent(1.5), dp_event.GaussianDpEvent(2.0)])
    ampfl = (
        PLDAccountant().compose(ModelSplitEvent(num_submodels=1, noise_multiplier=1.5), 20).get_epsilon(DELTA)
    )
    assert ampfl == pytest.approx(
        _dp_pld_epsilon(dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(1.5), 20)), rel=0.01
    )


def test_compositions_and_sampling_export_their_inner_events() -> None:
    group = GroupRoundEvent(sampling_rate=0.1, noise_multiplier=1.0)
    event = ComposedEvent(
        events=(
            SelfComposedEvent(event=group, count=3),
            SampledWithoutReplacementEvent(
                source_size=100, sample_size=10, event=LaplaceEvent(noise_multiplier=2.0)
            ),
            PoissonSampledEvent(sampling_rate=0.5, event=GaussianEvent(noise_multiplier=1.0)),
        )
    )
    exported = to_dp_event(event)
    assert isinstance(exported, dp_event.ComposedDpEvent)
    assert exported.events[0] == dp_event.SelfComposedDpEvent(to_dp_event(group), 3)
    # the standard parts come back as they were
    assert from_dp_accounting(exported.events[1]) == event.events[1]
    assert from_dp_accounting(exported.events[2]) == event.events[2]


@pytest.mark.parametrize(
    ("event", "words"),
    [
        (PublicParticipationEvent(participation=0.5, event=GaussianEvent(noise_multiplier=1.0)), "revealed"),
        (MSPAFLRoundEvent(participation=0.5, noise_multiplier=1.0), "revealed"),
        (RandomCheckInEvent(participation=0.5, sampling_rate=0.1, noise_multiplier=1.0), "other records"),
        (
            RandomCheckInEvent(
                participation=0.5, sampling_rate=0.1, noise_multiplier=1.0, participation_hidden=False
            ),
            "revealed",
        ),
        (ModelSplitEvent(num_submodels=4, noise_multiplier=1.0), "blocks"),
        (DropoutEvent(noise_multiplier=1.0), "blocks"),
        (BalancedIterationSubsamplingEvent(iterations=10, participations=2, noise_multiplier=1.0), "k of T"),
    ],
)
def test_events_without_an_equivalent_are_refused_by_name(event: object, words: str) -> None:
    with pytest.raises(NotExpressibleError, match=words) as info:
        to_dp_event(event)  # type: ignore[arg-type]
    assert type(event).__name__ in str(info.value) and "\n" not in str(info.value)
    # inside a composition, the refusal still names the part
    with pytest.raises(NotExpressibleError, match=type(event).__name__):
        to_dp_event(SelfComposedEvent(event=event, count=2))  # type: ignore[arg-type]


def test_random_check_in_refusal_offers_the_unamplified_bound() -> None:
    with pytest.raises(NotExpressibleError, match=r"PoissonSampledDpEvent\(0\.1, GaussianDpEvent\(1\.0\)\)"):
        to_dp_event(RandomCheckInEvent(participation=0.5, sampling_rate=0.1, noise_multiplier=1.0))


def test_not_an_event() -> None:
    with pytest.raises(ValueError, match="event must be an ampfl PrivacyEvent"):
        to_dp_event(dp_event.GaussianDpEvent(1.0))
