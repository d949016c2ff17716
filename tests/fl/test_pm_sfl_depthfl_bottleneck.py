"""DepthFL's bottleneck branches before the shallow heads (``depthfl`` with ``bottleneck = true``)."""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from ampfl.fl.config import parse_config
from ampfl.fl.run.experiment import build_algorithm, build_task
from ampfl.fl.split.common import unflatten


def _alg(bottleneck: bool):
    config = parse_config(
        {
            "seed": 0,
            "rounds": 1,
            "dataset": {"name": "digits"},
            "partition": {"scheme": "iid", "num_clients": 4},
            "model": {"name": "split_cnn", "options": {"channels": [4, 8, 8], "groups": 2}},
            "algorithm": {"name": "depthfl", "client_fraction": 1.0, "num_local_steps": 1, "batch_size": 4,
                          "client_splits": [1, 3], "bottleneck": bottleneck, "learning_rate": 0.01},
        }
    )  # fmt: skip
    return build_algorithm(config, build_task(config))


def _block(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.max_pool2d(F.relu(F.group_norm(F.conv2d(h, w, padding=1), 2)), 2)


def _branch(h: torch.Tensor, ws: list[torch.Tensor], k: int) -> torch.Tensor:
    for w, s in zip(ws, (1, k, 1), strict=True):
        h = F.relu(F.group_norm(F.conv2d(h, w, stride=s), 2))
    return h


def test_bottleneck_heads_match_a_direct_per_client_computation():
    alg = _alg(True)
    # digits 8×8, blocks 8 → 4 → 2 → 1; m = 8 / 4 = 2; shallow heads see the last block's [8, 1, 1] shape
    assert alg.head_shapes[:5] == [(2, 4, 1, 1), (2, 2, 4, 4), (8, 2, 1, 1), (10, 8), (10,)]
    assert alg.head_shapes[5:10] == [(2, 8, 1, 1), (2, 2, 2, 2), (8, 2, 1, 1), (10, 8), (10,)]
    assert alg.head_shapes[10:] == [(10, 8), (10,)] and alg.head_layer == [0] * 5 + [1] * 5 + [2] * 2
    gen = torch.Generator().manual_seed(0)
    heads = torch.stack([alg.heads, alg.heads + 0.1 * torch.randn(alg.heads.shape, generator=gen)])
    convs = torch.stack([alg.bottom, alg.bottom * 1.5])
    x = torch.stack([alg.x_train[:3], alg.x_train[3:6]])
    got = alg._logits(convs, heads, x)
    assert got.shape == (3, 2, 3, 10)
    for k in range(2):
        conv = unflatten(convs[k], alg.shapes)
        p = unflatten(heads[k], alg.head_shapes)
        h = x[k]
        for layer in range(3):
            h = _block(h, conv[layer])
            f = _branch(h, p[5 * layer : 5 * layer + 3], 2 ** (2 - layer)) if layer < 2 else h
            w, b = (p[3], p[4]) if layer == 0 else (p[8], p[9]) if layer == 1 else (p[10], p[11])
            assert torch.allclose(got[layer, k], f.flatten(1) @ w.T + b, atol=1e-5)


def test_bottleneck_training_and_depthwise_aggregation():
    plain, alg = _alg(False), _alg(True)
    sizes = [math.prod(s) for s in alg.head_shapes]
    assert alg.heads.numel() == sum(sizes) and plain.heads.numel() != sum(sizes)
    assert alg.head_of.tolist() == [
        layer for layer, n in zip(alg.head_layer, sizes, strict=True) for _ in range(n)
    ]
    before = alg.heads.clone()
    alg.run_round(0)  # all 4 clients: depths 1, 3, 1, 3; every head has a holder, all change
    for layer in range(3):
        part = alg.head_of == layer
        assert not torch.equal(alg.heads[part], before[part])
    scores = alg.evaluate()
    assert 0.0 <= scores["accuracy"] <= 1.0 and 0.0 <= scores["own_depth_accuracy"] <= 1.0
