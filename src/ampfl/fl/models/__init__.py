"""vmap-friendly models of the simulator (no BatchNorm, no in-place state).

Every model is an :class:`FLModel`: a ``torch.nn.Module`` whose ``forward`` maps a batch of inputs to outputs,
plus ``per_sample_loss(outputs, targets)`` (one loss per example, shape ``[batch]``), ``penalty(params)`` (a
data-independent regulariser added to every example's loss, e.g. the γ term of 000 Eq. 20) and
``predict(outputs)`` (class labels). The engine calls them through ``torch.func.functional_call`` with
parameters stacked per client.

Names accepted by :func:`build_model`: ``"logreg"`` (000 Eqs. 20–21), ``"mlp"`` and ``"cnn"`` (004 Fig. 8).
"""

from __future__ import annotations

import math
from typing import Any

from torch import nn

from ampfl.fl.models.base import FLModel
from ampfl.fl.models.char_gru import CharGRU
from ampfl.fl.models.cnn import HasirciogluCNN
from ampfl.fl.models.gn_cnn import GroupNormCNN
from ampfl.fl.models.linear import LogisticRegression
from ampfl.fl.models.mlp import MLP

MODELS: dict[str, type[FLModel]] = {"logreg": LogisticRegression, "mlp": MLP, "cnn": HasirciogluCNN}
MODELS["cnn_gn"] = GroupNormCNN  # issue 14: 002 Sec. 4 fine-tuning (GroupNorm)
MODELS["char_gru"] = CharGRU  # Shakespeare next-character prediction (paper 001)


def build_model(name: str, *, input_shape: tuple[int, ...], num_classes: int, **options: Any) -> FLModel:
    """Build a model by name.

    Args:
        name: "logreg", "mlp" or "cnn".
        input_shape: shape of one example (e.g. ``(14,)`` or ``(1, 28, 28)``).
        num_classes: number of labels (2 for a binary task).
        **options: model options (logreg: ``gamma``, ``bias``, ``init_std``; mlp: ``hidden``; cnn: none).

    Raises:
        ValueError: for an unknown name, a bad shape or an unknown option.
    """
    if name not in MODELS:
        raise ValueError(f"model must be one of {sorted(MODELS)}. Found {name!r}.")
    if not input_shape or any(int(s) < 1 for s in input_shape):
        raise ValueError(f"input_shape must be a non-empty tuple of positive sizes. Found {input_shape!r}.")
    if isinstance(num_classes, bool) or int(num_classes) < 2:
        raise ValueError(f"num_classes must be an integer >= 2. Found {num_classes!r}.")
    try:
        return MODELS[name](
            input_shape=tuple(int(s) for s in input_shape), num_classes=int(num_classes), **options
        )
    except TypeError as err:  # unknown keyword option
        raise ValueError(f"bad option for model {name!r}: {err}") from None


def loss_fn(model: nn.Module) -> Any:
    """The per-sample loss of a model (``outputs, targets -> [batch]``)."""
    if not isinstance(model, FLModel):
        raise ValueError(f"model must be an FLModel. Found {type(model).__name__}.")
    return model.per_sample_loss


def num_parameters(model: nn.Module) -> int:
    """Total number of trainable scalars d."""
    return sum(math.prod(p.shape) for p in model.parameters())


__all__ = [
    "MLP",
    "MODELS",
    "FLModel",
    "GroupNormCNN",
    "HasirciogluCNN",
    "LogisticRegression",
    "build_model",
    "loss_fn",
    "num_parameters",
]
