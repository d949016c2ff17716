"""Poisson-subsampled Gaussian RDP (002 Thm 3.11 comparison) and RDP → (ε, δ) conversion (002 Prop. 2.3)."""

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp
from hypothesis import given, settings
from hypothesis import strategies as st

from ampfl.accounting.calibrate import calibrate
from ampfl.accounting.events import GaussianEvent, PoissonSampledEvent
from ampfl.accounting.rdp import (
    DEFAULT_ORDERS,
    delta_from_rdp,
    epsilon_from_rdp,
    rdp_gaussian,
    rdp_poisson_gaussian,
    rdp_poisson_subsampled_general,
)

ORDERS = [*range(2, 129), 160, 256, 512]


def _dp_accounting_rdp(q: float, z: float, steps: int, orders) -> np.ndarray:
    acc = dp_rdp.RdpAccountant(orders=[float(o) for o in orders])
    acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z)), steps)
    return np.asarray(acc._rdp)


@pytest.mark.parametrize(
    ("q", "z", "steps"),
    [
        (0.01, 1.0, 1000),
        (0.25, 3.31, 400),
        (0.9, 2.0, 3),
        (0.5, 0.3, 1),
        (0.004, 0.8, 10_000),
        (1e-3, 5.0, 50),
    ],
)
def test_poisson_matches_dp_accounting(q, z, steps):
    ours = rdp_poisson_gaussian(orders=ORDERS, sampling_rate=q, noise_multiplier=z, steps=steps)
    ref = _dp_accounting_rdp(q, z, steps, ORDERS)
    np.testing.assert_allclose(ours, ref, rtol=1e-9)


@pytest.mark.parametrize(
    ("q", "z", "alpha"), [(1e-3, 10.0, 256), (1e-7, 30.0, 40), (1e-5, 0.5, 64), (0.3, 1.0, 7)]
)
def test_poisson_matches_multiprecision_and_rounds_up(q, z, alpha):
    # independent 60-digit computation of the same sum (dp-accounting itself loses digits when q is tiny)
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 60
    qq, zz = mpmath.mpf(q), mpmath.mpf(z)
    total = mpmath.fsum(
        mpmath.binomial(alpha, ell)
        * (1 - qq) ** (alpha - ell)
        * qq**ell
        * mpmath.exp((ell * ell - ell) / (2 * zz * zz))
        for ell in range(alpha + 1)
    )
    ref = float(mpmath.log(total) / (alpha - 1))
    ours = rdp_poisson_gaussian(orders=[alpha], sampling_rate=q, noise_multiplier=z)[0]
    assert ours == pytest.approx(ref, rel=1e-11)
    assert ours >= ref


def test_poisson_edge_rates():
    np.testing.assert_array_equal(
        rdp_poisson_gaussian(orders=[2, 3], sampling_rate=0.0, noise_multiplier=1.0), 0.0
    )
    np.testing.assert_allclose(
        rdp_poisson_gaussian(orders=[2, 3], sampling_rate=1.0, noise_multiplier=2.0, steps=3),
        rdp_gaussian(orders=[2, 3], noise_multiplier=2.0, steps=3),
    )
    with pytest.raises(ValueError, match=r"sampling_rate must be in \[0, 1\]"):
        rdp_poisson_gaussian(orders=[2], sampling_rate=1.5, noise_multiplier=1.0)


def test_general_bound_dominates_exact_gaussian():
    base = rdp_gaussian(orders=range(2, 33), noise_multiplier=1.5)
    general = rdp_poisson_subsampled_general(orders=range(2, 33), sampling_rate=0.05, base_rdp=base)
    exact = rdp_poisson_gaussian(orders=range(2, 33), sampling_rate=0.05, noise_multiplier=1.5)
    assert np.all(general >= exact)
    with pytest.raises(ValueError, match="every integer order"):
        rdp_poisson_subsampled_general(orders=[40], sampling_rate=0.05, base_rdp=base)


@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-9])
@pytest.mark.parametrize(("q", "z", "steps"), [(0.01, 1.0, 1000), (0.25, 3.31, 400), (1.0, 5.0, 10)])
def test_conversion_matches_dp_accounting(q, z, steps, delta):
    rdp = _dp_accounting_rdp(q, z, steps, DEFAULT_ORDERS)
    eps, order = epsilon_from_rdp(orders=DEFAULT_ORDERS, rdp=rdp, delta=delta)
    ref_eps, ref_order = dp_rdp.compute_epsilon(DEFAULT_ORDERS, rdp, delta)
    assert eps == pytest.approx(ref_eps, rel=1e-12)
    assert eps >= ref_eps
    assert order == ref_order
    dlt, _ = delta_from_rdp(orders=DEFAULT_ORDERS, rdp=rdp, epsilon=eps)
    ref_dlt, _ = dp_rdp.compute_delta(DEFAULT_ORDERS, rdp, eps)
    assert dlt == pytest.approx(ref_dlt, rel=1e-9)
    assert dlt == pytest.approx(delta, rel=1e-6)  # δ(ε(δ)) = δ at the same order


def test_conversion_formula_by_hand():
    # 002 Prop. 2.3 (RECOVERED_MATH §1.2): ε = r + log((α−1)/α) − (log δ + log α)/(α−1)
    r, a, delta = 1.3, 9, 1e-6
    expected = r + math.log((a - 1) / a) - (math.log(delta) + math.log(a)) / (a - 1)
    assert epsilon_from_rdp(orders=[a], rdp=[r], delta=delta).epsilon == pytest.approx(expected, rel=1e-14)


def test_conversion_handles_inf_and_validates():
    eps, order = epsilon_from_rdp(orders=[2, 3], rdp=[math.inf, 0.5], delta=1e-5)
    assert math.isfinite(eps) and order == 3
    assert epsilon_from_rdp(orders=[2], rdp=[math.inf], delta=1e-5).epsilon == math.inf
    assert delta_from_rdp(orders=[2], rdp=[math.inf], epsilon=1.0).delta == 1.0
    assert epsilon_from_rdp(orders=[2], rdp=[0.0], delta=0.5).epsilon == 0.0
    with pytest.raises(ValueError, match=r"delta must be in \(0, 1\)"):
        epsilon_from_rdp(orders=[2], rdp=[1.0], delta=0.0)
    with pytest.raises(ValueError, match="one value per order"):
        epsilon_from_rdp(orders=[2, 3], rdp=[1.0], delta=1e-5)
    with pytest.raises(ValueError, match="non-negative"):
        epsilon_from_rdp(orders=[2], rdp=[-1.0], delta=1e-5)


@settings(max_examples=30, deadline=None)
@given(q=st.floats(1e-4, 1.0), z=st.floats(0.5, 20.0), factor=st.floats(1.01, 2.0))
def test_property_poisson_monotone(q, z, factor):
    low = rdp_poisson_gaussian(orders=[2, 3, 8, 32], sampling_rate=q, noise_multiplier=z)
    high = rdp_poisson_gaussian(orders=[2, 3, 8, 32], sampling_rate=q, noise_multiplier=z * factor)
    assert np.all(high <= low)
    assert np.all(np.diff(low) >= -1e-15)


def test_calibrate_poisson_table1_baseline():
    # 002 Table 1 baseline σ = 3.31 with ε = 8, δ = 1e-5, 100 epochs: q = 0.25 (T = 400) gives 3.3197
    # (RECOVERED_MATH §1.15 reports 3.32 with integer orders, 3.319 with dp-accounting)
    event = PoissonSampledEvent(sampling_rate=0.25, event=GaussianEvent(noise_multiplier=1.0))
    z = calibrate(
        lambda s: PoissonSampledEvent(sampling_rate=0.25, event=GaussianEvent(noise_multiplier=s)),
        target_epsilon=8.0,
        target_delta=1e-5,
        count=400,
        accountant_kwargs={"orders": DEFAULT_ORDERS},
        rtol=1e-6,
    )
    assert event.sampling_rate == 0.25
    assert z == pytest.approx(3.3197, abs=1e-3)
    rdp = rdp_poisson_gaussian(orders=DEFAULT_ORDERS, sampling_rate=0.25, noise_multiplier=z, steps=400)
    assert epsilon_from_rdp(orders=DEFAULT_ORDERS, rdp=rdp, delta=1e-5).epsilon <= 8.0
