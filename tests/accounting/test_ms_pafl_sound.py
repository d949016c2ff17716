"""MS-PAFL (paper 000) analyses: recommended ``public-participation``, ``first-use`` and ``amplified``.

The recommended analysis is checked against the exact binomial sum δ(ε) = Σ_k Bin(k; T, p) δ_G(ε; √k/z),
computed here independently (gaussian.gaussian_log_delta + scipy binom); first-use against its enumeration;
amplified against the exact one-round δ and the Gaussian limits.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, special, stats

from ampfl.accounting import ms_pafl as m
from ampfl.accounting.accountants import PLDAccountant, RDPAccountant
from ampfl.accounting.events import MSPAFLRoundEvent
from ampfl.accounting.gaussian import gaussian_epsilon, gaussian_log_delta
from ampfl.accounting.subsampling import subsampled_gaussian_log_delta


def _nm(eps_local: float, delta_local: float = 1e-4) -> float:
    return m.ldp_noise_multiplier(eps_local=eps_local, delta_local=delta_local)


def _binomial_log_delta(z: float, p: float, t: int, eps: float) -> float:
    """Exact log δ(ε) of T public-participation rounds (independent of the accountants)."""
    terms = [
        stats.binom.logpmf(k, t, p) + gaussian_log_delta(sigma=z, epsilon=eps, sensitivity=math.sqrt(k))
        for k in range(1, t + 1)
    ]
    return float(special.logsumexp(terms))


def _binomial_epsilon(z: float, p: float, t: int, delta: float) -> float:
    return float(
        optimize.brentq(lambda e: _binomial_log_delta(z, p, t, e) - math.log(delta), 0.0, 100.0, xtol=1e-12)
    )


# ------------------------------------------------------------------------------------- public-participation
def test_issue_value_t40_p05() -> None:
    # Issue 10 part 7c: T = 40, p = 0.5, eps_l = 0.902, delta_l = 1e-4 -> eps ~ 4.24 at delta = 1e-5
    # (PLD at 1e-4 discretisation measured 4.2355).
    z = _nm(0.902)
    exact = _binomial_epsilon(z, 0.5, 40, 1e-5)
    pld = m.public_participation_epsilon(participation=0.5, noise_multiplier=z, rounds=40, delta=1e-5)
    rdp = m.public_participation_epsilon(
        participation=0.5, noise_multiplier=z, rounds=40, delta=1e-5, accountant="rdp"
    )
    assert pld == pytest.approx(4.2355, abs=2e-3)
    assert exact <= pld <= exact * 1.005  # PLD is a pessimistic upper bound, tight to 0.5 %
    assert pld <= rdp <= exact * 1.15


@pytest.mark.parametrize(
    ("p", "t", "eps_local"), [(0.1, 20, 1.0), (0.5, 5, 0.3), (1.0, 30, 0.7), (0.9, 3, 1.0)]
)
def test_public_participation_delta_matches_the_binomial_sum(p: float, t: int, eps_local: float) -> None:
    z = _nm(eps_local)
    acc = m.public_participation_accountant(participation=p, noise_multiplier=z, rounds=t)
    for eps in (0.1, 0.5, 1.0, 3.0):
        exact = math.exp(_binomial_log_delta(z, p, t, eps))
        got = acc.get_delta(eps)
        if exact > 1e-12:
            assert exact * (1 - 1e-9) <= got <= exact * 1.02 + 1e-12


def test_public_participation_is_the_core_event() -> None:
    z = _nm(0.9)
    event = m.round_event(participation=0.3, noise_multiplier=z)
    assert event == MSPAFLRoundEvent(participation=0.3, noise_multiplier=z)
    assert event.private_state == "persistent"
    for cls, name in ((PLDAccountant, "pld"), (RDPAccountant, "rdp")):
        direct = cls().compose(event, 12).get_epsilon(1e-6)
        assert (
            m.public_participation_epsilon(
                participation=0.3, noise_multiplier=z, rounds=12, delta=1e-6, accountant=name
            )
            == direct
        )


def test_public_participation_with_p1_is_the_t_fold_gaussian() -> None:
    z = _nm(0.7)
    exact = gaussian_epsilon(sigma=z, delta=1e-6, sensitivity=math.sqrt(30))
    got = m.public_participation_epsilon(participation=1.0, noise_multiplier=z, rounds=30, delta=1e-6)
    assert exact <= got <= exact * 1.005


@settings(max_examples=10, deadline=None)
@given(st.floats(0.05, 0.9), st.integers(2, 30))
def test_public_participation_monotone_in_p_and_rounds(p: float, t: int) -> None:
    z = _nm(1.0)

    def eps(pp: float, rounds: int) -> float:
        return m.public_participation_epsilon(
            participation=pp, noise_multiplier=z, rounds=rounds, delta=1e-5, accountant="rdp"
        )

    base = eps(p, t)
    assert eps(min(1.0, p + 0.1), t) >= base
    assert eps(p, t + 5) >= base


# ------------------------------------------------------------------------------------------------ first-use
def _enumerated_weights(p: float, q: float, t: int) -> np.ndarray:
    """Pr(M = m) by enumerating participation patterns and the round of the first draw."""
    out = np.zeros(t + 1)
    for pattern in itertools.product((0, 1), repeat=t):
        prob = math.prod(p if b else 1 - p for b in pattern)
        rounds = [i for i, b in enumerate(pattern) if b]
        never = prob
        for j, _ in enumerate(rounds):  # first draw at the j-th participated round
            w = prob * (1 - q) ** j * q
            out[len(rounds) - j] += w
            never -= w
        out[0] += never
    return out


@pytest.mark.parametrize(("p", "q", "t"), [(0.5, 0.3, 4), (1.0, 1 / 13, 2), (0.2, 1.0, 5), (0.7, 0.05, 6)])
def test_first_use_weights_match_enumeration(p: float, q: float, t: int) -> None:
    got = m.first_use_weights(participation=p, sampling_rate=q, rounds=t)
    assert got == pytest.approx(_enumerated_weights(p, q, t), abs=1e-14)
    assert got.sum() == pytest.approx(1.0, abs=1e-14)


def test_first_use_closed_forms() -> None:
    z = _nm(1.0)
    # one round: p times the exact delta of the freshly q-subsampled Gaussian (the amplified value)
    one = m.first_use_log_delta(
        noise_multiplier=z, participation=0.4, sampling_rate=0.1, rounds=1, epsilon=0.3
    )
    ref = math.log(0.4) + subsampled_gaussian_log_delta(sampling_rate=0.1, noise_multiplier=z, epsilon=0.3)
    assert one == pytest.approx(ref, abs=1e-9)
    amp = m.amplified_round_log_delta(noise_multiplier=z, sampling_rate=0.1, participation=0.4, epsilon=0.3)
    assert one == pytest.approx(amp, abs=1e-9)
    # q = 1: every participated round uses the record: the public-participation binomial sum
    full = m.first_use_log_delta(
        noise_multiplier=z, participation=0.5, sampling_rate=1.0, rounds=12, epsilon=1.0
    )
    assert full == pytest.approx(_binomial_log_delta(z, 0.5, 12, 1.0), abs=1e-9)
    # eps = 0: no amplification of eps; the total weight of "used" rounds times delta_G(0; sqrt(m)/z)
    w = m.first_use_weights(participation=0.6, sampling_rate=0.2, rounds=7)
    zero = sum(
        w[k] * math.exp(gaussian_log_delta(sigma=z, epsilon=0.0, sensitivity=math.sqrt(k)))
        for k in range(1, 8)
    )
    got = m.first_use_delta(noise_multiplier=z, participation=0.6, sampling_rate=0.2, rounds=7, epsilon=0.0)
    assert got == pytest.approx(zero, rel=1e-9)


def _first_use_by_pairs(z: float, p: float, q: float, t: int, eps: float) -> float:
    """The first-use bound term by term with the scalar Gaussian delta (independent of the vector code)."""
    total = 0.0
    for k in range(1, t + 1):
        gamma = 1 - (1 - q) ** k
        eps_k = math.log1p(math.expm1(eps) / gamma)
        for mm in range(1, k + 1):
            weight = stats.binom.pmf(k, t, p) * (1 - q) ** (k - mm) * q
            total += weight * math.exp(gaussian_log_delta(sigma=z, epsilon=eps_k, sensitivity=math.sqrt(mm)))
    return total


@pytest.mark.parametrize(("p", "q", "t"), [(0.5, 0.3, 6), (1.0, 1 / 13, 2), (0.2, 0.05, 15), (0.9, 0.5, 9)])
@pytest.mark.parametrize("eps", [0.05, 0.5, 2.0])
def test_first_use_matches_the_term_by_term_sum(p: float, q: float, t: int, eps: float) -> None:
    z = _nm(0.7)
    got = m.first_use_delta(noise_multiplier=z, participation=p, sampling_rate=q, rounds=t, epsilon=eps)
    ref = _first_use_by_pairs(z, p, q, t, eps)
    assert ref <= got <= ref * (1 + 1e-9) + 1e-300


@settings(max_examples=15, deadline=None)
@given(st.floats(0.05, 1.0), st.floats(0.01, 1.0), st.integers(1, 40), st.floats(0.0, 4.0))
def test_first_use_never_exceeds_public_participation(p: float, q: float, t: int, eps: float) -> None:
    z = _nm(0.8)
    fu = m.first_use_log_delta(noise_multiplier=z, participation=p, sampling_rate=q, rounds=t, epsilon=eps)
    assert fu <= _binomial_log_delta(z, p, t, eps) + 1e-9


def test_first_use_epsilon_inverts_delta() -> None:
    kw = dict(noise_multiplier=_nm(0.902), participation=0.5, sampling_rate=25 / 325, rounds=40)
    eps = m.first_use_epsilon(delta=1e-5, **kw)
    assert m.first_use_delta(epsilon=eps, **kw) <= 1e-5
    assert m.first_use_delta(epsilon=eps * (1 - 1e-6), **kw) > 1e-5
    assert eps == pytest.approx(3.6561, abs=1e-3)  # measured; public-participation gives 4.2355
    assert m.first_use_epsilon(delta=0.99, **kw) == 0.0


# ------------------------------------------------------------------------------------------------ amplified
@pytest.mark.parametrize(
    ("nm", "q", "p"), [(4.34, 0.077, 0.5), (2.0, 0.5, 1.0), (2.0, 0.01, 1.0), (8.7, 0.2, 0.1)]
)
def test_exact_round_delta_matches_the_pld_accountant(nm: float, q: float, p: float) -> None:
    acc = m.amplified_accountant(participation=p, sampling_rate=q, noise_multiplier=nm, rounds=1)
    for eps in (0.05, 0.2, 1.0):
        exact = math.exp(
            m.amplified_round_log_delta(noise_multiplier=nm, sampling_rate=q, participation=p, epsilon=eps)
        )
        pld_delta = acc.get_delta(eps)
        if pld_delta > 1e-20:
            assert exact <= pld_delta * (1 + 1e-9)  # PLD is pessimistic
            assert exact == pytest.approx(pld_delta, rel=1e-4)


def test_amplified_reduces_to_the_gaussian_when_q_and_p_are_one() -> None:
    nm = _nm(0.7)
    exact = gaussian_epsilon(sigma=nm, delta=1e-6, sensitivity=math.sqrt(30))
    got = m.amplified_epsilon(
        participation=1.0, sampling_rate=1.0, noise_multiplier=nm, rounds=30, delta=1e-6
    )
    assert exact <= got <= exact * 1.005
    assert (
        m.amplified_delta(participation=1.0, sampling_rate=1.0, noise_multiplier=nm, rounds=30, epsilon=got)
        <= 1e-6 * 1.0001
    )


def test_amplified_claims_less_than_the_sound_analyses() -> None:
    kw = dict(participation=0.5, noise_multiplier=_nm(0.902), rounds=40, delta=1e-5)
    amp = m.amplified_epsilon(sampling_rate=25 / 325, **kw)
    assert amp == pytest.approx(0.2646, abs=2e-3)  # measured; the sound value is 4.24
    assert amp < m.first_use_epsilon(sampling_rate=25 / 325, **kw) < m.public_participation_epsilon(**kw)


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
    kw = dict(noise_multiplier=nm, sampling_rate=q, participation=p)
    log_d = m.amplified_round_log_delta(epsilon=eps, **kw)
    assert not math.isnan(log_d) and log_d <= math.log(p) + 1e-12
    if log_d < -700:  # below double range: delta is 0 for every practical purpose
        return
    assert m.amplified_round_log_delta(epsilon=eps + step, **kw) <= log_d + 1e-9


@pytest.mark.parametrize(
    "call",
    [
        lambda: m.public_participation_epsilon(participation=0.0, noise_multiplier=1.0, rounds=2, delta=1e-5),
        lambda: m.public_participation_epsilon(participation=0.5, noise_multiplier=0.0, rounds=2, delta=1e-5),
        lambda: m.public_participation_epsilon(participation=0.5, noise_multiplier=1.0, rounds=0, delta=1e-5),
        lambda: m.public_participation_epsilon(participation=0.5, noise_multiplier=1.0, rounds=2, delta=0.0),
        lambda: m.public_participation_delta(participation=0.5, noise_multiplier=1.0, rounds=2, epsilon=-1.0),
        lambda: m.amplified_epsilon(
            participation=0.5, sampling_rate=1.5, noise_multiplier=1.0, rounds=2, delta=1e-5
        ),
        lambda: m.first_use_epsilon(
            participation=0.5, sampling_rate=0.0, noise_multiplier=1.0, rounds=2, delta=1e-5
        ),
        lambda: m.first_use_delta(
            participation=0.5, sampling_rate=0.1, noise_multiplier=1.0, rounds=2, epsilon=math.nan
        ),
    ],
)
def test_bad_input_is_a_value_error(call: object) -> None:
    with pytest.raises(ValueError, match="must be"):
        call()  # type: ignore[operator]
