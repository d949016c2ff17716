"""Models: shapes, the 000 Eq. (20)–(21) loss and γ regulariser, the 004 Fig. 8 CNN."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from ampfl.fl.engine.vectorised import FunctionalModel
from ampfl.fl.models import build_model, loss_fn, num_parameters


def test_logreg_binary_loss_is_eq21() -> None:
    # Eq. (21) with y in {-1, +1}: ln(1 + exp(-y w.x)); computed by hand for w = (1, -2), x = (0.5, 0.25).
    m = build_model("logreg", input_shape=(2,), num_classes=2)
    with torch.no_grad():
        m.linear.weight.copy_(torch.tensor([[1.0, -2.0]]))
    x = torch.tensor([[0.5, 0.25], [0.5, 0.25]])
    out = m(x)
    assert out.shape == (2,)
    loss = loss_fn(m)(out, torch.tensor([1, 0]))
    wx = 0.5 - 0.5  # = 0 -> ln 2 for both labels
    assert torch.allclose(loss, torch.full((2,), math.log1p(math.exp(-wx))))
    with torch.no_grad():
        m.linear.weight.copy_(torch.tensor([[2.0, 0.0]]))
    loss = m.per_sample_loss(m(x), torch.tensor([1, 0]))  # w.x = 1
    assert torch.allclose(loss, torch.tensor([math.log1p(math.exp(-1.0)), math.log1p(math.exp(1.0))]))
    assert m.predict(m(x)).tolist() == [1, 1]


def test_logreg_penalty_is_gamma_norm_with_zero_subgradient() -> None:
    m = build_model("logreg", input_shape=(3,), num_classes=2, gamma=0.5)
    fm = FunctionalModel(m, (3,))
    assert fm.dim == 3  # no bias by default (Eq. 21)
    zero = torch.zeros(3, requires_grad=True)
    pen = m.penalty(fm.spec.unflatten(zero))
    (g,) = torch.autograd.grad(pen, zero)
    assert float(pen.detach()) == 0.0 and torch.equal(g, torch.zeros(3))
    w = torch.tensor([3.0, 0.0, 4.0], requires_grad=True)
    pen = m.penalty(fm.spec.unflatten(w))
    (g,) = torch.autograd.grad(pen, w)
    assert float(pen.detach()) == pytest.approx(0.5 * 5.0)  # γ‖W‖₂
    assert torch.allclose(g, 0.5 * torch.tensor([0.6, 0.0, 0.8]))


def test_logreg_multiclass_and_bias() -> None:
    m = build_model("logreg", input_shape=(5,), num_classes=4, bias=True)
    assert num_parameters(m) == 5 * 4 + 4
    out = m(torch.randn(7, 5))
    assert out.shape == (7, 4)
    assert torch.allclose(
        m.per_sample_loss(out, torch.zeros(7, dtype=torch.int64)), torch.full((7,), math.log(4))
    )


def test_cnn_matches_fig8() -> None:
    m = build_model("cnn", input_shape=(1, 28, 28), num_classes=10)
    # Fig. 8: conv 1->16 k8 (1040), conv 16->32 k4 (8224), FC 512->256 (131328), FC 256->10 (2570).
    assert num_parameters(m) == 1040 + 8224 + 131328 + 2570
    assert m.classifier[0].in_features == 32 * 4 * 4
    assert m(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    with pytest.raises(ValueError, match="input_shape"):
        build_model("cnn", input_shape=(1, 32, 32), num_classes=10)


@pytest.mark.parametrize("name,shape", [("logreg", (6,)), ("mlp", (6,)), ("cnn", (1, 28, 28))])
def test_no_batchnorm(name: str, shape: tuple[int, ...]) -> None:
    m = build_model(name, input_shape=shape, num_classes=3)
    assert not any(isinstance(mod, nn.modules.batchnorm._BatchNorm) for mod in m.modules())


def test_build_model_errors() -> None:
    with pytest.raises(ValueError, match="model must be one of"):
        build_model("resnet", input_shape=(3,), num_classes=2)
    with pytest.raises(ValueError, match="num_classes"):
        build_model("mlp", input_shape=(3,), num_classes=1)
    with pytest.raises(ValueError, match="bad option"):
        build_model("mlp", input_shape=(3,), num_classes=2, depth=3)
    with pytest.raises(ValueError, match="gamma"):
        build_model("logreg", input_shape=(3,), num_classes=2, gamma=-1.0)


@pytest.mark.parametrize("channels", [1, 3])
def test_cnn_forward_stacked_equals_per_client_forward(channels: int) -> None:
    # The grouped channels-last fast path must compute, for each client i, exactly forward() with client i's
    # parameters (checked against functional_call, outputs and gradients to 1e-5).
    torch.manual_seed(0)
    m = build_model("cnn", input_shape=(channels, 28, 28), num_classes=7)
    fm = FunctionalModel(m, (channels, 28, 28))
    gen = torch.Generator().manual_seed(3)
    k, b = 3, 4
    flat = (fm.initial() + 0.1 * torch.randn((k, fm.dim), generator=gen)).requires_grad_(True)
    x = torch.randn((k, b, channels, 28, 28), generator=gen)
    out = m.forward_stacked(fm.spec.unflatten(flat), x)
    assert out.shape == (k, b, 7)
    ref = torch.stack([torch.func.functional_call(m, fm.spec.unflatten(flat[i]), (x[i],)) for i in range(k)])
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-5)  # float32: outputs reach |13|
    probe = torch.randn((k, b, 7), generator=gen) / b  # weights of a mini-batch mean, as in local SGD
    (g_fast,) = torch.autograd.grad((out * probe).sum(), flat)
    (g_ref,) = torch.autograd.grad((ref * probe).sum(), flat)
    assert torch.allclose(g_fast, g_ref, atol=1e-5, rtol=1e-5)
    assert (
        FunctionalModel(build_model("mlp", input_shape=(6,), num_classes=3), (6,)).fused_linear_names
        == ()
    )
    assert fm.has_stacked_forward
