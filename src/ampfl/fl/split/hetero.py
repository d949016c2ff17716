"""Adaptive split depth with layer-wise knowledge compensation (003 Sec. 4.3, Eq. 8), for probabilistic masks.

Client i splits after block ``client_splits[i mod len]`` (003 Sec. 6.2: equal shares of each depth). Every
convolution weight is frozen and masked (003 Sec. 4.3: the top's training also uses probabilistic masks); the
client trains the scores of its blocks, the server trains the scores of the remaining blocks for that client
(a per-client copy, as SplitFed's server does for its top) and the shared linear head. Because split
back-propagation is the chain rule through the cut (tested for the fixed split), the composed per-client
network is computed directly; the split point decides only who owns (and uploads) which scores.

Aggregation per block l, with K^l the participants holding block l and K all participants:

- θ^l_client: Eq. 7 over K^l of the uploaded binary masks (clients upload only their own blocks);
- θ^l_sl: the mean of the server-side keep-probabilities of block l over the participants without it (the
  server's own values: nothing is released, so no sampling);
- ``compensation = True`` (Eq. 8): θ^l = (1 − |K^l|/|K|) θ^l_sl + (|K^l|/|K|) θ^l_client;
- ``compensation = False`` (the "simply averaging the overlapping layers" of Sec. 4.3): θ^l = θ^l_client,
  and the previous θ^l where no participant holds block l (server-side updates are discarded).

Personalisation (``personalization = "fine" | "layer"``, default ``"none"``) works as in ``pm_sfl`` but only
over the blocks the client holds (``personal_ratio`` of those); |K^l| in Eq. 8 then counts, per coordinate,
the holders that upload it (not personal), as Eq. 7's denominator does. Privacy: the run's ε is ∞, as for
``pm_sfl`` (smashed data in the clear); :meth:`mask_upload_events` gives the mask uploads alone, one
:class:`~ampfl.accounting.events.BernoulliMaskEvent` per round for the deepest client's bits (an upper bound
on any client's upload).
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import numpy as np
import torch
from pydantic import BaseModel, Field

from ampfl.accounting.events import BernoulliMaskEvent, PrivacyEvent
from ampfl.fl.split.algorithms import PMSFL, PMSFLParams
from ampfl.fl.split.common import client_depths


class PMSFLHeteroParams(PMSFLParams):
    """PM-SFL with per-client split depth; see the module docstring."""

    personalization: Literal["fine", "layer", "none"] = "none"
    client_splits: list[int] = Field(default_factory=lambda: [1, 2, 3], min_length=1)
    compensation: bool = Field(True, description="003 Eq. 8 knowledge compensation")


def compensate(
    client: torch.Tensor,
    server: torch.Tensor,
    holders: torch.Tensor,
    total: int,
    previous: torch.Tensor,
    *,
    on: bool,
) -> torch.Tensor:
    """003 Eq. 8 per coordinate: ``holders`` = |K^l| (clients holding the coordinate's block) of ``total``."""
    share = holders.to(client.dtype) / total
    if on:
        return (1.0 - share) * server + share * client
    return torch.where(holders > 0, client, previous)


class PMSFLHetero(PMSFL):
    """PM-SFL with adaptive split depth and (optionally) layer-wise knowledge compensation (Eq. 8)."""

    name: ClassVar[str] = "pm_sfl_hetero"
    Params: ClassVar[type[BaseModel]] = PMSFLHeteroParams
    full_depth: ClassVar[bool] = True

    def set_up(self) -> None:
        super().set_up()
        self.hp: PMSFLHeteroParams = self.params  # type: ignore[assignment]
        sizes = [math.prod(s) for s in self.shapes]
        self.block_of = torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])
        self.splits = client_depths(
            self.hp.client_splits, num_blocks=len(self.shapes), num_clients=self.task.num_clients
        )
        self.upload_bits = int(sum(sizes[: max(self.hp.client_splits)]))

    def mask_upload_events(self, round_index: int) -> list[tuple[PrivacyEvent, int]]:
        if not self.binary:
            return []
        return [(BernoulliMaskEvent(c=self.p.c, dim=self.upload_bits), 1)]

    def run_round(self, round_index: int) -> dict[str, float]:
        clients, before, after, uploads, loss = self.train_masks(round_index)
        held = self.block_of[None, :] < self.splits[torch.from_numpy(np.asarray(clients))][:, None]  # [K, d]
        personal = self._indicator_update(clients, round_index, before, after, allowed=held)
        self.keep_personal(clients, personal, after)
        shared = held & ~personal  # the bits a client uploads (Eq. 7 over its own blocks)
        holders = shared.sum(0)
        client_theta = (uploads * shared).sum(0) / holders.clamp(min=1)
        others = (~held).sum(0)
        server_theta = torch.where(others > 0, (after * ~held).sum(0) / others.clamp(min=1), self.theta)
        self.theta = compensate(
            client_theta, server_theta, holders, len(clients), self.theta, on=self.hp.compensation
        )
        return self.end_round(clients, loss, personal)
