"""Vectorised execution of the clients' local work.

The engine is the only place that knows about ``torch.func``, ``vmap`` and chunking. A cohort of K clients
is a ``[K, d]`` tensor of flat parameter vectors (see :mod:`ampfl.fl.params`); their mini-batches are a
``[K, Q, b]`` tensor of indices into the training set with optional per-example weights (0 marks padding).

Pipeline of :meth:`Engine.local_sgd` (one call per round):

1. split the cohort into chunks of at most ``chunk_size`` clients (from ``EngineOptions.memory_cap_mb``
   when not given) — every client's result is independent of the chunking (on a CUDA device a chunk that
   runs out of memory is run again in halves);
2. per chunk, gather the examples of all Q steps, then for r = 1..Q:
   g_i = Σ_j w_ij ∇(ℓ(w_i; x_ij, y_ij) + R(w_i)) for all clients at once (the forward pass is ``vmap``-ed
   over clients — or, when the model has ``forward_stacked`` (the CNN), computed by it directly — and
   autograd differentiates Σ_i L_i(w_i) w.r.t. the stacked parameters), or, with
   ``per_sample_clip=C``, g_i = Σ_j w_ij clip_C(∇(ℓ_ij + R)) by ``vmap`` over clients of ``vmap`` over
   examples of ``grad``; optional ``grad_hook(step, client_ids, g)`` (noise, masks);
   w_i ← w_i − η g_i (000 Eq. 2b), in place in one ``[k, d]`` buffer — or, in plain local SGD through
   ``forward_stacked`` (the CNN), with the model's large linear layers kept as the start plus a low-rank
   update (:func:`ampfl.fl.engine.low_rank.low_rank_local_sgd`);
3. return the final parameters (or, with ``average=True``, only their mean: each chunk adds the sum of its
   rows, so the K models are never held at once; the low-rank path forms it without the K models at all)
   and each client's mean loss over its Q steps.

``EngineOptions(vectorized=False)`` runs the sequential reference (:mod:`ampfl.fl.engine.sequential`): a
Python loop over clients and steps with plain autograd (and a loop over examples for per-sample clipping); it
gives the same numbers up to float rounding (tested to 1e-5).

``EngineOptions(device=...)`` (:mod:`ampfl.fl.engine.device`): data, model and each chunk's stacks live there;
the results come back on the caller's device (that of ``start``/``params``), where the server steps and their
privacy randomness stay. On the CPU nothing moves: the operations of before the setting, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch.func import vmap

from ampfl.fl.engine.chunking import clients_per_chunk
from ampfl.fl.engine.clipping import clip_rows, low_rank_clipped_sum
from ampfl.fl.engine.device import (
    default_memory_cap_mb,
    hook_at,
    keep_freed_heap,
    model_on,
    on_device,
    resolve_device,
    use_deterministic_cuda,
)
from ampfl.fl.engine.evaluation import Evaluator
from ampfl.fl.engine.functional_model import FunctionalModel
from ampfl.fl.engine.low_rank import low_rank_local_sgd
from ampfl.fl.engine.sequential import ChunkSteps, autograd_step, local_sgd_sequential
from ampfl.fl.models.base import FLModel

GradHook = Callable[[int, np.ndarray, torch.Tensor], torch.Tensor]
"""``(step, client_ids [k], grads [k, d]) -> grads``; must derive any randomness from the client ids so that
the result does not depend on chunking."""

__all__ = ["Engine", "EngineOptions", "Evaluator", "FunctionalModel", "GradHook", "LocalResult"]


@dataclass(frozen=True)
class EngineOptions:
    """Settings of the engine.

    Attributes:
        chunk_size: most clients per vectorised call; None = derived from ``memory_cap_mb``.
        memory_cap_mb: rough budget of one chunk's working memory, in MiB; None = sized to the device
            (:func:`ampfl.fl.engine.device.default_memory_cap_mb`: 1024 on the CPU, half the free memory of a
            CUDA device when the engine starts).
        vectorized: False runs the sequential per-client reference path.
        model_fast_path: in plain local SGD (no per-example clipping), use the model's own stacked forward
            pass (``forward_stacked``, e.g. the CNN's grouped channels-last convolutions) instead of ``vmap``
            when the model has one; same numbers up to float rounding (tested to 1e-5), faster
            (docs/performance.md). False always uses ``vmap``.
        device: where the clients' work runs: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"``
            (:func:`ampfl.fl.engine.device.resolve_device`; the engine keeps the resolved name).
    """

    chunk_size: int | None = None
    memory_cap_mb: float | None = None
    vectorized: bool = True
    model_fast_path: bool = True
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.chunk_size is not None and self.chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1 or None. Found {self.chunk_size}.")
        if self.memory_cap_mb is not None and not self.memory_cap_mb > 0:
            raise ValueError(f"memory_cap_mb must be > 0. Found {self.memory_cap_mb}.")


@dataclass
class LocalResult:
    """Output of :meth:`Engine.local_sgd`: final parameters ``[K, d]`` and mean training loss ``[K]``
    (with ``clip_updates``: the sum of the clipped updates ``[d]``, and ``norms`` the updates' norms)."""

    params: torch.Tensor
    loss: torch.Tensor
    norms: torch.Tensor | None = None


class Engine:
    """Runs the local work of a cohort, vectorised over clients (or sequentially, as a reference).

    Attributes:
        device: the resolved device (``"cpu"`` or ``"cuda:N"``); on CUDA the engine asks torch for
            deterministic kernels (:func:`ampfl.fl.engine.device.use_deterministic_cuda`).
        memory_cap_mb: the resolved per-chunk budget (``options.memory_cap_mb`` or the device's default).
    """

    def __init__(self, options: EngineOptions | None = None) -> None:
        options = options or EngineOptions()
        self.device = resolve_device(options.device)
        if self.device != "cpu":
            use_deterministic_cuda()  # before the first cuBLAS call reads its workspace setting
        cap = options.memory_cap_mb
        self.memory_cap_mb = float(cap) if cap is not None else default_memory_cap_mb(self.device)
        if self.device == "cpu" and options.vectorized:  # the steps' blocks reused, not mapped anew
            keep_freed_heap(self.memory_cap_mb)
        self.options = replace(options, device=self.device, memory_cap_mb=self.memory_cap_mb)
        #: the evaluation of (stacked) models on the engine's device (:mod:`ampfl.fl.engine.evaluation`)
        self.evaluator = Evaluator(self.device, self.memory_cap_mb, options.model_fast_path)

    def _moves(self, home: torch.device) -> bool:
        """Whether tensors on ``home`` must move to the engine's device."""
        return torch.device(self.device) != home

    # -- planning -------------------------------------------------------------------------------------
    def chunk_size(
        self,
        model: FunctionalModel,
        examples_per_client: int,
        *,
        per_sample: bool = False,
        low_rank: bool = False,
        step_examples: int = 0,
    ) -> int:
        """Clients per vectorised call: ``options.chunk_size``, or
        :func:`ampfl.fl.engine.chunking.clients_per_chunk` on the engine's device and memory budget
        (``step_examples``, the b examples of one step, bounds it only on the model's autograd-free path)."""
        if self.options.chunk_size is not None:
            return self.options.chunk_size
        bounded_examples = step_examples if self._analytic(model) is not None else 0
        return clients_per_chunk(
            model, examples_per_client, memory_cap_mb=self.memory_cap_mb, on_cpu=self.device == "cpu",
            per_sample=per_sample, low_rank=low_rank, step_examples=bounded_examples,
        )  # fmt: skip

    # -- local SGD ------------------------------------------------------------------------------------
    def local_sgd(
        self,
        model: FunctionalModel,
        start: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        batches: torch.Tensor,
        *,
        learning_rate: float,
        weights: torch.Tensor | None = None,
        per_sample_clip: float | None = None,
        client_ids: np.ndarray | None = None,
        grad_hook: GradHook | None = None,
        average: bool = False,
        clip_updates: float | None = None,
    ) -> LocalResult:
        """Q steps of (optionally per-example-clipped) SGD for each of K clients.

        Args:
            model: the functional model.
            start: initial parameters ``[K, d]`` (or ``[d]``, shared by all clients).
            x, y: the whole training set (``[n, *input_shape]``, ``[n]``).
            batches: indices into ``x``/``y``, shape ``[K, Q, b]``.
            learning_rate: η of 000 Eq. (2b).
            weights: per-example weights ``[K, Q, b]``; default 1/b (the mini-batch mean).
            per_sample_clip: clip every example's gradient to this L2 norm before weighting.
            client_ids: ids passed to ``grad_hook`` (default 0..K−1).
            grad_hook: transforms each step's gradients (see :data:`GradHook`).
            average: return the mean of the K final parameter vectors (``params`` of shape ``[d]``, what
                FedAvg keeps, 000 Eq. 3) instead of all of them: the same numbers as ``params.mean(0)`` up
                to float rounding, each chunk adding the sum of its rows (at most one chunk of models is
                held); on the low-rank path (:func:`ampfl.fl.engine.low_rank.low_rank_local_sgd`)
                without forming the K models (one matrix product over all clients' factors instead of K).
            clip_updates: return instead the sum Σ_i clip_C(w_i − start_i) of the updates, each clipped to
                this L2 norm C (``params`` ``[d]``, DP-FedAvg's sum), and their norms ‖w_i − start_i‖
                (``norms`` ``[K]``): as :func:`~ampfl.fl.engine.clipping.clip_rows` of the K updates, the
                same numbers bit for bit, or, on the low-rank path, from the factors without forming the K
                models (:func:`ampfl.fl.engine.clipping.low_rank_clipped_sum`: equal up to float rounding,
                with c_i ‖Δ_i‖ ≤ C exactly).
        """
        k, q, b = batches.shape
        if start.dim() == 1:
            start = start.expand(k, -1)
        if start.shape != (k, model.dim):
            raise ValueError(f"start must have shape {(k, model.dim)}. Found {tuple(start.shape)}.")
        if weights is None:
            weights = torch.full((k, q, b), 1.0 / b)
        if per_sample_clip is not None and not per_sample_clip > 0:
            raise ValueError(f"per_sample_clip must be > 0. Found {per_sample_clip}.")
        ids = np.arange(k) if client_ids is None else np.asarray(client_ids)
        run = self._local_sgd_chunk if self.options.vectorized else local_sgd_sequential
        low_rank = bool(self._low_rank_names(model, per_sample_clip, grad_hook))
        size = (
            self.chunk_size(
                model, q * b, per_sample=per_sample_clip is not None, low_rank=low_rank, step_examples=b
            )
            if self.options.vectorized
            else k
        )
        if clip_updates is not None and not (low_rank and k):
            res = self.local_sgd(
                model, start, x, y, batches, learning_rate=learning_rate, weights=weights,
                per_sample_clip=per_sample_clip, client_ids=client_ids, grad_hook=grad_hook,
            )  # fmt: skip
            clipped, row_norms = clip_rows(res.params - start, clip_updates)
            return LocalResult(clipped.sum(0), res.loss, row_norms)
        norms: list[torch.Tensor] = []  # of the clipped updates, chunk by chunk (clip_updates)
        summed = average or clip_updates is not None  # the chunks add to one [d] vector
        # every chunk writes its rows (no concatenation), or adds the sum of its rows (average): off the
        # low-rank path through one [chunk, d] scratch buffer, so the K models are never held at once
        out = start.new_zeros(model.dim) if summed else start.new_empty(k, model.dim)
        scratch: torch.Tensor | None = None
        home, moved = start.device, self._moves(start.device)
        work = out
        if moved:  # the chunks compute on the device; their rows come back to ``out`` chunk by chunk
            model, x, y = model_on(model, self.device), on_device(x, self.device), on_device(y, self.device)
            shared = k > 0 and start.stride(0) == 0  # one broadcast model: moved once, kept shared
            start = start[0].to(self.device).expand(k, -1) if shared else start.to(self.device)
            batches, weights = batches.to(self.device), weights.to(self.device)
            grad_hook = None if grad_hook is None else hook_at(grad_hook, home, self.device)
            work = out.to(self.device) if summed else out
        losses, lo = [], 0
        while lo < k:
            sl = slice(lo, min(k, lo + size))
            n = sl.stop - lo
            if summed and not low_rank:
                if scratch is None or scratch.shape[0] < n:
                    scratch = work.new_empty(n, model.dim)
                dest = scratch[:n]
            else:
                dest = work if summed else out[sl] if not moved else start.new_empty(n, model.dim)
            kept = work.clone() if moved and summed else None
            try:
                steps = ChunkSteps(
                    _rows(x, batches[sl]),
                    _rows(y, batches[sl]),
                    weights[sl] if weights.dtype == start.dtype else weights[sl].to(start.dtype),
                    learning_rate,
                    per_sample_clip,
                    ids[sl],
                    grad_hook,
                )
                if clip_updates is None:
                    l_ = run(model, dest, start[sl], steps)
                    if summed and not low_rank:
                        work.add_(dest.sum(0))
                else:  # the low-rank path: Σ of the chunk's clipped updates, from the factors
                    fused = self._low_rank_names(model, per_sample_clip, grad_hook)
                    s = steps
                    l_, n_ = low_rank_clipped_sum(
                        model, dest, start[sl], fused, s.xb, s.yb, s.wb, s.lr, clip_updates
                    )
                    norms.append(n_)
            except torch.OutOfMemoryError:
                if not moved or size == 1:
                    raise
                size = max(1, size // 2)  # the estimate was short: the chunk again, halved
                del dest  # (its buffer, before the cache is emptied)
                scratch = None
                if kept is not None:
                    work.copy_(kept)
                torch.cuda.empty_cache()
                continue
            if moved and not summed:
                out[sl].copy_(dest)
            losses.append(l_)
            lo = sl.stop
        if moved and summed:
            out.copy_(work)
        loss = torch.cat(losses).to(home) if losses else out.new_zeros(0)
        if clip_updates is not None:
            return LocalResult(out, loss, torch.cat(norms).to(home))
        return LocalResult(out / k if average else out, loss)

    def _low_rank_names(
        self, model: FunctionalModel, clip: float | None, hook: GradHook | None
    ) -> tuple[str, ...]:
        """Layers :func:`ampfl.fl.engine.low_rank.low_rank_local_sgd` keeps in low-rank form: the model's
        ``fused_linear_names`` in plain local SGD through its ``forward_stacked`` (no per-example clipping,
        no gradient hook) when it has no penalty (R(w) = 0, so no gradient reaches W except through
        z = h Wᵀ); else none."""
        if not (self.options.vectorized and self._fast(model)):
            return ()
        if clip is not None or hook is not None or type(model.module).penalty is not FLModel.penalty:
            return ()
        return model.fused_linear_names

    def _fast(self, model: FunctionalModel) -> bool:
        """Whether plain local SGD runs through the model's own ``forward_stacked`` (``model_fast_path``)."""
        return self.options.model_fast_path and model.has_stacked_forward

    def _analytic(self, model: FunctionalModel) -> Callable[..., Any] | None:
        """The model's autograd-free ``stacked_loss_and_grads`` where the engine takes its fast path."""
        return getattr(model.module, "stacked_loss_and_grads", None) if self._fast(model) else None

    def _stacked_sgd(self, model: FunctionalModel) -> Callable[..., torch.Tensor] | None:
        """The model's ``stacked_local_sgd`` (Q steps of plain local SGD for a chunk, in place) where the
        engine takes its fast path and the model has no penalty (the method sees only the losses)."""
        if not self._fast(model) or type(model.module).penalty is not FLModel.penalty:
            return None
        return getattr(model.module, "stacked_local_sgd", None)

    def _local_sgd_chunk(
        self, model: FunctionalModel, out: torch.Tensor, params: torch.Tensor, steps: ChunkSteps
    ) -> torch.Tensor:
        """Local SGD of one chunk of clients: final parameters into ``out`` (``[k, d]``; the low-rank path
        also takes ``[d]``: their sum is added to it), returns the mean losses ``[k]``."""
        xb, yb, wb, lr, clip, ids, hook = steps
        fast = self._fast(model)
        fused = self._low_rank_names(model, clip, hook)
        if fused:
            return low_rank_local_sgd(model, out, params, fused, xb, yb, wb, lr)
        spec = model.spec
        whole = self._stacked_sgd(model) if clip is None and hook is None else None
        if whole is not None:  # the model's own Q steps, in place on views of the chunk's rows
            return whole(spec.unflatten(out.copy_(params)), xb, yb, wb, lr)
        buffer = out.copy_(params)  # [k, d], updated in place through per-tensor views
        views = list(spec.unflatten(buffer).values())
        per_example_fn = None if clip is None else vmap(self._client_step_fn(model, clip))
        losses_fn = model.stacked_example_losses if fast else vmap(model.named_example_losses)
        analytic = self._analytic(model)
        total = params.new_zeros(params.shape[0])
        for r in range(xb.shape[1]):
            grads: list[torch.Tensor] | None = None
            flat: torch.Tensor | None = None
            if per_example_fn is None:
                grads, loss = self._batched_grads(
                    spec.names, views, losses_fn, xb[:, r], yb[:, r], wb[:, r], analytic
                )
            else:
                flat, loss = per_example_fn(buffer, xb[:, r], yb[:, r], wb[:, r])
            if hook is not None:
                if flat is None:
                    assert grads is not None
                    flat = torch.cat([g.reshape(g.shape[0], -1) for g in grads], dim=1)
                flat = hook(r, ids, flat)
            if flat is not None:
                buffer.sub_(lr * flat)
            else:
                assert grads is not None
                torch._foreach_add_(views, grads, alpha=-lr)
            total = total + loss.detach()
        return total / xb.shape[1]

    @staticmethod
    def _batched_grads(
        names: tuple[str, ...],
        views: list[torch.Tensor],
        losses_fn: Callable[..., torch.Tensor],
        x: torch.Tensor,
        y: torch.Tensor,
        w: torch.Tensor,
        analytic: Callable[..., tuple[dict[str, torch.Tensor], torch.Tensor] | None] | None = None,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Per-client gradients of the weighted batch losses (one tensor per parameter, ``[k, *shape]``) and
        the losses ``[k]``.

        ``analytic`` (the module's ``stacked_loss_and_grads``, when it has one) gives the same tensors bit
        for bit without autograd's graph (logistic regression: half the step's CPU time at K = 100);
        it returns None where it does not apply, and autograd runs.

        The forward pass is vmapped over clients and plain autograd differentiates Σ_i L_i(w_i) w.r.t. the
        stacked named tensors: since L_i depends on w_i only, row i of the gradient is ∇L_i(w_i). On CPU this
        measured faster than ``vmap(grad(...))`` (docs/performance.md), with the same numbers; gradients stay
        per tensor so the update needs no concatenation.
        """
        if analytic is not None:
            done = analytic(dict(zip(names, views, strict=True)), x, y, w)
            if done is not None:
                return [done[0][n] for n in names], done[1]
        leaves = [v.detach().requires_grad_(True) for v in views]
        with torch.enable_grad():
            per_client = (losses_fn(dict(zip(names, leaves, strict=True)), x, y) * w).sum(1)
            grads = torch.autograd.grad(per_client.sum(), leaves)
        return list(grads), per_client.detach()

    @staticmethod
    def _client_step_fn(
        model: FunctionalModel, clip: float | None
    ) -> Callable[
        [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]
    ]:
        if clip is None:
            return model.flat_grad_and_value(per_example=False)

        per_example = vmap(model.flat_grad_and_value(per_example=True), in_dims=(None, 0, 0))

        def clipped(flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor):  # type: ignore[no-untyped-def]
            g, losses = per_example(flat, x, y)
            factor = torch.clamp(clip / (torch.linalg.vector_norm(g, dim=1) + 1e-12), max=1.0)
            return (g * (factor * w)[:, None]).sum(0), (losses * w).sum()

        return clipped

    # -- per-example clipped gradient sums (004 Algorithm 1) ------------------------------------------
    def clipped_gradient_sum(
        self,
        model: FunctionalModel,
        params: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        batches: torch.Tensor,
        mask: torch.Tensor,
        *,
        clip: float,
    ) -> LocalResult:
        """g_i = Σ_{s∈S_i} ∇ℓ(w, s) / max(1, ‖∇ℓ(w, s)‖/C) for each client (004 Algorithm 1, client side).

        Args:
            params: the model ``[d]`` (shared) or ``[K, d]``.
            batches, mask: ``[K, 1, B]`` indices and 0/1 mask (padding has mask 0).

        Returns:
            ``LocalResult(params=g [K, d], loss=Σ_{s∈S_i} ℓ(w, s) [K])``.
        """
        if not clip > 0:
            raise ValueError(f"clip must be > 0. Found {clip}.")
        k = batches.shape[0]
        home = params.device
        if self._moves(home):
            model, x, y = model_on(model, self.device), on_device(x, self.device), on_device(y, self.device)
            params, batches, mask = params.to(self.device), batches.to(self.device), mask.to(self.device)
        start = params.expand(k, -1) if params.dim() == 1 else params
        grads, losses = [], []
        size = (
            self.chunk_size(model, batches.shape[2], per_sample=True)
            if self.options.vectorized
            else max(1, k)
        )
        for lo in range(0, k, size):
            sl = slice(lo, min(k, lo + size))
            xb, yb, mb = _rows(x, batches[sl, 0]), _rows(y, batches[sl, 0]), mask[sl, 0].to(start.dtype)
            if self.options.vectorized:
                g, loss = vmap(self._client_step_fn(model, clip))(start[sl], xb, yb, mb)
            else:
                pairs = [
                    autograd_step(model, start[sl][i], xb[i], yb[i], mb[i], clip) for i in range(xb.shape[0])
                ]
                g = torch.stack([a for a, _ in pairs])
                loss = torch.stack([b for _, b in pairs])
            grads.append(g.detach().to(home))
            losses.append(loss.detach().to(home))
        if not grads:
            return LocalResult(start.new_zeros(0, model.dim, device=home), start.new_zeros(0, device=home))
        return LocalResult(torch.cat(grads), torch.cat(losses))

    # -- evaluation (ampfl.fl.engine.evaluation) ------------------------------------------------------------
    def accuracy(
        self,
        model: FunctionalModel,
        params: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        batch_size: int = 4096,
        label_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Test accuracy of each model in ``params``:
        :meth:`ampfl.fl.engine.evaluation.Evaluator.accuracy`."""
        return self.evaluator.accuracy(model, params, x, y, batch_size=batch_size, label_mask=label_mask)

    def class_accuracy(
        self, model: FunctionalModel, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor, num_classes: int
    ) -> torch.Tensor:
        """Per-label accuracy ``[K, C]``: :meth:`ampfl.fl.engine.evaluation.Evaluator.class_accuracy`."""
        return self.evaluator.class_accuracy(model, params, x, y, num_classes)

    def _class_counts(
        self,
        model: FunctionalModel,
        stacked: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        num_classes: int,
        batch_size: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`ampfl.fl.engine.evaluation.Evaluator.class_counts`."""
        return self.evaluator.class_counts(model, stacked, x, y, num_classes, batch_size)


def _rows(data: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``data[index]`` for an index tensor of any shape: the same copy as advanced indexing, by
    ``index_select`` on the flattened index (about 3× faster on CPU for small rows)."""
    return data.index_select(0, index.reshape(-1)).reshape(*index.shape, *data.shape[1:])
