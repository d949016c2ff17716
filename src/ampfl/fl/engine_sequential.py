"""The engine's paths without ``torch.func``.

The sequential reference (``EngineOptions(vectorized=False)``): a Python loop over clients and steps with
plain autograd, and a loop over examples for per-sample clipping — the vectorised path's numbers up to float
rounding (tests/fl/test_engine.py, to 1e-5); and the evaluation of one model on the CPU without ``vmap``
(:func:`one_model_counts`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ampfl.fl.functional_model import FunctionalModel


def local_sgd_sequential(
    model: FunctionalModel,
    out: torch.Tensor,
    params: torch.Tensor,
    xb: torch.Tensor,
    yb: torch.Tensor,
    wb: torch.Tensor,
    lr: float,
    clip: float | None,
    ids: np.ndarray,
    hook: Callable[[int, np.ndarray, torch.Tensor], torch.Tensor] | None,
) -> torch.Tensor:
    """Q steps of SGD for each client of a chunk, one after another: final parameters into ``out``
    (``[k, d]``), returns the mean losses ``[k]`` (arguments as ``Engine._local_sgd_chunk``)."""
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


def one_model_counts(
    model: FunctionalModel,
    flat: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    num_classes: int,
    batch: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``Engine._class_counts`` of one model on the CPU (``[1, C]``, ``[C]``): its outputs without ``vmap``
    and the hits counted in NumPy (integer counts, so the same float64 values; an evaluation of a small model
    is a few tens of microseconds of arithmetic and ~15 µs per torch call on top)."""
    labels = y.numpy()
    hits = np.zeros(num_classes, dtype=np.int64)
    with torch.no_grad():
        for s in range(0, x.shape[0], batch):
            predicted = model.module.predict(model.outputs(flat, x[s : s + batch])).numpy()
            right = labels[s : s + batch][predicted == labels[s : s + batch]]
            hits += np.bincount(right, minlength=num_classes)[:num_classes]
    counted = np.bincount(labels, minlength=num_classes)[:num_classes]
    return torch.from_numpy(hits.astype(np.float64))[None], torch.from_numpy(counted.astype(np.float64))
