"""Evaluation of one global model without ``vmap`` (issue 17: an evaluation every round costs little): the
outputs, hence every accuracy, are bit for bit those of the batched path, for the models that take it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.func import vmap

from ampfl.fl.engine import Engine, FunctionalModel
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


def test_class_accuracy_of_one_model_equals_its_row_among_several() -> None:
    torch.manual_seed(1)
    model = FunctionalModel(build_model("mlp", input_shape=(20,), num_classes=4), (20,))
    x, y = torch.randn(500, 20), torch.from_numpy(np.random.default_rng(0).integers(0, 4, 500))
    stacked = torch.stack([model.initial() + 0.3 * torch.randn(model.dim) for _ in range(3)])
    engine = Engine()
    together = engine.class_accuracy(model, stacked, x, y, 4)
    for k in range(3):
        assert torch.equal(engine.class_accuracy(model, stacked[k : k + 1], x, y, 4), together[k : k + 1])
