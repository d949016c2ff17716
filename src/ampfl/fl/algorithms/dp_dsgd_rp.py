"""DP-DSGD with random participation (paper 004, Algorithm 1 and Eq. 4).

Paper 004: B. Hasırcıoğlu & D. Gündüz, "Privacy Amplification via Random Participation in Federated Learning",
arXiv:2205.01556v1. Iteration t:

* client side: each of the N clients joins with probability p (B ~ Bern(p)); a joining client samples each of
  its d records independently with probability q (S_i) and sends g_i = Σ_{s∈S_i} ∇ℓ(w_t, s)/max(1, ‖∇ℓ(w_t,
  s)‖/C);
* server side (Eq. 4): ĝ_t = (Σ_{i∈P_t} g_i + N(0, σ² I_m)) / (p N_t q d), then w_{t+1} = w_t − η ĝ_t
  (optionally with heavy-ball momentum μ, as in 004 App. B.2; post-processing, no privacy cost).
  The noise is added even when nobody joined.

Noise: z = ``noise_multiplier`` (σ/C, so σ = z·C), or, when it is not given, calibrated for a per-iteration
(``round_epsilon``, ``round_delta``) as in 004 Sec. 6 by the analysis named ``analysis``: ``wcs`` (Thm 5.2,
the default) calibrates with the run's ``[privacy]`` accountant on exactly the event the run composes
(one round, by the run: :mod:`ampfl.fl.privacy.calibration`); ``paper`` (Thm 4.1, not a proven bound), ``ols``
(Thm 5.1) and ``cs`` (Cor. 5.3, a lower bound) use that analysis's own calibration
(:func:`ampfl.accounting.random_checkin.calibrate_noise_multiplier`, closed forms), so that 004's figures
can be reproduced.

Privacy (unit: one record). Whatever chose z, each round reports
``RandomCheckInEvent(participation=p, sampling_rate=q, noise_multiplier=z, local_dataset_size=d)`` and the
run's accountant composes it (RDP: 004 Thm 5.2's worst-case-sampling pair; PLD: the smaller ε of two
tighter pairs for hidden participation, :mod:`ampfl.accounting.random_checkin.pld_pairs`). Participation is
hidden in what is released: the models w_t only; a joined client with an empty sample adds 0 to the sum,
as a client that did not join, and the scale 1/(p N q d) is fixed (004 §3.1: trusted server, secure
channels; the logged metrics — participants, examples, train loss — are un-noised diagnostics, not part of
the release). d is an upper bound on the other records x′'s client uses: every client uses all its records
and holds at most d.
z = 0 gives no guarantee (``privacy_unit`` None, ε = ∞).

004 has "N clients with d samples each". d is ``local_dataset_size``, a declared public bound: a client
holding more records is refused (one line), never truncated — truncation to a random d-subset is not an
add/remove-one mechanism (see below). A private run must declare it: the server divides by
p·N·q·d, and a d computed from the data (the largest local dataset) changes with one added record, so the
released noise's scale would itself reveal membership (measured: ε ≥ 1770 for a sub-release where 14.5 was
reported; docs/threat_model.md). N, the number of clients, is public for this record-level guarantee (adding a
record adds no client). Without ``local_dataset_size`` only ``[privacy] neighbouring = "replace-one"``
or a non-private run (z = 0) may take d from the data; a private run without it is refused in one line
(``algorithm.local_dataset_size: required: ...``). Replace-one declares the dataset sizes public: the run then
accounts each round's ``RandomCheckInEvent`` as the Gaussian at sensitivity 2C with neither participation nor
sampling amplification (noise multiplier z/2, :func:`ampfl.fl.privacy.run_accountant.replace_one_event`; the
replaced record's client and coins are shared by both neighbours), ``analysis = "wcs"`` calibrates z for that
event, and the closed-form analyses (``paper``, ``ols``, ``cs``: add/remove with amplification) are refused in
one line naming ``privacy.neighbouring``. Every client uses all its records. (Earlier versions, where
clients with more than d = min_i |D_i| records kept a random d-subset: that is not an add/remove-one
mechanism — an added record displaces a used one, and adding to the smallest client changed d and every
client's subset — so the accounted ε did not cover unequal datasets.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ampfl.accounting.events import PrivacyEvent
from ampfl.accounting.random_checkin import ANALYSES, RECOMMENDED_ANALYSIS
from ampfl.fl.algorithms._common import FederatedAlgorithm
from ampfl.fl.algorithms.base import ROLE_CHECKIN, ROLE_DATA, ROLE_NOISE
from ampfl.fl.algorithms.round_protocol import ClientMessage, GaussianShares, OwnRoundProtocol
from ampfl.fl.sampling import RandomCheckInSampler, poisson_local_batches

if TYPE_CHECKING:
    from ampfl.fl.algorithms.round_protocol import ClientInstructions
    from ampfl.fl.privacy.calibration import CalibratedNoise, NoiseTarget


class DPDSGDRPParams(BaseModel):
    """Hyper-parameters of DP-DSGD with random participation (defaults: 004 Sec. 6.2 sampling rates)."""

    model_config = ConfigDict(extra="forbid")

    participation: float = Field(0.1, gt=0.0, le=1.0, description="p, client participation probability")
    sampling_rate: float = Field(0.1, gt=0.0, le=1.0, description="q, local Poisson rate")
    clip: float = Field(1.0, gt=0.0, description="C, per-example gradient bound")
    noise_multiplier: float | None = Field(None, ge=0.0, description="z = σ/C; when given, no calibration")
    analysis: str = Field(
        RECOMMENDED_ANALYSIS, description=f"calibrates z for the round targets; one of {list(ANALYSES)}"
    )
    round_epsilon: float = Field(0.015, gt=0.0, description="per-iteration ε target (004 Sec. 6: 0.015)")
    round_delta: float = Field(1e-6, gt=0.0, lt=1.0, description="per-iteration δ target (004 Sec. 6: 1e-6)")
    learning_rate: float = Field(0.1, gt=0.0, description="η")
    momentum: float = Field(
        0.0, ge=0.0, lt=1.0, description="server heavy-ball momentum μ (004 App. B.2: 0.9)"
    )
    local_dataset_size: int | None = Field(
        None,
        ge=1,
        description="d, a declared public bound on every local dataset (required for a private run)",
    )

    @field_validator("analysis")
    @classmethod
    def _known_analysis(cls, v: str) -> str:
        if v not in ANALYSES:
            raise ValueError(f"analysis must be one of {list(ANALYSES)}")
        return v


class DPDSGDRandomParticipation(OwnRoundProtocol, FederatedAlgorithm):
    """004 Algorithm 1: random participation, local Poisson sampling, per-example clipping, central noise."""

    name: ClassVar[str] = "dp_dsgd_rp"
    Params: ClassVar[type[BaseModel]] = DPDSGDRPParams

    def set_up(self) -> None:
        super().set_up()
        self.p: DPDSGDRPParams = self.params  # type: ignore[assignment]
        n = self.task.num_clients
        sizes = self.task.client_sizes()
        if int(sizes.min()) < 1:
            raise ValueError("every client must hold at least one record.")
        largest = int(sizes.max())
        bound = self.p.local_dataset_size
        if bound is not None and bound < largest:
            raise ValueError(
                "algorithm.local_dataset_size: must be >= the largest local dataset "
                f"({largest}), got {bound}."
            )
        private = self.p.noise_multiplier != 0.0  # None: calibrated, hence private
        d = self.public_constant(bound, key="local_dataset_size", from_data=largest, private=private)
        self.d = int(d)
        self.local_data = self.client_indices  # all records: an add/remove-one mechanism (module docstring)
        self.sampler = RandomCheckInSampler(n, self.p.participation)
        if self.p.noise_multiplier is not None:
            self._set_noise_multiplier(self.p.noise_multiplier)
        else:  # a closed form here, or (analysis "wcs") by the run: noise_targets, set_noise
            self._set_noise_multiplier(self._closed_form())
        self.velocity = torch.zeros_like(self.global_params)

    def _set_noise_multiplier(self, z: float) -> None:
        self.noise_multiplier = float(z)
        self.noise_std = self.noise_multiplier * self.p.clip
        self.privacy_unit = None if self.noise_multiplier == 0.0 else "record"

    def _calibrated_by_run(self) -> bool:
        """``analysis = "wcs"`` with a per-round target that needs noise: the run calibrates z."""
        p = self.p
        needs_noise = p.round_delta < p.participation * p.sampling_rate  # else 004 Thm 5.2: no noise
        return p.noise_multiplier is None and p.analysis == "wcs" and needs_noise

    def _closed_form(self) -> float:
        """z for the per-iteration (round_epsilon, round_delta) by a paper's ``analysis`` (module docstring);
        NaN until the run calibrates it (``"wcs"``: :meth:`noise_targets`)."""
        p, q = self.p.participation, self.p.sampling_rate
        if self.p.analysis != "wcs":  # the paper's closed forms (Thm 4.1, Thm 5.1, Cor. 5.3)
            if self.privacy.neighbouring == "replace-one":
                raise ValueError(
                    f'privacy.neighbouring: analysis = "{self.p.analysis}" calibrates z for add/remove-one '
                    'with amplification, which "replace-one" drops; use analysis = "wcs" (calibrated by the '
                    "run's accountant on the event it composes) or give noise_multiplier."
                )
            from ampfl.accounting.random_checkin import calibrate_noise_multiplier

            return calibrate_noise_multiplier(
                analysis=self.p.analysis,
                participation=p,
                sampling_rate=q,
                local_dataset_size=self.d,
                epsilon=self.p.round_epsilon,
                delta=self.p.round_delta,
            )
        if not self._calibrated_by_run():  # 004 Thm 5.2: δ ≤ pq without any noise
            return 0.0
        return math.nan

    def noise_targets(self) -> list[NoiseTarget]:
        """``analysis = "wcs"``: z for (round_epsilon, round_delta) after one round of :meth:`event_at`."""
        if not self._calibrated_by_run():
            return []
        from ampfl.fl.privacy.calibration import NoiseTarget

        return [
            NoiseTarget(
                "noise_multiplier",
                self.event_at,
                self.p.round_epsilon,
                1,
                self.neighboring_relation,
                target_delta=self.p.round_delta,
                who=self.name,
            )
        ]

    def set_noise(self, resolved: Mapping[str, CalibratedNoise]) -> None:
        self._set_noise_multiplier(resolved["noise_multiplier"].noise_multiplier)

    def event_at(self, noise_multiplier: float) -> PrivacyEvent:
        """One iteration's event at noise multiplier z = σ/C (record level, 004 Algorithm 1)."""
        return self.sampler.event(
            sampling_rate=self.p.sampling_rate, noise_multiplier=noise_multiplier, local_dataset_size=self.d
        )

    def round_events(self, round_index: int) -> list[tuple[PrivacyEvent, int]]:
        if self.privacy_unit is None:
            return []
        return [(self.event_at(self.noise_multiplier), 1)]

    def scale(self) -> float:
        """1/(p N_t q d) of Eq. (4)."""
        p, q = self.p.participation, self.p.sampling_rate
        return 1.0 / (p * self.task.num_clients * q * self.d)

    def run_round(self, round_index: int) -> dict[str, float]:
        clients = self.sampler.sample(round_index, self.rng(round_index, ROLE_CHECKIN))
        total = torch.zeros_like(self.global_params)
        metrics = {"participants": float(len(clients))}
        if len(clients):
            sums, losses, examples = self.client_gradients(
                self.global_params, clients, self.rng(round_index, ROLE_DATA)
            )
            total = sums.sum(0)
            metrics["examples"] = float(examples.sum())
            if metrics["examples"] > 0:
                metrics["train_loss"] = float(losses.sum()) / metrics["examples"]
        self.server_update(total, self.torch_generator(round_index, ROLE_NOISE))
        return metrics

    # -- the two halves of a round (the Flower apps of ``ampfl.flower`` call them too) -------------------
    def client_gradients(
        self, params: torch.Tensor, clients: np.ndarray, rng: np.random.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Client side for the joined ``clients``: local Poisson sample S_i (rate q) and g_i, the sum of the
        per-example clipped gradients at ``params``. Returns ``(g [K, d], loss sums [K], |S_i| [K])``."""
        idx, mask = poisson_local_batches(
            self.local_data, clients, sampling_rate=self.p.sampling_rate, rng=rng
        )
        result = self.engine.clipped_gradient_sum(
            self.model, params, self.x_train, self.y_train, idx, mask, clip=self.p.clip
        )
        k = len(clients)
        return result.params, result.loss.reshape(k, -1).sum(1), mask.reshape(k, -1).sum(1)

    def server_update(self, total: torch.Tensor, generator: torch.Generator) -> None:
        """Server side (Eq. 4 and momentum): ĝ = (Σ_i g_i + N(0, σ²I)) / (p N q d), w ← w − η v."""
        noise = torch.randn(total.shape, generator=generator) * self.noise_std
        self.apply_noised_sum(total + noise)

    def apply_noised_sum(self, noised: torch.Tensor) -> None:
        """Server side after the noise (Eq. 4 and momentum) on Σ_i g_i + N(0, σ²I), however it was noised
        (centrally by :meth:`server_update`, or by the clients' noise shares under secure aggregation)."""
        g_hat = noised * self.scale()  # Eq. (4)
        self.velocity = self.p.momentum * self.velocity + g_hat
        self.global_params = self.global_params - self.p.learning_rate * self.velocity

    # -- the round protocol (ampfl.fl.algorithms.round_protocol) ---------------------------------------
    noise_shares: ClassVar[bool] = True

    def own_coin(self, client: int, *, noise_shares: bool) -> float | None:
        """p: every client checks in with its own coin B ~ Bern(p) (004 Algorithm 1)."""
        return float(self.p.participation)

    def client_update(
        self,
        broadcast: torch.Tensor,
        instructions: ClientInstructions,
        client_state: torch.Tensor | None,
        rng: np.random.Generator,
    ) -> tuple[ClientMessage, torch.Tensor | None]:
        """g_i: the sum of the per-example clipped gradients on a local Poisson sample drawn from ``rng``;
        its metrics are the loss sum and |S_i| (:meth:`client_gradients`)."""
        sums, losses, examples = self.client_gradients(broadcast, np.array([instructions.client]), rng)
        return ClientMessage(sums[0], {"train_loss": float(losses[0]), "examples": float(examples[0])}), None

    def aggregate(
        self, total: torch.Tensor, *, count: int | None, asked: int, generator: torch.Generator | None
    ) -> None:
        """Eq. (4) and momentum on Σ_i g_i: the noise from ``generator`` (:meth:`server_update`), or already
        in ``total`` (the clients' noise shares); the scale 1/(p N q d) is public."""
        if generator is None:
            self.apply_noised_sum(total)
        else:
            self.server_update(total, generator)

    def message_bound(self) -> float:
        """‖g_i‖ ≤ |S_i| C ≤ d C."""
        return float(self.p.clip) * float(self.d)

    def gaussian_shares(self) -> GaussianShares | None:
        return GaussianShares(self.noise_multiplier, self.noise_std, self.event_at)

    def reduce_metrics(self, metrics: Sequence[Mapping[str, float]]) -> dict[str, float]:
        """``examples`` (Σ_i |S_i|) and the train loss per sampled example (the losses are sums over S_i)."""
        out = {"examples": sum((float(m.get("examples", 0.0)) for m in metrics), 0.0)}
        if out["examples"] > 0:
            out["train_loss"] = sum(float(m["train_loss"]) for m in metrics) / out["examples"]
        return out

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["velocity"] = self.velocity.clone()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.velocity = state["velocity"].clone()
