"""Issue 17 speed-ups change no bit: the logistic regression's stacked forward equals the ``vmap`` path
exactly, its autograd-free gradients equal autograd's, and whole runs (FedAvg, DP-FedAvg, resumed) write the
same metrics and parameters with the block draw of the participants' mini-batches and the autograd-free
gradients as with numpy's per-client draws and autograd."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch
from torch.func import vmap

from ampfl.fl import sampling
from ampfl.fl.config import parse_config
from ampfl.fl.engine.vectorised import Engine, EngineOptions, FunctionalModel, LocalResult, _rows
from ampfl.fl.models import build_model
from ampfl.fl.models.linear import LogisticRegression
from ampfl.fl.run.experiment import run_experiment
from ampfl.fl.run.folder import read_lines


@pytest.mark.parametrize("classes", [2, 5])
@pytest.mark.parametrize("opts", [{}, {"bias": True}, {"gamma": 0.1, "init_std": 0.2}])
def test_logreg_stacked_forward_is_bitwise_the_vmap_path(classes: int, opts: dict) -> None:
    torch.manual_seed(0)
    fm = FunctionalModel(build_model("logreg", input_shape=(9,), num_classes=classes, **opts), (9,))
    assert fm.has_stacked_forward and fm.fused_linear_names == ()
    gen = torch.Generator().manual_seed(1)
    k, b = 30, 7
    x = torch.randn((k, b, 9), generator=gen) * 3
    y = torch.randint(0, classes, (k, b), generator=gen)
    w = torch.rand((k, b), generator=gen)
    flat = torch.randn((k, fm.dim), generator=gen)
    results = _vmap_and_stacked_losses_and_grads(fm, flat, x, y, w)
    for got, want in zip(*results, strict=True):
        assert torch.equal(got, want)
    _assert_stacked_engine_is_the_vmap_engine(fm, flat, x, y, gen)


@pytest.mark.parametrize("classes", [2, 4])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize(("k", "b"), [(1, 1), (100, 1), (37, 7), (100, 10)])
def test_logreg_gradients_without_autograd_are_bitwise_autograd(
    classes: int, bias: bool, k: int, b: int
) -> None:
    fm = FunctionalModel(build_model("logreg", input_shape=(13,), num_classes=classes, bias=bias), (13,))
    gen = torch.Generator().manual_seed(k * b + classes)
    q = 2
    xb = torch.randn((k, q, b, 13), generator=gen) * 4
    yb = torch.randint(0, classes, (k, q, b), generator=gen)
    wb = torch.rand((k, q, b), generator=gen)
    views = list(fm.spec.unflatten(torch.randn((k, fm.dim), generator=gen)).values())
    analytic = fm.module.stacked_loss_and_grads
    for r in range(q):  # strided slices of [k, Q, b] as the engine passes them
        args = (fm.spec.names, views, fm.stacked_example_losses, xb[:, r], yb[:, r], wb[:, r])
        want_grads, want_loss = Engine._batched_grads(*args)
        got_grads, got_loss = Engine._batched_grads(*args, analytic)
        assert torch.equal(got_loss, want_loss)
        assert all(torch.equal(g, h) for g, h in zip(got_grads, want_grads, strict=True))
    penalised = build_model("logreg", input_shape=(13,), num_classes=classes, gamma=0.1)
    assert penalised.stacked_loss_and_grads({}, xb[:, 0], yb[:, 0], wb[:, 0]) is None


@pytest.mark.parametrize("hidden", [[7], [16, 5], [5, 16], [64]])
@pytest.mark.parametrize(("k", "b"), [(1, 1), (30, 7), (100, 10)])
def test_mlp_stacked_forward_and_gradients_are_the_vmap_path(hidden: list[int], k: int, b: int) -> None:
    """The MLP's stacked forward with autograd equals ``vmap`` + autograd bit for bit; its autograd-free
    losses, bias gradients and widening layers' weight gradients do too, the narrowing layers' weight
    gradients (another product, ``_weight_grad``) to float rounding; whole local SGD through them (the
    default engine) equals the ``vmap`` engine to float rounding."""
    torch.manual_seed(0)
    fm = FunctionalModel(build_model("mlp", input_shape=(9,), num_classes=4, hidden=hidden), (9,))
    assert fm.has_stacked_forward and fm.fused_linear_names == ()
    gen = torch.Generator().manual_seed(k * b)
    x = torch.randn((k, b, 9), generator=gen) * 3
    y = torch.randint(0, 4, (k, b), generator=gen)
    w = torch.rand((k, b), generator=gen)
    flat = torch.randn((k, fm.dim), generator=gen)
    results = _vmap_and_stacked_losses_and_grads(fm, flat, x, y, w)
    grads, loss = fm.module.stacked_loss_and_grads(fm.spec.unflatten(flat), x, y, w)
    results.append([loss, *(grads[name] for name in fm.spec.names)])
    shapes = dict(zip(fm.spec.names, fm.spec.shapes, strict=True))
    narrowing = {n for n in fm.spec.names if n.endswith(".weight") and shapes[n][0] < shapes[n][1]}
    assert narrowing  # the last layer (to 4 classes) narrows: the other product is exercised
    for name, got, vmapped, analytic in zip([None, *fm.spec.names], *results, strict=True):
        assert torch.equal(got, vmapped)
        if name in narrowing:
            torch.testing.assert_close(analytic, got, rtol=1e-5, atol=1e-5 * float(got.abs().max()))
        else:
            assert torch.equal(got, analytic), name
    _assert_stacked_engine_is_the_vmap_engine(fm, flat, x, y, gen, exact=False)


@pytest.mark.parametrize("hidden", [[7], [16, 5], [5, 16], [64]])
def test_mlp_local_sgd_in_place_is_its_steps(hidden: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain local SGD runs the MLP's ``stacked_local_sgd`` (the updates folded into ``baddbmm_``, Wᵀ kept
    for widening layers): equal to float rounding to Q steps of its ``stacked_loss_and_grads`` (the path a
    gradient hook takes), and every client's result independent of the chunking, bit for bit."""
    torch.manual_seed(0)
    fm = FunctionalModel(build_model("mlp", input_shape=(9,), num_classes=4, hidden=hidden), (9,))
    gen = torch.Generator().manual_seed(3)
    x, y = torch.randn((400, 9), generator=gen) * 3, torch.randint(0, 4, (400,), generator=gen)
    batches = torch.randint(0, 400, (40, 3, 6), generator=gen)
    start = torch.randn((40, fm.dim), generator=gen) * 0.3
    calls = []
    in_place = fm.module.stacked_local_sgd
    monkeypatch.setattr(fm.module, "stacked_local_sgd", lambda *a: calls.append(1) or in_place(*a))

    def run(options: EngineOptions, **hook: object) -> LocalResult:
        return Engine(options).local_sgd(fm, start, x, y, batches, learning_rate=0.3, **hook)  # type: ignore[arg-type]

    whole, chunked = run(EngineOptions()), run(EngineOptions(chunk_size=7))
    assert len(calls) == 1 + 6
    stepped = run(EngineOptions(), grad_hook=lambda step, ids, grads: grads)
    assert len(calls) == 7  # a hook needs each step's gradients: the step-by-step path
    torch.testing.assert_close(whole.params, stepped.params, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(whole.loss, stepped.loss, rtol=1e-5, atol=1e-6)
    assert not torch.equal(whole.params, start)
    assert torch.equal(whole.params, chunked.params) and torch.equal(whole.loss, chunked.loss)


def _vmap_and_stacked_losses_and_grads(
    fm: FunctionalModel, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor
) -> list[list[torch.Tensor]]:
    """[losses, *autograd gradients] of the weighted batch losses through ``vmap`` and through the stacked
    forward pass."""
    results = []
    for losses_fn in (vmap(fm.named_example_losses), fm.stacked_example_losses):
        leaves = [v.detach().clone().requires_grad_(True) for v in fm.spec.unflatten(flat).values()]
        per_client = (losses_fn(dict(zip(fm.spec.names, leaves, strict=True)), x, y) * w).sum(1)
        results.append([per_client.detach(), *torch.autograd.grad(per_client.sum(), leaves)])
    return results


def _assert_stacked_engine_is_the_vmap_engine(
    fm: FunctionalModel,
    flat: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    gen: torch.Generator,
    *,
    exact: bool = True,
) -> None:
    """Whole local SGD on the examples of ``x`` ([k, b, 9]): the default (stacked) engine equals the vmap
    engine bit for bit (``exact``) or to float rounding."""
    k, b = x.shape[0], x.shape[1]
    data_x, data_y = x.reshape(k * b, 9), y.reshape(k * b)
    batches = torch.randint(0, k * b, (k, 3, 4), generator=gen)
    runs = [
        Engine(EngineOptions(model_fast_path=fast)).local_sgd(
            fm, flat, data_x, data_y, batches, learning_rate=0.3
        )
        for fast in (True, False)
    ]
    if exact:
        assert torch.equal(runs[0].params, runs[1].params) and torch.equal(runs[0].loss, runs[1].loss)
    else:
        scale = float(runs[1].params.abs().max())  # float32 rounding is relative to the largest entries
        torch.testing.assert_close(runs[0].params, runs[1].params, rtol=1e-5, atol=1e-5 * scale)
        torch.testing.assert_close(runs[0].loss, runs[1].loss, rtol=1e-5, atol=1e-6)
        assert not torch.equal(runs[0].params, flat)  # the steps moved the models


def test_rows_is_advanced_indexing() -> None:
    data = torch.randn(50, 3, 2)
    index = torch.randint(0, 50, (4, 5, 6))
    assert torch.equal(_rows(data, index), data[index])
    assert torch.equal(_rows(data[:, 0, 0], index[0]), data[:, 0, 0][index[0]])


def _config(algorithm: dict) -> object:
    return parse_config(
        {
            "seed": 5,
            "rounds": 4,
            "eval_every": 2,
            "checkpoint_every": 2,
            "dataset": {"name": "digits"},
            "partition": {"scheme": "iid", "num_clients": 30},
            "model": {"name": "logreg"},
            "algorithm": {"cohort_size": 30, "num_local_steps": 2, "batch_size": 5, **algorithm},
            "privacy": {"reproducible": True},  # two runs compared bit for bit
        }
    )


def _digest(folder: Path) -> tuple[list[dict], list[bytes]]:
    lines = read_lines(folder, diagnostics=True)
    for line in lines:
        line.pop("wall_seconds")
    state = torch.load(folder / "checkpoint.pt", weights_only=False)["algorithm"]
    return lines, [v.numpy().tobytes() for _, v in sorted(state.items()) if torch.is_tensor(v)]


@pytest.mark.parametrize(
    "algorithm",
    [
        {"name": "fedavg", "local_sampling": "wr"},
        {"name": "dp_fedavg", "clip": 0.5, "noise_multiplier": 1.0},
    ],
)
def test_runs_are_bit_identical_to_per_client_draws(tmp_path: Path, algorithm: dict) -> None:
    """30 clients of ~40 digits, Q·b = 10: the block draw and Floyd's choice are used (cohort >= 24); with
    the block draw and the autograd-free gradients disabled numpy draws client by client and autograd
    differentiates, as before issue 17. A resumed run matches too."""
    config = _config(algorithm)
    with (
        mock.patch.object(sampling, "_BLOCK_FROM", 10**9),
        mock.patch.object(LogisticRegression, "stacked_loss_and_grads", lambda *_: None),
    ):
        run_experiment(config, tmp_path / "loop", progress=False, plots=False)  # type: ignore[arg-type]
    run_experiment(config, tmp_path / "block", progress=False, plots=False)  # type: ignore[arg-type]
    resumed = tmp_path / "resumed"
    run_experiment(config, resumed, progress=False, plots=False, stop_after=1)  # type: ignore[arg-type]
    run_experiment(config, resumed, progress=False, plots=False, resume=True)  # type: ignore[arg-type]
    want = _digest(tmp_path / "loop")
    assert len(want[0]) == 2 and want[0][-1]["accuracy"] > 0.1
    assert _digest(tmp_path / "block") == want and _digest(resumed) == want
    assert np.isfinite(want[0][-1]["train_loss"])


def test_full_fixed_cohort_skips_the_draw_and_gives_the_drawn_cohort() -> None:
    from ampfl.fl.algorithms.base import ROLE_SAMPLING
    from ampfl.fl.run.experiment import build_algorithm, build_task

    config = _config({"name": "fedavg"})
    algorithm = build_algorithm(config, build_task(config))  # type: ignore[arg-type]
    sampler = algorithm.sampler  # type: ignore[attr-defined]
    assert sampler.cohort_size == sampler.num_clients == 30
    for r in range(3):
        drawn = sampler.sample(r, algorithm.rng(r, ROLE_SAMPLING))
        got = algorithm.participants(sampler, r)  # type: ignore[attr-defined]
        assert got.dtype == drawn.dtype and np.array_equal(got, drawn)
