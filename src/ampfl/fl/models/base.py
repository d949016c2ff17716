"""The model interface the engine relies on."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class FLModel(nn.Module):
    """A model usable by the vectorised engine.

    Subclasses define ``forward`` and may override :meth:`per_sample_loss`, :meth:`penalty` and
    :meth:`predict`.
    The default loss is the softmax cross-entropy of each example.
    """

    num_classes: int

    def per_sample_loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Loss of each example, shape ``[batch]``."""
        return F.cross_entropy(outputs, targets, reduction="none")

    def penalty(self, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """Data-independent regulariser R(w), added to every example's loss (default 0)."""
        first = next(iter(params.values()))
        return first.new_zeros(())

    def predict(self, outputs: torch.Tensor) -> torch.Tensor:
        """Predicted labels, shape ``[batch]`` (int64)."""
        return outputs.argmax(dim=-1)
