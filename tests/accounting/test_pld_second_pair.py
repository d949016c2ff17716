"""The PLD accountant's second composition (issue 11): a hidden-participation random check-in round has two
dominating pairs (the empty-sample refinement and the per-count noise split), and the accountant answers
the smaller ε (δ) of the history composed with each. Checks: the answer is that minimum, computed directly;
it is never above the refinement alone; mixed histories; resume; events without a second pair; a second
composition that cannot be built is left out."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ampfl.accounting._checks import NumericalError
from ampfl.accounting.accountants import PLDAccountant
from ampfl.accounting.accountants import pld as pld_module
from ampfl.accounting.events import GaussianEvent, PoissonSampledEvent, RandomCheckInEvent
from ampfl.accounting.random_checkin.count_split import mixture_pld
from ampfl.accounting.random_checkin.pld_pairs import count_split_alternative, hidden_components

H = 1e-3


def _event(p=0.1, q=0.01, d=100, z=3.0, **kw):
    return RandomCheckInEvent(
        participation=p, sampling_rate=q, noise_multiplier=z, local_dataset_size=d, **kw
    )


def _refined(event):
    return mixture_pld(
        hidden_components(
            event.participation, event.sampling_rate, event.local_dataset_size, event.noise_multiplier
        ),
        H,
    )


def _split(event):
    comps = count_split_alternative(event)
    assert comps is not None
    return mixture_pld(list(comps), H)


@pytest.mark.parametrize(("event", "steps"), [(_event(), 1), (_event(), 50), (_event(q=0.1, d=10), 200)])
def test_answer_is_the_smaller_of_the_two_compositions(event, steps):
    acc = PLDAccountant(H, refine=False).compose(event, steps)
    refined, split = _refined(event).self_compose(steps), _split(event).self_compose(steps)
    floor = pld_module.PLD_DELTA_FLOOR  # the accountant reads at its numerical floor
    for delta in (1e-5, 1e-8):
        at = delta - floor
        direct = min(refined.get_epsilon_for_delta(at), split.get_epsilon_for_delta(at))
        assert acc.get_epsilon(delta) == pytest.approx(direct, rel=1e-6)
    for eps in (0.01, 0.2):
        direct = min(refined.get_delta_for_epsilon(eps), split.get_delta_for_epsilon(eps)) + floor
        assert acc.get_delta(eps) == pytest.approx(direct, rel=1e-6, abs=1e-15)
    # where participation is nearly hidden (z = 3), the split wins by a wide margin (one round ~3x at d = 100)
    assert acc.get_epsilon(1e-5) < 0.8 * refined.get_epsilon_for_delta(1e-5)


@settings(max_examples=15, deadline=None)
@given(
    p=st.floats(0.05, 0.9),
    q=st.floats(0.005, 0.5),
    d=st.integers(1, 60),
    z=st.floats(0.8, 5.0),
    steps=st.sampled_from([1, 4, 30]),
    eps=st.floats(0.0, 2.0),
)
def test_never_above_the_refinement_alone(p, q, d, z, steps, eps):
    event = _event(p, q, d, z)
    acc = PLDAccountant(H, refine=False).compose(event, steps)
    refined = _refined(event).self_compose(steps)
    # the accountant reads at its numerical floor (delta - PLD_DELTA_FLOOR, delta(eps) + PLD_DELTA_FLOOR)
    floor = pld_module.PLD_DELTA_FLOOR
    assert acc.get_delta(eps) <= refined.get_delta_for_epsilon(eps) * (1 + 1e-9) + floor + 1e-15
    assert acc.get_epsilon(1e-6) <= refined.get_epsilon_for_delta(1e-6 - floor) * (1 + 1e-9) + 1e-12


def test_mixed_history_and_resume():
    event, gauss = (
        _event(),
        PoissonSampledEvent(sampling_rate=0.01, event=GaussianEvent(noise_multiplier=1.0)),
    )
    calls = [(event, 3), (gauss, 2), (event, 5)]
    live = PLDAccountant(H, refine=False)
    for i, (e, n) in enumerate(calls):
        live.compose(e, n)
        if i == 1:
            live = PLDAccountant(H, refine=False).load_state_dict(json.loads(json.dumps(live.state_dict())))
    g = pld_module.event_pld(gauss, H).self_compose(2)
    first = _refined(event).self_compose(3).compose(g).compose(_refined(event).self_compose(5))
    second = _split(event).self_compose(3).compose(g).compose(_split(event).self_compose(5))
    direct = min(first.get_epsilon_for_delta(1e-5), second.get_epsilon_for_delta(1e-5))
    assert live.get_epsilon(1e-5) == pytest.approx(direct, rel=1e-6)
    once = PLDAccountant(H, refine=False)
    for e, n in calls:
        once.compose(e, n)
    assert once.get_epsilon(1e-5) == live.get_epsilon(1e-5)  # bit for bit


@pytest.mark.parametrize(
    "event",
    [
        _event(participation_hidden=False),  # Thm 5.2's pair only
        RandomCheckInEvent(participation=0.1, sampling_rate=0.01, noise_multiplier=3.0),  # d unknown
        _event(p=0.5, q=0.01, d=10, z=1.0),  # no count gains from a split at z = 1
        _event(p=0.5, q=0.5, d=18, z=4.0),  # splits chosen, but one round gains < 1 %: not worth composing
        _event(p=1.0),
    ],
)
def test_events_without_a_second_pair_compose_once(event):
    assert not pld_module.has_second_pair(event)
    acc = PLDAccountant(H, refine=False).compose(event, 4)
    assert acc.get_epsilon(1e-5) == PLDAccountant(H, refine=False).compose(event, 4).get_epsilon(1e-5)
    assert all(pair == 0 for pair, _ in acc._grids)


def test_a_second_composition_that_cannot_be_built_is_left_out(monkeypatch):
    event = _event()
    expected = _refined(event).self_compose(10).get_epsilon_for_delta(1e-5)

    def broken(event, interval=H):
        raise NumericalError("too large")

    monkeypatch.setattr(pld_module, "second_pld", broken)
    acc = PLDAccountant(H, refine=False).compose(event, 10)
    assert acc.get_epsilon(1e-5) == pytest.approx(expected, rel=1e-6)
    assert acc.get_epsilon(1e-5) == pytest.approx(expected, rel=1e-6)  # and again, once it is marked


@settings(max_examples=20, deadline=None)
@given(
    p=st.floats(0.05, 0.9),
    shrink=st.floats(0.0, 0.95),
    q=st.floats(0.005, 0.5),
    d=st.integers(1, 40),
    z=st.floats(1.0, 5.0),
    eps=st.floats(0.0, 3.0),
)
def test_pairs_grow_with_participation(p, shrink, q, d, z, eps):
    """A client joining with p′ ≤ p (the sampler accounts max_i p_i): both pairs at p′, the split pair with
    p's own splits, are below the pairs at p, in both directions (module docstring of pld_pairs)."""
    from ampfl.accounting.random_checkin.count_split import (
        count_split_components,
        count_splits,
        directional_deltas,
    )

    low = p * (1.0 - shrink)
    refined_p, refined_low = hidden_components(p, q, d, z), hidden_components(low, q, d, z)
    assert all(
        directional_deltas(refined_low, eps) <= directional_deltas(refined_p, eps) * (1 + 1e-9) + 1e-15
    )
    splits = count_splits(p, q, d, z, 0.05)
    split_p, split_low = (
        count_split_components(p, q, d, z, splits),
        count_split_components(low, q, d, z, splits),
    )
    assert all(directional_deltas(split_low, eps) <= directional_deltas(split_p, eps) * (1 + 1e-9) + 1e-15)
