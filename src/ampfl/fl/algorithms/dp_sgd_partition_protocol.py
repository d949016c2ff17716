"""The round protocol of ``dp_sgd_split``: the client and server halves of one round of model-split DP-SGD
(:class:`~ampfl.fl.algorithms.dp_sgd_partition.DPSGDPartition`, 002 Algs. 1-2) for ``ampfl deploy``
(:mod:`ampfl.fl.algorithms.round_protocol`), as the mixin :class:`DPSGDPartitionProtocol`.

Client-level form, the same events as the simulator (steps 1-4 and the privacy events: the docstring of
:mod:`ampfl.fl.algorithms.dp_sgd_partition`). The server plans the cohort with the run's sampler
(:meth:`~DPSGDPartitionProtocol.sampled_clients`: Poisson, BIS or all); each asked client draws its mask
from its **own** randomness on its node (:meth:`~DPSGDPartitionProtocol.client_mask`: never from the privacy
key, which the server may hold; no block id is sent), runs steps 2-3 and sends Δ_i
(:meth:`~DPSGDPartitionProtocol.local_message`), the shared part times the public C_s/C_ns
(:meth:`~DPSGDPartitionProtocol.message_scale`); the server adds ξ from a generator seeded by the operating
system and divides by public constants only (:meth:`~DPSGDPartitionProtocol.aggregate`). Without secure
aggregation the server sees each Δ_i, whose support shows b_i: the guarantee then covers the released models
only (as DP-FedAvg's). Under ``--secure-aggregation secaggplus`` each node joins by its own coin (Bern(q), or
always for ``"full"``; a BIS schedule couples the clients: refused) and adds a share N(0, z²C_s²/n) on every
coordinate; in message units both parts are bounded by C_s, so rescaling the decoded sum by C_ns/C_s gives the
shared part N(0, z²C_ns²), as the server would. The record-level case deploys as is (one record per node).

The mixin holds no state of its own: it uses the partition, the sampler and the server step of
``DPSGDPartition``, which inherits it (those names are declared here for type checking only, and this module
imports nothing from ``dp_sgd_partition`` at run time). :func:`clip_parts`, the separate clipping of the split
and shared parts, is here because both the client half and the simulator's round use it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch
from pydantic import BaseModel

from ampfl.fl.algorithms._common import clip_rows
from ampfl.fl.algorithms.round_protocol import ClientMessage, GaussianShares, OwnRoundProtocol

if TYPE_CHECKING:
    from ampfl.accounting.events import PrivacyEvent
    from ampfl.fl.algorithms._common import FederatedAlgorithm
    from ampfl.fl.algorithms.dp_sgd_partition import DPSGDPartitionParams
    from ampfl.fl.engine.vectorised import LocalResult

    _Base = FederatedAlgorithm
else:
    _Base = object

__all__ = ["DPSGDPartitionProtocol", "clip_parts"]


class DPSGDPartitionProtocol(OwnRoundProtocol, _Base):
    """The round protocol (:class:`~ampfl.fl.algorithms.round_protocol.RoundProtocol`) of
    :class:`~ampfl.fl.algorithms.dp_sgd_partition.DPSGDPartition`, which inherits it (module docstring)."""

    if TYPE_CHECKING:  # provided by DPSGDPartition
        p: DPSGDPartitionParams
        noise_multiplier: float
        num_groups: int
        split_coords: torch.Tensor
        block_of_group: torch.Tensor

        def participants_of(self, round_index: int) -> np.ndarray: ...
        def _coordinates(self, keep: torch.Tensor) -> torch.Tensor: ...
        def server_update(self, total: torch.Tensor, generator: torch.Generator) -> torch.Tensor: ...
        def apply_noised_sum(self, noised: torch.Tensor) -> torch.Tensor: ...
        def event_at(self, noise_multiplier: float, credit: str | None = None) -> PrivacyEvent: ...

    noise_shares: ClassVar[bool] = True

    @classmethod
    def deploy_problem(cls, params: BaseModel, *, secure_aggregation: bool) -> str | None:
        """Central noise deploys every sampling; under SecAgg+ each node flips its own coin: ``"poisson"`` or
        ``"full"``, not a BIS schedule."""
        if not secure_aggregation:
            return None
        sampling = getattr(params, "sampling", None)
        if sampling not in ("poisson", "full"):
            return (
                "algorithm.sampling: --secure-aggregation secaggplus runs dp_sgd_split with 'poisson' or "
                "'full' sampling only (each node flips its own coin, hidden from the server; a BIS schedule "
                f"couples the clients, so no node can draw its own part of it). Found {sampling!r}."
            )
        return None

    def own_coin(self, client: int, *, noise_shares: bool) -> float | None:
        """Under noise shares each client joins by its own coin, Bern(q) (``"poisson"``) or always
        (``"full"``), hidden from the server; otherwise None: the server samples the cohort."""
        if not noise_shares or self.p.sampling == "bis":
            return None
        return 1.0 if self.p.sampling == "full" else self.p.sampling_rate

    def sampled_clients(self, round_index: int) -> np.ndarray:
        """The simulator's participants (:meth:`participants_of`: Poisson, BIS or all)."""
        return self.participants_of(round_index)

    def client_mask(self, rng: np.random.Generator) -> torch.Tensor:
        """``[dim]`` booleans: the sub-model one client trains in a deployed round (:meth:`client_update`),
        drawn from ``rng``, the client's own randomness (never the privacy key, which the server may hold):
        ``"blocks"`` one block b_i uniform in {1..d} (Alg. 1), ``"dropout"`` each group kept with
        probability 1/2 (Alg. 2). The same law as :meth:`masks`' rows."""
        if self.num_groups == 0:
            return torch.ones(self.model.dim, dtype=torch.bool)
        if self.p.partition == "blocks":
            keep = self.block_of_group[None, :] == int(rng.integers(0, self.p.num_submodels))
        else:
            keep = torch.from_numpy(rng.random((1, self.num_groups)) < 0.5)
        return self._coordinates(keep)[0]

    def trained_coordinates(self, broadcast: torch.Tensor, rng: np.random.Generator) -> torch.Tensor | None:
        """Step 2 on the client: its secret mask from ``rng`` (:meth:`client_mask`, the client's own
        randomness: the server never receives it); :meth:`client_update` then runs Q local steps from
        ``broadcast`` with the gradients outside the mask zeroed."""
        return self.client_mask(rng).to(broadcast.dtype)

    def local_message(
        self, broadcast: torch.Tensor, client: int, result: LocalResult, trained: torch.Tensor | None
    ) -> ClientMessage:
        """Step 3 on the client: Δ_i = w_i − w on the ``trained`` coordinates, with the split and shared parts
        clipped separately (:func:`clip_parts`). The message is Δ_i in message units (:meth:`message_scale`:
        the shared part times C_s/C_ns); the server sums the messages (:meth:`aggregate`)."""
        assert trained is not None  # drawn by trained_coordinates
        p = self.p
        update, clipped = clip_parts(
            (result.params - broadcast) * trained, self.split_coords, p.clip, p.nonsplit_clip
        )
        metrics = {
            "train_loss": float(result.loss.mean()),
            "clipped": clipped,
            "num-examples": self.num_examples(client),
        }
        scale = self.message_scale()
        return ClientMessage(update if scale is None else update * scale, metrics)

    def aggregate(
        self, total: torch.Tensor, *, count: int | None, asked: int, generator: torch.Generator | None
    ) -> None:
        """Step 4 on ``total``, the sum of the messages (Σ_i Δ_i in message units, :meth:`message_scale`):
        ξ from ``generator`` (:meth:`server_update`), or already in ``total`` (the clients' noise shares);
        divided by public constants only (the message scale, m̄) whatever ``count`` and ``asked`` are."""
        scale = self.message_scale()
        if scale is not None:
            total = total / scale
        if generator is None:
            self.global_params = self.apply_noised_sum(total)
        else:
            self.global_params = self.server_update(total, generator)

    def _reference_clip(self) -> float:
        """C_s, or C_ns when the model has no split part: the clip norm of both parts in message units."""
        return float(self.p.clip if self.num_groups > 0 else self.p.nonsplit_clip)

    def message_scale(self) -> torch.Tensor | None:
        """The public factor of each coordinate of Δ_i in a message: 1 on the split part, C_s/C_ns on the
        shared part, so that both parts are bounded by C_s and one noise std z·C_s covers every coordinate
        (the clients' noise shares); :meth:`aggregate` divides it out, which turns the shared part's noise
        into N(0, z²C_ns²) (post-processing by a public linear map: the same mechanism). None: 1 everywhere
        (one part, or C_ns = C_s)."""
        p = self.p
        if self.num_groups == 0 or bool(self.split_coords.all()) or p.clip == p.nonsplit_clip:
            return None
        return torch.where(self.split_coords, 1.0, p.clip / p.nonsplit_clip).to(self.global_params.dtype)

    def message_bound(self) -> float:
        """‖Δ_i^s‖ ≤ C_s and ‖Δ_i^ns · C_s/C_ns‖ ≤ C_s (:meth:`message_scale`): every entry is within C_s."""
        return self._reference_clip()

    def gaussian_shares(self) -> GaussianShares | None:
        """ξ as client shares: N(0, z²C_s²) on every coordinate of the sum in message units
        (:meth:`message_scale`), i.e. N(0, z²C_ns²) on the shared part once :meth:`aggregate` rescales it."""
        return GaussianShares(
            noise_multiplier=self.noise_multiplier,
            std=self.noise_multiplier * self._reference_clip(),
            event_at=self.event_at,
        )


def clip_parts(
    delta: torch.Tensor, split: torch.Tensor, clip: float, nonsplit_clip: float
) -> tuple[torch.Tensor, float]:
    """Σ_i of the updates ``delta`` ``[K, dim]`` with the split coordinates (``split`` ``[dim]`` booleans)
    clipped to L2 norm ``clip`` and the others to ``nonsplit_clip``, each part separately; also the fraction
    of clipped parts."""
    s = split.to(delta.dtype)
    parts = [(delta * s, clip)]
    if not bool(split.all()):
        parts.append((delta * (1.0 - s), nonsplit_clip))
    total = torch.zeros(delta.shape[1], dtype=delta.dtype)
    clipped = 0.0
    for part, c in parts:
        rows, norms = clip_rows(part, c)
        total = total + rows.sum(0)
        clipped += float((norms > c).to(torch.float32).mean()) / len(parts)
    return total, clipped
