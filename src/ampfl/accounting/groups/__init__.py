"""Paper 001 (GDPFed / GDPFed+, Xu, Hu, Kotevska, arXiv:2505.13655v3): heterogeneous client-level budgets.

- :mod:`~ampfl.accounting.groups.calibration`: grouping by budget, per-group noise multipliers (sound: the
  RDP accountant over :class:`~ampfl.accounting.events.GroupRoundEvent`; ``paper``: the inferred Theorem 1,
  [I]), Corollary 1's system guarantee with Remark 2, the noise energy κ d z² C², the reweighting λ_g.
- :mod:`~ampfl.accounting.groups.error_model`: the planner's error model J(q, κ) (ampfl's design).
- :mod:`~ampfl.accounting.groups.search`: partitions into aggregates and the constrained minimisation of J.
- :mod:`~ampfl.accounting.groups.planner`: :func:`plan_groups`, the GDPFed+ planner (docs/planner.md).
- :mod:`~ampfl.accounting.groups.kappa`: :func:`ranked_kappa`, κ_g by budget rank (ampfl's reading of
  001's experimental κ rule).
"""

from __future__ import annotations

from ampfl.accounting.groups.calibration import (
    ANALYSES,
    MAX_NOISE_MULTIPLIER,
    REMARK_2_WARNING,
    ClientGroups,
    expected_noise_energy,
    group_by_edges,
    group_by_quantiles,
    group_epsilon,
    group_sigma,
    noise_energy,
    paper_group_sigma,
    reweighting,
    sound_group_sigma,
    system_epsilon,
)
from ampfl.accounting.groups.error_model import OMEGA_MODELS, ErrorModel, PlanProblem, objective, omega
from ampfl.accounting.groups.kappa import RANKED_LEVELS, ranked_kappa
from ampfl.accounting.groups.planner import MERGE, SPARSIFY, BaselinePlan, GroupPlan, plan_groups

__all__ = [
    "ANALYSES",
    "MAX_NOISE_MULTIPLIER",
    "MERGE",
    "OMEGA_MODELS",
    "RANKED_LEVELS",
    "REMARK_2_WARNING",
    "SPARSIFY",
    "BaselinePlan",
    "ClientGroups",
    "ErrorModel",
    "GroupPlan",
    "PlanProblem",
    "expected_noise_energy",
    "group_by_edges",
    "group_by_quantiles",
    "group_epsilon",
    "group_sigma",
    "noise_energy",
    "objective",
    "omega",
    "paper_group_sigma",
    "plan_groups",
    "ranked_kappa",
    "reweighting",
    "sound_group_sigma",
    "system_epsilon",
]
