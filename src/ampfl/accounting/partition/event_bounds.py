"""Registry bounds of paper 002's events (:mod:`ampfl.accounting.mechanisms`): model splitting, dropout and
Balanced Iteration Subsampling, as RDP curves, PLDs and their no-amplification twins.

- RDP: 002 Theorems 3.4/3.5 with the non-split part of Sec. 3.2.2 (:func:`~ampfl.accounting.partition.
  mechanisms.rdp_partial_split`), for dropout at d = 2 (Theorem 3.7, as :func:`~ampfl.accounting.partition.
  mechanisms.rdp_dropout`), Theorem 3.8 (:func:`~ampfl.accounting.partition.mechanisms.rdp_bis`);
  add/remove-one, orders ≤ 256 (the exact forward term costs α²).
- PLD: d ≤ 2 the exact product form after a rotation, d ≥ 3 the orthogonal-mixture PLD by log-sum
  convolution (:func:`~ampfl.accounting.partition.allocation_pld.model_split_pld_any`); BIS the random
  allocation PLD, k > 1 through k = 1 blocks (:func:`~ampfl.accounting.partition.allocation_pld.
  allocation_pld`, argument in docs/pld.md); Poisson-subsampled split steps
  (:func:`~ampfl.accounting.partition.subsampled_pld.subsampled_event_pld`).
- Without amplification: the record's step updates its block and the shared part, each with its noise; a
  BIS record is used in ``participations`` steps of the epoch, a Gaussian in each (002 Sec. 3.3).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ampfl.accounting.events import (
    BalancedIterationSubsamplingEvent,
    ComposedEvent,
    DropoutEvent,
    GaussianEvent,
    ModelSplitEvent,
    PoissonSampledEvent,
    PrivacyEvent,
    SelfComposedEvent,
)
from ampfl.accounting.orders import on_cheap_orders
from ampfl.accounting.relations import NeighboringRelation

Recurse = Callable[..., Any]


def _blocks(event: ModelSplitEvent | DropoutEvent) -> int:
    """d of the split step: dropout at rate 1/2 is the d = 2 split of its layers (002 Thm 3.7)."""
    return event.num_submodels if isinstance(event, ModelSplitEvent) else 2


def partition_rdp(
    event: ModelSplitEvent | DropoutEvent, alphas: np.ndarray, relation: NeighboringRelation
) -> np.ndarray:
    """One split (or dropout) step: Thms 3.4/3.5 (Thm 3.7 at d = 2) plus the non-split part's Gaussian."""
    from ampfl.accounting.partition.mechanisms import rdp_partial_split

    return on_cheap_orders(
        alphas,
        lambda o: rdp_partial_split(
            orders=o,
            num_submodels=_blocks(event),
            split_noise_multiplier=event.noise_multiplier,
            nonsplit_noise_multiplier=event.nonsplit_noise_multiplier,
        ),
    )


def bis_rdp(
    event: BalancedIterationSubsamplingEvent, alphas: np.ndarray, relation: NeighboringRelation
) -> np.ndarray:
    from ampfl.accounting.partition.mechanisms import rdp_bis

    return on_cheap_orders(
        alphas,
        lambda o: rdp_bis(
            orders=o,
            iterations=event.iterations,
            participations=event.participations,
            noise_multiplier=event.noise_multiplier,
        ),
    )


def partition_pld(event: ModelSplitEvent | DropoutEvent, h: float, recurse: Recurse) -> Any:
    """One split (or dropout) step: exact for d ≤ 2, the log-sum mixture PLD for d ≥ 3."""
    from ampfl.accounting.partition.allocation_pld import model_split_pld_any

    d = _blocks(event)
    z, z_ns = event.noise_multiplier, event.nonsplit_noise_multiplier
    if z_ns is not None and math.isinf(z_ns):
        z_ns = None  # an infinitely noisy part leaks nothing
    if math.isinf(z):
        return recurse(GaussianEvent(noise_multiplier=math.inf if z_ns is None else z_ns), h)
    return model_split_pld_any(  # d <= 2: exact product form; d >= 3: the mixture's log-sum PLD
        num_submodels=d, noise_multiplier=z, nonsplit_noise_multiplier=z_ns, value_discretization_interval=h
    )


def subsampled_partition_pld(event: PoissonSampledEvent, h: float, recurse: Recurse) -> Any:
    """A Poisson-subsampled split (or dropout) step (002 Table 1's setting)."""
    from ampfl.accounting.partition.subsampled_pld import subsampled_event_pld

    return subsampled_event_pld(event, h, lambda e, hh: partition_pld(e, hh, recurse))


def bis_pld(event: BalancedIterationSubsamplingEvent, h: float) -> Any:
    """One BIS epoch: random allocation of k of T steps (k > 1 through k = 1 blocks)."""
    from ampfl.accounting.partition.allocation_pld import allocation_pld

    if math.isinf(event.noise_multiplier):
        from dp_accounting.pld import privacy_loss_distribution as pld_lib

        return pld_lib.identity(h)
    return allocation_pld(
        iterations=event.iterations,
        noise_multiplier=event.noise_multiplier,
        participations=event.participations,
        value_discretization_interval=h,
    )


def split_unamplified(event: ModelSplitEvent | DropoutEvent) -> PrivacyEvent:
    gaussian = GaussianEvent(noise_multiplier=event.noise_multiplier)
    if event.nonsplit_noise_multiplier is None:
        return gaussian
    return ComposedEvent(events=(gaussian, GaussianEvent(noise_multiplier=event.nonsplit_noise_multiplier)))


def bis_unamplified(event: BalancedIterationSubsamplingEvent) -> PrivacyEvent:
    return SelfComposedEvent(
        event=GaussianEvent(noise_multiplier=event.noise_multiplier), count=event.participations
    )
