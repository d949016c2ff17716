"""Random check-in (004) with hidden participation: the PLD accountant's pair (issue 11-f).

Checks: the direct PMF builder against closed-form hockey-stick divergences (never below, close); the
per-count split with no split is the empty-sample refinement; the event's pair is never below an explicit
dataset (lower bounds, any d′ ≤ d) and never above Thm 5.2's pair; the event's new field."""

import math

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from ampfl.accounting.accountants import PLDAccountant
from ampfl.accounting.audit.random_checkin_pld import explicit_pair_pld
from ampfl.accounting.events import RandomCheckInEvent, event_from_dict
from ampfl.accounting.random_checkin import count_split as cs
from ampfl.accounting.random_checkin.pld_pairs import best_hidden_epsilon, hidden_components, refined_weights

NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)  # a failing example is printed as drawn
H = 1e-3  # coarse grids keep the tests fast; every relation below holds on any grid


def _eps(event, steps, delta, h=H):
    return PLDAccountant(h, refine=False).compose(event, steps).get_epsilon(delta)


@settings(max_examples=12, deadline=None)
@given(rate=st.floats(0.01, 1.0), z=st.floats(0.7, 4.0), eps=st.floats(0.0, 3.0))
def test_mixture_pmf_is_pessimistic_and_close(rate, z, eps):
    # Independent computation: the closed-form δ(ε) of the r-subsampled Gaussian, both directions.
    pld = cs.mixture_pld([(1.0, rate, z)], H)
    rem, add = cs.hockey_sticks(np.array([rate]), np.array([z]), eps)
    exact = max(float(rem[0]), float(add[0]))
    got = pld.get_delta_for_epsilon(eps)
    assert exact <= got <= exact + (math.exp(H) - 1.0) * 2.0 + 1e-12


@pytest.mark.parametrize(("rate", "z"), [(3e-7, 3.0), (0.01, 1.0), (0.1, 3.0)])
def test_composed_mixture_pmf_matches_dp_accounting(rate, z):
    # Independent computation: dp-accounting's pessimistic (connect-the-dots) PLD, composed; tiny rates put
    # all the loss inside one grid cell (a regression: the end cells must not be rounded up whole).
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    theirs = pld_lib.from_gaussian_mechanism(
        standard_deviation=z, sensitivity=1.0, sampling_prob=rate, value_discretization_interval=H
    )
    ours = cs.mixture_pld([(1.0, rate, z)], H).self_compose(40).get_epsilon_for_delta(1e-6)
    assert ours == pytest.approx(theirs.self_compose(40).get_epsilon_for_delta(1e-6), rel=1e-3, abs=1e-6)


def test_mixture_of_identity_and_gaussian_matches_closed_form():
    comps = [(0.3, 0.0, 2.0), (0.7, 0.2, 2.0)]
    pld = cs.mixture_pld(comps, 1e-4)
    for eps in (0.0, 0.05, 0.3):
        exact = cs.mixture_delta(comps, eps)
        assert exact <= pld.get_delta_for_epsilon(eps) <= exact * 1.01 + 1e-12


def test_no_split_is_the_empty_sample_refinement():
    p, q, d, z = 0.2, 0.1, 12, 2.0
    comps = cs.count_split_components(p, q, d, z, {})
    pi0, r = refined_weights(p, q, d)
    flat = [x for c in sorted(comps, key=lambda c: c[1]) for x in c]
    assert flat == pytest.approx([pi0, r, z, 1.0 - pi0, q, z])


def test_split_components_are_a_distribution_with_rates_at_most_q():
    for m, s in [(1, 0.5), (3, 0.3), (7, 0.8)]:
        comps = cs.conditional_components(0.1, 0.05, m, 2.0, s)
        assert sum(w for w, _, _ in comps) == pytest.approx(1.0, abs=1e-12)
        assert all(
            0.0 <= r <= 0.05 and std == pytest.approx(2.0 * math.sqrt(1 - s * s)) for _, r, std in comps
        )


def test_hidden_pair_is_tighter_where_participation_is_hidden():
    # p = q = 0.1, d = 10, z = 3 (docs/pld_random_checkin.md): Thm 5.2 gives ε ≈ 0.122, the refinement 0.112
    # and the per-count split about 0.06 (at δ = 1e-5, one round)
    kw = {"participation": 0.1, "sampling_rate": 0.1, "noise_multiplier": 3.0, "local_dataset_size": 10}
    revealed = _eps(RandomCheckInEvent(**kw, participation_hidden=False), 1, 1e-5)
    refined = cs.mixture_pld(hidden_components(0.1, 0.1, 10, 3.0), H).get_epsilon_for_delta(1e-5)
    assert refined < 0.95 * revealed
    best, name = best_hidden_epsilon(**kw, iterations=1, delta=1e-5, value_discretization_interval=H)
    assert best < 0.6 * refined and name.startswith("count-split")
    # the accountant composes both pairs (test_pld_second_pair.py): it gets the split's ε here
    assert _eps(RandomCheckInEvent(**kw), 1, 1e-5) == pytest.approx(best, rel=2e-3)


def _explicit(p, q, d, z, a, theta, steps):
    ab = (a, 0.0) if theta == 0.0 else (math.cos(math.radians(theta)), math.sin(math.radians(theta)))
    one = explicit_pair_pld(
        a=ab[0],
        b=ab[1],
        participation=p,
        sampling_rate=q,
        local_dataset_size=d,
        noise_multiplier=z,
        value_discretization_interval=H,
        cells_per_sigma=64 if ab[1] == 0.0 else 12,
    )
    return one if steps == 1 else one.self_compose(steps)


SETTINGS = {
    "p": st.floats(0.05, 0.9),
    "q": st.floats(0.02, 0.5),
    "d": st.integers(1, 8),
    "fewer": st.integers(0, 3),
    "z": st.floats(1.0, 3.0),
    "theta": st.sampled_from([0.0, 45.0, 90.0]),
    "a": st.floats(0.0, 1.0),
    "steps": st.sampled_from([1, 3]),
}


@settings(max_examples=6, deadline=None, phases=NO_SHRINK)
@given(**SETTINGS)
def test_event_pair_between_explicit_datasets_and_thm52(p, q, d, fewer, z, theta, a, steps):
    # Lower bound: an explicit dataset with d′ = d − fewer other records (d is an upper bound), collinear
    # (a·C·u) or tilted (full norm at θ); upper: Thm 5.2's pair (participation revealed). Both composed.
    kw = {"participation": p, "sampling_rate": q, "noise_multiplier": z, "local_dataset_size": d}
    hidden = PLDAccountant(H, refine=False).compose(RandomCheckInEvent(**kw), steps)
    revealed = PLDAccountant(H, refine=False).compose(
        RandomCheckInEvent(**kw, participation_hidden=False), steps
    )
    explicit = _explicit(p, q, max(0, d - fewer), z, a, theta, steps)
    for eps in (0.0, 0.1, 0.5, 1.5):
        assert explicit.get_delta_for_epsilon(eps) <= hidden.get_delta(eps) + 1e-12
        # two discretisations (ours, dp-accounting's): equal pairs may differ by O(grid) in δ's last digits
        assert hidden.get_delta(eps) <= revealed.get_delta(eps) * (1 + 2 * H) + 1e-12


@settings(max_examples=6, deadline=None, phases=NO_SHRINK)
@given(**SETTINGS, split=st.sampled_from([0.3, 0.6, 0.8]))
def test_count_split_pair_is_never_below_an_explicit_dataset(p, q, d, fewer, z, theta, a, steps, split):
    # The per-count split (any per-count choice is sound), and the best-of-candidates ε between the
    # explicit dataset's ε and Thm 5.2's.
    splits = {m: (split if m % 2 else 0.0) for m in range(1, d + 1)}
    one = cs.mixture_pld(cs.count_split_components(p, q, d, z, splits), H)
    pair = one if steps == 1 else one.self_compose(steps)
    explicit = _explicit(p, q, max(0, d - fewer), z, a, theta, steps)
    for eps in (0.0, 0.1, 0.5, 1.5):
        assert explicit.get_delta_for_epsilon(eps) <= pair.get_delta_for_epsilon(eps) + 1e-12
    kw = {"participation": p, "sampling_rate": q, "noise_multiplier": z, "local_dataset_size": d}
    best, _ = best_hidden_epsilon(**kw, iterations=steps, delta=1e-5, value_discretization_interval=H)
    revealed = _eps(RandomCheckInEvent(**kw, participation_hidden=False), steps, 1e-5)
    assert explicit.get_epsilon_for_delta(1e-5) <= best + 1e-9 and best <= revealed + 2 * H


def test_participation_hidden_field():
    e = RandomCheckInEvent(participation=0.1, sampling_rate=0.1, noise_multiplier=1.0)
    assert e.participation_hidden is True
    off = RandomCheckInEvent(
        participation=0.1, sampling_rate=0.1, noise_multiplier=1.0, participation_hidden=False
    )
    assert event_from_dict(off.to_dict()) == off
    assert event_from_dict({k: v for k, v in off.to_dict().items() if k != "participation_hidden"}) == e
    # d unknown (the default None): Thm 5.2's pair, like revealed participation; d given: the refinement
    kw = {"participation": 0.1, "sampling_rate": 0.1, "noise_multiplier": 1.0}
    assert e.local_dataset_size is None and _eps(e, 3, 1e-5) == _eps(off, 3, 1e-5)
    assert _eps(RandomCheckInEvent(**kw, local_dataset_size=10), 3, 1e-5) < _eps(e, 3, 1e-5)
    with pytest.raises(ValueError, match="participation_hidden"):
        RandomCheckInEvent(participation=0.1, sampling_rate=0.1, noise_multiplier=1.0, participation_hidden=1)


def test_infinite_noise_is_the_identity():
    e = RandomCheckInEvent(
        participation=0.1, sampling_rate=0.1, noise_multiplier=math.inf, local_dataset_size=5
    )
    assert PLDAccountant().compose(e, 10).get_epsilon(1e-6) == 0.0
