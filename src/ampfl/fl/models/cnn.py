"""The CNN of 004 (Hasırcıoğlu & Gündüz), App. B.1, Fig. 8: two convolutional + two fully connected layers.

Conv(1→16, kernel 8, stride 2, padding 3) → ReLU → MaxPool(2, stride 1) → Conv(16→32, kernel 4, stride 2)
→ ReLU → MaxPool(2, stride 1) → FC(32·4·4 → 256) → ReLU → FC(256 → classes) → softmax (in the loss).
For a 28×28 input the feature maps are 14×14 → 13×13 → 5×5 → 4×4, hence 32·4·4 = 512 inputs to the first FC
layer, as printed in Fig. 8. (Fig. 8 has 62 outputs for EMNIST; we use the dataset's number of classes.)

:meth:`HasirciogluCNN.forward_stacked` evaluates K differently-parameterised copies of the network at once
(the engine's plain local-SGD fast path): the K clients' feature maps are stacked along the channel axis and
each convolution is one grouped convolution (``groups=K``) in the channels-last memory layout, and the FC
layers are batched matrix products (``baddbmm``). It computes the same function as ``vmap`` of
:meth:`forward` over the stacked parameters (tested to 1e-5); the channels-last layout is what makes it faster
(docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

from ampfl.fl.models.base import FLModel


class HasirciogluCNN(FLModel):
    """The network of 004 Fig. 8 for [channels, 28, 28] inputs (no BatchNorm, vmap-safe)."""

    fused_linear_weights = ("classifier.0.weight",)
    """Stacked linear layer whose product z = h Wᵀ :meth:`forward_stacked` lets the caller compute
    (``linears``): the engine then keeps its K weight matrices as a shared base plus a low-rank update
    (:class:`ampfl.fl.engine.low_rank.LowRankLinear`) during the local steps."""

    def __init__(self, *, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        if len(input_shape) != 3 or input_shape[1:] != (28, 28):
            raise ValueError(f"input_shape must be (channels, 28, 28) for the cnn. Found {input_shape}.")
        self.num_classes = num_classes
        self.features = nn.Sequential(
            nn.Conv2d(input_shape[0], 16, kernel_size=8, stride=2, padding=3),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=1),
            nn.Conv2d(16, 32, kernel_size=4, stride=2),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=1),
        )
        self.classifier = nn.Sequential(nn.Linear(32 * 4 * 4, 256), nn.ReLU(), nn.Linear(256, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.classifier(self.features(x).flatten(start_dim=1))
        return out

    def forward_stacked(
        self,
        params: dict[str, torch.Tensor],
        x: torch.Tensor,
        *,
        linears: dict[str, Callable[[torch.Tensor], torch.Tensor]] | None = None,
    ) -> torch.Tensor:
        """Outputs of K networks on their own batches: ``params[name]`` is ``[K, *shape]`` (the named
        parameters of :meth:`forward`, stacked), ``x`` is ``[K, b, channels, 28, 28]``; returns ``[K, b,
        classes]``. Equal to ``vmap(functional_call(self, ·, x_i))`` up to float rounding. With
        ``linears``, the first FC layer's weight-input product z = h Wᵀ (before the bias, ``h`` of shape
        ``[K, b, 512]``) is ``linears["classifier.0.weight"](h)`` and ``params`` need not hold that weight."""
        k, b, c = x.shape[0], x.shape[1], x.shape[2]
        cl = torch.channels_last  # layers as in __init__: conv k8 s2 p3, pool 2 s1, conv k4 s2, pool 2 s1
        # [b, K·c, 28, 28]: client i's channels are group i of the grouped convolutions.
        h = x.transpose(0, 1).reshape(b, k * c, *x.shape[3:]).contiguous(memory_format=cl)
        w1 = params["features.0.weight"]
        h = F.conv2d(
            h,
            w1.reshape(k * w1.shape[1], *w1.shape[2:]).to(memory_format=cl),
            params["features.0.bias"].reshape(-1),
            stride=2,
            padding=3,
            groups=k,
        )
        # ReLUs in place (the same values): the backward of the operation before each (convolution, baddbmm,
        # add) does not need its output, and a buffer as large as it is saved (12.5 MB after conv 1 at
        # K = 100, b = 10; forward and backward of that step ≈ 5 % less CPU time)
        h = F.max_pool2d(F.relu_(h), kernel_size=2, stride=1)
        w2 = params["features.3.weight"]
        h = F.conv2d(
            h,
            w2.reshape(k * w2.shape[1], *w2.shape[2:]).to(memory_format=cl),
            params["features.3.bias"].reshape(-1),
            stride=2,
            groups=k,
        )
        h = F.max_pool2d(F.relu_(h), kernel_size=2, stride=1)  # [b, K·32, 4, 4]
        # back to NCHW order per client so the flattening matches forward(): [K, b, 32·4·4]
        h = h.contiguous().reshape(b, k, -1).transpose(0, 1)
        fc1_b = params["classifier.0.bias"]
        fc1 = None if linears is None else linears.get("classifier.0.weight")
        if fc1 is None:
            h = torch.baddbmm(fc1_b.unsqueeze(1), h, params["classifier.0.weight"].transpose(1, 2)).relu_()
        else:
            h = (fc1(h) + fc1_b.unsqueeze(1)).relu_()
        fc2_w, fc2_b = params["classifier.2.weight"], params["classifier.2.bias"]
        return torch.baddbmm(fc2_b.unsqueeze(1), h, fc2_w.transpose(1, 2))
