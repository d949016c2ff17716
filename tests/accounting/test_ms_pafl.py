"""Tests of the MS-PAFL accountant (paper 000): formulas as printed, tight analysis, known discrepancies."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from ampfl.accounting import ms_pafl as m
from ampfl.accounting._checks import NumericalError
from ampfl.accounting.gaussian import gaussian_delta, gaussian_epsilon

DL = 1e-4


def _nm(eps_local: float, delta_local: float = DL) -> float:
    return m.ldp_sigma(eps_local=eps_local, delta_local=delta_local, clip=1.0) / 2.0


# ---------------------------------------------------------------------------------------------- Eq. (9)
@pytest.mark.parametrize(
    ("b", "n", "steps", "scheme", "expected"),
    [
        (5, 325, 5, "wor", 25 / 325),  # hand: Qb/|D| (paper Fig. 2 setting, Adult split over 100 clients)
        (5, 325, 5, "wr", 1 - (324 / 325) ** 25),  # hand: 1 - (1 - 1/n)^(Qb)
        (13, 325, 5, "wor", 0.2),  # hand: 65/325
        (1, 1, 1, "wr", 1.0),  # single record is always drawn
        (10, 10, 1, "wor", 1.0),
    ],
    ids=["wor-fig2", "wr-fig2", "wor-b13", "wr-n1", "wor-full"],
)
def test_sampling_rate_known_values(b: int, n: int, steps: int, scheme: str, expected: float) -> None:
    assert m.sampling_rate(batch_size=b, dataset_size=n, local_steps=steps, scheme=scheme) == pytest.approx(
        expected, rel=1e-12
    )


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 50), st.integers(1, 20), st.integers(1, 5000))
def test_wr_rate_never_exceeds_wor(b: int, steps: int, n: int) -> None:
    if b * steps > n:
        with pytest.raises(ValueError, match="dataset_size"):
            m.sampling_rate(batch_size=b, dataset_size=n, local_steps=steps, scheme="wor")
        return
    wor = m.sampling_rate(batch_size=b, dataset_size=n, local_steps=steps, scheme="wor")
    wr = m.sampling_rate(batch_size=b, dataset_size=n, local_steps=steps, scheme="wr")
    assert 0.0 < wr <= wor <= 1.0


def test_sampling_rate_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="scheme must be one of"):
        m.sampling_rate(batch_size=1, dataset_size=10, local_steps=1, scheme="poisson")
    with pytest.raises(ValueError, match="batch_size"):
        m.sampling_rate(batch_size=0, dataset_size=10, local_steps=1, scheme="wr")


# ---------------------------------------------------------------------------------------------- Lemma 1
def test_ldp_sigma_known_value_and_exact_check() -> None:
    # hand: sigma = 2C sqrt(2 ln(1.25/delta)) / eps with C = 1, eps = 0.5, delta = 1e-5.
    expected = 2.0 * math.sqrt(2.0 * math.log(1.25e5)) / 0.5
    assert m.ldp_sigma(eps_local=0.5, delta_local=1e-5, clip=1.0) == pytest.approx(expected, rel=1e-12)
    for eps in (0.1, 0.5, 0.99, 1.0):
        for dlt in (1e-10, 1e-4, 0.1, 0.9):
            sigma = m.ldp_sigma(eps_local=eps, delta_local=dlt, clip=2.0)
            assert gaussian_delta(sigma=sigma, epsilon=eps, sensitivity=4.0) <= dlt  # exact Balle-Wang


def test_ldp_sigma_refuses_eps_above_one() -> None:
    with pytest.raises(ValueError, match=r"eps_local must be in \(0, 1\]"):
        m.ldp_sigma(eps_local=1.5, delta_local=1e-5, clip=1.0)
    with pytest.raises(ValueError, match="eps_local"):
        m.ldp_sigma(eps_local=0.0, delta_local=1e-5, clip=1.0)


# ---------------------------------------------------------------------------------------------- Theorem 1
def test_theorem1_values_and_refusal() -> None:
    assert m.theorem1_amplification(eps_local=0.5, delta_local=1e-5, q=0.1) == pytest.approx((0.1, 1e-6))
    with pytest.raises(ValueError, match="eps_local"):
        m.theorem1_amplification(eps_local=1.01, delta_local=1e-5, q=0.1)


@pytest.mark.parametrize("q", [1e-4, 1e-2, 0.1, 0.5, 1.0])
@pytest.mark.parametrize("eps", [0.01, 0.5, 1.0])
@pytest.mark.parametrize("dlt", [1e-10, 1e-4, 0.3])
def test_theorem1_holds_for_the_lemma1_gaussian(q: float, eps: float, dlt: float) -> None:
    # Exact delta of the q-subsampled Gaussian (sigma from Lemma 1, s = 2C) at 2 q eps is below q delta.
    nm = _nm(eps, dlt)
    eps_amp, delta_amp = m.theorem1_amplification(eps_local=eps, delta_local=dlt, q=q)
    assert math.exp(m.tight_round_log_delta(noise_multiplier=nm, q=q, p=1.0, epsilon=eps_amp)) <= delta_amp
    # and is loose: the exact epsilon at q delta is at most 0.7 x 2 q eps (measured maximum 0.676).
    assert m.tight_round_epsilon(noise_multiplier=nm, q=q, p=1.0, target_delta=delta_amp) <= 0.7 * eps_amp


def test_theorem1_generic_bound_for_eps_at_most_one() -> None:
    # Standard amplification ln(1 + q(e^eps - 1)) <= 2 q eps for eps <= 1 (so Thm 1 is implied by it).
    for eps in np.linspace(1e-3, 1.0, 50):
        for q in (1e-6, 1e-3, 0.1, 0.5, 1.0):
            assert math.log1p(q * math.expm1(eps)) <= 2 * q * eps


# ---------------------------------------------------------------------------------------------- Theorem 2
def test_corollary1_known_value() -> None:
    dprime = 2.0 * math.exp(-2.0 * 0.25**2 * 100)  # hand: 7.4533e-6
    eps_c, delta_c = m.theorem2_round_cdp(
        p=0.5, q=0.2, eps_local=1.0, delta_local=DL, num_clients=100, beta=0.25
    )
    assert eps_c == pytest.approx(math.log(1 + 0.5 / (1 - dprime) * (math.exp(0.4) - 1)), rel=1e-12)
    assert delta_c == pytest.approx(dprime + 0.5 * 0.2 * DL / (1 - dprime), rel=1e-12)


def test_theorem2_is_the_max_over_clients() -> None:
    kw = dict(eps_local=0.8, delta_local=DL, num_clients=50, beta=0.3)
    het = m.theorem2_round_cdp(p=[0.1, 0.7, 0.3], q=[0.5, 0.1, 0.2], **kw)
    uni = [m.theorem2_round_cdp(p=p, q=q, **kw) for p, q in [(0.1, 0.5), (0.7, 0.1), (0.3, 0.2)]]
    assert het[0] == pytest.approx(max(u[0] for u in uni))
    assert het[1] == pytest.approx(max(u[1] for u in uni))


def test_theorem2_rejects_vacuous_hoeffding() -> None:
    with pytest.raises(ValueError, match="beta must give"):
        m.theorem2_round_cdp(p=0.5, q=0.1, eps_local=1.0, delta_local=DL, num_clients=10, beta=0.1)


def test_corollary1_fails_for_record_level_against_the_server() -> None:
    # Documented discrepancy (docs/ms_pafl.md): the server sees who uploaded, so the p-amplification of
    # epsilon does not hold. Paper's Fig. 2 setting (N=100, beta=0.25, Q=b=5, |D|=325, eps_l=1, p=0.1).
    q = 25 / 325
    eps_c, delta_c = m.theorem2_round_cdp(
        p=0.1, q=q, eps_local=1.0, delta_local=DL, num_clients=100, beta=0.25
    )
    true_delta = math.exp(m.tight_round_log_delta(noise_multiplier=_nm(1.0), q=q, p=0.1, epsilon=eps_c))
    assert true_delta > 20 * delta_c  # measured: 2.14e-4 vs 8.22e-6


def test_corollary1_fails_for_the_client_level_relation_of_eq_a1() -> None:
    # (A.1) compares the aggregate with and without client i. p = 1, N = 100, others' clipped public models
    # are 0, client i's is C = 1 (1-D): N(C/N, s^2/N) against N(0, s^2/(N-1)). With Q = b = 1 (q = 1/325)
    # Cor. 1 claims eps_c = 0.0062, delta_c = 7.8e-6, but the hockey-stick divergence is 1.6e-3.
    n, q = 100, 1 / 325
    sigma = m.ldp_sigma(eps_local=1.0, delta_local=DL, clip=1.0)
    eps_c, delta_c = m.theorem2_round_cdp(p=1.0, q=q, eps_local=1.0, delta_local=DL, num_clients=n, beta=0.25)
    hockey = _hockey_stick_gaussians(1.0 / n, sigma / math.sqrt(n), sigma / math.sqrt(n - 1), eps_c)
    assert hockey > 100 * delta_c


def _hockey_stick_gaussians(mu1: float, s1: float, s2: float, eps: float) -> float:
    """H_{e^eps}(N(mu1, s1^2) || N(0, s2^2)) for s1 < s2, exactly: the set where the density ratio exceeds
    e^eps is the interval between the roots of a quadratic."""
    a = 1 / (2 * s2**2) - 1 / (2 * s1**2)
    b = mu1 / s1**2
    c = -(mu1**2) / (2 * s1**2) + math.log(s2 / s1) - eps
    disc = b * b - 4 * a * c
    if disc <= 0:
        return 0.0
    r1, r2 = sorted(((-b - math.sqrt(disc)) / (2 * a), (-b + math.sqrt(disc)) / (2 * a)))
    p_mass = stats.norm.cdf(r2, mu1, s1) - stats.norm.cdf(r1, mu1, s1)
    q_mass = stats.norm.cdf(r2, 0.0, s2) - stats.norm.cdf(r1, 0.0, s2)
    return float(p_mass - math.exp(eps) * q_mass)


def test_hockey_stick_helper_against_quadrature() -> None:
    exact = _hockey_stick_gaussians(0.3, 1.0, 1.2, 0.05)
    num = integrate.quad(
        lambda x: max(stats.norm.pdf(x, 0.3, 1.0) - math.exp(0.05) * stats.norm.pdf(x, 0, 1.2), 0.0), -12, 12,
        points=[-3, -1, 0, 1, 3], limit=400,
    )[0]  # fmt: skip
    assert exact == pytest.approx(num, rel=1e-6)


# ---------------------------------------------------------------------------------------------- Theorem 3
def test_theorem3_constant_and_value() -> None:
    c0 = 0.5 * math.sqrt(math.log(1e4) / math.log(1.25e4))  # hand, from (C.8) with C = 1, delta_l = 1e-4
    assert m.theorem3_constant(delta_local=DL, clip=1.0) == pytest.approx(c0, rel=1e-12)
    got = m.theorem3_client_total(p=0.5, q=0.2, eps_local=1.0, delta_local=DL, rounds=100, clip=1.0)
    assert got == pytest.approx(c0 * 0.2 * math.sqrt(0.5 * 100 / 0.8), rel=1e-12)
    assert m.theorem3_client_total(p=0.5, q=1.0, eps_local=1.0, delta_local=DL, rounds=3) == math.inf


def test_theorem3_under_reports_against_a_lower_bound() -> None:
    # Documented discrepancy: an optimistic PLD (a lower bound on the true epsilon of the worst-case pair)
    # already exceeds Theorem 3's value. p = 0.1, q = 0.2, eps_l = 1, T = 10, delta = delta_l.
    from dp_accounting.pld import privacy_loss_distribution as pld

    paper = m.theorem3_client_total(p=0.1, q=0.2, eps_local=1.0, delta_local=DL, rounds=10)
    kw = dict(value_discretization_interval=1e-4, pessimistic_estimate=False)
    sub = pld.from_gaussian_mechanism(_nm(1.0), sensitivity=1.0, sampling_prob=0.2, **kw)
    mix = sub.compute_mixture(pld.identity(**kw), 0.1).self_compose(10)
    lower = mix.get_epsilon_for_delta(DL)
    assert lower > 1.5 * paper  # measured: 0.188 vs 0.110


# ---------------------------------------------------------------------------------------------- Theorem 4
def test_theorem4_known_value() -> None:
    eps, dlt = m.theorem4_strong_composition(
        epsilon_round=0.1, delta_round=1e-6, rounds=100, delta_tilde=1e-5
    )
    assert eps == pytest.approx(math.sqrt(200 * math.log(1e5)) * 0.1 + 100 * 0.1 * math.expm1(0.1), rel=1e-12)
    assert dlt == pytest.approx(100 * 1e-6 + 1e-5, rel=1e-12)
    assert m.theorem4_strong_composition(epsilon_round=0.3, delta_round=0.0, rounds=5, delta_tilde=1.0)[
        0
    ] == (pytest.approx(5 * 0.3 * math.expm1(0.3)))


# ---------------------------------------------------------------------------------------------- tight
@pytest.mark.parametrize(
    ("nm", "q", "p"), [(4.34, 0.077, 0.5), (2.0, 0.5, 1.0), (2.0, 0.01, 1.0), (8.7, 0.2, 0.1)]
)
def test_exact_round_delta_matches_dp_accounting_pld(nm: float, q: float, p: float) -> None:
    round_pld = m._round_pld(nm, q, p)
    for eps in (0.05, 0.2, 1.0):
        exact = math.exp(m.tight_round_log_delta(noise_multiplier=nm, q=q, p=p, epsilon=eps))
        pld_delta = round_pld.get_delta_for_epsilon(eps)
        if pld_delta > 1e-20:
            assert exact <= pld_delta * (1 + 1e-9)  # PLD is pessimistic
            assert exact == pytest.approx(pld_delta, rel=1e-4)


def test_tight_reduces_to_the_exact_gaussian_when_q_and_p_are_one() -> None:
    nm = _nm(0.7)
    one = m.tight_epsilon(noise_multiplier=nm, q=1.0, p=1.0, rounds=1, target_delta=1e-6)
    assert one == pytest.approx(gaussian_epsilon(sigma=nm, delta=1e-6), rel=1e-9)
    # T-fold Gaussian = Gaussian with sensitivity sqrt(T) (exact); PLD is an upper bound within 0.5 %.
    exact = gaussian_epsilon(sigma=nm, delta=1e-6, sensitivity=math.sqrt(30))
    got = m.tight_epsilon(noise_multiplier=nm, q=1.0, p=1.0, rounds=30, target_delta=1e-6)
    assert exact <= got <= exact * 1.005


def test_tight_participation_mixture_matches_binomial_average() -> None:
    # Participation public: delta_T(eps) = sum_m Bin(m; T, p) delta_m(eps), delta_m = m-fold Gaussian (q = 1).
    nm, t, p, target = _nm(1.0), 6, 0.3, 1e-5
    eps = m.tight_epsilons(noise_multiplier=nm, q=1.0, p=p, rounds=t, target_deltas=[target])[0][1]  # PLD
    mix = sum(
        stats.binom.pmf(k, t, p) * gaussian_delta(sigma=nm, epsilon=eps, sensitivity=math.sqrt(k))
        for k in range(1, t + 1)
    )
    assert 0.97 * target <= mix <= target


@settings(max_examples=60, deadline=None)
@given(
    st.floats(0.05, 200.0),
    st.floats(1e-6, 1.0),
    st.floats(1e-6, 1.0),
    st.floats(0.0, 1e4),
    st.floats(0.0, 5.0),
)
def test_exact_round_delta_is_finite_and_decreasing(
    nm: float, q: float, p: float, eps: float, step: float
) -> None:
    log_d = m.tight_round_log_delta(noise_multiplier=nm, q=q, p=p, epsilon=eps)
    assert not math.isnan(log_d) and log_d <= math.log(p) + 1e-12
    if log_d < -700:  # below double range: delta is 0 for every practical purpose (bound delta_G <= Phi(a))
        return
    assert m.tight_round_log_delta(noise_multiplier=nm, q=q, p=p, epsilon=eps + step) <= log_d + 1e-9


@settings(max_examples=15, deadline=None)
@given(st.floats(0.05, 0.9), st.floats(0.05, 0.9), st.integers(2, 40))
def test_tight_is_monotone_in_p_and_rounds(p: float, q: float, t: int) -> None:
    nm = _nm(1.0)

    def rdp_eps(pp: float, rounds: int) -> float:
        curve = m.tight_rdp(noise_multiplier=nm, q=q, p=pp, rounds=rounds)
        return m._rdp_epsilon(curve, m.DEFAULT_ORDERS, 1e-5)

    base = rdp_eps(p, t)
    assert rdp_eps(min(1.0, p + 0.1), t) >= base
    assert rdp_eps(p, t + 5) >= base


@settings(max_examples=20, deadline=None)
@given(st.floats(0.01, 1.0), st.floats(0.01, 1.0), st.floats(0.05, 1.0))
def test_paper_round_epsilon_monotone_in_p(p: float, q: float, eps: float) -> None:
    kw = dict(q=q, eps_local=eps, delta_local=DL, num_clients=100, beta=0.25)
    lo = m.theorem2_round_cdp(p=p * 0.5, **kw)[0]
    assert m.theorem2_round_cdp(p=p, **kw)[0] >= lo


def test_account_ms_pafl_fields_and_consistency() -> None:
    kw = dict(
        p=0.5, eps_local=1.0, delta_local=DL, num_clients=100, beta=0.25, local_steps=5, batch_size=5,
        dataset_size=325, sampling="wor",
    )  # fmt: skip
    one = m.account_ms_pafl(**kw)
    assert one.epsilon_total is None and one.delta_total is None and one.epsilon_client_total is None
    acc = m.account_ms_pafl(**kw, rounds=50, delta_tilde=1e-4)
    assert acc.q == pytest.approx(25 / 325)
    assert acc.sigma == pytest.approx(m.ldp_sigma(eps_local=1.0, delta_local=DL, clip=1.0))
    assert (acc.epsilon_round, acc.delta_round) == m.theorem2_round_cdp(
        p=0.5, q=acc.q, eps_local=1.0, delta_local=DL, num_clients=100, beta=0.25
    )
    assert (acc.epsilon_total, acc.delta_total) == m.theorem4_strong_composition(
        epsilon_round=acc.epsilon_round, delta_round=acc.delta_round, rounds=50, delta_tilde=1e-4
    )
    assert acc.epsilon_total_tight is not None and acc.epsilon_client_total_tight is not None
    assert 0.0 < acc.epsilon_total_tight < acc.epsilon_total  # advanced composition is loose here
    assert acc.recommended == "tight"
    with pytest.raises(ValueError, match="together"):
        m.account_ms_pafl(**kw, rounds=10)
    with pytest.raises(ValueError, match="together"):
        m.account_ms_pafl(**kw, delta_tilde=1e-5)


def test_account_ms_pafl_tight_reports_both_accountants() -> None:
    res = m.account_ms_pafl_tight(
        p=0.3, eps_local=0.5, delta_local=1e-5, local_steps=2, batch_size=10, dataset_size=400, sampling="wr",
        rounds=20, delta=1e-5,
    )  # fmt: skip
    assert res.epsilon == min(res.epsilon_pld, res.epsilon_rdp)
    assert res.epsilon_pld <= res.epsilon_rdp * 1.01


def test_numerical_error_type_exists() -> None:
    assert issubclass(NumericalError, ArithmeticError)
