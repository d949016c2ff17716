"""Soundness review regressions: unsafe rounding, unvalidated extreme inputs, limit properties.

Each test pins a defect found in the review of ``ampfl.accounting`` (November 2026): a value below the true
ε/δ, a NaN, or a Python exception other than ValueError/NumericalError at the public boundary.
"""

import math

import mpmath as mp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ampfl.accounting import groups, mixture_rdp, ms_pafl, pm_sfl, rdp, subsampling
from ampfl.accounting._checks import NumericalError
from ampfl.accounting.accountants import PLDAccountant, RDPAccountant
from ampfl.accounting.events import GaussianEvent, PoissonSampledEvent
from ampfl.accounting.gaussian import gaussian_log_delta


def _poisson(z: float) -> PoissonSampledEvent:
    return PoissonSampledEvent(sampling_rate=0.1, event=GaussianEvent(noise_multiplier=z))


def _mp_log_delta(sigma: float, epsilon: float) -> mp.mpf:
    # Balle & Wang 2018 Thm 8 at 60 digits (sensitivity 1), in log space.
    with mp.workdps(60):
        sig, eps = mp.mpf(sigma), mp.mpf(epsilon)
        a, b = 1 / (2 * sig) - eps * sig, -1 / (2 * sig) - eps * sig
        return mp.log(mp.ncdf(a) - mp.exp(eps) * mp.ncdf(b))


# Cases where the unrounded log-space difference fell below the true δ by 1e-12..1e-9 relative
# (cancellation between Φ(a) and e^ε Φ(b)); references by mpmath at 60 digits.
@pytest.mark.parametrize(
    ("sigma", "epsilon"), [(3.0, 5.0), (30.0, 1.0), (1.0, 60.0), (10.0, 5.0), (100.0, 1e-3)]
)
def test_gaussian_log_delta_is_an_upper_bound(sigma, epsilon):
    got = gaussian_log_delta(sigma=sigma, epsilon=epsilon)
    ref = _mp_log_delta(sigma, epsilon)
    assert got >= ref
    assert got - ref < 1e-9 * abs(float(ref)) + 1e-12  # and the margin stays tiny


@pytest.mark.parametrize(("nm", "q", "epsilon"), [(50.0, 1e-4, 1e-4), (50.0, 0.01, 0.01), (500.0, 0.5, 0.01)])
def test_tight_round_log_delta_is_an_upper_bound(nm, q, epsilon):
    # remove direction q·δ_G(log(1 + (e^ε − 1)/q)) by mpmath; it dominates the add direction here
    with mp.workdps(60):
        eps1 = mp.log(1 + mp.expm1(mp.mpf(epsilon)) / mp.mpf(q))
        ref = mp.log(mp.mpf(q)) + _mp_log_delta(nm, float(eps1))
    got = ms_pafl.amplified_round_log_delta(
        noise_multiplier=nm, sampling_rate=q, participation=1.0, epsilon=epsilon
    )
    got_sub = subsampling.subsampled_gaussian_log_delta(sampling_rate=q, noise_multiplier=nm, epsilon=epsilon)
    assert got >= float(ref) - 1e-12 * abs(float(ref))
    assert got_sub >= float(ref) - 1e-12 * abs(float(ref))


def test_bernoulli_mask_orders_must_be_finite_and_non_empty():
    # orders=[inf] used to give a NaN curve and then ε = 0 from the conversion: a silent wrong answer.
    with pytest.raises(ValueError, match="orders"):
        pm_sfl.bernoulli_mask_epsilon_delta(c=0.1, dim=3, delta=1e-5, orders=[math.inf])
    with pytest.raises(ValueError, match="orders"):
        pm_sfl.bernoulli_mask_rdp(orders=[], c=0.1, dim=3)


@pytest.mark.parametrize(
    "call",
    [
        lambda z: rdp.rdp_poisson_gaussian(orders=[2, 3], sampling_rate=0.1, noise_multiplier=z),
        lambda z: mixture_rdp.forward_rdp_exact(orders=[2, 3], d=3, k=1, noise_multiplier=z),
        lambda z: mixture_rdp.reverse_rdp_bound(orders=[2, 3], d=3, k=1, noise_multiplier=z),
        lambda z: PLDAccountant().compose(_poisson(z)).get_epsilon(1e-5),
        lambda z: RDPAccountant().compose(_poisson(z)).get_epsilon(1e-5),
        lambda z: ms_pafl.amplified_epsilon(
            participation=0.5, sampling_rate=0.1, noise_multiplier=z, rounds=3, delta=1e-5
        ),
        lambda z: groups.group_epsilon(z, sampling_rate=0.1, rounds=3, target_delta=1e-5, accountant="pld"),
        lambda z: groups.group_epsilon(z, sampling_rate=0.1, rounds=3, target_delta=1e-5, accountant="rdp"),
    ],
)
@pytest.mark.parametrize("z", [1e-308, 1e-6])
def test_tiny_noise_multiplier_is_a_numerical_error(call, z):
    # used to raise ZeroDivisionError / OverflowError / MemoryError (a PLD grid of ~1e16 points)
    try:
        out = call(z)
    except NumericalError:
        return
    assert not np.any(np.isnan(np.asarray(out, dtype=float)))


def test_huge_noise_multiplier_and_discretisation():
    # z = 1e308 loses nothing: ε = 0 exactly, or a NumericalError, never a NaN or a Python exception.
    for call in (
        lambda: PLDAccountant().compose(_poisson(1e308)).get_epsilon(1e-5),
        lambda: RDPAccountant().compose(_poisson(1e308)).get_epsilon(1e-5),
        lambda: groups.group_epsilon(1e308, sampling_rate=0.1, rounds=3, target_delta=1e-5, accountant="pld"),
    ):
        try:
            assert call() == 0.0
        except NumericalError:
            pass
    with pytest.raises(ValueError, match="value_discretization_interval"):
        PLDAccountant(value_discretization_interval=1e308)


def test_huge_orders_refused_not_allocated():
    with pytest.raises(ValueError, match="orders"):
        rdp.rdp_poisson_gaussian(orders=[2**40], sampling_rate=0.1, noise_multiplier=1.0)


def test_rdp_curve_not_a_list():
    with pytest.raises(ValueError, match="rdp"):
        rdp.epsilon_from_rdp(orders=[2], rdp=None, delta=1e-5)  # type: ignore[arg-type]


def test_exact_forward_affordable_validates():
    with pytest.raises(ValueError, match="k"):
        mixture_rdp.exact_forward_affordable(d=3, k=0.5, max_order=8)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="d"):
        mixture_rdp.exact_forward_affordable(d=True, k=1, max_order=8)  # type: ignore[arg-type]


def test_huge_d_efficient_bound_is_never_nan():
    # gammaln(d) − gammaln(d − 1) lost every digit for d ≫ 1e12 (NaN at d = 1e300)
    got = mixture_rdp.forward_rdp_efficient(orders=[2, 3], d=10**300, k=1, noise_multiplier=1.0)
    assert np.all(np.isfinite(got))
    assert got == pytest.approx(np.expm1([1.0, 1.5]) / 1e300, rel=1e-12)


@pytest.mark.parametrize("d", [10**6, 10**9, 10**15])
def test_efficient_bound_large_d_upper_bound(d):
    # k = 1: Eq. (5) is log(1 + (e^{αλ/2} − 1)/d) exactly; mpmath at 50 digits
    got = mixture_rdp.forward_rdp_efficient(orders=[2, 8], d=d, k=1, noise_multiplier=0.5)
    with mp.workdps(50):
        ref = [float(mp.log(1 + mp.expm1(mp.mpf(a) * 4 / 2) / d)) for a in (2, 8)]
    assert np.all(got >= ref)
    assert np.all(got <= np.asarray(ref) * (1 + 1e-9))


def test_smashed_large_epsilon_finite():
    # ln((1 − c^d) e^ε + c^d) ≈ ε + ln(1 − c^d) for large ε; used to overflow in expm1
    got = pm_sfl.amplified_epsilon_smashed(epsilon=1e3, c=0.25, dim=1)
    assert got == pytest.approx(1e3 + math.log(0.75), rel=1e-15)
    assert pm_sfl.smashed_epsilon_proof_corrected(epsilon=1e308, c=0.1, dim=3) >= 1e308 * (1 - 1e-15)


@settings(max_examples=25, deadline=None)
@given(
    q=st.floats(1e-4, 1.0),
    z=st.floats(0.3, 20.0),
    eps=st.floats(0.0, 10.0),
)
@example(q=0.9999999999999999, z=4.75, eps=2.0)  # found by CI-like runs: upward rounding at q -> 1
def test_subsampled_gaussian_delta_limits(q, z, eps):
    """δ of the subsampled Gaussian: q = 1 equals the plain Gaussian, δ grows with q and falls with σ."""
    d_q = subsampling.subsampled_gaussian_log_delta(sampling_rate=q, noise_multiplier=z, epsilon=eps)
    d_1 = subsampling.subsampled_gaussian_log_delta(sampling_rate=1.0, noise_multiplier=z, epsilon=eps)
    assert d_1 == gaussian_log_delta(sigma=z, epsilon=eps)
    # log δ is rounded upward by a few ulps (pessimistic): compare with a relative tolerance, since an
    # absolute 1e-12 is below the rounding of log δ ≈ −51 (q = 1 − 1e-16, z = 4.75, ε = 2 failed by 1.05e-12)
    tol = 1e-12 * max(1.0, abs(d_1))
    assert d_q <= d_1 + tol
    more_noise = subsampling.subsampled_gaussian_log_delta(
        sampling_rate=q, noise_multiplier=z * 1.5, epsilon=eps
    )
    assert more_noise <= d_q + 1e-12 * max(1.0, abs(d_q))
