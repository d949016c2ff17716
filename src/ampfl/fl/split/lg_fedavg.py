"""LG-FedAvg (Liang et al., 2020) on the split engine: local representation layers, global upper layers.

LG-FedAvg keeps each client's lower ("local representation") layers personal and averages the upper
("global") layers with FedAvg. In the split setting (``lg_fedavg``) the client's bottom (blocks
1..``split_layer``) is split in two: its first ``personal_layers`` blocks are the client's own, trained and
kept by the client and never uploaded nor averaged; the remaining bottom blocks are averaged over the round's
participants (unweighted FedAvg, as ``splitfed``); the server's top (remaining blocks and head) is one shared
model trained on every client's smashed data, i.e. global as in LG-FedAvg. Weights are trained (not masks).
``personal_layers = split_layer`` is ``standalone``, ``personal_layers = 0`` is ``splitfed``.

Privacy: the smashed data and the global blocks are sent in the clear: ε = ∞ (``privacy_unit`` None).
Evaluation: each evaluated client uses its own personal blocks plus the global ones (``accuracy``); there is
no single global bottom, so ``global_accuracy`` is not reported.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import BaseModel, Field

from ampfl.fl.split.algorithms import Standalone
from ampfl.fl.split.common import SplitParams, unflatten
from ampfl.fl.split.masks import layer_indicator


class LGFedAvgParams(SplitParams):
    """LG-FedAvg: the first ``personal_layers`` bottom blocks stay with each client."""

    personal_layers: int = Field(1, ge=0, description="bottom blocks kept personal (never averaged)")


class LGFedAvg(Standalone):
    """LG-FedAvg: personal lower bottom blocks, FedAvg of the upper bottom blocks, shared server top."""

    name: ClassVar[str] = "lg_fedavg"
    Params: ClassVar[type[BaseModel]] = LGFedAvgParams

    def set_up(self) -> None:
        super().set_up()
        self.lg: LGFedAvgParams = self.params  # type: ignore[assignment]
        self.local_part = layer_indicator(self.shapes, self.lg.personal_layers)  # [d] bool
        self.privacy_unit = None  # smashed data and global blocks in the clear: ε = ∞

    def client_bottom(self, ids: torch.Tensor) -> torch.Tensor:
        """The bottoms ``[len(ids), d]`` of clients ``ids``: own personal blocks, global blocks."""
        return torch.where(self.local_part, self.store[ids], self.bottom)

    def run_round(self, round_index: int) -> dict[str, float]:
        clients = self.participants(round_index)
        ids = torch.from_numpy(clients)
        local = self.client_bottom(ids)
        loss = self.train_cohort(clients, round_index, [local], self._stacked)
        self.store[ids] = torch.where(self.local_part, local, self.store[ids])  # personal blocks kept
        self.bottom = torch.where(self.local_part, self.bottom, local.mean(0))  # FedAvg of the global blocks
        return {"participants": float(len(clients)), "train_loss": float(loss.mean())}

    def evaluate(self) -> dict[str, float]:
        ids = torch.from_numpy(self.eval_ids())
        return self.scores([unflatten(b, self.shapes) for b in self.client_bottom(ids)], None)

    def parameters_finite(self) -> bool:
        return super().parameters_finite() and bool(torch.isfinite(self.bottom).all())
