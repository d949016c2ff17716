"""DepthFL (Kim et al., ICLR 2023) on the split engine: the heterogeneous-depth baseline of 003 Table 1.

DepthFL lets a client with less compute train a *prefix* of the global network: blocks 1..d_k plus one
classifier head after each of those blocks, and the heads of one client teach each other (mutual
self-distillation). What is implemented here (``depthfl``), on the same data, cohort sampling, local steps,
client optimizer and split CNN blocks as ``pm_sfl_hetero``:

- client i's depth is d_i = ``client_splits[i mod len]`` (the same assignment as ``pm_sfl_hetero``'s split
  points: equal shares of each depth);
- the model: the split CNN's convolutional blocks with **trained weights** (DepthFL trains weights, not masks)
  and L linear heads, head l on the flattened output of block l (the last one is the split CNN's usual head).
  ``bottleneck = true`` puts DepthFL's extra bottleneck in front of every shallow head (after BYOT, Zhang et
  al. 2019, which DepthFL's code follows): conv 1×1 (C_l → m) → GN → ReLU → conv k×k with stride k
  (m → m, k = 2^(L − l): down to the last block's resolution) → GN → ReLU → conv 1×1 (m → C_L) → GN → ReLU,
  m = C_L / 4, convolutions without bias and GroupNorm without affine (our blocks' norm; BYOT uses BN), then
  the linear head on the flattened map (the last head's shape); trained weights, part of head l;
- local training: R steps of batch 32, each client minimising on its own batch
  Σ_{l ≤ d_k} CE(y, p_l) + 1/(d_k − 1) Σ_{l ≤ d_k} Σ_{j ≤ d_k, j ≠ l} KL(p_j ‖ p_l) (the second sum only if
  ``distillation`` and d_k > 1), with p_l = softmax of head l (temperature 1) and the teacher p_j detached,
  as in DepthFL's mutual self-distillation (:func:`depthfl_loss`);
- aggregation: FedAvg per coordinate over the participants that hold it (blocks and heads 1..d_k), unweighted
  as the other split algorithms; a coordinate nobody held this round keeps its value (DepthFL's depth-wise
  aggregation);
- the split setting: DepthFL has no server-side sub-model; the client's prefix is its whole model, so no
  smashed data are exchanged, only the trained weights (in the clear: ε = ∞, ``privacy_unit`` None).
  The shared server top that :class:`~ampfl.fl.split.common.SplitAlgorithm` builds is not used.

``masks = true``: the "Training Probabilistic Masks" form of 003 Table 1's DepthFL column: the blocks are
frozen Kaiming weights with trained mask scores (θ = clamp(σ(s), c, 1 − c), straight-through, as ``pm_sfl``),
each client uploads one binary mask M ~ Bern(θ_k) of its blocks and θ is the mean over the holders (Eq. 5 per
block); the heads are trained weights (Adam at ``server_learning_rate``, the rate of ``pm_sfl_hetero``'s
head) averaged over the holders; evaluation uses one sampled mask.

Evaluation (same metric as the other split algorithms): ``accuracy`` scores the global model's inference,
the average of the L heads' softmax (DepthFL's ensemble), on each evaluated client's label distribution;
``own_depth_accuracy`` uses, for each evaluated client, only the heads 1..d_k it can run itself.

``ampfl deploy`` runs it (:mod:`ampfl.fl.split.depthfl_protocol`: a client trains its prefix as
:meth:`DepthFL.train_prefixes` trains its row and uploads it with the indicator of the blocks it holds).
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import torch
from pydantic import BaseModel, Field
from torch.nn import functional as F

from ampfl.fl.algorithms.base import ROLE_EVAL, ROLE_NOISE
from ampfl.fl.models.split_cnn import (
    bottom_forward_stacked,
    init_bottom_weights,
    keep_probability,
    sample_mask,
    score_from_probability,
)
from ampfl.fl.split.common import (
    SplitAlgorithm,
    SplitParams,
    client_depths,
    flatten,
    make_optimizer,
    unflatten,
)
from ampfl.fl.split.depthfl_protocol import DepthFLProtocol, holder_mean


class DepthFLParams(SplitParams):
    """DepthFL with per-client depth; see the module docstring."""

    client_splits: list[int] = Field(default_factory=lambda: [1, 2, 3], min_length=1)
    distillation: bool = Field(True, description="mutual self-distillation among the client's heads")
    masks: bool = Field(False, description="train probabilistic masks over frozen blocks (003's column)")
    bottleneck: bool = Field(False, description="DepthFL's bottleneck branch before every shallow head")
    c: float = Field(0.01, ge=0.0, lt=0.5, description="masks: θ clamped to [c, 1 − c]")
    init_theta: float = Field(0.5, gt=0.0, lt=1.0, description="masks: initial keep-probability")


def depthfl_loss(
    logits: torch.Tensor, y: torch.Tensor, depth: torch.Tensor, *, distill: bool
) -> torch.Tensor:
    """DepthFL's per-client loss ``[K]`` from head logits ``[L, K, b, C]``, labels ``[K, b]``, depths ``[K]``.

    Σ_{l < d_k} CE_l + [distill] 1/(d_k − 1) Σ_{l ≠ j < d_k} KL(p_j.detach() ‖ p_l), each term a mean over the
    client's batch; heads at or beyond d_k contribute nothing (their gradient is exactly zero).
    """
    n_heads, k, b, classes = logits.shape
    held = (torch.arange(n_heads)[:, None] < depth[None, :]).to(logits.dtype)  # [L, K]
    ce = F.cross_entropy(
        logits.reshape(-1, classes), y.expand(n_heads, k, b).reshape(-1), reduction="none"
    ).view(n_heads, k, b)
    loss = (ce.mean(2) * held).sum(0)
    if distill and n_heads > 1:
        logp = F.log_softmax(logits, dim=-1)
        teacher = logp.detach()
        # kl[j, l, k] = mean_b KL(p_j ‖ p_l) for client k
        kl = (teacher.exp()[:, None] * (teacher[:, None] - logp[None, :])).sum(-1).mean(-1)
        off = 1.0 - torch.eye(n_heads, dtype=logits.dtype)
        pair = held[:, None, :] * held[None, :, :] * off[:, :, None]
        loss = loss + (kl * pair).sum((0, 1)) / (depth.to(logits.dtype) - 1.0).clamp(min=1.0)
    return loss


def _stacked_conv(h: torch.Tensor, weight: torch.Tensor, stride: int, groups: int) -> torch.Tensor:
    """K clients' conv (no padding) → GroupNorm (``groups`` per client, no affine) → ReLU:
    ``h`` ``[K, b, C, H, W]``, ``weight`` ``[K, O, C, k, k]``."""
    k, b = h.shape[:2]
    flat = h.transpose(0, 1).reshape(b, k * h.shape[2], *h.shape[3:])
    out = F.conv2d(flat, weight.reshape(-1, *weight.shape[2:]), stride=stride, groups=k)
    out = F.relu(F.group_norm(out, k * groups))
    return out.reshape(b, k, -1, *out.shape[2:]).transpose(0, 1)


def branch_forward(branch: list[torch.Tensor], h: torch.Tensor, stride: int, groups: int) -> torch.Tensor:
    """DepthFL's bottleneck (1×1 → k×k stride k → 1×1, each GN + ReLU) for K stacked clients."""
    for weight, s in zip(branch, (1, stride, 1), strict=True):
        h = _stacked_conv(h, weight, s, groups if weight.shape[1] % groups == 0 else 1)
    return h


def head_logits(
    convs: list[torch.Tensor],
    heads: list[torch.Tensor],
    x: torch.Tensor,
    groups: int,
    branches: list[list[torch.Tensor]] | None = None,
) -> torch.Tensor:
    """Logits ``[L, K, b, C]`` of every head for K stacked models: ``convs[l]`` ``[K, *conv_l]``,
    ``heads`` alternating weight ``[K, C, f_l]`` and bias ``[K, C]``, ``x`` ``[K, b, ...]``; ``branches[l]``
    (if given and not empty) the bottleneck weights ``[K, ...]`` before head l (:func:`branch_forward`)."""
    out = []
    h = x
    for layer, weight in enumerate(convs):
        h = bottom_forward_stacked([weight], h, groups)
        f = h
        if branches is not None and branches[layer]:
            f = branch_forward(branches[layer], h, 2 ** (len(convs) - 1 - layer), groups)
        w, bias = heads[2 * layer], heads[2 * layer + 1]
        out.append(torch.einsum("kbf,kcf->kbc", f.flatten(2), w) + bias[:, None, :])
    return torch.stack(out)


class DepthFL(DepthFLProtocol, SplitAlgorithm):
    """DepthFL: prefix sub-networks with one head per block, self-distillation, depth-wise FedAvg."""

    name: ClassVar[str] = "depthfl"
    Params: ClassVar[type[BaseModel]] = DepthFLParams
    state_tensors: ClassVar[tuple[str, ...]] = ("bottom", "heads")
    full_depth: ClassVar[bool] = True

    def set_up(self) -> None:
        super().set_up()
        self.dp_: DepthFLParams = self.params  # type: ignore[assignment]
        self.splits = client_depths(
            self.dp_.client_splits, num_blocks=len(self.shapes), num_clients=self.task.num_clients
        )
        sizes = [math.prod(s) for s in self.shapes]
        self.block_of = torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])
        self.head_of = torch.cat(
            [
                torch.full((math.prod(s),), layer)
                for layer, s in zip(self.head_layer, self.head_shapes, strict=True)
            ]
        )
        # masks: ``bottom`` holds the global θ of the frozen weights ``initial_bottom``
        if self.dp_.masks:
            self.bottom = torch.full_like(self.initial_bottom, float(self.dp_.init_theta))
        else:
            self.bottom = self.initial_bottom.clone()
        self.heads = self._initial_heads.clone()
        self.privacy_unit = None  # weights are uploaded in the clear: ε = ∞

    def _init_bottom(self, gen: torch.Generator) -> torch.Tensor:
        convs = flatten(init_bottom_weights(self.spec, gen))
        h, w = self.spec.input_shape[1:]
        channels = self.spec.channels
        # head l's parameters: [bottleneck 1×1, k×k, 1×1 (shallow heads, bottleneck only)], weight, bias
        self.head_shapes: list[tuple[int, ...]] = []
        self.head_layer: list[int] = []
        heads = []
        bottleneck = bool(getattr(self.sp, "bottleneck", False))
        last = self.spec.feature_size()
        for layer, ch in enumerate(channels):
            h, w = h // 2, w // 2
            features = ch * h * w
            if bottleneck and layer < len(channels) - 1:
                mid, k = max(1, channels[-1] // 4), 2 ** (len(channels) - 1 - layer)
                for shape in ((mid, ch, 1, 1), (mid, mid, k, k), (channels[-1], mid, 1, 1)):
                    fan_in = shape[1] * shape[2] * shape[3]
                    heads.append(torch.randn(shape, generator=gen) * math.sqrt(2.0 / fan_in))
                    self.head_shapes.append(shape)
                    self.head_layer.append(layer)
                features = last
            bound = 1.0 / math.sqrt(features)
            heads.append((torch.rand((self.spec.num_classes, features), generator=gen) * 2 - 1) * bound)
            heads.append(torch.zeros(self.spec.num_classes))
            self.head_shapes += [(self.spec.num_classes, features), (self.spec.num_classes,)]
            self.head_layer += [layer, layer]
        self._initial_heads = flatten(heads)
        return convs

    def _logits(self, convs: torch.Tensor, heads: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        parts = unflatten(heads, self.head_shapes)
        linear: list[torch.Tensor] = []
        branches: list[list[torch.Tensor]] = [[] for _ in self.shapes]
        for layer, part, shape in zip(self.head_layer, parts, self.head_shapes, strict=True):
            (branches[layer] if len(shape) == 4 else linear).append(part)
        return head_logits(unflatten(convs, self.shapes), linear, x, self.spec.groups, branches)

    def run_round(self, round_index: int) -> dict[str, float]:
        clients = self.participants(round_index)
        k = len(clients)
        depth = self.splits[torch.from_numpy(np.asarray(clients))]
        gen = self.torch_generator(round_index, ROLE_NOISE)
        batches = self.cohort_batches(clients, round_index)
        convs, heads, total = self.train_prefixes(self.bottom, self.heads, depth, batches, gen)
        self.bottom = _depth_average(convs, self.block_of, depth, self.bottom)
        self.heads = _depth_average(heads, self.head_of, depth, self.heads)
        return {"participants": float(k), "train_loss": float((total / self.sp.num_local_steps).mean())}

    def train_prefixes(
        self,
        bottom: torch.Tensor,
        heads: torch.Tensor,
        depth: torch.Tensor,
        batches: torch.Tensor,
        gen: torch.Generator,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """K clients' local training from the global ``bottom`` (weights, or θ with ``masks``) and ``heads``
        on ``batches`` ``[K, R, b]`` with depths ``depth`` ``[K]``: their trained blocks ``[K, d]`` (with
        ``masks`` one binary mask M ~ Bern(θ_k) each, Eq. 5), heads ``[K, h]`` and summed losses ``[K]``.
        ``gen``: the draws of the training masks and the uploaded mask (unused without ``masks``)."""
        k = len(depth)
        masks, c = self.dp_.masks, self.dp_.c
        start = bottom.expand(k, -1)
        convs = (score_from_probability(start, c) if masks else start.clone()).requires_grad_(True)
        heads = heads.expand(k, -1).clone().requires_grad_(True)
        opt = make_optimizer(self.sp.optimizer, [convs], self.sp.learning_rate)
        head_lr = self.sp.server_learning_rate if masks else self.sp.learning_rate
        opt_heads = make_optimizer(self.sp.optimizer, [heads], head_lr)
        total = torch.zeros(k)
        for step in range(self.sp.num_local_steps):
            idx = batches[:, step]
            opt.zero_grad(set_to_none=True)
            opt_heads.zero_grad(set_to_none=True)
            if masks:
                theta = keep_probability(convs, c)
                weights = self.initial_bottom * sample_mask(theta, torch.rand(theta.shape, generator=gen))
            else:
                weights = convs
            losses = depthfl_loss(
                self._logits(weights, heads, self.x_train[idx]),
                self.y_train[idx],
                depth,
                distill=self.dp_.distillation,
            )
            torch.autograd.backward(losses.sum())  # disjoint client parameters: own gradients
            opt.step()
            opt_heads.step()
            total += losses.detach()
        convs, heads = convs.detach(), heads.detach()
        if masks:  # upload one binary mask M ~ Bern(θ_k) per client (Eq. 5 over the holders)
            after = keep_probability(convs, c)
            convs = (torch.rand(after.shape, generator=gen) < after).to(after.dtype)
        return convs, heads, total

    def _eval_weights(self) -> torch.Tensor:
        if not self.dp_.masks:
            return self.bottom
        gen = self.torch_generator(-1, ROLE_EVAL)  # one sampled mask, the same at every evaluation (pm_sfl)
        return self.initial_bottom * (torch.rand(self.bottom.shape, generator=gen) < self.bottom)

    @torch.no_grad()
    def _predict(self, weights: torch.Tensor, depth: int, x: torch.Tensor) -> torch.Tensor:
        """Labels predicted by the ensemble of heads 1..``depth`` (mean softmax), in chunks of 1000."""
        out = []
        for start in range(0, len(x), 1000):
            logits = self._logits(weights[None], self.heads[None], x[start : start + 1000][None])[:depth, 0]
            out.append(F.softmax(logits, dim=-1).mean(0).argmax(1))
        return torch.cat(out)

    def _class_accuracy(self, weights: torch.Tensor, depth: int) -> torch.Tensor:
        """Per-class accuracy of the ensemble of heads 1..``depth`` on the evaluation set."""
        self._eval_setup()
        classes = self.task.dataset.num_classes
        pred, y = self._predict(weights, depth, self._eval_x), self._eval_y
        correct = torch.bincount(y[pred == y], minlength=classes)[:classes].float()
        counts = torch.bincount(y, minlength=classes)[:classes].float()
        return correct / counts.clamp(min=1.0)

    def _evaluate_own(self, weights: torch.Tensor) -> dict[str, float]:
        """Natural partitions: each evaluated client on its own test examples."""
        assert self._own_test is not None
        full, own, sizes = [], [], []
        for c in self.eval_ids():
            idx = self._own_test[int(c)]
            x, y = self.x_test[idx], self.y_test[idx]
            full.append(float((self._predict(weights, len(self.shapes), x) == y).double().mean()))
            own.append(float((self._predict(weights, int(self.splits[c]), x) == y).double().mean()))
            sizes.append(len(idx))
        acc = torch.tensor(full, dtype=torch.float64)
        return {
            "accuracy": float(acc.mean()),
            "local_accuracy_std": float(acc.std(unbiased=False)),
            "global_accuracy": sum(a * m for a, m in zip(full, sizes, strict=True)) / sum(sizes),
            "own_depth_accuracy": sum(own) / len(own),
        }

    def evaluate(self) -> dict[str, float]:
        ids = self.eval_ids()
        weights = self._eval_weights()
        if self._own_test is not None:
            return self._evaluate_own(weights)
        depths = sorted(set(self.splits.tolist()) | {len(self.shapes)})
        per_depth = {d: self._class_accuracy(weights, d) for d in depths}
        full = per_depth[len(self.shapes)]
        counts = torch.bincount(self._eval_y, minlength=self.task.dataset.num_classes).float()
        local = self._proportions[ids] @ full
        own = torch.stack([self._proportions[c] @ per_depth[int(self.splits[c])] for c in ids])
        return {
            "accuracy": float(local.mean()),
            "local_accuracy_std": float(local.std(unbiased=False)),
            "global_accuracy": float((full * counts).sum() / counts.sum()),
            "own_depth_accuracy": float(own.mean()),
        }

    def parameters_finite(self) -> bool:
        return bool(torch.isfinite(self.bottom).all() and torch.isfinite(self.heads).all())


def _depth_average(
    local: torch.Tensor, layer_of: torch.Tensor, depth: torch.Tensor, previous: torch.Tensor
) -> torch.Tensor:
    """Per coordinate: the mean of ``local`` ``[K, d]`` over the clients whose depth covers the coordinate's
    layer; ``previous`` where none does."""
    held = (layer_of[None, :] < depth[:, None]).to(local.dtype)
    return holder_mean((local * held).sum(0), held.sum(0), previous)
