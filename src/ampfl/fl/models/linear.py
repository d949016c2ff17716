"""Logistic regression with the loss of 000 (MS-PAFL) Eqs. (20)–(21).

Eq. (21): f_i(W) = (1/|D_i|) Σ_j ln(1 + exp(−Tr(W V_ij))), V_ij = x_ij y_ij^T; Eq. (20) adds γ‖W‖₂.
For a binary task (num_classes = 2) the label is y ∈ {−1, +1}, W has one row (n = 1) and Tr(W x yᵀ) = y·(W x):
the per-example loss is exactly ln(1 + exp(−y W x)) and the prediction is sign(W x).
For more than two classes Eq. (21) with one-hot labels would only push the true class's score up (its infimum
is −∞ along W → ∞ for every example), so we use the multinomial logistic (softmax cross-entropy) loss instead.
No bias by default (Eq. 21 has none); ``bias=True`` adds one. The regulariser is γ‖W‖₂ (the norm, not its
square, as printed in Eq. 20), with the subgradient 0 at W = 0.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from ampfl.fl.models.base import FLModel


class LogisticRegression(FLModel):
    """Linear model with the loss of 000 Eq. (21) (binary) or softmax cross-entropy (multi-class).

    Args:
        input_shape: shape of one example; flattened to m features.
        num_classes: 2 (binary, one output) or more (one output per class).
        gamma: γ ≥ 0 of Eq. (20), weight of ‖W‖₂ (default 0).
        bias: add a bias term (default False, as in Eq. 21).
        init_std: std of the N(0, init_std²) initial weights (default 0: W⁰ = 0).
    """

    def __init__(
        self,
        *,
        input_shape: tuple[int, ...],
        num_classes: int,
        gamma: float = 0.0,
        bias: bool = False,
        init_std: float = 0.0,
    ) -> None:
        super().__init__()
        if not (gamma >= 0.0 and math.isfinite(gamma)):
            raise ValueError(f"gamma must be in [0, inf). Found {gamma}.")
        if not (init_std >= 0.0 and math.isfinite(init_std)):
            raise ValueError(f"init_std must be in [0, inf). Found {init_std}.")
        self.num_classes = num_classes
        self.binary = num_classes == 2
        self.gamma = float(gamma)
        features = math.prod(input_shape)
        self.linear = nn.Linear(features, 1 if self.binary else num_classes, bias=bias)
        with torch.no_grad():
            if init_std > 0:
                self.linear.weight.normal_(0.0, init_std)
            else:
                self.linear.weight.zero_()
            if self.linear.bias is not None:
                self.linear.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.linear(x.flatten(start_dim=1))
        return out.squeeze(-1) if self.binary else out

    def forward_stacked(self, params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """k models at once (``params`` stacked ``[k, *shape]``, ``x`` ``[k, b, *input]``): the batched
        product that ``vmap`` of :meth:`forward` runs (``bmm`` with the transposed weights, then + bias), so
        the same numbers without the per-call cost of ``vmap``."""
        out = torch.bmm(x.flatten(start_dim=2), params["linear.weight"].transpose(1, 2))
        if "linear.bias" in params:
            out = params["linear.bias"][:, None, :] + out
        return out.squeeze(-1) if self.binary else out

    def penalty_stacked(self, params: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """``[k]`` zeros when γ = 0 (what ``vmap`` of :meth:`penalty` gives); None: use ``vmap``."""
        w = params["linear.weight"]
        return w.new_zeros(w.shape[0]) if self.gamma == 0.0 else None

    def stacked_loss_and_grads(
        self, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, w: torch.Tensor
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor] | None:
        """For γ = 0: the per-client gradients (by parameter name, ``[k, *shape]``) and losses ``[k]`` of
        Σ_j w_ij ℓ(w_i; x_ij, y_ij) without autograd: the forward pass of :meth:`forward_stacked`
        and :meth:`per_sample_loss`, then the backward kernels autograd runs, on tensors of the same values
        and layouts (layouts decide vectorised vs scalar loops), so bit for bit the engine's autograd result
        (``tests/fl/test_engine_speed_identity.py``). None for γ > 0 (autograd then runs)."""
        if self.gamma != 0.0:
            return None
        weight = params["linear.weight"]
        k, b = x.shape[0], x.shape[1]
        inputs = x.flatten(start_dim=2)
        out = torch.bmm(inputs, weight.transpose(1, 2))
        bias = params.get("linear.bias")
        if bias is not None:
            out = bias[:, None, :] + out
        targets = y.reshape(k * b)
        # d(Σ_i per_client_i)/d(losses) as autograd forms it: ones expanded to [k, b], times w
        grad_losses = (weight.new_ones(()).expand(k).unsqueeze(1).expand(k, b) * w).reshape(k * b)
        if self.binary:
            sign = 2.0 * targets.to(out.dtype) - 1.0
            margin = -sign * out.reshape(k * b)
            losses = F.softplus(margin)
            grad_margin = torch.ops.aten.softplus_backward(grad_losses, margin, 1.0, 20.0)
            grad_out = (grad_margin * -sign).reshape(k, b).unsqueeze(-1)
        else:  # F.cross_entropy = log_softmax, then nll_loss (reduction "none", ignore_index -100)
            log_p = torch.log_softmax(out.reshape(k * b, -1), 1)
            losses, total = torch.ops.aten.nll_loss_forward(log_p, targets, None, 0, -100)
            grad_log_p = torch.ops.aten.nll_loss_backward(grad_losses, log_p, targets, None, 0, -100, total)
            grad_out = torch.ops.aten._log_softmax_backward_data(grad_log_p, log_p, 1, log_p.dtype)
            grad_out = grad_out.reshape(out.shape)
        per_client = ((losses.reshape(k, b) + weight.new_zeros(k).reshape(k, 1)) * w).sum(1)
        grads = {"linear.weight": torch.bmm(inputs.transpose(1, 2), grad_out).transpose(1, 2)}
        if bias is not None:
            grads["linear.bias"] = grad_out.sum_to_size(k, 1, out.shape[2]).reshape(bias.shape)
        return grads, per_client

    def per_sample_loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self.binary:
            sign = 2.0 * targets.to(outputs.dtype) - 1.0  # {0, 1} -> {-1, +1}
            return F.softplus(-sign * outputs)  # ln(1 + exp(-y W x)), Eq. (21)
        return F.cross_entropy(outputs, targets, reduction="none")

    def penalty(self, params: dict[str, torch.Tensor]) -> torch.Tensor:
        w = params["linear.weight"]
        if self.gamma == 0.0:
            return w.new_zeros(())
        sq = (w * w).sum()
        # γ‖W‖₂ with subgradient 0 at W = 0 (sqrt has an infinite derivative there).
        safe = torch.where(sq > 0, sq, torch.ones_like(sq))
        return self.gamma * torch.where(sq > 0, torch.sqrt(safe), torch.zeros_like(sq))

    def predict(self, outputs: torch.Tensor) -> torch.Tensor:
        if self.binary:
            return (outputs > 0).to(torch.int64)
        return outputs.argmax(dim=-1)
