"""Paper 000 (MS-PAFL) as printed: Eq. 9, Lemma 1, Theorems 1–4 / Corollary 1, and the one-call account.

The printed formulas are checked against hand values; the documented failures (docs/ms_pafl.md) against
exact computations. The sound analyses are tested in test_ms_pafl_sound.py, the counterexample of issue 10
part 7c in test_ms_pafl_audit.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from ampfl.accounting import ms_pafl as m
from ampfl.accounting.accountants import make_accountant
from ampfl.accounting.events import MSPAFLRoundEvent
from ampfl.accounting.gaussian import gaussian_delta

DL = 1e-4
PAPER = dict(num_clients=100, beta=0.25)


def _nm(eps_local: float, delta_local: float = DL) -> float:
    return m.ldp_noise_multiplier(eps_local=eps_local, delta_local=delta_local)


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


def test_noise_multiplier_is_sigma_over_2c_and_inverts() -> None:
    # z = sigma/(2C) = sqrt(2 ln(1.25/delta_l))/eps_l: 4.3436 at (1, 1e-4) (issue 10 part 7c: "4.344")
    assert _nm(1.0) == pytest.approx(math.sqrt(2 * math.log(12500.0)), rel=1e-12)
    assert _nm(1.0) == pytest.approx(4.3436, abs=1e-4)
    for clip in (0.1, 1.0, 7.0):
        assert m.ldp_sigma(eps_local=0.6, delta_local=DL, clip=clip) / (2 * clip) == pytest.approx(_nm(0.6))
    back = m.eps_local_from_noise_multiplier(noise_multiplier=_nm(0.37), delta_local=DL)
    assert back == pytest.approx(0.37, rel=1e-12)


def test_ldp_sigma_refuses_eps_above_one() -> None:
    with pytest.raises(ValueError, match=r"eps_local must be in \(0, 1\]"):
        m.ldp_sigma(eps_local=1.5, delta_local=1e-5, clip=1.0)
    with pytest.raises(ValueError, match="eps_local"):
        m.ldp_sigma(eps_local=0.0, delta_local=1e-5, clip=1.0)


# ---------------------------------------------------------------------------------------------- Theorem 1
def test_theorem1_values_and_refusal() -> None:
    assert m.theorem1_amplification(eps_local=0.5, delta_local=1e-5, sampling_rate=0.1) == pytest.approx(
        (0.1, 1e-6)
    )
    with pytest.raises(ValueError, match="eps_local"):
        m.theorem1_amplification(eps_local=1.01, delta_local=1e-5, sampling_rate=0.1)


@pytest.mark.parametrize("q", [1e-4, 1e-2, 0.1, 0.5, 1.0])
@pytest.mark.parametrize("eps", [0.01, 0.5, 1.0])
@pytest.mark.parametrize("dlt", [1e-10, 1e-4, 0.3])
def test_theorem1_holds_for_a_freshly_subsampled_round(q: float, eps: float, dlt: float) -> None:
    # Exact delta of the q-subsampled Gaussian (sigma from Lemma 1, s = 2C) at 2 q eps is below q delta.
    nm = _nm(eps, dlt)
    eps_amp, delta_amp = m.theorem1_amplification(eps_local=eps, delta_local=dlt, sampling_rate=q)

    def exact(e: float) -> float:
        return math.exp(
            m.amplified_round_log_delta(noise_multiplier=nm, sampling_rate=q, participation=1.0, epsilon=e)
        )

    assert exact(eps_amp) <= delta_amp
    # and it is loose: already at 0.7 x 2 q eps the exact delta is below q delta (measured maximum 0.676).
    assert exact(0.7 * eps_amp) <= delta_amp


def test_theorem1_generic_bound_for_eps_at_most_one() -> None:
    # Standard amplification ln(1 + q(e^eps - 1)) <= 2 q eps for eps <= 1 (so Thm 1 is implied by it).
    for eps in np.linspace(1e-3, 1.0, 50):
        for q in (1e-6, 1e-3, 0.1, 0.5, 1.0):
            assert math.log1p(q * math.expm1(eps)) <= 2 * q * eps


# ---------------------------------------------------------------------------------------------- Theorem 2
def test_corollary1_known_value() -> None:
    dprime = 2.0 * math.exp(-2.0 * 0.25**2 * 100)  # hand: 7.4533e-6
    eps_c, delta_c = m.theorem2_round_cdp(
        participation=0.5, sampling_rate=0.2, eps_local=1.0, delta_local=DL, **PAPER
    )
    assert eps_c == pytest.approx(math.log(1 + 0.5 / (1 - dprime) * (math.exp(0.4) - 1)), rel=1e-12)
    assert delta_c == pytest.approx(dprime + 0.5 * 0.2 * DL / (1 - dprime), rel=1e-12)
    assert m.theorem2_round_delta(participation=0.5, sampling_rate=0.2, delta_local=DL, **PAPER) == delta_c


def test_theorem2_is_the_max_over_clients() -> None:
    kw = dict(eps_local=0.8, delta_local=DL, num_clients=50, beta=0.3)
    het = m.theorem2_round_cdp(participation=[0.1, 0.7, 0.3], sampling_rate=[0.5, 0.1, 0.2], **kw)
    uni = [
        m.theorem2_round_cdp(participation=p, sampling_rate=q, **kw)
        for p, q in [(0.1, 0.5), (0.7, 0.1), (0.3, 0.2)]
    ]
    assert het[0] == pytest.approx(max(u[0] for u in uni))
    assert het[1] == pytest.approx(max(u[1] for u in uni))
    with pytest.raises(ValueError, match="same length"):
        m.theorem2_round_cdp(participation=[0.1, 0.2], sampling_rate=[0.1, 0.2, 0.3], **kw)


def test_theorem2_rejects_vacuous_hoeffding() -> None:
    with pytest.raises(ValueError, match="beta must give"):
        m.theorem2_round_cdp(
            participation=0.5, sampling_rate=0.1, eps_local=1.0, delta_local=DL, num_clients=10, beta=0.1
        )


def test_corollary1_fails_for_record_level_against_the_server() -> None:
    # Documented discrepancy (docs/ms_pafl.md): the server sees who uploaded, so the p-amplification of
    # epsilon does not hold even for a freshly subsampled round. Paper's Fig. 2 setting (N=100, beta=0.25,
    # Q=b=5, |D|=325, eps_l=1, p=0.1).
    q = 25 / 325
    eps_c, delta_c = m.theorem2_round_cdp(
        participation=0.1, sampling_rate=q, eps_local=1.0, delta_local=DL, **PAPER
    )
    log_true = m.amplified_round_log_delta(
        noise_multiplier=_nm(1.0), sampling_rate=q, participation=0.1, epsilon=eps_c
    )
    assert math.exp(log_true) > 20 * delta_c  # measured: 2.14e-4 vs 8.22e-6


def test_corollary1_fails_for_the_client_level_relation_of_eq_a1() -> None:
    # (A.1) compares the aggregate with and without client i. p = 1, N = 100, others' clipped public models
    # are 0, client i's is C = 1 (1-D): N(C/N, s^2/N) against N(0, s^2/(N-1)). With Q = b = 1 (q = 1/325)
    # Cor. 1 claims eps_c = 0.0062, delta_c = 7.8e-6, but the hockey-stick divergence is 1.6e-3.
    n, q = 100, 1 / 325
    sigma = m.ldp_sigma(eps_local=1.0, delta_local=DL, clip=1.0)
    eps_c, delta_c = m.theorem2_round_cdp(
        participation=1.0, sampling_rate=q, eps_local=1.0, delta_local=DL, num_clients=n, beta=0.25
    )
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
        lambda x: max(stats.norm.pdf(x, 0.3, 1.0) - math.exp(0.05) * stats.norm.pdf(x, 0, 1.2), 0.0),
        -12,
        12,
        points=[-3, -1, 0, 1, 3],
        limit=400,
    )[0]
    assert exact == pytest.approx(num, rel=1e-6)


@settings(max_examples=20, deadline=None)
@given(st.floats(0.01, 1.0), st.floats(0.01, 1.0), st.floats(0.05, 1.0))
def test_paper_round_epsilon_monotone_in_p(p: float, q: float, eps: float) -> None:
    kw = dict(sampling_rate=q, eps_local=eps, delta_local=DL, **PAPER)
    lo = m.theorem2_round_cdp(participation=p * 0.5, **kw)[0]
    assert m.theorem2_round_cdp(participation=p, **kw)[0] >= lo


# ---------------------------------------------------------------------------------------------- Theorem 3
def test_theorem3_constant_and_value() -> None:
    c0 = 0.5 * math.sqrt(math.log(1e4) / math.log(1.25e4))  # hand, from (C.8) with C = 1, delta_l = 1e-4
    assert m.theorem3_constant(delta_local=DL, clip=1.0) == pytest.approx(c0, rel=1e-12)
    kw = dict(participation=0.5, eps_local=1.0, delta_local=DL)
    got = m.theorem3_client_total(sampling_rate=0.2, rounds=100, clip=1.0, **kw)
    assert got == pytest.approx(c0 * 0.2 * math.sqrt(0.5 * 100 / 0.8), rel=1e-12)
    assert m.theorem3_client_total(sampling_rate=1.0, rounds=3, **kw) == math.inf


def test_theorem3_under_reports_against_a_lower_bound() -> None:
    # Documented discrepancy: even the amplified analysis (which under-states the persistent mechanism),
    # as an optimistic PLD (a lower bound on its epsilon), exceeds Theorem 3. p = 0.1, q = 0.2, eps_l = 1,
    # T = 10.
    from dp_accounting.pld import privacy_loss_distribution as pld

    paper = m.theorem3_client_total(
        participation=0.1, sampling_rate=0.2, eps_local=1.0, delta_local=DL, rounds=10
    )
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
    five = m.theorem4_strong_composition(epsilon_round=0.3, delta_round=0.0, rounds=5, delta_tilde=1.0)
    assert five[0] == pytest.approx(5 * 0.3 * math.expm1(0.3))


# ---------------------------------------------------------------------------------------------- account
KW = dict(
    participation=0.5,
    delta_local=DL,
    num_clients=100,
    beta=0.25,
    local_steps=5,
    batch_size=5,
    dataset_size=325,
    sampling="wor",
)


def test_account_single_round_defaults_to_corollary1_delta() -> None:
    acc = m.account_ms_pafl(eps_local=1.0, **KW)
    q = 25 / 325
    assert acc.analysis == m.RECOMMENDED == "public-participation" and acc.accountant == "pld"
    assert acc.sampling_rate == pytest.approx(q) and acc.rounds is None
    assert (acc.epsilon_round, acc.delta_round) == m.theorem2_round_cdp(
        participation=0.5, sampling_rate=q, eps_local=1.0, delta_local=DL, **PAPER
    )
    assert acc.delta == acc.delta_round
    assert acc.epsilon == m.public_participation_epsilon(
        participation=0.5, noise_multiplier=_nm(1.0), rounds=1, delta=acc.delta
    )
    # z = σ/C (issue 28, item 5): twice the analyses' σ/(2C); σ = C·z with C = 1
    assert acc.noise_multiplier == pytest.approx(2 * _nm(1.0)) and acc.noise_std == pytest.approx(
        2 * _nm(1.0)
    )
    assert set(acc.analyses) == {"first-use", "amplified", "paper-theorem1", "paper-corollary1"}
    assert acc.epsilon_total is None and acc.epsilon_client_total is None


def test_account_rounds_labels_and_ordering() -> None:
    acc = m.account_ms_pafl(eps_local=1.0, rounds=50, delta_tilde=1e-4, **KW)
    assert (acc.epsilon_total, acc.delta_total) == m.theorem4_strong_composition(
        epsilon_round=acc.epsilon_round, delta_round=acc.delta_round, rounds=50, delta_tilde=1e-4
    )
    assert acc.delta == acc.delta_total
    a = acc.analyses
    assert set(a) == {
        "first-use",
        "amplified",
        "paper-theorem1",
        "paper-corollary1",
        "paper-theorem4",
        "paper-theorem3",
    }
    assert [name for name, x in a.items() if x.sound] == ["first-use"]
    assert a["paper-theorem3"].delta == DL and a["paper-theorem4"].delta == acc.delta_total
    # sound bounds: first-use <= public-participation; the amplified analysis claims far less
    assert a["amplified"].epsilon < a["first-use"].epsilon <= acc.epsilon
    assert all(x.note for x in a.values())


def test_account_options() -> None:
    base = m.account_ms_pafl(eps_local=0.8, rounds=10, delta_tilde=1e-5, delta=1e-6, **KW)
    assert base.delta == 1e-6
    rdp = m.account_ms_pafl(eps_local=0.8, rounds=10, delta_tilde=1e-5, delta=1e-6, accountant="rdp", **KW)
    assert rdp.accountant == "rdp" and rdp.epsilon >= base.epsilon
    # the noise multiplier path (z = σ/C = 2 σ/(2C)) gives the same numbers as the eps_local path
    same = m.account_ms_pafl(noise_multiplier=2 * _nm(0.8), rounds=10, delta_tilde=1e-5, delta=1e-6, **KW)
    assert same.epsilon == base.epsilon and same.eps_local == pytest.approx(0.8)
    assert same.noise_multiplier == base.noise_multiplier and same.noise_std == base.noise_std
    assert all(same.analyses[k] == base.analyses[k] for k in ("first-use", "amplified"))
    # little noise: Lemma 1's eps_l > 1, the printed analyses are left out
    loud = m.account_ms_pafl(noise_multiplier=2.0, rounds=10, delta_tilde=1e-5, **KW)
    assert set(loud.analyses) == {"first-use", "amplified"} and loud.epsilon_round is None
    assert loud.delta == pytest.approx(
        10 * m.theorem2_round_delta(participation=0.5, sampling_rate=25 / 325, delta_local=DL, **PAPER) + 1e-5
    )
    reset = m.account_ms_pafl(eps_local=0.8, private_state="reset", **KW)
    assert reset.analyses["amplified"].sound and reset.analyses["paper-theorem1"].sound


def test_account_noise_multiplier_is_std_over_clip() -> None:
    # z = σ/C (issue 28, item 5): the run's event is MSPAFLRoundEvent at σ/(2C) = z/2, composed T times by a
    # fresh accountant; noise_std = C·z whatever C.
    acc = m.account_ms_pafl(noise_multiplier=3.0, rounds=7, delta_tilde=1e-5, delta=1e-5, clip=2.0, **KW)
    event = MSPAFLRoundEvent(participation=0.5, noise_multiplier=1.5, private_state="persistent")
    pld = make_accountant("pld")
    pld.compose(event, 7)
    assert acc.epsilon == pytest.approx(pld.get_epsilon(1e-5), rel=1e-9)
    assert acc.noise_multiplier == 3.0 and acc.noise_std == pytest.approx(6.0) and acc.clip == 2.0
    assert acc.eps_local == pytest.approx(math.sqrt(2 * math.log(1.25 / DL)) / 1.5)  # Lemma 1 at σ/(2C)


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"eps_local": 1.0, "rounds": 10}, "together"),
        ({"eps_local": 1.0, "delta_tilde": 1e-5}, "together"),
        ({}, "exactly one of eps_local and noise_multiplier"),
        ({"eps_local": 1.0, "noise_multiplier": 2.0}, "exactly one"),
        ({"eps_local": 1.0, "accountant": "exact"}, "accountant must be one of"),
        ({"eps_local": 1.0, "private_state": "fresh"}, "private_state must be one of"),
        ({"eps_local": 1.0, "delta": 1.0}, r"delta must be in \(0, 1\)"),
        ({"eps_local": 1.0, "rounds": 10**5, "delta_tilde": 1e-5}, "delta must be given"),
        ({"noise_multiplier": -1.0}, "noise_multiplier must be in"),
    ],
)
def test_account_rejects_bad_input(extra: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        m.account_ms_pafl(**KW, **extra)  # type: ignore[arg-type]
