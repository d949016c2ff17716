"""Evaluation of one global model without ``vmap`` (issue 17: an evaluation every round costs little): the
outputs, hence every accuracy, are bit for bit those of the batched path, for the models that take it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.func import vmap

from ampfl.fl.engine.vectorised import Engine, FunctionalModel
from ampfl.fl.models import build_model


@pytest.mark.parametrize(
    ("name", "shape", "direct"), [("logreg", (64,), True), ("mlp", (64,), True), ("cnn", (1, 28, 28), False)]
)
def test_direct_outputs_equal_the_batched_ones(name: str, shape: tuple[int, ...], direct: bool) -> None:
    torch.manual_seed(0)
    model = FunctionalModel(build_model(name, input_shape=shape, num_classes=10), shape)
    assert model.exact_without_vmap is direct
    x = torch.randn(300, *shape)
    base = model.initial()
    for seed in range(5 if direct else 1):
        params = base + 0.5 * torch.randn(base.shape, generator=torch.Generator().manual_seed(seed))
        batched = vmap(model.outputs, in_dims=(0, None))(params[None], x)[0]
        if direct:
            assert torch.equal(model.outputs(params, x), batched)


@pytest.mark.parametrize(
    ("name", "classes", "batch"), [("mlp", 4, 4096), ("logreg", 10, 128), ("logreg", 2, 77)]
)
def test_class_accuracy_of_one_model_equals_its_row_among_several(
    name: str, classes: int, batch: int
) -> None:
    """One model's counts (no vmap, hits counted in NumPy) equal its row of the batched path, also when the
    test set spans several batches and for a binary model (one output, prediction by sign)."""
    torch.manual_seed(1)
    model = FunctionalModel(build_model(name, input_shape=(20,), num_classes=classes), (20,))
    x, y = torch.randn(500, 20), torch.from_numpy(np.random.default_rng(0).integers(0, classes, 500))
    stacked = torch.stack([model.initial() + 0.3 * torch.randn(model.dim) for _ in range(3)])
    engine = Engine()
    together = engine.class_accuracy(model, stacked, x, y, classes)
    assert together.min() < together.max()  # the models score differently: the comparison can fail
    for k in range(3):
        alone = engine.class_accuracy(model, stacked[k : k + 1], x, y, classes)
        assert torch.equal(alone, together[k : k + 1])
        one, counted = engine._class_counts(model, stacked[k : k + 1], x, y, classes, batch)
        many, counted_many = engine._class_counts(model, stacked, x, y, classes, batch)
        assert torch.equal(one, many[k : k + 1]) and torch.equal(counted, counted_many)
        assert one.dtype == counted.dtype == torch.float64
