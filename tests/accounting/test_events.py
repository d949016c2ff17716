"""Events are validated data that round-trip through plain dicts (JSON) and convert to dp-accounting."""

from __future__ import annotations

import json
import math

import pytest
from dp_accounting import dp_event

from ampfl.accounting import events as ev

G = ev.GaussianEvent(noise_multiplier=1.5)
EXAMPLES = [
    G,
    ev.LaplaceEvent(noise_multiplier=2.0),
    ev.PoissonSampledEvent(sampling_rate=0.1, event=G),
    ev.SampledWithoutReplacementEvent(source_size=100, sample_size=10, event=G),
    ev.PublicParticipationEvent(participation=0.3, event=G),
    ev.RandomCheckInEvent(participation=0.1, sampling_rate=0.2, noise_multiplier=1.0, local_dataset_size=30),
    ev.ModelSplitEvent(num_submodels=3, noise_multiplier=1.0, nonsplit_noise_multiplier=2.0),
    ev.DropoutEvent(noise_multiplier=1.0),
    ev.BalancedIterationSubsamplingEvent(iterations=10, participations=2, noise_multiplier=1.0),
    ev.MSPAFLRoundEvent(participation=0.5, noise_multiplier=4.3),
    ev.GroupRoundEvent(sampling_rate=0.1, noise_multiplier=3.0, group=2),
    ev.BernoulliMaskEvent(c=0.1, dim=4),
    ev.SelfComposedEvent(event=G, count=7),
    ev.ComposedEvent(events=(G, ev.LaplaceEvent(noise_multiplier=1.0))),
]


@pytest.mark.parametrize("event", EXAMPLES, ids=lambda e: type(e).__name__)
def test_dict_round_trip(event):
    data = json.loads(json.dumps(event.to_dict()))
    assert ev.event_from_dict(data) == event
    assert hash(ev.event_from_dict(data)) == hash(event)


@pytest.mark.parametrize("event", EXAMPLES, ids=lambda e: type(e).__name__)
def test_frozen(event):
    import dataclasses

    name = dataclasses.fields(event)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(event, name, getattr(event, name))


def test_standard_events_convert_both_ways():
    for event in EXAMPLES[:4] + EXAMPLES[-2:]:
        dp = event.to_dp_accounting()
        assert isinstance(dp, dp_event.DpEvent)
        assert ev.from_dp_accounting(dp) == event
    assert ev.MSPAFLRoundEvent(participation=0.5, noise_multiplier=1.0).to_dp_accounting() is None
    with pytest.raises(ValueError, match="supported dp-accounting event"):
        ev.from_dp_accounting(dp_event.NonPrivateDpEvent())


@pytest.mark.parametrize(
    ("build", "needle"),
    [
        (lambda: ev.GaussianEvent(noise_multiplier=0.0), "noise_multiplier must be in"),
        (lambda: ev.PoissonSampledEvent(sampling_rate=1.5, event=G), "sampling_rate must be in"),
        (lambda: ev.PoissonSampledEvent(sampling_rate=0.5, event="gaussian"), "event must be an ampfl"),
        (lambda: ev.SampledWithoutReplacementEvent(source_size=5, sample_size=6, event=G), "sample_size"),
        (lambda: ev.PublicParticipationEvent(participation=-0.1, event=G), "participation must be in"),
        (
            lambda: ev.BalancedIterationSubsamplingEvent(
                iterations=3, participations=4, noise_multiplier=1.0
            ),
            "participations",
        ),
        (
            lambda: ev.MSPAFLRoundEvent(participation=0.5, noise_multiplier=1.0, private_state="kept"),
            "private_state",
        ),
        (lambda: ev.BernoulliMaskEvent(c=0.5, dim=1), "c must be in"),
        (lambda: ev.SelfComposedEvent(event=G, count=-1), "count"),
        (lambda: ev.event_from_dict({"type": "moments"}), "type in"),
    ],
)
def test_validation_names_the_field(build, needle):
    with pytest.raises(ValueError, match=needle):
        build()


def test_infinite_noise_is_allowed():
    assert ev.GaussianEvent(noise_multiplier=math.inf).noise_multiplier == math.inf
