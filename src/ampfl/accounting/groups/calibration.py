"""Group client-level DP of GDPFed (paper 001): groups, per-group noise (sound and as inferred), Corollary 1.

Paper 001 (Xu, Hu, Kotevska, "Optimal Client Sampling in Federated Learning with Client-level Heterogeneous
Differential Privacy", arXiv:2505.13655v3) partitions clients by privacy budget; each group ``g`` runs
client-level DP-FedAvg on its own secure-aggregation sum with client sampling rate ``q_g`` and noise
multiplier ``z_g``, calibrated to the smallest budget in the group.

Symbols (paper → names): ``ε_g`` → ``target_epsilon``, ``δ`` → ``target_delta``, ``q_g`` → ``sampling_rate``,
``σ_g`` → ``noise_multiplier`` (noise std of the group sum divided by the per-client clipping norm ``C``),
``T`` → ``rounds``, ``d`` → ``dim``, ``κ_g`` → ``kappa``, ``N_g`` → group size. ε is in nats. Neighbouring
relation: add/remove one client's whole dataset (client level), so the group sum has L2 sensitivity C.

Two analyses of a group's noise:

* ``sound`` (the default): one round of a group is a
  :class:`~ampfl.accounting.events.GroupRoundEvent` (Poisson client sampling at rate q_g, Gaussian noise),
  composed over T rounds by the RDP accountant (the one subsampled-Gaussian RDP kernel and conversion of
  :mod:`ampfl.accounting.rdp`, orders :data:`~ampfl.accounting.orders.DEFAULT_ORDERS`) and calibrated by the
  one :func:`ampfl.accounting.calibrate.calibrate`; optionally re-checked with the PLD accountant.
* ``paper``: the closed form of Theorem 1 as inferred in RECOVERED_MATH.md §2.2 (provenance [I], strong):
  σ_g² ≥ 7 q_g² T (ε_g + 2 log(1/δ)) / ε_g², valid for ε_g < 2 log(1/δ). The paper states it for sampling
  *without replacement*. It is NOT a sound default: for small ``q_g²·T`` it under-noises (docs/planner.md),
  so it is reported only when asked and is always labelled.

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
from ampfl.accounting.calibrate import CALIBRATION_RTOL, calibrate
from ampfl.accounting.events import GroupRoundEvent

__all__ = [
    "ANALYSES",
    "MAX_NOISE_MULTIPLIER",
    "REMARK_2_WARNING",
    "ClientGroups",
    "expected_noise_energy",
    "group_by_edges",
    "group_by_quantiles",
    "group_epsilon",
    "group_sigma",
    "noise_energy",
    "paper_group_sigma",
    "reweighting",
    "sound_group_sigma",
    "system_epsilon",
]

ANALYSES: tuple[str, ...] = ("sound", "paper")

#: Corollary 1 / Remark 2 of paper 001: the system guarantee needs pairwise-disjoint client datasets.
REMARK_2_WARNING = (
    "system_epsilon = max over groups (Corollary 1, parallel composition) assumes pairwise-disjoint client "
    "datasets; a record held by clients of several groups costs the sum of their budgets (Remark 2)."
)

#: Largest noise multiplier the sound calibration searches; beyond it the target is reported unreachable.
MAX_NOISE_MULTIPLIER = 1e6


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


# ------------------------------------------------------------------------------------------ accounting


def _validate(sampling_rate: float, rounds: int, target_delta: float) -> tuple[float, int, float]:
    q = check_probability("sampling_rate", sampling_rate)
    t = check_int("rounds", rounds, minimum=1)
    d = check_delta("target_delta", target_delta)
    return q, t, d


def group_epsilon(
    noise_multiplier: float,
    *,
    sampling_rate: float,
    rounds: int,
    target_delta: float,
    accountant: str = "rdp",
) -> float:
    """ε of one group after ``rounds`` rounds: ``rounds`` × :class:`GroupRoundEvent` in one accountant.

    ``accountant`` is ``"rdp"`` (the sound default of the planner) or ``"pld"`` (tighter; a cross-check).
    """
    from ampfl.accounting.accountants import make_accountant

    z = check_positive("noise_multiplier", noise_multiplier)
    q, t, d = _validate(sampling_rate, rounds, target_delta)
    acc = make_accountant(accountant)
    acc.compose(GroupRoundEvent(sampling_rate=q, noise_multiplier=z), t)
    return float(acc.get_epsilon(d))


@functools.lru_cache(maxsize=4096)
def _sound_cached(
    eps: float,
    q: float,
    t: int,
    delta: float,
    rtol: float,
    initial: float,
    orders: tuple[int, ...] | None,
    step: float,
) -> float:
    return calibrate(
        lambda z: GroupRoundEvent(sampling_rate=q, noise_multiplier=z),
        target_epsilon=eps,
        target_delta=delta,
        count=t,
        upper=MAX_NOISE_MULTIPLIER,
        initial=initial,
        rtol=rtol,
        accountant_kwargs=None if orders is None else {"orders": orders},
        step=step,
    )


def sound_group_sigma(
    target_epsilon: float,
    *,
    sampling_rate: float,
    rounds: int,
    target_delta: float,
    rtol: float = CALIBRATION_RTOL,
    check_pld: bool = False,
    initial: float = 1.0,
    orders: Sequence[int] | None = None,
    step: float = 2.0,
) -> float:
    """Smallest noise multiplier z_g whose RDP accounting gives ε ≤ ``target_epsilon`` at ``target_delta``.

    A thin wrapper over :func:`ampfl.accounting.calibrate.calibrate` for ``rounds`` ×
    :class:`~ampfl.accounting.events.GroupRoundEvent` (Poisson client sampling at rate q_g, add/remove
    client-level neighbours), memoised. The result's RDP ε is ≤ the target and z is within ``rtol`` of the
    smallest such multiplier. ``check_pld`` also checks the (tighter) PLD accountant's ε ≤ target; a failure
    means a bug and raises :class:`NumericalError`. ``orders`` restricts the RDP orders (a sound subset, used
    by the planner's interpolation grid; default: the one grid). ``initial`` and ``step`` start the search
    (a good guess with a small step, e.g. the planner's interpolated value and 1.03, saves probes).

    Raises:
        UnreachableTarget: no z ≤ :data:`MAX_NOISE_MULTIPLIER` meets the target (never returns a cap).
        NumericalError: the PLD cross-check fails.
    """
    eps = check_positive("target_epsilon", target_epsilon)
    q, t, d = _validate(sampling_rate, rounds, target_delta)
    tol = check_range("rtol", rtol, 1e-12, 0.1)
    start = check_positive("initial", initial)
    grid = None if orders is None else tuple(int(a) for a in orders)
    z = _sound_cached(eps, q, t, d, tol, start, grid, check_range("step", step, 1.0 + 1e-9, 100.0))
    if check_pld:
        pld_eps = group_epsilon(z, sampling_rate=q, rounds=t, target_delta=d, accountant="pld")
        if pld_eps > eps * (1.0 + 1e-9):
            raise NumericalError(
                f"noise_multiplier: PLD cross-check failed: PLD epsilon {pld_eps:.6g} > target {eps:.6g}."
            )
    return z


def paper_group_sigma(
    target_epsilon: float, *, sampling_rate: float, rounds: int, target_delta: float
) -> float:
    """Theorem 1 of paper 001 as inferred: z_g = sqrt(7 q_g² T (ε_g + 2 log(1/δ)) / ε_g²) (a multiplier).

    Valid (as a statement of the paper) only for ε_g < 2 log(1/δ). Provenance: [I] (RECOVERED_MATH.md §2.2,
    a strong inference from Fed-SMP's condition; Appendix F was not recovered). NOT sound in general: it
    under-noises when q_g² T is small (docs/planner.md); use :func:`sound_group_sigma` for guarantees.

    Raises:
        ValueError: if ε_g >= 2 log(1/δ) (outside the stated range of the theorem).
    """
    eps = check_positive("target_epsilon", target_epsilon)
    q, t, d = _validate(sampling_rate, rounds, target_delta)
    limit = 2.0 * math.log(1.0 / d)
    if eps >= limit:
        raise ValueError(
            f"target_epsilon must be < 2 log(1/delta) = {limit:.6g} for the paper's Theorem 1. Found {eps}."
        )
    return math.sqrt(7.0 * q * q * t * (eps + limit) / (eps * eps))


def group_sigma(
    target_epsilon: float, *, sampling_rate: float, rounds: int, target_delta: float, analysis: str = "sound"
) -> float:
    """The group's noise multiplier: ``"sound"`` (:func:`sound_group_sigma`) or ``"paper"`` ([I])."""
    which = check_choice("analysis", analysis, ANALYSES)
    fn = paper_group_sigma if which == "paper" else sound_group_sigma
    return fn(target_epsilon, sampling_rate=sampling_rate, rounds=rounds, target_delta=target_delta)


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


def noise_energy(
    noise_multiplier: np.ndarray | float, *, dim: int, clip_norm: float, kappa: np.ndarray | float = 1.0
) -> np.ndarray:
    """E‖ξ‖² = κ d z² C² elementwise (paper 001 Sec. IV-C, [I]/[D]): the one place this is computed.

    Unvalidated, for vectorised callers (the planner's objective); :func:`expected_noise_energy` is the
    validated scalar form. κ = 1 means no sparsification; the κ scaling assumes the kept support does not
    depend on the noise (docs/planner.md, assumption A5).
    """
    z = np.asarray(noise_multiplier, dtype=np.float64)
    return np.asarray(np.asarray(kappa, dtype=np.float64) * dim * z * z * (clip_norm * clip_norm))


def expected_noise_energy(
    noise_multiplier: float, *, dim: int, clip_norm: float = 1.0, kappa: float = 1.0
) -> float:
    """E‖ξ_g‖² = κ_g d z_g² C² of one group's aggregate after top-κ (validated :func:`noise_energy`)."""
    z = check_nonnegative("noise_multiplier", noise_multiplier)
    d = check_int("dim", dim, minimum=1)
    c = check_positive("clip_norm", clip_norm)
    k = check_range("kappa", kappa, 0.0, 1.0)
    return float(noise_energy(z, dim=d, clip_norm=c, kappa=k))


def reweighting(sampling_rates: Sequence[float], sizes: Sequence[int]) -> np.ndarray:
    """λ_g = q_g N_g / Σ_g' q_g' N_g' (paper 001 Sec. VI-A3, provenance [I]); shape ``[num_groups]``."""
    q = np.array([check_probability(f"sampling_rates[{i}]", v) for i, v in enumerate(sampling_rates)])
    n = np.array([check_int(f"sizes[{i}]", v, minimum=1) for i, v in enumerate(sizes)], dtype=float)
    if q.size != n.size or q.size == 0:
        raise ValueError(
            f"sampling_rates and sizes must have the same non-zero length. Found {q.size}, {n.size}."
        )
    w = q * n
    return np.asarray(w / w.sum(), dtype=float)
