"""The engine: vectorised = sequential reference (1e-5), chunking invariance, per-example clipping."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from ampfl.fl.engine.low_rank import LowRankLinear
from ampfl.fl.engine.vectorised import Engine, EngineOptions, FunctionalModel
from ampfl.fl.models import build_model

CASES = [
    ("logreg", (6,), 2, {"gamma": 0.05, "init_std": 0.3}),
    ("logreg", (6,), 3, {"bias": True, "init_std": 0.3}),
    ("mlp", (6,), 3, {"hidden": (8,)}),
    ("cnn", (1, 28, 28), 4, {}),
]


def _setup(name: str, shape: tuple[int, ...], classes: int, opts: dict, k: int = 5, q: int = 3, b: int = 4):
    torch.manual_seed(0)
    fm = FunctionalModel(build_model(name, input_shape=shape, num_classes=classes, **opts), shape)
    gen = torch.Generator().manual_seed(1)
    n = 64
    x = torch.randn((n, *shape), generator=gen)
    y = torch.randint(0, classes, (n,), generator=gen)
    batches = torch.randint(0, n, (k, q, b), generator=gen)
    start = fm.initial() + 0.05 * torch.randn((k, fm.dim), generator=gen)
    return fm, x, y, batches, start


@pytest.mark.parametrize("name,shape,classes,opts", CASES)
@pytest.mark.parametrize("clip", [None, 0.3])
def test_vectorised_equals_sequential(
    name: str, shape: tuple[int, ...], classes: int, opts: dict, clip: float | None
) -> None:
    fm, x, y, batches, start = _setup(
        name, shape, classes, opts, k=2 if name == "cnn" else 5, q=2 if name == "cnn" else 3
    )
    weights = torch.rand(batches.shape, generator=torch.Generator().manual_seed(2))
    kw = dict(learning_rate=0.02 if name == "cnn" else 0.2, per_sample_clip=clip, weights=weights)
    vec = Engine().local_sgd(fm, start, x, y, batches, **kw)
    seq = Engine(EngineOptions(vectorized=False)).local_sgd(fm, start, x, y, batches, **kw)
    assert torch.allclose(vec.params, seq.params, atol=1e-5, rtol=0)
    assert torch.allclose(vec.loss, seq.loss, atol=1e-5, rtol=0)
    assert not torch.allclose(vec.params, start)  # something was trained


@pytest.mark.parametrize("chunk", [1, 2, 4])
def test_chunking_gives_same_result(chunk: int) -> None:
    fm, x, y, batches, start = _setup("mlp", (6,), 3, {"hidden": (8,)}, k=7)

    def hook(step: int, ids: np.ndarray, g: torch.Tensor) -> torch.Tensor:
        # randomness derived from the client id only, so chunking cannot change it
        noise = torch.stack(
            [
                torch.randn(g.shape[1], generator=torch.Generator().manual_seed(int(i) * 10 + step))
                for i in ids
            ]
        )
        return g + 0.01 * noise

    ids = np.arange(100, 107)
    whole = Engine(EngineOptions(chunk_size=100)).local_sgd(
        fm, start, x, y, batches, learning_rate=0.1, client_ids=ids, grad_hook=hook
    )
    parts = Engine(EngineOptions(chunk_size=chunk)).local_sgd(
        fm, start, x, y, batches, learning_rate=0.1, client_ids=ids, grad_hook=hook
    )
    assert torch.allclose(whole.params, parts.params, atol=1e-6, rtol=0)
    seq = Engine(EngineOptions(vectorized=False)).local_sgd(
        fm, start, x, y, batches, learning_rate=0.1, client_ids=ids, grad_hook=hook
    )
    assert torch.allclose(whole.params, seq.params, atol=1e-5, rtol=0)


def test_memory_cap_sets_chunk_size() -> None:
    fm = FunctionalModel(build_model("cnn", input_shape=(1, 28, 28), num_classes=10), (1, 28, 28))
    small = Engine(EngineOptions(memory_cap_mb=8)).chunk_size(fm, 50)
    large = Engine(EngineOptions(memory_cap_mb=4096)).chunk_size(fm, 50)
    assert 1 <= small < large
    assert Engine(EngineOptions(chunk_size=3)).chunk_size(fm, 50) == 3


def test_plain_sgd_step_by_hand() -> None:
    # one client, one step, logistic loss at w = 0: grad = -(1/2) mean(y x) with y in {-1, +1}
    fm = FunctionalModel(build_model("logreg", input_shape=(2,), num_classes=2), (2,))
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    y = torch.tensor([1, 0])
    res = Engine().local_sgd(fm, torch.zeros(2), x, y, torch.tensor([[[0, 1]]]), learning_rate=1.0)
    assert torch.allclose(res.params, torch.tensor([[0.25, -0.5]]))
    assert torch.allclose(res.loss, torch.tensor([np.log(2.0)], dtype=torch.float32))


def test_clipped_gradient_sum() -> None:
    fm, x, y, _, start = _setup("logreg", (6,), 2, {"init_std": 0.5}, k=4)
    idx = torch.randint(0, 64, (4, 1, 9), generator=torch.Generator().manual_seed(5))
    mask = (torch.rand((4, 1, 9), generator=torch.Generator().manual_seed(6)) < 0.6).to(torch.float32)
    res = Engine().clipped_gradient_sum(fm, start, x, y, idx, mask, clip=0.1)
    ref = Engine(EngineOptions(vectorized=False)).clipped_gradient_sum(fm, start, x, y, idx, mask, clip=0.1)
    assert torch.allclose(res.params, ref.params, atol=1e-6)
    # each per-example gradient has norm <= C, so ||g_i|| <= C * |S_i|
    assert bool((torch.linalg.vector_norm(res.params, dim=1) <= 0.1 * mask.sum((1, 2)) + 1e-6).all())
    # by hand for client 0: sum over masked examples of clipped autograd gradients
    manual = torch.zeros(fm.dim)
    for j in range(9):
        if mask[0, 0, j] > 0:
            w = start[0].clone().requires_grad_(True)
            (g,) = torch.autograd.grad(fm.one_example_loss(w, x[idx[0, 0, j]], y[idx[0, 0, j]]), w)
            manual += g * min(1.0, 0.1 / float(g.norm()))
    assert torch.allclose(res.params[0], manual, atol=1e-6)


def test_accuracy_of_stacked_models() -> None:
    fm = FunctionalModel(build_model("logreg", input_shape=(2,), num_classes=2), (2,))
    x = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]])
    y = torch.tensor([1, 0, 1])
    params = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    acc = Engine().accuracy(fm, params, x, y, batch_size=2)
    assert acc.tolist() == [1.0, 0.0]
    assert float(Engine().accuracy(fm, params[0], x, y)) == 1.0
    # scored only on the marked labels: model 0 on label 1 (2/2 right), model 1 on label 0 (0/1 right)
    mask = torch.tensor([[False, True], [True, False]])
    assert Engine().accuracy(fm, params, x, y, label_mask=mask).tolist() == [1.0, 0.0]
    assert Engine().accuracy(fm, -params, x, y, label_mask=mask).tolist() == [0.0, 1.0]


def test_bad_inputs() -> None:
    fm, x, y, batches, start = _setup("logreg", (6,), 2, {})
    with pytest.raises(ValueError, match="start must have shape"):
        Engine().local_sgd(fm, start[:2], x, y, batches, learning_rate=0.1)
    with pytest.raises(ValueError, match="per_sample_clip"):
        Engine().local_sgd(fm, start, x, y, batches, learning_rate=0.1, per_sample_clip=0.0)
    with pytest.raises(ValueError, match="chunk_size"):
        EngineOptions(chunk_size=0)


@pytest.mark.parametrize("chunk", [None, 2])
def test_cnn_fast_path_equals_vmap_path(chunk: int | None) -> None:
    # EngineOptions(model_fast_path=True) (the CNN's forward_stacked) against the generic vmap path, with a
    # gradient hook and chunking; both equal to 1e-5.
    fm, x, y, batches, start = _setup("cnn", (1, 28, 28), 4, {}, k=3, q=2, b=3)
    assert fm.has_stacked_forward

    def hook(step: int, ids: np.ndarray, g: torch.Tensor) -> torch.Tensor:
        return 0.5 * g + 0.001 * step

    kw = dict(learning_rate=0.05, client_ids=np.arange(3), grad_hook=hook)
    fast = Engine(EngineOptions(chunk_size=chunk)).local_sgd(fm, start, x, y, batches, **kw)
    slow = Engine(EngineOptions(chunk_size=chunk, model_fast_path=False)).local_sgd(
        fm, start, x, y, batches, **kw
    )
    assert torch.allclose(fast.params, slow.params, atol=1e-5, rtol=0)
    assert torch.allclose(fast.loss, slow.loss, atol=1e-5, rtol=0)
    assert not torch.allclose(fast.params, start)
    plain = Engine().local_sgd(fm, start[0], x, y, batches, learning_rate=0.05)
    plain_ref = Engine(EngineOptions(vectorized=False)).local_sgd(
        fm, start[0], x, y, batches, learning_rate=0.05
    )
    assert torch.allclose(plain.params, plain_ref.params, atol=1e-5, rtol=0)


@pytest.mark.parametrize("shared,q,b,chunk", [(False, 3, 3, None), (True, 3, 3, 2), (True, 3, 50, None)])
def test_cnn_low_rank_path_equals_vmap_path(
    shared: bool, q: int, b: int, chunk: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without a hook the fast path keeps the first FC layer as base + low-rank update (low_rank_local_sgd,
    # LowRankLinear): per-client starts (a [k, d] base) or one shared start ([d]: one base matrix), chunked,
    # and q·b = 150 > max_rank = 128 (the factors are folded into a dense base once). It must equal the
    # generic vmap path and the sequential reference to 1e-5.
    fm, x, y, batches, start = _setup("cnn", (1, 28, 28), 4, {}, k=3, q=q, b=b)
    assert fm.fused_linear_names == ("classifier.0.weight",)
    folds = []
    dense = LowRankLinear._dense
    monkeypatch.setattr(LowRankLinear, "_dense", lambda self: folds.append(self.rank) or dense(self))
    first = start[0] if shared else start
    weights = torch.rand(batches.shape, generator=torch.Generator().manual_seed(4)) * (3 / b)
    kw = dict(learning_rate=0.05, weights=weights)
    fast = Engine(EngineOptions(chunk_size=chunk)).local_sgd(fm, first, x, y, batches, **kw)
    slow = Engine(EngineOptions(model_fast_path=False)).local_sgd(fm, first, x, y, batches, **kw)
    seq = Engine(EngineOptions(vectorized=False)).local_sgd(fm, first, x, y, batches, **kw)
    for ref in (slow, seq):
        assert torch.allclose(fast.params, ref.params, atol=1e-5, rtol=0)
        assert torch.allclose(fast.loss, ref.loss, atol=1e-5, rtol=0)
    assert folds == ([150] if b == 50 else [])
    moved = fast.params - first
    assert float(moved[:, fm.spec.slice_of("classifier.0.weight")].abs().max()) > 0  # the layer trained


@pytest.mark.parametrize(
    "name,chunk", [("cnn", None), ("cnn", 2), ("logreg", None), ("logreg", 2), ("mlp", None), ("mlp", 2)]
)
def test_average_equals_mean_of_the_clients(name: str, chunk: int | None) -> None:
    # local_sgd(average=True) gives the clients' mean parameters ([d]) and the same losses; for the CNN from
    # the low-rank factors without forming the K models (LowRankLinear.add_sum), else each chunk adding the
    # sum of its rows (chunks of 2 of 5 clients: a shorter last chunk).
    case = next(c for c in CASES if c[0] == name)
    fm, x, y, batches, start = _setup(*case, k=5, q=2, b=3)
    engine = Engine(EngineOptions(chunk_size=chunk))
    for first in (start[0], start):
        kw = dict(learning_rate=0.05)
        every = engine.local_sgd(fm, first, x, y, batches, **kw)
        mean = engine.local_sgd(fm, first, x, y, batches, average=True, **kw)
        assert mean.params.shape == (fm.dim,)
        assert torch.allclose(mean.params, every.params.mean(0), atol=1e-6, rtol=0)
        assert torch.allclose(mean.loss, every.loss, atol=1e-6, rtol=0)
        seq = Engine(EngineOptions(vectorized=False)).local_sgd(fm, first, x, y, batches, average=True, **kw)
        assert torch.allclose(mean.params, seq.params, atol=1e-5, rtol=0)
    empty = engine.local_sgd(fm, start[0], x, y, batches[:0], learning_rate=0.05, average=True)
    assert empty.params.shape == (fm.dim,) and empty.loss.shape == (0,)


def test_cnn_evaluation_through_stacked_forward() -> None:
    # The CNN's test accuracy is computed through forward_stacked (channels-last convolutions, also for one
    # model); it must equal the vmap path's, per label and for one or several models.
    fm, x, y, _, start = _setup("cnn", (1, 28, 28), 4, {}, k=3)
    fast, slow = Engine(), Engine(EngineOptions(model_fast_path=False))
    for params in (start, start[:1]):
        assert torch.equal(fast.class_accuracy(fm, params, x, y, 4), slow.class_accuracy(fm, params, x, y, 4))
    assert torch.equal(fast.accuracy(fm, start[0], x, y, batch_size=16), slow.accuracy(fm, start[0], x, y))
    assert 0 < float(fast.accuracy(fm, start[0], x, y)) < 1


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("max_rank", [100, 5])
def test_low_rank_linear_equals_dense_updates(shared: bool, max_rank: int) -> None:
    # LowRankLinear against explicit weight matrices updated W_i <- W_i - lr dz_i^T h_i: outputs z, input
    # gradients and the final weights, over 4 steps of b = 3 rows (max_rank = 5 folds after steps 2 and 4).
    gen = torch.Generator().manual_seed(7)
    k, b, n_in, n_out, lr = 3, 3, 6, 4, 0.3
    base = torch.randn((n_out, n_in) if shared else (k, n_out, n_in), generator=gen)
    dense = base.expand(k, n_out, n_in).clone()
    layer = LowRankLinear(base, k, max_rank=max_rank)
    for _ in range(4):
        h = torch.randn((k, b, n_in), generator=gen, requires_grad=True)
        probe = torch.randn((k, b, n_out), generator=gen)
        z = layer(h)
        assert torch.allclose(z, torch.bmm(h, dense.transpose(1, 2)), atol=1e-5)
        (gh, gz) = torch.autograd.grad((z * probe).sum(), [h, z])
        assert torch.allclose(gh, torch.bmm(probe, dense), atol=1e-5)
        layer.step(gz, lr)
        dense = dense - lr * torch.bmm(probe.transpose(1, 2), h.detach())
    out = torch.full((k, n_out, n_in), float("nan"))
    layer.write(out)
    assert torch.allclose(out, dense, atol=1e-5)
    total = torch.ones(n_out, n_in)
    layer.add_sum(total)
    assert torch.allclose(total, 1 + dense.sum(0), atol=1e-5)
    assert layer.rank == (0 if max_rank == 5 else 12)
    with pytest.raises(RuntimeError, match="forward call"):
        layer.step(gz, lr)
    with pytest.raises(ValueError, match="base must have shape"):
        LowRankLinear(torch.zeros(2, n_out, n_in), k)


def test_low_rank_path_only_without_penalty_hook_or_clip() -> None:
    # The low-rank path needs R(w) = 0 (no gradient reaches W except through z = h W^T), plain SGD and
    # the model's stacked forward; otherwise the gradient path runs.
    fm, *_ = _setup("cnn", (1, 28, 28), 4, {}, k=2, q=1, b=2)
    names = ("classifier.0.weight",)
    assert Engine()._low_rank_names(fm, None, None) == names
    assert Engine()._low_rank_names(fm, 0.5, None) == ()
    assert Engine()._low_rank_names(fm, None, lambda r, i, g: g) == ()
    assert Engine(EngineOptions(model_fast_path=False))._low_rank_names(fm, None, None) == ()
    assert Engine(EngineOptions(vectorized=False))._low_rank_names(fm, None, None) == ()

    class Penalised(type(fm.module)):  # type: ignore[misc]
        def penalty(self, params: dict[str, torch.Tensor]) -> torch.Tensor:
            return (params["classifier.0.weight"] ** 2).sum()

    penalised = FunctionalModel(Penalised(input_shape=(1, 28, 28), num_classes=4), (1, 28, 28))
    assert Engine()._low_rank_names(penalised, None, None) == ()


@pytest.mark.skipif(
    not Path("/proc/self/smaps_rollup").exists()
    or "[madvise]" not in Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text(),
    reason="needs Linux with transparent huge pages on request (madvise)",
)
@pytest.mark.parametrize("explicit", [None, "0"])
def test_ampfl_command_asks_torch_for_huge_pages(explicit: str | None) -> None:
    # ampfl.cli._prefer_huge_pages sets PyTorch's THP_MEM_ALLOC_ENABLE before torch loads (an explicit value
    # wins): a 64 MB tensor then lies on 2 MB pages (issue 32: no page faults per step).
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    if explicit is not None:
        env["THP_MEM_ALLOC_ENABLE"] = explicit
    code = (
        "import re; import ampfl.cli as c; c._prefer_huge_pages(); import torch; t = torch.ones(2**24); "
        "print(re.search(r'AnonHugePages:\\s+(\\d+)', open('/proc/self/smaps_rollup').read()).group(1))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert (int(out.stdout) > 0) == (explicit is None)


@pytest.mark.parametrize("capacity", [None, 2, 4, 64])
@pytest.mark.parametrize("max_rank", [3, 100])
def test_low_rank_linear_matches_dense_sgd(capacity: int | None, max_rank: int) -> None:
    """W_i after steps W_i ← W_i − η (∂L/∂z_i)ᵀ h_i, and z = h W_iᵀ before each, equal the dense matrices'
    whether the factor buffers were reserved too small (grown), large enough, or folded (rank > max_rank)."""
    gen = torch.Generator().manual_seed(3)
    k, b, n_in, n_out, lr = 3, 2, 7, 5, 0.3
    base = torch.randn(n_out, n_in, generator=gen, dtype=torch.float64)
    layer = LowRankLinear(base, k, max_rank=max_rank, capacity=capacity)
    dense = base.expand(k, n_out, n_in).clone()
    for _ in range(6):
        h = torch.randn(k, b, n_in, generator=gen, dtype=torch.float64)
        torch.testing.assert_close(layer(h), torch.bmm(h, dense.transpose(1, 2)))
        grad_z = torch.randn(k, b, n_out, generator=gen, dtype=torch.float64)
        layer.step(grad_z, lr)
        dense -= lr * torch.bmm(grad_z.transpose(1, 2), h)
    out = torch.empty(k, n_out, n_in, dtype=torch.float64)
    layer.write(out)
    torch.testing.assert_close(out, dense)
    total = torch.zeros(n_out, n_in, dtype=torch.float64)
    layer.add_sum(total)
    torch.testing.assert_close(total, dense.sum(0))
    torch.testing.assert_close(layer.dense_update(), dense - base)
