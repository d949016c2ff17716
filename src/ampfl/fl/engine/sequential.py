"""The engine's paths without ``torch.func``.

The sequential reference (``EngineOptions(vectorized=False)``): a Python loop over clients and steps with
plain autograd, and a loop over examples for per-sample clipping — the vectorised path's numbers up to float
rounding (tests/fl/test_engine.py, to 1e-5). (The evaluation of one model without ``vmap`` is in
:mod:`ampfl.fl.engine.evaluation`.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from ampfl.fl.engine.functional_model import FunctionalModel


class ChunkSteps(NamedTuple):
    """The Q local SGD steps of one chunk of k clients, as both local-SGD paths take them (the vectorised
    ``Engine._local_sgd_chunk`` and :func:`local_sgd_sequential`).

    Attributes:
        xb, yb: the mini-batches' inputs ``[k, Q, b, ...]`` and labels ``[k, Q, b]``.
        wb: the per-example weights ``[k, Q, b]``.
        lr: the learning rate η.
        clip: the per-example gradient bound (None: no per-example clipping).
        ids: the clients' ids ``[k]`` (passed to ``hook``).
        hook: the engine's gradient hook (``ampfl.fl.engine.vectorised.GradHook``), or None.
    """

    xb: torch.Tensor
    yb: torch.Tensor
    wb: torch.Tensor
    lr: float
    clip: float | None
    ids: np.ndarray
    hook: Callable[[int, np.ndarray, torch.Tensor], torch.Tensor] | None


def local_sgd_sequential(
    model: FunctionalModel, out: torch.Tensor, params: torch.Tensor, steps: ChunkSteps
) -> torch.Tensor:
    """Q steps of SGD for each client of a chunk, one after another: final parameters into ``out``
    (``[k, d]``), returns the mean losses ``[k]`` (arguments as ``Engine._local_sgd_chunk``)."""
    xb, yb, wb, lr, clip, ids, hook = steps
    losses = params.new_zeros(params.shape[0])
    for i in range(params.shape[0]):
        w = params[i].clone()
        for r in range(xb.shape[1]):
            g, loss = autograd_step(model, w, xb[i, r], yb[i, r], wb[i, r], clip)
            if hook is not None:
                g = hook(r, ids[i : i + 1], g[None])[0]
            w = w - lr * g
            losses[i] += loss
        out[i] = w
    return losses / xb.shape[1]


def autograd_step(
    model: FunctionalModel,
    w: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    wt: torch.Tensor,
    clip: float | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference gradient of one client's step with plain autograd (no torch.func)."""
    leaf = w.detach().clone().requires_grad_(True)
    if clip is None:
        loss = model.weighted_loss(leaf, x, y, wt)
        (g,) = torch.autograd.grad(loss, leaf)
        return g.detach(), loss.detach()
    total = torch.zeros_like(leaf)
    loss_sum = leaf.new_zeros(())
    for j in range(x.shape[0]):
        lj = model.one_example_loss(leaf, x[j], y[j])
        (gj,) = torch.autograd.grad(lj, leaf)
        total += wt[j] * gj * min(1.0, clip / (float(gj.norm()) + 1e-12))
        loss_sum += wt[j] * lj.detach()
    return total.detach(), loss_sum
