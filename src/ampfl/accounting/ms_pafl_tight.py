"""Tight ε of the MS-PAFL local mechanism (paper 000, arXiv:2509.25906v1): the ``tight`` analysis.

Each participating client releases ``clip(w_p) + N(0, σ² I)`` with ‖clip(w_p)‖ ≤ C, so any change of the
client's data moves the mean by at most Δ₂ = 2C; its record is used with probability q (Eq. 9); the client
takes part with probability p, and whether it took part is treated as **public** (the server receives the
upload). Per round the privacy loss distribution is the mixture
``p · PLD(q-subsampled Gaussian, σ/Δ₂) + (1 − p) · identity`` and T rounds compose it T times (dp-accounting
PLD, pessimistic), cross-checked by the exact RDP of the same mixture,
``(1/(α−1)) ln(1 − p + p e^{(α−1) r_q(α)})``. One round is computed exactly (:func:`tight_round_log_delta`).
See ``docs/ms_pafl.md`` for why this pair of distributions is the worst case. Provenance: [D].

The paper's own analysis and the one-call accounts (:func:`ampfl.accounting.ms_pafl.account_ms_pafl`,
:func:`ampfl.accounting.ms_pafl.account_ms_pafl_tight`) live in :mod:`ampfl.accounting.ms_pafl`, which
re-exports the public names of this module. ``noise_multiplier`` = σ / Δ₂ with Δ₂ = 2C. ε in nats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ampfl.accounting._checks import NumericalError, check_int, check_positive, check_probability, check_range
from ampfl.accounting.gaussian import log_sub_exp_upper
from ampfl.accounting.subsampling import check_pld_size, dp_accounting_guard

#: Rényi orders of the RDP cross-check (integers: the fractional-order series may not converge).
DEFAULT_ORDERS: tuple[float, ...] = tuple(
    float(a) for a in (*range(2, 33), 40, 48, 64, 96, 128, 192, 256, 512, 1024)
)

#: PLD discretisation of the tight analysis (pessimistic rounding keeps it an upper bound).
PLD_DISCRETIZATION = 1e-4

ANALYSIS_TIGHT = (
    "tight: record-level neighbours, participation public; per round PLD = p * PLD(q-subsampled Gaussian, "
    "noise_multiplier = sigma/(2C), add/remove form) + (1-p) * identity, composed over T rounds "
    "(dp-accounting PLD, pessimistic); RDP of the same mixture as cross-check"
)


# ----------------------------------------------------------------------------------------------------------
# Tight alternative: one round exactly, T rounds with dp-accounting
# ----------------------------------------------------------------------------------------------------------
def tight_round_log_delta(*, noise_multiplier: float, q: float, p: float, epsilon: float) -> float:
    """Exact log δ(ε) of one MS-PAFL round (record level, participation public). Provenance: [D].

    With μ = 1/``noise_multiplier``, the worst pair is P = (1 − q)N(0, 1) + qN(μ, 1) against Q = N(0, 1)
    (both orders). Remove direction: H_{e^ε}(P‖Q) = q δ_G(ε₁; μ) with e^{ε₁} = 1 + (e^ε − 1)/q (exact,
    since (1 − q)Q cancels). Add direction: H_{e^ε}(Q‖P) = Φ(x*)(1 − e^ε(1 − q)) − e^ε q Φ(x* − μ) with
    x* = [ln((1 − e^ε(1 − q))/(e^ε q)) + μ²/2]/μ, zero when e^ε(1 − q) ≥ 1. The public participation coin
    multiplies δ by p. Computed in log space with ``log_ndtr``.
    """
    from scipy import special

    nm = check_positive("noise_multiplier", noise_multiplier)
    qq = check_probability("q", q)
    pp = check_probability("p", p)
    eps = check_range("epsilon", epsilon, 0.0, math.inf)
    if math.isinf(eps):
        return -math.inf
    mu = 1.0 / nm
    # Remove direction: log q + log δ_G(eps1), eps1 = log(1 + expm1(eps)/q), in log space (no overflow).
    eps1 = 0.0
    if eps > 0.0:
        log_em1 = math.log(math.expm1(eps)) if eps < 30.0 else eps + math.log1p(-math.exp(-eps))
        eps1 = float(np.logaddexp(0.0, log_em1 - math.log(qq)))
    a = mu / 2.0 - eps1 / mu
    b = -mu / 2.0 - eps1 / mu
    log_phi_a = float(special.log_ndtr(a))
    log_gauss = log_sub_exp_upper(log_phi_a, eps1 + float(special.log_ndtr(b)))
    if log_gauss == -math.inf:  # cancellation beyond double precision: fall back to the bound δ_G ≤ Φ(a)
        log_gauss = log_phi_a
    log_remove = math.log(qq) + log_gauss
    # Add direction.
    log_add = -math.inf
    if qq < 1.0 and eps < -math.log1p(-qq):
        log_c = math.log(-math.expm1(eps + math.log1p(-qq)))  # log(1 - e^eps (1-q))
        x_star = (log_c - eps - math.log(qq) + mu * mu / 2.0) / mu
        log_add = log_sub_exp_upper(
            float(special.log_ndtr(x_star)) + log_c, eps + math.log(qq) + float(special.log_ndtr(x_star - mu))
        )
    return math.log(pp) + max(log_remove, log_add)


def tight_round_epsilon(*, noise_multiplier: float, q: float, p: float, target_delta: float) -> float:
    """Smallest ε with :func:`tight_round_log_delta` ≤ log δ (bisection, rounded up). Provenance: [D]."""
    dlt = _check_target_delta(target_delta)
    if dlt >= 1.0:
        return 0.0
    log_t = math.log(dlt)

    def f(e: float) -> float:
        return tight_round_log_delta(noise_multiplier=noise_multiplier, q=q, p=p, epsilon=e)

    if f(0.0) <= log_t:
        return 0.0
    lo, hi = 0.0, 1e-3
    while f(hi) > log_t:
        lo, hi = hi, hi * 2.0
        if hi > 1e6:
            raise NumericalError("tight_round_epsilon: no epsilon up to 1e6 meets the target delta.")
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if f(mid) > log_t:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return hi


def _round_pld(noise_multiplier: float, q: float, p: float) -> Any:
    from dp_accounting.pld import privacy_loss_distribution as pld

    check_pld_size(noise_multiplier, PLD_DISCRETIZATION)
    with dp_accounting_guard("MS-PAFL tight PLD"):
        sub = pld.from_gaussian_mechanism(
            noise_multiplier,
            sensitivity=1.0,
            sampling_prob=q,
            value_discretization_interval=PLD_DISCRETIZATION,
            pessimistic_estimate=True,
        )
    if p >= 1.0:
        return sub
    ident = pld.identity(value_discretization_interval=PLD_DISCRETIZATION, pessimistic_estimate=True)
    return sub.compute_mixture(ident, p)


def _composed_pld(nm: float, q: float, p: float, t: int) -> Any:
    """T-fold composition of the round PLD ``p·PLD_q + (1 − p)·identity`` (dp-accounting, pessimistic).

    PLD_q is ``from_gaussian_mechanism(nm, sensitivity=1, sampling_prob=q)`` in the add/remove form, whose
    remove/add pair is exactly the worst case of the clipped-model mechanism with Δ₂ = 2C folded into
    ``nm`` = σ/(2C) (docs/ms_pafl.md); the mixture is exact for a public participation coin.
    """
    round_pld = _round_pld(nm, q, p)
    with dp_accounting_guard("MS-PAFL tight PLD composition"):
        return round_pld if t == 1 else round_pld.self_compose(t)


def _pld_epsilon(composed: Any, delta: float) -> float:
    if delta >= 1.0:
        return 0.0
    eps = float(composed.get_epsilon_for_delta(delta))
    if math.isnan(eps):
        raise NumericalError("dp-accounting PLD returned NaN for the MS-PAFL tight analysis.")
    return max(eps, 0.0)


def _check_target_delta(value: float) -> float:
    """δ in (0, ∞); δ ≥ 1 is allowed (every mechanism is (0, δ)-DP then) and gives ε = 0."""
    dlt = check_range("target_delta", value, 0.0, math.inf)
    if dlt <= 0.0:
        raise ValueError(f"target_delta must be in (0, 1). Found {dlt}.")
    return dlt


def tight_rdp(
    *, noise_multiplier: float, q: float, p: float, rounds: int, orders: Sequence[float] = DEFAULT_ORDERS
) -> np.ndarray:
    """RDP curve of T rounds of the same mechanism: T · (1/(α−1)) ln(1 − p + p e^{(α−1) r_q(α)}).

    r_q is dp-accounting's RDP of the Poisson-subsampled Gaussian with ``noise_multiplier`` = σ/Δ₂
    (Mironov et al. 2019), whose add/remove pair is the worst case here. The mixture formula is exact for a
    public participation coin (Rényi divergence of a mixture over an observed index).
    """
    from dp_accounting import dp_event
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    nm = check_positive("noise_multiplier", noise_multiplier)
    qq = check_probability("q", q)
    pp = check_probability("p", p)
    t = check_int("rounds", rounds)
    alphas = np.asarray([check_range("orders", a, 1.0 + 1e-9, 1e6) for a in orders], dtype=np.float64)
    if alphas.size == 0:
        raise ValueError("orders must be a non-empty list of numbers in (1, 1e6]. Found [].")
    acc = rdp.RdpAccountant(list(alphas))
    with dp_accounting_guard("MS-PAFL tight RDP"):
        acc.compose(dp_event.PoissonSampledDpEvent(qq, dp_event.GaussianDpEvent(nm)))
    r_q = np.asarray(acc.rdp, dtype=np.float64)
    with np.errstate(over="ignore"):
        log_mix = np.logaddexp(math.log1p(-pp) if pp < 1.0 else -np.inf, math.log(pp) + (alphas - 1.0) * r_q)
    out: np.ndarray = t * log_mix / (alphas - 1.0)
    return out


def _rdp_epsilon(curve: np.ndarray, orders: Sequence[float], delta: float) -> float:
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    eps, _ = rdp.compute_epsilon(list(orders), list(curve), delta)
    return float(eps)


def tight_epsilons(
    *, noise_multiplier: float, q: float, p: float, rounds: int, target_deltas: Sequence[float]
) -> list[tuple[float, float, float]]:
    """(recommended, PLD, RDP) ε for each δ in ``target_deltas``, composing the PLD only once.

    Recommended = exact for one round, else min(PLD, RDP): both are upper bounds on the true ε, so their
    minimum is one too. For one round the PLD and RDP entries are the exact value as well.
    """
    nm = check_positive("noise_multiplier", noise_multiplier)
    qq = check_probability("q", q)
    pp = check_probability("p", p)
    t = check_int("rounds", rounds)
    deltas = [_check_target_delta(d) for d in target_deltas]
    out: list[tuple[float, float, float]] = []
    if t == 1:
        for d in deltas:
            e = tight_round_epsilon(noise_multiplier=nm, q=qq, p=pp, target_delta=d)
            out.append((e, e, e))
        return out
    composed = _composed_pld(nm, qq, pp, t)
    curve = tight_rdp(noise_multiplier=nm, q=qq, p=pp, rounds=t)
    for d in deltas:
        if d >= 1.0:
            out.append((0.0, 0.0, 0.0))
            continue
        e_pld = _pld_epsilon(composed, d)
        e_rdp = _rdp_epsilon(curve, DEFAULT_ORDERS, d)
        out.append((min(e_pld, e_rdp), e_pld, e_rdp))
    return out


def tight_epsilon(*, noise_multiplier: float, q: float, p: float, rounds: int, target_delta: float) -> float:
    """Recommended ε(δ) of the tight analysis: exact for one round, min(PLD, RDP) for T > 1 rounds."""
    return tight_epsilons(
        noise_multiplier=noise_multiplier, q=q, p=p, rounds=rounds, target_deltas=[target_delta]
    )[0][0]
