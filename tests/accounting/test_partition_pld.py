"""Exact PLDs of model splitting (d <= 2) and dropout (002), checked against independent integrations."""

import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from ampfl.accounting.accountants import PLDAccountant, RDPAccountant
from ampfl.accounting.calibrate import calibrate
from ampfl.accounting.events import (
    BalancedIterationSubsamplingEvent,
    DropoutEvent,
    GaussianEvent,
    ModelSplitEvent,
)
from ampfl.accounting.partition.pld import dropout_pld, model_split_pld, symmetric_mixture_pld


def _hockey_stick_1d(p, q, eps):
    value, _ = integrate.quad(
        lambda x: max(p(x) - math.exp(eps) * q(x), 0.0), -60, 60, limit=400, points=[0.0], epsabs=1e-13
    )
    return value


@pytest.mark.parametrize(("shift", "sigma"), [(0.7071, 0.5), (1.0, 1.0), (0.7071, 2.5)])
def test_symmetric_mixture_is_an_upper_bound_close_to_the_exact_hockey_stick(shift, sigma):
    pld = symmetric_mixture_pld(shift=shift, noise_multiplier=sigma)

    def mix(x):
        return 0.5 * stats.norm.pdf(x, shift, sigma) + 0.5 * stats.norm.pdf(x, -shift, sigma)

    def null(x):
        return stats.norm.pdf(x, 0.0, sigma)

    for eps in (0.0, 0.2, 1.0):
        exact = max(_hockey_stick_1d(mix, null, eps), _hockey_stick_1d(null, mix, eps))
        got = pld.get_delta_for_epsilon(eps)
        assert got >= exact - 1e-12
        assert got <= exact * 1.005 + 1e-10


def _split_hockey_stick_2d(sigma, eps, n=1601):
    """delta(eps) of (1/2 N(e1) + 1/2 N(e2), N(0)) in both directions, on a 2-D grid (no rotation used)."""
    x = np.linspace(-9 * sigma, 1 + 9 * sigma, n)
    x1, x2 = np.meshgrid(x, x, indexing="ij")
    phi = stats.norm(0, sigma).pdf
    p = 0.5 * phi(x1 - 1) * phi(x2) + 0.5 * phi(x1) * phi(x2 - 1)
    q = phi(x1) * phi(x2)
    remove = np.trapezoid(np.trapezoid(np.maximum(p - math.exp(eps) * q, 0), x), x)
    add = np.trapezoid(np.trapezoid(np.maximum(q - math.exp(eps) * p, 0), x), x)
    return max(remove, add)


@pytest.mark.parametrize("sigma", [0.6, 1.5])
def test_two_block_split_matches_a_direct_two_dimensional_integration(sigma):
    pld = model_split_pld(num_submodels=2, noise_multiplier=sigma)
    for eps in (0.0, 0.5, 1.5):
        exact = _split_hockey_stick_2d(sigma, eps)
        got = pld.get_delta_for_epsilon(eps)
        assert got == pytest.approx(exact, rel=2e-3, abs=1e-7)
        assert got >= exact * (1 - 1e-4)


def test_one_block_is_the_gaussian_mechanism_and_dropout_is_two_blocks():
    one = model_split_pld(num_submodels=1, noise_multiplier=1.3)
    gauss = pld_lib.from_gaussian_mechanism(
        1.3, pessimistic_estimate=True, value_discretization_interval=1e-4
    )
    for eps in (0.0, 0.5, 2.0):
        assert one.get_delta_for_epsilon(eps) == pytest.approx(gauss.get_delta_for_epsilon(eps), rel=1e-9)
    two = model_split_pld(num_submodels=2, noise_multiplier=1.3, nonsplit_noise_multiplier=2.0)
    drop = dropout_pld(noise_multiplier=1.3, nonsplit_noise_multiplier=2.0)
    assert drop.get_delta_for_epsilon(0.7) == two.get_delta_for_epsilon(0.7)
    # the non-split part composes: more delta than the split part alone
    alone = model_split_pld(num_submodels=2, noise_multiplier=1.3)
    assert two.get_delta_for_epsilon(0.7) > alone.get_delta_for_epsilon(0.7)


@settings(max_examples=4, deadline=None)
@given(z=st.floats(0.8, 6.0), steps=st.integers(1, 60))
def test_pld_is_never_looser_than_the_theorem_3_1_rdp_bound(z, steps):
    event = ModelSplitEvent(num_submodels=2, noise_multiplier=z)
    pld = PLDAccountant().compose(event, steps).get_epsilon(1e-6)
    rdp = RDPAccountant().compose(event, steps).get_epsilon(1e-6)
    plain = PLDAccountant().compose(GaussianEvent(noise_multiplier=z), steps).get_epsilon(1e-6)
    assert pld <= rdp * (1 + 1e-9)
    assert pld < plain  # the split credit is real


def test_accountant_events_infinite_noise_and_unsupported_cases():
    acc = PLDAccountant().compose(DropoutEvent(noise_multiplier=math.inf), 10)
    assert acc.get_epsilon(1e-6) == 0.0
    only_nonsplit = PLDAccountant().compose(
        ModelSplitEvent(num_submodels=2, noise_multiplier=math.inf, nonsplit_noise_multiplier=2.0), 3
    )
    gauss = PLDAccountant().compose(GaussianEvent(noise_multiplier=2.0), 3)
    assert only_nonsplit.get_epsilon(1e-6) == pytest.approx(gauss.get_epsilon(1e-6), rel=1e-9)
    # every split and every BIS epoch has a PLD (allocation_pld, subsampled_pld)
    assert PLDAccountant().supports(
        BalancedIterationSubsamplingEvent(iterations=6, participations=2, noise_multiplier=1.0)
    )


def test_calibration_round_trip_and_the_noise_saved():
    def split(z):
        return ModelSplitEvent(num_submodels=2, noise_multiplier=z)

    z = calibrate(split, target_epsilon=1.0, target_delta=1e-5, count=50, accountant="pld")
    eps = PLDAccountant().compose(split(z), 50).get_epsilon(1e-5)
    assert 0.98 <= eps <= 1.0
    z_rdp = calibrate(split, target_epsilon=1.0, target_delta=1e-5, count=50, accountant="rdp")
    assert z < z_rdp
    with pytest.raises(ValueError, match="num_submodels"):
        model_split_pld(num_submodels=3, noise_multiplier=1.0)
