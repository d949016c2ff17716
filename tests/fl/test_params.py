"""Flat parameter vectors and their named partitions."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ampfl.fl.models import build_model
from ampfl.fl.params import ParamPartition, ParamSpec


def test_spec_round_trip() -> None:
    m = build_model("mlp", input_shape=(4,), num_classes=3, hidden=(5,))
    spec = ParamSpec.from_module(m)
    assert spec.names == ("net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias")
    assert spec.dim == 4 * 5 + 5 + 5 * 3 + 3
    flat = spec.flatten(m)
    named = spec.unflatten(flat)
    for name, p in m.named_parameters():
        assert torch.equal(named[name], p.detach())
    stacked = spec.unflatten(torch.stack([flat, 2 * flat]))
    assert stacked["net.2.weight"].shape == (2, 3, 5)
    assert spec.slice_of("net.0.bias") == slice(20, 25)


def test_fraction_partition_first_half_private() -> None:
    part = ParamPartition.by_fraction(6, 0.5)  # 000 Sec. V-A: first half private
    w = torch.arange(6.0)
    parts = part.split(w)
    assert parts["private"].tolist() == [0.0, 1.0, 2.0] and parts["public"].tolist() == [3.0, 4.0, 5.0]
    assert torch.equal(part.merge(parts), w)
    batch = torch.stack([w, -w])
    assert torch.equal(part.merge(part.split(batch)), batch)
    assert torch.equal(part.replace(w, "public", torch.zeros(3)), torch.tensor([0.0, 1, 2, 0, 0, 0]))


def test_layer_and_slice_partitions() -> None:
    m = build_model("mlp", input_shape=(4,), num_classes=3, hidden=(5,))
    spec = ParamSpec.from_module(m)
    part = ParamPartition.by_layers(spec, ["net.2"], names=("split", "shared"))
    assert part.size("split") == 5 * 3 + 3 and part.size("shared") == 25
    assert part.indices["split"].tolist() == list(range(25, 43))
    by_slice = ParamPartition.by_slices(spec.dim, [(25, 43)], names=("split", "shared"))
    assert torch.equal(by_slice.mask, part.mask)
    with pytest.raises(ValueError, match="layers must name"):
        ParamPartition.by_layers(spec, ["conv1"])
    with pytest.raises(ValueError, match="part must be one of"):
        part.part(torch.zeros(spec.dim), "private")
    with pytest.raises(ValueError, match="fraction"):
        ParamPartition.by_fraction(4, 1.5)
    with pytest.raises(ValueError, match="repeat"):
        ParamPartition(4, [1, 1])


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 40), st.data())
def test_split_merge_round_trip_property(dim: int, data: st.DataObject) -> None:
    first = data.draw(st.lists(st.integers(0, dim - 1), unique=True, max_size=dim))
    part = ParamPartition(dim, first)
    w = torch.randn(3, dim, generator=torch.Generator().manual_seed(dim))
    parts = part.split(w)
    assert parts["private"].shape == (3, len(first)) and parts["public"].shape == (3, dim - len(first))
    assert torch.equal(part.merge(parts), w)
    assert sorted(first) == part.indices["private"].tolist()
