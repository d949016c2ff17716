"""Clipped per-example gradient sums at one shared weight vector (record-level DP-SGD).

DP-SGD's step needs g = Σ_j clip_C(∇ℓ(w; x_j, y_j)) for the B sampled examples at the **one** current model w.
:func:`clipped_gradient_sum` computes it without B copies of the weights, by one of two paths:

* ``"layers"`` — when every layer with parameters is an ``nn.Linear`` or a plain ``nn.Conv2d`` (no groups,
  zero padding), the model has no buffers and no weight penalty: one batched forward pass records each
  layer's input a and output z (forward hooks), one backward pass gives δ = ∂(Σ_j ℓ_j)/∂z (row j of δ is
  ∂ℓ_j/∂z_j: the examples do not interact). Per example, a linear layer's weight gradient is δ_j a_jᵀ with
  squared norm ‖δ_j‖²‖a_j‖² (never formed), so its clipped sum is one product (f ⊙ δ)ᵀ a with the clip
  factors f; a convolution's is formed (unfolded input, one batched product: small for convolutions) and
  summed with the factors. The same quantities as Opacus's per-sample gradients, without the [B, d] tensor.
  The first call checks the path against ``vmap(grad)`` on a few real examples and keeps to ``vmap`` if
  they differ (a layer used twice, examples that interact): a wrong clip would be a privacy bug.
* ``"vmap"`` — any other model: ``torch.func.vmap(grad(ℓ), in_dims=(None, 0, 0))`` against the one weight
  vector, in chunks of examples that fit ``memory_cap_mb``.

The flat vector is cut into *parts* (``part_of``: one part id per parameter tensor) clipped separately, each
to its own bound (model-split DP-SGD's split and shared parts, 002 §3.2.2); the factor of example j in part p
is min(1, C_p/(‖g_{j,p}‖ + 1e-12)), as :func:`ampfl.fl.engine.clipping.clip_rows`.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.func import vmap
from torch.nn import functional as F

from ampfl.fl.engine.functional_model import FunctionalModel

#: Examples of the first call compared between the two paths (the layers path is used only if they agree).
CHECK_EXAMPLES = 4
#: Relative tolerance of that comparison (float32 rounding of two orders of summation).
CHECK_RTOL = 1e-4

#: Per model: whether the layers path passed its check, and its working memory per example (bytes).
_CHECKED: weakref.WeakKeyDictionary[FunctionalModel, bool] = weakref.WeakKeyDictionary()
_BYTES: weakref.WeakKeyDictionary[FunctionalModel, int] = weakref.WeakKeyDictionary()


@dataclass
class ClippedSum:
    """Output of :func:`clipped_gradient_sum`: Σ_j of the clipped gradients ``[d]``, the per-example losses
    ``[B]`` and the per-example gradient norms of each part ``[B, P]``."""

    total: torch.Tensor
    losses: torch.Tensor
    norms: torch.Tensor


def clipped_gradient_sum(
    model: FunctionalModel,
    flat: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    clips: Sequence[float],
    part_of: Sequence[int] | None = None,
    memory_cap_mb: float = 1024.0,
    path: str = "auto",
    device: str | None = None,
) -> ClippedSum:
    """Σ_j clip(∇ℓ(w; x_j, y_j)) with each part of the gradient clipped to its bound (module docstring).

    Args:
        model: the functional model; ``flat`` its parameters ``[d]`` (one model, shared by the examples).
        x, y: the examples ``[B, *input_shape]`` and labels ``[B]``.
        clips: the bound C_p of each part p (positive).
        part_of: the part of each parameter tensor (``model.spec.names`` order); default all in part 0.
        memory_cap_mb: rough working memory of one chunk of examples.
        path: ``"auto"`` (layers when supported and checked, else vmap), ``"layers"`` or ``"vmap"``.
        device: compute on this (resolved) device (``Engine.device``): the model's copy
            (:func:`ampfl.fl.engine.device.model_on`), ``flat`` and the examples move there and the result
            comes back to ``flat``'s device; None computes where ``flat`` is.
    """
    spec = model.spec
    parts = [0] * len(spec.names) if part_of is None else [int(p) for p in part_of]
    if len(parts) != len(spec.names) or min(parts, default=0) < 0 or max(parts, default=0) >= len(clips):
        raise ValueError(f"part_of must give one part in [0, {len(clips)}) per parameter tensor.")
    if not all(c > 0 for c in clips):
        raise ValueError(f"clips must be > 0. Found {list(clips)}.")
    if path not in ("auto", "layers", "vmap"):
        raise ValueError(f"path must be 'auto', 'layers' or 'vmap'. Found {path!r}.")
    home = flat.device
    if device is not None and torch.device(device) != home:
        from ampfl.fl.engine.device import model_on

        model, flat, x, y = model_on(model, device), flat.to(device), x.to(device), y.to(device)
    flat = flat.detach()
    use_layers = path == "layers" or (path == "auto" and _layers_path_ok(model, flat, x, y))
    if use_layers and _layers_of(model) is None:
        raise ValueError("path 'layers' needs a model whose layers with parameters are Linear/Conv2d.")
    clip_t = torch.tensor([float(c) for c in clips], dtype=flat.dtype, device=flat.device)
    part_t = torch.tensor(parts, dtype=torch.int64, device=flat.device)
    per_example = _layers_bytes(model) if use_layers else 4 * (3 * model.dim + 4 * model.activation_numel)
    size = max(1, int(memory_cap_mb * 2**20 // max(1, per_example)))
    total = torch.zeros_like(flat)
    losses, norms = [], []
    for lo in range(0, x.shape[0], size):
        xs, ys = x[lo : lo + size], y[lo : lo + size]
        run = _layers_chunk if use_layers else _vmap_chunk
        t, l_, n = run(model, flat, xs, ys, clip_t, part_t)
        total += t
        losses.append(l_)
        norms.append(n)
    if not losses:
        return ClippedSum(
            total.to(home), flat.new_zeros(0, device=home), flat.new_zeros(0, len(clips), device=home)
        )
    return ClippedSum(total.to(home), torch.cat(losses).to(home), torch.cat(norms).to(home))


def layers_path_checked(model: FunctionalModel) -> bool | None:
    """Whether the layers path passed its check for ``model`` (None: not decided yet)."""
    return _CHECKED.get(model)


def per_example_gradients(
    model: FunctionalModel, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[B, d]`` gradients ∇ℓ(w; x_j, y_j) and losses ``[B]`` by ``vmap(grad)`` at the shared ``flat``."""
    fn = vmap(model.flat_grad_and_value(per_example=True), in_dims=(None, 0, 0))
    g, losses = fn(flat.detach(), x, y)
    return g.detach(), losses.detach()


def _factors(norms_sq: torch.Tensor, clip_t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-example norms ``[B, P]`` of the parts (from their squared norms) and clip factors ``[B, P]``."""
    norms = norms_sq.clamp(min=0.0).sqrt()
    return norms, torch.clamp(clip_t / (norms + 1e-12), max=1.0)


def _vmap_chunk(
    model: FunctionalModel,
    flat: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    clip_t: torch.Tensor,
    part_t: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g, losses = per_example_gradients(model, flat, x, y)
    spec = model.spec
    n_parts = clip_t.numel()
    if n_parts == 1:
        norms, f = _factors(g.square().sum(1, keepdim=True), clip_t)
        return f[:, 0] @ g, losses, norms
    sizes = torch.tensor(spec.sizes(), dtype=torch.int64, device=part_t.device)
    coord_part = part_t.repeat_interleave(sizes)
    onehot = F.one_hot(coord_part, n_parts).to(g.dtype)  # [d, P]
    norms, f = _factors(g.square() @ onehot, clip_t)
    total = ((f @ onehot.T) * g).sum(0)
    return total, losses, norms


# -- the layers path -------------------------------------------------------------------------------------
_LAYERS: weakref.WeakKeyDictionary[FunctionalModel, list[tuple[str, nn.Module]] | None] = (
    weakref.WeakKeyDictionary()
)


def _layers_of(model: FunctionalModel) -> list[tuple[str, nn.Module]] | None:
    """``(prefix, layer)`` of every module holding parameters when the layers path supports the model."""
    if model not in _LAYERS:
        _LAYERS[model] = _find_layers(model)
    return _LAYERS[model]


def _find_layers(model: FunctionalModel) -> list[tuple[str, nn.Module]] | None:
    module = model.module
    if next(module.buffers(), None) is not None:
        return None
    layers = []
    for prefix, m in module.named_modules():
        own = [n for n, _ in m.named_parameters(recurse=False)]
        if not own:
            continue
        if type(m) is nn.Conv2d:
            if m.groups != 1 or m.padding_mode != "zeros" or isinstance(m.padding, str):
                return None
        elif type(m) is not nn.Linear:
            return None
        if not set(own) <= {"weight", "bias"}:
            return None
        layers.append((prefix, m))
    names = {_name(p, n) for p, m in layers for n, _ in m.named_parameters(recurse=False)}
    if not layers or names != set(model.spec.names):
        return None
    probe = {n: t.detach().requires_grad_(True) for n, t in model.spec.unflatten(model.initial()).items()}
    return None if module.penalty(probe).requires_grad else layers


def _name(prefix: str, leaf: str) -> str:
    return f"{prefix}.{leaf}" if prefix else leaf


def _layers_path_ok(model: FunctionalModel, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether the layers path supports the model and agrees with ``vmap(grad)`` on the first examples of
    the first call with at least two (a single example cannot reveal examples that interact)."""
    cached = _CHECKED.get(model)
    if cached is not None:
        return cached
    if _layers_of(model) is None:
        _CHECKED[model] = False
        return False
    if x.shape[0] < 2:
        return False  # this call through vmap; check on a later one
    xs, ys = x[:CHECK_EXAMPLES], y[:CHECK_EXAMPLES]
    want, _ = per_example_gradients(model, flat, xs, ys)
    try:
        got = _stack(_layer_gradients(model, flat, xs, ys)[0], model.spec.names)
    except RuntimeError:  # a layer ran twice or not at all
        _CHECKED[model] = False
        return False
    scale = float(want.abs().max()) + 1e-30
    _CHECKED[model] = bool(float((got - want).abs().max()) <= CHECK_RTOL * scale)
    return _CHECKED[model]


@dataclass
class _Layer:
    """One layer's per-example gradients: factored (a linear layer on [B, in] inputs: ``g`` is δ ``[B, out]``,
    the weight gradient of example j is δ_j a_jᵀ) or formed (``g`` ``[B, out, n]``); ``gb`` the bias's
    ``[B, out]``."""

    weight: str
    bias: str | None
    shape: tuple[int, ...]
    a: torch.Tensor | None
    g: torch.Tensor
    gb: torch.Tensor

    def weight_norms_sq(self) -> torch.Tensor:
        if self.a is not None:
            return self.g.square().sum(1) * self.a.square().sum(1)
        return self.g.square().sum((1, 2))

    def weight_sum(self, f: torch.Tensor) -> torch.Tensor:
        """Σ_j f_j ∇_W ℓ_j in the weight's shape."""
        if self.a is not None:
            return ((self.g * f[:, None]).T @ self.a).reshape(self.shape)
        return torch.einsum("b,boi->oi", f, self.g).reshape(self.shape)

    def weights(self) -> torch.Tensor:
        """``[B, out·in]`` per-example weight gradients (materialised)."""
        g = self.g if self.a is None else torch.einsum("bo,bi->boi", self.g, self.a)
        return g.reshape(g.shape[0], -1)


def _layer_gradients(
    model: FunctionalModel, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor
) -> tuple[list[_Layer], torch.Tensor]:
    """One batched forward pass recording each layer's input a and output z (forward hooks), one backward
    pass for δ = ∂(Σ_j ℓ_j)/∂z; returns the layers' per-example gradients and the losses ``[B]``."""
    layers = _layers_of(model)
    assert layers is not None
    prefix = {id(m): p for p, m in layers}
    seen: list[tuple[nn.Module, torch.Tensor, torch.Tensor]] = []

    def record(m: nn.Module, inputs: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        seen.append((m, inputs[0].detach(), out))

    handles = [m.register_forward_hook(record) for _, m in layers]
    try:
        named = model.spec.unflatten(flat.detach().clone())
        params = {n: t.requires_grad_(True) for n, t in named.items()}
        with torch.enable_grad():
            losses = model.named_example_losses(params, x, y)
            if len(seen) != len(layers) or len({id(m) for m, _, _ in seen}) != len(layers):
                raise RuntimeError("a layer ran more than once or not at all")
            deltas = torch.autograd.grad(losses.sum(), [z for _, _, z in seen])
    finally:
        for h in handles:
            h.remove()
    out = []
    b = x.shape[0]
    for (m, a, _), d in zip(seen, deltas, strict=True):
        p = prefix[id(m)]
        bias = _name(p, "bias") if getattr(m, "bias", None) is not None else None
        shape = tuple(params[_name(p, "weight")].shape)
        if isinstance(m, nn.Conv2d):
            pad = m.padding
            assert not isinstance(pad, str)
            cols = F.unfold(a, m.kernel_size, dilation=m.dilation, padding=pad, stride=m.stride)
            dz = d.reshape(b, d.shape[1], -1)
            out.append(
                _Layer(_name(p, "weight"), bias, shape, None, torch.bmm(dz, cols.transpose(1, 2)), dz.sum(2))
            )
        elif a.dim() == 2:
            out.append(_Layer(_name(p, "weight"), bias, shape, a, d, d))
        else:  # a linear layer on [B, ..., in]: the sum over the positions
            a3, d3 = a.reshape(b, -1, a.shape[-1]), d.reshape(b, -1, d.shape[-1])
            out.append(
                _Layer(_name(p, "weight"), bias, shape, None, torch.bmm(d3.transpose(1, 2), a3), d3.sum(1))
            )
    return out, losses.detach()


def _stack(layers: list[_Layer], names: Sequence[str]) -> torch.Tensor:
    """``[B, d]`` per-example gradients in the flat order of ``names`` (the first call's check only)."""
    grads: dict[str, torch.Tensor] = {}
    for layer in layers:
        grads[layer.weight] = layer.weights()
        if layer.bias is not None:
            grads[layer.bias] = layer.gb
    return torch.cat([grads[n] for n in names], dim=1)


def _layers_chunk(
    model: FunctionalModel,
    flat: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    clip_t: torch.Tensor,
    part_t: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    names = model.spec.names
    part = {n: int(part_t[i]) for i, n in enumerate(names)}
    layers, losses = _layer_gradients(model, flat, x, y)
    sq = torch.zeros(x.shape[0], clip_t.numel(), dtype=flat.dtype, device=flat.device)
    for layer in layers:
        sq[:, part[layer.weight]] += layer.weight_norms_sq()
        if layer.bias is not None:
            sq[:, part[layer.bias]] += layer.gb.square().sum(1)
    norms, f = _factors(sq, clip_t)
    sums: dict[str, torch.Tensor] = {}
    for layer in layers:
        sums[layer.weight] = layer.weight_sum(f[:, part[layer.weight]])
        if layer.bias is not None:
            sums[layer.bias] = f[:, part[layer.bias]] @ layer.gb
    return torch.cat([sums[n].reshape(-1) for n in names]), losses, norms


def _layers_bytes(model: FunctionalModel) -> int:
    """Rough working memory of one example on the layers path (activations, unfolded inputs, gradients of
    the convolutions), measured once on one zero input."""
    cached = _BYTES.get(model)
    if cached is not None:
        return cached
    flat = model.initial()  # on the device of the model's module (ampfl.fl.engine.device.model_on)
    x = torch.zeros(1, *model.input_shape, device=flat.device)
    y = torch.zeros(1, dtype=torch.int64, device=flat.device)
    layers, _ = _layer_gradients(model, flat, x, y)
    numel = sum(t.numel() for layer in layers for t in (layer.a, layer.g, layer.gb) if t is not None)
    size = 4 * (math.prod(model.input_shape) + 3 * numel + 4 * model.activation_numel)
    _BYTES[model] = size
    return size
