"""The flat parameter vector of a model and named partitions of it.

The simulator keeps every model as one flat float32 vector w ∈ R^d (stacked as ``[num_clients, d]`` for a
cohort). :class:`ParamSpec` maps the vector to the module's named tensors (in ``named_parameters()`` order)
and back. :class:`ParamPartition` splits the vector into two named parts, e.g. MS-PAFL's private w_α and
public w_p (000 Sec. III-B: w_i = (w_{i,α}, w_{i,p}), d_α + d_p = d), or model-split DP-SGD's trained and
frozen parts. A partition is built from layer names, from index slices, or from a fraction of the flat vector.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class ParamSpec:
    """Names, shapes and offsets of a module's parameters in the flat vector.

    Attributes:
        names: parameter names in ``named_parameters()`` order.
        shapes: their shapes.
        offsets: start of each parameter in the flat vector.
        dim: total size d.
    """

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    offsets: tuple[int, ...]
    dim: int

    @classmethod
    def from_module(cls, module: nn.Module) -> ParamSpec:
        """The spec of ``module``'s trainable parameters."""
        names, shapes, offsets = [], [], []
        offset = 0
        for name, p in module.named_parameters():
            names.append(name)
            shapes.append(tuple(p.shape))
            offsets.append(offset)
            offset += math.prod(p.shape)
        return cls(tuple(names), tuple(shapes), tuple(offsets), offset)

    def sizes(self) -> tuple[int, ...]:
        """Number of scalars of each parameter."""
        return tuple(math.prod(s) for s in self.shapes)

    def flatten(self, module: nn.Module) -> torch.Tensor:
        """The module's parameters as one detached flat float32 vector."""
        return torch.cat([p.detach().reshape(-1).to(torch.float32) for _, p in module.named_parameters()])

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Views of a flat vector (last dimension d) as the named parameter tensors (leading dims kept)."""
        lead = tuple(flat.shape[:-1])
        return {
            name: flat[..., off : off + n].reshape(*lead, *shape)
            for name, shape, off, n in zip(self.names, self.shapes, self.offsets, self.sizes(), strict=True)
        }

    def slice_of(self, name: str) -> slice:
        """The slice of the flat vector holding parameter ``name``."""
        if name not in self.names:
            raise ValueError(
                f"name must be one of the model's parameters {list(self.names)}. Found {name!r}."
            )
        i = self.names.index(name)
        return slice(self.offsets[i], self.offsets[i] + self.sizes()[i])


class ParamPartition:
    """A split of the flat parameter vector into two named, disjoint, covering parts.

    Args:
        dim: size d of the flat vector.
        first: flat indices of the first part (e.g. "private"); the second part is the complement.
        names: names of the two parts (default ``("private", "public")``).

    ``split(w)`` returns ``{names[0]: w[..., first], names[1]: w[..., second]}`` and ``merge`` inverts it;
    both keep leading (client) dimensions.
    """

    def __init__(
        self, dim: int, first: torch.Tensor | Sequence[int], *, names: tuple[str, str] = ("private", "public")
    ):
        if dim < 1:
            raise ValueError(f"dim must be >= 1. Found {dim}.")
        if len(names) != 2 or names[0] == names[1]:
            raise ValueError(f"names must be two different part names. Found {names!r}.")
        idx = torch.as_tensor(first, dtype=torch.int64).reshape(-1)
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= dim):
            raise ValueError(f"indices of the first part must lie in [0, {dim - 1}].")
        mask = torch.zeros(dim, dtype=torch.bool)
        mask[idx] = True
        if int(mask.sum()) != idx.numel():
            raise ValueError("indices of the first part must not repeat.")
        self.dim = dim
        self.names = names
        self.mask = mask  # True on the first part
        self.indices = {names[0]: torch.nonzero(mask).reshape(-1), names[1]: torch.nonzero(~mask).reshape(-1)}

    # -- constructors ---------------------------------------------------------------------------------
    @classmethod
    def by_fraction(
        cls, dim: int, fraction: float, *, names: tuple[str, str] = ("private", "public")
    ) -> ParamPartition:
        """The first ``round(fraction·d)`` coordinates form the first part.

        000 Sec. V-A: "the first half of the parameter w_{i,α} is retained locally as the private submodel"
        (d_α = d_p = 0.5 → ``fraction=0.5``).
        """
        if not (0.0 <= fraction <= 1.0):
            raise ValueError(f"fraction must be in [0, 1]. Found {fraction}.")
        return cls(dim, torch.arange(round(fraction * dim)), names=names)

    @classmethod
    def by_slices(
        cls,
        dim: int,
        slices: Iterable[slice | tuple[int, int]],
        *,
        names: tuple[str, str] = ("private", "public"),
    ) -> ParamPartition:
        """The union of ``slices`` (``slice`` objects or ``(start, stop)`` pairs) forms the first part."""
        parts = []
        for s in slices:
            sl = s if isinstance(s, slice) else slice(int(s[0]), int(s[1]))
            parts.append(torch.arange(dim)[sl])
        idx = torch.unique(torch.cat(parts)) if parts else torch.zeros(0, dtype=torch.int64)
        return cls(dim, idx, names=names)

    @classmethod
    def by_layers(
        cls, spec: ParamSpec, layers: Iterable[str], *, names: tuple[str, str] = ("private", "public")
    ) -> ParamPartition:
        """Parameters named ``layer`` or ``layer.<suffix>`` for some ``layer`` in ``layers`` form part 1."""
        chosen = list(layers)
        slices = []
        for name in spec.names:
            if any(name == layer or name.startswith(layer + ".") for layer in chosen):
                slices.append(spec.slice_of(name))
        unused = [
            layer for layer in chosen if not any(n == layer or n.startswith(layer + ".") for n in spec.names)
        ]
        if unused:
            raise ValueError(f"layers must name parameters of the model {list(spec.names)}. Found {unused}.")
        return cls.by_slices(spec.dim, slices, names=names)

    # -- use ------------------------------------------------------------------------------------------
    def size(self, name: str) -> int:
        """Number of coordinates of part ``name``."""
        return int(self.indices[self._check(name)].numel())

    def part(self, flat: torch.Tensor, name: str) -> torch.Tensor:
        """Coordinates of part ``name`` of ``flat`` (leading dimensions kept)."""
        return flat[..., self.indices[self._check(name)]]

    def split(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Both parts of ``flat``."""
        return {name: self.part(flat, name) for name in self.names}

    def merge(self, parts: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Inverse of :meth:`split` (the parts must have matching leading dimensions)."""
        a, b = (parts[self.names[0]], parts[self.names[1]])
        out = a.new_empty(*a.shape[:-1], self.dim)
        out[..., self.indices[self.names[0]]] = a
        out[..., self.indices[self.names[1]]] = b
        return out

    def replace(self, flat: torch.Tensor, name: str, values: torch.Tensor) -> torch.Tensor:
        """A copy of ``flat`` whose part ``name`` is set to ``values`` (broadcast over leading dimensions)."""
        out = flat.clone()
        out[..., self.indices[self._check(name)]] = values
        return out

    def _check(self, name: str) -> str:
        if name not in self.names:
            raise ValueError(f"part must be one of {list(self.names)}. Found {name!r}.")
        return name
