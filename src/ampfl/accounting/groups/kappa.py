"""GDPFed+ sparsification levels κ_g by budget rank: ampfl's reading of paper 001's experimental rule.

Paper 001 (arXiv:2505.13655v3) states two ways to set κ_g, and neither survives with its numbers:

* Remark 3: a "coarse closed-form" κ_g* minimising the third (group heterogeneity, through ω_g) plus the
  last (privacy, κ_g d σ_g² C²) term of Theorem 2. The formula and its constants were not recovered
  (RECOVERED_MATH.md §2.8, [X]). ampfl's planner (:func:`ampfl.accounting.groups.plan_groups`,
  ``sparsify="auto"``) has that structure, ω(κ)·signal + κ·noise minimised per group, with its own
  constants (the error of one aggregated update); at the dimensions of ampfl's runs the noise term
  dominates and κ falls to the floor ``ErrorModel.kappa_min`` (0.01).
* Sec. VI-C5 / Table VIII: the κ the experiments use is a *default chosen from a grid of levels* by test
  accuracy; the prose says moderate levels help, overly aggressive ones hurt, and "groups with stricter
  privacy requirements should adopt more aggressive sparsification, while groups with looser privacy
  constraints can retain more parameters". The grid values and the default were not recovered.

:func:`ranked_kappa` implements the second rule's *shape*: a fixed set of moderate levels (ampfl's choice,
``RANKED_LEVELS``, fixed before any run) assigned by budget rank, the strictest group the smallest level,
equal budgets the same level. It is a fixed rule from public constants (the budgets), so it costs no
privacy and it is not tuned on the runs it is reported in.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["RANKED_LEVELS", "ranked_kappa"]

#: ampfl's moderate levels (001's Table VIII grid was not recovered), smallest for the strictest budget.
RANKED_LEVELS: tuple[float, ...] = (0.25, 0.5, 0.75)


def ranked_kappa(budgets: Sequence[float], levels: Sequence[float] = RANKED_LEVELS) -> list[float]:
    """κ_g per group: the distinct budgets sorted ascending get ``levels`` in order (the strictest the first
    level); equal budgets share a level; with fewer distinct budgets than levels the first ones are used.

    Raises:
        ValueError: no budgets, a budget that is not finite and > 0, levels outside (0, 1] or not
            non-decreasing, or more distinct budgets than levels.
    """
    eps = np.asarray(budgets, dtype=float)
    lv = np.asarray(levels, dtype=float)
    if eps.size == 0 or not np.all(np.isfinite(eps)) or np.any(eps <= 0):
        raise ValueError(f"budgets must be a non-empty list of finite values > 0. Found {list(budgets)!r}.")
    if lv.size == 0 or np.any(lv <= 0) or np.any(lv > 1) or np.any(np.diff(lv) < 0):
        raise ValueError(f"levels must be non-decreasing values in (0, 1]. Found {list(levels)!r}.")
    distinct = np.unique(eps)
    if distinct.size > lv.size:
        raise ValueError(f"{distinct.size} distinct budgets need as many levels; {lv.size} given.")
    rank = np.searchsorted(distinct, eps)
    return [float(lv[r]) for r in rank]
