"""Machinery shared by the split algorithms (paper 003): data, cohort, split training loop, evaluation.

One local step of split learning for a cohort of K clients (003 Sec. 2.1 and Steps 2.1–2.3):

1. every client computes its smashed data q = f_{w_b,k}(x) on its mini-batch (all K bottoms at once with
   ``vmap``, :func:`~ampfl.fl.models.split_cnn.bottom_forward_stacked`) and sends it, with its labels, to the
   server (003 lets clients share labels; we do);
2. the server runs its top on the union of the smashed data, returns to each client ∂ℓ/∂q averaged over the
   client's own batch (Eq. 4: 1/|Q_k| Σ), and updates its top with the mean loss over the union;
3. each client back-propagates the returned gradient through its bottom (``smashed.backward(grad)``) and
   takes one optimizer step on its own parameters (weights for SplitFed/Standalone, scores for masks).

Steps 1–3 are exactly the chain rule through the cut: the client and server gradients equal those of the
composed model (tested). The clients' optimizer (Adam by default, as 003 Sec. 6.3, or SGD) is elementwise, so
one optimizer over the ``[K, ...]`` stacked tensors is K independent client optimizers; its state starts
fresh every round (clients keep no optimizer state). The server's top has its own Adam
(``server_learning_rate``, default 1e-3 as 003 Sec. 6.3) whose state persists across rounds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from torch.nn import functional as F

from ampfl.fl.algorithms.base import ROLE_DATA, ROLE_EVAL, ROLE_INIT, ROLE_SAMPLING, Algorithm
from ampfl.fl.data.natural import client_test_indices
from ampfl.fl.models.split_cnn import SplitCNNSpec, SplitTop, bottom_forward, bottom_forward_stacked
from ampfl.fl.sampling import FixedSizeSampler, local_batches

#: The ``[model] name`` the split algorithms require; ``[model] options``: channels, groups, split_layer.
SPLIT_MODEL = "split_cnn"

MakeWeights = Callable[[list[torch.Tensor], int], list[torch.Tensor]]
"""``(leaves, step) -> stacked bottom weights [K, *shape] per layer`` (identity, or w ⊙ M for masks)."""


class SplitParams(BaseModel):
    """Hyper-parameters shared by the split algorithms."""

    model_config = ConfigDict(extra="forbid")

    client_fraction: float = Field(
        0.1, gt=0.0, le=1.0, description="C, share of clients per round (003: 10%)"
    )
    num_local_steps: int = Field(10, ge=1, description="R, local split-learning steps per round")
    batch_size: int = Field(32, ge=1, description="examples per local step (003: 32)")
    learning_rate: float = Field(1e-3, gt=0.0, description="client learning rate (weights or mask scores)")
    server_learning_rate: float = Field(1e-3, gt=0.0, description="Adam rate of the server's top (003: 1e-3)")
    optimizer: Literal["adam", "sgd"] = Field("adam", description="client optimizer (003: Adam)")
    eval_clients: int = Field(10, ge=1, description="clients scored by the personal accuracy")
    eval_examples: int = Field(2000, ge=0, description="test examples used by evaluate (0: all)")


def client_depths(client_splits: Sequence[int], *, num_blocks: int, num_clients: int) -> torch.Tensor:
    """Client i's depth ``client_splits[i mod len]`` (003 Sec. 6.2: equal shares of each depth), checked."""
    for s in client_splits:
        if not 1 <= s <= num_blocks:
            raise ValueError(f"client_splits entries must be in [1, {num_blocks}]. Found {s}.")
    return torch.tensor([client_splits[i % len(client_splits)] for i in range(num_clients)])


def flatten(tensors: Sequence[torch.Tensor], batch_dims: int = 0) -> torch.Tensor:
    """Concatenate tensors along their flattened non-batch dimensions."""
    return torch.cat([t.reshape(*t.shape[:batch_dims], -1) for t in tensors], dim=batch_dims)


def unflatten(flat: torch.Tensor, shapes: Sequence[tuple[int, ...]]) -> list[torch.Tensor]:
    """Inverse of :func:`flatten` for a flat ``[d]`` or ``[K, d]`` tensor."""
    sizes = [int(np.prod(s)) for s in shapes]
    parts = torch.split(flat, sizes, dim=-1)
    lead = tuple(flat.shape[:-1])
    return [p.reshape(*lead, *s) for p, s in zip(parts, shapes, strict=True)]


def split_step(
    spec: SplitCNNSpec,
    top: torch.nn.Module,
    weights: Sequence[torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
) -> torch.Tensor:
    """One split forward/backward for K clients; returns the per-client mean losses ``[K]``.

    ``weights[l]`` is ``[K, *shape_l]`` and part of the clients' autograd graph, ``x`` ``[K, b, ...]``,
    ``y`` ``[K, b]``. Afterwards the clients' leaves hold ∂(mean own loss)/∂leaf and the top's parameters
    hold the gradient of the mean loss over all K·b examples.
    """
    k, b = y.shape
    smashed = bottom_forward_stacked(weights, x, spec.groups)  # client side
    received = smashed.detach().requires_grad_(True)  # what the server sees
    losses = F.cross_entropy(top(received.flatten(0, 1)), y.reshape(-1), reduction="none").view(k, b)
    # received.grad: each client's mean-loss gradient; the top's: K × that of the union's mean loss
    torch.autograd.backward(losses.sum() / b)
    for p in top.parameters():
        if p.grad is not None:
            p.grad.div_(k)
    assert received.grad is not None
    torch.autograd.backward(smashed, received.grad)  # client side: back-propagate the returned gradient
    return losses.detach().mean(1)


def make_optimizer(kind: str, params: list[torch.Tensor], lr: float) -> torch.optim.Optimizer:
    """Adam or plain SGD over ``params``."""
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr)
    return torch.optim.SGD(params, lr=lr)


class SplitAlgorithm(Algorithm):
    """Base of the split algorithms: task data, cohort sampling, the server's top and evaluation.

    ``full_depth = True`` (adaptive split depth) treats every block as "bottom" (per-client stacked weights)
    and keeps only the linear head as the shared server module; who owns which block is the subclass's
    business.
    """

    #: ``accuracy`` averages clients' accuracy on their own (private) label distributions and uses their
    #: private bottoms: a diagnostic; the shared bottom's ``global_accuracy`` on the test set is released.
    released_metrics: ClassVar[tuple[str, ...]] = ("global_accuracy",)

    full_depth: ClassVar[bool] = False
    #: The tensor attributes a subclass keeps across rounds: :meth:`state_dict` holds a copy of each (after
    #: the server's top and its optimiser) and :meth:`load_state_dict` restores them.
    state_tensors: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def deploy_problem(cls, params: BaseModel, *, secure_aggregation: bool) -> str | None:
        """Split learning needs a server round trip per local step (module docstring, steps 1-3): ``ampfl
        deploy`` sends one message per client per round (:attr:`deploys` stays False)."""
        return (
            f"algorithm.name: {cls.name} is split learning: every local step needs a server round trip "
            "(smashed data up, cut-layer gradients down), which ampfl deploy's one message per client per "
            "round cannot carry: use ampfl run."
        )

    def set_up(self) -> None:
        super().set_up()
        task = self.task
        self.sp: SplitParams = self.params  # type: ignore[assignment]
        if task.model != SPLIT_MODEL:
            raise ValueError(
                f"model must be {SPLIT_MODEL!r} for algorithm {self.name!r}. Found {task.model!r}."
            )
        ds = task.dataset
        self.x_train = torch.from_numpy(np.ascontiguousarray(ds.x_train, dtype=np.float32))
        self.y_train = torch.from_numpy(np.ascontiguousarray(ds.y_train, dtype=np.int64))
        self.x_test = torch.from_numpy(np.ascontiguousarray(ds.x_test, dtype=np.float32))
        self.y_test = torch.from_numpy(np.ascontiguousarray(ds.y_test, dtype=np.int64))
        side = round(self.x_train.shape[1] ** 0.5) if self.x_train.dim() == 2 else 0
        if side and side * side == self.x_train.shape[1]:  # flat square images (digits: 64 = 8 × 8)
            self.x_train = self.x_train.view(-1, 1, side, side)
            self.x_test = self.x_test.view(-1, 1, side, side)
        if self.x_train.dim() != 4:
            raise ValueError(
                f"dataset must hold [n, C, H, W] (or flat square) images for {self.name}. Found {ds.name!r}."
            )
        options = dict(task.model_options)
        if "channels" in options:
            options["channels"] = tuple(int(c) for c in options["channels"])
        if self.full_depth:  # every block masked/owned per client; only the head is a shared server part
            options["split_layer"] = len(options.get("channels", SplitCNNSpec.channels))
        try:
            self.spec = SplitCNNSpec(
                input_shape=tuple(int(s) for s in self.x_train.shape[1:]),  # type: ignore[arg-type]
                num_classes=ds.num_classes,
                **options,
            )
        except TypeError as err:
            raise ValueError(f"bad option for model {SPLIT_MODEL!r}: {err}") from None
        self.client_indices = [np.asarray(ix, dtype=np.int64) for ix in task.client_indices]
        n = task.num_clients
        self.cohort_size = max(1, round(self.sp.client_fraction * n))
        self.sampler = FixedSizeSampler(n, self.cohort_size)
        gen = self.torch_generator(-1, ROLE_INIT)
        self.initial_bottom = self._init_bottom(gen)
        self.top = SplitTop(self.spec, gen)
        self.top_opt = torch.optim.Adam(self.top.parameters(), lr=self.sp.server_learning_rate)
        self.shapes = [tuple(s) for s in self.spec.bottom_shapes()]

    def _init_bottom(self, gen: torch.Generator) -> torch.Tensor:
        from ampfl.fl.models.split_cnn import init_bottom_weights

        return flatten(init_bottom_weights(self.spec, gen))

    # -- round helpers --------------------------------------------------------------------------------
    def participants(self, round_index: int) -> np.ndarray:
        """Round ``round_index``'s cohort: ``max(C·N, 1)`` clients without replacement (003 Alg. 1 line 4)."""
        return self.sampler.sample(round_index, self.rng(round_index, ROLE_SAMPLING))

    def cohort_batches(self, clients: np.ndarray, round_index: int) -> torch.Tensor:
        """The mini-batch indices ``[K, R, b]`` of the cohort ``clients`` in round ``round_index``."""
        return local_batches(
            self.client_indices,
            clients,
            num_steps=self.sp.num_local_steps,
            batch_size=self.sp.batch_size,
            scheme="wor",
            rng=self.rng(round_index, ROLE_DATA),
        )

    def train_cohort(
        self, clients: np.ndarray, round_index: int, leaves: list[torch.Tensor], make_weights: MakeWeights
    ) -> torch.Tensor:
        """R local split steps of the cohort on their leaves (``[K, ...]``, updated in place); mean losses."""
        batches = self.cohort_batches(clients, round_index)
        for leaf in leaves:
            leaf.requires_grad_(True)
        opt = make_optimizer(self.sp.optimizer, leaves, self.sp.learning_rate)
        total = torch.zeros(len(clients))
        for step in range(self.sp.num_local_steps):
            idx = batches[:, step]
            opt.zero_grad(set_to_none=True)
            self.top_opt.zero_grad(set_to_none=True)
            total += split_step(
                self.spec, self.top, make_weights(leaves, step), self.x_train[idx], self.y_train[idx]
            )
            self.top_opt.step()
            opt.step()
        for leaf in leaves:
            leaf.requires_grad_(False)
        return total / self.sp.num_local_steps

    # -- evaluation -----------------------------------------------------------------------------------
    def _eval_setup(self) -> None:
        if hasattr(self, "_eval_x"):
            return
        rng = self.rng(-1, ROLE_EVAL)
        n_test = len(self.y_test)
        m = n_test if self.sp.eval_examples == 0 else min(self.sp.eval_examples, n_test)
        pick = np.sort(rng.choice(n_test, m, replace=False))
        self._eval_x, self._eval_y = self.x_test[pick], self.y_test[pick]
        n = self.task.num_clients
        k = min(self.sp.eval_clients, n)
        self._eval_ids = np.sort(rng.choice(n, k, replace=False))
        classes = self.task.dataset.num_classes
        counts = np.stack(
            [np.bincount(self.task.dataset.y_train[ix], minlength=classes) for ix in self.client_indices]
        )
        self._proportions = torch.from_numpy(counts / np.maximum(counts.sum(1, keepdims=True), 1)).float()
        own = client_test_indices(self.task)
        self._own_test: dict[int, torch.Tensor] | None = None
        if own is not None:  # natural partition: every client is scored on its own test examples
            holders = np.array([i for i in range(n) if len(own[i]) > 0], dtype=np.int64)
            if holders.size == 0:
                raise ValueError("client_test_indices must give at least one client a test example.")
            self._eval_ids = np.sort(rng.choice(holders, min(k, holders.size), replace=False))
            self._own_test = {
                int(c): torch.from_numpy(np.asarray(own[int(c)], dtype=np.int64)) for c in self._eval_ids
            }
            union = torch.cat(list(self._own_test.values()))
            self._eval_x, self._eval_y = self.x_test[union], self.y_test[union]

    def eval_ids(self) -> np.ndarray:
        """The clients scored by the personal accuracy (a fixed seeded subset of ``eval_clients``)."""
        self._eval_setup()
        return self._eval_ids

    @torch.no_grad()
    def class_accuracy(self, weights: Sequence[torch.Tensor]) -> torch.Tensor:
        """Per-class accuracy ``[classes]`` of bottom ``weights`` + the top on the evaluation examples."""
        self._eval_setup()
        classes = self.task.dataset.num_classes
        correct = torch.zeros(classes)
        for start in range(0, len(self._eval_y), 1000):
            x, y = self._eval_x[start : start + 1000], self._eval_y[start : start + 1000]
            pred = self.top(bottom_forward(list(weights), x, self.spec.groups)).argmax(1)
            correct += torch.bincount(y[pred == y], minlength=classes)[:classes].float()
        counts = torch.bincount(self._eval_y, minlength=classes)[:classes].float()
        return correct / counts.clamp(min=1.0)

    @torch.no_grad()
    def own_accuracy(self, weights: Sequence[torch.Tensor], client: int) -> tuple[float, int]:
        """(accuracy, examples) of bottom ``weights`` + the top on ``client``'s own test examples (natural
        partitions, :class:`~ampfl.fl.data.natural.NaturalTask`)."""
        self._eval_setup()
        assert self._own_test is not None
        idx = self._own_test[int(client)]
        correct = 0
        for start in range(0, len(idx), 1000):
            x, y = self.x_test[idx[start : start + 1000]], self.y_test[idx[start : start + 1000]]
            pred = self.top(bottom_forward(list(weights), x, self.spec.groups)).argmax(1)
            correct += int((pred == y).sum())
        return correct / len(idx), len(idx)

    def scores(
        self, per_client: Sequence[Sequence[torch.Tensor]] | None, shared: Sequence[torch.Tensor] | None
    ) -> dict[str, float]:
        """``accuracy``: mean over :meth:`eval_ids` of each client's accuracy on its own label distribution
        (003 Sec. 6.4: "averaging all clients' performance on their respective local datasets"), using the
        client's own bottom (``per_client``, one per evaluated client) or the ``shared`` global bottom; with a
        shared bottom also ``global_accuracy`` (whole evaluation set). On a natural partition (clients with
        their own test examples) a client's accuracy is on its own test examples, and ``global_accuracy`` is
        the shared bottom's on the union of the evaluated clients' test examples."""
        ids = self.eval_ids()
        if self._own_test is not None:
            if per_client is None:
                assert shared is not None
                per_client = [shared] * len(ids)
            weights = list(per_client)
            found = [self.own_accuracy(w, int(c)) for c, w in zip(ids, weights, strict=True)]
            acc = torch.tensor([a for a, _ in found], dtype=torch.float64)
            res = {"accuracy": float(acc.mean()), "local_accuracy_std": float(acc.std(unbiased=False))}
            if shared is not None:
                res["global_accuracy"] = sum(a * m for a, m in found) / sum(m for _, m in found)
            return res
        counts = torch.bincount(self._eval_y, minlength=self.task.dataset.num_classes).float()
        out: dict[str, float] = {}
        if shared is not None:
            acc = self.class_accuracy(shared)
            local = self._proportions[ids] @ acc
            out["global_accuracy"] = float((acc * counts).sum() / counts.sum())
        else:
            assert per_client is not None
            local = torch.stack(
                [self._proportions[c] @ self.class_accuracy(w) for c, w in zip(ids, per_client, strict=True)]
            )
        out.update(accuracy=float(local.mean()), local_accuracy_std=float(local.std(unbiased=False)))
        return out

    def compute_device(self) -> str | None:
        """The CPU: split training runs its own loops, not through the engine (``[engine] device`` unused)."""
        return "cpu"

    # -- state ----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "algorithm": self.name,
            "top": {k: v.clone() for k, v in self.top.state_dict().items()},
            "top_opt": self.top_opt.state_dict(),
            **{key: getattr(self, key).clone() for key in self.state_tensors},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("algorithm") != self.name:
            raise ValueError(
                f"state must come from algorithm {self.name!r}. Found {state.get('algorithm')!r}."
            )
        self.top.load_state_dict(state["top"])
        self.top_opt.load_state_dict(state["top_opt"])
        for key in self.state_tensors:
            setattr(self, key, state[key].clone())

    def parameters_finite(self) -> bool:
        return all(bool(torch.isfinite(p).all()) for p in self.top.parameters())
