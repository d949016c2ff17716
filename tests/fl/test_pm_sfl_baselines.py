"""PM-SFL baselines on the split engine: DepthFL (heterogeneous depth) and LG-FedAvg."""

from __future__ import annotations

import math

import pytest
import torch

from ampfl.fl.config import parse_config
from ampfl.fl.run.experiment import build_algorithm, build_task
from ampfl.fl.split.depthfl import depthfl_loss, head_logits


def _config(name: str, rounds: int = 2, **algo: object):
    return parse_config(
        {
            "seed": 0,
            "rounds": rounds,
            "dataset": {"name": "digits"},
            "partition": {"scheme": "dirichlet", "num_clients": 6, "alpha": 0.3},
            "model": {"name": "split_cnn", "options": {"channels": [4, 8, 8], "groups": 2, "split_layer": 2}},
            "algorithm": {"name": name, "client_fraction": 0.5, "num_local_steps": 2, "batch_size": 8,
                          "eval_examples": 200, "eval_clients": 3, **algo},
            "privacy": {"accountant": "rdp", "reproducible": True},
        }
    )  # fmt: skip


def _ce(z: list[float], y: int) -> float:
    return -z[y] + math.log(sum(math.exp(v) for v in z))


def _kl(zp: list[float], zq: list[float]) -> float:
    lp = [v - math.log(sum(math.exp(u) for u in zp)) for v in zp]
    lq = [v - math.log(sum(math.exp(u) for u in zq)) for v in zq]
    return sum(math.exp(a) * (a - b) for a, b in zip(lp, lq, strict=True))


def test_depthfl_loss_matches_hand_computation():
    # L = 3 heads, K = 2 clients (depth 3 and 1), batch of 1, 2 classes
    z = [[[1.0, -1.0], [0.0, 2.0]], [[0.5, 0.5], [3.0, 0.0]], [[-1.0, 2.0], [1.0, 1.0]]]
    logits = torch.tensor(z).view(3, 2, 1, 2)
    y = torch.tensor([[0], [1]])
    depth = torch.tensor([3, 1])
    heads0 = [z[l][0] for l in range(3)]
    ce0 = sum(_ce(h, 0) for h in heads0)
    kl0 = sum(_kl(heads0[j], heads0[i]) for i in range(3) for j in range(3) if i != j) / 2
    expected = torch.tensor([ce0 + kl0, _ce(z[0][1], 1)])
    got = depthfl_loss(logits, y, depth, distill=True)
    assert torch.allclose(got, expected, atol=1e-6)
    plain = depthfl_loss(logits, y, depth, distill=False)
    assert torch.allclose(plain, torch.tensor([ce0, _ce(z[0][1], 1)]), atol=1e-6)
    # heads beyond a client's depth get exactly zero gradient; the teacher is detached
    leaf = logits.clone().requires_grad_(True)
    depthfl_loss(leaf, y, depth, distill=True).sum().backward()
    assert (
        leaf.grad is not None and bool((leaf.grad[1:, 1] == 0).all()) and bool(leaf.grad[1:, 0].ne(0).any())
    )


def test_depthfl_shapes_and_depthwise_aggregation():
    config = _config("depthfl", rounds=1, client_splits=[1, 3], learning_rate=0.01)
    alg = build_algorithm(config, build_task(config))
    assert alg.round_events(0) == [] and alg.privacy_unit is None  # weights in the clear: ε = ∞
    x = alg.x_train[:10].view(2, 5, 1, 8, 8)
    convs = [w.expand(2, *w.shape) for w in alg.initial_bottom.split([4 * 9, 8 * 4 * 9, 8 * 8 * 9])]
    convs = [c.reshape(2, *s) for c, s in zip(convs, alg.shapes, strict=True)]
    heads = [h.expand(2, *h.shape) for h in _unflat(alg.heads, alg.head_shapes)]
    assert head_logits(convs, heads, x, 2).shape == (3, 2, 5, 10)
    assert [s[1] for s in alg.head_shapes[::2]] == [4 * 4 * 4, 8 * 2 * 2, 8 * 1 * 1]
    bottom, heads_before = alg.bottom.clone(), alg.heads.clone()
    alg.run_round(0)
    deep = bool((alg.splits[torch.from_numpy(alg.participants(0))] == 3).any())
    first = 4 * 9
    assert not torch.equal(alg.bottom[:first], bottom[:first])
    assert (not torch.equal(alg.bottom[first:], bottom[first:])) == deep
    first_head = 10 * 64 + 10
    assert torch.equal(alg.heads[first_head:], heads_before[first_head:]) == (not deep)
    scores = alg.evaluate()
    assert {"accuracy", "global_accuracy", "own_depth_accuracy"} <= set(scores)


def _unflat(flat: torch.Tensor, shapes: list[tuple[int, ...]]) -> list[torch.Tensor]:
    from ampfl.fl.split.common import unflatten

    return unflatten(flat, shapes)


def test_depthfl_with_only_shallow_clients_never_touches_deep_layers():
    config = _config("depthfl", rounds=2, client_splits=[2])
    alg = build_algorithm(config, build_task(config))
    bottom, heads = alg.bottom.clone(), alg.heads.clone()
    alg.run_round(0)
    alg.run_round(1)
    cut = 4 * 9 + 8 * 4 * 9
    head_cut = (10 * 64 + 10) + (10 * 32 + 10)  # heads 1 and 2 (features 4·4·4 and 8·2·2)
    assert torch.equal(alg.bottom[cut:], bottom[cut:]) and not torch.equal(alg.bottom[:cut], bottom[:cut])
    assert torch.equal(alg.heads[head_cut:], heads[head_cut:])
    with pytest.raises(ValueError, match=r"client_splits entries must be in \[1, 3\]"):
        build_algorithm(_config("depthfl", client_splits=[4]), build_task(config))


def test_lg_fedavg_personal_layers_never_averaged():
    config = _config("lg_fedavg", rounds=1, personal_layers=1, learning_rate=0.01)
    alg = build_algorithm(config, build_task(config))
    assert alg.round_events(0) == [] and alg.privacy_unit is None
    first = 4 * 9
    init = alg.bottom.clone()
    alg.run_round(0)
    ids = torch.from_numpy(alg.participants(0))
    others = torch.tensor([c for c in range(6) if c not in set(ids.tolist())])
    # the global bottom's personal block is never trained or averaged; non-participants keep their own
    assert torch.equal(alg.bottom[:first], init[:first])
    assert not torch.equal(alg.bottom[first:], init[first:])
    assert torch.equal(alg.store[others], init.expand(len(others), -1))
    own = alg.store[ids, :first]
    assert all(not torch.equal(own[i], own[j]) for i in range(len(ids)) for j in range(i + 1, len(ids)))
    assert not torch.allclose(own.mean(0), init[:first])
    bottoms = alg.client_bottom(ids)
    assert torch.equal(bottoms[:, first:], alg.bottom[first:].expand(len(ids), -1))


@pytest.mark.parametrize(("layers", "reference"), [(0, "splitfed"), (2, "standalone")])
def test_lg_fedavg_limits_are_splitfed_and_standalone(layers, reference):
    config = _config("lg_fedavg", personal_layers=layers)
    alg = build_algorithm(config, build_task(config))
    ref_config = _config(reference)
    ref = build_algorithm(ref_config, build_task(ref_config))
    for r in range(2):
        alg.run_round(r)
        ref.run_round(r)
    if reference == "splitfed":
        assert torch.equal(alg.bottom, ref.bottom)
    else:
        assert torch.equal(alg.store, ref.store)
    assert alg.evaluate()["accuracy"] == ref.evaluate()["accuracy"]


@pytest.mark.parametrize("name", ["depthfl", "depthfl_masks", "lg_fedavg", "splitfed_dp"])
def test_baselines_resume_identically(name):
    config = _config("depthfl", masks=True) if name == "depthfl_masks" else _config(name)
    task = build_task(config)
    straight = build_algorithm(config, task)
    for r in range(3):
        metrics = straight.run_round(r)
    assert metrics["participants"] == 3.0 and math.isfinite(metrics["train_loss"])
    assert 0.0 <= straight.evaluate()["accuracy"] <= 1.0 and straight.parameters_finite()
    resumed = build_algorithm(config, task)
    for r in range(2):
        resumed.run_round(r)
    fresh = build_algorithm(config, task)
    fresh.load_state_dict(resumed.state_dict())
    fresh.run_round(2)
    a, b = straight.state_dict(), fresh.state_dict()
    for key in a:
        if isinstance(a[key], torch.Tensor):
            assert torch.equal(a[key], b[key]), key
    assert all(torch.equal(a["top"][k], b["top"][k]) for k in a["top"])


def test_splitfed_dp_without_noise_or_clipping_is_splitfed():
    loose = {"optimizer": "sgd", "learning_rate": 0.05}
    config = _config("splitfed_dp", smashed_clip=1e6, clip_norm=1e6, noise_multiplier=0.0,
                     smashed_noise_multiplier=0.0, **loose)  # fmt: skip
    task = build_task(config)
    alg, ref = build_algorithm(config, task), build_algorithm(_config("splitfed", **loose), task)
    assert alg.privacy_unit is None and alg.round_events(0) == []
    for r in range(2):
        assert alg.run_round(r)["train_loss"] == pytest.approx(ref.run_round(r)["train_loss"], rel=1e-5)
    assert torch.allclose(alg.bottom, ref.bottom, atol=1e-6)
    # with clipping active the update differs
    tight = build_algorithm(_config("splitfed_dp", clip_norm=1e-3, noise_multiplier=0.0, **loose), task)
    tight.run_round(0)
    fresh = build_algorithm(_config("splitfed", **loose), task)
    fresh.run_round(0)
    assert not torch.allclose(tight.bottom, fresh.bottom, atol=1e-6)


def test_clip_rows_bounds_norms():
    from ampfl.fl.split.splitfed_dp import clip_rows

    v = torch.tensor([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]]).view(3, 1, 2)
    out = clip_rows(v, 1.0)
    assert torch.allclose(out.flatten(1), torch.tensor([[0.6, 0.8], [0.3, 0.4], [0.0, 0.0]]))


@pytest.mark.parametrize("steps", [2, 40])
def test_splitfed_dp_events_bound_appearances(steps):
    from ampfl.accounting.events import GaussianEvent
    from ampfl.fl.sampling import local_batches

    config = _config("splitfed_dp", num_local_steps=steps, noise_multiplier=1.2, smashed_noise_multiplier=0.8)
    alg = build_algorithm(config, build_task(config))
    m = alg.appearances
    assert alg.privacy_unit == "record"
    assert alg.round_events(0) == [
        (GaussianEvent(noise_multiplier=0.4), m),
        (GaussianEvent(noise_multiplier=0.6 / m), 1),
    ]
    # independent check: no example appears more than m times in a round's batches
    for r in range(3):
        batches = local_batches(alg.client_indices, alg.participants(r), num_steps=steps, batch_size=8,
                                scheme="wor", rng=alg.rng(r, 2))  # fmt: skip
        assert int(torch.bincount(batches.flatten()).max()) <= m
    assert (m > 1) == (steps == 40)


def test_depthfl_masks_aggregates_binary_uploads_over_holders():
    config = _config("depthfl", rounds=1, client_splits=[1, 3], masks=True, c=0.05)
    alg = build_algorithm(config, build_task(config))
    assert torch.equal(alg.bottom, torch.full_like(alg.bottom, 0.5))
    alg.run_round(0)
    depth = alg.splits[torch.from_numpy(alg.participants(0))]
    first = 4 * 9
    # block 1: mean of K = 3 binary uploads; deeper blocks: mean over the depth-3 holders, else unchanged
    assert torch.allclose(alg.bottom[:first] * 3, (alg.bottom[:first] * 3).round(), atol=1e-5)
    deep = int((depth == 3).sum())
    rest = alg.bottom[first:]
    if deep:
        assert torch.allclose(rest * deep, (rest * deep).round(), atol=1e-5)
    else:
        assert torch.equal(rest, torch.full_like(rest, 0.5))
