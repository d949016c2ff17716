"""DepthFL's round as a client half and a server half (:mod:`ampfl.fl.algorithms.round_protocol`): ``ampfl
deploy`` runs ``depthfl``.

DepthFL is not split learning: a client trains a prefix of the network (blocks and heads 1..d_k) on its own
and uploads the trained weights; nothing goes back and forth during the local steps. The halves:

- :meth:`DepthFLProtocol.broadcast`: the global blocks (weights, or θ with ``masks``) followed by the heads;
- :meth:`DepthFLProtocol.client_update`: client k's local training exactly as
  :meth:`~ampfl.fl.split.depthfl.DepthFL.run_round` trains its row (the simulator's mini-batches of the
  round's cohort, the same loss and optimizers, :meth:`~ampfl.fl.split.depthfl.DepthFL.train_prefixes`);
  its message is its trained blocks and heads, zero outside its depth, followed by the indicator ``[L]`` of
  the blocks it holds (1 for l < d_k). With ``masks`` the blocks are its binary mask M ~ Bern(θ_k), and the
  masks it trains with as well as M are drawn from the client's own randomness (its ``rng``), not from the
  run's generator: the server cannot replay them (the simulator draws them from the run's noise generator,
  so a deployed masked run equals ``ampfl run`` in distribution, not draw for draw);
- :meth:`DepthFLProtocol.aggregate`: the sum of the messages holds, per coordinate, the sum over its
  holders, and in its last L entries the number of holders of each block; each coordinate is divided by the
  number of holders of its block, and a coordinate nobody held keeps its value (DepthFL's depth-wise FedAvg,
  ``_depth_average`` on sums: bit for bit the simulator's step when the same clients reply).

DepthFL has no privacy (``privacy_unit`` None, ε = ∞: the weights go up in the clear), so dividing by the
data-dependent holder counts releases nothing a guarantee covers. As FedAvg, it has no secure summation
(:meth:`DepthFLProtocol.message_bound` is infinite): ``--secure-aggregation secaggplus`` is refused
(:meth:`DepthFLProtocol.deploy_problem`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from pydantic import BaseModel

from ampfl.fl.algorithms.round_protocol import ClientMessage, OwnRoundProtocol, mean_metrics

if TYPE_CHECKING:
    from ampfl.fl.algorithms.round_protocol import ClientInstructions, GaussianShares
    from ampfl.fl.split.depthfl import DepthFL


class DepthFLProtocol(OwnRoundProtocol):
    """The round protocol of :class:`~ampfl.fl.split.depthfl.DepthFL` (module docstring); a mixin."""

    @classmethod
    def deploy_problem(cls, params: BaseModel, *, secure_aggregation: bool) -> str | None:
        """None (trusted server); under SecAgg+ one line: DepthFL has nothing to noise and no bounded
        message (as FedAvg, which SecAgg+ does not run either)."""
        if secure_aggregation:
            return (
                "algorithm.name: depthfl uploads trained weights in the clear (no privacy, ε = ∞) and has no "
                "secure summation: deploy it with --secure-aggregation none."
            )
        return None

    def sampled_clients(self, round_index: int) -> np.ndarray:
        """The simulator's cohort of round ``round_index``."""
        return cast("DepthFL", self).participants(round_index)

    def broadcast(self) -> torch.Tensor:
        """The global blocks (θ with ``masks``) followed by the heads."""
        alg = cast("DepthFL", self)
        return torch.cat([alg.bottom, alg.heads])

    def _held(self, depth: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """0/1 indicators of the block coordinates, head coordinates and blocks a client of ``depth``
        holds."""
        alg = cast("DepthFL", self)
        blocks = (alg.block_of < depth).to(alg.bottom.dtype)
        heads = (alg.head_of < depth).to(alg.heads.dtype)
        return blocks, heads, (torch.arange(len(alg.shapes)) < depth).to(alg.bottom.dtype)

    def client_update(
        self,
        broadcast: torch.Tensor,
        instructions: ClientInstructions,
        client_state: torch.Tensor | None,
        rng: np.random.Generator,
    ) -> tuple[ClientMessage, torch.Tensor | None]:
        """Client k's prefix trained as in the simulator; message: its blocks (with ``masks`` its binary mask
        from ``rng``) and heads, zero outside its depth, then the indicator of the blocks it holds."""
        alg = cast("DepthFL", self)
        nb = alg.bottom.numel()
        if broadcast.numel() != nb + alg.heads.numel():
            raise ValueError(
                f"broadcast must hold {nb + alg.heads.numel()} entries (blocks, heads). "
                f"Found {broadcast.numel()}."
            )
        cohort, row = instructions.cohort_row()
        client = int(instructions.client)
        batches = alg.cohort_batches(cohort, instructions.round_index)[row : row + 1]
        depth = alg.splits[client : client + 1]
        # the client's own draws (masks only): its seed from its own randomness, never the run's key
        gen = torch.Generator().manual_seed(int(rng.integers(0, 2**63 - 1)))
        convs, heads, total = alg.train_prefixes(broadcast[:nb], broadcast[nb:], depth, batches, gen)
        blocks, head_held, held = self._held(int(depth[0]))
        vector = torch.cat([convs[0] * blocks, heads[0] * head_held, held])
        metrics = {
            "train_loss": float(total[0] / alg.sp.num_local_steps),
            "num-examples": float(len(alg.client_indices[client])),
        }
        return ClientMessage(vector, metrics), None

    def aggregate(
        self,
        total: torch.Tensor,
        *,
        count: int | None,
        asked: int,
        generator: torch.Generator | None,
    ) -> None:
        """Each coordinate: the sum over its holders divided by their number (the last L entries of
        ``total``); a coordinate nobody held keeps its value; an empty round keeps the model. The counts are
        data-dependent: allowed, DepthFL is not private (module docstring)."""
        alg = cast("DepthFL", self)
        if count == 0:
            return
        nb, nh, layers = alg.bottom.numel(), alg.heads.numel(), len(alg.shapes)
        if total.numel() != nb + nh + layers:
            raise ValueError(
                f"the sum of depthfl messages must hold {nb + nh + layers} entries. Found {total.numel()}."
            )
        holders = total[nb + nh :]
        alg.bottom = holder_mean(total[:nb], holders[alg.block_of], alg.bottom)
        alg.heads = holder_mean(total[nb : nb + nh], holders[alg.head_of], alg.heads)

    def message_bound(self) -> float:
        """A trained model is not bounded (DepthFL has no secure summation, as FedAvg)."""
        return math.inf

    def gaussian_shares(self) -> GaussianShares | None:
        return None

    def reduce_metrics(self, metrics: Sequence[Mapping[str, float]]) -> dict[str, float]:
        """The mean of the clients' train losses."""
        return mean_metrics(metrics, clipped=False)

    def server_evaluate(self) -> dict[str, Any]:
        """The simulator's :meth:`~ampfl.fl.split.depthfl.DepthFL.evaluate` of the global model."""
        alg = cast("DepthFL", self)
        return alg.evaluate()


def holder_mean(summed: torch.Tensor, holders: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
    """Per coordinate ``summed / holders``; ``previous`` where ``holders`` is 0: DepthFL's depth-wise FedAvg
    step, on the simulator's stacked models (``depthfl._depth_average``) and on a deployed round's sum."""
    return torch.where(holders > 0, summed / holders.clamp(min=1.0), previous)
