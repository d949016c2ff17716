"""MS-PAFL privacy accounting (paper 000: Li, Wang, Tian, Wang, Su, "Federated Learning with Enhanced Privacy
via Model Splitting and Random Client Participation", arXiv:2509.25906v1).

Two analyses of the same mechanism live here:

* **The paper's analysis, as printed** (labelled ``paper``): Eq. (9) sampling ratio q_i, Lemma 1 noise with
  sensitivity s = 2C (Eq. C.3), Theorem 1 amplification (2qε_ℓ, qδ_ℓ), Theorem 2 / Corollary 1 single-round
  CDP with δ' = 2 exp(−2β²N), Theorem 3 client total with the constant that (C.8) gives (labelled "paper's
  asymptotic form"), Theorem 4 strong composition (Eq. 19). Provenance: [V] (formulas as printed).
* **A tight alternative** (labelled ``tight``) for the same local mechanism: record-level neighbours,
  participation public, the per-round PLD ``p · PLD(q-subsampled Gaussian, σ/Δ₂) + (1 − p) · identity``
  composed over T rounds (dp-accounting), cross-checked by RDP. Its math lives in
  :mod:`ampfl.accounting.ms_pafl_tight`, whose public names are re-exported here; this module keeps the
  one-call accounts (:func:`account_ms_pafl`, :func:`account_ms_pafl_tight`). See ``docs/ms_pafl.md`` for
  why this pair of distributions is the worst case and for the discrepancies found in the paper.

Symbols (paper → public name): p → ``p`` (check-in probability p_i), q → ``q`` (data sampling ratio q_i),
ε_ℓ, δ_ℓ → ``eps_local``, ``delta_local`` (per-round LDP of the public submodel), C → ``clip`` (model clipping
threshold, Eq. 11; the paper's experiments use C = 1), N → ``num_clients``, Q → ``local_steps``,
b → ``batch_size``, |D_i| → ``dataset_size``, T → ``rounds``, δ̃ → ``delta_tilde``. Noise multiplier
``noise_multiplier`` = σ / Δ₂ with Δ₂ = 2C. ε in nats.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ampfl.accounting._checks import (
    NumericalError,
    check_choice,
    check_delta,
    check_int,
    check_positive,
    check_probability,
    check_range,
)
from ampfl.accounting.gaussian import classic_gaussian_sigma, gaussian_delta
from ampfl.accounting.ms_pafl_tight import (
    ANALYSIS_TIGHT,
    DEFAULT_ORDERS,
    PLD_DISCRETIZATION,
    tight_epsilon,
    tight_epsilons,
    tight_rdp,
    tight_round_epsilon,
    tight_round_log_delta,
)
from ampfl.accounting.ms_pafl_tight import _rdp_epsilon as _rdp_epsilon  # re-exported for the tests
from ampfl.accounting.ms_pafl_tight import _round_pld as _round_pld  # re-exported for the tests

__all__ = [
    "ANALYSIS_PAPER",
    "ANALYSIS_TIGHT",
    "DEFAULT_ORDERS",
    "PLD_DISCRETIZATION",
    "SAMPLING_SCHEMES",
    "MSPAFLAccount",
    "MSPAFLTightAccount",
    "account_ms_pafl",
    "account_ms_pafl_tight",
    "hoeffding_delta",
    "ldp_sigma",
    "sampling_rate",
    "theorem1_amplification",
    "theorem2_round_cdp",
    "theorem3_client_total",
    "theorem3_constant",
    "theorem4_strong_composition",
    "tight_epsilon",
    "tight_epsilons",
    "tight_rdp",
    "tight_round_epsilon",
    "tight_round_log_delta",
]

#: Sampling schemes of Eq. (9): without and with replacement.
SAMPLING_SCHEMES: tuple[str, ...] = ("wor", "wr")

ANALYSIS_PAPER = (
    "paper 000 as printed: Eq. 9 q, Lemma 1 sigma with s = 2C (C.3), Thm 1 (2q eps_l, q delta_l), "
    "Cor. 1 / Thm 2 single-round CDP with delta' = 2 exp(-2 beta^2 N), Thm 4 strong composition (Eq. 19); "
    "epsilon_client_total: Thm 3 with the C.8 constant c0 = sqrt(ln(1/delta_l)/ln(1.25/delta_l))/(2C) "
    "(paper's asymptotic form, at delta = delta_l; known to under-report, see docs/ms_pafl.md)"
)


# ----------------------------------------------------------------------------------------------------------
# Eq. (9) and Lemma 1
# ----------------------------------------------------------------------------------------------------------
def sampling_rate(*, batch_size: int, dataset_size: int, local_steps: int, scheme: str) -> float:
    """Data sampling ratio q_i of paper 000, Eq. (9).

    WOR: q = Q b / |D_i| (requires Q b ≤ |D_i|); WR: q = 1 − (1 − 1/|D_i|)^{Q b}, the probability that a
    given record is drawn at least once in Q b draws with replacement. Always q_WR ≤ q_WOR (Bernoulli's
    inequality; Remark 2). Provenance: [V].

    Args:
        batch_size: mini-batch size b (≥ 1).
        dataset_size: local dataset size |D_i| (≥ 1).
        local_steps: local SGD steps Q (≥ 1).
        scheme: ``"wor"`` or ``"wr"``.

    Returns:
        q in (0, 1].

    Raises:
        ValueError: on invalid input, or WOR with Q b > |D_i|.
    """
    b = check_int("batch_size", batch_size)
    n = check_int("dataset_size", dataset_size)
    steps = check_int("local_steps", local_steps)
    kind = check_choice("scheme", scheme, SAMPLING_SCHEMES)
    draws = steps * b
    if kind == "wor":
        if draws > n:
            raise ValueError(
                f"local_steps * batch_size must be <= dataset_size for WOR sampling (Eq. 9). "
                f"Found {steps} * {b} = {draws} > {n}."
            )
        return draws / n
    # 1 - (1 - 1/n)^(Qb) computed without cancellation.
    return float(-math.expm1(draws * math.log1p(-1.0 / n))) if n > 1 else 1.0


def ldp_sigma(*, eps_local: float, delta_local: float, clip: float) -> float:
    """Noise std of the public submodel for (ε_ℓ, δ_ℓ)-LDP: Lemma 1 (Eq. 6) with s = 2C (Eq. C.3).

    σ = 2C √(2 ln(1.25/δ_ℓ)) / ε_ℓ. Lemma 1 (Dwork–Roth Thm 3.22/A.1) is proven for ε_ℓ < 1; the paper's
    experiments use ε_ℓ = 1, so at ε_ℓ = 1 exactly the same formula is returned after checking with the exact
    Gaussian δ(ε) (Balle–Wang) that it really gives (1, δ_ℓ)-DP (it does for every δ_ℓ we tried; otherwise
    :class:`NumericalError`). Provenance: [V].

    Args:
        eps_local: ε_ℓ in (0, 1].
        delta_local: δ_ℓ in (0, 1).
        clip: clipping threshold C > 0 of Eq. (11).

    Raises:
        ValueError: if ε_ℓ is outside (0, 1] (Lemma 1 and Theorem 1 need ε_ℓ ≤ 1).
    """
    eps = _check_eps_local(eps_local)
    dlt = check_delta("delta_local", delta_local)
    c = check_positive("clip", clip)
    if eps < 1.0:
        return classic_gaussian_sigma(epsilon=eps, delta=dlt, sensitivity=2.0 * c)
    sigma = 2.0 * c * math.sqrt(2.0 * math.log(1.25 / dlt))
    if not gaussian_delta(sigma=sigma, epsilon=1.0, sensitivity=2.0 * c) <= dlt:
        raise NumericalError(f"Lemma 1 at eps_local = 1 does not give (1, {dlt})-DP by the exact check.")
    return sigma


def _check_eps_local(value: float) -> float:
    eps = check_positive("eps_local", value)
    if eps > 1.0:
        raise ValueError(f"eps_local must be in (0, 1] (Lemma 1 and Theorem 1 of paper 000). Found {eps}.")
    return eps


def hoeffding_delta(*, beta: float, num_clients: int) -> float:
    """δ' = 2 exp(−2β²N) of Theorem 2 / Lemma 2 (Eq. A.2). Provenance: [V]."""
    b = check_positive("beta", beta)
    n = check_int("num_clients", num_clients)
    return 2.0 * math.exp(-2.0 * b * b * n)


# ----------------------------------------------------------------------------------------------------------
# Theorems 1-4 as printed
# ----------------------------------------------------------------------------------------------------------
def theorem1_amplification(*, eps_local: float, delta_local: float, q: float) -> tuple[float, float]:
    """Theorem 1 of paper 000: subsampling with ratio q turns (ε_ℓ, δ_ℓ)-LDP into (2qε_ℓ, qδ_ℓ)-LDP.

    Valid (as stated) only for ε_ℓ ≤ 1; refused above. For ε_ℓ ≤ 1 it follows from the standard bound
    ln(1 + q(e^ε − 1)) ≤ (e − 1) q ε ≤ 2 q ε, so it holds whenever that bound does (WOR; Poisson; WR for
    a mechanism that is DP w.r.t. any change of the local dataset, which the clipped public model is).
    Provenance: [V].

    Returns:
        ``(2 q ε_ℓ, q δ_ℓ)``.
    """
    eps = _check_eps_local(eps_local)
    dlt = check_delta("delta_local", delta_local)
    qq = check_probability("q", q)
    return 2.0 * qq * eps, qq * dlt


def _as_array(name: str, value: float | Sequence[float]) -> np.ndarray:
    values = [value] if isinstance(value, int | float | np.floating | np.integer) else list(value)
    if not values:
        raise ValueError(f"{name} must be a number or a non-empty list of numbers. Found [].")
    return np.asarray([check_probability(name, v) for v in values], dtype=np.float64)


def theorem2_round_cdp(
    *,
    p: float | Sequence[float],
    q: float | Sequence[float],
    eps_local: float,
    delta_local: float,
    num_clients: int,
    beta: float,
) -> tuple[float, float]:
    """Single-round CDP of the global public model: Theorem 2 (Eq. 15), Corollary 1 (Eq. 16) when uniform.

    ε_c = max_i ln[1 + p_i/(1 − δ')(e^{2 q_i ε_ℓ} − 1)], δ_c = max_i {δ' + p_i q_i δ_ℓ/(1 − δ')},
    δ' = 2 exp(−2β²N). ``p`` and ``q`` are scalars (Corollary 1) or per-client sequences of equal length
    (Theorem 2). Provenance: [V]. Caveat (docs/ms_pafl.md): the ε reduction by p assumes the observer cannot
    tell whether client i took part; against the server (which receives the upload) the p-amplification of ε
    does not hold — use :func:`account_ms_pafl_tight`.

    Raises:
        ValueError: on invalid input, ε_ℓ > 1 (Theorem 1), or δ' ≥ 1 (β too small for N).
    """
    pa = _as_array("p", p)
    qa = _as_array("q", q)
    if pa.size != qa.size and pa.size != 1 and qa.size != 1:
        raise ValueError(f"p and q must have the same length. Found {pa.size} and {qa.size}.")
    eps = _check_eps_local(eps_local)
    dlt = check_delta("delta_local", delta_local)
    dprime = hoeffding_delta(beta=beta, num_clients=num_clients)
    if dprime >= 1.0:
        raise ValueError(
            f"beta must give delta' = 2 exp(-2 beta^2 N) < 1, i.e. beta > "
            f"{math.sqrt(math.log(2.0) / (2 * num_clients)):.6g} for N = {num_clients}. Found {beta}."
        )
    scale = pa / (1.0 - dprime)
    eps_c = float(np.max(np.log1p(scale * np.expm1(2.0 * qa * eps))))
    delta_c = float(np.max(dprime + scale * qa * dlt))
    return eps_c, delta_c


def theorem3_constant(*, delta_local: float, clip: float) -> float:
    """The constant c_0 of Theorem 3 (Eq. 18) that (C.8) gives: c_0 = √(ln(1/δ_ℓ)/ln(1.25/δ_ℓ)) / (2C).

    Paper's asymptotic form. Note the 1/C: a privacy level that depends on the clipping threshold is a sign
    of the dimensional slip in (C.2) (noise std used where the moments accountant needs σ/s); see
    docs/ms_pafl.md. Provenance: [D] (derived from the printed C.8).
    """
    dlt = check_delta("delta_local", delta_local)
    c = check_positive("clip", clip)
    return math.sqrt(math.log(1.0 / dlt) / math.log(1.25 / dlt)) / (2.0 * c)


def theorem3_client_total(
    *, p: float, q: float, eps_local: float, delta_local: float, rounds: int, clip: float = 1.0
) -> float:
    """Theorem 3 (Eq. 18) with the C.8 constant: ε̄_i^T = c_0 q ε_ℓ √(p T / (1 − q)) — paper's asymptotic form.

    The δ of this total is δ_ℓ (Eq. C.5 uses δ_ℓ as the target). Returns ``inf`` for q = 1. This is the
    printed formula, labelled; it under-reports ε against the exact accounting of the same mechanism (see
    docs/ms_pafl.md), so ampfl never recommends it. Provenance: [D].
    """
    pp = check_probability("p", p)
    qq = check_probability("q", q)
    eps = _check_eps_local(eps_local)
    t = check_int("rounds", rounds)
    c0 = theorem3_constant(delta_local=delta_local, clip=clip)
    if qq >= 1.0:
        return math.inf
    return c0 * qq * eps * math.sqrt(pp * t / (1.0 - qq))


def theorem4_strong_composition(
    *, epsilon_round: float, delta_round: float, rounds: int, delta_tilde: float
) -> tuple[float, float]:
    """Theorem 4 (Eq. 19), Dwork–Rothblum–Vadhan strong composition of T rounds of (ε', δ')-DP.

    ε̄ = √(2T ln(1/δ̃)) ε' + T ε' (e^{ε'} − 1), δ̄ = T δ' + δ̃. Provenance: [V].

    Args:
        epsilon_round: ε' = max_t ε_c^t ≥ 0.
        delta_round: δ' = max_t δ_c^t ≥ 0.
        rounds: T ≥ 1.
        delta_tilde: δ̃ in (0, 1].
    """
    eps = check_range("epsilon_round", epsilon_round, 0.0, math.inf)
    dlt = check_range("delta_round", delta_round, 0.0, math.inf)  # δ' ≥ 1 is vacuous, not wrong
    t = check_int("rounds", rounds)
    dt = check_probability("delta_tilde", delta_tilde)
    if math.isinf(eps):
        return math.inf, t * dlt + dt
    total = math.sqrt(2.0 * t * math.log(1.0 / dt)) * eps + t * eps * math.expm1(eps)
    return total, t * dlt + dt


# ----------------------------------------------------------------------------------------------------------
# One-call accounts
# ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class MSPAFLAccount:
    """Result of :func:`account_ms_pafl`: the paper's analysis plus the tight one at the same δ.

    Attributes:
        q: data sampling ratio (Eq. 9).
        sigma: noise std of the public submodel (Lemma 1, s = 2C).
        epsilon_round, delta_round: Corollary 1 single-round CDP (Eq. 16).
        epsilon_total, delta_total: Theorem 4 (Eq. 19) over ``rounds`` (None without rounds).
        epsilon_client_total: Theorem 3 with the C.8 constant, paper's asymptotic form, at δ = δ_ℓ.
        epsilon_round_tight: tight ε of one round at δ = ``delta_round`` (None with ``tight=False``).
        epsilon_total_tight: tight ε of ``rounds`` rounds at δ = ``delta_total``.
        epsilon_client_total_tight: tight ε of ``rounds`` rounds at δ = δ_ℓ (compare with Theorem 3).
        analysis: what each number is; ``recommended`` names the analysis ampfl recommends.
    """

    q: float
    sigma: float
    noise_multiplier: float
    epsilon_round: float
    delta_round: float
    epsilon_round_tight: float | None = None
    epsilon_total: float | None = None
    delta_total: float | None = None
    epsilon_client_total: float | None = None
    epsilon_total_tight: float | None = None
    epsilon_client_total_tight: float | None = None
    analysis: str = ANALYSIS_PAPER
    tight_analysis: str = ANALYSIS_TIGHT
    recommended: str = "tight"


def account_ms_pafl(
    *,
    p: float,
    eps_local: float,
    delta_local: float,
    num_clients: int,
    beta: float,
    local_steps: int,
    batch_size: int,
    dataset_size: int,
    sampling: str,
    rounds: int | None = None,
    delta_tilde: float | None = None,
    clip: float = 1.0,
    tight: bool = True,
) -> MSPAFLAccount:
    """Full MS-PAFL account: paper 000 as printed (Eq. 9, Lemma 1, Cor. 1, Thms 3–4) plus the tight analysis.

    ``rounds`` and ``delta_tilde`` go together (both or neither). ``clip`` defaults to the paper's C = 1; it
    changes ``sigma`` and Theorem 3's constant, not the tight ε (σ/(2C) does not depend on C).
    ``tight=False`` skips the tight analysis (its fields are then ``None``; ~0.3–1 s saved for T > 1).
    """
    if (rounds is None) != (delta_tilde is None):
        raise ValueError("rounds and delta_tilde must be given together (both or neither).")
    pp = check_probability("p", p)
    q = sampling_rate(
        batch_size=batch_size, dataset_size=dataset_size, local_steps=local_steps, scheme=sampling
    )
    sigma = ldp_sigma(eps_local=eps_local, delta_local=delta_local, clip=clip)
    nm = sigma / (2.0 * clip)
    eps_c, delta_c = theorem2_round_cdp(
        p=pp, q=q, eps_local=eps_local, delta_local=delta_local, num_clients=num_clients, beta=beta
    )
    acc = MSPAFLAccount(q=q, sigma=sigma, noise_multiplier=nm, epsilon_round=eps_c, delta_round=delta_c)
    if tight:
        eps_rt = tight_epsilon(noise_multiplier=nm, q=q, p=pp, rounds=1, target_delta=delta_c)
        acc = dataclasses.replace(acc, epsilon_round_tight=eps_rt)
    if rounds is None or delta_tilde is None:
        return acc
    t = check_int("rounds", rounds)
    eps_total, delta_total = theorem4_strong_composition(
        epsilon_round=eps_c, delta_round=delta_c, rounds=t, delta_tilde=delta_tilde
    )
    eps_client = theorem3_client_total(
        p=pp, q=q, eps_local=eps_local, delta_local=delta_local, rounds=t, clip=clip
    )
    acc = dataclasses.replace(
        acc, epsilon_total=eps_total, delta_total=delta_total, epsilon_client_total=eps_client
    )
    if tight:
        total, client = tight_epsilons(
            noise_multiplier=nm, q=q, p=pp, rounds=t, target_deltas=[delta_total, delta_local]
        )
        acc = dataclasses.replace(acc, epsilon_total_tight=total[0], epsilon_client_total_tight=client[0])
    return acc


@dataclass(frozen=True, slots=True, kw_only=True)
class MSPAFLTightAccount:
    """Result of :func:`account_ms_pafl_tight`: ``epsilon`` = :func:`tight_epsilon` (exact for one round,
    else min of the PLD and RDP values, both reported)."""

    q: float
    sigma: float
    noise_multiplier: float
    rounds: int
    delta: float
    epsilon: float
    epsilon_pld: float
    epsilon_rdp: float
    analysis: str = ANALYSIS_TIGHT


def account_ms_pafl_tight(
    *,
    p: float,
    eps_local: float,
    delta_local: float,
    local_steps: int,
    batch_size: int,
    dataset_size: int,
    sampling: str,
    rounds: int,
    delta: float,
    clip: float = 1.0,
) -> MSPAFLTightAccount:
    """Tight ε at ``delta`` after ``rounds`` rounds for the MS-PAFL mechanism (σ from Lemma 1, s = 2C).

    Record-level neighbours (one sample of one client's data changes), participation public. Valid for the
    server's view of the uploads and hence (post-processing) for every global model built from them.
    """
    pp = check_probability("p", p)
    q = sampling_rate(
        batch_size=batch_size, dataset_size=dataset_size, local_steps=local_steps, scheme=sampling
    )
    sigma = ldp_sigma(eps_local=eps_local, delta_local=delta_local, clip=clip)
    nm = sigma / (2.0 * clip)
    t = check_int("rounds", rounds)
    dlt = check_delta("delta", delta)
    ((best, e_pld, e_rdp),) = tight_epsilons(noise_multiplier=nm, q=q, p=pp, rounds=t, target_deltas=[dlt])
    return MSPAFLTightAccount(
        q=q,
        sigma=sigma,
        noise_multiplier=nm,
        rounds=t,
        delta=dlt,
        epsilon=best,
        epsilon_pld=e_pld,
        epsilon_rdp=e_rdp,
    )
