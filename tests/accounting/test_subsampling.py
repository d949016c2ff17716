"""Poisson amplification (004 Thm 2.5) and the dp-accounting helpers (ampfl.accounting.subsampling)."""

import itertools
import math

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ampfl.accounting.accountants import PLDAccountant, RDPAccountant
from ampfl.accounting.events import GaussianEvent, PoissonSampledEvent
from ampfl.accounting.gaussian import gaussian_log_delta
from ampfl.accounting.subsampling import (
    amplified_epsilon,
    base_epsilon,
    optimal_composition_log_delta,
    poisson_amplification,
    subsampled_gaussian_log_delta,
)


@pytest.mark.parametrize(
    ("epsilon", "q"), [(1.0, 0.1), (0.015, 1e-4), (1e-9, 0.5), (5.0, 0.001), (100.0, 0.01), (800.0, 0.2)]
)
def test_amplified_epsilon_matches_mpmath(epsilon, q):
    # ε' = log(1 + q(e^ε − 1)) at 50 digits.
    with mp.workdps(50):
        expected = mp.log(1 + mp.mpf(q) * (mp.exp(mp.mpf(epsilon)) - 1))
    assert amplified_epsilon(epsilon, sampling_rate=q) == pytest.approx(float(expected), rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(eps=st.floats(min_value=0.0, max_value=700.0), q=st.floats(min_value=1e-8, max_value=1.0))
def test_base_epsilon_inverts_amplification(eps, q):
    amp = amplified_epsilon(eps, sampling_rate=q)
    assert amp <= eps + 1e-12
    assert base_epsilon(amp, sampling_rate=q) == pytest.approx(eps, rel=1e-9, abs=1e-12)


def test_poisson_amplification_scales_delta_by_q():
    eps, dlt = poisson_amplification(epsilon=2.0, delta=1e-5, sampling_rate=0.01)
    assert dlt == pytest.approx(1e-7, rel=1e-15)
    assert eps == pytest.approx(math.log1p(0.01 * math.expm1(2.0)), rel=1e-15)
    assert poisson_amplification(epsilon=2.0, delta=1e-5, sampling_rate=1.0) == (2.0, 1e-5)


def test_amplification_validates_input():
    with pytest.raises(ValueError, match="sampling_rate must be in \\(0, 1\\]"):
        amplified_epsilon(1.0, sampling_rate=0.0)
    with pytest.raises(ValueError, match="epsilon must be in \\[0, inf\\)"):
        amplified_epsilon(-1.0, sampling_rate=0.5)


@pytest.mark.parametrize(("q", "z", "eps"), [(0.1, 1.0, 0.5), (0.01, 0.8, 1.0), (0.5, 2.0, 0.2)])
def test_closed_form_is_the_tight_subsampled_gaussian(q, z, eps):
    # Thm 2.5 + Thm 2.4 is exact for the remove direction of the Poisson-subsampled Gaussian, and dominates
    # the add direction, so dp-accounting's PLD (pessimistic) must agree up to its discretisation.
    closed = math.exp(subsampled_gaussian_log_delta(sampling_rate=q, noise_multiplier=z, epsilon=eps))
    event = PoissonSampledEvent(sampling_rate=q, event=GaussianEvent(noise_multiplier=z))
    pld = PLDAccountant().compose(event).get_delta(eps)
    assert closed <= pld * (1 + 1e-9)
    assert pld == pytest.approx(closed, rel=5e-3)


def test_q_one_is_the_plain_gaussian():
    got = subsampled_gaussian_log_delta(sampling_rate=1.0, noise_multiplier=2.0, epsilon=0.3)
    assert got == pytest.approx(gaussian_log_delta(sigma=2.0, epsilon=0.3), rel=1e-14)


def test_pld_is_tighter_than_rdp_after_composition():
    event = PoissonSampledEvent(sampling_rate=0.05, event=GaussianEvent(noise_multiplier=1.2))
    eps_pld = PLDAccountant().compose(event, 200).get_epsilon(1e-6)
    eps_rdp = RDPAccountant().compose(event, 200).get_epsilon(1e-6)
    assert 0.0 < eps_pld <= eps_rdp
    assert eps_rdp < 2.0 * eps_pld


def _kov_lattice_delta(eps0: float, delta0: float, k: int, i: int) -> float:
    # Kairouz, Oh & Viswanath 2015, Thm 3.3, evaluated exactly at ε = (k − 2i) ε₀ with mpmath.
    with mp.workdps(50):
        e0 = mp.mpf(eps0)
        di = sum(
            mp.binomial(k, ell) * (mp.exp((k - ell) * e0) - mp.exp((k - 2 * i + ell) * e0))
            for ell in range(i)
        )
        di /= (1 + mp.exp(e0)) ** k
        return float(1 - (1 - mp.mpf(delta0)) ** k * (1 - di))


@pytest.mark.parametrize(
    ("eps0", "delta0", "k", "i"), [(0.1, 1e-6, 10, 3), (0.5, 0.0, 7, 2), (0.05, 1e-8, 50, 20)]
)
def test_optimal_composition_matches_kov_theorem(eps0, delta0, k, i):
    got = math.exp(
        optimal_composition_log_delta(epsilon0=eps0, delta0=delta0, count=k, epsilon=(k - 2 * i) * eps0)
    )
    assert got == pytest.approx(_kov_lattice_delta(eps0, delta0, k, i), rel=1e-9)


def test_optimal_composition_single_step_and_advanced_composition():
    # k = 1 at ε ≥ ε₀ gives δ₀ back.
    assert math.exp(
        optimal_composition_log_delta(epsilon0=0.3, delta0=1e-5, count=1, epsilon=0.3)
    ) == pytest.approx(1e-5)
    # It is never worse than Dwork–Rothblum–Vadhan advanced composition: ε = ε₀√(2k ln(1/δ')) + kε₀(e^ε₀ − 1)
    # with δ = kδ₀ + δ'.
    eps0, delta0, k, dprime = 0.05, 1e-7, 400, 1e-6
    eps_adv = eps0 * math.sqrt(2 * k * math.log(1 / dprime)) + k * eps0 * math.expm1(eps0)
    got = math.exp(optimal_composition_log_delta(epsilon0=eps0, delta0=delta0, count=k, epsilon=eps_adv))
    assert got <= k * delta0 + dprime


def test_optimal_composition_edge_cases():
    assert optimal_composition_log_delta(epsilon0=0.0, delta0=0.0, count=5, epsilon=0.0) == -math.inf
    assert optimal_composition_log_delta(epsilon0=1.0, delta0=1.0, count=2, epsilon=0.5) == 0.0
    values = [
        optimal_composition_log_delta(epsilon0=0.2, delta0=1e-6, count=20, epsilon=e)
        for e in np.linspace(0, 4, 9)
    ]
    assert all(a >= b for a, b in itertools.pairwise(values))


def _exact_log_delta(e0: float, d0: float, k: int, eps: float) -> float:
    """log δ of the k-fold optimal composition at ε (Kairouz-Oh-Viswanath Thm 3.3), in mpmath."""
    mp.mp.dps = 80
    e0m, d0m, epsm = mp.mpf(e0), mp.mpf(d0), mp.mpf(eps)
    rr = mp.mpf(0)
    for ell in range(k + 1):
        if (k - 2 * ell) * e0m > epsm:
            rr += mp.binomial(k, ell) * (mp.e ** ((k - ell) * e0m) - mp.e ** (epsm + ell * e0m))
    rr /= (1 + mp.e**e0m) ** k
    return float(mp.log(1 - (1 - d0m) ** k * (1 - rr)))


@pytest.mark.parametrize(
    ("e0", "d0", "k"),
    [
        (8.490473241379677, 2.929978860906669e-07, 30),  # met by the composition of 004 Thm 4.1 as printed
        (6.0, 1e-6, 30),
        (12.0, 0.0, 30),
        (38.0, 0.0, 1),
    ],
)
def test_optimal_composition_stays_finite_when_the_randomised_response_part_rounds_to_one(
    e0: float, d0: float, k: int
) -> None:
    # δ_RR within an ulp of 1 at ε = 0: e^{log δ_RR} rounded to 1.0, where log1p(−e^{log δ_RR}) failed
    # ("math domain error"); the answer is finite, a probability, and the exact δ up to rounding.
    got = optimal_composition_log_delta(epsilon0=e0, delta0=d0, count=k, epsilon=0.0)
    assert math.isfinite(got) and got <= 0.0
    assert got >= _exact_log_delta(e0, d0, k, 0.0) - 1e-14  # a relative rounding of δ ≈ 1 at most
