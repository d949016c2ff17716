"""A small fully connected network (ReLU hidden layers, softmax cross-entropy).

Besides ``forward`` the network computes k stacked models at once (``forward_stacked``) and their
gradients without autograd (``stacked_loss_and_grads``): the kernels ``vmap`` and autograd would run, on
tensors of the same values and layouts, without their per-call costs, which dominate when a cohort's models
are wide and each client's batch is small. The losses, the bias gradients and the weight gradients of
layers that widen (in ≤ out) are autograd's bit for bit; a narrowing layer's weight gradient is the same
sum computed by a faster product (float rounding, :func:`_weight_grad`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
from torch import nn

from ampfl.fl.models.base import FLModel

_IGNORE_INDEX = -100  # F.cross_entropy's default


class MLP(FLModel):
    """Multi-layer perceptron.

    Args:
        input_shape: shape of one example; flattened.
        num_classes: number of outputs.
        hidden: sizes of the hidden layers (default ``(64,)``).
    """

    def __init__(
        self, *, input_shape: tuple[int, ...], num_classes: int, hidden: Sequence[int] = (64,)
    ) -> None:
        super().__init__()
        if any(int(h) < 1 for h in hidden):
            raise ValueError(f"hidden must hold positive layer sizes. Found {list(hidden)}.")
        self.num_classes = num_classes
        sizes = [math.prod(input_shape), *(int(h) for h in hidden)]
        layers: list[nn.Module] = []
        for a, b in itertools.pairwise(sizes):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers.append(nn.Linear(sizes[-1], num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x.flatten(start_dim=1))
        return out

    def _linear_names(self) -> list[str]:
        return [f"net.{i}" for i, m in enumerate(self.net) if isinstance(m, nn.Linear)]

    def forward_stacked(self, params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """k models at once (``params`` stacked ``[k, *shape]``, ``x`` ``[k, b, *input]``): per layer the
        batched product ``vmap`` of :meth:`forward` runs (``bmm`` with the transposed weights, then + bias),
        ReLU between layers; the same numbers without ``vmap``'s per-call cost."""
        h = x.flatten(start_dim=2)
        names = self._linear_names()
        for i, name in enumerate(names):
            h = params[f"{name}.bias"][:, None, :] + torch.bmm(h, params[f"{name}.weight"].transpose(1, 2))
            if i + 1 < len(names):
                h = torch.relu(h)
        return h

    def penalty_stacked(self, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """``[k]`` zeros (no regulariser: what ``vmap`` of :meth:`penalty` gives)."""
        first = next(iter(params.values()))
        return first.new_zeros(first.shape[0])

    def stacked_loss_and_grads(
        self, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, w: torch.Tensor
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The per-client gradients (by parameter name, ``[k, *shape]``) and losses ``[k]`` of
        Σ_j w_ij ℓ(w_i; x_ij, y_ij) without autograd: the forward pass of :meth:`forward_stacked` and the
        cross-entropy, then the backward kernels autograd runs on that graph, on tensors of the same values
        and layouts: bit for bit autograd's result except the weight gradients of narrowing layers
        (:func:`_weight_grad`; tests/fl/test_engine_speed_identity.py)."""
        names = self._linear_names()
        k, b = x.shape[0], x.shape[1]
        inputs, hidden = [x.flatten(start_dim=2)], []
        h = inputs[0]
        for i, name in enumerate(names):
            h = params[f"{name}.bias"][:, None, :] + torch.bmm(h, params[f"{name}.weight"].transpose(1, 2))
            if i + 1 < len(names):
                h = torch.relu(h)
                hidden.append(h)
                inputs.append(h)
        out = h
        targets = y.reshape(k * b)
        weight = params[f"{names[0]}.weight"]
        # d(Σ_i per_client_i)/d(losses) as autograd forms it: ones expanded to [k, b], times w
        grad_losses = (weight.new_ones(()).expand(k).unsqueeze(1).expand(k, b) * w).reshape(k * b)
        log_p = torch.log_softmax(out.reshape(k * b, -1), 1)
        losses, total = torch.ops.aten.nll_loss_forward(log_p, targets, None, 0, _IGNORE_INDEX)
        grad_log_p = torch.ops.aten.nll_loss_backward(
            grad_losses, log_p, targets, None, 0, _IGNORE_INDEX, total
        )
        grad = torch.ops.aten._log_softmax_backward_data(grad_log_p, log_p, 1, log_p.dtype).reshape(out.shape)
        per_client = ((losses.reshape(k, b) + weight.new_zeros(k).reshape(k, 1)) * w).sum(1)
        grads: dict[str, torch.Tensor] = {}
        for i in range(len(names) - 1, -1, -1):
            name, weight_i = names[i], params[f"{names[i]}.weight"]
            grads[f"{name}.weight"] = _weight_grad(inputs[i], grad)
            grads[f"{name}.bias"] = grad.sum_to_size(k, 1, grad.shape[2]).reshape(k, grad.shape[2])
            if i > 0:  # back through bmm to the layer's input, then through the ReLU before it
                grad = torch.bmm(grad, weight_i.transpose(1, 2).transpose(1, 2))
                grad = torch.ops.aten.threshold_backward(grad, hidden[i - 1], 0)
        return {n: grads[n] for n in params}, per_client


def _weight_grad(inputs: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """∂L/∂W ``[k, out, in]`` of z = h Wᵀ from the layer's inputs ``[k, b, in]`` and ∂L/∂z ``[k, b, out]``,
    as the product whose result is wide: CPU ``bmm`` kernels run 5-7x slower when their result is a tall,
    narrow matrix (``[1024, 4]`` from a batch of 10: 3.7 against 25.8 GFLOP/s, docs/performance.md). Where
    in ≤ out this is autograd's own product (h_iᵀ ∂L/∂z_i, then transposed), so bit for bit autograd's
    gradient; where out < in it is (∂L/∂z_i)ᵀ h_i, the same sums in another kernel (float rounding)."""
    if grad.shape[2] < inputs.shape[2]:
        return torch.bmm(grad.transpose(1, 2), inputs)
    return torch.bmm(inputs.transpose(1, 2), grad).transpose(1, 2)
