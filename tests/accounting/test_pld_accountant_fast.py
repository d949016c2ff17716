"""The PLD accountant's vectorised kernels and incremental composition (issues 11 and 17).

The kernels must be dp-accounting's algorithms (same grid, same PMF to rounding, same ε); the incremental
accountant must answer exactly as one that composed the whole history at once, after a resume too, and must
not recompute what it already has (answers, finer grids)."""

import itertools
import json

import numpy as np
import pytest
from dp_accounting.pld import common
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from hypothesis import given, settings
from hypothesis import strategies as st

from ampfl.accounting.accountants import PLDAccountant, pld_fast
from ampfl.accounting.accountants import pld as pld_module
from ampfl.accounting.calibrate import _offset_guess
from ampfl.accounting.events import GaussianEvent, PoissonSampledEvent


def poisson(q: float, z: float) -> PoissonSampledEvent:
    return PoissonSampledEvent(sampling_rate=q, event=GaussianEvent(noise_multiplier=z))


def pmfs(pld):
    return [pld._pmf_remove.to_dense_pmf()] + ([] if pld._symmetric else [pld._pmf_add.to_dense_pmf()])


def assert_same_pmfs(ours, ref, atol=1e-12):
    for a, b in zip(pmfs(ours), pmfs(ref), strict=True):
        assert (a._lower_loss, a.size) == (b._lower_loss, b.size)
        np.testing.assert_allclose(a._probs, b._probs, rtol=0, atol=atol)
        assert a._infinity_mass == pytest.approx(b._infinity_mass, rel=1e-9, abs=1e-18)


@pytest.mark.parametrize(
    ("z", "q", "h"),
    [(1.4, 0.01, 3e-4), (0.8, 0.3, 2e-3), (1.0, 1.0, 1e-3), (5.0, 0.1, 1e-2), (0.6, 0.9, 3e-3)],
)
def test_kernels_are_dp_accountings_algorithms(z, q, h):
    ref = pld_lib.from_gaussian_mechanism(z, sampling_prob=q, value_discretization_interval=h)
    ours = pld_fast.gaussian_pld(z, q, h)
    assert_same_pmfs(ours, ref)  # the same connect-the-dots grid and masses
    assert_same_pmfs(pld_fast.compose(pld_fast.compose(ours, ours), ours), ref.compose(ref).compose(ref))
    for times in (7, 200):
        composed_ref, composed = ref.self_compose(times), pld_fast.self_compose(ours, times)
        assert_same_pmfs(composed, composed_ref)
        for delta in (0.5, 1e-3, 1e-6, 1e-9):  # the power by squaring: equal up to the FFT's rounding
            assert pld_fast.epsilon_for_delta(composed, delta) == pytest.approx(
                composed_ref.get_epsilon_for_delta(delta), rel=1e-6, abs=1e-13
            )


@pytest.mark.parametrize(("z", "q", "times"), [(1.4, 0.01, 6), (0.8, 0.3, 5)])
def test_self_composition_matches_a_direct_convolution(z, q, times):
    """Independent of dp-accounting: the T-fold convolution summed term by term (no FFT)."""
    pmf = pld_fast.gaussian_pld(z, q, 1e-3)._pmf_remove.to_dense_pmf()
    exact = pmf._probs
    for _ in range(times - 1):
        exact = np.convolve(exact, pmf._probs)
    ours = pld_fast._self_compose_pmf(pmf, times, 1e-15)
    start = ours._lower_loss - pmf._lower_loss * times  # the Chernoff window inside the full support
    np.testing.assert_allclose(ours._probs, exact[start : start + ours.size], rtol=0, atol=1e-14)
    assert exact[:start].sum() + exact[start + ours.size :].sum() <= 1e-15  # what the window drops
    reference = pld_lib.PrivacyLossDistribution.create_from_rounded_probability(
        dict(enumerate(exact, pmf._lower_loss * times)), ours._infinity_mass, 1e-3
    )
    for delta in (1e-3, 1e-6, 1e-9):
        assert ours.get_epsilon_for_delta(delta) == pytest.approx(
            reference.get_epsilon_for_delta(delta), rel=1e-6
        )


def test_epsilon_walk_edge_cases_and_blocks():
    # a wide PMF (~2·10^4 points) read at large δ: the answer lies blocks below the top
    wide = pld_fast.gaussian_pld(1.0, 1.0, 1e-3)
    assert wide._pmf_remove.size > 4 * 4096
    for delta in (0.95, 0.7, 0.3, 1e-2, 1e-9):
        assert pld_fast.epsilon_for_delta(wide, delta) == pytest.approx(
            wide.get_epsilon_for_delta(delta), rel=1e-9, abs=1e-13
        )
    assert pld_fast.epsilon_for_delta(wide, 1.0) == 0.0
    heavy = pld_lib.PrivacyLossDistribution.create_from_rounded_probability({0: 0.9}, 0.1, 1e-2)
    assert pld_fast.epsilon_for_delta(heavy, 0.05) == np.inf  # infinity mass above δ


def test_chernoff_bounds_match_dp_accounting():
    rng = np.random.default_rng(0)
    for n in (1, 3, 500, 20_000):
        probs = rng.random(n) ** 4
        probs /= probs.sum()
        for times in (2, 50, 1000):
            assert pld_fast._bounds(probs, times, 1e-15) == common.compute_self_convolve_bounds(
                probs, times, 1e-15
            )


@pytest.mark.parametrize(("q", "z"), [(0.1, 1.5), (0.0005, 2.0)])  # the second refines (ε < 2·T·grid)
def test_incremental_equals_composing_at_once_and_resume(q, z):
    event, other = poisson(q, z), poisson(q, 2 * z)
    calls = [(event, 1)] * 6 + [(other, 2), (event, 3)]
    live = PLDAccountant()
    seen = []
    for i, (e, n) in enumerate(calls):
        live.compose(e, n)
        seen.append(live.get_epsilon(1e-5))
        if i == 3:  # resume from a checkpoint and go on
            live = PLDAccountant().load_state_dict(json.loads(json.dumps(live.state_dict())))
            assert live.get_epsilon(1e-5) == seen[-1]
    once = PLDAccountant()
    for e, n in calls:
        once.compose(e, n)
    assert once.get_epsilon(1e-5) == live.get_epsilon(1e-5) == seen[-1]  # bit for bit
    if q < 0.01:
        assert len(live._grids) > 1  # the refine path was taken
    assert once.get_delta(0.05) == live.get_delta(0.05)
    assert all(a < b for a, b in itertools.pairwise(seen))


def test_answers_and_finer_grids_are_cached(monkeypatch):
    built: list[float] = []
    accountant_pld = pld_module.accountant_pld  # what the accountant builds each event's PLD with

    def counting(event, interval=pld_module.PLD_DISCRETIZATION):
        built.append(interval)
        return accountant_pld(event, interval)

    reads = []
    walk = pld_fast.epsilon_for_delta
    monkeypatch.setattr(pld_module, "accountant_pld", counting)
    monkeypatch.setattr(pld_fast, "epsilon_for_delta", lambda pld, d: reads.append(d) or walk(pld, d))
    acc = PLDAccountant()
    event = poisson(0.0001, 3.0)  # small ε: every reading refines on finer grids
    for _ in range(5):
        acc.compose(event)
        first = acc.get_epsilon(1e-5)
        n_reads = len(reads)
        assert acc.get_epsilon(1e-5) == first and len(reads) == n_reads  # unchanged history: cached
    finer = [h for h in built if h < pld_module.PLD_DISCRETIZATION]
    assert len(set(finer)) >= 2 and len(finer) == len(
        set(finer)
    )  # each finer grid built the event once, then extended


def test_offset_guess_re_measures_a_drifting_gap():
    probes: list[float] = []

    def fine(z):
        probes.append(z)
        return 1.0 / z

    def coarse(z):  # a gap that drifts with z: one shift misses, the re-measured one lands
        return 1.0 / z + 0.05 + 0.02 * z

    z = _offset_guess(fine, coarse, 0.5, 1.7, 1e-3, 1e4, 0.004)
    assert z is not None and fine(z) <= 0.5 < fine(z / 1.004)
    assert len(set(probes)) <= 6


def test_spectral_run_equals_the_self_composition():
    """Round by round (one spectrum product per call, the FFT length doubling as the window grows) gives the
    T-fold self-composition of the event's PLD, to rounding."""
    from ampfl.accounting.accountants.pld_cache import GridState

    event = poisson(0.2, 1.2)
    one = pld_fast.gaussian_pld(1.2, 0.2, 1e-3)
    grid = GridState(lambda e: one)
    calls = []
    for times in range(1, 41):
        calls.append((event, 1))
        assert grid.advance(calls)
        ours = grid.composed()
        if times in (1, 7, 40):
            ref = pld_fast.self_compose(one, times) if times > 1 else one
            for a, b in zip(pmfs(ours), pmfs(ref), strict=True):
                lo = max(a._lower_loss, b._lower_loss)
                hi = min(a._lower_loss + a.size, b._lower_loss + b.size)
                np.testing.assert_allclose(
                    a._probs[lo - a._lower_loss : hi - a._lower_loss],
                    b._probs[lo - b._lower_loss : hi - b._lower_loss],
                    rtol=0,
                    atol=1e-12,
                )
            for delta in (1e-3, 1e-6, 1e-9):
                assert pld_fast.epsilon_for_delta(ours, delta) == pytest.approx(
                    pld_fast.epsilon_for_delta(ref, delta), rel=1e-6
                )


@settings(max_examples=12, deadline=None)
@given(
    q=st.floats(0.001, 1.0),
    z=st.floats(0.5, 6.0),
    times=st.integers(1, 40),
    log_delta=st.floats(-12.0, -2.0),
    factor=st.sampled_from([2, 4, 16, 64]),
)
def test_coarse_bound_is_above_the_fine_epsilon_and_skipping_changes_nothing(q, z, times, log_delta, factor):
    """The coarse bound of a composed adjacency (one inverse FFT of 1/factor the length) is never below that
    adjacency's ε and, where ε is not in the FFT's rounding noise, at most 2·factor grid steps above it; the
    single-run answer, which reads the add adjacency only when its bound comes close, is bit for bit
    ``epsilon_for_delta`` of the whole PLD."""
    from ampfl.accounting.accountants.pld_cache import GridState

    h, delta = 1e-3, 10.0**log_delta
    one = pld_fast.gaussian_pld(z, q, h)
    grid = GridState(lambda e: one)
    assert grid.advance([(poisson(q, z), times)])
    composed = grid.composed()
    assert grid.epsilon(delta) == pld_fast.epsilon_for_delta(composed, delta)
    run = grid._run
    for spectrum, pmf in zip([run._remove, run._add], pmfs(composed), strict=False):
        if spectrum is None:
            continue
        fine = pld_fast.pmf_epsilon(pmf, delta)
        bound = spectrum.coarse_epsilon(delta, factor)
        if bound is None:  # the window leaves no room for the bins' alignment: no bound, no skip
            continue
        assert bound >= fine - 1e-12
        if fine < 20.0:  # beyond, ε(δ) sits where the PMF is FFT rounding: only the direction is asserted
            assert bound <= fine + 2 * factor * h + 1e-9
