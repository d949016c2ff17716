"""Local-only training: every client trains its own model on its own data and never communicates.

The lower end of every federated comparison: what a client gets without collaboration. Round t:
each client (or, with ``participation`` < 1, each client that checks in, as in 000 Eq. 10) runs Q local SGD
steps (000 Eq. 2) from its own current model, kept in a :class:`~ampfl.fl.state.ClientStore` row (all rows
start from the same seeded initial model). Nothing leaves a client, so there is no privacy event and the run
reports ε = ∞ with ``privacy_unit`` None ("none": no release to protect, not a guarantee).

Metrics: ``accuracy`` is the mean over clients of their own model's accuracy on the whole test set;
``local_accuracy_*`` the accuracy on each client's own data distribution (the personal metric of 000, see
:meth:`~ampfl.fl.algorithms._common.FederatedAlgorithm.model_metrics`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, Field

from ampfl.fl.algorithms._common import FederatedAlgorithm, LocalTrainingParams
from ampfl.fl.algorithms.base import ROLE_CHECKIN
from ampfl.fl.sampling import RandomCheckInSampler
from ampfl.fl.state import ClientStore


class LocalOnlyParams(LocalTrainingParams):
    """Hyper-parameters of local-only training (see :class:`LocalTrainingParams`)."""

    participation: float = Field(1.0, gt=0.0, le=1.0, description="probability a client trains in a round")


class LocalOnly(FederatedAlgorithm):
    """Each client alone: Q local SGD steps per round on its own model, no communication."""

    name: ClassVar[str] = "local_only"
    Params: ClassVar[type[BaseModel]] = LocalOnlyParams

    @classmethod
    def deploy_problem(cls, params: BaseModel, *, secure_aggregation: bool) -> str | None:
        """Nothing is communicated, so there is no round to deploy (:attr:`deploys` stays False)."""
        return (
            "algorithm.name: local_only communicates nothing (each client trains alone, no server), so there "
            "is nothing to deploy: use ampfl run."
        )

    def set_up(self) -> None:
        super().set_up()
        self.p: LocalOnlyParams = self.params  # type: ignore[assignment]
        self.sampler = RandomCheckInSampler(self.task.num_clients, self.p.participation)
        self.store = ClientStore(self.task.num_clients, self.global_params)

    def run_round(self, round_index: int) -> dict[str, float]:
        clients = self.sampler.sample(round_index, self.rng(round_index, ROLE_CHECKIN))
        if len(clients) == 0:
            return {"participants": 0.0}
        result = self.cohort_local_sgd(self.store.get(clients), clients, round_index, self.p)
        self.store.set(clients, result.params)
        return {"participants": float(len(clients)), "train_loss": float(result.loss.mean())}

    def evaluate(self) -> dict[str, float]:
        """Mean test accuracy of the clients' own models, and on each client's own distribution."""
        scores = self.model_metrics(self.store.get(self.eval_clients()))
        test, local = scores["test"], scores["local"]
        return {
            "accuracy": float(test.mean()),
            "personal_accuracy_mean": float(test.mean()),
            "personal_accuracy_std": float(test.std()),
            "local_accuracy_mean": float(local.mean()),
            "local_accuracy_std": float(local.std()),
        }

    def parameters_finite(self) -> bool:
        touched = self.store.touched()
        return bool(self.store.get(touched).isfinite().all()) if len(touched) else True

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(store=self.store.state_dict())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.store.load_state_dict(state["store"])
