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
        the same numbers without the per-call cost of ``vmap`` (issue 17)."""
        out = torch.bmm(x.flatten(start_dim=2), params["linear.weight"].transpose(1, 2))
        if "linear.bias" in params:
            out = params["linear.bias"][:, None, :] + out
        return out.squeeze(-1) if self.binary else out

    def penalty_stacked(self, params: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """``[k]`` zeros when γ = 0 (what ``vmap`` of :meth:`penalty` gives); None: use ``vmap``."""
        w = params["linear.weight"]
        return w.new_zeros(w.shape[0]) if self.gamma == 0.0 else None

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
