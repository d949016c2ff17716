"""Group client-level DP for heterogeneous budgets: GDPFed (paper 001), sound and as inferred.

Paper 001 (Xu, Hu, Kotevska, "Optimal Client Sampling in Federated Learning with Client-level Heterogeneous
Differential Privacy", arXiv:2505.13655v3) partitions clients by privacy budget; each group ``g`` runs
client-level DP-FedAvg on its own secure-aggregation sum with client sampling rate ``q_g`` and noise
multiplier ``sigma_g``, calibrated to the smallest budget in the group.

Symbols (paper → public names): ``ε_g`` → ``target_epsilon``, ``δ`` → ``target_delta``, ``q_g`` →
``sampling_probability``, ``σ_g`` → ``noise_multiplier`` (noise std of the group sum divided by the per-client
clipping norm ``C``), ``T`` → ``num_rounds``, ``d`` → ``dim``, ``κ_g`` → ``kappa``, ``N_g`` → group size.
ε is in nats. Neighbouring relation: add/remove one client's whole dataset (client-level), so the group sum
has L2 sensitivity Δ₂ = C and ``noise_multiplier`` = σ/Δ₂ = σ/C.

Two analyses of a group's noise:

* ``sound`` (the default): Poisson client sampling with rate ``q_g`` in every round, the subsampled
  Gaussian mechanism's RDP at integer orders (Mironov, Talwar, Zhang 2019, arXiv:1908.10530v1, Sec. 3.3,
  the formula dp-accounting evaluates in ``_compute_log_a_int``), composed over ``T`` rounds and converted to
  (ε, δ) by dp-accounting's ``compute_epsilon`` (Canonne, Kamath, Steinke, arXiv:2004.00010v4, Prop. 12).
  The vectorised kernel here is checked against dp-accounting's ``RdpAccountant`` (tests) and every
  calibrated σ is re-checked with ``RdpAccountant`` itself and, optionally, with its ``PLDAccountant``.
* ``paper``: the closed form of Theorem 1 as inferred in RECOVERED_MATH.md §2.2 (provenance [I], strong):
  σ_g² ≥ 7 q_g² T (ε_g + 2 log(1/δ)) / ε_g², valid for ε_g < 2 log(1/δ). The paper states it for sampling
  *without replacement*. It is NOT a sound default: for small ``q_g²·T`` it under-noises (see
  ``docs/planner.md`` for the measured region), so it is reported only when asked and is always labelled.

Fixed-size (without-replacement) group sampling is deliberately not offered: dp-accounting's replace-one
RDP path has a known factor-2 problem and ampfl has no independent check of it yet.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from ampfl.accounting._checks import (
    NumericalError,
    check_choice,
    check_delta,
    check_int,
    check_nonnegative,
    check_positive,
    check_probability,
    check_range,
)
from ampfl.accounting.calibrate import calibrate_decreasing
from ampfl.accounting.subsampling import check_pld_size, dp_accounting_guard

#: Integer Rényi orders used by the sound analysis (the conversion takes the best one).
RDP_ORDERS: tuple[int, ...] = (*range(2, 65), 72, 80, 96, 112, 128, 160, 192, 256, 384, 512)

ANALYSES: tuple[str, ...] = ("sound", "paper")

#: Corollary 1 / Remark 2 of paper 001: the system guarantee needs pairwise-disjoint client datasets.
REMARK_2_WARNING = (
    "system_epsilon = max over groups (Corollary 1, parallel composition) assumes pairwise-disjoint client "
    "datasets; a record held by clients of several groups costs the sum of their budgets (Remark 2)."
)

_MAX_SIGMA = 1e6


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientGroups:
    """A partition of clients into privacy groups.

    Attributes:
        labels: group index of every client, shape ``[num_clients]``, values in ``0..num_groups-1``.
        epsilons: group budget ε_g = min of its members' budgets, shape ``[num_groups]``, increasing.
        sizes: number of clients N_g per group, shape ``[num_groups]``.
    """

    labels: np.ndarray
    epsilons: np.ndarray
    sizes: np.ndarray


def _client_budgets(client_epsilons: Sequence[float] | np.ndarray) -> np.ndarray:
    eps = np.asarray(client_epsilons, dtype=float)
    if eps.ndim != 1 or eps.size == 0:
        raise ValueError(f"client_epsilons must be a non-empty 1-D list of budgets. Found shape {eps.shape}.")
    if not np.all(np.isfinite(eps)) or np.any(eps <= 0):
        raise ValueError(
            f"client_epsilons must be finite and > 0. Found {eps[~(np.isfinite(eps) & (eps > 0))][0]}."
        )
    return eps


def group_by_edges(client_epsilons: Sequence[float] | np.ndarray, *, edges: Sequence[float]) -> ClientGroups:
    """Partition clients by budget thresholds; a group's budget is the minimum of its members' budgets.

    Client ``i`` joins group ``g`` when ``edges[g-1] <= ε_i < edges[g]`` (open ends at 0 and ∞). Empty groups
    are dropped and the remaining ones renumbered in increasing order of budget. Paper 001, Sec. IV-A.

    Args:
        client_epsilons: per-client budgets ε_i > 0, shape ``[num_clients]``.
        edges: strictly increasing interior thresholds (may be empty: one group).
    """
    eps = _client_budgets(client_epsilons)
    cuts = np.asarray(list(edges), dtype=float)
    if cuts.ndim != 1 or not np.all(np.isfinite(cuts)) or np.any(np.diff(cuts) <= 0):
        raise ValueError(f"edges must be a strictly increasing list of finite numbers. Found {list(edges)}.")
    raw = np.searchsorted(cuts, eps, side="right")
    used = np.unique(raw)
    labels = np.searchsorted(used, raw)
    epsilons = np.array([eps[labels == g].min() for g in range(used.size)])
    sizes = np.bincount(labels, minlength=used.size)
    return ClientGroups(labels=labels, epsilons=epsilons, sizes=sizes)


def group_by_quantiles(client_epsilons: Sequence[float] | np.ndarray, *, num_groups: int) -> ClientGroups:
    """Partition clients into ``num_groups`` budget-quantile groups (fewer if quantiles coincide).

    The interior edges are the ``k/num_groups`` quantiles of the budgets (``method="higher"``, so every edge
    is an observed budget); each group's budget is the minimum of its members' budgets.
    """
    eps = _client_budgets(client_epsilons)
    k = check_int("num_groups", num_groups, minimum=1)
    probs = np.arange(1, k) / k
    cuts = np.unique(np.quantile(eps, probs, method="higher")) if k > 1 else np.array([])
    cuts = cuts[cuts > eps.min()]
    return group_by_edges(eps, edges=cuts.tolist())


# --------------------------------------------------------------------------------------------- sound RDP


@functools.lru_cache(maxsize=8)
def _ragged_terms(orders: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Flattened (α, k) pairs with 0 ≤ k ≤ α for every order, segment starts, and log C(α, k)."""
    a = np.concatenate([np.full(o + 1, o, dtype=float) for o in orders])
    k = np.concatenate([np.arange(o + 1, dtype=float) for o in orders])
    starts = np.cumsum([0] + [o + 1 for o in orders[:-1]])
    log_comb = special.gammaln(a + 1) - special.gammaln(k + 1) - special.gammaln(a - k + 1)
    return a, k, starts, log_comb


def _rdp_poisson_gaussian(q: float, sigma: float, orders: tuple[int, ...]) -> np.ndarray:
    """Per-round RDP of the Poisson-subsampled Gaussian (add/remove), integer orders, vectorised.

    log A_α = logsumexp_k [log C(α,k) + k log q + (α−k) log(1−q) + (k² − k)/(2σ²)], RDP_α = log A_α/(α−1).
    Mironov, Talwar, Zhang 2019 (arXiv:1908.10530v1), Sec. 3.3; identical to dp-accounting's
    ``_compute_log_a_int``. Negative round-off is clamped to 0 (RDP is never negative).
    """
    ords = np.asarray(orders, dtype=float)
    if q >= 1.0:
        return ords / (2.0 * sigma**2)
    a, k, starts, log_comb = _ragged_terms(orders)
    terms = log_comb + k * math.log(q) + (a - k) * math.log1p(-q) + (k * k - k) / (2.0 * sigma**2)
    peak = np.maximum.reduceat(terms, starts)
    seg = np.repeat(np.arange(len(orders)), ords.astype(np.int64) + 1)
    log_a = peak + np.log(np.add.reduceat(np.exp(terms - peak[seg]), starts))
    rdp = log_a / (ords - 1.0)
    return np.asarray(np.maximum(rdp, 0.0), dtype=float)


def _eps_from_rdp(rdp: np.ndarray, delta: float) -> float:
    from dp_accounting.rdp import rdp_privacy_accountant

    eps, _ = rdp_privacy_accountant.compute_epsilon(list(RDP_ORDERS), rdp.tolist(), delta)
    return float(eps)


def _sound_epsilon_fast(q: float, sigma: float, num_rounds: int, delta: float) -> float:
    rdp = num_rounds * _rdp_poisson_gaussian(q, sigma, RDP_ORDERS)
    if not np.all(np.isfinite(rdp)):
        rdp = np.where(np.isfinite(rdp), rdp, np.inf)
    return _eps_from_rdp(rdp, delta)


def _validate(sampling_probability: float, num_rounds: int, target_delta: float) -> tuple[float, int, float]:
    q = check_probability("sampling_probability", sampling_probability)
    t = check_int("num_rounds", num_rounds, minimum=1)
    d = check_delta("target_delta", target_delta)
    return q, t, d


def group_epsilon_rdp(
    noise_multiplier: float, *, sampling_probability: float, num_rounds: int, target_delta: float
) -> float:
    """ε of one group after ``num_rounds`` rounds, by dp-accounting's ``RdpAccountant`` (sound).

    Event: ``SelfComposed(PoissonSampled(q, Gaussian(σ)), T)`` under add/remove client-level adjacency.
    Uses the integer orders :data:`RDP_ORDERS`. Provenance: [V] (dp-accounting).
    """
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant

    sigma = check_positive("noise_multiplier", noise_multiplier)
    q, t, d = _validate(sampling_probability, num_rounds, target_delta)
    accountant = rdp_privacy_accountant.RdpAccountant(orders=list(RDP_ORDERS))
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))
    with dp_accounting_guard("group_epsilon_rdp"):
        accountant.compose(event, t)
        return float(accountant.get_epsilon(d))


def group_epsilon_pld(
    noise_multiplier: float,
    *,
    sampling_probability: float,
    num_rounds: int,
    target_delta: float,
    value_discretization_interval: float = 1e-3,
) -> float:
    """ε of one group by dp-accounting's ``PLDAccountant`` (pessimistic PLD; a tighter cross-check of RDP)."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    sigma = check_positive("noise_multiplier", noise_multiplier)
    q, t, d = _validate(sampling_probability, num_rounds, target_delta)
    interval = check_positive(
        "value_discretization_interval", value_discretization_interval, upper=1.0 + 1e-12
    )
    check_pld_size(sigma, interval)
    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=interval)
    with dp_accounting_guard("group_epsilon_pld"):
        accountant.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), t)
        return float(accountant.get_epsilon(d))


@functools.lru_cache(maxsize=4096)
def _sound_sigma_cached(eps: float, q: float, t: int, delta: float, rtol: float, initial: float) -> float:
    fast = calibrate_decreasing(
        lambda s: _sound_epsilon_fast(q, s, t, delta),
        eps,
        name="noise_multiplier",
        initial=initial,
        lower_limit=1e-3,
        upper_limit=_MAX_SIGMA,
        rtol=rtol,
    )
    return fast


def sound_group_sigma(
    target_epsilon: float,
    *,
    sampling_probability: float,
    num_rounds: int,
    target_delta: float,
    rtol: float = 1e-6,
    verify: bool = True,
    check_pld: bool = False,
    initial: float = 1.0,
) -> float:
    """Smallest noise multiplier σ_g whose RDP accounting gives ε ≤ ``target_epsilon`` at ``target_delta``.

    Poisson client sampling with rate q_g per round, add/remove client-level neighbours, T rounds. The search
    uses the vectorised RDP kernel; with ``verify`` (default) the result is re-checked with dp-accounting's
    ``RdpAccountant`` and raised by factors ``1 + rtol`` until that check passes, so the returned σ satisfies
    dp-accounting's RDP ε ≤ target. ``check_pld`` also checks dp-accounting's PLD ε ≤ target (PLD is tighter
    than RDP, so a failure means a bug, reported as :class:`NumericalError`). Provenance: [V].

    Args:
        target_epsilon: group budget ε_g > 0 (nats).
        sampling_probability: q_g in (0, 1].
        num_rounds: T >= 1.
        target_delta: δ in (0, 1).
        rtol: relative precision of σ (the answer errs towards more noise).
        verify: re-check with dp-accounting's ``RdpAccountant``.
        check_pld: also cross-check with dp-accounting's ``PLDAccountant``.
        initial: first guess for the search (a warm start).

    Raises:
        NumericalError: if no σ ≤ 1e6 meets the target, or a cross-check fails.
    """
    eps = check_positive("target_epsilon", target_epsilon)
    q, t, d = _validate(sampling_probability, num_rounds, target_delta)
    tol = check_range("rtol", rtol, 1e-12, 0.1)
    start = check_positive("initial", initial)
    sigma = _sound_sigma_cached(eps, q, t, d, tol, start)
    if verify:
        for _ in range(100):
            got = group_epsilon_rdp(sigma, sampling_probability=q, num_rounds=t, target_delta=d)
            if got <= eps:
                break
            sigma *= 1.0 + tol
        else:  # pragma: no cover - the two evaluations of the same formula cannot differ this much
            raise NumericalError("noise_multiplier: dp-accounting RDP re-check failed after 100 steps.")
    if check_pld:
        pld_eps = group_epsilon_pld(sigma, sampling_probability=q, num_rounds=t, target_delta=d)
        if pld_eps > eps * (1.0 + 1e-9):
            raise NumericalError(
                f"noise_multiplier: PLD cross-check failed: PLD epsilon {pld_eps:.6g} > target {eps:.6g}."
            )
    return sigma


def paper_group_sigma(
    target_epsilon: float, *, sampling_probability: float, num_rounds: int, target_delta: float
) -> float:
    """Theorem 1 of paper 001 as inferred: σ_g = sqrt(7 q_g² T (ε_g + 2 log(1/δ)) / ε_g²).

    Valid (as a statement of the paper) only for ε_g < 2 log(1/δ). Provenance: [I] (RECOVERED_MATH.md §2.2,
    a strong inference from Fed-SMP's condition; Appendix F was not recovered). NOT sound in general: it
    under-noises when q_g² T is small (docs/planner.md); use :func:`sound_group_sigma` for guarantees.

    Raises:
        ValueError: if ε_g >= 2 log(1/δ) (outside the stated range of the theorem).
    """
    eps = check_positive("target_epsilon", target_epsilon)
    q, t, d = _validate(sampling_probability, num_rounds, target_delta)
    limit = 2.0 * math.log(1.0 / d)
    if eps >= limit:
        raise ValueError(
            f"target_epsilon must be < 2 log(1/delta) = {limit:.6g} for the paper's Theorem 1. Found {eps}."
        )
    return math.sqrt(7.0 * q * q * t * (eps + limit) / (eps * eps))


def group_sigma(
    target_epsilon: float,
    *,
    sampling_probability: float,
    num_rounds: int,
    target_delta: float,
    analysis: str = "sound",
) -> float:
    """σ_g: "sound" (:func:`sound_group_sigma`), "paper" ([I], :func:`paper_group_sigma`)."""
    check_choice("analysis", analysis, ANALYSES)
    if analysis == "paper":
        return paper_group_sigma(
            target_epsilon,
            sampling_probability=sampling_probability,
            num_rounds=num_rounds,
            target_delta=target_delta,
        )
    return sound_group_sigma(
        target_epsilon,
        sampling_probability=sampling_probability,
        num_rounds=num_rounds,
        target_delta=target_delta,
    )


# ------------------------------------------------------------------------------- system, noise, weights


def system_epsilon(group_epsilons: Sequence[float], *, overlaps: Sequence[Sequence[int]] = ()) -> float:
    """System-level ε of GDPFed: Corollary 1 (parallel composition) with Remark 2 for overlaps.

    With pairwise-disjoint client datasets the system is (max_g ε_g, δ)-DP (Corollary 1, Lemma 1 of paper 001,
    provenance [D]). Each entry of ``overlaps`` lists groups whose clients share at least one record; such a
    record costs the sum of those groups' budgets (sequential composition, Remark 2, [I] on notation), so the
    result is max(max_g ε_g, max over overlaps of Σ_{g in overlap} ε_g). A :class:`UserWarning` is emitted
    when overlaps are given. δ composes alike (a record in k groups gets k·δ), which callers must note.
    """
    eps = [check_positive(f"group_epsilons[{i}]", e) for i, e in enumerate(group_epsilons)]
    if not eps:
        raise ValueError("group_epsilons must be non-empty. Found [].")
    result = max(eps)
    for overlap in overlaps:
        members = sorted({check_int("overlaps index", g, minimum=0, maximum=len(eps) - 1) for g in overlap})
        result = max(result, sum(eps[g] for g in members))
    if overlaps:
        warnings.warn(REMARK_2_WARNING, UserWarning, stacklevel=2)
    return result


def expected_noise_energy(
    noise_multiplier: float, *, dim: int, clip_norm: float = 1.0, kappa: float = 1.0
) -> float:
    """E‖ξ_g‖² = κ_g d σ_g² C² of one group's aggregate after top-κ (paper 001 Sec. IV-C, [I]/[D]).

    ``kappa`` = 1 means no sparsification. The κ scaling assumes the kept support does not depend on the
    noise (docs/planner.md, assumption A5).
    """
    sigma = check_nonnegative("noise_multiplier", noise_multiplier)
    d = check_int("dim", dim, minimum=1)
    c = check_positive("clip_norm", clip_norm)
    k = check_range("kappa", kappa, 0.0, 1.0)
    return k * d * sigma * sigma * c * c


def reweighting(sampling_probabilities: Sequence[float], sizes: Sequence[int]) -> np.ndarray:
    """λ_g = q_g N_g / Σ_g' q_g' N_g' (paper 001 Sec. VI-A3, provenance [I]); shape ``[num_groups]``."""
    q = np.array(
        [check_probability(f"sampling_probabilities[{i}]", v) for i, v in enumerate(sampling_probabilities)]
    )
    n = np.array([check_int(f"sizes[{i}]", v, minimum=1) for i, v in enumerate(sizes)], dtype=float)
    if q.size != n.size or q.size == 0:
        raise ValueError(
            f"sampling_probabilities and sizes must have the same non-zero length. Found {q.size}, {n.size}."
        )
    w = q * n
    return np.asarray(w / w.sum(), dtype=float)


def single_round_delta(noise_multiplier: float, *, sampling_probability: float, epsilon: float) -> float:
    """Exact δ(ε) of ONE round of the Poisson-subsampled Gaussian, remove direction (closed form).

    With P = (1−q) N(0, σ²) + q N(1, σ²) and Q = N(0, σ²) (sensitivity 1), the privacy loss is increasing in
    x, exceeds ε exactly for x > x* = σ² log((e^ε − 1 + q)/q) + 1/2, so
    δ = (1−q) Φ̄(x*/σ) + q Φ̄((x*−1)/σ) − e^ε Φ̄(x*/σ). Because the first round is a post-processing of the
    whole T-round transcript, this is a LOWER bound on the T-round δ(ε): a σ with
    ``single_round_delta(σ, ...) > target_delta`` cannot be (ε, δ)-DP after any number of rounds. Used to
    refute the inferred Theorem 1 independently of any accountant. Provenance: [D] (standard computation).
    """
    sigma = check_positive("noise_multiplier", noise_multiplier)
    q = check_probability("sampling_probability", sampling_probability)
    eps = check_nonnegative("epsilon", epsilon)
    x_star = sigma * sigma * (math.log(math.expm1(eps) + q) - math.log(q)) + 0.5
    tail0 = float(special.ndtr(-x_star / sigma))
    tail1 = float(special.ndtr(-(x_star - 1.0) / sigma))
    return max(0.0, (1.0 - q) * tail0 + q * tail1 - math.exp(eps) * tail0)
