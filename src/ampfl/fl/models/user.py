"""A user's own ``torch.nn.Module`` as an :class:`~ampfl.fl.models.base.FLModel`, and the check that its
forward is functional (what the engine needs to run it for a whole cohort in one ``torch.func.vmap``).

A model is functional when its outputs depend only on its parameters and inputs: no running statistics
(BatchNorm with ``track_running_stats``), no buffer changed by ``forward``, no randomness inside ``forward``
(dropout: vmap refuses the random draw), nothing data-dependent in Python control flow on tensor values.
:func:`check_functional` runs the forward once per parameter copy under ``vmap`` on a zero batch and refuses
in one line naming what breaks.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ampfl.fl.models.base import FLModel

__all__ = ["UserModel", "check_functional"]


class UserModel(FLModel):
    """Wraps a plain ``nn.Module`` (logits out): softmax cross-entropy per example, argmax prediction."""

    def __init__(self, net: nn.Module, *, num_classes: int) -> None:
        super().__init__()
        self.net = net
        self.num_classes = int(num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out


def _running_statistics(model: nn.Module) -> str | None:
    for path, module in model.named_modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.track_running_stats:
            where = f" at {path!r}" if path else ""
            return (
                f"{type(module).__name__}{where} keeps running statistics (training differs per client and "
                "from evaluation); use GroupNorm or LayerNorm"
            )
        if isinstance(module, nn.modules.instancenorm._InstanceNorm) and module.track_running_stats:
            return (
                f"{type(module).__name__} at {path!r} keeps running statistics; set track_running_stats=False"
            )
    return None


def check_functional(model: nn.Module, input_shape: tuple[int, ...], *, name: str = "model") -> None:
    """Refuse a model the vectorised engine cannot run (module docstring).

    Raises:
        ValueError: one line, ``"<name>: ..."``, naming what breaks vmap.
    """
    from torch.func import functional_call, stack_module_state, vmap

    problem = _running_statistics(model)
    if problem is not None:
        raise ValueError(f"{name}: {problem}.")
    if not any(True for _ in model.parameters()):
        raise ValueError(f"{name}: the module has no parameters to train.")
    buffers = {k: v.detach().clone() for k, v in model.named_buffers()}
    x = torch.zeros((2, *input_shape), dtype=torch.float32)
    params, _ = stack_module_state([model, model])
    named_buffers = dict(model.named_buffers())

    def call(p: dict[str, torch.Tensor], batch: torch.Tensor) -> Any:
        return functional_call(model, (p, named_buffers), (batch,))

    try:
        with torch.no_grad():
            out = vmap(call, in_dims=(0, None))(params, x)
    except Exception as err:  # what vmap refuses: randomness, in-place updates, .item() control flow
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(
            f"{name}: its forward does not run under torch.func.vmap over stacked parameters ({first[:200]})"
        ) from None
    if not isinstance(out, torch.Tensor) or out.ndim < 2 or out.shape[:2] != (2, 2):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"{name}: forward must return a tensor of logits [batch, classes]. Found {shape}.")
    for key, value in model.named_buffers():
        if not torch.equal(value, buffers[key]):
            raise ValueError(f"{name}: forward changes its buffer {key!r} (state outside the parameters).")
