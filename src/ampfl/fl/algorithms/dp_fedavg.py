"""DP-FedAvg with client-level differential privacy (McMahan et al. 2018; Algorithm 3 of paper 001, App. D,
as recovered in RECOVERED_MATH.md §2.5 [D]).

Round t: the server samples clients (fixed-size m of N without replacement, or Poisson with rate q) and
broadcasts w^t; each selected client runs Q local SGD steps and forms Δ_i = w_i^{t,Q} − w^t, clips it,
Δ̃_i = Δ_i · min(1, C/‖Δ_i‖), and the server updates

    w^{t+1} = w^t + η_s · (Σ_i Δ̃_i + ξ) / m̄,   ξ ~ N(0, z² C² I_d),   m̄ = E|S^t| (m, or qN),

where z = ``noise_multiplier``. ``noise_placement="distributed"`` draws ξ as per-client shares
ξ_i ~ N(0, z² C² / m · I_d) that sum to N(0, z² C² I_d) under secure aggregation (Alg. 3 step 4); it requires
fixed-size sampling, because with Poisson sampling the realised cohort can be smaller than expected and the
shares would sum to less noise than accounted. With Poisson sampling the noise is released even when nobody
was sampled.

Privacy (unit: one client; dp-accounting RDP): Poisson sampling with add/remove neighbours has Δ₂ = C and the
event ``PoissonSampledDpEvent(q, GaussianDpEvent(z))``; fixed-size sampling has replace-one neighbours, Δ₂ =
2C,
and the event ``SampledWithoutReplacementDpEvent(N, m, GaussianDpEvent(z/2))`` (dp-accounting's noise
multiplier is σ/Δ₂; see STYLE.md on dp-accounting #378). T rounds compose with ``SelfComposedDpEvent``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import dp_accounting
import torch
from pydantic import BaseModel, Field, model_validator

from ampfl.accounting.calibrate import calibrate_decreasing
from ampfl.fl.algorithms._common import CohortParams, FederatedAlgorithm
from ampfl.fl.algorithms.base import ROLE_NOISE, PrivacyReport

if TYPE_CHECKING:
    from ampfl.fl.engine import Engine
    from ampfl.fl.task import Task

RDP_ORDERS = tuple(float(a) for a in [*range(2, 33), 40, 48, 56, 64, 80, 96, 128])
"""Rényi orders of the accountant: integers only (dp-accounting's fractional-order series often fails to
converge for q ≥ 0.5 and is then dropped with a warning), capped at 128 (its WOR bound costs O(α) per order).
Fewer orders can only loosen ε, never shrink it."""


class DPFedAvgParams(CohortParams):
    """Hyper-parameters of DP-FedAvg. Give ``noise_multiplier`` or (``target_epsilon`` and ``num_rounds``)."""

    clip_norm: float = Field(1.0, gt=0.0, description="C, L2 bound of each client's update")
    noise_multiplier: float | None = Field(None, ge=0.0, description="z = noise std / C")
    target_epsilon: float | None = Field(None, gt=0.0, description="calibrate z for this ε after num_rounds")
    target_delta: float = Field(1e-5, gt=0.0, lt=1.0, description="δ of the reported guarantee")
    num_rounds: int | None = Field(None, ge=1, description="T used to calibrate z for target_epsilon")
    noise_placement: Literal["central", "distributed"] = "central"
    server_learning_rate: float = Field(1.0, gt=0.0, description="η_s")

    @model_validator(mode="after")
    def _noise_given_once(self) -> DPFedAvgParams:
        if (self.noise_multiplier is None) == (self.target_epsilon is None):
            raise ValueError("give exactly one of noise_multiplier and target_epsilon")
        if self.target_epsilon is not None and self.num_rounds is None:
            raise ValueError("num_rounds is required with target_epsilon")
        if self.noise_placement == "distributed" and self.client_sampling != "fixed":
            raise ValueError("noise_placement = 'distributed' requires client_sampling = 'fixed'")
        return self


class DPFedAvg(FederatedAlgorithm):
    """DP-FedAvg: clipped client updates plus Gaussian noise on their sum (client-level DP)."""

    name: ClassVar[str] = "dp_fedavg"
    Params: ClassVar[type[BaseModel]] = DPFedAvgParams

    def __init__(self, params: BaseModel, task: Task, *, seed: int, engine: Engine | None = None) -> None:
        super().__init__(params, task, seed=seed, engine=engine)
        self.p: DPFedAvgParams = params  # type: ignore[assignment]
        self.sampler = self.make_cohort_sampler(self.p)
        self.poisson = self.p.client_sampling == "poisson"
        if self.p.noise_multiplier is not None:
            self.noise_multiplier = float(self.p.noise_multiplier)
        else:
            assert self.p.target_epsilon is not None and self.p.num_rounds is not None
            self.noise_multiplier = self.calibrate(self.p.target_epsilon, self.p.num_rounds)

    # -- accounting -----------------------------------------------------------------------------------
    def round_event(self, noise_multiplier: float) -> Any:
        """dp-accounting event of one round (see the module docstring for the Δ₂ of each relation)."""
        z = noise_multiplier if self.poisson else noise_multiplier / 2.0
        return self.sampler.event(dp_accounting.GaussianDpEvent(z))

    def _accountant(self) -> dp_accounting.rdp.RdpAccountant:
        rel = dp_accounting.NeighboringRelation
        return dp_accounting.rdp.RdpAccountant(
            RDP_ORDERS, rel.ADD_OR_REMOVE_ONE if self.poisson else rel.REPLACE_ONE
        )

    def epsilon(self, noise_multiplier: float, rounds: int) -> float:
        """ε after ``rounds`` rounds at ``target_delta`` (dp-accounting RDP)."""
        if rounds == 0:
            return 0.0
        if noise_multiplier == 0.0:
            return math.inf
        acc = self._accountant()
        acc.compose(self.round_event(noise_multiplier), rounds)
        return float(acc.get_epsilon(self.p.target_delta))

    def calibrate(self, target_epsilon: float, rounds: int) -> float:
        """Smallest noise multiplier z (relative tolerance 1e-4, rounded up) with ε(z, T) ≤ target_epsilon."""
        return calibrate_decreasing(
            lambda z: self.epsilon(z, rounds),
            target_epsilon,
            name="noise_multiplier",
            initial=1.0,
            lower_limit=1e-3,
            upper_limit=1e4,
            rtol=1e-4,
        )

    def privacy(self, rounds_done: int) -> PrivacyReport:
        sampling = (
            "Poisson-subsampled, add/remove" if self.poisson else "fixed-size WOR-subsampled, replace-one"
        )
        return PrivacyReport(
            epsilon=self.epsilon(self.noise_multiplier, rounds_done),
            delta=self.p.target_delta,
            analysis=f"dp-accounting RDP ({sampling} Gaussian, client level)",
        )

    # -- training -------------------------------------------------------------------------------------
    def run_round(self, round_index: int) -> dict[str, float]:
        clients = self.participants(self.sampler, round_index)
        c = self.p.clip_norm
        total = torch.zeros_like(self.global_params)
        metrics = {"participants": float(len(clients))}
        if len(clients):
            result = self.engine.local_sgd(
                self.model,
                self.global_params,
                self.x_train,
                self.y_train,
                self.batches(clients, round_index, self.p),
                learning_rate=self.p.learning_rate,
                client_ids=clients,
            )
            delta = result.params - self.global_params
            norms = torch.linalg.vector_norm(delta, dim=1)
            clipped = delta * torch.clamp(c / (norms + 1e-12), max=1.0)[:, None]
            total = clipped.sum(0)
            metrics["train_loss"] = float(result.loss.mean())
            metrics["clipped_fraction"] = float((norms > c).to(torch.float32).mean())
        gen = self.torch_generator(round_index, ROLE_NOISE)
        std = self.noise_multiplier * c
        if self.p.noise_placement == "central":
            noise = torch.randn(self.global_params.shape, generator=gen) * std
        else:  # shares N(0, z²C²/m) per client; they sum to N(0, z²C²) (fixed cohort of size m)
            shares = torch.randn((len(clients), self.global_params.numel()), generator=gen)
            noise = (shares * (std / math.sqrt(len(clients)))).sum(0)
        expected = self.sampler.expected_cohort()
        self.global_params = self.global_params + self.p.server_learning_rate * (total + noise) / expected
        return metrics
