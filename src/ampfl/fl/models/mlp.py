"""A small fully connected network (ReLU hidden layers, softmax cross-entropy)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
from torch import nn

from ampfl.fl.models.base import FLModel


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
