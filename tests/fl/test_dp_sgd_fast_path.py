"""Record-level DP-SGD at the shared model (issue 32): ``dp_sgd_split``'s fast path equals its general path.

The fast path (:mod:`ampfl.fl.engine.per_example`: per-example gradients at one weight vector, no per-unit
weight copies, no masks) must release the same update as the general path (per-unit weights through the
engine, masks, ``clip_parts``): compared with the noise off and with the noise on (the same secret noise
stream), on logistic regression, an MLP with a shared part (two clip norms) and the CNN. The per-example
gradients are also checked against an independent autograd loop, one example at a time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from ampfl.fl.algorithms.dp_sgd_partition import DPSGDPartition
from ampfl.fl.config import PrivacyConfig
from ampfl.fl.data import Dataset, load_dataset
from ampfl.fl.engine.per_example import clipped_gradient_sum, layers_path_checked, per_example_gradients
from ampfl.fl.engine.vectorised import Engine, EngineOptions, FunctionalModel
from ampfl.fl.models import build_model
from ampfl.fl.models.base import FLModel
from ampfl.fl.task import Task

DIGITS = load_dataset("digits")


def _images(n: int = 96, classes: int = 10) -> Dataset:
    """Random 28×28 one-channel images (the CNN's input) with labels that depend on them."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 1, 28, 28)).astype(np.float32)
    y = (x[:, 0, :4, :4].sum((1, 2)) > 0).astype(np.int64) + 2 * (x[:, 0, -4:, -4:].sum((1, 2)) > 0)
    return Dataset("images", x, y % classes, x[:16], y[:16] % classes, classes)


def _algo(task: Task, *, engine: Engine | None = None, **kw: Any) -> DPSGDPartition:
    n = task.num_clients
    params = {
        "num_local_steps": 1,
        "batch_size": 1,
        "learning_rate": 0.5,
        "sampling": "poisson",
        "sampling_rate": 0.5,
        "expected_clients": 0.5 * n,
        "clip": 0.3,
        **kw,
    }
    privacy = PrivacyConfig.model_validate({"accountant": "rdp", "reproducible": True})
    return DPSGDPartition(DPSGDPartition.Params(**params), task, seed=7, engine=engine, privacy=privacy)


def _both(task: Task, rounds: int, **kw: Any) -> tuple[DPSGDPartition, DPSGDPartition, list[Any]]:
    """The same run through the fast and the general path; the metrics of each round, side by side."""
    fast, general = _algo(task, **kw), _algo(task, **kw)
    assert fast.fast_path
    general.fast_path = False
    pairs = [(fast.run_round(r), general.run_round(r)) for r in range(rounds)]
    assert layers_path_checked(fast.model)  # these models take the layers path
    return fast, general, pairs


def _check(fast: DPSGDPartition, general: DPSGDPartition, pairs: list[Any], atol: float = 1e-5) -> None:
    scale = float(general.global_params.abs().max())
    assert scale > 0
    torch.testing.assert_close(fast.global_params, general.global_params, rtol=0.0, atol=atol * max(1, scale))
    for a, b in pairs:
        assert a["participants"] == b["participants"]
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5)
        assert a["clipped_fraction"] == pytest.approx(b["clipped_fraction"], abs=1e-9)


@pytest.mark.parametrize("noise", [0.0, 1.0])
@pytest.mark.parametrize("model", ["logreg", "mlp"])
def test_fast_path_equals_general_path_one_example_per_client(model: str, noise: float) -> None:
    task = Task(
        DIGITS,
        [np.array([i]) for i in range(120)],
        model=model,
        model_options={"hidden": [16]} if model == "mlp" else {},
    )
    clip = {"logreg": 2.0, "mlp": 1.0}[model]
    fast, general, pairs = _both(task, 4, noise_multiplier=noise, clip=clip)
    _check(fast, general, pairs)
    assert any(0 < a["clipped_fraction"] < 1 for a, _ in pairs)  # some updates clipped, some not


@pytest.mark.parametrize(
    "split",
    [
        {"shared": ["net.2"]},  # a split part and a shared part
        {"shared": ["net"]},  # everything shared: nothing to split, whatever the partition
        {"shared": ["net"], "partition": "dropout"},
    ],
)
def test_fast_path_equals_general_path_with_a_shared_part_and_larger_clients(split: dict[str, Any]) -> None:
    # b = 1 from clients of 3 examples (the same ROLE_DATA draws pick the example) and a shared part
    # clipped separately to its own bound: two clip norms per example
    task = Task(
        DIGITS, [np.arange(3 * i, 3 * i + 3) for i in range(60)], model="mlp", model_options={"hidden": [16]}
    )
    fast, general, pairs = _both(
        task, 3, noise_multiplier=0.7, nonsplit_clip=0.05, local_sampling="wr", **split
    )
    _check(fast, general, pairs)


def test_fast_path_equals_general_path_on_the_cnn() -> None:
    task = Task(_images(), [np.array([i]) for i in range(96)], model="cnn")
    fast, general, pairs = _both(task, 2, noise_multiplier=1.0, clip=0.5, learning_rate=0.1)
    _check(fast, general, pairs)


@pytest.mark.parametrize(
    "kw",
    [
        {"num_submodels": 2},
        {"partition": "dropout"},
        {"batch_size": 2},
        {"num_local_steps": 2},
    ],
)
def test_fast_path_only_where_a_round_is_one_unmasked_dp_sgd_step(kw: dict[str, Any]) -> None:
    task = Task(
        DIGITS, [np.arange(2 * i, 2 * i + 2) for i in range(40)], model="mlp", model_options={"hidden": [8]}
    )
    assert _algo(task, noise_multiplier=1.0).fast_path
    assert not _algo(task, noise_multiplier=1.0, **kw).fast_path
    sequential = Engine(EngineOptions(vectorized=False))
    assert not _algo(task, noise_multiplier=1.0, engine=sequential).fast_path


# -- the per-example module ------------------------------------------------------------------------------
def _loop_gradients(
    fm: FunctionalModel, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    """Independent reference: plain autograd, one example at a time."""
    rows = []
    for j in range(x.shape[0]):
        leaf = flat.detach().clone().requires_grad_(True)
        (g,) = torch.autograd.grad(fm.one_example_loss(leaf, x[j], y[j]), leaf)
        rows.append(g)
    return torch.stack(rows)


def _model(name: str, shape: tuple[int, ...], **options: Any) -> FunctionalModel:
    torch.manual_seed(1)
    return FunctionalModel(build_model(name, input_shape=shape, num_classes=10, **options), shape)


CASES = [
    ("logreg", (64,), {"bias": True, "init_std": 0.1}),
    ("mlp", (64,), {"hidden": [16, 8]}),
    ("cnn", (1, 28, 28), {}),
]


@pytest.mark.parametrize("name,shape,options", CASES)
@pytest.mark.parametrize("path", ["layers", "vmap"])
def test_clipped_sum_equals_clipping_an_autograd_loop(
    name: str, shape: tuple[int, ...], options: dict[str, Any], path: str
) -> None:
    fm = _model(name, shape, **options)
    rng = np.random.default_rng(2)
    x = torch.from_numpy(rng.normal(size=(9, *shape)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 10, size=9))
    flat = fm.initial()
    g = _loop_gradients(fm, flat, x, y)
    k = len(fm.spec.names)
    parts = [i % 2 for i in range(k)]  # alternate tensors between two parts with their own bounds
    clips = [0.6 * float(g.norm(dim=1).median()), 0.05]
    coords = torch.tensor(parts).repeat_interleave(torch.tensor(fm.spec.sizes()))
    want = torch.zeros_like(flat)
    norms = torch.zeros(9, 2)
    for p, c in enumerate(clips):
        part = g * (coords == p)
        norms[:, p] = part.norm(dim=1)
        want += (part * torch.clamp(c / (norms[:, p] + 1e-12), max=1.0)[:, None]).sum(0)
    got = clipped_gradient_sum(fm, flat, x, y, clips=clips, part_of=parts, path=path, memory_cap_mb=0.5)
    torch.testing.assert_close(got.total, want, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(got.norms, norms, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(per_example_gradients(fm, flat, x, y)[0], g, rtol=1e-4, atol=1e-6)


class _Twice(FLModel):
    """One linear layer applied twice: its per-example gradients are not δ aᵀ of one call."""

    def __init__(self) -> None:
        super().__init__()
        self.num_classes = 4
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.lin(torch.tanh(self.lin(x)))
        return out


class _Mixing(FLModel):
    """Examples that interact (the batch mean is added): per-example gradients are not δ aᵀ."""

    def __init__(self) -> None:
        super().__init__()
        self.num_classes = 4
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h: torch.Tensor = self.lin(x)
        return h + h.mean(0, keepdim=True)


@pytest.mark.parametrize("module", [_Twice, _Mixing])
def test_auto_keeps_to_vmap_where_the_layers_path_would_be_wrong(module: type[FLModel]) -> None:
    fm = FunctionalModel(module(), (4,))
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    y = torch.arange(6) % 4
    flat = fm.initial()
    got = clipped_gradient_sum(fm, flat, x, y, clips=[0.1])
    want = clipped_gradient_sum(fm, flat, x, y, clips=[0.1], path="vmap")
    torch.testing.assert_close(got.total, want.total)
    g = _loop_gradients(fm, flat, x, y)  # each example alone, as vmap sees it
    torch.testing.assert_close(want.norms[:, 0], g.norm(dim=1), rtol=1e-5, atol=1e-6)


def test_a_penalty_keeps_to_vmap() -> None:
    fm = _model("logreg", (64,), gamma=0.1, init_std=0.1)
    x, y = torch.randn(5, 64), torch.arange(5)
    with pytest.raises(ValueError, match="path 'layers'"):
        clipped_gradient_sum(fm, fm.initial(), x, y, clips=[1.0], path="layers")
    got = clipped_gradient_sum(fm, fm.initial(), x, y, clips=[1.0])
    want = _loop_gradients(fm, fm.initial(), x, y)
    want = (want * torch.clamp(1.0 / (want.norm(dim=1) + 1e-12), max=1.0)[:, None]).sum(0)
    torch.testing.assert_close(got.total, want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"clips": [0.0]}, "clips"),
        ({"clips": [1.0], "part_of": [0, 1]}, "part_of"),
        ({"clips": [1.0], "path": "fast"}, "path"),
    ],
)
def test_bad_arguments_name_the_parameter(kw: dict[str, Any], match: str) -> None:
    fm = _model("logreg", (64,))
    with pytest.raises(ValueError, match=match):
        clipped_gradient_sum(fm, fm.initial(), torch.randn(2, 64), torch.arange(2), **kw)
