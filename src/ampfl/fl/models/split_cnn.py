"""A small GroupNorm CNN split into a client-side bottom and a server-side top (paper 003, split learning).

Architecture for ``[C, H, W]`` inputs: ``len(channels)`` convolutional blocks, each
``Conv(3×3, padding 1, no bias) → GroupNorm(groups, no affine) → ReLU → MaxPool(2)``, then a linear head
(with bias) on the flattened feature map. ``split_layer = s`` puts the first ``s`` blocks on the client (the
*bottom*, 1 ≤ s ≤ len(channels)) and the remaining blocks plus the head on the server (the *top*). GroupNorm
(not BatchNorm) keeps every example's activations independent of the rest of its batch, which the vectorised
per-client forward pass (``torch.func.vmap``) and the reconstruction attack need; the paper's ResNet-18 with
static BN is too slow for 2 CPU cores. The bottom has no bias and no affine parameters, so its only
parameters are the convolution weights: the ones a probabilistic mask covers.

Probabilistic masks (003 Sec. 4.1): the bottom's weights w are frozen (Kaiming normal), each weight has a
score s, its keep-probability is θ = clamp(σ(s), c, 1 − c) (the clamp is the domain [c, 1 − c] of 003's
privacy analysis, Thm 2/3 and :class:`~ampfl.accounting.events.BernoulliMaskEvent`), and the forward pass
uses w ⊙ M with M ~ Bern(θ). The gradient is straight-through (003 Eq. 4, [24]): ∂M/∂θ is taken as 1, and the
clamp passes the gradient through unchanged, so ∂q/∂s = ∂q/∂(w⊙M) ⊙ w ⊙ σ'(s). (Eq. 4 prints an extra factor
σ(s), from App. A's ∂M/∂σ(s) = σ(s); we use the standard estimator, the paper's is ``paper_gradient``; see
docs/pm_sfl_training.md. A plain clamp would
zero the gradient of a score whose θ sits at the bound, freezing every weight whose aggregated θ was 0 or 1.)

Everything here is functional over explicit weight lists, so a cohort's bottoms are one ``[K, ...]`` tensor
per layer and :func:`bottom_forward_stacked` runs all of them with ``vmap``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.func import vmap
from torch.nn import functional as F

__all__ = [
    "MaskedBottom",
    "SplitCNNSpec",
    "SplitTop",
    "bottom_forward",
    "bottom_forward_stacked",
    "init_bottom_weights",
    "keep_probability",
    "sample_mask",
    "score_from_probability",
]


@dataclass(frozen=True)
class SplitCNNSpec:
    """Shape of the split CNN.

    Attributes:
        input_shape: one example ``(C, H, W)``.
        num_classes: labels.
        channels: output channels of each convolutional block.
        groups: GroupNorm groups (must divide every entry of ``channels``).
        split_layer: blocks on the client, 1 ≤ split_layer ≤ len(channels).
    """

    input_shape: tuple[int, int, int]
    num_classes: int
    channels: tuple[int, ...] = (16, 32, 32)
    groups: int = 4
    split_layer: int = 2

    def __post_init__(self) -> None:
        if len(self.input_shape) != 3 or min(self.input_shape) < 1:
            raise ValueError(f"input_shape must be (channels, height, width). Found {self.input_shape}.")
        if not self.channels or min(self.channels) < 1:
            raise ValueError(f"channels must be a non-empty tuple of positive ints. Found {self.channels}.")
        if self.groups < 1 or any(ch % self.groups for ch in self.channels):
            raise ValueError(f"groups must divide every channel count {self.channels}. Found {self.groups}.")
        if not 1 <= self.split_layer <= len(self.channels):
            raise ValueError(f"split_layer must be in [1, {len(self.channels)}]. Found {self.split_layer}.")
        if self.num_classes < 2:
            raise ValueError(f"num_classes must be >= 2. Found {self.num_classes}.")
        h, w = self.input_shape[1:]
        for _ in self.channels:
            h, w = h // 2, w // 2
        if h < 1 or w < 1:
            raise ValueError(f"input_shape {self.input_shape} is too small for {len(self.channels)} blocks.")

    def conv_shapes(self) -> list[tuple[int, int, int, int]]:
        """Weight shape of every convolutional block."""
        ins = (self.input_shape[0], *self.channels[:-1])
        return [(out, cin, 3, 3) for cin, out in zip(ins, self.channels, strict=True)]

    def bottom_shapes(self) -> list[tuple[int, int, int, int]]:
        """Weight shapes of the client's blocks."""
        return self.conv_shapes()[: self.split_layer]

    def bottom_dim(self) -> int:
        """d_b, the number of bottom weights (= mask bits)."""
        return sum(math.prod(s) for s in self.bottom_shapes())

    def feature_size(self) -> int:
        """Inputs of the linear head."""
        h, w = self.input_shape[1:]
        for _ in self.channels:
            h, w = h // 2, w // 2
        return self.channels[-1] * h * w


def block_forward(weight: torch.Tensor, x: torch.Tensor, groups: int) -> torch.Tensor:
    """One block: conv 3×3 (padding 1, no bias) → GroupNorm (no affine) → ReLU → MaxPool 2."""
    h = F.conv2d(x, weight, padding=1)
    h = F.group_norm(h, groups)
    return F.max_pool2d(F.relu(h), 2)


def bottom_forward(weights: Sequence[torch.Tensor], x: torch.Tensor, groups: int) -> torch.Tensor:
    """The client's smashed data ``f_{w_b}(x)`` for a batch ``x`` ``[b, C, H, W]``."""
    h = x
    for weight in weights:
        h = block_forward(weight, h, groups)
    return h


def bottom_forward_stacked(
    weights: Sequence[torch.Tensor], x: torch.Tensor, groups: int, *, use_vmap: bool = False
) -> torch.Tensor:
    """K bottoms at once: ``weights[l]`` is ``[K, *shape_l]``, ``x`` is ``[K, b, C, H, W]``; ``[K, b, ...]``.

    The K clients' channels are stacked along the channel axis: each convolution is one grouped convolution
    (``groups=K``), and GroupNorm with K·groups groups normalises exactly each client's own channel groups
    (they are contiguous), so this equals ``vmap`` of :func:`bottom_forward` (``use_vmap=True``, tested)
    without ``vmap``'s per-call overhead.
    """
    if use_vmap:
        return vmap(lambda ws, xs: bottom_forward(ws, xs, groups))(list(weights), x)
    k, b = x.shape[:2]
    h = x.transpose(0, 1).reshape(b, k * x.shape[2], *x.shape[3:])
    for weight in weights:
        h = F.conv2d(h, weight.reshape(-1, *weight.shape[2:]), padding=1, groups=k)
        h = F.max_pool2d(F.relu(F.group_norm(h, k * groups)), 2)
    return h.reshape(b, k, -1, *h.shape[2:]).transpose(0, 1)


def init_bottom_weights(spec: SplitCNNSpec, generator: torch.Generator) -> list[torch.Tensor]:
    """Kaiming-normal bottom weights (fan-in, ReLU gain), drawn from ``generator`` (003 Sec. 4.1)."""
    out = []
    for shape in spec.bottom_shapes():
        fan_in = shape[1] * shape[2] * shape[3]
        out.append(torch.randn(shape, generator=generator) * math.sqrt(2.0 / fan_in))
    return out


class _ClampStraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, low: float, high: float) -> torch.Tensor:  # type: ignore[no-untyped-def]
        return x.clamp(low, high)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:  # type: ignore[no-untyped-def]
        return grad, None, None


def keep_probability(scores: torch.Tensor, c: float) -> torch.Tensor:
    """θ = clamp(σ(s), c, 1 − c), with a straight-through gradient for the clamp (module docstring)."""
    if not 0.0 <= c < 0.5:
        raise ValueError(f"c must be in [0, 0.5). Found {c}.")
    theta = torch.sigmoid(scores)
    if c == 0.0:
        return theta
    out: torch.Tensor = _ClampStraightThrough.apply(theta, c, 1.0 - c)  # type: ignore[no-untyped-call]
    return out


def score_from_probability(theta: torch.Tensor, c: float) -> torch.Tensor:
    """s = σ⁻¹(θ) after clamping θ to [c, 1 − c] (the client's initial score, 003 Step 2); c = 0 clamps to
    [1e-6, 1 − 1e-6] so that an aggregated θ of exactly 0 or 1 gives a finite score."""
    bound = c if c > 0.0 else 1e-6
    return torch.logit(theta.clamp(bound, 1.0 - bound))


def sample_mask(theta: torch.Tensor, uniforms: torch.Tensor, *, paper_gradient: bool = False) -> torch.Tensor:
    """Binary M = 1[u < θ] ~ Bern(θ) in the forward pass, gradient ∂M/∂θ = 1 (straight-through);
    ``paper_gradient=True``: ∂M/∂θ = θ, the factor of 003 Eq. 4 / App. A Eq. 17."""
    hard = (uniforms < theta).to(theta.dtype)
    if paper_gradient:
        return hard + (theta - theta.detach()) * theta.detach()
    return hard + theta - theta.detach()


class MaskedBottom(nn.Module):
    """A client bottom with probabilistic masks: frozen weights (buffers), one trainable score per weight.

    ``forward(x, generator)`` samples a fresh mask M ~ Bern(θ) per call and returns the smashed data of
    ``w ⊙ M``; :meth:`last_mask` is that mask (binary). Used for single-client work (tests, the attack); the
    training loop uses the stacked functional form.
    """

    def __init__(
        self, spec: SplitCNNSpec, weights: Sequence[torch.Tensor], *, c: float, init_theta: float = 0.5
    ) -> None:
        super().__init__()
        self.spec = spec
        self.c = float(c)
        for i, w in enumerate(weights):
            self.register_buffer(f"weight{i}", w.detach().clone())
        start = score_from_probability(torch.tensor(float(init_theta)), self.c)
        self.scores = nn.ParameterList([nn.Parameter(torch.full_like(w, float(start))) for w in weights])
        self._mask: list[torch.Tensor] = []

    def weights(self) -> list[torch.Tensor]:
        """The frozen weights."""
        return [getattr(self, f"weight{i}") for i in range(len(self.scores))]

    def theta(self) -> list[torch.Tensor]:
        """Keep-probabilities θ per layer (in [c, 1 − c])."""
        return [keep_probability(s, self.c) for s in self.scores]

    def forward(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        masks = [sample_mask(t, torch.rand(t.shape, generator=generator)) for t in self.theta()]
        self._mask = [m.detach() for m in masks]
        return bottom_forward(
            [w * m for w, m in zip(self.weights(), masks, strict=True)], x, self.spec.groups
        )

    def last_mask(self) -> list[torch.Tensor]:
        """The binary mask of the last forward pass."""
        return self._mask


class SplitTop(nn.Module):
    """The server's top: the blocks after ``split_layer`` (trained weights) and the linear head."""

    def __init__(self, spec: SplitCNNSpec, generator: torch.Generator) -> None:
        super().__init__()
        self.spec = spec
        weights = []
        for shape in spec.conv_shapes()[spec.split_layer :]:
            fan_in = shape[1] * shape[2] * shape[3]
            weights.append(nn.Parameter(torch.randn(shape, generator=generator) * math.sqrt(2.0 / fan_in)))
        self.convs = nn.ParameterList(weights)
        features = spec.feature_size()
        bound = 1.0 / math.sqrt(features)
        self.head_weight = nn.Parameter(
            (torch.rand((spec.num_classes, features), generator=generator) * 2 - 1) * bound
        )
        self.head_bias = nn.Parameter(torch.zeros(spec.num_classes))

    def forward(self, smashed: torch.Tensor) -> torch.Tensor:
        h = smashed
        for weight in self.convs:
            h = block_forward(weight, h, self.spec.groups)
        return F.linear(h.flatten(start_dim=1), self.head_weight, self.head_bias)
