"""Mask aggregation and personalised-mask selection of PM-SFL (003 Eqs. 5 and 7, Sec. 4.2).

All functions act on flat ``[K, d_b]`` tensors (one row per participating client).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def aggregate_masks(uploads: torch.Tensor, personal: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
    """Heterogeneity-aware aggregation, 003 Eq. 7: θ = (Σ_i M_i ⊙ ¬I_i) ⊘ (Σ_i ¬I_i).

    ``uploads`` ``[K, d]``: the clients' binary masks M_i (or probabilities for SplitFed-PM); ``personal``
    ``[K, d]`` bool: the indicators I_i (all False gives Eq. 5, the plain mean). A coordinate that every
    participant personalises has no contribution; it keeps ``previous`` (003 does not say; see docs).
    """
    shared = (~personal).to(uploads.dtype)
    count = shared.sum(0)
    total = (uploads * shared).sum(0)
    return torch.where(count > 0, total / count.clamp(min=1.0), previous)


def select_personalized(
    before: torch.Tensor,
    after: torch.Tensor,
    personal: torch.Tensor,
    *,
    add: int,
    limit: int | torch.Tensor,
    allowed: torch.Tensor | None = None,
) -> torch.Tensor:
    """Grow the personal indicators (003 Sec. 4.2, Alg. 1 lines 14–16); returns the new ``[K, d]`` bool.

    |Δθ| = |θ_after − θ_before|; coordinates whose θ crossed 0.5 (the *Disagree Group*) rank before every
    other coordinate, each group by |Δθ| descending; each client adds its top ``add`` not yet personal
    coordinates, never exceeding ``limit`` personal coordinates in total (one int, or one per client).
    ``allowed`` (``[K, d]`` bool, e.g. the blocks a client holds) restricts the candidates; ``personal`` must
    lie inside it and ``limit`` must not exceed its row counts.
    """
    delta = (after - before).abs()
    disagree = (before > 0.5) != (after > 0.5)
    key = delta + disagree.to(delta.dtype) * 2.0  # |Δθ| ≤ 1, so every disagreeing coordinate ranks first
    excluded = personal if allowed is None else personal | ~allowed
    key = torch.where(excluded, torch.full_like(key, -1.0), key)
    out = personal.clone()
    have = personal.sum(1)
    limits = torch.as_tensor(limit).expand(personal.shape[0])
    for row in range(personal.shape[0]):
        n_new = min(add, int(limits[row]) - int(have[row]))
        if n_new > 0:
            out[row, torch.topk(key[row], n_new).indices] = True
    return out


def layer_indicator(shapes: Sequence[tuple[int, ...]], personal_layers: int) -> torch.Tensor:
    """Layer-level personalisation (LG-FedAvg style): the first ``personal_layers`` bottom layers, ``[d]``."""
    sizes = [math.prod(s) for s in shapes]
    if not 0 <= personal_layers <= len(sizes):
        raise ValueError(f"personal_layers must be in [0, {len(sizes)}]. Found {personal_layers}.")
    flags = [torch.full((n,), i < personal_layers, dtype=torch.bool) for i, n in enumerate(sizes)]
    return torch.cat(flags)
