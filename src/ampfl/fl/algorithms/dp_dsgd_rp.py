"""DP-DSGD with random participation (paper 004, Algorithm 1 and Eq. 4).

Paper 004: B. Hasırcıoğlu & D. Gündüz, "Privacy Amplification via Random Participation in Federated Learning",
arXiv:2205.01556v1. Iteration t:

* client side: each of the N clients joins with probability p (B ~ Bern(p)); a joining client samples each of
  its d records independently with probability q (S_i) and sends g_i = Σ_{s∈S_i} ∇ℓ(w_t, s)/max(1, ‖∇ℓ(w_t,
  s)‖/C);
* server side (Eq. 4): ĝ_t = (Σ_{i∈P_t} g_i + N(0, σ² I_m)) / (p N_t q d), then w_{t+1} = w_t − η ĝ_t
  (optionally with heavy-ball momentum μ, as in 004 App. B.2; post-processing, no privacy cost).
  The noise is added even when nobody joined.

σ is either given (``noise_std``) or calibrated for a per-iteration (ε, δ) by the chosen analysis of
``ampfl.accounting.random_checkin`` (``paper`` = Thm 4.1, ``wcs`` = Thm 5.2, ``ols`` = Thm 5.1, ``cs`` = Cor.
5.3);
the composed ε after T iterations at ``target_delta`` is reported by the same module. Only ``wcs`` and ``ols``
are sound upper bounds (see that module's docstring); ``wcs`` is the default.

All clients must hold d records (004's "N clients with d samples each"); with unequal local datasets every
client uses a fixed random subset of d = min_i |D_i| records, chosen once from the run seed.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ampfl.accounting.random_checkin import ANALYSES, RECOMMENDED_ANALYSIS, calibrate_sigma, epsilon_composed
from ampfl.fl.algorithms._common import FederatedAlgorithm
from ampfl.fl.algorithms.base import ROLE_CHECKIN, ROLE_DATA, ROLE_NOISE, PrivacyReport
from ampfl.fl.sampling import RandomCheckInSampler, poisson_local_batches

if TYPE_CHECKING:
    from ampfl.fl.engine import Engine
    from ampfl.fl.task import Task

ANALYSIS_LABELS = {
    "paper": "paper (004 Thm 4.1, not a proven bound)",
    "wcs": "wcs (004 Thm 5.2)",
    "ols": "ols (004 Thm 5.1)",
    "cs": "cs (004 Cor. 5.3, a lower bound for random check-in)",
}


class DPDSGDRPParams(BaseModel):
    """Hyper-parameters of DP-DSGD with random participation (defaults: 004 Sec. 6.2 sampling rates)."""

    model_config = ConfigDict(extra="forbid")

    participation_probability: float = Field(0.1, gt=0.0, le=1.0, description="p")
    sampling_probability: float = Field(0.1, gt=0.0, le=1.0, description="q, local Poisson rate")
    clip_norm: float = Field(1.0, gt=0.0, description="C, per-example gradient bound")
    analysis: str = Field(RECOMMENDED_ANALYSIS, description=f"one of {list(ANALYSES)}")
    epsilon: float = Field(0.015, gt=0.0, description="per-iteration ε (004 Sec. 6: 0.015)")
    delta: float = Field(1e-6, gt=0.0, lt=1.0, description="per-iteration δ (004 Sec. 6: 1e-6)")
    noise_std: float | None = Field(None, ge=0.0, description="σ; when given, no calibration")
    target_delta: float = Field(1e-5, gt=0.0, lt=1.0, description="δ of the composed guarantee")
    learning_rate: float = Field(0.1, gt=0.0, description="η")
    momentum: float = Field(
        0.0, ge=0.0, lt=1.0, description="server heavy-ball momentum μ (004 App. B.2: 0.9)"
    )

    @field_validator("analysis")
    @classmethod
    def _known_analysis(cls, v: str) -> str:
        if v not in ANALYSES:
            raise ValueError(f"analysis must be one of {list(ANALYSES)}")
        return v


class DPDSGDRandomParticipation(FederatedAlgorithm):
    """004 Algorithm 1: random participation, local Poisson sampling, per-example clipping, central noise."""

    name: ClassVar[str] = "dp_dsgd_rp"
    Params: ClassVar[type[BaseModel]] = DPDSGDRPParams

    def __init__(self, params: BaseModel, task: Task, *, seed: int, engine: Engine | None = None) -> None:
        super().__init__(params, task, seed=seed, engine=engine)
        self.p: DPDSGDRPParams = params  # type: ignore[assignment]
        n = task.num_clients
        self.d = int(task.client_sizes().min())
        if self.d < 1:
            raise ValueError("every client must hold at least one record.")
        pick = self.rng(-1, ROLE_DATA)
        self.local_data = [
            ix if len(ix) == self.d else np.sort(pick.choice(ix, self.d, replace=False))
            for ix in self.client_indices
        ]
        self.sampler = RandomCheckInSampler(n, self.p.participation_probability)
        if self.p.noise_std is not None:
            self.sigma = float(self.p.noise_std)
        else:
            self.sigma = calibrate_sigma(
                analysis=self.p.analysis,
                p=self.p.participation_probability,
                q=self.p.sampling_probability,
                d=self.d,
                epsilon=self.p.epsilon,
                delta=self.p.delta,
                clip=self.p.clip_norm,
            )
        self.velocity = torch.zeros_like(self.global_params)
        self._reports: dict[int, PrivacyReport] = {}

    def scale(self) -> float:
        """1/(p N_t q d) of Eq. (4)."""
        p, q = self.p.participation_probability, self.p.sampling_probability
        return 1.0 / (p * self.task.num_clients * q * self.d)

    def run_round(self, round_index: int) -> dict[str, float]:
        clients = self.sampler.sample(round_index, self.rng(round_index, ROLE_CHECKIN))
        total = torch.zeros_like(self.global_params)
        metrics = {"participants": float(len(clients))}
        if len(clients):
            idx, mask = poisson_local_batches(
                self.local_data,
                clients,
                sampling_probability=self.p.sampling_probability,
                rng=self.rng(round_index, ROLE_DATA),
            )
            result = self.engine.clipped_gradient_sum(
                self.model, self.global_params, self.x_train, self.y_train, idx, mask, clip=self.p.clip_norm
            )
            total = result.params.sum(0)
            examples = float(mask.sum())
            metrics["examples"] = examples
            if examples > 0:
                metrics["train_loss"] = float(result.loss.sum()) / examples
        noise = torch.randn(total.shape, generator=self.torch_generator(round_index, ROLE_NOISE)) * self.sigma
        g_hat = (total + noise) * self.scale()  # Eq. (4)
        self.velocity = self.p.momentum * self.velocity + g_hat
        self.global_params = self.global_params - self.p.learning_rate * self.velocity
        return metrics

    def privacy(self, rounds_done: int) -> PrivacyReport:
        if rounds_done in self._reports:
            return self._reports[rounds_done]
        label = ANALYSIS_LABELS[self.p.analysis]
        if rounds_done == 0:
            return PrivacyReport(epsilon=0.0, delta=0.0, analysis=label)
        if self.sigma == 0.0:
            report = PrivacyReport(epsilon=math.inf, delta=self.p.target_delta, analysis=label + ", no noise")
        else:
            eps = epsilon_composed(
                analysis=self.p.analysis,
                p=self.p.participation_probability,
                q=self.p.sampling_probability,
                d=self.d,
                sigma=self.sigma,
                iterations=rounds_done,
                delta=self.p.target_delta,
                clip=self.p.clip_norm,
            )
            report = PrivacyReport(epsilon=float(eps), delta=self.p.target_delta, analysis=label)
        self._reports[rounds_done] = report
        return report

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["velocity"] = self.velocity.clone()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.velocity = state["velocity"].clone()
