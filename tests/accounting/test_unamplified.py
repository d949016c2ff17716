"""``without_amplification``: each mechanism accounted as if every record were used and seen every round."""

from __future__ import annotations

import dp_accounting
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ampfl.accounting.accountants import RDPAccountant
from ampfl.accounting.events import (
    BalancedIterationSubsamplingEvent,
    BernoulliMaskEvent,
    ComposedEvent,
    DropoutEvent,
    GaussianEvent,
    GroupRoundEvent,
    ModelSplitEvent,
    MSPAFLRoundEvent,
    PoissonSampledEvent,
    PublicParticipationEvent,
    RandomCheckInEvent,
    SelfComposedEvent,
)
from ampfl.accounting.unamplified import without_amplification


def test_known_mappings() -> None:
    g = GaussianEvent(noise_multiplier=3.0)
    assert without_amplification(g) == g
    assert without_amplification(PoissonSampledEvent(sampling_rate=0.01, event=g)) == g
    assert without_amplification(PublicParticipationEvent(participation=0.1, event=g)) == g
    assert (
        without_amplification(
            RandomCheckInEvent(
                participation=0.5, sampling_rate=0.1, noise_multiplier=3.0, local_dataset_size=10
            )
        )
        == g
    )
    assert without_amplification(MSPAFLRoundEvent(participation=0.3, noise_multiplier=3.0)) == g
    assert without_amplification(GroupRoundEvent(sampling_rate=0.2, noise_multiplier=3.0, group=1)) == g
    assert without_amplification(ModelSplitEvent(num_submodels=4, noise_multiplier=3.0)) == g
    assert without_amplification(
        DropoutEvent(noise_multiplier=3.0, nonsplit_noise_multiplier=2.0)
    ) == ComposedEvent(events=(g, GaussianEvent(noise_multiplier=2.0)))
    assert without_amplification(
        BalancedIterationSubsamplingEvent(iterations=10, participations=3, noise_multiplier=3.0)
    ) == SelfComposedEvent(event=g, count=3)
    nested = SelfComposedEvent(event=PoissonSampledEvent(sampling_rate=0.1, event=g), count=5)
    assert without_amplification(nested) == SelfComposedEvent(event=g, count=5)


def test_randomness_only_mechanism_has_no_unamplified_guarantee() -> None:
    with pytest.raises(ValueError, match="BernoulliMaskEvent"):
        without_amplification(BernoulliMaskEvent(c=0.1, dim=100))


def test_unamplified_gaussian_composition_matches_dp_accounting() -> None:
    # Independent computation: dp-accounting's RDP accountant on T Gaussian events.
    z, rounds, delta = 4.0, 50, 1e-5
    event = RandomCheckInEvent(
        participation=0.5, sampling_rate=0.5, noise_multiplier=z, local_dataset_size=14
    )
    ours = RDPAccountant().compose(without_amplification(event), rounds).get_epsilon(delta)
    theirs = dp_accounting.rdp.RdpAccountant().compose(
        dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), rounds)
    )
    assert ours == pytest.approx(theirs.get_epsilon(delta), rel=0.02)


@settings(max_examples=25, deadline=None)
@given(
    p=st.floats(0.01, 1.0),
    q=st.floats(0.01, 1.0),
    z=st.floats(0.5, 20.0),
    rounds=st.integers(1, 200),
)
def test_amplification_never_costs_privacy(p: float, q: float, z: float, rounds: int) -> None:
    # The amplified bound of each sampled mechanism is at most its unamplified twin's (same z, same T).
    delta = 1e-5
    for event in (
        RandomCheckInEvent(participation=p, sampling_rate=q, noise_multiplier=z, local_dataset_size=20),
        PoissonSampledEvent(sampling_rate=q, event=GaussianEvent(noise_multiplier=z)),
        MSPAFLRoundEvent(participation=p, noise_multiplier=z),
    ):
        amplified = RDPAccountant().compose(event, rounds).get_epsilon(delta)
        plain = RDPAccountant().compose(without_amplification(event), rounds).get_epsilon(delta)
        assert amplified <= plain * (1 + 1e-9)
