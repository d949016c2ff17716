"""Clipping of the clients' updates to an L2 bound C: each row of a ``[K, d]`` stack (:func:`clip_rows`), or
the sum Σ_i clip_C(Δ_i) of a cohort's updates computed from the low-rank factors of their local steps, without
forming the K models (:func:`low_rank_clipped_sum`).

On the low-rank path (:mod:`ampfl.fl.engine.low_rank`) the update of a fused linear layer is
ΔW_i = U_iᵀ H_i = Σ_s u_s h_sᵀ (r = Q·b rows u_s, h_s), whose squared Frobenius norm is

    ‖ΔW_i‖²_F = Σ_{s,t} (u_s·u_t)(h_s·h_t) = Σ (U_i U_iᵀ) ∘ (H_i H_iᵀ),

two ``[r, r]`` Gram matrices per client instead of an ``[out, in]`` matrix; the other parameters' updates are
the (small) dense differences. The clipped sum is then Σ_i c_i Δ_i with one matrix product
(c ⊙ U_all)ᵀ H_all for the fused layer, c_i = min(1, C/‖Δ_i‖).

The bound must hold exactly, not only up to rounding: the Gram form is a sum of terms that can cancel, so its
float32 rounding error relative to ‖Δ_i‖² is not bounded by a constant. The Gram products are therefore
taken in float64 (the float32 factors are exact there), with an a-priori bound on their rounding error,
err_i = 2 (r² + in + out + 2) 2⁻⁵³ (Σ_s ‖u_s‖‖h_s‖)² (the dot products' γ_n bound times the triangle bound of
each term; the dense parts add 2 d 2⁻⁵³ of their sum of squares), and the factor is

    c_i = min(1, C / (√(‖Δ_i‖² + err_i) · (1 + 10⁻⁶))),

so c_i ‖Δ_i‖ ≤ C for the exact update the factors represent; the 10⁻⁶ margin covers the float32 rounding of
c_i and of the products c_i u_s (≤ 2⁻²⁴ relative each). The norms returned are √‖Δ_i‖² (no margin): equal
to those of the formed models to float32 rounding (tests/fl/test_engine_clipping.py).
"""

from __future__ import annotations

import torch

from ampfl.fl.engine.functional_model import FunctionalModel
from ampfl.fl.engine.low_rank import low_rank_steps

#: Relative margin by which a factored norm bound is enlarged before the clip factor is taken (module
#: docstring): covers the float32 rounding of the factor and of its products with U.
NORM_MARGIN = 1e-6
_U64 = 2.0**-53  # unit roundoff of float64


def clip_rows(rows: torch.Tensor, clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row of ``rows`` ``[K, d]`` scaled to L2 norm at most ``clip``; returns ``(clipped, norms)``."""
    norms = torch.linalg.vector_norm(rows, dim=1)
    return rows * torch.clamp(clip / (norms + 1e-12), max=1.0)[:, None], norms


def factored_norms_sq(hs: torch.Tensor, us: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """‖U_iᵀ H_i‖²_F of each client (``hs`` ``[k, r, in]``, ``us`` ``[k, r, out]``) as Σ (U Uᵀ) ∘ (H Hᵀ) in
    float64, and a bound on the rounding error of that value (module docstring); both ``[k]`` float64."""
    h64, u64 = hs.to(torch.float64), us.to(torch.float64)
    sq = (torch.bmm(u64, u64.transpose(1, 2)) * torch.bmm(h64, h64.transpose(1, 2))).sum((1, 2))
    triangle = (torch.linalg.vector_norm(u64, dim=2) * torch.linalg.vector_norm(h64, dim=2)).sum(1)
    r = hs.shape[1]
    err = 2.0 * (r * r + hs.shape[2] + us.shape[2] + 2) * _U64 * triangle.square()
    return sq.clamp(min=0.0), err


def low_rank_clipped_sum(
    model: FunctionalModel,
    out: torch.Tensor,
    params: torch.Tensor,
    fused: tuple[str, ...],
    xb: torch.Tensor,
    yb: torch.Tensor,
    wb: torch.Tensor,
    lr: float,
    clip: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The local steps of :func:`ampfl.fl.engine.low_rank.low_rank_local_sgd` from ``params`` (``[k, d]``,
    or a stride-0 expansion of one ``[d]``), then adds Σ_i c_i (w_i − params_i) to ``out`` (``[d]``), each
    update clipped to L2 norm ``clip`` from its factors (module docstring). Returns the mean losses and the
    update norms ‖w_i − params_i‖ (both ``[k]``, dtype of ``out``)."""
    state = low_rank_steps(model, params, fused, xb, yb, wb, lr)
    k = params.shape[0]
    with torch.no_grad():
        dense = {n: t - state.start[n] for n, t in zip(state.trained, state.tensors, strict=True)}
        factored: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for n in fused:
            factors = state.layers[n].update_factors()
            if factors is None:
                dense[n] = state.layers[n].dense_update()
            else:
                factored[n] = factors
        sq = params.new_zeros(k, dtype=torch.float64)
        for d in dense.values():
            sq += d.reshape(k, -1).to(torch.float64).square().sum(1)
        err = sq * (2.0 * model.dim * _U64)
        for hs, us in factored.values():
            s, e = factored_norms_sq(hs, us)
            sq += s
            err += e
        bound = (sq + err).sqrt() * (1.0 + NORM_MARGIN)
        c = torch.clamp(clip / bound, max=1.0).to(out.dtype)
        views = model.spec.unflatten(out)
        for n, d in dense.items():
            views[n].add_((c @ d.reshape(k, -1)).reshape(views[n].shape))
        for n, (hs, us) in factored.items():
            views[n].addmm_((us * c[:, None, None]).reshape(-1, us.shape[-1]).T, hs.reshape(-1, hs.shape[-1]))
    return state.losses, sq.sqrt().to(out.dtype)
