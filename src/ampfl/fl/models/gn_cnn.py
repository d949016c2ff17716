"""A small CNN with GroupNorm for the private fine-tuning of paper 002 Sec. 4, scaled to FMNIST.

002 trains ResNet-101 with its BatchNorm layers replaced by GroupNorm (per-example gradients, DP); this is the
same idea at the size of this machine: Conv(c→16, k5, s2, p2) → GroupNorm(4) → ReLU → Conv(16→32, k5, s2,
p2) → GroupNorm(4) → ReLU → AvgPool(to 2×2) → FC(128 → 64) → ReLU → FC(64 → classes). For a 28×28 input
the feature maps are 14×14 → 7×7 → 2×2; about 22k parameters. Parameter names (the ``shared`` prefixes of
the model-split algorithm): ``stem.*`` (first conv + norm), ``body.*`` (second conv + norm),
``classifier.0.*`` (hidden FC) and ``classifier.2.*`` (output layer).
"""

from __future__ import annotations

import torch
from torch import nn

from ampfl.fl.models.base import FLModel


class GroupNormCNN(FLModel):
    """Two conv + GroupNorm blocks and two FC layers, for [channels, 28, 28] inputs (vmap-safe)."""

    def __init__(self, *, input_shape: tuple[int, ...], num_classes: int, width: int = 16) -> None:
        super().__init__()
        if len(input_shape) != 3 or input_shape[1:] != (28, 28):
            raise ValueError(f"input_shape must be (channels, 28, 28) for the cnn_gn. Found {input_shape}.")
        if isinstance(width, bool) or not isinstance(width, int) or width < 4 or width % 4:
            raise ValueError(f"width must be a positive multiple of 4. Found {width!r}.")
        self.num_classes = num_classes
        self.stem = nn.Sequential(
            nn.Conv2d(input_shape[0], width, kernel_size=5, stride=2, padding=2), nn.GroupNorm(4, width)
        )
        self.body = nn.Sequential(
            nn.Conv2d(width, 2 * width, kernel_size=5, stride=2, padding=2), nn.GroupNorm(4, 2 * width)
        )
        self.pool = nn.AdaptiveAvgPool2d(2)
        self.classifier = nn.Sequential(nn.Linear(8 * width, 64), nn.ReLU(), nn.Linear(64, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.stem(x))
        h = torch.relu(self.body(h))
        out: torch.Tensor = self.classifier(self.pool(h).flatten(start_dim=1))
        return out
