"""The random-check-in auditor (paper 004): exact δ of explicit datasets against closed forms.

Expected values come from hand derivations (docstrings of each test), from an mpmath evaluation of the
paper's own closed form Eq. (6) at 50 digits, and from brute-force trapezoid integration of the densities.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from ampfl.accounting import random_checkin
from ampfl.accounting.audit import audit_random_checkin, true_delta, true_delta_estimate
from ampfl.accounting.gaussian import gaussian_delta


def mech(p, q, d, z=None):
    """Keyword arguments for (p, q, d) and, if given, the noise multiplier z = σ/C."""
    out = {"participation": p, "sampling_rate": q, "local_dataset_size": d}
    return out if z is None else {**out, "noise_multiplier": z}


def _hockey_gauss(alpha: float, sigma: float, clip: float) -> float:
    """H_α(N(0,σ²) ‖ N(C,σ²)) for any α > 0 (α < 1 via H_α = 1 − α + α H_{1/α} reversed)."""
    if alpha >= 1.0:
        return gaussian_delta(sigma=sigma, epsilon=math.log(alpha), sensitivity=clip)
    return (1.0 - alpha) + alpha * gaussian_delta(sigma=sigma, epsilon=-math.log(alpha), sensitivity=clip)


CASES = [  # (p, q, d, sigma, epsilon, clip): the auditor sees z = sigma / clip only
    (0.1, 0.1, 10, 1.0, 0.1, 1.0),
    (0.1, 0.1, 10, 1.0, 1.0, 1.0),
    (0.001, 0.1, 30, 1.065, 0.015, 1.0),
    (0.1, 0.001, 1000, 0.646, 0.015, 1.0),
    (0.5, 0.3, 20, 0.7, 0.3, 2.0),
    (1.0, 0.2, 5, 2.0, 0.0, 1.0),
]


@pytest.mark.parametrize("p,q,d,sigma,epsilon,clip", CASES)
def test_a_zero_add_is_subsampled_gaussian(p, q, d, sigma, epsilon, clip):
    """a = 0: D' gives N(0), D gives (1 − pq) N(0) + pq N(C). Advanced joint convexity (Balle et al. 2018,
    Thm 2, γ = pq) is an equality: δ = pq · δ_G(ε′) with ε′ = log(1 + (e^ε − 1)/(pq))."""
    # Prepare
    eps_prime = math.log1p(math.expm1(epsilon) / (p * q))
    expected = p * q * gaussian_delta(sigma=sigma, epsilon=eps_prime, sensitivity=clip)
    # Execute
    est = true_delta_estimate(a=0.0, **mech(p, q, d, sigma / clip), epsilon=epsilon, direction="add")
    # Assert
    assert est.delta == pytest.approx(expected, rel=1e-9, abs=1e-300)
    assert abs(est.delta - expected) <= est.error + 1e-12 * expected


@pytest.mark.parametrize("p,q,d,sigma,epsilon,clip", CASES)
def test_a_zero_remove_closed_form(p, q, d, sigma, epsilon, clip):
    """a = 0, remove: ∫(N0 − e^ε((1 − γ)N0 + γ N_C))_+ = c · H_α(N0 ‖ N_C) with γ = pq,
    c = 1 − e^ε(1 − γ) and α = γ e^ε / c (zero when c ≤ 0)."""
    # Prepare
    gamma = p * q
    c = 1.0 - math.exp(epsilon) * (1.0 - gamma)
    expected = c * _hockey_gauss(gamma * math.exp(epsilon) / c, sigma, clip) if c > 0 else 0.0
    # Execute
    got = true_delta(a=0.0, **mech(p, q, d, sigma / clip), epsilon=epsilon, direction="remove")
    # Assert
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("a", [-1.0, -0.3, 0.0, 0.7, 1.0])
@pytest.mark.parametrize("direction", ["add", "remove"])
@pytest.mark.parametrize("d", [0, 7])
def test_no_sampling_is_the_gaussian_mechanism(a, direction, d):
    """p = q = 1: every sample is always included, so D and D' differ by a shift C: δ = δ_G(ε)."""
    expected = gaussian_delta(sigma=0.8, epsilon=0.4, sensitivity=1.5)
    got = true_delta(a=a, **mech(1.0, 1.0, d, 0.8 / 1.5), epsilon=0.4, direction=direction)
    assert got == pytest.approx(expected, rel=1e-10)


def _eq6_mpmath(p: float, q: float, d: int, sigma: float, epsilon: float) -> mpmath.mpf:
    """Paper 004 Thm 4.1, Eq. (6) with z* the root of Eq. (7), evaluated with mpmath at 50 digits (C = 1)."""
    mpmath.mp.dps = 50
    p_, q_, s, eps = (mpmath.mpf(x) for x in (p, q, sigma, epsilon))
    eps_prime = mpmath.log(1 + (mpmath.exp(eps) - 1) / (p_ * q_))
    alpha_p, beta = mpmath.exp(eps_prime), mpmath.exp(eps - eps_prime)
    c1 = (1 - beta) * (1 - p_) / (1 - p_ * q_)
    c2 = p_ * (1 - q_) / (1 - p_ * q_) * (1 - beta) + beta
    w = [mpmath.binomial(d, i) * q_**i * (1 - q_) ** (d - i) for i in range(d + 1)]

    def pdf(z, mu):
        return mpmath.npdf(z, mu, s)

    def eq7(z):
        return sum(
            w[i] * (pdf(z, i + 1) - alpha_p * c2 * pdf(z, i)) for i in range(d + 1)
        ) - alpha_p * c1 * pdf(z, 0)

    lo, hi = mpmath.mpf(-50), mpmath.mpf(d + 60)  # eq7 < 0 at lo, > 0 at hi (single crossing)
    assert eq7(lo) < 0 < eq7(hi)
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if eq7(mid) < 0 else (lo, mid)
    z = (lo + hi) / 2

    def cdf(mu):
        return mpmath.ncdf(z, mu, s)

    total = sum(w[i] * (alpha_p * c2 * cdf(i) - cdf(i + 1)) for i in range(d + 1))
    return p_ * q_ * (1 - alpha_p * c2 + alpha_p * c1 * (cdf(0) - 1) + total)


@pytest.mark.parametrize(
    "p,q,d,sigma,epsilon",
    [
        (0.1, 0.1, 10, 1.0, 0.1),
        (0.1, 0.1, 10, 1.0, 1.0),
        (0.001, 0.1, 30, 1.065, 0.015),
        (0.3, 0.5, 12, 0.6, 0.2),
    ],
)
def test_a_one_add_equals_eq28_closed_form(p, q, d, sigma, epsilon):
    """a = 1, add: P − e^ε Q = pq · (integrand of Eq. 28) pointwise, so δ equals Eq. (6) at the root z*."""
    # Prepare
    expected = float(_eq6_mpmath(p, q, d, sigma, epsilon))
    # Execute
    est = true_delta_estimate(a=1.0, **mech(p, q, d, sigma), epsilon=epsilon, direction="add")
    # Assert
    assert est.num_intervals == 1
    assert est.delta == pytest.approx(expected, rel=1e-9)
    assert est.closed_form == pytest.approx(expected, rel=1e-9)
    assert abs(est.delta - expected) <= est.error + 1e-12 * expected


def _brute(a, p, q, d, sigma, epsilon, clip, direction):
    """Trapezoid rule on 5·10^5 points of the densities written out directly (independent of the module)."""
    y = np.linspace(-12 * sigma - clip, abs(a) * clip * d + clip + 12 * sigma, 500_001)
    if a < 0:
        y = y - abs(a) * clip * d
    w = stats.binom.pmf(np.arange(d + 1), d, q)
    other = sum(w[m] * stats.norm.pdf(y, a * clip * m, sigma) for m in range(d + 1))
    with_x = sum(w[m] * stats.norm.pdf(y, a * clip * m + clip, sigma) for m in range(d + 1))
    q_dens = (1 - p) * stats.norm.pdf(y, 0, sigma) + p * other
    p_dens = (1 - p) * stats.norm.pdf(y, 0, sigma) + p * ((1 - q) * other + q * with_x)
    f = p_dens - math.exp(epsilon) * q_dens if direction == "add" else q_dens - math.exp(epsilon) * p_dens
    return float(np.trapezoid(np.maximum(f, 0.0), y))


@pytest.mark.parametrize(
    "a,p,q,d,sigma,epsilon,clip,direction",
    [
        (0.5, 0.1, 0.1, 10, 1.0, 0.1, 1.0, "add"),
        (-1.0, 0.1, 0.1, 10, 1.0, 0.1, 1.0, "add"),
        (0.37, 0.5, 0.5, 10, 1.0, 0.01, 1.0, "remove"),
        (-0.8, 0.5, 0.5, 10, 0.5, 0.01, 2.0, "remove"),
        (0.25, 0.2, 0.3, 8, 0.25, 0.3, 1.0, "add"),  # well separated components: several sign changes
    ],
)
def test_matches_brute_force_integration(a, p, q, d, sigma, epsilon, clip, direction):
    expected = _brute(a, p, q, d, sigma, epsilon, clip, direction)
    est = true_delta_estimate(a=a, **mech(p, q, d, sigma / clip), epsilon=epsilon, direction=direction)
    assert est.delta == pytest.approx(expected, rel=1e-6)
    if est.closed_form is not None:
        assert abs(est.delta - est.closed_form) <= est.error + 1e-15


@settings(max_examples=25, deadline=None)
@given(
    a=st.floats(-1.0, 1.0),
    p=st.floats(0.01, 1.0),
    q=st.floats(0.01, 1.0),
    d=st.integers(0, 40),
    sigma=st.floats(0.3, 5.0),
    epsilon=st.floats(0.0, 2.0),
    direction=st.sampled_from(["add", "remove"]),
)
def test_never_exceeds_the_weak_client_sampling_bound(a, p, q, d, sigma, epsilon, direction):
    """Revealing participation is post-processing in reverse, so the exact δ of any dataset is at most
    p·q·δ_G(log(1 + (e^ε − 1)/q)) (004 Thm 5.2 after simplification) in both directions."""
    est = true_delta_estimate(a=a, **mech(p, q, d, sigma), epsilon=epsilon, direction=direction)
    bound = p * q * gaussian_delta(sigma=sigma, epsilon=math.log1p(math.expm1(epsilon) / q))
    assert 0.0 <= est.delta <= 1.0
    assert est.lower <= bound * (1 + 1e-9) + 1e-300


@settings(max_examples=15, deadline=None)
@given(a=st.floats(-1.0, 1.0), eps=st.floats(0.0, 1.5), step=st.floats(0.01, 1.0))
def test_delta_decreases_in_epsilon(a, eps, step):
    kw = {"a": a, **mech(0.3, 0.2, 15, 0.9)}
    assert true_delta(**kw, epsilon=eps + step) <= true_delta(**kw, epsilon=eps) * (1 + 1e-12)


def test_large_d_uses_the_binomial_support():
    """d = 10^5: only the effective support of Bin(d, q) enters; a = 0 is still the closed form."""
    p, q, sigma, eps = 0.1, 1e-4, 1.0, 0.5
    expected = p * q * gaussian_delta(sigma=sigma, epsilon=math.log1p(math.expm1(eps) / (p * q)))
    assert true_delta(a=0.0, **mech(p, q, 100_000, sigma), epsilon=eps) == pytest.approx(expected, rel=1e-9)
    est = true_delta_estimate(a=0.01, **mech(p, q, 100_000, sigma), epsilon=eps)
    assert est.delta > 0.0 and est.error < 1e-6 * est.delta
    assert est.closed_form == pytest.approx(est.delta, rel=1e-9)


def test_audit_finds_a_worse_dataset_than_a_equals_one():
    """Fig. 1 setting of 004 (p = q = 0.1, σ = C = 1) with d = 10, ε = 0.1: the paper's worst case a = 1
    (Eq. 28) is beaten by a ≈ 0.73 (audited, cross-checked by brute force in this file)."""
    at_one = true_delta(a=1.0, **mech(0.1, 0.1, 10, 1.0), epsilon=0.1)
    result = audit_random_checkin(**mech(0.1, 0.1, 10, 1.0), epsilon=0.1, grid=11, analyses=())
    assert result.direction == "add"
    assert 0.6 < result.worst_a < 0.85
    assert result.max_delta > 1.15 * at_one
    assert result.lower_bound <= result.max_delta
    assert _brute(result.worst_a, 0.1, 0.1, 10, 1.0, 0.1, 1.0, "add") == pytest.approx(
        result.max_delta, rel=1e-6
    )


def test_progress_callback_reaches_total():
    calls = []
    audit_random_checkin(
        **mech(0.2, 0.2, 3, 1.0),
        epsilon=0.2,
        grid=5,
        refine=False,
        analyses=(),
        progress=lambda done, total: calls.append((done, total)),
    )
    assert calls and calls[-1][0] == calls[-1][1]


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"a": 1.5}, "a must be in [-1.0, 1.0]. Found 1.5."),
        ({"direction": "both"}, "direction must be one of add, remove"),
        ({"participation": 0.0}, "participation must be in (0, 1]. Found 0.0."),
        ({"sampling_rate": 2.0}, "sampling_rate must be in (0, 1]. Found 2.0."),
        ({"local_dataset_size": -1}, "local_dataset_size must be an integer in [0, 1000000]. Found -1."),
        ({"noise_multiplier": 0.0}, "noise_multiplier must be in (0, inf). Found 0.0."),
        ({"epsilon": -0.1}, "epsilon must be in [0, inf). Found -0.1."),
    ],
)
def test_rejects_bad_input(kwargs, message):
    args = {"a": 0.5, **mech(0.1, 0.1, 5, 1.0), "epsilon": 0.1, "direction": "add"} | kwargs
    with pytest.raises(ValueError) as info:
        true_delta(**args)
    assert message in str(info.value)


# -------------------------------------------------- against the analyses of ampfl.accounting.random_checkin


@pytest.mark.parametrize("p,q,d,sigma,epsilon", [(0.1, 0.1, 10, 1.0, 0.1), (0.001, 0.1, 30, 1.065, 0.015)])
def test_paper_delta_equals_audited_a_one(p, q, d, sigma, epsilon):
    """Thm 4.1's δ (as implemented for the 'paper' analysis) is the exact δ of the dataset a = 1."""
    claimed = random_checkin.delta_per_iteration(analysis="paper", **mech(p, q, d, sigma), epsilon=epsilon)
    assert true_delta(a=1.0, **mech(p, q, d, sigma), epsilon=epsilon) == pytest.approx(claimed, rel=1e-6)


SCENARIOS = [  # 004 Section 6 (ε = 0.015) and the figure setting p = q = 0.1, σ = C = 1
    (0.001, 0.1, 30, 0.015),
    (0.1, 0.001, 1000, 0.015),
    (0.1, 0.1, 10, 0.1),
    (0.1, 0.1, 100, 0.5),
]


@pytest.mark.parametrize("p,q,d,epsilon", SCENARIOS)
def test_recommended_analysis_is_never_violated(p, q, d, epsilon):
    """At the σ the recommended analysis calibrates for δ = 1e-6, the audited δ stays below 1e-6."""
    name = random_checkin.RECOMMENDED_ANALYSIS
    z = random_checkin.calibrate_noise_multiplier(analysis=name, **mech(p, q, d), epsilon=epsilon, delta=1e-6)
    result = audit_random_checkin(**mech(p, q, d, z), epsilon=epsilon, grid=9, analyses=(name,))
    assert not result.analyses[name].violated
    assert result.lower_bound <= 1e-6


@pytest.mark.parametrize(
    "p,q,d,sigma,epsilon", [(0.001, 0.1, 30, 1.065, 0.015), (0.1, 0.001, 1000, 0.646, 0.015)]
)
def test_paper_section6_sigmas_fail_the_audit(p, q, d, sigma, epsilon):
    """004 Section 6 prints σ = 1.065 (scenario 1) and σ = 0.646 (scenario 2) for (ε, δ) = (0.015, 1e-6);
    explicit datasets at those σ have δ > 1e-6 (1.40e-5 at a ≈ 0.85 and 1.76e-6 at a ≈ 0.28)."""
    result = audit_random_checkin(**mech(p, q, d, sigma), epsilon=epsilon, grid=21, analyses=("paper",))
    assert result.lower_bound > 1e-6
    assert result.analyses["paper"].violated
