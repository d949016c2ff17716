"""MS-PAFL: model-splitting privacy-amplified federated learning (paper 000, Algorithm 1).

Paper 000: Li, Wang, Tian, Wang, Su, "Federated Learning with Enhanced Privacy via Model Splitting and Random
Client Participation", arXiv:2509.25906v1. Every round t:

1. random check-in: client i draws ζ_i^t ~ Bern(p_i) with its own p_i (Eq. 10); X^t = {i : ζ_i^t = 1};
2. each i ∈ X^t starts from w_i^{t,0} = (w_{i,α}, w̄_p) (Eq. 14) and runs Q local SGD steps on mini-batches of
   size b drawn without (WOR) or with (WR) replacement — the Q·b draws of Eq. (9) (Eq. 2b);
3. split w_i^t = (w_{i,α}^t, w_{i,p}^t); the private part w_{i,α}^t stays with the client (a lazily created
   :class:`~ampfl.fl.state.ClientStore` row);
4. clip the public part, ŵ_{i,p} = w_{i,p} / max(1, ‖w_{i,p}‖/C) (Eq. 11), and add ξ_i ~ N(0, σ² I) with σ
   from Lemma 1 for (ε_ℓ, δ_ℓ) and sensitivity s = 2C (Eq. 12, σ = 2C√(2 ln(1.25/δ_ℓ))/ε_ℓ), or
   σ = C·z for a given ``noise_multiplier`` z = σ/C (docs/units.md: std / clip norm, as every algorithm);
5. the server aggregates w̄_p = (1/(ν |X^t|)) Σ_{i∈X^t} w̃_{i,p} with ν = 1 − Π_i (1 − p_i) (Eq. 13);
   when nobody checked in, w̄_p is kept.

Notes on the paper (documented in docs/ms_pafl.md by the accounting's author; repeated here for the
simulator): Eq. (13) needs ν, i.e. every p_i, although Sec. III-A says the server never sees p_i; the
simulator computes ν from the clients' p_i (``nu_correction=False`` uses the plain mean of Eq. 3). Dividing by
ν makes the average *larger* by 1/ν given X^t ≠ ∅, so it is not unbiased as claimed (the conditional mean of
the plain average already is); for the paper's settings ν ≈ 1 (N = 100, p = 0.1: 1 − 0.9^100 ≈ 1 − 2.7e−5).

Units: ``noise_multiplier`` z is σ/C, the noise std over the clip norm, in the TOML, the
run's ``summary.json`` and metrics, as for every other algorithm (an older
run's value of σ/(2C) is multiplied by 2 for the same σ). The upload's sensitivity under replace-one is 2C
(Eq. C.3), so the accounting event's own multiplier is σ/(2C) = z/2; that factor 2 lives only in
:meth:`MSPAFL.event_at`.

Privacy (unit: one record). Each round reports
``MSPAFLRoundEvent(participation=max_i p_i, noise_multiplier=z/2, private_state="persistent")`` and the
run's accountant composes it: the server sees every upload and who sent it, so participation is public to it,
and the private submodel persists across rounds, so local subsampling does not amplify (each participated
round is a Gaussian mechanism with sensitivity 2C). The paper's amplified analyses (Thms 1–4 and the "tight"
one) assume otherwise and stay available through ``ampfl account ms-pafl`` as labelled alternatives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
import torch
from pydantic import BaseModel, Field, field_validator

from ampfl.accounting.events import MSPAFLRoundEvent, PrivacyEvent
from ampfl.accounting.ms_pafl import ldp_sigma
from ampfl.fl.algorithms._common import FederatedAlgorithm, LocalTrainingParams
from ampfl.fl.algorithms.base import ROLE_CHECKIN, ROLE_NOISE
from ampfl.fl.algorithms.round_protocol import ClientMessage, OwnRoundProtocol
from ampfl.fl.params import ParamPartition
from ampfl.fl.sampling import RandomCheckInSampler
from ampfl.fl.state import ClientStore

if TYPE_CHECKING:
    from ampfl.fl.algorithms.round_protocol import ClientInstructions, GaussianShares


class MSPAFLParams(LocalTrainingParams):
    """Hyper-parameters of MS-PAFL (defaults: 000 Fig. 2, Q = b = 5, ε_ℓ = 1, δ_ℓ = 1e-4, C = 1)."""

    participation: float | list[float] = Field(0.3, description="p, or one p_i per client (Eq. 10)")
    num_local_steps: int = Field(5, ge=1, description="Q")
    batch_size: int = Field(5, ge=1, description="b")
    clip: float = Field(1.0, gt=0.0, description="C of Eq. (11)")
    eps_local: float = Field(1.0, gt=0.0, le=1.0, description="ε_ℓ per round (Lemma 1 needs ε_ℓ ≤ 1)")
    delta_local: float = Field(1e-4, gt=0.0, lt=1.0, description="δ_ℓ per round")
    noise_multiplier: float | None = Field(
        None,
        ge=0.0,
        description="z = σ/C (std / clip), replaces Lemma 1's σ for (eps_local, delta_local); 0: no privacy",
    )
    clip_target: Literal["model", "update"] = Field(
        "model",
        description="clip the public model (Eq. 11) or its update w_p - w̄_p (variant, same sensitivity)",
    )
    private_fraction: float = Field(
        0.5, ge=0.0, le=1.0, description="d_α/d; the first coordinates are private"
    )
    private_layers: list[str] | None = Field(
        None, description="parameter names forming w_α (overrides fraction)"
    )
    nu_correction: bool = Field(True, description="divide the average by ν (Eq. 13)")
    max_eval_clients: int = Field(1000, ge=1, description="clients whose personal model is evaluated")

    @field_validator("participation")
    @classmethod
    def _probabilities(cls, v: float | list[float]) -> float | list[float]:
        values = v if isinstance(v, list) else [v]
        if not values or any(not (0.0 < float(x) <= 1.0) for x in values):
            raise ValueError("participation must be in (0, 1]")
        return v


class MSPAFL(OwnRoundProtocol, FederatedAlgorithm):
    """MS-PAFL (000 Algorithm 1) with per-client private submodels."""

    name: ClassVar[str] = "ms_pafl"
    Params: ClassVar[type[BaseModel]] = MSPAFLParams

    privacy_unit: str | None = "record"

    def set_up(self) -> None:
        super().set_up()
        self.p: MSPAFLParams = self.params  # type: ignore[assignment]
        n = self.task.num_clients
        if isinstance(self.p.participation, list) and len(self.p.participation) != n:
            raise ValueError(
                f"participation must have one entry per client ({n}). Found {len(self.p.participation)}."
            )
        self.sampler = RandomCheckInSampler(n, self.p.participation)
        if self.p.private_layers is not None:
            self.partition = ParamPartition.by_layers(self.model.spec, self.p.private_layers)
        else:
            self.partition = ParamPartition.by_fraction(self.model.dim, self.p.private_fraction)
        if self.partition.size("public") == 0:
            raise ValueError("the public submodel is empty; lower private_fraction.")
        initial = self.partition.split(self.global_params)
        self.store = ClientStore(n, initial["private"])
        self.public = initial["public"].clone()
        if self.p.noise_multiplier is not None:
            self.noise_multiplier = float(self.p.noise_multiplier)
        else:  # Lemma 1: σ = 2C √(2 ln(1.25/δ_ℓ)) / ε_ℓ (s = 2C), so z = σ/C does not depend on C
            self.noise_multiplier = ldp_sigma(
                eps_local=self.p.eps_local, delta_local=self.p.delta_local, clip=1.0
            )
        self.noise_std = self.p.clip * self.noise_multiplier  # Eq. (12): σ = C·z
        self.privacy_unit = "record" if self.noise_multiplier > 0.0 else None

    # -- privacy events -------------------------------------------------------------------------------
    def event_at(self, noise_multiplier: float) -> PrivacyEvent:
        """One round at noise multiplier z = σ/C, seen by the server (module docstring).

        The event's multiplier is relative to the upload's replace-one sensitivity 2C (Eq. C.3): σ/(2C) = z/2.
        This is the only place the factor 2 of the neighbouring relation appears.
        """
        return MSPAFLRoundEvent(
            participation=self.sampler.participation,
            noise_multiplier=noise_multiplier / 2.0,
            private_state="persistent",
        )

    def round_events(self, round_index: int) -> list[tuple[PrivacyEvent, int]]:
        if self.privacy_unit is None:
            return []
        return [(self.event_at(self.noise_multiplier), 1)]

    # -- training -------------------------------------------------------------------------------------
    def run_round(self, round_index: int) -> dict[str, float]:
        clients = self.sampler.sample(round_index, self.rng(round_index, ROLE_CHECKIN))  # Eq. (10)
        metrics = {"participants": float(len(clients))}
        if len(clients) == 0:
            return metrics
        start = self.partition.merge(
            {"private": self.store.get(clients), "public": self.public.expand(len(clients), -1)}
        )  # Eq. (14)
        result = self.cohort_local_sgd(start, clients, round_index, self.p)  # Eqs. (9), (2b)
        parts = self.partition.split(result.params)
        self.store.set(clients, parts["private"])  # w_{i,α} stays on the client
        noisy, norms, ratio = self.privatize_public(
            parts["public"], self.torch_generator(round_index, ROLE_NOISE)
        )
        nu = self.aggregate_public(noisy.sum(0), len(clients))
        metrics.update(
            train_loss=float(result.loss.mean()),
            clipped_fraction=float((norms > self.p.clip).to(torch.float32).mean()),
            noise_to_signal=float(ratio.mean()),
            nu=float(nu),
        )
        return metrics

    # -- the two halves of a round (the Flower apps of ``ampfl.flower`` call them too) -------------------
    def _offset(self) -> torch.Tensor:
        return self.public if self.p.clip_target == "update" else torch.zeros_like(self.public)

    def privatize_public(
        self, public: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Client side, Eqs. (11)–(12) on the public parts ``[K, d_p]`` (relative to the current w̄_p).

        Returns ``(noisy parts, norms before clipping, noise-to-signal ratios)``.
        """
        # Eq. (11) clips the public model itself; the "update" variant clips w_p - w̄_p and adds w̄_p back
        # after the noise (post-processing of the server's own broadcast), same sensitivity 2C.
        public = public - self._offset()
        norms = torch.linalg.vector_norm(public, dim=1)
        clipped = public / torch.clamp(norms / self.p.clip, min=1.0)[:, None]  # Eq. (11)
        noise = torch.randn(clipped.shape, generator=generator)
        noisy = clipped + self.noise_std * noise  # Eq. (12)
        noise_norm = self.noise_std * torch.linalg.vector_norm(noise, dim=1)
        signal_norm = torch.linalg.vector_norm(clipped, dim=1).clamp(min=1e-12)
        return noisy, norms, noise_norm / signal_norm

    def aggregate_public(self, noisy_sum: torch.Tensor, count: int) -> float:
        """Server side, Eq. (13): w̄_p from the sum of ``count`` noisy public parts; returns ν."""
        nu = self.sampler.probability_someone_checks_in() if self.p.nu_correction else 1.0
        self.public = self._offset() + noisy_sum / (nu * count)  # Eq. (13)
        return float(nu)

    def client_models(self, clients: np.ndarray) -> torch.Tensor:
        """Recombined models (w_{i,α}, w̄_p) of ``clients`` (Eq. 14), shape ``[K, d]``."""
        return self.partition.merge(
            {"private": self.store.get(clients), "public": self.public.expand(len(clients), -1)}
        )

    def public_model(self) -> torch.Tensor:
        """The model a new client starts from: the initial private part with the current w̄_p."""
        return self.partition.merge({"private": self.store.default, "public": self.public})

    def evaluate(self) -> dict[str, float]:
        """Public-model accuracy and each client's recombined model (Eq. 14) on the test set.

        ``personal_accuracy_*``: the recombined models on the whole test set; ``local_accuracy_*``: on each
        client's own data distribution (:meth:`model_metrics`; 000's personal metric). At most
        ``max_eval_clients`` clients (a fixed random subset) are evaluated.
        """
        clients = self.eval_clients()[: self.p.max_eval_clients]
        scores = self.model_metrics(self.client_models(clients))
        personal, local = scores["test"], scores["local"]
        return {
            "accuracy": self.global_accuracy(self.public_model()),
            "personal_accuracy_mean": float(personal.mean()),
            "personal_accuracy_std": float(personal.std()),
            "local_accuracy_mean": float(local.mean()),
            "local_accuracy_std": float(local.std()),
        }

    # -- the round protocol (ampfl.fl.algorithms.round_protocol) ---------------------------------------
    #: Eq. (13) divides by |X^t|; the analysis holds with participation public to the server.
    sum_reveals_count: ClassVar[bool] = True
    #: Each client adds its own Gaussian noise to its public part (Eq. 12).
    noised_on_client: ClassVar[bool] = True

    def broadcast(self) -> torch.Tensor:
        """w̄_p only (Eq. 14): the private parts stay on the clients."""
        return self.public

    def own_coin(self, client: int, *, noise_shares: bool) -> float | None:
        """p_i: every client checks in with its own coin ζ_i ~ Bern(p_i) (Eq. 10)."""
        p = self.p.participation
        return float(p[client] if isinstance(p, list) else p)

    def client_update(
        self,
        broadcast: torch.Tensor,
        instructions: ClientInstructions,
        client_state: torch.Tensor | None,
        rng: np.random.Generator,
    ) -> tuple[ClientMessage, torch.Tensor | None]:
        """Algorithm 1 on one client: Q local steps from (w_{i,α}, w̄_p) (Eq. 14; ``client_state`` w_{i,α},
        None: the initial private part) on mini-batches from ``rng``; returns the clipped, noised public part
        (Eqs. 11–12, noise from ``rng``) and the new w_{i,α}, which never leaves the client."""
        private = (
            self.partition.split(self.global_params)["private"] if client_state is None else client_state
        )
        self.public = broadcast  # the w̄_p the clip of the "update" variant is relative to
        start = self.partition.merge({"private": private[None], "public": broadcast[None]})
        result = self.local_update(start, instructions, self.p, rng)
        parts = self.partition.split(result.params)
        noise = torch.Generator().manual_seed(int(rng.integers(2**63)))
        noisy, norms, ratio = self.privatize_public(parts["public"], noise)
        metrics = {
            "train_loss": float(result.loss.mean()),
            "clipped": float(norms[0] > self.p.clip),
            "noise_to_signal": float(ratio[0]),
        }
        return ClientMessage(noisy[0], metrics), parts["private"][0].contiguous()

    def aggregate(
        self, total: torch.Tensor, *, count: int | None, asked: int, generator: torch.Generator | None
    ) -> None:
        """Eq. (13) on the sum of the ``count`` noised public parts (noised by the clients: ``generator`` is
        not used); nobody checked in: w̄_p is kept."""
        if count is None:
            raise ValueError("count: MS-PAFL's server step divides by the number of check-ins (Eq. 13).")
        if count:
            self.aggregate_public(total, count)

    def message_bound(self) -> float:
        """C + 10σ: the clipped public part has norm ≤ C and its noise N(0, σ²) exceeds 10σ in an entry with
        probability erfc(10/√2) ≈ 1.5e-23."""
        return float(self.p.clip + 10.0 * self.noise_std)

    def gaussian_shares(self) -> GaussianShares | None:
        """None: each client noises its own public part in full (Eq. 12)."""
        return None

    def server_evaluate(self) -> dict[str, Any]:
        """The public model's accuracy only: the private submodels are on the clients."""
        return {"accuracy": self.global_accuracy(self.public_model())}

    # -- state ----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(public=self.public.clone(), store=self.store.state_dict())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.public = state["public"].clone()
        self.store.load_state_dict(state["store"])
