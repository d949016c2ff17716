"""FedAvg (McMahan et al. 2017) as written in 000 Sec. II-A, Eqs. (2)–(3).

Round t: the server samples S^t (fixed-size or Poisson), broadcasts w̄^{t−1}; each i ∈ S^t runs Q local SGD
steps
w_i^{t,r} = w_i^{t,r−1} − η ∇F_i(w_i^{t,r−1}; B_i^{t,r}) from w_i^{t,0} = w̄^{t−1} (Eq. 2); the server averages
w̄^t = (1/|S^t|) Σ_{i∈S^t} w_i^{t,Q} (Eq. 3). An empty cohort leaves the model unchanged. No privacy: no
events, ``privacy_unit`` None, and the run reports ε = ∞.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar

from pydantic import BaseModel

from ampfl.fl.algorithms._common import CohortParams, FederatedAlgorithm
from ampfl.fl.algorithms.round_protocol import ClientMessage, OwnRoundProtocol

if TYPE_CHECKING:
    import numpy as np
    import torch

    from ampfl.fl.algorithms.round_protocol import GaussianShares
    from ampfl.fl.engine.vectorised import LocalResult


class FedAvgParams(CohortParams):
    """Hyper-parameters of FedAvg (see :class:`CohortParams` for the fields)."""


class FedAvg(OwnRoundProtocol, FederatedAlgorithm):
    """Federated averaging of full local models (000 Eqs. 2–3)."""

    name: ClassVar[str] = "fedavg"
    Params: ClassVar[type[BaseModel]] = FedAvgParams

    def set_up(self) -> None:
        super().set_up()
        self.p: FedAvgParams = self.params  # type: ignore[assignment]
        self.sampler = self.make_cohort_sampler(self.p)

    def run_round(self, round_index: int) -> dict[str, float]:
        clients = self.participants(self.sampler, round_index)
        if len(clients) == 0:
            return {"participants": 0.0}
        result = self.cohort_local_sgd(self.global_params, clients, round_index, self.p, average=True)
        self.global_params = result.params  # Eq. (3): the mean of the clients' models
        return {"participants": float(len(clients)), "train_loss": float(result.loss.mean())}

    # -- the round protocol (ampfl.fl.algorithms.round_protocol) ---------------------------------------
    def sampled_clients(self, round_index: int) -> np.ndarray:
        """The simulator's cohort of round ``round_index`` (:meth:`participants` of the run's sampler)."""
        return self.participants(self.sampler, round_index)

    def local_message(
        self, broadcast: torch.Tensor, client: int, result: LocalResult, trained: torch.Tensor | None
    ) -> ClientMessage:
        """Eq. (2): the client's local model w_i after Q steps (the simulator's mini-batches)."""
        examples = self.num_examples(client)
        metrics = {"train_loss": float(result.loss.mean()), "num-examples": examples}
        return ClientMessage(result.params[0], metrics)

    def aggregate(
        self, total: torch.Tensor, *, count: int | None, asked: int, generator: torch.Generator | None
    ) -> None:
        """Eq. (3): the mean of the ``count`` local models; an empty round keeps the model."""
        if count:
            self.global_params = total / count

    def message_bound(self) -> float:
        """A local model is not bounded (FedAvg has no secure summation)."""
        return math.inf

    def gaussian_shares(self) -> GaussianShares | None:
        return None
