"""SplitFed-DP: SplitFed with Gaussian noise on clipped smashed data and DP-SGD on the client's bottom.

One local step of client k on its batch B (b examples), on top of ``splitfed`` (:mod:`ampfl.fl.split.common`):

1. per example, the smashed vector q_i = f_w(x_i) is clipped to norm ``smashed_clip`` C_s and sent as
   q̃_i = clip(q_i) + N(0, (z_s C_s)² I) (z_s = ``smashed_noise_multiplier``), with its label y_i in the clear;
2. the server runs its top on the noisy smashed data and returns ∂ℓ_i/∂q̃_i (1/b of it, as Eq. 4);
3. DP-SGD on the bottom: the per-example gradient G_i of ⟨clip(f_w(x_i)), returned_i⟩ (through the clipping),
   clipped to ``clip_norm`` C_g, summed, plus N(0, (z_g C_g)² I) (z_g = ``noise_multiplier``), divided by b;
   then the client's optimizer step. After R steps the bottoms are averaged (FedAvg) as ``splitfed``.

Accounting (``privacy_unit = "record"``). What is covered: the features x of one training example. What is
not: its **label** (sent in the clear at every step), and the example's membership in a client, client
participation and batch composition (nothing of those is hidden). Relation: the two datasets differ in one
example's features, its label and position the same (replace-one for x). Everything the server and other
clients see is a function of (i) noisy clipped smashed rows q̃_i, (ii) noisy clipped gradient sums, (iii) the
public labels and other examples' releases: the top, the returned gradients and the averaged bottoms are
post-processing. Per appearance of x_i in a step: q̃_i is a Gaussian mechanism of sensitivity 2C_s (the two
clipped vectors differ by at most 2C_s), noise multiplier z_s/2; its contribution to the gradient sum has
sensitivity 2C_g. Per round, an example appears in at most m = ⌈R·b / n_min⌉ steps (n_min the smallest
client's data; ``local_batches`` "wor": distinct examples while R·b ≤ n, fresh permutations after); events
per round: ``GaussianEvent(z_s / 2)`` × m (separately noised rows) and one ``GaussianEvent(z_g / (2m))``
(m appearances in sums, possibly in one sum: sensitivity ≤ 2mC_g, an upper bound for any split over steps).
The multipliers are relative to those replace-one sensitivities, so the default relation stays (a Gaussian
event's curve depends only on std / sensitivity). No amplification by client or batch sampling is claimed
(the client may participate in every round; the
fixed-size batches are not Poisson), so the run's ε is an upper bound composed over every round.
``noise_multiplier = 0`` or ``smashed_noise_multiplier = 0``: ε = ∞ (``privacy_unit`` None).
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from pydantic import BaseModel, Field
from torch.nn import functional as F

from ampfl.accounting.events import GaussianEvent, PrivacyEvent
from ampfl.fl.algorithms.base import ROLE_NOISE
from ampfl.fl.models.split_cnn import bottom_forward_stacked
from ampfl.fl.split.algorithms import SplitFed
from ampfl.fl.split.common import SplitParams, make_optimizer, unflatten


class SplitFedDPParams(SplitParams):
    """SplitFed-DP: see the module docstring."""

    smashed_clip: float = Field(5.0, gt=0.0, description="C_s, per-example smashed-data clip norm")
    smashed_noise_multiplier: float = Field(1.0, ge=0.0, description="z_s, std / C_s on smashed data")
    clip_norm: float = Field(1.0, gt=0.0, description="C_g, per-example gradient clip norm (DP-SGD)")
    noise_multiplier: float = Field(1.0, ge=0.0, description="z_g, std / C_g on the gradient sum")


def clip_rows(v: torch.Tensor, bound: float) -> torch.Tensor:
    """Each row of ``v`` ``[n, ...]`` scaled to norm at most ``bound`` (differentiable)."""
    norms = v.flatten(1).norm(dim=1).clamp(min=1e-12)
    scale = (bound / norms).clamp(max=1.0)
    out: torch.Tensor = v * scale.view(-1, *([1] * (v.dim() - 1)))
    return out


class SplitFedDP(SplitFed):
    """SplitFed with noisy clipped smashed data and DP-SGD on the bottom (record-level, labels public)."""

    name: ClassVar[str] = "splitfed_dp"
    Params: ClassVar[type[BaseModel]] = SplitFedDPParams
    #: ε holds against the server too (the base's threat model): each client noises its smashed rows and its
    #: gradient sums itself, and no amplification by participation or sampling is claimed.
    noised_on_client: ClassVar[bool] = True

    def set_up(self) -> None:
        super().set_up()
        self.dp: SplitFedDPParams = self.params  # type: ignore[assignment]
        n_min = min(len(ix) for ix in self.client_indices)
        self.appearances = math.ceil(self.sp.num_local_steps * self.sp.batch_size / max(n_min, 1))
        noisy = self.dp.noise_multiplier > 0.0 and self.dp.smashed_noise_multiplier > 0.0
        self.privacy_unit = "record" if noisy else None

    def round_events(self, round_index: int) -> list[tuple[PrivacyEvent, int]]:
        if self.privacy_unit is None:
            return []
        m = self.appearances
        return [
            (GaussianEvent(noise_multiplier=self.dp.smashed_noise_multiplier / 2.0), m),
            (GaussianEvent(noise_multiplier=self.dp.noise_multiplier / (2.0 * m)), 1),
        ]

    def dp_step(
        self, local: torch.Tensor, x: torch.Tensor, y: torch.Tensor, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One private split step of K clients (``local`` ``[K, d]``, ``x`` ``[K, b, ...]``): sets the top's
        gradients and returns (the clients' noisy mean gradients ``[K, d]``, the per-client mean losses)."""
        k, b = y.shape
        # one copy of the bottom per example: per-example gradients from one backward pass
        per_example = local.detach().repeat_interleave(b, dim=0).requires_grad_(True)  # [K·b, d]
        q = bottom_forward_stacked(
            unflatten(per_example, self.shapes), x.flatten(0, 1)[:, None], self.spec.groups
        )[:, 0]
        clipped = clip_rows(q, self.dp.smashed_clip)
        noise = torch.randn(clipped.shape, generator=gen) * (
            self.dp.smashed_noise_multiplier * self.dp.smashed_clip
        )
        received = (clipped.detach() + noise).requires_grad_(True)  # what the server sees
        losses = F.cross_entropy(self.top(received), y.reshape(-1), reduction="none").view(k, b)
        torch.autograd.backward(losses.sum() / b)
        for p in self.top.parameters():
            if p.grad is not None:
                p.grad.div_(k)
        assert received.grad is not None
        torch.autograd.backward(clipped, received.grad)  # client side, through the clipping
        assert per_example.grad is not None
        grads = clip_rows(per_example.grad * b, self.dp.clip_norm).view(k, b, -1).sum(1)  # Σ clip(G_i)
        grads = grads + torch.randn(grads.shape, generator=gen) * (
            self.dp.noise_multiplier * self.dp.clip_norm
        )
        return grads / b, losses.detach().mean(1)

    def run_round(self, round_index: int) -> dict[str, float]:
        clients = self.participants(round_index)
        local = self.bottom.expand(len(clients), -1).clone()
        batches = self.cohort_batches(clients, round_index)
        gen = self.torch_generator(round_index, ROLE_NOISE)
        local.requires_grad_(True)
        opt = make_optimizer(self.sp.optimizer, [local], self.sp.learning_rate)
        total = torch.zeros(len(clients))
        for step in range(self.sp.num_local_steps):
            idx = batches[:, step]
            opt.zero_grad(set_to_none=True)
            self.top_opt.zero_grad(set_to_none=True)
            grad, losses = self.dp_step(local, self.x_train[idx], self.y_train[idx], gen)
            local.grad = grad
            self.top_opt.step()
            opt.step()
            total += losses
        self.bottom = local.detach().mean(0)
        return {
            "participants": float(len(clients)),
            "train_loss": float((total / self.sp.num_local_steps).mean()),
        }
