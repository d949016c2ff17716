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
        k = x.shape[0]
        inputs, hidden = [x.flatten(start_dim=2)], []
        h = inputs[0]
        for i, name in enumerate(names):
            h = params[f"{name}.bias"][:, None, :] + torch.bmm(h, params[f"{name}.weight"].transpose(1, 2))
            if i + 1 < len(names):
                h = torch.relu(h)
                hidden.append(h)
                inputs.append(h)
        grad, per_client = _cross_entropy_grad(h, y, w)
        grads: dict[str, torch.Tensor] = {}
        for i in range(len(names) - 1, -1, -1):
            name, weight_i = names[i], params[f"{names[i]}.weight"]
            grads[f"{name}.weight"] = _weight_grad(inputs[i], grad)
            grads[f"{name}.bias"] = grad.sum_to_size(k, 1, grad.shape[2]).reshape(k, grad.shape[2])
            if i > 0:  # back through bmm to the layer's input, then through the ReLU before it
                grad = torch.bmm(grad, weight_i.transpose(1, 2).transpose(1, 2))
                grad = torch.ops.aten.threshold_backward(grad, hidden[i - 1], 0)
        return {n: grads[n] for n in params}, per_client

    def stacked_local_sgd(
        self,
        params: dict[str, torch.Tensor],
        xb: torch.Tensor,
        yb: torch.Tensor,
        wb: torch.Tensor,
        learning_rate: float,
    ) -> torch.Tensor:
        """Q steps of SGD on Σ_j w_ij ℓ(w_i; x_ij, y_ij) for k stacked models at once, in place
        (``params`` ``[k, *shape]``, views into the engine's buffer; ``xb`` ``[k, Q, b, *input]``, ``yb``
        and ``wb`` ``[k, Q, b]``); returns the mean loss over the steps ``[k]``.

        The gradients of :meth:`stacked_loss_and_grads`, each folded into its update: a weight's update is
        one ``baddbmm_`` (W ← W − η Σ_j ∂z_jᵀ h_j, the product accumulated into W) instead of a product, then
        a pass over W. A widening layer (in ≤ out) keeps a working matrix [Wᵀ; bᵀ], ``[k, in + 1, out]``,
        for the Q steps (written back once): its update's product has a wide result only in that layout
        (:func:`_weight_grad`), and with a column of ones appended to the layer's input the bias is a row of
        the forward product and of the update (no pass over ``[k, b, out]`` for either). A narrowing layer
        keeps a contiguous copy of W for the steps (a strided ``[k, out, in]`` view of the buffer would send
        ``baddbmm_`` to one ``addmm_`` per client), its bias riding in the forward product (``baddbmm``).
        Each forward and input-gradient product writes into a buffer reserved for the Q steps. The same
        arithmetic as the step-by-step path up to float rounding (tests/fl/test_engine_speed_identity.py)."""
        names = self._linear_names()
        widens = [not _narrows(*params[f"{n}.weight"].shape[1:]) for n in names]
        weights = [
            torch.cat([params[f"{n}.weight"].transpose(1, 2), params[f"{n}.bias"][:, None, :]], 1)
            if wide
            else params[f"{n}.weight"].clone(memory_format=torch.contiguous_format)
            for n, wide in zip(names, widens, strict=True)
        ]  # a widening layer's [Wᵀ; bᵀ] [k, in + 1, out], a narrowing layer's W [k, out, in]
        biases = [params[f"{n}.bias"] for n in names]
        k, q, b = xb.shape[:3]
        # each layer's output and ∂L/∂(its input) in one buffer for the Q steps (the same memory, warm in
        # the caches, at every step instead of a fresh [k, b, width] tensor per product)
        outs = [params[f"{n}.bias"].new_empty(k, b, params[f"{n}.bias"].shape[1]) for n in names]
        belows = [
            None,
            *(params[f"{n}.bias"].new_empty(k, b, params[f"{n}.weight"].shape[2]) for n in names[1:]),
        ]
        x = xb.reshape(k, q, b, -1)
        if widens[0]:  # the first layer's column of ones, appended once for the Q steps
            x = torch.cat([x, x.new_ones(k, q, b, 1)], 3)
        total = xb.new_zeros(k)
        for r in range(q):
            inputs = [x[:, r]]
            for i, (weight, wide) in enumerate(zip(weights, widens, strict=True)):
                if wide:  # [h, 1] [Wᵀ; bᵀ]
                    if i > 0:
                        inputs[i] = torch.cat([inputs[i], inputs[i].new_ones(k, b, 1)], 2)
                    h = torch.bmm(inputs[i], weight, out=outs[i])
                else:
                    h = torch.baddbmm(biases[i][:, None, :], inputs[i], weight.transpose(1, 2), out=outs[i])
                if i + 1 < len(names):
                    inputs.append(h.relu_())
            grad, per_client = _cross_entropy_grad(h, yb[:, r], wb[:, r])
            total += per_client
            for i in range(len(names) - 1, -1, -1):
                weight, wide = weights[i], widens[i]
                below = None
                if i > 0:  # ∂L/∂h of the layer's input with the step's weights, then through the ReLU
                    below = torch.bmm(grad, weight[:, :-1].transpose(1, 2) if wide else weight, out=belows[i])
                    relu_out = inputs[i][:, :, :-1] if wide else inputs[i]
                    torch.ops.aten.threshold_backward.grad_input(below, relu_out, 0, grad_input=below)
                if wide:
                    weight.baddbmm_(inputs[i].transpose(1, 2), grad, alpha=-learning_rate)
                else:
                    biases[i].sub_(grad.sum(1), alpha=learning_rate)
                    weight.baddbmm_(grad.transpose(1, 2), inputs[i], alpha=-learning_rate)
                if below is not None:
                    grad = below
        for name, weight, wide in zip(names, weights, widens, strict=True):
            if wide:
                params[f"{name}.weight"].copy_(weight[:, :-1].transpose(1, 2))
                params[f"{name}.bias"].copy_(weight[:, -1])
            else:
                params[f"{name}.weight"].copy_(weight)
        return total / q


def _cross_entropy_grad(
    out: torch.Tensor, y: torch.Tensor, w: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """∂/∂out of Σ_ij w_ij CE(out_ij, y_ij) (``out`` ``[k, b, classes]``) and the per-client sums ``[k]``,
    through the kernels autograd runs for ``F.cross_entropy(reduction="none")`` (bit for bit its numbers)."""
    k, b = w.shape
    targets = y.reshape(k * b)
    # d(Σ_i per_client_i)/d(losses) as autograd forms it: ones expanded to [k, b], times w
    grad_losses = (out.new_ones(()).expand(k).unsqueeze(1).expand(k, b) * w).reshape(k * b)
    log_p = torch.log_softmax(out.reshape(k * b, -1), 1)
    losses, total = torch.ops.aten.nll_loss_forward(log_p, targets, None, 0, _IGNORE_INDEX)
    grad_log_p = torch.ops.aten.nll_loss_backward(grad_losses, log_p, targets, None, 0, _IGNORE_INDEX, total)
    grad = torch.ops.aten._log_softmax_backward_data(grad_log_p, log_p, 1, log_p.dtype).reshape(out.shape)
    per_client = ((losses.reshape(k, b) + out.new_zeros(k).reshape(k, 1)) * w).sum(1)
    return grad, per_client


def _weight_grad(inputs: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """∂L/∂W ``[k, out, in]`` of z = h Wᵀ from the layer's inputs ``[k, b, in]`` and ∂L/∂z ``[k, b, out]``,
    as the product whose result is wide: CPU ``bmm`` kernels run 5-7x slower when their result is a tall,
    narrow matrix (``[1024, 4]`` from a batch of 10: 3.7 against 25.8 GFLOP/s, docs/performance.md). Where
    in ≤ out this is autograd's own product (h_iᵀ ∂L/∂z_i, then transposed), so bit for bit autograd's
    gradient; where out < in it is (∂L/∂z_i)ᵀ h_i, the same sums in another kernel (float rounding)."""
    if _narrows(grad.shape[2], inputs.shape[2]):
        return torch.bmm(grad.transpose(1, 2), inputs)
    return torch.bmm(inputs.transpose(1, 2), grad).transpose(1, 2)


def _narrows(out_features: int, in_features: int) -> bool:
    """Whether a layer ``in → out`` narrows (out < in): its weight products are laid out so that their results
    are wide (:func:`_weight_grad`, :meth:`MLP.stacked_local_sgd`)."""
    return out_features < in_features
