"""The clipped sum of a cohort's updates (``Engine.local_sgd(clip_updates=C)``): from the low-rank factors
(ampfl.fl.engine.clipping) it equals the clip of the formed K models to float32 rounding, and the clip bound
holds exactly; elsewhere it is the old computation bit for bit; DP-FedAvg's round through it. Also the CPU's
chunk cap and kept heap (the engine's allocation settings)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from numpy.testing import assert_allclose

from ampfl.fl.algorithms.base import ROLE_NOISE
from ampfl.fl.algorithms.dp_fedavg import DPFedAvg
from ampfl.fl.config import PrivacyConfig
from ampfl.fl.data import Dataset
from ampfl.fl.engine import clipping
from ampfl.fl.engine.clipping import clip_rows, factored_norms_sq
from ampfl.fl.engine.vectorised import Engine, EngineOptions, FunctionalModel
from ampfl.fl.models import build_model
from ampfl.fl.models.base import FLModel
from ampfl.fl.models.linear import LogisticRegression
from ampfl.fl.models.mlp import MLP
from ampfl.fl.task import Task

Linears = dict[str, Callable[[torch.Tensor], torch.Tensor]] | None


class StackedMLP(MLP):
    """The MLP (one hidden layer) with a stacked forward pass whose first layer the engine keeps low-rank."""

    fused_linear_weights = ("net.0.weight",)

    def forward_stacked(self, params: dict[str, torch.Tensor], x: torch.Tensor, *, linears: Linears = None):  # type: ignore[no-untyped-def]
        h = x.flatten(start_dim=2)
        name = "net.0.weight"
        z = linears[name](h) if linears else torch.bmm(h, params[name].transpose(1, 2))
        h = torch.relu(z + params["net.0.bias"][:, None])
        return torch.baddbmm(params["net.2.bias"][:, None], h, params["net.2.weight"].transpose(1, 2))


class StackedLogreg(LogisticRegression):
    """Logistic regression (γ = 0, with a bias) whose weight the engine keeps low-rank."""

    fused_linear_weights = ("linear.weight",)
    penalty = FLModel.penalty  # γ = 0: no gradient reaches W except through z = h Wᵀ

    def forward_stacked(self, params: dict[str, torch.Tensor], x: torch.Tensor, *, linears: Linears = None):  # type: ignore[no-untyped-def]
        h = x.flatten(start_dim=2)
        name = "linear.weight"
        out = linears[name](h) if linears else torch.bmm(h, params[name].transpose(1, 2))
        out = params["linear.bias"][:, None, :] + out
        return out.squeeze(-1) if self.binary else out

    def penalty_stacked(self, params: dict[str, torch.Tensor]) -> torch.Tensor:
        return params["linear.bias"].new_zeros(params["linear.bias"].shape[0])


def _case(name: str, k: int = 6, q: int = 3, b: int = 4):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    if name == "cnn":
        shape, classes = (1, 28, 28), 4
        module: FLModel = build_model("cnn", input_shape=shape, num_classes=classes)
    elif name == "mlp":
        shape, classes = (40,), 5  # max_rank 20 ≥ q·b: the factors are kept
        module = StackedMLP(input_shape=shape, num_classes=classes, hidden=(48,))
    elif name == "logreg":  # 30 classes: max_rank 15 ≥ q·b, the factors are kept
        shape, classes = (40,), 30
        module = StackedLogreg(input_shape=shape, num_classes=classes, init_std=0.1, bias=True)
    else:  # binary logreg: one output row, max_rank 0: the factors are folded at every step
        shape, classes = (10,), 2
        module = StackedLogreg(input_shape=shape, num_classes=classes, init_std=0.1, bias=True)
    fm = FunctionalModel(module, shape)
    gen = torch.Generator().manual_seed(1)
    n = 64
    x = torch.randn((n, *shape), generator=gen)
    y = torch.randint(0, classes, (n,), generator=gen)
    batches = torch.randint(0, n, (k, q, b), generator=gen)
    # different step sizes: clients with very different update norms
    lr = torch.linspace(0.01, 0.1, k) if name == "cnn" else torch.linspace(0.05, 0.6, k)
    weights = (lr[:, None, None] / b).expand(k, q, b).contiguous()
    return fm, x, y, batches, weights


def _full(fm: FunctionalModel, start: torch.Tensor, x, y, batches, weights, clip: float):  # type: ignore[no-untyped-def]
    """The K models formed (the same local steps, then LowRankLinear.write: DP-FedAvg's computation before the
    clipped sum), their updates clipped by clip_rows and summed."""
    engine = Engine()
    res = engine.local_sgd(fm, start, x, y, batches, learning_rate=1.0, weights=weights)
    clipped, norms = clip_rows(res.params - start, clip)
    return clipped.sum(0), norms, res.loss


def test_factored_norms_equal_the_formed_matrices() -> None:
    # ‖Σ_s u_s h_sᵀ‖²_F from the two Gram matrices, against the formed [out, in] matrices (float64), also
    # with factors that nearly cancel (the error bound must then cover the difference).
    gen = torch.Generator().manual_seed(3)
    hs, us = torch.randn((4, 6, 9), generator=gen), torch.randn((4, 6, 5), generator=gen)
    us[3, 3:] = -us[3, :3] * (1 + 1e-4)  # client 3: steps 4-6 undo steps 1-3 but for 1e-4
    hs[3, 3:] = hs[3, :3]
    sq, err = factored_norms_sq(hs, us)
    formed = torch.bmm(us.double().transpose(1, 2), hs.double()).square().sum((1, 2))
    assert_allclose(sq[:3].numpy(), formed[:3].numpy(), rtol=1e-12)
    assert bool(((sq - formed).abs() <= err).all())  # also for the cancelling client (2e-8 relative off)
    assert float(sq[3]) < 1e-6 * float(sq[:3].min())  # the cancelling client is small


@pytest.mark.parametrize("name", ["cnn", "mlp", "logreg", "binary"])
@pytest.mark.parametrize("shared,chunk", [(True, None), (True, 4), (False, None)])
def test_clipped_sum_from_factors_equals_full_models(
    name: str, shared: bool, chunk: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    fm, x, y, batches, weights = _case(name)
    k = batches.shape[0]
    gen = torch.Generator().manual_seed(2)
    start = fm.initial() if shared else fm.initial() + 0.05 * torch.randn((k, fm.dim), generator=gen)
    _, norms_ref, _ = _full(fm, start, x, y, batches, weights, 1.0)
    clip = float(norms_ref.median())  # about half of the clients are clipped
    total_ref, norms_ref, loss_ref = _full(fm, start, x, y, batches, weights, clip)
    assert 0 < int((norms_ref > clip).sum()) < k
    calls: list[int] = []
    kept = clipping.factored_norms_sq
    monkeypatch.setattr(clipping, "factored_norms_sq", lambda h, u: calls.append(h.shape[0]) or kept(h, u))
    engine = Engine(EngineOptions(chunk_size=chunk))
    got = engine.local_sgd(fm, start, x, y, batches, learning_rate=1.0, weights=weights, clip_updates=clip)
    assert got.params.shape == (fm.dim,) and got.norms is not None
    assert sum(calls) == (0 if name == "binary" else k)  # the norms came from the factors (binary: folded)
    assert_allclose(got.norms.numpy(), norms_ref.numpy(), rtol=1e-5)
    assert_allclose(got.loss.numpy(), loss_ref.numpy(), rtol=1e-5, atol=1e-6)
    scale = float(total_ref.abs().max())
    assert_allclose(got.params.numpy(), total_ref.numpy(), rtol=1e-5, atol=1e-5 * scale)


@pytest.mark.parametrize("name", ["cnn", "mlp", "binary"])
def test_every_clipped_update_is_within_the_bound(name: str) -> None:
    # One client per call: the returned sum is that client's clipped update; its norm (float64) is at most
    # C for updates far above C and exactly equal to it for one at C (the margin of NORM_MARGIN).
    fm, x, y, batches, weights = _case(name, k=3)
    engine = Engine()
    for i in range(3):
        one = (fm, fm.initial(), x, y, batches[i : i + 1])
        full = engine.local_sgd(*one, learning_rate=1.0, weights=weights[i : i + 1], clip_updates=1e9)
        assert full.norms is not None
        for clip in (float(full.norms[0]) / 100, float(full.norms[0])):
            got = engine.local_sgd(*one, learning_rate=1.0, weights=weights[i : i + 1], clip_updates=clip)
            assert float(got.params.double().norm()) <= clip
            assert float(got.params.double().norm()) >= clip * (1 - 1e-5)


@pytest.mark.parametrize("name", ["logreg", "mlp"])
def test_clipped_sum_without_factors_is_the_old_computation(name: str) -> None:
    # Models without a low-rank path: the K models, clip_rows and their sum, bit for bit.
    torch.manual_seed(0)
    fm = FunctionalModel(build_model(name, input_shape=(6,), num_classes=3), (6,))
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn((40, 6), generator=gen), torch.randint(0, 3, (40,), generator=gen)
    batches = torch.randint(0, 40, (7, 2, 3), generator=gen)
    engine = Engine()
    every = engine.local_sgd(fm, fm.initial(), x, y, batches, learning_rate=0.5)
    clipped, norms = clip_rows(every.params - fm.initial(), 0.05)
    got = engine.local_sgd(fm, fm.initial(), x, y, batches, learning_rate=0.5, clip_updates=0.05)
    assert got.norms is not None
    assert torch.equal(got.params, clipped.sum(0)) and torch.equal(got.norms, norms)
    assert torch.equal(got.loss, every.loss)


def _dp_fedavg(model: str, shape: tuple[int, ...], clients: int = 6) -> tuple[DPFedAvg, DPFedAvg]:
    rng = np.random.default_rng(0)
    n = 8 * clients
    x = rng.normal(size=(n, *shape)).astype(np.float32)
    y = rng.integers(0, 3, size=n).astype(np.int64)
    ds = Dataset("tiny", x, y, x[:6].copy(), y[:6].copy(), 3)
    task = Task(ds, [np.arange(8 * i, 8 * i + 8) for i in range(clients)], model=model)
    params = DPFedAvg.Params(
        cohort_size=5, num_local_steps=2, batch_size=4, learning_rate=0.3, clip=0.5, noise_multiplier=1.0
    )
    privacy = PrivacyConfig.model_validate({"reproducible": True})
    return DPFedAvg(params, task, seed=0, privacy=privacy), DPFedAvg(params, task, seed=0, privacy=privacy)


@pytest.mark.parametrize("model,shape", [("cnn", (1, 28, 28)), ("logreg", (5,)), ("mlp", (5,))])
def test_dp_fedavg_round_equals_clipping_the_formed_models(model: str, shape: tuple[int, ...]) -> None:
    # DP-FedAvg's round (the engine's clipped sum) against the K models clipped by clip_updates: the same
    # released model up to float rounding for the CNN (factors), bit for bit for the others.
    new, old = _dp_fedavg(model, shape)
    metrics = new.run_round(0)
    clients = old.participants(old.sampler, 0)
    result = old.cohort_local_sgd(old.global_params, clients, 0, old.p)
    clipped, norms = old.clip_updates(result.params - old.global_params)
    released = old.server_update(clipped.sum(0), len(clients), old.torch_generator(0, ROLE_NOISE))
    assert metrics["clipped_fraction"] == float((norms > 0.5).float().mean())
    assert metrics["train_loss"] == pytest.approx(float(result.loss.mean()), rel=1e-6)
    if model == "cnn":
        assert 0 < metrics["clipped_fraction"] < 1 or metrics["clipped_fraction"] == 1.0
        assert_allclose(new.global_params.numpy(), released.numpy(), rtol=1e-5, atol=1e-6)
    else:
        assert torch.equal(new.global_params, released)


def test_cpu_chunks_of_the_autograd_free_path_fit_one_step_in_the_working_set() -> None:
    # A wide MLP's step tensors of 512 clients would far exceed CPU_STEP_WORKING_SET_MB: its chunk is the
    # number of clients whose parameters, gradients and activations of one step fit (at least 16); the
    # per-example path, the vmap path and an explicit chunk size are not bounded by it.
    from ampfl.fl.engine.chunking import CPU_MAX_CHUNK, CPU_STEP_WORKING_SET_MB

    wide = FunctionalModel(build_model("mlp", input_shape=(10,), num_classes=4, hidden=[1024]), (10,))
    per_step = 4 * (2 * wide.dim + 10 * (10 + 3 * wide.activation_numel))
    size = Engine().chunk_size(wide, 50, step_examples=10)
    assert size == CPU_STEP_WORKING_SET_MB * 2**20 // per_step and 16 <= size < CPU_MAX_CHUNK
    assert Engine().chunk_size(wide, 50, step_examples=1000) == 16
    assert Engine().chunk_size(wide, 50, step_examples=10, per_sample=True) > size
    assert Engine(EngineOptions(model_fast_path=False)).chunk_size(wide, 50, step_examples=10) > size
    assert Engine(EngineOptions(chunk_size=300)).chunk_size(wide, 50, step_examples=10) == 300
    narrow = FunctionalModel(build_model("mlp", input_shape=(10,), num_classes=4, hidden=[64]), (10,))
    assert Engine().chunk_size(narrow, 50, step_examples=10) == CPU_MAX_CHUNK


def test_cpu_chunks_are_capped_and_the_heap_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    # On the CPU a chunk holds at most CPU_MAX_CHUNK clients (the memory cap decides below it; an explicit
    # chunk_size is kept), and the engine asks glibc to keep freed blocks, unless told not to.
    from ampfl.fl.engine import device
    from ampfl.fl.engine.chunking import CPU_MAX_CHUNK

    fm = FunctionalModel(build_model("logreg", input_shape=(6,), num_classes=2), (6,))
    assert Engine().chunk_size(fm, 50) == CPU_MAX_CHUNK
    assert Engine(EngineOptions(memory_cap_mb=0.01)).chunk_size(fm, 50) < CPU_MAX_CHUNK
    assert Engine(EngineOptions(chunk_size=10**6)).chunk_size(fm, 50) == 10**6
    monkeypatch.setattr(device, "_HEAP_KEPT", [])
    monkeypatch.setenv("AMPFL_KEEP_HEAP", "0")
    assert device.keep_freed_heap(1024.0) is False and device._HEAP_KEPT == []
    monkeypatch.delenv("AMPFL_KEEP_HEAP")
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1000")
    assert device.keep_freed_heap(1024.0) is False
