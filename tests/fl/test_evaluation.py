"""The evaluation of one model on the CPU (ampfl.fl.engine.evaluation, issue 32): its direct forward pass and
NumPy counts give bit for bit the numbers of the batched path, and leave the module as it was."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from ampfl.fl.engine.vectorised import Engine, Evaluator, FunctionalModel
from ampfl.fl.models import build_model
from ampfl.fl.models.base import FLModel


class _Tied(FLModel):
    """Two linear layers sharing one weight (a tied parameter occurs twice in the module)."""

    def __init__(self) -> None:
        super().__init__()
        self.num_classes = 6
        self.first = nn.Linear(6, 6)
        self.second = nn.Linear(6, 6, bias=False)
        self.second.weight = self.first.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.second(torch.relu(self.first(x)))
        return out


@pytest.mark.parametrize(
    ("name", "classes"), [("logreg", 10), ("logreg", 2), ("mlp", 4), ("tied", 6)], ids=str
)
def test_direct_outputs_equal_functional_call_and_restore_the_module(name: str, classes: int) -> None:
    torch.manual_seed(0)
    module = _Tied() if name == "tied" else build_model(name, input_shape=(6,), num_classes=classes)
    model = FunctionalModel(module, (6,))
    before = {n: p for n, p in module.named_parameters(remove_duplicate=False)}
    x = torch.randn(200, 6)
    for seed in range(3):
        flat = model.initial() + torch.randn(model.dim, generator=torch.Generator().manual_seed(seed))
        with torch.inference_mode():
            direct = model.direct_outputs(flat, x)
        assert torch.equal(direct, model.outputs(flat, x))
    after = dict(module.named_parameters(remove_duplicate=False))
    assert after.keys() == before.keys() and all(after[n] is before[n] for n in before)
    if name == "tied":
        assert module.second.weight is module.first.weight


def test_direct_outputs_restore_the_module_after_an_error() -> None:
    model = FunctionalModel(build_model("logreg", input_shape=(6,), num_classes=3), (6,))
    weight = model.module.linear.weight
    with pytest.raises(RuntimeError):
        model.direct_outputs(model.initial(), torch.randn(5, 7))  # wrong number of features
    assert model.module.linear.weight is weight
    assert isinstance(model.module.linear.weight, nn.Parameter)


@pytest.mark.parametrize(
    ("name", "classes", "batch"), [("logreg", 10, 4096), ("logreg", 2, 64), ("mlp", 5, 100)]
)
def test_one_model_path_equals_the_batched_path(name: str, classes: int, batch: int) -> None:
    """Accuracy, per-label accuracy and counts of one model (direct path) equal its row among several models
    (batched path), with labels missing from the test set and several batches."""
    torch.manual_seed(2)
    model = FunctionalModel(build_model(name, input_shape=(12,), num_classes=classes), (12,))
    x = torch.randn(300, 12)
    y = torch.from_numpy(np.random.default_rng(1).integers(0, max(1, classes - 1), 300))  # last label absent
    stacked = torch.stack([model.initial() + 0.4 * torch.randn(model.dim) for _ in range(3)])
    evaluator = Evaluator()
    assert evaluator._direct(model, stacked[:1], y) and not evaluator._direct(model, stacked, y)
    many = evaluator.class_accuracy(model, stacked, x, y, classes)
    accuracies = evaluator.accuracy(model, stacked, x, y, batch_size=batch)
    correct, counted = evaluator.class_counts(model, stacked, x, y, classes, batch)
    assert many.min() < many.max()
    for k in range(3):
        one = evaluator.class_accuracy(model, stacked[k : k + 1], x, y, classes)
        assert one.dtype == torch.float32 and torch.equal(one, many[k : k + 1])
        alone = evaluator.accuracy(model, stacked[k], x, y, batch_size=batch)
        assert alone.dim() == 0 and alone.dtype == torch.float32 and torch.equal(alone, accuracies[k])
        row, counts = evaluator.class_counts(model, stacked[k : k + 1], x, y, classes, batch)
        assert row.dtype == counts.dtype == torch.float64
        assert torch.equal(row, correct[k : k + 1]) and torch.equal(counts, counted)


def test_engine_delegates_to_its_evaluator() -> None:
    engine = Engine()
    assert engine.evaluator == Evaluator("cpu", engine.memory_cap_mb, True)
    model = FunctionalModel(build_model("logreg", input_shape=(4,), num_classes=3), (4,))
    x, y = torch.randn(50, 4), torch.arange(50) % 3
    flat = model.initial() + torch.randn(model.dim)
    assert torch.equal(engine.accuracy(model, flat, x, y), engine.evaluator.accuracy(model, flat, x, y))
