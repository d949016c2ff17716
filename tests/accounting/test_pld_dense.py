"""ampfl's own Gaussian PLD (issue 32): dp-accounting's connect-the-dots construction on ampfl's normal CDF.

The PLD accountant builds a (Poisson-subsampled) Gaussian event's PLD without dp-accounting or SciPy
(:mod:`ampfl.accounting.accountants.pld_dense`). It must stay the same pessimistic PLD: each piece is checked
against dp-accounting's (its normal CDF, its hockey-stick divergences at the grid points, its PMFs, its
accountant's ε), so an error in the port cannot report a smaller ε unnoticed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld import privacy_loss_mechanism as plm
from dp_accounting.pld.pld_privacy_accountant import PLDAccountant as DpPLDAccountant
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special

from ampfl.accounting.accountants import PLDAccountant, pld_dense
from ampfl.accounting.events import GaussianEvent, PoissonSampledEvent

SETTINGS = [(1.0, 0.01, 1e-4), (1.0, 1.0, 1e-3), (0.5, 0.1, 1e-3), (4.0, 0.5, 1e-4), (0.05, 0.2, 1e-2)]


def test_truncation_quantile_is_scipys():
    assert pld_dense.TRUNCATION_QUANTILE == special.ndtri(0.5 * math.exp(-50))


def test_normal_cdf_and_log_cdf_match_scipy():
    # both are within ~2e-13 relative of the exact Φ down to Φ ~ 1e-300 (mpmath, 40 digits: ours 1.8e-13,
    # SciPy's 2.2e-13 at worst over [-37, 37]), and log Φ within 5e-16 below −20; between 0 and 6 both take
    # log Φ(x) of a Φ(x) rounded near 1, so they agree to ~1e-16 absolute there
    x = np.concatenate([np.linspace(-60, 60, 24001), [-1e3, -38.5, -20.0, -19.999, 6.0, 6.001, 40.0]])
    np.testing.assert_allclose(pld_dense.norm_cdf(x), special.ndtr(x), rtol=5e-13, atol=1e-300)
    np.testing.assert_allclose(pld_dense.norm_log_cdf(x), special.log_ndtr(x), rtol=5e-13, atol=2e-16)
    cdf = pld_dense.norm_cdf(x)
    np.testing.assert_array_equal(pld_dense.norm_log_cdf(x, cdf), pld_dense.norm_log_cdf(x))


@pytest.mark.parametrize(("z", "q", "h"), SETTINGS)
@pytest.mark.parametrize("add", [False, True], ids=["remove", "add"])
def test_grid_and_divergences_are_dp_accountings(z, q, h, add):
    adjacency = plm.AdjacencyType.ADD if add else plm.AdjacencyType.REMOVE
    loss = plm.GaussianPrivacyLoss(z, sensitivity=1.0, sampling_prob=q, adjacency_type=adjacency)
    bounds = loss.connect_dots_bounds()
    lo, hi, deltas = pld_dense.gaussian_connect_dots(z, q, h, add)
    assert (lo, hi) == (math.floor(bounds.epsilon_lower / h), math.ceil(bounds.epsilon_upper / h))
    grid = np.arange(lo, hi + 1) * h
    pick = np.unique(np.linspace(0, grid.size - 1, 400).astype(int))  # dp-accounting's loop is per point
    reference = np.asarray(loss.get_delta_for_epsilon(grid[pick]))
    np.testing.assert_allclose(deltas[pick], reference, rtol=1e-13, atol=2e-16)


@pytest.mark.parametrize(("z", "q", "h"), SETTINGS)
def test_pmfs_are_dp_accountings_to_rounding(z, q, h):
    ours = pld_dense.gaussian_pld(z, q, h)
    ref = pld_lib.from_gaussian_mechanism(z, sampling_prob=q, value_discretization_interval=h)
    assert ours._symmetric == ref._symmetric == (q == 1.0)
    for a, b in ((ours._pmf_remove, ref._pmf_remove), (ours._pmf_add, ref._pmf_add)):
        b = b.to_dense_pmf()
        assert (a._lower_loss, a.size) == (b._lower_loss, b.size)
        # δ to ~1e-16 at each grid point; a mass divides differences of δ by e^h − 1
        np.testing.assert_allclose(a._probs, b._probs, rtol=0, atol=max(1e-12, 1e-15 / h))
        assert a._infinity_mass == pytest.approx(b._infinity_mass, rel=1e-9, abs=1e-30)
    for delta in (1e-3, 1e-5, 1e-9):
        assert ours.get_epsilon_for_delta(delta) == pytest.approx(ref.get_epsilon_for_delta(delta), rel=1e-9)
    for eps in (0.0, 0.1, 1.0):
        assert ours.get_delta_for_epsilon(eps) == pytest.approx(ref.get_delta_for_epsilon(eps), rel=1e-9)
    np.testing.assert_array_equal(ours.to_dp_accounting()._pmf_remove._probs, ours._pmf_remove._probs)


@settings(max_examples=12, deadline=None)
@given(
    z=st.floats(0.6, 8.0),
    q=st.sampled_from([1e-3, 0.01, 0.1, 0.5, 1.0]),
    steps=st.integers(1, 300),
    delta=st.sampled_from([1e-3, 1e-6, 1e-9]),
)
def test_accountant_epsilon_is_dp_accountings(z, q, steps, delta):
    """The accountant on ampfl's PLD against dp-accounting's own PLD accountant (same grid, pessimistic)."""
    h = 1e-3
    event = PoissonSampledEvent(sampling_rate=q, event=GaussianEvent(noise_multiplier=z))
    ours = PLDAccountant(value_discretization_interval=h, refine=False).compose(event, steps)
    ref = DpPLDAccountant(value_discretization_interval=h).compose(event.to_dp_accounting(), steps)
    # both truncate tails of mass 1e-15 to +inf (dp-accounting by its own windows): δ agrees to ~1e-14,
    # which moves ε by ~1e-5 relative at δ = 1e-9
    expected = ref.get_epsilon(delta)
    assert ours.get_epsilon(delta) == pytest.approx(expected, rel=1e-5 if delta < 1e-6 else 1e-6, abs=1e-9)
    eps = ours.get_epsilon(delta)
    assert ours.get_delta(eps) == pytest.approx(ref.get_delta(eps), rel=1e-6, abs=2e-14)
