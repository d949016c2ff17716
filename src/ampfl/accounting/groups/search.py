"""The GDPFed+ planner's search (ampfl's design, docs/planner.md): partitions into aggregates, and a
global-ish minimisation of the error model J over the constraint Σ_a q_a N_a = qN, min_rate ≤ q_a ≤ 1.

Used by :func:`ampfl.accounting.groups.planner.plan_groups`; the noise multipliers come in as functions of q
(an interpolant of sound calibrations), so nothing here is a privacy computation.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
from scipy import optimize

from ampfl.accounting._numerics import find_root
from ampfl.accounting.groups.error_model import PlanProblem, contributions, objective

__all__ = ["NoiseFn", "contiguous_partitions", "minimise_objective", "project_onto_constraint"]

NoiseFn = Callable[[np.ndarray], np.ndarray]
_MAX_PARTITIONS = 512
#: Above this many aggregates the search uses the separable dual method (:func:`_dual_search`) instead of
#: SLSQP from several starts (whose finite-difference gradients cost A² noise evaluations each).
DUAL_MIN_AGGREGATES = 16
_DUAL_GRID = 801


def contiguous_partitions(forced: list[bool], allowed: list[bool]) -> list[list[list[int]]]:
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


def project_onto_constraint(u: np.ndarray, sizes: np.ndarray, target: float, lo: float) -> np.ndarray:
    """Point of [lo, 1]^A with Σ q N = target of the form clip(u + t, lo, 1) (bisection on t).

    The bracket (every rate at ``lo``, every rate at 1) is checked: a target outside [lo·ΣN, ΣN] raises
    :class:`~ampfl.accounting._checks.NumericalError`. The end with Σ q N ≥ target is returned.
    """
    a, b = -1.0 - float(u.max()), 1.0 - float(u.min()) + 1.0
    t = find_root(
        lambda s: float(np.sum(np.clip(u + s, lo, 1.0) * sizes)) - target,
        a,
        b,
        xtol=1e-15,
        rtol=0.0,
        end="upper",
        name="project_onto_constraint (shift t)",
    )
    return np.asarray(np.clip(u + t, lo, 1.0), dtype=float)


def _simplex_grid(sizes: np.ndarray, target: float, lo: float, points: int) -> np.ndarray:
    """Feasible plans on a grid: the first A−1 rates on ``points`` levels, the last one solved for."""
    levels = np.linspace(lo, 1.0, points)
    mesh = np.stack(np.meshgrid(*([levels] * (sizes.size - 1)), indexing="ij"), axis=-1).reshape(
        -1, sizes.size - 1
    )
    last = (target - mesh @ sizes[:-1]) / sizes[-1]
    ok = (last >= lo) & (last <= 1.0)
    return np.concatenate([mesh[ok], last[ok, None]], axis=1)


def minimise_objective(
    prob: PlanProblem, noise_fns: list[NoiseFn], lo: float, num_starts: int, rng: np.random.Generator
) -> tuple[np.ndarray, float]:
    """Global-ish minimum of J on the constraint set: grid search (A ≤ 4), then SLSQP from several starts."""
    sizes = prob.sizes.astype(float)
    target = prob.rate * prob.total
    uniform = np.full(sizes.size, prob.rate)

    def batch(q: np.ndarray) -> np.ndarray:
        qq = np.clip(q, lo, 1.0)
        sig = np.stack([fn(qq[..., a]) for a, fn in enumerate(noise_fns)], axis=-1)
        return objective(qq, sig, prob)[0]

    if sizes.size == 1:
        return uniform, float(batch(uniform))
    if sizes.size >= DUAL_MIN_AGGREGATES:
        q = _dual_search(prob, noise_fns, lo, target)
        candidates = [uniform, q]
        values = [float(batch(c)) for c in candidates]
        best = int(np.argmin(values))
        return candidates[best], values[best]
    scale = float(batch(uniform)) or 1.0

    def f(q: np.ndarray) -> float:
        return float(batch(q)) / scale

    starts = [uniform] + [
        project_onto_constraint(rng.uniform(lo, 1.0, sizes.size), sizes, target, lo)
        for _ in range(num_starts)
    ]
    if sizes.size <= 4:
        grid = _simplex_grid(sizes, target, lo, {2: 2001, 3: 161, 4: 41}[sizes.size])
        if grid.size:
            grid_values = batch(grid)
            starts += [grid[i] for i in np.argsort(grid_values)[: max(3, num_starts)]]
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
        q = project_onto_constraint(
            np.asarray(res.x, dtype=float), sizes, target, lo
        )  # repair to exact feasibility
        val = f(q)
        if val < best_f:
            best_q, best_f = q, val
    return best_q, best_f * scale


def _dual_search(prob: PlanProblem, noise_fns: list[NoiseFn], lo: float, target: float) -> np.ndarray:
    """Minimise the separable J = Σ_a g_a(q_a) subject to Σ_a N_a q_a = target by its Lagrange dual.

    For a multiplier μ each aggregate independently takes q_a(μ) = argmin over a grid of [lo, 1] of
    g_a(q) + μ N_a q (vectorised: ``[A, P]``); Σ N_a q_a(μ) decreases with μ, so bisection on μ meets the
    constraint, and :func:`project_onto_constraint` repairs the grid's rounding. Optimal when every g_a is
    convex on the grid; a good start otherwise (the caller keeps the better of it and the uniform plan).
    """
    sizes = prob.sizes.astype(float)
    grid = np.geomspace(lo, 1.0, _DUAL_GRID)
    sig = np.stack([fn(grid) for fn in noise_fns], axis=1)  # [P, A]
    g = contributions(np.broadcast_to(grid[:, None], sig.shape), sig, prob)[0].T  # [A, P]
    slope = np.abs(np.diff(g, axis=1)).max() / max(float(np.diff(grid).min()), 1e-300) / sizes.min()

    def rates(mu: float) -> np.ndarray:
        return np.asarray(grid[np.argmin(g + mu * sizes[:, None] * grid[None, :], axis=1)])

    high = find_root(  # Σ N_a q_a(μ) − target: a decreasing step function of μ
        lambda mu: float(rates(mu) @ sizes) - target,
        -slope - 1.0,
        slope + 1.0,
        xtol=1e-13 * (slope + 1.0),
        rtol=0.0,
        end="upper",
        name="dual search (multiplier mu)",
    )
    return project_onto_constraint(rates(high), sizes, target, lo)
