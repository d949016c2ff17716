"""Secure-aggregation semantics for the simulator: the server sees only each group's sum.

Paper 001 (GDPFed / GDPFed+, arXiv:2505.13655v3, Algorithm 1 lines 13–16): each sampled client of group g
adds its share of the group's noise to its clipped update and sends it through secure aggregation; the
server obtains only U_g = Σ_{i ∈ S_g} (Δ̃_i + ξ_i) per group. This module makes that a property of the API,
not a comment: :func:`secure_group_sums` is the only way to make a :class:`GroupSums` (its constructor
refuses any caller without the module's seal), and the server step of the group algorithms
(:meth:`ampfl.fl.algorithms.gdpfed.GDPFed.server_update`) accepts nothing else. A :class:`GroupSums` holds
one row per group (``[num_groups, d]``) and the number of clients in each sum (which a secure-aggregation
protocol reveals to the server anyway); individual rows never leave :func:`secure_group_sums`.

Noise shares: each of the m_g clients of group g adds N(0, z_g² C² / m_g · I) (restricted to the group's
public mask under GDPFed+), so that the group sum carries N(0, z_g² C² I), the noise the group's privacy
event accounts. With Poisson client sampling a group can have no participant in a round; the accounted
mechanism still releases N(0, z_g² C² I) then, so the caller passes one noise-only row for that group
(``is_client = False``: a non-data party's share, e.g. the aggregation service's), counted as 0 clients.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = ["GroupSums", "noise_shares", "secure_group_sums"]

_SEAL = object()


@dataclass(frozen=True, slots=True)
class GroupSums:
    """What the server receives from secure aggregation in one round.

    Attributes:
        sums: ``[num_groups, d]``, row g = Σ of group g's contributions (zero for a group not in the round).
        counts: ``[num_groups]`` number of clients whose contributions form each sum.
        present: ``[num_groups]`` whether the group took part in the round (False: retired, row is zero).
    """

    sums: torch.Tensor
    counts: tuple[int, ...]
    present: tuple[bool, ...]
    _seal: object = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self._seal is not _SEAL:
            raise TypeError("GroupSums can only be made by ampfl.fl.privacy.secure_sum.secure_group_sums.")

    @property
    def num_groups(self) -> int:
        return int(self.sums.shape[0])

    @staticmethod
    def project(sums: GroupSums, rows: torch.Tensor) -> GroupSums:
        """Server-side post-processing of received sums (same shape: still one row per group)."""
        if tuple(rows.shape) != tuple(sums.sums.shape):
            raise ValueError(f"rows must have shape {tuple(sums.sums.shape)}. Found {tuple(rows.shape)}.")
        return GroupSums(rows, sums.counts, sums.present, _SEAL)


def noise_shares(
    generator: torch.Generator,
    counts: Sequence[int],
    noise_std: Sequence[float],
    dim: int,
    masks: Sequence[torch.Tensor | None] | None = None,
) -> torch.Tensor:
    """Per-contribution noise shares ``[Σ_g max(m_g, 1), d]``, group by group in order.

    Group g with m_g ≥ 1 clients gets m_g rows N(0, σ_g²/m_g) (σ_g = ``noise_std[g]`` = z_g C), which sum to
    N(0, σ_g²); a group with m_g = 0 gets one row N(0, σ_g²) (the non-data share, module docstring). A
    group's rows are zero outside its boolean ``masks[g]`` (``[d]``) when one is given. One draw from
    ``generator`` for all rows (deterministic per round).
    """
    rows = [max(int(m), 1) for m in counts]
    shares = torch.randn((sum(rows), int(dim)), generator=generator)
    start = 0
    for g, (m, std) in enumerate(zip(rows, noise_std, strict=True)):
        block = shares[start : start + m]
        block.mul_(float(std) / float(np.sqrt(m)))
        if masks is not None and masks[g] is not None:
            block.mul_(masks[g].to(block.dtype))  # type: ignore[union-attr]
        start += m
    return shares


def secure_group_sums(
    contributions: torch.Tensor,
    labels: np.ndarray | Sequence[int],
    *,
    num_groups: int,
    is_client: np.ndarray | Sequence[bool] | None = None,
    present: Sequence[bool] | None = None,
) -> GroupSums:
    """Sum the contributions ``[K, d]`` per group label (``[K]``, values in ``0..num_groups-1``).

    Only the per-group sums (and the count of client rows per group) come out: the result is what the
    server of a secure-aggregation protocol learns. ``is_client`` marks rows sent by sampled clients (the
    others are non-data noise shares, not counted). ``present`` marks the groups taking part this round.
    """
    lab = np.asarray(labels, dtype=np.int64)
    if contributions.dim() != 2 or contributions.shape[0] != lab.size:
        raise ValueError(
            f"contributions must have shape [len(labels), d]. Found {tuple(contributions.shape)}, "
            f"{lab.size} labels."
        )
    if lab.size and (lab.min() < 0 or lab.max() >= num_groups):
        raise ValueError(f"labels must be in [0, {num_groups - 1}]. Found {lab.min()}..{lab.max()}.")
    client = np.ones(lab.size, dtype=bool) if is_client is None else np.asarray(is_client, dtype=bool)
    sums = torch.zeros((int(num_groups), contributions.shape[1]), dtype=contributions.dtype)
    if lab.size:
        sums.index_add_(0, torch.from_numpy(lab), contributions)
    counts = tuple(int(c) for c in np.bincount(lab[client], minlength=num_groups))
    here = tuple(bool(p) for p in present) if present is not None else tuple(c > 0 for c in counts)
    return GroupSums(sums, counts, here, _SEAL)
