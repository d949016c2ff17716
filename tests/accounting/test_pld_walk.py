"""The ε walk over a PLD's upper tail and the FFT lengths of the incremental accountant (issue 17).

``pld_fast.walk_epsilon`` must answer bit for bit as the plain walk below (prefix sums over the whole PMF
from the largest loss down, the logarithm at every point) whatever its first block, although it takes the
logarithm only where a prefilter lets a point through; ``pld_cache.fft_length`` must hold every window and
waste at most a quarter of it; the coarse bound's box spectrum is the sum it stands for."""

import math

import numpy as np
import pytest
from dp_accounting.pld import pld_pmf
from hypothesis import given, settings
from hypothesis import strategies as st

from ampfl.accounting.accountants import pld_fast
from ampfl.accounting.accountants.pld_cache import _box, fft_length


def plain_walk(pmf: pld_pmf.DensePLDPmf, delta: float) -> float:
    """The walk in one block with the logarithm everywhere (what the blocks and the prefilter replace)."""
    inf = float(pmf._infinity_mass)
    if inf > delta:
        return math.inf
    probs = np.asarray(pmf._probs, dtype=np.float64)[::-1]
    top, h = pmf._lower_loss + len(probs) - 1, pmf._discretization
    losses = (top - np.arange(len(probs))) * h
    upper = np.cumsum(np.concatenate(([inf], probs)))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lower = np.cumsum(np.concatenate(([0.0], np.exp(-losses) * probs)))
        eps = np.log((upper - delta) / lower)
    hit = np.flatnonzero((upper[:-1] > delta) & (lower[:-1] > 0) & (eps[:-1] >= losses))
    k = int(hit[0]) if hit.size else len(probs)
    zero = np.flatnonzero((upper[1 : k + 1] >= delta) & (lower[1 : k + 1] == 0))
    if zero.size:
        return max(0.0, float(losses[zero[0]]))
    if upper[k] <= lower[k] + delta:
        return 0.0
    return math.log((upper[k] - delta) / lower[k])


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    size=st.integers(1, 20_000),
    log_h=st.floats(-4.0, -1.0),
    sharpness=st.floats(1.0, 40.0),
    infinity=st.sampled_from([0.0, 1e-12, 1e-7, 1e-3]),
    log_delta=st.floats(-12.0, -0.3),
    first_block=st.integers(1, 30_000),
)
def test_walk_is_the_plain_walk_whatever_the_blocks(
    seed, size, log_h, sharpness, infinity, log_delta, first_block
):
    rng = np.random.default_rng(seed)
    probs = rng.random(size) ** sharpness
    probs *= (1.0 - infinity) / probs.sum() / rng.uniform(1.0, 1.2)
    pmf = pld_pmf.DensePLDPmf(10.0**log_h, int(rng.integers(-size, size)), probs, infinity, True)
    delta = 10.0**log_delta
    eps, walked = pld_fast.walk_epsilon(pmf, delta, first_block)
    assert eps == plain_walk(pmf, delta) == pld_fast.pmf_epsilon(pmf, delta)
    assert 0 <= walked <= size


def test_walk_on_composed_plds_and_far_losses():
    """Composed Gaussian PLDs (the accountant's PMFs) and losses beyond exp's range (e^{-loss} = 0)."""
    for z, q, times in [(1.0, 0.01, 30), (4.0, 0.5, 20), (0.6, 1.0, 5)]:
        pld = pld_fast.self_compose(pld_fast.gaussian_pld(z, q, 1e-3), times)
        for pmf in (pld._pmf_remove, pld._pmf_add):
            for delta in (0.5, 1e-3, 1e-6, 1e-10):
                assert pld_fast.walk_epsilon(pmf, delta, 1000)[0] == plain_walk(pmf, delta)
    far = pld_pmf.DensePLDPmf(1.0, 700, np.full(200, 1e-3), 0.0, True)  # losses 700..899
    for delta in (0.19, 1e-3, 1e-6):
        assert pld_fast.walk_epsilon(far, delta, 7)[0] == plain_walk(far, delta)


def test_fft_length_holds_the_window_and_wastes_at_most_a_quarter():
    for n in [*range(1, 3000), *range(60_000, 300_000, 997), 2**20 + 1]:
        length = fft_length(n)
        assert length >= n
        if n > 64:
            assert length <= 1.25 * n + 1  # m·2^j, m ∈ {4..7}, is within 25 % of any n above 2^j·4
            assert length >> (length & -length).bit_length() - 1 in (1, 3, 5, 7)
        if n > 256:
            assert length % 32 == 0  # the coarse bound's bins (2·COARSE) fit


@pytest.mark.parametrize(("length", "d"), [(64, 2), (320, 16), (4096, 16), (81920, 16), (128, 64)])
def test_box_spectrum_is_the_sum_of_unit_roots(length, d):
    k = np.arange(length // 2 + 1)
    direct = sum(np.exp(2j * np.pi * ((r * k) % length) / length) for r in range(d))
    np.testing.assert_allclose(_box(length, d), direct, rtol=0, atol=1e-12 * d)


def test_reading_rarely_gives_the_same_floats_across_length_changes():
    """The spectrum at a new FFT length is built only when read, from the same operations in the same order:
    a history read at every round, every seventh round or once answers the same floats (and so does a
    resumed run, which replays its history and reads once)."""
    from ampfl.accounting.accountants import PLDAccountant
    from ampfl.accounting.events import GaussianEvent, PoissonSampledEvent

    event = PoissonSampledEvent(sampling_rate=0.2, event=GaussianEvent(noise_multiplier=1.2))
    every, rare, once = PLDAccountant(), PLDAccountant(), PLDAccountant()
    lengths = set()
    for t in range(1, 41):
        for acc in (every, rare, once):
            acc.compose(event, 1)
        eps = every.get_epsilon(1e-6)
        grid = every._grids[(0, every._interval)]
        assert grid is not None and grid._run is not None
        lengths.add(grid._run._remove._length)
        if t % 7 == 0:
            assert rare.get_epsilon(1e-6) == eps
    assert len(lengths) >= 3  # the window outgrew the FFT length at least twice
    assert once.get_epsilon(1e-6) == rare.get_epsilon(1e-6) == eps


@pytest.mark.parametrize(("q", "z"), [(0.01, 1.0), (0.2, 1.2), (0.5, 0.8)])
def test_look_ahead_bound_changes_no_reading(q, z, monkeypatch):
    """Read every round, the add adjacency's coarse bound is taken AHEAD draws ahead and serves the readings
    up to there: each reading is still bit for bit ε of the whole composed PLD, and fewer coarse bounds are
    computed than readings made."""
    from ampfl.accounting.accountants import pld_cache
    from ampfl.accounting.accountants.pld_cache import GridState
    from ampfl.accounting.events import GaussianEvent, PoissonSampledEvent

    event = PoissonSampledEvent(sampling_rate=q, event=GaussianEvent(noise_multiplier=z))
    one = pld_fast.gaussian_pld(z, q, 1e-3)
    bounds = []
    coarse = pld_cache._Spectrum.coarse_epsilon

    def counted(self, delta, factor, ahead=0):
        bounds.append(ahead)
        return coarse(self, delta, factor, ahead)

    monkeypatch.setattr(pld_cache._Spectrum, "coarse_epsilon", counted)
    live, calls, seen = GridState(lambda e: one), [], []
    for _ in range(40):
        calls.append((event, 1))
        assert live.advance(calls)
        seen.append(live.epsilon(1e-6))
    assert len(bounds) < 40 and any(bounds)  # the look-ahead served several readings
    for t in (1, 7, 8, 9, 23, 40):
        once = GridState(lambda e: one)
        assert once.advance(calls[:t])
        assert seen[t - 1] == pld_fast.epsilon_for_delta(once.composed(), 1e-6)
