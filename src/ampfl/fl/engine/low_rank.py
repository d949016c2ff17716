"""K clients' weight matrices of one linear layer during local SGD, kept as a base plus a low-rank update.

One plain SGD step changes the weight W_i [out, in] of a linear layer z = h Wᵀ by −η (∂L_i/∂z_i)ᵀ h_i, a
matrix of rank at most b (the mini-batch size). After r steps W_i = B_i + U_iᵀ H_i with H_i the inputs of the
r steps stacked ([r·b, in]) and U_i = −η ∂L_i/∂z_i of the same steps ([r·b, out]). :class:`LowRankLinear`
keeps (B, U, H) instead of W and computes

    z = h B_iᵀ + (h H_iᵀ) U_i        ∂L/∂h = (∂L/∂z) B_i + ((∂L/∂z) U_iᵀ) H_i        (autograd, the second)

— the same numbers as with W_i up to float rounding. When all clients start from one global model
(FedAvg), B is one [out, in] matrix: h B_iᵀ of the K clients is one matrix product over all K·b rows, as in
centralized training, and the K per-client weight matrices are never read or written during the Q steps;
they are formed once at the end (:meth:`LowRankLinear.write`, a product of inner size Q·b per client). Per
step this replaces about four passes over K·out·in floats (read W for z and for ∂L/∂h, read and write W for
the update) by small [b, r·b] products. :func:`low_rank_local_sgd` is the engine's plain local SGD with such
layers (the CNN's first FC layer, docs/performance.md).
Where only the clients' mean is needed (FedAvg), :meth:`LowRankLinear.add_sum` forms Σ_i W_i with one
matrix product over all clients' factors, and the K matrices are never formed at all.
Once r·b would exceed ``max_rank`` the factors are folded into a per-client B (the dense update again).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ampfl.fl.engine.functional_model import FunctionalModel


class LowRankLinear:
    """z = h W_iᵀ for K clients with W_i = B_i + U_iᵀ H_i (module docstring); a callable ``h -> z`` for the
    model's ``forward_stacked`` (``linears``), updated by :meth:`step` after each backward pass."""

    def __init__(
        self, base: torch.Tensor, k: int, *, max_rank: int | None = None, capacity: int | None = None
    ) -> None:
        """``base``: the starting weights, ``[out, in]`` (shared by the K clients) or ``[k, out, in]``;
        ``capacity``: the factor rows to reserve at the first step (e.g. Q·b; grown when exceeded)."""
        if base.dim() not in (2, 3) or (base.dim() == 3 and base.shape[0] != k):
            raise ValueError(f"base must have shape [out, in] or [{k}, out, in]. Found {tuple(base.shape)}.")
        self.base, self.k = base, k
        self._start = base  # W⁰, what the update W − W⁰ is measured from
        out_features, in_features = base.shape[-2:]
        self.max_rank = max_rank if max_rank is not None else min(out_features, in_features) // 2
        self._capacity = capacity
        # H and U of the past steps, rows [0, rank) of two reserved buffers [k, rows, in] and [k, rows, out]
        # (each step writes its b rows in place: no concatenation of the growing factors)
        self._hbuf: torch.Tensor | None = None
        self._ubuf: torch.Tensor | None = None
        self._rank = 0
        self.last: tuple[torch.Tensor, torch.Tensor] | None = None  # (h, z) of the latest call

    @property
    def rank(self) -> int:
        """Rows r·b of the accumulated update (its rank is at most this)."""
        return self._rank

    @property
    def _has_update(self) -> bool:
        return self._rank > 0

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        """z = h W_iᵀ for ``h`` of shape ``[k, b, in]`` (differentiable w.r.t. ``h``); records (h, z)."""
        k, b = h.shape[0], h.shape[1]
        if self.base.dim() == 2:
            z = (h.reshape(k * b, -1) @ self.base.T).reshape(k, b, -1)
        else:
            z = torch.bmm(h, self.base.transpose(1, 2))
        if self._has_update:
            hs, us = self._factors()
            z = torch.baddbmm(z, torch.bmm(h, hs.transpose(1, 2)), us)
        if torch.is_grad_enabled() and not z.requires_grad:  # a first layer (h is data): ∂L/∂z is still asked
            z.requires_grad_(True)
        self.last = (h, z)
        return z

    def step(self, grad_z: torch.Tensor, learning_rate: float) -> None:
        """W_i ← W_i − η (∂L_i/∂z_i)ᵀ h_i for the (h, z) of the latest call; ``grad_z``: ∂L/∂z
        ``[k, b, out]``."""
        if self.last is None:
            raise RuntimeError("step() needs a forward call first")
        h = self.last[0].detach()
        rows = h.shape[1]
        hbuf, ubuf = self._reserve(self._rank + rows, h, grad_z)
        hbuf[:, self._rank : self._rank + rows].copy_(h)
        torch.mul(grad_z.detach(), -learning_rate, out=ubuf[:, self._rank : self._rank + rows])
        self._rank += rows
        self.last = None
        if self.rank > self.max_rank:  # the factors cost more than the dense matrices: fold them in
            self.base = self._dense()
            self._rank = 0

    def _reserve(self, rows: int, h: torch.Tensor, grad_z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The factor buffers with room for ``rows`` rows (reserved at ``capacity``, at least doubled when
        grown; the rows so far kept)."""
        if self._hbuf is None or self._ubuf is None or self._hbuf.shape[1] < rows:
            old = 0 if self._hbuf is None else self._hbuf.shape[1]
            size = max(rows, self._capacity or 0, 2 * old)
            hbuf = h.new_empty(self.k, size, h.shape[-1])
            ubuf = grad_z.new_empty(self.k, size, grad_z.shape[-1])
            if self._hbuf is not None and self._ubuf is not None and self._rank:
                hbuf[:, : self._rank].copy_(self._hbuf[:, : self._rank])
                ubuf[:, : self._rank].copy_(self._ubuf[:, : self._rank])
            self._hbuf, self._ubuf = hbuf, ubuf
        return self._hbuf, self._ubuf

    def write(self, out: torch.Tensor) -> None:
        """The current W ``[k, out, in]`` into ``out`` (e.g. a strided view of a ``[k, d]`` buffer)."""
        if not self._has_update:
            out.copy_(self.base.expand(self.k, *self.base.shape[-2:]))
            return
        hs, us = self._factors()
        for i in range(self.k):  # one call per client writes into the strided view directly
            torch.addmm(self.base if self.base.dim() == 2 else self.base[i], us[i].T, hs[i], out=out[i])

    def add_sum(self, out: torch.Tensor) -> None:
        """Adds Σ_i W_i (``[out, in]``) to ``out``: k·B (or Σ_i B_i) + Σ_i U_iᵀ H_i as one matrix product over
        the factors of all clients (the K matrices are not formed)."""
        out.add_(self.base * self.k if self.base.dim() == 2 else self.base.sum(0))
        if self._has_update:
            hs, us = self._factors()
            out.addmm_(us.reshape(-1, us.shape[-1]).T, hs.reshape(-1, hs.shape[-1]))

    def update_factors(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(H, U)`` (``[k, r·b, in]``, ``[k, r·b, out]``) with W_i − W_i⁰ = U_iᵀ H_i (W⁰ the starting
        weights); None once the factors were folded into a dense base, or before any step."""
        if self.base is not self._start or not self._has_update:
            return None
        return self._factors()

    def dense_update(self) -> torch.Tensor:
        """W_i − W_i⁰ ``[k, out, in]``, formed (where :meth:`update_factors` is None)."""
        current = self._dense() if self._has_update else self.base.expand(self.k, *self.base.shape[-2:])
        return current - self._start

    def _dense(self) -> torch.Tensor:
        hs, us = self._factors()
        return torch.baddbmm(self.base.expand(self.k, *self.base.shape[-2:]), us.transpose(1, 2), hs)

    def _factors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(H, U) of the steps so far: views of rows [0, rank) of the buffers."""
        assert self._hbuf is not None and self._ubuf is not None
        return self._hbuf[:, : self._rank], self._ubuf[:, : self._rank]


def low_rank_local_sgd(
    model: FunctionalModel,
    out: torch.Tensor,
    params: torch.Tensor,
    fused: tuple[str, ...],
    xb: torch.Tensor,
    yb: torch.Tensor,
    wb: torch.Tensor,
    lr: float,
) -> torch.Tensor:
    """Plain local SGD through the model's ``forward_stacked`` with the weights named in ``fused``
    (stacked linear layers z = h Wᵀ) kept as base + low-rank update (:class:`LowRankLinear`): autograd
    gives ∂L/∂z of these layers and the gradients of the other (small) parameters, which are updated in
    place as contiguous ``[k, *shape]`` tensors; the ``[k, d]`` result is written once at the end. When
    the clients share their start (``params`` a stride-0 expansion of one ``[d]`` vector, as in FedAvg),
    the base is that one matrix. Same numbers as the gradient path up to float rounding (tested to 1e-5).
    Writes the final parameters into ``out`` (``[k, d]``) or adds their sum over the k clients to it
    (``[d]``); returns the mean losses ``[k]``."""
    state = low_rank_steps(model, params, fused, xb, yb, wb, lr)
    views = model.spec.unflatten(out)
    with torch.no_grad():
        for n, t in zip(state.trained, state.tensors, strict=True):
            if out.dim() == 2:
                views[n].copy_(t)
            else:
                views[n].add_(t.sum(0))
        for n in fused:
            if out.dim() == 2:
                state.layers[n].write(views[n])
            else:
                state.layers[n].add_sum(views[n])
    return state.losses


@dataclass
class LowRankState:
    """The k clients after their local steps: the low-rank layers, the names and ``[k, *shape]`` tensors
    of the other parameters, the named start (``[*shape]`` shared, or ``[k, *shape]``), the mean losses."""

    layers: dict[str, LowRankLinear]
    trained: list[str]
    tensors: list[torch.Tensor]
    start: dict[str, torch.Tensor]
    losses: torch.Tensor


def low_rank_steps(
    model: FunctionalModel,
    params: torch.Tensor,
    fused: tuple[str, ...],
    xb: torch.Tensor,
    yb: torch.Tensor,
    wb: torch.Tensor,
    lr: float,
) -> LowRankState:
    """The Q local steps of :func:`low_rank_local_sgd` (its docstring), without writing the result."""
    spec, k = model.spec, params.shape[0]
    named = spec.unflatten(params[0] if params.stride(0) == 0 else params)
    rows = xb.shape[1] * xb.shape[2]  # Q·b: the factor rows of the Q steps, reserved once
    layers = {n: LowRankLinear(named[n], k, capacity=rows) for n in fused}
    trained = [n for n in spec.names if n not in fused]
    shapes = dict(zip(spec.names, spec.shapes, strict=True))
    tensors = [named[n].expand(k, *shapes[n]).clone(memory_format=torch.contiguous_format) for n in trained]
    total = params.new_zeros(k)
    for r in range(xb.shape[1]):
        leaves = [t.detach().requires_grad_(True) for t in tensors]
        with torch.enable_grad():
            losses = model.stacked_example_losses(
                dict(zip(trained, leaves, strict=True)), xb[:, r], yb[:, r], linears=dict(layers)
            )
            per_client = (losses * wb[:, r]).sum(1)
            outs = torch.autograd.grad(per_client.sum(), leaves + [_z(layers[n]) for n in fused])
        with torch.no_grad():
            torch._foreach_add_(tensors, list(outs[: len(trained)]), alpha=-lr)
            for n, gz in zip(fused, outs[len(trained) :], strict=True):
                layers[n].step(gz, lr)
        total = total + per_client.detach()
    return LowRankState(layers, trained, tensors, named, total / xb.shape[1])


def _z(layer: LowRankLinear) -> torch.Tensor:
    """The output z of ``layer``'s latest forward call (what autograd differentiates for its update)."""
    assert layer.last is not None
    return layer.last[1]
