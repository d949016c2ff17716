"""ClientStore: lazy creation, growth, round trip and the memory of 10^6 registered clients."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ampfl.fl.state import ClientStore


def test_lazy_default_and_writes() -> None:
    store = ClientStore(10, torch.tensor([1.0, 2.0]), initial_capacity=1)
    assert len(store) == 0
    assert torch.equal(store.get([3, 7]), torch.tensor([[1.0, 2.0], [1.0, 2.0]]))
    assert len(store) == 0  # reading does not create rows
    store.set([7, 2, 5], torch.tensor([[7.0, 7.0], [2.0, 2.0], [5.0, 5.0]]))  # grows 1 -> 4
    store.set([2], torch.tensor([[20.0, 20.0]]))
    assert len(store) == 3 and 7 in store and 3 not in store
    assert store.touched().tolist() == [2, 5, 7]
    assert torch.equal(store.get([2, 3, 7]), torch.tensor([[20.0, 20.0], [1.0, 2.0], [7.0, 7.0]]))
    got = store.get([2])
    got += 100.0  # a copy: the store is unchanged
    assert torch.equal(store.get([2]), torch.tensor([[20.0, 20.0]]))


def test_state_round_trip() -> None:
    store = ClientStore(100, torch.zeros(3))
    store.set(np.array([99, 0]), torch.randn(2, 3, generator=torch.Generator().manual_seed(0)))
    other = ClientStore(100, torch.ones(3))
    other.load_state_dict(store.state_dict())
    assert torch.equal(other.get(np.arange(100)), store.get(np.arange(100)))
    assert other.touched().tolist() == [0, 99]


def test_errors() -> None:
    store = ClientStore(5, torch.zeros(2))
    with pytest.raises(ValueError, match="client ids"):
        store.get([5])
    with pytest.raises(ValueError, match="shape"):
        store.set([1], torch.zeros(1, 3))
    with pytest.raises(ValueError, match="repeat"):
        store.set([1, 1], torch.zeros(2, 2))


def test_million_clients_fit_in_little_memory() -> None:
    # 10^6 registered clients with a 7-coordinate private part (half of 000's Adult logreg): only touched rows
    # are stored, so 10^5 touched clients cost about 4 MB (id map) + 2^17 rows x 28 bytes.
    store = ClientStore(10**6, torch.zeros(7))
    assert store.nbytes() < 5 * 2**20
    ids = np.arange(0, 10**6, 10)
    store.set(ids, torch.ones(len(ids), 7))
    assert len(store) == 10**5
    assert store.nbytes() < 10 * 2**20
    assert float(store.get([10, 11]).sum()) == 7.0


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.integers(0, 29), unique=True, min_size=1, max_size=6), max_size=12))
def test_store_matches_a_dict_model(writes: list[list[int]]) -> None:
    store = ClientStore(30, torch.full((2,), -1.0), initial_capacity=1)
    model: dict[int, list[float]] = {}
    for step, ids in enumerate(writes):
        values = torch.tensor([[float(step), float(i)] for i in ids])
        store.set(ids, values)
        model.update({i: [float(step), float(i)] for i in ids})
    expected = torch.tensor([model.get(i, [-1.0, -1.0]) for i in range(30)])
    assert torch.equal(store.get(np.arange(30)), expected)
    assert len(store) == len(model) and store.touched().tolist() == sorted(model)
