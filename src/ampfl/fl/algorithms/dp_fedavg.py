"""DP-FedAvg with client-level differential privacy (McMahan et al. 2018; Algorithm 3 of paper 001, App. D,
as recovered in RECOVERED_MATH.md §2.5 [D]).

Round t: the server samples clients (fixed-size m of N without replacement, or Poisson with rate q) and
broadcasts w^t; each selected client runs Q local SGD steps and forms Δ_i = w_i^{t,Q} − w^t, clips it,
Δ̃_i = Δ_i · min(1, C/‖Δ_i‖), and the server updates

    w^{t+1} = w^t + η_s · (Σ_i Δ̃_i + ξ) / m̄,   ξ ~ N(0, z² C² I_d),   m̄ = E|S^t| (m, or qN),

where m̄ is a public constant (docs/threat_model.md): the cohort size m for fixed-size sampling;
for Poisson sampling the declared ``expected_clients`` (qN depends on N, the number of clients, which the
add/remove-one-client relation makes private: dividing by it would change the released noise's scale between
neighbours). A private Poisson config without ``expected_clients`` is refused in one line, unless ``[privacy]
neighbouring = "replace-one"`` declares N public (then m̄ = qN and the run accounts each Poisson round as the
Gaussian at sensitivity 2C without the sampling amplification, noise multiplier z/2:
:func:`ampfl.fl.privacy.run_accountant.replace_one_event`; ``target_epsilon`` calibrates z for that event).
Fixed-size sampling needs no declaration (m is public configuration; ``expected_clients``, if given, overrides
it) and is replace-one already (below), whatever ``neighbouring`` says.

where z = ``noise_multiplier``. ``noise_placement="distributed"`` draws ξ as per-client shares
ξ_i ~ N(0, z² C² / m · I_d) that sum to N(0, z² C² I_d) under secure aggregation (Alg. 3 step 4); it requires
fixed-size sampling, because with Poisson sampling the realised cohort can be smaller than expected and the
shares would sum to less noise than accounted. With Poisson sampling the noise is released even when nobody
was sampled.

Privacy (unit: one client). Each round reports one event (:meth:`DPFedAvg.round_events`), composed by the
run's accountant (``ampfl.fl.privacy.run_accountant``): Poisson sampling, add/remove one client (Δ₂ = C):
``PoissonSampledEvent(q, GaussianEvent(z))``; fixed-size sampling, replace one client (Δ₂ = 2C):
``SampledWithoutReplacementEvent(N, m, GaussianEvent(z/2))`` with the accountant's relation REPLACE_ONE (the
event's noise multiplier is σ/Δ₂; see docs/units.md and dp-accounting #378). ``target_epsilon`` calibrates z
for that event over ``num_rounds`` rounds with the run's ``[privacy]`` accountant and δ
(the run calibrates it: :mod:`ampfl.fl.privacy.calibration`). z = 0 gives no guarantee (``privacy_unit`` None,
ε = ∞).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar, Literal

import torch
from pydantic import BaseModel, Field, model_validator

from ampfl.accounting.events import GaussianEvent, PrivacyEvent
from ampfl.fl.algorithms._common import CohortParams, FederatedAlgorithm, check_noise_given_once, clip_rows
from ampfl.fl.algorithms.base import ROLE_NOISE
from ampfl.fl.algorithms.round_protocol import ClientMessage, GaussianShares, OwnRoundProtocol
from ampfl.fl.sampling import FixedSizeSampler

if TYPE_CHECKING:
    import numpy as np

    from ampfl.fl.engine.vectorised import LocalResult
    from ampfl.fl.privacy.calibration import CalibratedNoise, NoiseTarget


class DPFedAvgParams(CohortParams):
    """Hyper-parameters of DP-FedAvg. Give ``noise_multiplier`` or (``target_epsilon`` and ``num_rounds``)."""

    clip: float = Field(1.0, gt=0.0, description="C, L2 bound of each client's update")
    noise_multiplier: float | None = Field(None, ge=0.0, description="z = noise std / C")
    target_epsilon: float | None = Field(
        None, gt=0.0, description="calibrate z for this ε after num_rounds (at [privacy] delta)"
    )
    num_rounds: int | None = Field(None, ge=1, description="T used to calibrate z for target_epsilon")
    noise_placement: Literal["central", "distributed"] = "central"
    expected_clients: float | None = Field(
        None, gt=0.0, description="m̄, the public constant the server divides by (Poisson: about qN)"
    )
    server_learning_rate: float = Field(1.0, gt=0.0, description="η_s")

    @model_validator(mode="after")
    def _noise_given_once(self) -> DPFedAvgParams:
        check_noise_given_once(self.noise_multiplier, self.target_epsilon, self.num_rounds)
        if self.noise_placement == "distributed" and self.client_sampling != "fixed":
            raise ValueError("noise_placement = 'distributed' requires client_sampling = 'fixed'")
        return self


class DPFedAvg(OwnRoundProtocol, FederatedAlgorithm):
    """DP-FedAvg: clipped client updates plus Gaussian noise on their sum (client-level DP)."""

    name: ClassVar[str] = "dp_fedavg"
    Params: ClassVar[type[BaseModel]] = DPFedAvgParams

    def set_up(self) -> None:
        super().set_up()
        self.p: DPFedAvgParams = self.params  # type: ignore[assignment]
        self.sampler = self.make_cohort_sampler(self.p)
        self.neighboring_relation = self.sampler.neighboring_relation
        # a target_epsilon is calibrated by the run (noise_targets, set_noise), hence private
        self._set_noise_multiplier(math.nan if self.p.noise_multiplier is None else self.p.noise_multiplier)
        declared = self.p.expected_clients
        if declared is None and self.p.client_sampling == "fixed":
            declared = float(self.p.cohort_size)  # m: public configuration
        self.normaliser = self.public_constant(
            declared,
            key="expected_clients",
            from_data=self.sampler.expected_cohort(),
            private=self.privacy_unit is not None,
        )

    def _set_noise_multiplier(self, z: float) -> None:
        self.noise_multiplier = float(z)
        self.noise_std = self.noise_multiplier * self.p.clip
        self.privacy_unit = None if self.noise_multiplier == 0.0 else "client"

    def noise_targets(self) -> list[NoiseTarget]:
        """z for ``target_epsilon`` after ``num_rounds`` rounds of :meth:`event_at`, calibrated by the run."""
        if self.p.target_epsilon is None:
            return []
        from ampfl.fl.privacy.calibration import NoiseTarget

        assert self.p.num_rounds is not None
        return [
            NoiseTarget(
                "noise_multiplier",
                self.event_at,
                self.p.target_epsilon,
                self.p.num_rounds,
                self.neighboring_relation,
                who=self.name,
            )
        ]

    def set_noise(self, resolved: Mapping[str, CalibratedNoise]) -> None:
        self._set_noise_multiplier(resolved["noise_multiplier"].noise_multiplier)

    # -- privacy events -------------------------------------------------------------------------------
    def event_at(self, noise_multiplier: float) -> PrivacyEvent:
        """One round's event at noise multiplier z = σ/C (module docstring: Δ₂ per relation)."""
        fixed = isinstance(self.sampler, FixedSizeSampler)
        return self.sampler.event(GaussianEvent(noise_multiplier=noise_multiplier / (2.0 if fixed else 1.0)))

    def round_events(self, round_index: int) -> list[tuple[PrivacyEvent, int]]:
        if self.privacy_unit is None:
            return []
        return [(self.event_at(self.noise_multiplier), 1)]

    # -- training -------------------------------------------------------------------------------------
    def run_round(self, round_index: int) -> dict[str, float]:
        clients = self.participants(self.sampler, round_index)
        c = self.p.clip
        total = torch.zeros_like(self.global_params)
        metrics = {"participants": float(len(clients))}
        if len(clients):
            # Σ_i clip_C(w_i − w) and the norms: from the K models (clip_rows), or where the engine keeps
            # the updates in low-rank form (the CNN), from their factors without forming the K models
            result = self.cohort_local_sgd(self.global_params, clients, round_index, self.p, clip_updates=c)
            total, norms = result.params, result.norms
            assert norms is not None
            metrics["train_loss"] = float(result.loss.mean())
            metrics["clipped_fraction"] = float((norms > c).to(torch.float32).mean())
        gen = self.torch_generator(round_index, ROLE_NOISE)
        self.global_params = self.server_update(total, len(clients), gen)
        return metrics

    # -- the two halves of a round (the Flower apps of ``ampfl.flower`` call them too) -------------------
    def clip_updates(self, delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Client side: each row Δ_i of ``[K, d]`` clipped to norm C; returns ``(clipped, norms)``."""
        return clip_rows(delta, self.p.clip)

    def server_update(
        self, total: torch.Tensor, num_clients: int, generator: torch.Generator
    ) -> torch.Tensor:
        """Server side: w + η_s (Σ_i Δ̃_i + ξ) / m̄, ``total`` the sum of ``num_clients`` clipped updates."""
        std = self.noise_std
        if self.p.noise_placement == "central":
            noise = torch.randn(self.global_params.shape, generator=generator) * std
        else:  # shares N(0, z²C²/m) per client; they sum to N(0, z²C²) (fixed cohort of size m)
            shares = torch.randn((num_clients, self.global_params.numel()), generator=generator)
            noise = (shares * (std / math.sqrt(num_clients))).sum(0)
        return self.apply_noised_sum(total + noise)

    def apply_noised_sum(self, noised: torch.Tensor) -> torch.Tensor:
        """The new global model w + η_s · noised / m̄ from Σ_i Δ̃_i + ξ, however it was noised (centrally by
        :meth:`server_update`, or by the clients' noise shares under secure aggregation)."""
        return self.global_params + self.p.server_learning_rate * noised / self.normaliser

    # -- the round protocol (ampfl.fl.algorithms.round_protocol) ---------------------------------------
    noise_shares: ClassVar[bool] = True

    @classmethod
    def deploy_problem(cls, params: BaseModel, *, secure_aggregation: bool) -> str | None:
        """Deployed noise is central (the server's) or, under SecAgg+, the clients' shares with Poisson
        sampling by each client's own coin."""
        placement = getattr(params, "noise_placement", "central")
        if placement != "central":
            return (
                "algorithm.noise_placement: ampfl deploy supports 'central' only "
                "(for noise shares added by the clients use --secure-aggregation secaggplus)."
            )
        sampling = getattr(params, "client_sampling", None)
        if secure_aggregation and sampling != "poisson":
            return (
                "algorithm.client_sampling: --secure-aggregation secaggplus runs dp_fedavg with 'poisson' "
                f"sampling only (each node flips its own coin, hidden from the server). Found {sampling!r}."
            )
        return None

    def own_coin(self, client: int, *, noise_shares: bool) -> float | None:
        """Under noise shares (Poisson sampling) each client flips its own coin Bern(q), hidden from the
        server; otherwise None: the server samples the cohort."""
        return self.p.sampling_rate if noise_shares else None

    def sampled_clients(self, round_index: int) -> np.ndarray:
        """The simulator's cohort of round ``round_index`` (:meth:`participants` of the run's sampler)."""
        return self.participants(self.sampler, round_index)

    def local_message(
        self, broadcast: torch.Tensor, client: int, result: LocalResult, trained: torch.Tensor | None
    ) -> ClientMessage:
        """The clipped update Δ̃_i = clip_C(w_i − w) after Q local steps (:meth:`client_update`: on the
        simulator's mini-batches of the cohort when the server sampled it, else on mini-batches from the
        client's own randomness)."""
        update, norms = self.clip_updates(result.params - broadcast)
        metrics = {
            "train_loss": float(result.loss.mean()),
            "clipped": float(norms[0] > self.p.clip),
            "num-examples": self.num_examples(client),
        }
        return ClientMessage(update[0], metrics)

    def aggregate(
        self, total: torch.Tensor, *, count: int | None, asked: int, generator: torch.Generator | None
    ) -> None:
        """w + η_s (Σ_i Δ̃_i + ξ) / m̄: ξ from ``generator`` (:meth:`server_update`), or already in ``total``
        (the clients' noise shares)."""
        if generator is None:
            self.global_params = self.apply_noised_sum(total)
        else:
            self.global_params = self.server_update(total, asked, generator)

    def message_bound(self) -> float:
        """‖Δ̃_i‖ ≤ C, so every entry is within [-C, C]."""
        return float(self.p.clip)

    def gaussian_shares(self) -> GaussianShares | None:
        return GaussianShares(self.noise_multiplier, self.noise_std, self.event_at)
