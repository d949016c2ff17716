"""The CNN of 004 (Hasırcıoğlu & Gündüz), App. B.1, Fig. 8: two convolutional + two fully connected layers.

Conv(1→16, kernel 8, stride 2, padding 3) → ReLU → MaxPool(2, stride 1) → Conv(16→32, kernel 4, stride 2)
→ ReLU → MaxPool(2, stride 1) → FC(32·4·4 → 256) → ReLU → FC(256 → classes) → softmax (in the loss).
For a 28×28 input the feature maps are 14×14 → 13×13 → 5×5 → 4×4, hence 32·4·4 = 512 inputs to the first FC
layer, as printed in Fig. 8. (Fig. 8 has 62 outputs for EMNIST; we use the dataset's number of classes.)
"""

from __future__ import annotations

import torch
from torch import nn

from ampfl.fl.models.base import FLModel


class HasirciogluCNN(FLModel):
    """The network of 004 Fig. 8 for [channels, 28, 28] inputs (no BatchNorm, vmap-safe)."""

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
