"""GDPFed+ planner: per-group sampling rates (and sparsification levels) under an explicit error model.

Paper 001 (arXiv:2505.13655v3) chooses q_g by minimising "the third and last terms" of its Theorem 2
(Problem 1) and κ_g by Remark 3; neither formula was recoverable (RECOVERED_MATH.md §2.8, [X]). This module
is **ampfl's design**, derived in ``docs/planner.md``: it minimises the error model J(q, κ) of
:mod:`ampfl.accounting.group_error_model` (the mean squared error of one aggregated update against the
full-participation mean update; :class:`ErrorModel` holds its constants and is re-exported here). An
*aggregate* is a set of budget groups that share one secure-aggregation sum and one noise (calibrated to the
smallest budget among them); the planner may merge adjacent budget groups (``merge="auto"``), always merges
equal budgets (unless ``merge="none"``), and with one aggregate, κ = 1 and q_a = q, J is exactly
DP-FedAvg's MSE.

Constraint: Σ_a q_a N_a = qN, ``min_rate`` ≤ q_a ≤ 1. Solved by SLSQP from several feasible starts; σ_a(q)
is calibrated on a log-spaced q grid per distinct budget and interpolated monotonically (PCHIP in
log q, log σ) inside the search; the chosen plan is then re-calibrated exactly and compared, on the exact
objective, with uniform q and with DP-FedAvg at the strictest budget; the best of these is returned, so the
plan is never worse than either on the model.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import interpolate, optimize

from ampfl.accounting._checks import (
    NumericalError,
    check_choice,
    check_delta,
    check_int,
    check_positive,
    check_probability,
    check_range,
)
from ampfl.accounting.group_error_model import OMEGA_MODELS, ErrorModel, _objective, _Problem
from ampfl.accounting.groups import (
    ANALYSES,
    REMARK_2_WARNING,
    group_epsilon_pld,
    group_epsilon_rdp,
    paper_group_sigma,
    sound_group_sigma,
)

__all__ = [
    "MERGE",
    "OMEGA_MODELS",
    "SPARSIFY",
    "BaselinePlan",
    "ErrorModel",
    "GroupPlan",
    "plan_groups",
]

SPARSIFY: tuple[str, ...] = ("none", "auto", "given")
MERGE: tuple[str, ...] = ("auto", "equal", "none")
_MAX_PARTITIONS = 512


@dataclass(frozen=True, slots=True, kw_only=True)
class BaselinePlan:
    """DP-FedAvg at the strictest budget, rate q for everyone, no sparsification."""

    sigma: float
    expected_noise: float
    objective: float


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupPlan:
    """A GDPFed+ plan; per-group arrays have shape ``[num_groups]`` in the caller's group order."""

    epsilons: np.ndarray
    sizes: np.ndarray
    q: np.ndarray
    sigma: np.ndarray
    kappa: np.ndarray
    expected_noise: np.ndarray
    weights: np.ndarray
    aggregate: np.ndarray
    aggregate_epsilon: np.ndarray
    epsilon_rdp: np.ndarray
    system_epsilon: float
    objective: float
    terms: dict[str, float]
    uniform_objective: float
    baseline: BaselinePlan
    analysis: str
    warnings: tuple[str, ...] = field(default=())


SigmaFn = Callable[[np.ndarray], np.ndarray]


def _pchip_sigma(eps: float, q_grid: np.ndarray, num_rounds: int, delta: float) -> SigmaFn:
    """σ(q) for one budget: sound calibration on ``q_grid``, PCHIP in (log q, log σ) between the points.

    PCHIP preserves the monotonicity of the data, and the data are made non-decreasing (a running max of
    calibrated values, each within rtol of the truth), so the interpolant increases with q like σ does.
    Only the search uses it; the final plan is calibrated exactly.
    """
    sig = []
    start = 1.0
    for q in q_grid:
        s = sound_group_sigma(
            eps,
            sampling_probability=float(q),
            num_rounds=num_rounds,
            target_delta=delta,
            rtol=1e-4,
            verify=False,
            initial=start,
        )
        sig.append(s)
        start = s
    log_sig = np.maximum.accumulate(np.log(np.asarray(sig)))
    if q_grid.size == 1:
        return lambda q: np.full(np.shape(q), float(np.exp(log_sig[0])))
    spline = interpolate.PchipInterpolator(np.log(q_grid), log_sig, extrapolate=True)
    return lambda q: np.asarray(np.exp(spline(np.log(np.maximum(q, 1e-300)))), dtype=float)


def _paper_sigma_fn(eps: float, num_rounds: int, delta: float) -> SigmaFn:
    """σ(q) = q · sqrt(7 T (ε + 2 log(1/δ))) / ε: Theorem 1 of 001 as inferred ([I]), vectorised."""
    factor = math.sqrt(7.0 * num_rounds * (eps + 2.0 * math.log(1.0 / delta))) / eps

    def fn(q: np.ndarray) -> np.ndarray:
        return np.asarray(factor * np.asarray(q, dtype=float), dtype=float)

    return fn


def _partitions(forced: list[bool], allowed: list[bool]) -> list[list[list[int]]]:
    """Contiguous partitions of sorted groups: ``forced[i]`` joins i and i+1, ``allowed[i]`` may join them."""
    num = len(forced) + 1
    free = [i for i in range(num - 1) if allowed[i] and not forced[i]]
    choices: list[list[bool]] = []
    if 2 ** len(free) <= _MAX_PARTITIONS:
        for bits in itertools.product([False, True], repeat=len(free)):
            joined = list(forced)
            for i, b in zip(free, bits, strict=True):
                joined[i] = b
            choices.append(joined)
    else:  # too many: only "no optional merge" and "every allowed merge"
        choices = [list(forced), [f or a for f, a in zip(forced, allowed, strict=True)]]
    out = []
    for joined in choices:
        parts, current = [], [0]
        for i in range(1, num):
            if joined[i - 1]:
                current.append(i)
            else:
                parts.append(current)
                current = [i]
        parts.append(current)
        out.append(parts)
    return out


def _project(u: np.ndarray, sizes: np.ndarray, target: float, lo: float) -> np.ndarray:
    """Point of [lo, 1]^A with Σ q N = target of the form clip(u + t, lo, 1) (bisection on t)."""
    a, b = -1.0 - float(u.max()), 1.0 - float(u.min()) + 1.0
    for _ in range(200):
        t = 0.5 * (a + b)
        if float(np.sum(np.clip(u + t, lo, 1.0) * sizes)) < target:
            a = t
        else:
            b = t
    return np.asarray(np.clip(u + b, lo, 1.0), dtype=float)


def _simplex_grid(sizes: np.ndarray, target: float, lo: float, points: int) -> np.ndarray:
    """Feasible plans on a grid: the first A−1 rates on ``points`` levels, the last one solved for."""
    levels = np.linspace(lo, 1.0, points)
    mesh = np.stack(np.meshgrid(*([levels] * (sizes.size - 1)), indexing="ij"), axis=-1).reshape(
        -1, sizes.size - 1
    )
    last = (target - mesh @ sizes[:-1]) / sizes[-1]
    ok = (last >= lo) & (last <= 1.0)
    return np.concatenate([mesh[ok], last[ok, None]], axis=1)


def _optimise(
    prob: _Problem, sigma_fns: list[SigmaFn], lo: float, num_starts: int, rng: np.random.Generator
) -> tuple[np.ndarray, float]:
    """Global-ish minimum of J on the constraint set: grid search (A ≤ 4), then SLSQP from several starts."""
    sizes = prob.sizes.astype(float)
    target = prob.rate * prob.total
    uniform = np.full(sizes.size, prob.rate)

    def batch(q: np.ndarray) -> np.ndarray:
        qq = np.clip(q, lo, 1.0)
        sig = np.stack([fn(qq[..., a]) for a, fn in enumerate(sigma_fns)], axis=-1)
        return _objective(qq, sig, prob)[0]

    if sizes.size == 1:
        return uniform, float(batch(uniform))
    scale = float(batch(uniform)) or 1.0

    def f(q: np.ndarray) -> float:
        return float(batch(q)) / scale

    starts = [uniform] + [
        _project(rng.uniform(lo, 1.0, sizes.size), sizes, target, lo) for _ in range(num_starts)
    ]
    if sizes.size <= 4:
        grid = _simplex_grid(sizes, target, lo, {2: 2001, 3: 161, 4: 41}[sizes.size])
        if grid.size:
            values = batch(grid)
            starts += [grid[i] for i in np.argsort(values)[: max(3, num_starts)]]
    best_q, best_f = uniform, f(uniform)
    cons = [{"type": "eq", "fun": lambda q: (float(q @ sizes) - target) / target}]
    for x0 in starts:
        if f(x0) < best_f:
            best_q, best_f = x0, f(x0)
        res = optimize.minimize(
            f,
            x0,
            method="SLSQP",
            bounds=[(lo, 1.0)] * sizes.size,
            constraints=cons,
            options={"maxiter": 300, "ftol": 1e-10},
        )
        q = _project(np.asarray(res.x, dtype=float), sizes, target, lo)  # repair to exact feasibility
        val = f(q)
        if val < best_f:
            best_q, best_f = q, val
    return best_q, best_f * scale


def plan_groups(
    epsilons: Sequence[float],
    sizes: Sequence[int],
    *,
    participation: float,
    num_rounds: int,
    target_delta: float,
    model: ErrorModel,
    sparsify: str = "none",
    kappa: Sequence[float] | None = None,
    analysis: str = "sound",
    min_rate: float | None = None,
    merge: str = "auto",
    num_starts: int = 6,
    grid_points: int = 12,
    seed: int = 0,
    check_pld: bool = True,
) -> GroupPlan:
    """Plan GDPFed+ (per-group q_g, σ_g, κ_g) minimising the error model J subject to Σ q_g N_g = qN.

    Args:
        epsilons: group budgets ε_g > 0, shape ``[num_groups]``.
        sizes: group sizes N_g >= 1, shape ``[num_groups]``.
        participation: global participation ratio q in (0, 1].
        num_rounds: T >= 1.
        target_delta: δ in (0, 1).
        model: the error model's constants (:class:`ErrorModel`).
        sparsify: ``"none"`` (κ = 1), ``"auto"`` (κ minimising J per aggregate) or ``"given"`` (``kappa``).
        kappa: per-group κ_g in (0, 1] when ``sparsify="given"``.
        analysis: ``"sound"`` (default; dp-accounting RDP) or ``"paper"`` (inferred Theorem 1, [I], can
            under-noise; labelled and warned about).
        min_rate: q_min in (0, q]; default q / 10.
        merge: ``"auto"`` (may merge adjacent budget groups into one aggregate), ``"equal"`` (only equal
            budgets), ``"none"``.
        num_starts: random feasible starts besides the uniform one.
        grid_points: q-grid size per budget for the interpolated σ(q) (sound analysis).
        seed: seed of the start points.
        check_pld: cross-check every final sound σ with dp-accounting's PLD accountant (ε_PLD ≤ ε_g).

    Raises:
        ValueError: on invalid input (one line naming the parameter).
        NumericalError: if a calibration fails or the PLD cross-check disagrees.
    """
    eps = np.array([check_positive(f"epsilons[{i}]", e) for i, e in enumerate(epsilons)])
    n = np.array([check_int(f"sizes[{i}]", s, minimum=1) for i, s in enumerate(sizes)], dtype=np.int64)
    if eps.size == 0 or eps.size != n.size:
        raise ValueError(
            f"epsilons and sizes must have the same non-zero length. Found {eps.size} and {n.size}."
        )
    rate = check_probability("participation", participation)
    if rate * float(n.sum()) < 1.0:
        # Fewer than one expected participant per round: every error term diverges (no update is formed).
        raise ValueError(
            f"participation must be at least 1/(total clients) = {1.0 / float(n.sum()):.3g} so that one "
            f"client takes part per round on average. Found {rate}."
        )
    t = check_int("num_rounds", num_rounds, minimum=1)
    delta = check_delta("target_delta", target_delta)
    check_choice("analysis", analysis, ANALYSES)
    check_choice("sparsify", sparsify, SPARSIFY)
    check_choice("merge", merge, MERGE)
    lo = rate / 10.0 if min_rate is None else check_probability("min_rate", min_rate)
    if lo > rate:
        raise ValueError(f"min_rate must be in (0, participation={rate}]. Found {lo}.")
    starts = check_int("num_starts", num_starts, minimum=0)
    points = check_int("grid_points", grid_points, minimum=2)
    if sparsify == "given":
        if kappa is None or len(kappa) != eps.size:
            raise ValueError(f"kappa must list one value per group ({eps.size}). Found {kappa!r}.")
        kap = np.array([check_range(f"kappa[{i}]", k, 1e-9, 1.0) for i, k in enumerate(kappa)])
    elif kappa is not None:
        raise ValueError("kappa is only allowed with sparsify='given'.")
    else:
        kap = np.ones(eps.size)
    if analysis == "paper":
        limit = 2.0 * math.log(1.0 / delta)
        if np.any(eps >= limit):
            raise ValueError(
                f"epsilons must be < 2 log(1/delta) = {limit:.6g} for analysis 'paper'. Found {eps.max()}."
            )

    order = np.argsort(eps, kind="stable")
    se, sn, sk = eps[order], n[order], kap[order]
    same_kappa = [bool(sk[i] == sk[i + 1]) for i in range(eps.size - 1)]
    forced = [merge != "none" and same_kappa[i] and bool(se[i] == se[i + 1]) for i in range(eps.size - 1)]
    allowed = [merge == "auto" and k for k in same_kappa]
    parts_list = _partitions(forced, allowed)

    def exact_sigma(budget: float, q: float) -> float:
        if analysis == "paper":
            return paper_group_sigma(budget, sampling_probability=q, num_rounds=t, target_delta=delta)
        return sound_group_sigma(budget, sampling_probability=q, num_rounds=t, target_delta=delta)

    fns: dict[float, SigmaFn] = {}
    q_grid = np.unique(np.concatenate([np.geomspace(lo, 1.0, points), [rate]]))

    def sigma_fn(budget: float) -> SigmaFn:
        if budget not in fns:
            if analysis == "paper":
                fns[budget] = _paper_sigma_fn(budget, t, delta)
            else:
                fns[budget] = _pchip_sigma(budget, q_grid, t, delta)
        return fns[budget]

    def problem(parts: list[list[int]]) -> _Problem:
        return _Problem(
            sizes=np.array([sn[p].sum() for p in parts]),
            budgets=np.array([se[p[0]] for p in parts]),
            kappa=np.array([sk[p[0]] for p in parts]),
            sparsify=sparsify,
            total=int(n.sum()),
            rate=rate,
            model=model,
        )

    rng = np.random.default_rng(seed)
    best: tuple[float, list[list[int]], np.ndarray] | None = None
    for parts in parts_list:
        prob = problem(parts)
        q_opt, val = _optimise(prob, [sigma_fn(float(b)) for b in prob.budgets], lo, starts, rng)
        if best is None or val < best[0] - 1e-12 * abs(val):
            best = (val, parts, q_opt)
    assert best is not None
    _, parts, q_opt = best

    def exact(
        parts: list[list[int]], q: np.ndarray
    ) -> tuple[float, np.ndarray, np.ndarray, dict[str, float]]:
        prob = problem(parts)
        sig = np.array([exact_sigma(float(b), float(v)) for b, v in zip(prob.budgets, q, strict=True)])
        val, kappa_a, terms = _objective(q, sig, prob)
        return float(val), sig, kappa_a, {k: float(v) for k, v in terms.items()}

    candidates = [(parts, q_opt), (parts, np.full(len(parts), rate))]
    if all(f or a for f, a in zip(forced, allowed, strict=True)):  # DP-FedAvg-like: one aggregate, rate q
        candidates.append(([list(range(eps.size))], np.array([rate])))
    scored = [(exact(p, q), p, q) for p, q in candidates]
    (val, sig_a, kappa_a, terms), parts, q_a = min(scored, key=lambda s: s[0][0])
    uniform_val = exact(parts, np.full(len(parts), rate))[0]

    base_sigma = exact_sigma(float(eps.min()), rate)
    base_prob = _Problem(
        sizes=np.array([n.sum()]),
        budgets=np.array([eps.min()]),
        kappa=None,
        sparsify="none",
        total=int(n.sum()),
        rate=rate,
        model=model,
    )
    base_val = float(_objective(np.array([rate]), np.array([base_sigma]), base_prob)[0])
    c2 = model.clip_norm**2
    baseline = BaselinePlan(
        sigma=base_sigma, expected_noise=model.dim * base_sigma**2 * c2, objective=base_val
    )

    g = eps.size
    out = {k: np.zeros(g) for k in ("q", "sigma", "kappa", "noise", "weight", "agg_eps", "eps_rdp")}
    agg = np.zeros(g, dtype=np.int64)
    cohort = rate * float(n.sum())
    warn = [REMARK_2_WARNING]
    for a, p in enumerate(parts):
        members = order[p]
        n_a = float(sn[p].sum())
        e_rdp = group_epsilon_rdp(
            float(sig_a[a]), sampling_probability=float(q_a[a]), num_rounds=t, target_delta=delta
        )
        if analysis == "sound" and check_pld:
            e_pld = group_epsilon_pld(
                float(sig_a[a]), sampling_probability=float(q_a[a]), num_rounds=t, target_delta=delta
            )
            if e_pld > se[p[0]] * (1.0 + 1e-9):
                raise NumericalError(
                    f"noise_multiplier: PLD check failed for aggregate {a}: {e_pld:.6g} > {se[p[0]]:.6g}."
                )
        if analysis == "paper" and e_rdp > se[p[0]]:
            warn.append(
                f"analysis 'paper' (inferred Theorem 1) under-noises aggregate {a}: at sigma={sig_a[a]:.4g}, "
                f"q={q_a[a]:.4g} dp-accounting RDP certifies only epsilon={e_rdp:.4g} > {se[p[0]]:.4g}."
            )
        for i in members:
            agg[i] = a
            out["q"][i] = q_a[a]
            out["sigma"][i] = sig_a[a]
            out["kappa"][i] = kappa_a[a]
            out["noise"][i] = kappa_a[a] * model.dim * sig_a[a] ** 2 * c2 * n[i] / n_a
            out["weight"][i] = q_a[a] * n[i] / cohort
            out["agg_eps"][i] = se[p[0]]
            out["eps_rdp"][i] = e_rdp
    return GroupPlan(
        epsilons=eps,
        sizes=n,
        q=out["q"],
        sigma=out["sigma"],
        kappa=out["kappa"],
        expected_noise=out["noise"],
        weights=out["weight"],
        aggregate=agg,
        aggregate_epsilon=out["agg_eps"],
        epsilon_rdp=out["eps_rdp"],
        system_epsilon=float(out["agg_eps"].max()),
        objective=val,
        terms=terms,
        uniform_objective=uniform_val,
        baseline=baseline,
        analysis=analysis,
        warnings=tuple(warn),
    )
