"""Split federated learning algorithms of paper 003: SplitFed, Standalone, SplitFed-PM and PM-SFL.

Every round: the server samples ``max(C·N, 1)`` clients without replacement (003 Alg. 1 line 4); each runs R
split-learning steps with the server (:mod:`ampfl.fl.split.common`); then

- ``splitfed`` (003 Sec. 2.1, [45]): clients train their bottom weights; the server averages the K bottoms
  (FedAvg, unweighted as Eq. 5) into the next global bottom;
- ``standalone``: each client trains and keeps its own bottom (never aggregated), the server's top is shared
  (003 Sec. 6.2 "assisted by the server, without an aggregation step");
- ``pm_sfl`` (003 Sec. 4.1–4.2, Alg. 1): frozen Kaiming bottom weights; clients start from s = σ⁻¹(θ_global)
  (personal coordinates from their own θ), train mask scores, sample and upload one binary mask
  M ~ Bern(θ_k) per round, and the server aggregates Eq. 7 (Eq. 5 without personalisation);
  ``personalization = "fine"`` is the data-aware selection of Sec. 4.2 (after ``agreement_rounds``, each
  participation adds the top ``personal_step · d_b`` coordinates by |Δθ|, Disagree Group first, up to
  ``personal_ratio · d_b``), ``"layer"`` personalises whole bottom layers (the LG-FedAvg-style layer-level
  baseline of Table 1), ``"none"`` none;
- ``splitfed_pm``: masks without personalisation, uploading the probabilities θ_k (003 Sec. 6.2) instead of
  binary masks.

Privacy. Every split algorithm here reports ε = ∞ (``privacy_unit`` None, no round events): the smashed data
(activations of every training example) go to the server without noise, as in 003's training, and no
guarantee covers them — a finite ε for the run would claim protection that does not exist. What the mask
uploads alone cost is :meth:`PMSFL.mask_upload_events`: with binary uploads and c > 0, one
:class:`~ampfl.accounting.events.BernoulliMaskEvent` ``(c, d_b)`` per round (unit: one client, whatever its
data): the uploaded bits have keep-probabilities in [c, 1 − c] because θ is clamped there
(:func:`~ampfl.fl.models.split_cnn.keep_probability`), the domain the bound needs. d_b bounds the number of
uploaded bits (personal coordinates are not uploaded; counting them only over-states ε). No amplification by
client sampling is claimed. **Scope:** this covers the mask uploads only; the smashed data (activations of
every training example) are sent without noise, as in 003's training, and no guarantee covers them (Thm 2
needs Laplace noise the training does not add). ``splitfed``, ``standalone`` and ``splitfed_pm`` release
unprotected values: ε = ∞.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import numpy as np
import torch
from pydantic import BaseModel, Field

from ampfl.accounting.events import BernoulliMaskEvent, PrivacyEvent
from ampfl.fl.algorithms.base import ROLE_EVAL, ROLE_NOISE
from ampfl.fl.models.split_cnn import keep_probability, sample_mask, score_from_probability
from ampfl.fl.split.common import SplitAlgorithm, SplitParams, unflatten
from ampfl.fl.split.masks import aggregate_masks, layer_indicator, select_personalized


class SplitFed(SplitAlgorithm):
    """SplitFed: trained bottom weights, FedAvg of the participants' bottoms every round."""

    name: ClassVar[str] = "splitfed"
    Params: ClassVar[type[BaseModel]] = SplitParams
    state_tensors: ClassVar[tuple[str, ...]] = ("bottom",)

    def set_up(self) -> None:
        super().set_up()
        self.bottom = self.initial_bottom.clone()

    def _stacked(self, leaves: list[torch.Tensor], step: int) -> list[torch.Tensor]:
        return unflatten(leaves[0], self.shapes)

    def run_round(self, round_index: int) -> dict[str, float]:
        clients = self.participants(round_index)
        local = self.bottom.expand(len(clients), -1).clone()
        loss = self.train_cohort(clients, round_index, [local], self._stacked)
        self.bottom = local.mean(0)
        return {"participants": float(len(clients)), "train_loss": float(loss.mean())}

    def evaluate(self) -> dict[str, float]:
        return self.scores(None, unflatten(self.bottom, self.shapes))

    def parameters_finite(self) -> bool:
        return super().parameters_finite() and bool(torch.isfinite(self.bottom).all())


class Standalone(SplitFed):
    """Standalone: each client keeps its own bottom (no aggregation), the server's top is shared."""

    name: ClassVar[str] = "standalone"
    state_tensors: ClassVar[tuple[str, ...]] = (*SplitFed.state_tensors, "store")

    def set_up(self) -> None:
        super().set_up()
        self.store = self.initial_bottom.expand(self.task.num_clients, -1).clone()

    def run_round(self, round_index: int) -> dict[str, float]:
        clients = self.participants(round_index)
        ids = torch.from_numpy(clients)
        local = self.store[ids].clone()
        loss = self.train_cohort(clients, round_index, [local], self._stacked)
        self.store[ids] = local
        return {"participants": float(len(clients)), "train_loss": float(loss.mean())}

    def evaluate(self) -> dict[str, float]:
        ids = self.eval_ids()
        return self.scores([unflatten(self.store[int(c)], self.shapes) for c in ids], None)

    def parameters_finite(self) -> bool:
        return SplitAlgorithm.parameters_finite(self) and bool(torch.isfinite(self.store).all())


class PMSFLParams(SplitParams):
    """Hyper-parameters of PM-SFL (probabilistic masks on the bottom)."""

    learning_rate: float = Field(0.1, gt=0.0, description="client learning rate of the mask scores")
    c: float = Field(0.01, ge=0.0, lt=0.5, description="θ clamped to [c, 1 − c] (003 Thm 2/3 domain)")
    init_theta: float = Field(0.5, gt=0.0, lt=1.0, description="initial global keep-probability")
    upload: Literal["binary", "probabilities"] = Field("binary", description="M ~ Bern(θ_k) (Eq. 5) or θ_k")
    personalization: Literal["fine", "layer", "none"] = Field(
        "fine", description="003 Sec. 4.2 / layer / none"
    )
    agreement_rounds: int = Field(5, ge=0, description="rounds before personal selection starts (003: 10%)")
    personal_ratio: float = Field(0.5, ge=0.0, le=1.0, description="largest personal share of d_b (003: 0.5)")
    personal_step: float = Field(0.1, gt=0.0, le=1.0, description="share of d_b added per participation")
    personal_layers: int = Field(1, ge=0, description="bottom layers kept personal ('layer')")
    estimator: Literal["straight_through", "paper"] = Field(
        "straight_through", description="∂M/∂θ = 1, or θ as 003 Eq. 4 / App. A prints"
    )


class PMSFL(SplitAlgorithm):
    """PM-SFL: probabilistic mask training of the bottom, binary uploads, personalised aggregation (Eq. 7)."""

    name: ClassVar[str] = "pm_sfl"
    Params: ClassVar[type[BaseModel]] = PMSFLParams
    state_tensors: ClassVar[tuple[str, ...]] = ("theta", "personal", "personal_theta")

    def set_up(self) -> None:
        super().set_up()
        self.p: PMSFLParams = self.params  # type: ignore[assignment]
        d = self.initial_bottom.numel()
        self.weights = self.initial_bottom  # frozen (003 Sec. 4.1)
        self.theta = torch.full((d,), float(self.p.init_theta))
        n = self.task.num_clients
        self.personal = torch.zeros((n, d), dtype=torch.bool)
        self.personal_theta = torch.zeros((n, d))
        if self.p.personalization == "layer":
            layer_indicator(self.shapes, self.p.personal_layers)  # validates personal_layers
        self.binary = self.p.upload == "binary" and self.p.c > 0.0
        self.privacy_unit = None  # smashed data are released without noise: ε = ∞ (module docstring)
        self._gen: torch.Generator | None = None

    def mask_upload_events(self, round_index: int) -> list[tuple[PrivacyEvent, int]]:
        """The events of round ``round_index``'s mask uploads alone (the smashed data are not covered)."""
        if not self.binary:
            return []
        return [(BernoulliMaskEvent(c=self.p.c, dim=int(self.weights.numel())), 1)]

    def start_theta(self, clients: np.ndarray) -> torch.Tensor:
        """θ each client starts from: the global θ, its own θ on its personal coordinates."""
        ids = torch.from_numpy(np.asarray(clients, dtype=np.int64))
        glob = self.theta.expand(len(ids), -1)
        return torch.where(self.personal[ids], self.personal_theta[ids], glob)

    def _masked(self, leaves: list[torch.Tensor], step: int) -> list[torch.Tensor]:
        assert self._gen is not None
        theta = keep_probability(leaves[0], self.p.c)
        uniforms = torch.rand(theta.shape, generator=self._gen)
        mask = sample_mask(theta, uniforms, paper_gradient=self.p.estimator == "paper")
        return unflatten(self.weights * mask, self.shapes)

    def _indicator_update(
        self,
        clients: np.ndarray,
        round_index: int,
        before: torch.Tensor,
        after: torch.Tensor,
        allowed: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The participants' new personal indicators; ``allowed`` restricts them (adaptive depth: the
        blocks each client holds)."""
        ids = torch.from_numpy(clients)
        current = self.personal[ids]
        if self.p.personalization == "none" or round_index < self.p.agreement_rounds:
            return current
        if self.p.personalization == "layer":
            layers = layer_indicator(self.shapes, self.p.personal_layers).expand_as(current)
            return layers.clone() if allowed is None else layers & allowed
        d = after.shape[1]
        candidates = torch.full((len(ids),), d) if allowed is None else allowed.sum(1)
        return select_personalized(
            before,
            after,
            current,
            add=max(1, math.ceil(self.p.personal_step * d)),
            limit=(self.p.personal_ratio * candidates).long(),
            allowed=allowed,
        )

    def run_round(self, round_index: int) -> dict[str, float]:
        clients, before, after, uploads, loss = self.train_masks(round_index)
        personal = self._indicator_update(clients, round_index, before, after)
        self.keep_personal(clients, personal, after)
        self.theta = aggregate_masks(uploads, personal, self.theta)
        return self.end_round(clients, loss, personal)

    def train_masks(
        self, round_index: int
    ) -> tuple[np.ndarray, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The first half of a round: the cohort trains its probability masks from its starting θ and draws
        what it uploads. Returns ``(clients, θ before, θ after, uploads, train losses)``; the uploads are
        binary masks M ~ Bern(θ after) (``binary``) or θ after itself. The round's noise generator stays set
        until :meth:`end_round`."""
        clients = self.participants(round_index)
        before = self.start_theta(clients)
        scores = score_from_probability(before, self.p.c)
        self._gen = self.torch_generator(round_index, ROLE_NOISE)
        loss = self.train_cohort(clients, round_index, [scores], self._masked)
        after = keep_probability(scores, self.p.c).detach()
        if self.binary:
            uploads = (torch.rand(after.shape, generator=self._gen) < after).to(after.dtype)
        else:
            uploads = after
        return clients, before, after, uploads, loss

    def keep_personal(self, clients: np.ndarray, personal: torch.Tensor, after: torch.Tensor) -> None:
        """Store the cohort's personal-coordinate indicators and, where personal, its trained θ."""
        ids = torch.from_numpy(np.asarray(clients))
        self.personal[ids] = personal
        self.personal_theta[ids] = torch.where(personal, after, self.personal_theta[ids])

    def end_round(self, clients: np.ndarray, loss: torch.Tensor, personal: torch.Tensor) -> dict[str, float]:
        """Drop the round's noise generator and return the round's metrics."""
        self._gen = None
        return {
            "participants": float(len(clients)),
            "train_loss": float(loss.mean()),
            "mean_theta": float(self.theta.mean()),
            "personal_fraction": float(personal.float().mean()),
        }

    def eval_mask(self, theta: torch.Tensor, gen: torch.Generator) -> list[torch.Tensor]:
        """Bottom weights w ⊙ M with one mask M ~ Bern(θ) (evaluation uses a sampled mask, like training)."""
        mask = (torch.rand(theta.shape, generator=gen) < theta).to(theta.dtype)
        return unflatten(self.weights * mask, self.shapes)

    def evaluate(self) -> dict[str, float]:
        gen = self.torch_generator(-1, ROLE_EVAL)
        if self.p.personalization == "none":
            return self.scores(None, self.eval_mask(self.theta, gen))
        ids = self.eval_ids()
        per_client = [self.eval_mask(t, gen) for t in self.start_theta(ids)]
        out = self.scores(per_client, None)
        out["global_accuracy"] = self.scores(None, self.eval_mask(self.theta, gen))["global_accuracy"]
        return out


class SplitFedPMParams(PMSFLParams):
    """SplitFed-PM: masks without personalisation, probabilities uploaded (003 Sec. 6.2)."""

    upload: Literal["binary", "probabilities"] = "probabilities"
    personalization: Literal["fine", "layer", "none"] = "none"


class SplitFedPM(PMSFL):
    """SplitFed-PM: probabilistic mask training, plain mean of the uploaded probabilities (Eq. 5 on θ_k)."""

    name: ClassVar[str] = "splitfed_pm"
    Params: ClassVar[type[BaseModel]] = SplitFedPMParams
