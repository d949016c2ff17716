"""Privacy amplification by model and data partitioning: paper 002 (Dong, Chen, Özgür), Sections 3.2–3.3.

Every mechanism reduces to Theorem 3.1 (:mod:`ampfl.accounting.mixture_rdp`): the RDP between a uniform
mixture of N(c·v, σ²I) over binary v with k ones among d and N(0, σ²I), bounded by the maximum of a forward
term (exact Lemma 3.12, Eq. (2), or efficient Eq. (5), Eq. (3)) and the reverse term R_α with the (d − 1)
prefactor (RECOVERED_MATH.md §1.3, §1.10). Mechanisms here (all per-order RDP arrays, integer α ≥ 2):

- :func:`rdp_model_split` (Theorems 3.4 / 3.5), :func:`rdp_partial_split` (§3.2.2), :func:`rdp_dropout`
  (Theorem 3.7) and :func:`rdp_bis` (Theorem 3.8, Remark 3.10): the four mechanisms of
  :mod:`~ampfl.accounting.partition.mechanisms`, whose docstring says what each covers [D];
- :func:`rdp_subsampled_split` — Poisson subsampling of a (partially) split step (002 Table 1 setting), by
  Zhu–Wang's general bound (sound, [I]) or by the binomial expansion that reproduces Table 1 (remove
  direction only: the add direction is unproven, docs/partition.md) [D, derived here].

The accountants compose these mechanisms as events (:class:`~ampfl.accounting.events.ModelSplitEvent`,
:class:`~ampfl.accounting.events.DropoutEvent`,
:class:`~ampfl.accounting.events.BalancedIterationSubsamplingEvent` — one whole epoch per event); the
calibrations here go through the one :func:`ampfl.accounting.calibrate.calibrate`.

Modules: :mod:`~ampfl.accounting.partition.mechanisms` (the four mechanisms),
:mod:`~ampfl.accounting.partition.calibration` (their calibration),
:mod:`~ampfl.accounting.partition.subsampled` (Poisson-subsampled splitting and its analyses).

Noise is given as a noise multiplier z = σ/C (σ the noise standard deviation, C the clipping norm).
``bound="auto"`` picks the exact forward term where it is affordable and Eq. (5) otherwise; both are
upper bounds on the true divergence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ampfl.accounting._lazy import lazy_attributes

if TYPE_CHECKING:  # the names below are loaded on first use (PEP 562): this package is imported by the
    # reports of ``ampfl account poisson``, which must not import SciPy
    from ampfl.accounting.partition.calibration import calibrate_bis, calibrate_dropout, calibrate_model_split
    from ampfl.accounting.partition.mechanisms import (
        BOUND_CHOICES,
        PARTITION_ORDERS,
        rdp_bis,
        rdp_dropout,
        rdp_model_split,
        rdp_partial_split,
        resolve_bound,
        unsplit_noise_multiplier,
    )
    from ampfl.accounting.partition.subsampled import (
        EXPANSIONS,
        SUBSAMPLED_ANALYSES,
        SUBSAMPLED_RECOMMENDED,
        calibrate_subsampled_split,
        calibrate_subsampled_split_analyses,
        no_split_poisson_event,
        rdp_subsampled_split,
        subsampled_split_curves,
    )

#: Public name -> the submodule that defines it.
_EXPORTS: dict[str, str] = {
    "BOUND_CHOICES": "mechanisms",
    "PARTITION_ORDERS": "mechanisms",
    "calibrate_bis": "calibration",
    "calibrate_dropout": "calibration",
    "calibrate_model_split": "calibration",
    "rdp_bis": "mechanisms",
    "rdp_dropout": "mechanisms",
    "rdp_model_split": "mechanisms",
    "rdp_partial_split": "mechanisms",
    "resolve_bound": "mechanisms",
    "unsplit_noise_multiplier": "mechanisms",
    "EXPANSIONS": "subsampled",
    "SUBSAMPLED_ANALYSES": "subsampled",
    "SUBSAMPLED_RECOMMENDED": "subsampled",
    "calibrate_subsampled_split": "subsampled",
    "calibrate_subsampled_split_analyses": "subsampled",
    "no_split_poisson_event": "subsampled",
    "rdp_subsampled_split": "subsampled",
    "subsampled_split_curves": "subsampled",
}

__all__ = [
    "BOUND_CHOICES",
    "EXPANSIONS",
    "PARTITION_ORDERS",
    "SUBSAMPLED_ANALYSES",
    "SUBSAMPLED_RECOMMENDED",
    "calibrate_bis",
    "calibrate_dropout",
    "calibrate_model_split",
    "calibrate_subsampled_split",
    "calibrate_subsampled_split_analyses",
    "no_split_poisson_event",
    "rdp_bis",
    "rdp_dropout",
    "rdp_model_split",
    "rdp_partial_split",
    "rdp_subsampled_split",
    "resolve_bound",
    "subsampled_split_curves",
    "unsplit_noise_multiplier",
]

__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS, prefix=f"{__name__}.", public=__all__)
