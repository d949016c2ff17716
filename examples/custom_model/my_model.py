"""A user's own model: a two-layer convolutional net for 1×8×8 images, written without ampfl.

Functional (what ampfl's vectorised engine needs): GroupNorm instead of BatchNorm, no dropout, no state
outside the parameters.
"""

from __future__ import annotations

from torch import nn


def two_layer_convnet(*, input_shape: tuple[int, ...], num_classes: int, channels: int = 8) -> nn.Module:
    """Conv(3×3) → GroupNorm → ReLU → Conv(3×3, stride 2) → ReLU → Linear on the flattened maps."""
    in_channels, height, width = input_shape
    return nn.Sequential(
        nn.Conv2d(in_channels, channels, kernel_size=3, padding=1),
        nn.GroupNorm(2, channels),
        nn.ReLU(),
        nn.Conv2d(channels, channels, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(channels * ((height + 1) // 2) * ((width + 1) // 2), num_classes),
    )


def batchnorm_convnet(*, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """The same net with BatchNorm: refused by ampfl (running statistics are state outside the weights)."""
    return nn.Sequential(
        nn.Conv2d(input_shape[0], 8, kernel_size=3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, num_classes),
    )
