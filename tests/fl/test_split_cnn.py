"""The split CNN of paper 003: probabilistic-mask layers and split back-propagation."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from ampfl.fl.models.split_cnn import (
    MaskedBottom,
    SplitCNNSpec,
    SplitTop,
    bottom_forward,
    bottom_forward_stacked,
    init_bottom_weights,
    keep_probability,
    sample_mask,
    score_from_probability,
)
from ampfl.fl.split.common import split_step

SPEC = SplitCNNSpec(input_shape=(1, 8, 8), num_classes=10, channels=(4, 8, 8), groups=2, split_layer=2)


def test_theta_clamped_and_masks_binary():
    scores = torch.tensor([-30.0, -2.0, 0.0, 2.0, 30.0])
    theta = keep_probability(scores, 0.1)
    assert float(theta.min()) == pytest.approx(0.1) and float(theta.max()) == pytest.approx(0.9)
    assert torch.allclose(theta[1:4], torch.sigmoid(scores[1:4]))
    gen = torch.Generator().manual_seed(0)
    draws = torch.stack([sample_mask(theta, torch.rand(5, generator=gen)).detach() for _ in range(4000)])
    assert set(draws.unique().tolist()) <= {0.0, 1.0}
    # Bernoulli(θ): empirical keep rate within 5 standard errors of θ
    se = (theta * (1 - theta) / 4000).sqrt()
    assert bool(((draws.mean(0) - theta).abs() < 5 * se + 1e-9).all())


def test_score_round_trip_and_bounds():
    theta = torch.tensor([0.0, 0.3, 0.5, 1.0])
    back = keep_probability(score_from_probability(theta, 0.05), 0.05)
    assert torch.allclose(back, torch.tensor([0.05, 0.3, 0.5, 0.95]), atol=1e-6)
    assert torch.isfinite(score_from_probability(theta, 0.0)).all()
    with pytest.raises(ValueError, match="c must be in"):
        keep_probability(theta, 0.5)


def test_straight_through_gradient():
    """∂/∂s Σ w·M = w ⊙ σ'(s), nonzero even where θ sits at the clamp (s = ±6, c = 0.1)."""
    s = torch.tensor([-6.0, -1.0, 0.5, 6.0], requires_grad=True)
    w = torch.tensor([1.5, -2.0, 0.7, 3.0])
    mask = sample_mask(keep_probability(s, 0.1), torch.rand(4, generator=torch.Generator().manual_seed(1)))
    (w * mask).sum().backward()
    sig = torch.sigmoid(s.detach())
    expected = w * sig * (1 - sig)
    assert s.grad is not None
    assert torch.allclose(s.grad, expected)
    assert bool((s.grad != 0).all())


def test_paper_gradient_variant():
    """003 Eq. 4 / App. A: ∂/∂s Σ w·M = w ⊙ σ(s) ⊙ σ'(s)."""
    s = torch.tensor([-1.0, 0.5, 2.0], requires_grad=True)
    w = torch.tensor([1.5, -2.0, 0.7])
    mask = sample_mask(keep_probability(s, 0.0), torch.rand(3), paper_gradient=True)
    (w * mask).sum().backward()
    sig = torch.sigmoid(s.detach())
    assert s.grad is not None and torch.allclose(s.grad, w * sig * sig * (1 - sig))


def test_masked_bottom_forward_uses_its_mask():
    gen = torch.Generator().manual_seed(2)
    weights = init_bottom_weights(SPEC, gen)
    bottom = MaskedBottom(SPEC, weights, c=0.05, init_theta=0.7)
    x = torch.rand(3, 1, 8, 8, generator=gen)
    out = bottom(x, generator=gen)
    masks = bottom.last_mask()
    assert all(set(m.unique().tolist()) <= {0.0, 1.0} for m in masks)
    ref = bottom_forward([w * m for w, m in zip(weights, masks, strict=True)], x, SPEC.groups)
    assert torch.allclose(out, ref, atol=1e-6)
    out.sum().backward()
    assert all(s.grad is not None and bool(s.grad.abs().sum() > 0) for s in bottom.scores)


def test_stacked_bottoms_equal_the_loop():
    gen = torch.Generator().manual_seed(3)
    stacks = [torch.stack(ws) for ws in zip(*(init_bottom_weights(SPEC, gen) for _ in range(3)), strict=True)]
    x = torch.rand(3, 4, 1, 8, 8, generator=gen)
    out = bottom_forward_stacked(stacks, x, SPEC.groups)
    assert torch.allclose(out, bottom_forward_stacked(stacks, x, SPEC.groups, use_vmap=True), atol=1e-5)
    for k in range(3):
        ref = bottom_forward([s[k] for s in stacks], x[k], SPEC.groups)
        assert torch.allclose(out[k], ref, atol=1e-5)


@pytest.mark.parametrize("clients", [1, 2])
def test_split_backprop_equals_centralized_gradient(clients):
    """Smashed data forward + returned gradient backward give the composed model's gradients: each client's
    bottom gets ∂(its own mean loss), the top ∂(mean loss over the union)."""
    gen = torch.Generator().manual_seed(4)
    top = SplitTop(SPEC, gen)
    leaves = [
        torch.stack(ws).requires_grad_(True)
        for ws in zip(*(init_bottom_weights(SPEC, gen) for _ in range(clients)), strict=True)
    ]
    x = torch.rand(clients, 5, 1, 8, 8, generator=gen)
    y = torch.randint(0, 10, (clients, 5), generator=gen)
    split_step(SPEC, top, leaves, x, y)
    split_grads = [leaf.grad.clone() for leaf in leaves]  # type: ignore[union-attr]
    top_grads = [p.grad.clone() for p in top.parameters()]  # type: ignore[union-attr]

    top.zero_grad()
    ref_top = [torch.zeros_like(p) for p in top.parameters()]
    union = []
    for k in range(clients):
        ws = [leaf.detach()[k].clone().requires_grad_(True) for leaf in leaves]
        loss = F.cross_entropy(top(bottom_forward(ws, x[k], SPEC.groups)), y[k])
        grads = torch.autograd.grad(loss, ws)
        for g, s in zip(grads, split_grads, strict=True):
            assert torch.allclose(s[k], g, atol=1e-5)
        union.append(top(bottom_forward([leaf.detach()[k] for leaf in leaves], x[k], SPEC.groups)))
    total = F.cross_entropy(torch.cat(union), y.reshape(-1))
    ref_top = list(torch.autograd.grad(total, list(top.parameters())))
    for a, b in zip(top_grads, ref_top, strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_spec_validation():
    with pytest.raises(ValueError, match="split_layer"):
        SplitCNNSpec(input_shape=(1, 8, 8), num_classes=10, channels=(4, 8), split_layer=3, groups=2)
    with pytest.raises(ValueError, match="groups"):
        SplitCNNSpec(input_shape=(1, 8, 8), num_classes=10, channels=(4, 6), groups=4)
    assert SPEC.bottom_dim() == 4 * 9 + 8 * 4 * 9
