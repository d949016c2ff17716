"""Feature canaries of ``ampfl audit run`` and their scores from released models.

Canary k owns one extra input feature (column ``d + k``) that no data record has: its record is
``x = scale · e_{d+k}`` with a public random label y_k, so its gradient touches only the first-layer weights
of column ``d + k`` (a gradient canary on coordinates the data never touches; also an out-of-distribution
input). Record-level runs: an included canary is one more record of a client chosen publicly (``homes``);
client-level runs: one more client holding copies of it.

Scores (post-processing of what the observer sees, so any of them gives a valid lower bound):
:func:`model_scores` from the initial (public) and the released model (``delta``: the change of column
d + k projected on ``e_y − 1/C`` for a linear model, its norm for deeper ones; ``loss``: the drop of the
canary's loss); :func:`revealed_scores` from every released model and who checked in at each round
(:mod:`ampfl.fl.audit.observers`).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.fl.task import Task

__all__ = [
    "KINDS",
    "CanaryPlan",
    "canary_directions",
    "first_layer",
    "first_weight",
    "input_scores",
    "insert_canaries",
    "model_scores",
    "revealed_scores",
]


@dataclasses.dataclass(frozen=True)
class CanaryPlan:
    """The canaries: ``kind`` (``"feature"`` or ``"input"``), their records ``inputs[k]`` (in the task's
    input space) with labels ``labels[k]``, the feature ``columns[k]`` they own (feature kind; empty for
    input canaries), input ``scale``, the unit, the coins, and (record level) the public home client
    ``homes[k]`` of each canary (-1 at client level)."""

    columns: np.ndarray
    labels: np.ndarray
    scale: float
    unit: str
    included: np.ndarray
    homes: np.ndarray
    inputs: np.ndarray
    kind: str = "feature"


#: Canary kinds: a dedicated feature per canary (flat inputs, first layer linear) or a record in the data's
#: own input space (any model: images for CNNs), scored by its gradient direction at the public initial model.
KINDS = ("feature", "input")


def insert_canaries(
    task: Task, *, included: np.ndarray, unit: str, scale: float, seed: int, kind: str = "feature"
) -> tuple[Task, CanaryPlan]:
    """A copy of ``task`` with the included canaries inserted at ``unit``.

    ``kind = "feature"``: one extra (zero) feature per canary, canary k's record ``scale · e_{d+k}``;
    ``"input"``: canary k's record is a public random input of the data's shape, entries uniform in [0, 1]
    (the range of ampfl's image and digits data), scaled by ``scale / 2``. Labels and the clients that
    receive record canaries are public (drawn from ``seed``); only ``included`` (the coins) is secret.
    """
    from ampfl.fl.task import Task

    data = task.dataset
    k = int(included.size)
    n = int(data.x_train.shape[0])
    public = np.random.default_rng([seed, 27])
    labels = public.integers(0, data.num_classes, size=k)
    if kind == "feature":
        if data.x_train.ndim != 2:
            raise ValueError(
                "canary: 'feature' needs flat inputs (model logreg or mlp on tabular data); use 'input'. "
                f"Found input shape {data.input_shape}."
            )
        d = int(data.x_train.shape[1])
        columns = np.arange(d, d + k)
        inputs = np.zeros((k, d + k), dtype=np.float32)
        inputs[np.arange(k), columns] = scale
        x_train = np.pad(data.x_train, ((0, 0), (0, k)))
        x_test = np.pad(data.x_test, ((0, 0), (0, k)))
    else:
        columns = np.zeros(0, dtype=np.int64)
        inputs = ((public.random((k, *data.x_train.shape[1:])) - 0.5) * scale).astype(np.float32)
        x_train, x_test = data.x_train, data.x_test
    indices = [np.asarray(ix, dtype=np.int64) for ix in task.client_indices]
    sizes = np.array([ix.size for ix in indices])
    copies = 1 if unit == "record" else max(1, int(np.median(sizes)))
    chosen = np.flatnonzero(included)
    rows = np.repeat(inputs[chosen], copies, axis=0).astype(x_train.dtype)
    row_labels = np.repeat(labels[chosen], copies).astype(data.y_train.dtype)
    x_train = np.concatenate([x_train, rows])
    y_train = np.concatenate([data.y_train, row_labels])
    homes = np.full(k, -1, dtype=np.int64)
    if unit == "record":  # canary k goes to client homes[k] (a public permutation, round robin)
        homes = public.permutation(np.resize(public.permutation(len(indices)), k))
        for j, c in enumerate(chosen):
            indices[homes[c]] = np.append(indices[homes[c]], n + j)
    else:
        indices += [np.arange(n + j * copies, n + (j + 1) * copies) for j in range(chosen.size)]
    dataset = dataclasses.replace(data, x_train=x_train, y_train=y_train, x_test=x_test)
    new_task = Task(dataset, indices, model=task.model, model_options=dict(task.model_options))
    coins = np.asarray(included, dtype=bool)
    return new_task, CanaryPlan(columns, labels, float(scale), unit, coins, homes, inputs, kind)


def first_weight(algorithm: Algorithm, flat: Any, width: int) -> np.ndarray:
    """The first layer's weight ``[out, width]`` (on the ``width`` input features) in the flat ``flat``."""
    offset, (out, _) = first_layer(algorithm, width)
    return np.asarray(flat[offset : offset + out * width].reshape(out, width).double().numpy())


def first_layer(algorithm: Algorithm, width: int) -> tuple[int, tuple[int, int]]:
    """``(offset, (out, width))``: where the first layer's weight on the ``width`` input features sits in the
    flat parameter vector (row-major)."""
    spec = algorithm.model.spec  # type: ignore[attr-defined]
    for shape, offset in zip(spec.shapes, spec.offsets, strict=True):
        if len(shape) == 2 and shape[1] == width:
            return int(offset), (int(shape[0]), int(shape[1]))
    raise ValueError(
        f"audit run needs a model whose first layer is linear in its inputs (logreg, mlp). Found "
        f"{spec.names}."
    )


def model_scores(
    algorithm: Algorithm, initial: Any, final: Any, plan: CanaryPlan, task: Task, score: str
) -> np.ndarray:
    """Each canary's score from the initial (public) and one released model (module docstring)."""
    import torch

    model = algorithm.model  # type: ignore[attr-defined]
    x = torch.from_numpy(plan.inputs)
    y = torch.from_numpy(plan.labels.astype(np.int64))
    if score == "loss":
        with torch.no_grad():
            drop = model.example_losses(initial, x, y) - model.example_losses(final, x, y)
        return np.asarray(drop.double().numpy())
    if plan.kind == "input":
        return input_scores(algorithm, [initial, final], plan)
    width = int(task.dataset.x_train.shape[1])
    change = first_weight(algorithm, final, width) - first_weight(algorithm, initial, width)
    cols = change[:, plan.columns]  # [out, K]
    out = cols.shape[0]
    if out != task.dataset.num_classes:
        return np.asarray(np.linalg.norm(cols, axis=0))
    direction = -np.full((out, plan.columns.size), 1.0 / out)
    direction[plan.labels, np.arange(plan.columns.size)] += 1.0
    direction /= np.linalg.norm(direction, axis=0, keepdims=True)
    return np.asarray((cols * direction).sum(axis=0))


def input_scores(algorithm: Algorithm, models: Sequence[Any], plan: CanaryPlan) -> np.ndarray:
    """Input canaries from released models w_0 (public), w_1, …, w_T: Σ_t ⟨w_t − w_{t−1}, −∇ℓ_k(w_{t−1})/‖·‖⟩
    (each round's change on the direction canary k's gradient pushes at the model that round started from),
    centred per label (the data's own drift along a canary's direction depends mostly on its label)."""
    raw = np.zeros(plan.labels.size)
    for before, after in itertools.pairwise(models):
        raw += canary_directions(algorithm, before, plan) @ (after - before).double().numpy()
    centred = raw.copy()
    for label in np.unique(plan.labels):
        group = plan.labels == label
        centred[group] -= np.median(raw[group])
    return np.asarray(centred)


def canary_directions(algorithm: Algorithm, initial: Any, plan: CanaryPlan) -> np.ndarray:
    """``[K, d]``: −∇ℓ(w; x_k, y_k)/‖·‖ for every canary at the model ``initial`` = w (unit rows)."""
    import torch
    from torch.func import vmap

    model = algorithm.model  # type: ignore[attr-defined]
    per_example = vmap(model.flat_grad_and_value(per_example=True), in_dims=(None, 0, 0))
    x = torch.from_numpy(plan.inputs)
    y = torch.from_numpy(plan.labels.astype(np.int64))
    g = torch.cat([per_example(initial, x[i : i + 64], y[i : i + 64])[0] for i in range(0, len(y), 64)])
    g = -g.detach().double()
    return np.asarray((g / g.norm(dim=1, keepdim=True).clamp(min=1e-300)).numpy())


def revealed_scores(
    algorithm: Algorithm,
    initial: Any,
    released: Sequence[Any],
    revealed: Sequence[np.ndarray],
    plan: CanaryPlan,
    task: Task,
) -> np.ndarray:
    """Participation revealed: Σ over the rounds t in which canary k's home checked in of the ``delta``
    score of (w_{t-1}, w_t); rounds without the home carry only noise for canary k and are left out."""
    if len(released) != len(revealed):
        raise RuntimeError(f"{len(released)} released models for {len(revealed)} check-in draws")
    total = np.zeros(plan.columns.size)
    before = initial
    for after, joined in zip(released, revealed, strict=True):
        present = np.isin(plan.homes, joined)
        if present.any():
            total += np.where(present, model_scores(algorithm, before, after, plan, task, "delta"), 0.0)
        before = after
    return total
