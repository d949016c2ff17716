"""A model as a pure function of one flat parameter vector (what the engine vmaps over clients).

:class:`FunctionalModel` wraps an :class:`~ampfl.fl.models.base.FLModel` with its
:class:`~ampfl.fl.params.ParamSpec`: outputs, per-example losses (plain, named, or the model's stacked fast
path) and gradients of ``[d]`` parameter vectors via ``torch.func.functional_call``. Re-exported by
:mod:`ampfl.fl.engine.vectorised`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

import torch
from torch.func import functional_call, grad_and_value, vmap

from ampfl.fl.models.base import FLModel
from ampfl.fl.params import ParamSpec


class FunctionalModel:
    """A model as pure functions of its flat parameter vector (the engine's view of an :class:`FLModel`)."""

    def __init__(self, module: FLModel, input_shape: tuple[int, ...]) -> None:
        self.module = module
        self.spec = ParamSpec.from_module(module)
        self.input_shape = tuple(input_shape)
        self.activation_numel = self._probe_activations()
        self._slots: tuple[torch.nn.Module, tuple[tuple[torch.nn.Module, str, int], ...]] | None = None

    @property
    def dim(self) -> int:
        """Number of parameters d."""
        return self.spec.dim

    def initial(self) -> torch.Tensor:
        """The module's current parameters as a flat vector (the initial model)."""
        return self.spec.flatten(self.module)

    def outputs(self, flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Model outputs for a batch ``x`` with parameters ``flat`` ([d])."""
        out: torch.Tensor = functional_call(self.module, self.spec.unflatten(flat), (x,))
        return out

    def direct_outputs(self, flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """:meth:`outputs` without ``functional_call``'s per-call set-up (tie checks, pytrees, accessors:
        about 60 µs, as much as a small model's forward pass): the module's parameters are swapped for the
        views of ``flat`` that ``functional_call`` passes (:meth:`ParamSpec.unflatten`) for one forward call,
        then put back, so the same tensors enter the same forward: the same numbers, bit for bit. Like
        ``functional_call`` it changes the module while it runs (one call at a time per module)."""
        slots = self._parameter_slots()
        views = list(self.spec.unflatten(flat).values())
        kept = [owner._parameters[name] for owner, name, _ in slots]
        try:
            for owner, name, i in slots:
                owner._parameters[name] = views[i]  # type: ignore[assignment]
            out: torch.Tensor = self.module(x)
        finally:
            for (owner, name, _), original in zip(slots, kept, strict=True):
                owner._parameters[name] = original
        return out

    def _parameter_slots(self) -> tuple[tuple[torch.nn.Module, str, int], ...]:
        """``(owner, attribute, index in spec.names)`` of every parameter of :attr:`module`, once per owner
        and attribute (a tied parameter is set everywhere it occurs, as ``functional_call`` does); cached
        per module (a copy of this object on another device has its own module)."""
        if self._slots is not None and self._slots[0] is self.module:
            return self._slots[1]
        index = {id(p): i for i, (_, p) in enumerate(self.module.named_parameters())}
        slots: dict[tuple[int, str], tuple[torch.nn.Module, str, int]] = {}
        for _, owner in self.module.named_modules(remove_duplicate=False):
            for name, p in owner._parameters.items():
                if p is not None:
                    slots.setdefault((id(owner), name), (owner, name, index[id(p)]))
        self._slots = (self.module, tuple(slots.values()))
        return self._slots[1]

    def example_losses(self, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """ℓ(w; x_j, y_j) + R(w) for each example of a batch, shape ``[b]``."""
        return self.named_example_losses(self.spec.unflatten(flat), x, y)

    def named_example_losses(
        self, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor:
        """As :meth:`example_losses`, with the parameters as named tensors."""
        out = functional_call(self.module, params, (x,))
        return self.module.per_sample_loss(out, y) + self.module.penalty(params)

    @cached_property
    def exact_without_vmap(self) -> bool:
        """Whether one model's outputs computed directly equal, bit for bit, those of ``vmap`` over a batch
        of one: every layer with parameters is ``nn.Linear`` (the same matmul kernel; checked by
        tests/fl/test_engine_eval.py), not a convolution (under ``vmap`` a grouped convolution)."""
        layers = [m for m in self.module.modules() if next(m.parameters(recurse=False), None) is not None]
        return bool(layers) and all(type(m) is torch.nn.Linear for m in layers)

    @property
    def has_stacked_forward(self) -> bool:
        """Whether the module has its own forward pass for stacked parameters (``forward_stacked``)."""
        return callable(getattr(self.module, "forward_stacked", None))

    @property
    def fused_linear_names(self) -> tuple[str, ...]:
        """Weights of stacked linear layers whose product z = h Wᵀ ``forward_stacked`` lets the caller
        compute (``linears``), so that the engine can keep them in low-rank form
        (ampfl.fl.engine.low_rank)."""
        return tuple(getattr(self.module, "fused_linear_weights", ()))

    def stacked_example_losses(
        self,
        params: dict[str, torch.Tensor],
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        linears: dict[str, Callable[[torch.Tensor], torch.Tensor]] | None = None,
    ) -> torch.Tensor:
        """``[k, b]`` losses ℓ(w_i; x_ij, y_ij) + R(w_i) of k clients with stacked named parameters
        (``[k, *shape]``) through the module's ``forward_stacked`` (no ``vmap`` of the forward pass);
        equals ``vmap(named_example_losses)(params, x, y)`` up to float rounding. ``linears`` (optional): for
        layers in :attr:`fused_linear_names`, a function ``h -> h Wᵀ`` used instead of ``params``."""
        forward_stacked: Callable[..., torch.Tensor] = getattr(self.module, "forward_stacked")  # noqa: B009
        out = forward_stacked(params, x) if linears is None else forward_stacked(params, x, linears=linears)
        k, b = out.shape[0], out.shape[1]
        losses = self.module.per_sample_loss(out.reshape(k * b, *out.shape[2:]), y.reshape(k * b))
        stacked = getattr(self.module, "penalty_stacked", None)
        penalty = stacked(params) if stacked is not None else None
        if penalty is None:
            penalty = vmap(self.module.penalty)(params)
        return losses.reshape(k, b) + penalty.reshape(k, 1)

    def weighted_loss(
        self, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor
    ) -> torch.Tensor:
        """Σ_j w_j (ℓ_j + R) for one client's batch."""
        return (self.example_losses(flat, x, y) * w).sum()

    def one_example_loss(self, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """ℓ(w; x, y) + R(w) for a single example (no batch dimension)."""
        return self.example_losses(flat, x.unsqueeze(0), y.unsqueeze(0))[0]

    def flat_grad_and_value(self, per_example: bool) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
        """``(flat, x, y[, w]) -> (flat gradient, loss)``: the gradient is taken w.r.t. the named tensors and
        concatenated, which avoids back-propagating through slices of the flat vector (a d-sized add per
        parameter tensor)."""
        spec = self.spec

        def batch_loss(
            params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, w: torch.Tensor
        ) -> torch.Tensor:
            return (self.named_example_losses(params, x, y) * w).sum()

        def example_loss(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return self.named_example_losses(params, x.unsqueeze(0), y.unsqueeze(0))[0]

        inner = grad_and_value(example_loss if per_example else batch_loss)

        def fn(flat: torch.Tensor, *args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            g, value = inner(spec.unflatten(flat), *args)
            return torch.cat([g[name].reshape(-1) for name in spec.names]), value

        return fn

    def _probe_activations(self) -> int:
        sizes: list[int] = []
        hooks = [
            m.register_forward_hook(lambda _m, _i, o: sizes.append(o.numel() if torch.is_tensor(o) else 0))
            for m in self.module.modules()
            if not list(m.children())
        ]
        try:
            with torch.no_grad():
                self.module(torch.zeros(1, *self.input_shape))
        finally:
            for h in hooks:
                h.remove()
        return max(1, sum(sizes))
