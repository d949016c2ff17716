"""Feature canaries of ``ampfl audit run`` (issue 27) and their scores from released models.

Canary k owns one extra input feature (column ``d + k``) that no data record has: its record is
``x = scale · e_{d+k}`` with a public random label y_k, so its gradient touches only the first-layer weights
of column ``d + k`` (a gradient canary on coordinates the data never touches; also an out-of-distribution
input). Record-level runs: an included canary is one more record of a client chosen publicly (``homes``);
client-level runs: one more client holding copies of it.

Scores (post-processing of what the observer sees, so any of them gives a valid lower bound):
:func:`model_scores` from the initial (public) and the released model (``delta``: the change of column
d + k projected on ``e_y − 1/C`` for a linear model, its norm for deeper ones; ``loss``: the drop of the
canary's loss); :func:`revealed_scores` from every released model and who checked in at each round
(:mod:`ampfl.fl.audit_observers`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.fl.task import Task

__all__ = ["CanaryPlan", "first_weight", "insert_canaries", "model_scores", "revealed_scores"]


@dataclasses.dataclass(frozen=True)
class CanaryPlan:
    """Where the canaries sit: feature ``columns[k]``, label ``labels[k]``, input ``scale``, the unit, and
    (record level) the public home client ``homes[k]`` of each canary (-1 at client level)."""

    columns: np.ndarray
    labels: np.ndarray
    scale: float
    unit: str
    included: np.ndarray
    homes: np.ndarray


def insert_canaries(
    task: Task, *, included: np.ndarray, unit: str, scale: float, seed: int
) -> tuple[Task, CanaryPlan]:
    """A copy of ``task`` with one extra (zero) feature per canary and the included canaries inserted.

    Labels and the clients that receive record canaries are public (drawn from ``seed``); only ``included``
    (the coins) is secret.
    """
    from ampfl.fl.task import Task

    data = task.dataset
    if data.x_train.ndim != 2:
        raise ValueError(
            f"audit run needs flat inputs (e.g. model logreg or mlp on tabular data). Found input shape "
            f"{data.input_shape}."
        )
    k = int(included.size)
    n, d = data.x_train.shape
    public = np.random.default_rng([seed, 27])
    labels = public.integers(0, data.num_classes, size=k)
    columns = np.arange(d, d + k)
    indices = [np.asarray(ix, dtype=np.int64) for ix in task.client_indices]
    sizes = np.array([ix.size for ix in indices])
    copies = 1 if unit == "record" else max(1, int(np.median(sizes)))
    chosen = np.flatnonzero(included)
    rows = np.zeros((chosen.size * copies, d + k), dtype=np.float32)
    for j, c in enumerate(chosen):
        rows[j * copies : (j + 1) * copies, d + c] = scale
    row_labels = np.repeat(labels[chosen], copies).astype(np.int64)
    x_train = np.concatenate([np.pad(data.x_train, ((0, 0), (0, k))), rows])
    y_train = np.concatenate([data.y_train, row_labels])
    x_test = np.pad(data.x_test, ((0, 0), (0, k)))
    homes = np.full(k, -1, dtype=np.int64)
    if unit == "record":  # canary k goes to client homes[k] (a public permutation, round robin)
        homes = public.permutation(np.resize(public.permutation(len(indices)), k))
        for j, c in enumerate(chosen):
            indices[homes[c]] = np.append(indices[homes[c]], n + j)
    else:
        indices += [np.arange(n + j * copies, n + (j + 1) * copies) for j in range(chosen.size)]
    dataset = dataclasses.replace(data, x_train=x_train, y_train=y_train, x_test=x_test)
    new_task = Task(dataset, indices, model=task.model, model_options=dict(task.model_options))
    return new_task, CanaryPlan(columns, labels, float(scale), unit, np.asarray(included, dtype=bool), homes)


def first_weight(algorithm: Algorithm, flat: Any, width: int) -> np.ndarray:
    spec = algorithm.model.spec  # type: ignore[attr-defined]
    for shape, offset in zip(spec.shapes, spec.offsets, strict=True):
        if len(shape) == 2 and shape[1] == width:
            return np.asarray(flat[offset : offset + shape[0] * shape[1]].reshape(shape).double().numpy())
    raise ValueError(
        f"audit run needs a model whose first layer is linear in its inputs (logreg, mlp). Found "
        f"{spec.names}."
    )


def model_scores(
    algorithm: Algorithm, initial: Any, final: Any, plan: CanaryPlan, task: Task, score: str
) -> np.ndarray:
    import torch

    if score == "loss":
        x = torch.zeros((plan.columns.size, int(task.dataset.x_train.shape[1])))
        x[torch.arange(plan.columns.size), torch.from_numpy(plan.columns)] = plan.scale
        y = torch.from_numpy(plan.labels.astype(np.int64))
        model = algorithm.model  # type: ignore[attr-defined]
        with torch.no_grad():
            drop = model.example_losses(initial, x, y) - model.example_losses(final, x, y)
        return np.asarray(drop.double().numpy())
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
