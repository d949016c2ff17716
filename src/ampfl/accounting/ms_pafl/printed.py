"""Paper 000 as printed: Eq. (9) sampling ratio, Lemma 1 noise, Theorems 1–4 and Corollary 1.

Li, Wang, Tian, Wang, Su, "Federated Learning with Enhanced Privacy via Model Splitting and Random Client
Participation", arXiv:2509.25906v1. Every formula here is the printed one (provenance [V], or [D] for the
constant that (C.8) implies). Which of them survive an exact check is recorded in ``docs/ms_pafl.md`` and in
the ``sound`` flag of :mod:`ampfl.accounting.ms_pafl.account`: Corollary 1 / Theorem 2 and Theorem 3 are
refuted numerically; Theorem 1 is a correct statement about a freshly subsampled mechanism whose hypothesis
MS-PAFL's rounds do not meet (the private submodel persists, Eq. 14).

Symbols (paper → Python name): p_i → ``participation``, q_i → ``sampling_rate``, ε_ℓ, δ_ℓ → ``eps_local``,
``delta_local``, C → ``clip`` (Eq. 11; the paper's experiments use C = 1), N → ``num_clients``,
Q → ``local_steps``, b → ``batch_size``, |D_i| → ``dataset_size``, T → ``rounds``, δ̃ → ``delta_tilde``.
σ is Lemma 1's absolute noise std with sensitivity s = 2C (Eq. C.3); the noise multiplier is
``noise_multiplier`` = σ/(2C) = √(2 ln(1.25/δ_ℓ))/ε_ℓ (independent of C). ε in nats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

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

__all__ = [
    "SAMPLING_SCHEMES",
    "eps_local_from_noise_multiplier",
    "hoeffding_delta",
    "ldp_noise_multiplier",
    "ldp_sigma",
    "sampling_rate",
    "theorem1_amplification",
    "theorem2_round_cdp",
    "theorem2_round_delta",
    "theorem3_client_total",
    "theorem3_constant",
    "theorem4_strong_composition",
]

#: Sampling schemes of Eq. (9): without and with replacement.
SAMPLING_SCHEMES: tuple[str, ...] = ("wor", "wr")


# ---------------------------------------------------------------------------------------- Eq. (9), Lemma 1
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


def _check_eps_local(value: float) -> float:
    eps = check_positive("eps_local", value)
    if eps > 1.0:
        raise ValueError(f"eps_local must be in (0, 1] (Lemma 1 and Theorem 1 of paper 000). Found {eps}.")
    return eps


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


def ldp_noise_multiplier(*, eps_local: float, delta_local: float) -> float:
    """Noise multiplier of the public upload: z = σ/(2C) = √(2 ln(1.25/δ_ℓ))/ε_ℓ (Lemma 1, s = 2C).

    The 2C is the L2 sensitivity of the clipped upload (‖ŵ_{i,p}‖ ≤ C, Eq. 11) to any change of the local
    dataset; z does not depend on C. This is the ``noise_multiplier`` of
    :class:`~ampfl.accounting.events.MSPAFLRoundEvent`. Same validation as :func:`ldp_sigma`.
    """
    return ldp_sigma(eps_local=eps_local, delta_local=delta_local, clip=1.0) / 2.0


def eps_local_from_noise_multiplier(*, noise_multiplier: float, delta_local: float) -> float:
    """The ε_ℓ that Lemma 1 assigns to a noise multiplier z = σ/(2C): ε_ℓ = √(2 ln(1.25/δ_ℓ))/z.

    The inverse of :func:`ldp_noise_multiplier`; the result may exceed 1, where Lemma 1 and Theorem 1 do not
    apply. Provenance: [D].
    """
    z = check_positive("noise_multiplier", noise_multiplier)
    dlt = check_delta("delta_local", delta_local)
    return math.sqrt(2.0 * math.log(1.25 / dlt)) / z


def hoeffding_delta(*, beta: float, num_clients: int) -> float:
    """δ' = 2 exp(−2β²N) of Theorem 2 / Lemma 2 (Eq. A.2). Provenance: [V]."""
    b = check_positive("beta", beta)
    n = check_int("num_clients", num_clients)
    return 2.0 * math.exp(-2.0 * b * b * n)


# ------------------------------------------------------------------------------------- Theorems 1-4
def theorem1_amplification(
    *, eps_local: float, delta_local: float, sampling_rate: float
) -> tuple[float, float]:
    """Theorem 1 of paper 000: subsampling with ratio q turns (ε_ℓ, δ_ℓ)-LDP into (2qε_ℓ, qδ_ℓ)-LDP.

    Valid (as stated) only for ε_ℓ ≤ 1; refused above. For a mechanism that runs on the subsample only, it
    follows from the standard bound ln(1 + q(e^ε − 1)) ≤ (e − 1) q ε ≤ 2 q ε (WOR; Poisson; WR for a mechanism
    that is DP w.r.t. any change of the local dataset). An MS-PAFL round is not such a mechanism: its upload
    also depends on records drawn in earlier rounds through the private submodel (Eq. 14), so Theorem 1 does
    not bound it (docs/ms_pafl.md). Provenance: [V].

    Returns:
        ``(2 q ε_ℓ, q δ_ℓ)``.
    """
    eps = _check_eps_local(eps_local)
    dlt = check_delta("delta_local", delta_local)
    qq = check_probability("sampling_rate", sampling_rate)
    return 2.0 * qq * eps, qq * dlt


def _as_array(name: str, value: float | Sequence[float]) -> np.ndarray:
    values = [value] if isinstance(value, int | float | np.floating | np.integer) else list(value)
    if not values:
        raise ValueError(f"{name} must be a number or a non-empty list of numbers. Found [].")
    return np.asarray([check_probability(name, v) for v in values], dtype=np.float64)


def _pair(
    participation: float | Sequence[float], sampling_rate: float | Sequence[float]
) -> tuple[np.ndarray, np.ndarray]:
    pa = _as_array("participation", participation)
    qa = _as_array("sampling_rate", sampling_rate)
    if pa.size != qa.size and pa.size != 1 and qa.size != 1:
        raise ValueError(
            f"participation and sampling_rate must have the same length. Found {pa.size} and {qa.size}."
        )
    return pa, qa


def _dprime(beta: float, num_clients: int) -> float:
    dprime = hoeffding_delta(beta=beta, num_clients=num_clients)
    if dprime >= 1.0:
        raise ValueError(
            f"beta must give delta' = 2 exp(-2 beta^2 N) < 1, i.e. beta > "
            f"{math.sqrt(math.log(2.0) / (2 * num_clients)):.6g} for N = {num_clients}. Found {beta}."
        )
    return dprime


def theorem2_round_delta(
    *,
    participation: float | Sequence[float],
    sampling_rate: float | Sequence[float],
    delta_local: float,
    num_clients: int,
    beta: float,
) -> float:
    """δ_c of Theorem 2 (Eq. 15b) / Corollary 1 (Eq. 16b): max_i {δ' + p_i q_i δ_ℓ/(1 − δ')}. Provenance: [V].

    Needs no ε_ℓ, so it is defined for any noise level (``account_ms_pafl`` uses it as the default δ).
    """
    pa, qa = _pair(participation, sampling_rate)
    dlt = check_delta("delta_local", delta_local)
    return _round_delta(pa, qa, dlt, _dprime(beta, num_clients))


def _round_delta(pa: np.ndarray, qa: np.ndarray, delta_local: float, dprime: float) -> float:
    """δ_c = max_i {δ' + p_i q_i δ_ℓ/(1 − δ')} (Eq. 15b) of checked inputs."""
    return float(np.max(dprime + pa / (1.0 - dprime) * qa * delta_local))


def theorem2_round_cdp(
    *,
    participation: float | Sequence[float],
    sampling_rate: float | Sequence[float],
    eps_local: float,
    delta_local: float,
    num_clients: int,
    beta: float,
) -> tuple[float, float]:
    """Single-round CDP of the global public model: Theorem 2 (Eq. 15), Corollary 1 (Eq. 16) when uniform.

    ε_c = max_i ln[1 + p_i/(1 − δ')(e^{2 q_i ε_ℓ} − 1)], δ_c = max_i {δ' + p_i q_i δ_ℓ/(1 − δ')},
    δ' = 2 exp(−2β²N). ``participation`` and ``sampling_rate`` are scalars (Corollary 1) or per-client
    sequences of equal length (Theorem 2). Provenance: [V]. Refuted (docs/ms_pafl.md): against the server,
    which sees who uploaded, p does not reduce ε; and the proof's (A.1) is a client-level relation.

    Raises:
        ValueError: on invalid input, ε_ℓ > 1 (Theorem 1), or δ' ≥ 1 (β too small for N).
    """
    pa, qa = _pair(participation, sampling_rate)
    eps = _check_eps_local(eps_local)
    dlt = check_delta("delta_local", delta_local)
    dprime = _dprime(beta, num_clients)
    eps_c = float(np.max(np.log1p(pa / (1.0 - dprime) * np.expm1(2.0 * qa * eps))))
    return eps_c, _round_delta(pa, qa, dlt, dprime)


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
    *,
    participation: float,
    sampling_rate: float,
    eps_local: float,
    delta_local: float,
    rounds: int,
    clip: float = 1.0,
) -> float:
    """Theorem 3 (Eq. 18) with the C.8 constant: ε̄_i^T = c_0 q ε_ℓ √(p T / (1 − q)) — paper's asymptotic form.

    The δ of this total is δ_ℓ (Eq. C.5 uses δ_ℓ as the target). Returns ``inf`` for q = 1. Refuted: it
    under-reports ε against the exact accounting of the same mechanism (docs/ms_pafl.md). Provenance: [D].
    """
    pp = check_probability("participation", participation)
    qq = check_probability("sampling_rate", sampling_rate)
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

    ε̄ = √(2T ln(1/δ̃)) ε' + T ε' (e^{ε'} − 1), δ̄ = T δ' + δ̃. Provenance: [V]. A correct composition
    theorem; its output is only as good as the per-round (ε', δ') fed to it (Corollary 1's is refuted).

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
