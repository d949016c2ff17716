"""GDPFed+ planner: per-group sampling rates (and sparsification levels) under an explicit error model.

Paper 001 (arXiv:2505.13655v3) chooses q_g by minimising "the third and last terms" of its Theorem 2
(Problem 1) and κ_g by Remark 3; neither formula was recoverable (RECOVERED_MATH.md §2.8, [X]). This module
is **ampfl's design**, derived in ``docs/planner.md``: it minimises the error model J(q, κ) of
:mod:`ampfl.accounting.groups.error_model` (the mean squared error of one aggregated update against the
full-participation mean update). An *aggregate* is a set of budget groups that share one secure-aggregation
sum and one noise (calibrated to the smallest budget among them); the planner may merge adjacent budget
groups (``merge="auto"``), always merges equal budgets (unless ``merge="none"``), and with one aggregate,
κ = 1 and q_a = q, J is exactly DP-FedAvg's MSE.

Constraint: Σ_a q_a N_a = qN, ``min_rate`` ≤ q_a ≤ 1. Steps: validate the input; enumerate the contiguous
partitions into aggregates; optimise each (z_a(q) calibrated on a log-spaced q grid per distinct budget
and interpolated monotonically, PCHIP in (log q, log z); grid search then SLSQP from several feasible
starts); report: the chosen plan is re-calibrated exactly and compared, on the exact objective, with
uniform q and with DP-FedAvg at the strictest budget; the best is returned, so the plan is never worse than
either on the model. Every noise multiplier comes from :mod:`ampfl.accounting.groups.calibration`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

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
from ampfl.accounting.groups.calibration import (
    ANALYSES,
    REMARK_2_WARNING,
    group_epsilon,
    noise_energy,
    paper_group_sigma,
    sound_group_sigma,
)
from ampfl.accounting.groups.error_model import ErrorModel, PlanProblem, objective
from ampfl.accounting.groups.noise_curves import (
    SHARED_CURVE_MIN_BUDGETS,
    paper_noise_fn,
    pchip_noise,
    shared_curve_noise,
)
from ampfl.accounting.groups.search import NoiseFn, contiguous_partitions, minimise_objective

__all__ = ["MERGE", "SPARSIFY", "BaselinePlan", "GroupPlan", "plan_groups"]

SPARSIFY: tuple[str, ...] = ("none", "auto", "given")
MERGE: tuple[str, ...] = ("auto", "equal", "none")


@dataclass(frozen=True, slots=True, kw_only=True)
class BaselinePlan:
    """DP-FedAvg at the strictest budget, rate q for everyone, no sparsification."""

    noise_multiplier: float
    expected_noise: float
    objective: float


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupPlan:
    """A GDPFed+ plan; per-group arrays have shape ``[num_groups]`` in the caller's group order."""

    epsilons: np.ndarray
    sizes: np.ndarray
    q: np.ndarray
    noise_multiplier: np.ndarray
    kappa: np.ndarray
    expected_noise: np.ndarray
    weights: np.ndarray
    aggregate: np.ndarray
    aggregate_epsilon: np.ndarray
    epsilon_rdp: np.ndarray
    system_epsilon: float
    objective: float
    terms: dict[str, float]
    #: exact, or above SCREEN_MIN_AGGREGATES aggregates the interpolated value when screening dropped it
    uniform_objective: float
    baseline: BaselinePlan
    analysis: str
    warnings: tuple[str, ...] = field(default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class _Inputs:
    eps: np.ndarray  # [G] budgets, caller order
    n: np.ndarray  # [G] sizes
    kappa: np.ndarray  # [G]
    rate: float
    rounds: int
    delta: float
    model: ErrorModel
    sparsify: str
    analysis: str
    merge: str
    min_rate: float
    num_starts: int
    grid_points: int
    check_pld: bool


# ------------------------------------------------------------------------------------------- validate


def _checked_groups(
    epsilons: Sequence[float], sizes: Sequence[int], participation: float
) -> tuple[np.ndarray, np.ndarray, float]:
    """The budgets ε_g, the sizes N_g and the participation q, checked (q N ≥ 1: one expected participant)."""
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
    return eps, n, rate


def _checked_kappa(sparsify: str, kappa: Sequence[float] | None, groups: int) -> np.ndarray:
    """The per-group κ_g: given (``sparsify="given"``), else all 1 (the planner may lower them)."""
    if sparsify == "given":
        if kappa is None or len(kappa) != groups:
            raise ValueError(f"kappa must list one value per group ({groups}). Found {kappa!r}.")
        return np.array([check_range(f"kappa[{i}]", k, 1e-9, 1.0) for i, k in enumerate(kappa)])
    if kappa is not None:
        raise ValueError("kappa is only allowed with sparsify='given'.")
    return np.ones(groups)


# ------------------------------------------------------------------------------------------- optimise


class _Planner:
    """The sorted groups, their partitions and the noise functions of one :func:`plan_groups` call."""

    def __init__(self, inp: _Inputs, seed: int) -> None:
        self.inp = inp
        self.order = np.argsort(inp.eps, kind="stable")
        self.se, self.sn, self.sk = inp.eps[self.order], inp.n[self.order], inp.kappa[self.order]
        same_kappa = [bool(self.sk[i] == self.sk[i + 1]) for i in range(inp.eps.size - 1)]
        self.forced = [
            inp.merge != "none" and same_kappa[i] and bool(self.se[i] == self.se[i + 1])
            for i in range(inp.eps.size - 1)
        ]
        self.allowed = [inp.merge == "auto" and k for k in same_kappa]
        self.q_grid = np.unique(
            np.concatenate([np.geomspace(inp.min_rate, 1.0, inp.grid_points), [inp.rate]])
        )
        self.fns: dict[float, NoiseFn] = {}
        self.rng = np.random.default_rng(seed)
        budgets = np.unique(inp.eps)
        if inp.analysis != "paper" and budgets.size >= SHARED_CURVE_MIN_BUDGETS:
            self.fns.update(shared_curve_noise(budgets, self.q_grid, inp.rounds, inp.delta) or {})

    def noise_fn(self, budget: float) -> NoiseFn:
        inp = self.inp
        if budget not in self.fns:
            if inp.analysis == "paper":
                self.fns[budget] = paper_noise_fn(budget, inp.rounds, inp.delta)
            else:
                self.fns[budget] = pchip_noise(budget, self.q_grid, inp.rounds, inp.delta)
        return self.fns[budget]

    def exact_noise(self, budget: float, q: float) -> float:
        inp = self.inp
        if inp.analysis == "paper":
            return paper_group_sigma(budget, sampling_rate=q, rounds=inp.rounds, target_delta=inp.delta)
        # the search's interpolated value is within a few percent: start there with a small bracket step
        guess = float(self.noise_fn(budget)(np.array([q]))[0])
        return sound_group_sigma(
            budget,
            sampling_rate=q,
            rounds=inp.rounds,
            target_delta=inp.delta,
            initial=guess if math.isfinite(guess) and guess > 0 else 1.0,
            step=1.03,
        )

    def problem(self, parts: list[list[int]]) -> PlanProblem:
        return PlanProblem(
            sizes=np.array([self.sn[p].sum() for p in parts]),
            budgets=np.array([self.se[p[0]] for p in parts]),
            kappa=np.array([self.sk[p[0]] for p in parts]),
            sparsify=self.inp.sparsify,
            total=int(self.inp.n.sum()),
            rate=self.inp.rate,
            model=self.inp.model,
        )

    def search(self) -> tuple[list[list[int]], np.ndarray]:
        """The best (partition, rates) on the interpolated objective."""
        best: tuple[float, list[list[int]], np.ndarray] | None = None
        for parts in contiguous_partitions(self.forced, self.allowed):
            prob = self.problem(parts)
            fns = [self.noise_fn(float(b)) for b in prob.budgets]
            q_opt, val = minimise_objective(prob, fns, self.inp.min_rate, self.inp.num_starts, self.rng)
            if best is None or val < best[0] - 1e-12 * abs(val):
                best = (val, parts, q_opt)
        assert best is not None
        return best[1], best[2]

    def approx_objective(self, parts: list[list[int]], q: np.ndarray) -> float:
        """The objective with the search's interpolated noise (no calibration)."""
        prob = self.problem(parts)
        z = np.array(
            [float(self.noise_fn(float(b))(np.array([v]))[0]) for b, v in zip(prob.budgets, q, strict=True)]
        )
        return float(objective(q, z, prob)[0])

    def exact(
        self, parts: list[list[int]], q: np.ndarray
    ) -> tuple[float, np.ndarray, np.ndarray, dict[str, float]]:
        """Exact objective with exactly calibrated noise: (J, z per aggregate, κ per aggregate, terms)."""
        prob = self.problem(parts)
        z = np.array([self.exact_noise(float(b), float(v)) for b, v in zip(prob.budgets, q, strict=True)])
        val, kappa_a, terms = objective(q, z, prob)
        return float(val), z, kappa_a, {k: float(v) for k, v in terms.items()}

    def baseline(self) -> BaselinePlan:
        """DP-FedAvg at the strictest budget: one aggregate at rate q, κ = 1."""
        inp = self.inp
        z = self.exact_noise(float(inp.eps.min()), inp.rate)
        prob = PlanProblem(
            sizes=np.array([inp.n.sum()]),
            budgets=np.array([inp.eps.min()]),
            kappa=None,
            sparsify="none",
            total=int(inp.n.sum()),
            rate=inp.rate,
            model=inp.model,
        )
        val = float(objective(np.array([inp.rate]), np.array([z]), prob)[0])
        energy = float(noise_energy(z, dim=inp.model.dim, clip_norm=inp.model.clip_norm))
        return BaselinePlan(noise_multiplier=z, expected_noise=energy, objective=val)


# -------------------------------------------------------------------------------------------- report


#: The PLD cross-check of a plan self-composes one PLD per round count; above this many rounds its cost (the
#: support grows with T) outweighs a check of a bound the RDP accountant already certifies.
PLD_CHECK_MAX_ROUNDS = 10_000
#: ... and above this many aggregates (each check costs ~0.1 s; 1000 groups with ``merge="none"`` would spend
#: minutes re-checking bounds the RDP accountant certifies).
PLD_CHECK_MAX_AGGREGATES = 20
#: From this many aggregates, candidate plans are screened on the interpolated objective first: only those
#: within SCREEN_MARGIN (relative) of the best are calibrated exactly (the interpolation is within ~1%).
SCREEN_MIN_AGGREGATES = 50
SCREEN_MARGIN = 1.05


def _report(pl: _Planner, parts: list[list[int]], q_opt: np.ndarray) -> GroupPlan:
    inp = pl.inp
    candidates = [(parts, q_opt), (parts, np.full(len(parts), inp.rate))]
    if all(f or a for f, a in zip(pl.forced, pl.allowed, strict=True)):  # DP-FedAvg-like: one aggregate
        candidates.append(([list(range(inp.eps.size))], np.array([inp.rate])))
    if len(parts) >= SCREEN_MIN_AGGREGATES:
        # Many aggregates: each exact candidate costs one calibration per aggregate. Screen on the search's
        # interpolated objective and calibrate exactly only the candidates within SCREEN_MARGIN of the best.
        approx = [pl.approx_objective(p, q) for p, q in candidates]
        candidates = [c for c, v in zip(candidates, approx, strict=True) if v <= min(approx) * SCREEN_MARGIN]
    scored = [(pl.exact(p, q), p, q) for p, q in candidates]
    (val, z_a, kappa_a, terms), parts, q_a = min(scored, key=lambda s: s[0][0])
    uniform = np.full(len(parts), inp.rate)
    if any(len(p) == len(parts) and np.array_equal(q, uniform) for p, q in candidates):
        uniform_val = pl.exact(parts, uniform)[0]
    else:  # screened out: its interpolated objective (the plan beats it by more than the margin there)
        uniform_val = pl.approx_objective(parts, uniform)
    energy_a = noise_energy(z_a, dim=inp.model.dim, clip_norm=inp.model.clip_norm, kappa=kappa_a)

    g = inp.eps.size
    out = {k: np.zeros(g) for k in ("q", "z", "kappa", "noise", "weight", "agg_eps", "eps_rdp")}
    agg = np.zeros(g, dtype=np.int64)
    cohort = inp.rate * float(inp.n.sum())
    warn = [REMARK_2_WARNING]
    for a, p in enumerate(parts):
        members = pl.order[p]
        n_a = float(pl.sn[p].sum())
        budget = float(pl.se[p[0]])

        def eps_of(accountant: str, a: int = a) -> float:
            return group_epsilon(
                float(z_a[a]),
                sampling_rate=float(q_a[a]),
                rounds=inp.rounds,
                target_delta=inp.delta,
                accountant=accountant,
            )

        e_rdp = eps_of("rdp")
        if (
            inp.analysis == "sound"
            and inp.check_pld
            and inp.rounds <= PLD_CHECK_MAX_ROUNDS
            and len(parts) <= PLD_CHECK_MAX_AGGREGATES
        ):
            e_pld = eps_of("pld")
            if e_pld > budget * (1.0 + 1e-9):
                raise NumericalError(
                    f"noise_multiplier: PLD check failed for aggregate {a}: {e_pld:.6g} > {budget:.6g}."
                )
        if inp.analysis == "paper" and e_rdp > budget:
            warn.append(
                f"analysis 'paper' (inferred Theorem 1) under-noises aggregate {a}: at noise multiplier "
                f"{z_a[a]:.4g}, q={q_a[a]:.4g} the RDP accountant certifies only epsilon={e_rdp:.4g} > "
                f"{budget:.4g}."
            )
        for i in members:
            agg[i] = a
            out["q"][i] = q_a[a]
            out["z"][i] = z_a[a]
            out["kappa"][i] = kappa_a[a]
            out["noise"][i] = energy_a[a] * inp.n[i] / n_a
            out["weight"][i] = q_a[a] * inp.n[i] / cohort
            out["agg_eps"][i] = budget
            out["eps_rdp"][i] = e_rdp
    return GroupPlan(
        epsilons=inp.eps,
        sizes=inp.n,
        q=out["q"],
        noise_multiplier=out["z"],
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
        baseline=pl.baseline(),
        analysis=inp.analysis,
        warnings=tuple(warn),
    )


def plan_groups(
    epsilons: Sequence[float],
    sizes: Sequence[int],
    *,
    participation: float,
    rounds: int,
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
    """Plan GDPFed+ (per-group q_g, z_g, κ_g) minimising the error model J subject to Σ q_g N_g = qN.

    Args:
        epsilons: group budgets ε_g > 0, shape ``[num_groups]``.
        sizes: group sizes N_g >= 1, shape ``[num_groups]``.
        participation: global participation ratio q in (0, 1] (the expected cohort is qN).
        rounds: T >= 1.
        target_delta: δ in (0, 1).
        model: the error model's constants (:class:`ErrorModel`).
        sparsify: ``"none"`` (κ = 1), ``"auto"`` (κ minimising J per aggregate) or ``"given"`` (``kappa``).
        kappa: per-group κ_g in (0, 1] when ``sparsify="given"``.
        analysis: ``"sound"`` (default; RDP accountant) or ``"paper"`` (inferred Theorem 1, [I], can
            under-noise; labelled and warned about).
        min_rate: q_min in (0, q]; default q / 10.
        merge: ``"auto"`` (may merge adjacent budget groups into one aggregate), ``"equal"`` (only equal
            budgets), ``"none"``.
        num_starts: random feasible starts besides the uniform one.
        grid_points: q-grid size per budget for the interpolated z(q) (sound analysis).
        seed: seed of the start points.
        check_pld: cross-check every final sound z with the PLD accountant (ε_PLD ≤ ε_g); skipped above
            :data:`PLD_CHECK_MAX_AGGREGATES` aggregates or :data:`PLD_CHECK_MAX_ROUNDS` rounds.

    Raises:
        ValueError: on invalid input (one line naming the parameter).
        UnreachableTarget: a budget cannot be met by any noise multiplier up to the calibration's limit.
        NumericalError: the PLD cross-check disagrees.
    """
    eps, n, rate = _checked_groups(epsilons, sizes, participation)
    t = check_int("rounds", rounds, minimum=1)
    delta = check_delta("target_delta", target_delta)
    check_choice("analysis", analysis, ANALYSES)
    check_choice("sparsify", sparsify, SPARSIFY)
    check_choice("merge", merge, MERGE)
    lo = rate / 10.0 if min_rate is None else check_probability("min_rate", min_rate)
    if lo > rate:
        raise ValueError(f"min_rate must be in (0, participation={rate}]. Found {lo}.")
    kap = _checked_kappa(sparsify, kappa, eps.size)
    if analysis == "paper":
        limit = 2.0 * math.log(1.0 / delta)
        if np.any(eps >= limit):
            raise ValueError(
                f"epsilons must be < 2 log(1/delta) = {limit:.6g} for analysis 'paper'. Found {eps.max()}."
            )
    inp = _Inputs(
        eps=eps,
        n=n,
        kappa=kap,
        rate=rate,
        rounds=t,
        delta=delta,
        model=model,
        sparsify=sparsify,
        analysis=analysis,
        merge=merge,
        min_rate=lo,
        num_starts=check_int("num_starts", num_starts, minimum=0),
        grid_points=check_int("grid_points", grid_points, minimum=2),
        check_pld=bool(check_pld),
    )
    planner = _Planner(inp, seed)
    parts, q_opt = planner.search()
    return _report(planner, parts, q_opt)
