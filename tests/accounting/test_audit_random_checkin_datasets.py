"""Random check-in (004): explicit datasets with non-identical records (lower bounds) and the per-count
envelope diagnostic (issue 11, step 2a): independent enumerations/integrations, and "never above the sound
bounds" as a property over two-type datasets."""

import itertools
import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from scipy import stats

from ampfl.accounting.accountants import PLDAccountant
from ampfl.accounting.audit.random_checkin_datasets import (
    binned_delta,
    log_masses,
    random_record_types,
    search_record_types,
    sum_distribution,
    types_pair_pld,
)
from ampfl.accounting.audit.random_checkin_envelope import (
    count_hidden_path_epsilon,
    envelope_epsilon,
    fixed_sum_deltas,
    per_count_pld,
)
from ampfl.accounting.audit.random_checkin_pld import binned_pair_epsilon, explicit_pair_pld
from ampfl.accounting.events import RandomCheckInEvent
from ampfl.accounting.random_checkin.count_split import count_split_components, count_splits, mixture_pld
from ampfl.accounting.random_checkin.pld_pairs import best_hidden_epsilon, refined_pld

H = 1e-3  # coarse grids keep the tests fast; every relation below holds on any grid
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)


def test_sum_distribution_matches_subset_enumeration():
    g = [(0.6, 0.8), (0.6, 0.8), (-1.0, 0.0), (0.0, 0.5)]
    q = 0.3
    brute: dict[tuple[float, float], float] = {}
    for xi in itertools.product((0, 1), repeat=len(g)):
        s = tuple(round(sum(x * gi[c] for x, gi in zip(xi, g, strict=True)), 9) for c in (0, 1))
        brute[s] = brute.get(s, 0.0) + math.prod(q if x else 1 - q for x in xi)
    means, log_w = sum_distribution([(2, g[0]), (1, g[2]), (1, g[3])], q)
    ours = {
        (round(float(a), 9), round(float(b), 9)): float(np.exp(w))
        for (a, b), w in zip(means, log_w, strict=True)
    }
    assert set(ours) == set(brute)
    for key, val in brute.items():
        assert ours[key] == pytest.approx(val, rel=1e-12)


def test_identical_types_reproduce_the_identical_record_pair():
    kw = {"participation": 0.2, "sampling_rate": 0.3, "noise_multiplier": 1.0}
    for a, b in ((0.5, 0.0), (0.5, math.sqrt(0.75))):
        ours = types_pair_pld([(2, (a, b)), (4, (a, b))], **kw, value_discretization_interval=H)
        theirs = explicit_pair_pld(a=a, b=b, local_dataset_size=6, **kw, value_discretization_interval=H)
        for eps in (0.1, 0.7):
            assert ours.get_delta_for_epsilon(eps) == pytest.approx(
                theirs.get_delta_for_epsilon(eps), rel=1e-9
            )


def _brute_force(p, q, z, types, eps, n=600):
    """δ of the dataset by a Riemann sum of the densities written out (subset enumeration)."""
    g = [gi for k, gi in types for _ in range(k)]
    comps = []
    for xi in itertools.product((0, 1), repeat=len(g)):
        s = np.sum([np.array(gi) * x for x, gi in zip(xi, g, strict=True)], axis=0) if g else np.zeros(2)
        comps.append((math.prod(q if x else 1 - q for x in xi), s))
    ext = 9 * z + len(g)
    u = np.linspace(-ext, ext + 1, n)
    v = np.linspace(-ext, ext, n)
    uu, vv = np.meshgrid(u, v, indexing="ij")

    def n2(mu):
        return stats.norm.pdf(uu, mu[0], z) * stats.norm.pdf(vv, mu[1], z)

    base = sum(w * n2(s) for w, s in comps)
    shift = sum(w * n2(s + np.array([1.0, 0.0])) for w, s in comps)
    q_dens = (1 - p) * n2((0.0, 0.0)) + p * base
    p_dens = (1 - p) * n2((0.0, 0.0)) + p * ((1 - q) * base + q * shift)
    cell = (u[1] - u[0]) * (v[1] - v[0])
    e = math.exp(eps)
    return max(np.maximum(p_dens - e * q_dens, 0).sum(), np.maximum(q_dens - e * p_dens, 0).sum()) * cell


def test_two_type_pair_is_a_tight_lower_bound_of_a_direct_integration():
    p, q, z, eps = 0.3, 0.4, 1.0, 0.4
    types = [(2, (1.0, 0.0)), (2, (0.0, -1.0))]
    brute = _brute_force(p, q, z, types, eps)
    kw = {"participation": p, "sampling_rate": q, "noise_multiplier": z}
    ours = types_pair_pld(types, **kw).get_delta_for_epsilon(eps)
    binned = binned_delta(types, **kw, epsilon=eps)
    assert ours <= brute * 1.002 and ours >= 0.98 * brute
    assert binned <= brute * 1.002 and binned >= 0.95 * brute


@settings(max_examples=6, deadline=None, phases=NO_SHRINK)
@given(
    p=st.floats(0.05, 0.9),
    q=st.floats(0.05, 0.6),
    k=st.integers(1, 3),
    rest=st.integers(0, 3),
    z=st.floats(0.8, 3.0),
    r1=st.floats(0.0, 1.0),
    t1=st.floats(-180.0, 180.0),
    r2=st.floats(0.0, 1.0),
    t2=st.floats(-180.0, 180.0),
    eps=st.floats(0.05, 1.5),
)
def test_two_type_datasets_never_exceed_the_sound_bounds(p, q, k, rest, z, r1, t1, r2, t2, eps):
    """Property: a two-type dataset (lower bound) ≤ the event's pair (refinement) and ≤ the per-count split
    pair, one round and T = 2, by δ(ε); and its ε(δ) ≤ best_hidden_epsilon."""
    types = [(k, (r1 * math.cos(math.radians(t1)), r1 * math.sin(math.radians(t1))))]
    types.append((rest, (r2 * math.cos(math.radians(t2)), r2 * math.sin(math.radians(t2)))))
    d = k + rest
    kw = {"participation": p, "sampling_rate": q, "noise_multiplier": z}
    lower = types_pair_pld(types, **kw, cells_per_sigma=16, value_discretization_interval=H)
    refined = refined_pld(**kw, local_dataset_size=d, value_discretization_interval=H)
    split = mixture_pld(count_split_components(p, q, d, z, count_splits(p, q, d, z, eps)), H)
    for steps in (1, 2):
        low = (lower if steps == 1 else lower.self_compose(steps)).get_delta_for_epsilon(eps)
        for sound in (refined, split):
            assert (
                low <= (sound if steps == 1 else sound.self_compose(steps)).get_delta_for_epsilon(eps) + 1e-15
            )
    assert binned_delta(types, **kw, epsilon=eps) <= refined.get_delta_for_epsilon(eps) + 1e-15
    best, _ = best_hidden_epsilon(
        **kw, local_dataset_size=d, iterations=2, delta=1e-4, value_discretization_interval=H
    )
    assert lower.self_compose(2).get_epsilon_for_delta(1e-4) <= best + 1e-12


def test_search_improves_a_bad_start_and_reports_its_value():
    kw = {"participation": 0.2, "sampling_rate": 0.2, "local_dataset_size": 4, "noise_multiplier": 1.0}
    found = search_record_types(**kw, epsilon=0.3, start=(0.0, 0.0), pattern_steps=2, seeds=1)
    assert found.value > 1.5 * found.start_value
    assert sum(n for n, _ in found.types) == 4
    again = binned_delta(
        found.types, **{k: v for k, v in kw.items() if k != "local_dataset_size"}, epsilon=0.3
    )
    assert again == pytest.approx(found.value, rel=1e-12)


def test_envelope_orders_and_its_k1_end_is_the_refinement():
    p, q, d, z, delta = 0.2, 0.3, 3, 1.0, 1e-3
    kw = {"participation": p, "sampling_rate": q, "local_dataset_size": d, "noise_multiplier": z}
    ref = refined_pld(**kw).get_epsilon_for_delta(delta)
    explicit = explicit_pair_pld(a=1.0, **kw).get_epsilon_for_delta(delta)
    env = envelope_epsilon(
        **kw,
        delta=delta,
        eps_low=explicit,
        eps_high=ref,
        points=8,
        angles=5,
        radii=2,
        refine=1,
        cells_per_sigma=10,
    )
    assert explicit <= env.revealed_epsilon <= env.pure_epsilon * (1 + 1e-6)  # hiding M; one direction
    assert env.epsilon <= min(env.pure_epsilon, env.revealed_bit_epsilon) * (1 + 1e-9)  # pooled: smallest k
    assert env.revealed_bit_epsilon == pytest.approx(ref, rel=2e-2)  # closed form vs the refinement's PLD
    # far away orthogonal sums reveal participation: the fixed-s pair tends to p·(q-subsampled Gaussian)
    far = fixed_sum_deltas(p, q, z, (0.0, 40.0), np.array([0.5]))
    near = fixed_sum_deltas(p, q, z, (0.0, 0.0), np.array([0.5]))
    ref_bit = pld_lib.from_gaussian_mechanism(standard_deviation=z, sampling_prob=q)
    assert float(far.max()) == pytest.approx(p * ref_bit.get_delta_for_epsilon(0.5), rel=1e-2)
    assert float(near.max()) < float(far.max())


def test_per_count_mixture_pooled_from_one_is_the_refinement():
    # Independent construction of the refinement (cells of fixed-s pairs vs dp-accounting's mixture):
    # optimistic ≤ pessimistic, and close; composed too.
    kw = {"participation": 0.3, "sampling_rate": 0.2, "local_dataset_size": 4, "noise_multiplier": 1.0}
    ours = per_count_pld(**kw, sums={}, pool_from=1, value_discretization_interval=H, cells_per_sigma=64)
    ref = refined_pld(**kw, value_discretization_interval=H)
    for steps in (1, 3):
        a = (ours if steps == 1 else ours.self_compose(steps)).get_delta_for_epsilon(0.3)
        b = (ref if steps == 1 else ref.self_compose(steps)).get_delta_for_epsilon(0.3)
        assert 0.97 * b <= a <= b


def test_random_three_type_search_is_reproducible_and_below_the_refinement():
    kw = {"participation": 0.3, "sampling_rate": 0.3, "noise_multiplier": 1.0, "epsilon": 0.4}
    types, val = random_record_types(**kw, local_dataset_size=5, samples=6, seed=3)
    assert (types, val) == random_record_types(**kw, local_dataset_size=5, samples=6, seed=3)
    assert sum(n for n, _ in types) == 5 and len(types) == 3
    assert val == pytest.approx(binned_delta(types, **kw), rel=1e-12)
    ref = refined_pld(participation=0.3, sampling_rate=0.3, local_dataset_size=5, noise_multiplier=1.0)
    assert 0.0 < val <= ref.get_delta_for_epsilon(0.4)


def test_count_hidden_path_search_starts_at_identical_records_and_stays_below_thm52():
    """The straight start path is the identical-record dataset (same binned cells, exact ε); the search
    only raises ε, and the relaxation (any law of S on its disk) is still dominated by Thm 5.2's pair."""
    p, q, d, z, g = 0.1, 0.1, 4, 1.0, (0.5, math.sqrt(0.75))
    found = count_hidden_path_epsilon(
        participation=p,
        sampling_rate=q,
        local_dataset_size=d,
        noise_multiplier=z,
        delta=1e-5,
        reference_epsilon=0.7,
        start=g,
        levels=3,
    )
    means, log_w = sum_distribution([(d, g)], q)
    identical = binned_pair_epsilon(*log_masses(means, log_w, p, q, z, 16, 10.0), 1e-5)
    assert found.start_epsilon == pytest.approx(identical, rel=1e-9)
    assert found.epsilon > 1.2 * found.start_epsilon  # curved paths beat the straight one at z = 1
    wcs = RandomCheckInEvent(
        participation=p, sampling_rate=q, noise_multiplier=z, local_dataset_size=d, participation_hidden=False
    )
    assert found.epsilon <= PLDAccountant().compose(wcs).get_epsilon(1e-5)
    assert len(found.path) >= 2 and all(0.0 <= r <= 1.0 for r, _ in found.path)
