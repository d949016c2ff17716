"""The Gaussian mechanism (ampfl.accounting.gaussian): classic and analytic calibration, exact δ(ε)."""

import math

import mpmath as mp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ampfl.accounting.accountants import PLDAccountant
from ampfl.accounting.events import GaussianEvent
from ampfl.accounting.gaussian import (
    analytic_gaussian_sigma,
    classic_gaussian_sigma,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_log_delta,
)


def _mp_gaussian_delta(sigma: float, epsilon: float, s: float) -> mp.mpf:
    # Balle & Wang 2018 Thm 8 (= 004 Thm 2.4) at 50 digits: Φ(s/2σ − εσ/s) − e^ε Φ(−s/2σ − εσ/s).
    with mp.workdps(50):
        sig, eps, sens = mp.mpf(sigma), mp.mpf(epsilon), mp.mpf(s)
        return mp.ncdf(sens / (2 * sig) - eps * sig / sens) - mp.exp(eps) * mp.ncdf(
            -sens / (2 * sig) - eps * sig / sens
        )


@pytest.mark.parametrize(
    ("epsilon", "delta", "sensitivity"),
    [(0.5, 1e-5, 1.0), (0.9, 1e-6, 2.0), (0.01, 0.1, 3.5)],
)
def test_classic_sigma_matches_lemma_1(epsilon, delta, sensitivity):
    # 000 Lemma 1: σ = s √(2 ln(1.25/δ)) / ε, evaluated with mpmath at 50 digits.
    with mp.workdps(50):
        expected = mp.mpf(sensitivity) * mp.sqrt(2 * mp.log(mp.mpf(1.25) / mp.mpf(delta))) / mp.mpf(epsilon)
    got = classic_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=sensitivity)
    assert got == pytest.approx(float(expected), rel=1e-12)


@pytest.mark.parametrize("epsilon", [1.0, 1.5, 10.0])
def test_classic_sigma_refuses_epsilon_at_least_one(epsilon):
    with pytest.raises(ValueError, match="epsilon must be in \\(0, 1\\)"):
        classic_gaussian_sigma(epsilon=epsilon, delta=1e-5)


@pytest.mark.parametrize(
    ("sigma", "epsilon", "sensitivity"),
    [
        (1.0, 0.5, 1.0),
        (0.5, 2.0, 1.0),
        (3.0, 1.0, 2.0),
        (10.0, 0.1, 1.0),
        (1.0, 7.0, 1.0),  # δ ≈ 1e-12 region
        (0.3, 40.0, 1.0),  # deep tail (δ ~ 1e-200)
        (200.0, 0.001, 1.0),
    ],
)
def test_gaussian_delta_matches_mpmath(sigma, epsilon, sensitivity):
    expected = _mp_gaussian_delta(sigma, epsilon, sensitivity)
    got = gaussian_log_delta(sigma=sigma, epsilon=epsilon, sensitivity=sensitivity)
    assert got == pytest.approx(float(mp.log(expected)), rel=1e-9, abs=1e-9)


@pytest.mark.parametrize(("noise_multiplier", "epsilon"), [(1.0, 0.5), (2.0, 1.0), (0.8, 3.0)])
def test_gaussian_delta_agrees_with_dp_accounting_pld(noise_multiplier, epsilon):
    # dp-accounting PLD of GaussianDpEvent (pessimistic discretisation): an upper estimate of the exact δ.
    exact = gaussian_delta(sigma=noise_multiplier, epsilon=epsilon)
    pld = PLDAccountant().compose(GaussianEvent(noise_multiplier=noise_multiplier)).get_delta(epsilon)
    assert exact <= pld * (1 + 1e-9)
    assert pld == pytest.approx(exact, rel=2e-3)


def test_gaussian_delta_scales_with_sensitivity():
    # δ depends on σ and s only through σ / s.
    assert gaussian_delta(sigma=2.0, epsilon=0.7, sensitivity=2.0) == pytest.approx(
        gaussian_delta(sigma=1.0, epsilon=0.7), rel=1e-12
    )


@pytest.mark.parametrize(("epsilon", "delta"), [(0.5, 1e-5), (1.0, 1e-6), (5.0, 1e-10), (0.015, 1e-2)])
def test_analytic_sigma_is_smallest_meeting_target(epsilon, delta):
    sigma = analytic_gaussian_sigma(epsilon=epsilon, delta=delta)
    assert gaussian_delta(sigma=sigma, epsilon=epsilon) <= delta
    assert gaussian_delta(sigma=sigma * (1 - 1e-6), epsilon=epsilon) > delta
    # The analytic mechanism never needs more noise than the classic one (where the latter is valid).
    if epsilon < 1:
        assert sigma <= classic_gaussian_sigma(epsilon=epsilon, delta=delta)


@pytest.mark.parametrize(("sigma", "delta"), [(1.0, 1e-5), (5.0, 1e-8), (0.7, 0.3)])
def test_gaussian_epsilon_inverts_delta(sigma, delta):
    eps = gaussian_epsilon(sigma=sigma, delta=delta)
    assert gaussian_delta(sigma=sigma, epsilon=eps) <= delta * (1 + 1e-9)
    assert gaussian_delta(sigma=sigma, epsilon=max(eps - 1e-6, 0.0)) >= delta * (1 - 1e-9)


def test_gaussian_input_validation():
    with pytest.raises(ValueError, match="sigma must be in"):
        gaussian_delta(sigma=0.0, epsilon=1.0)
    with pytest.raises(ValueError, match="delta must be in"):
        analytic_gaussian_sigma(epsilon=1.0, delta=1.5)
    assert math.isfinite(gaussian_log_delta(sigma=1.0, epsilon=0.0))


@settings(max_examples=30, deadline=None)
@given(
    sigma=st.floats(0.05, 50.0),
    epsilon=st.floats(0.0, 20.0),
    delta=st.floats(1e-12, 0.5),
)
def test_gaussian_monotone_and_inverse_conservative(sigma, epsilon, delta):
    """δ(ε) falls with σ and with ε; gaussian_epsilon's ε always meets δ (rounded towards more loss)."""
    here = gaussian_log_delta(sigma=sigma, epsilon=epsilon)
    assert gaussian_log_delta(sigma=sigma * 1.25, epsilon=epsilon) <= here + 1e-12
    assert gaussian_log_delta(sigma=sigma, epsilon=epsilon + 0.1) <= here + 1e-12
    eps = gaussian_epsilon(sigma=sigma, delta=delta)
    assert gaussian_delta(sigma=sigma, epsilon=eps) <= delta
