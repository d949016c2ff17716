"""Naturally partitioned data: one client per writer (or per stand-in "writer style"), each with its own
train and test examples.

:class:`NaturalData` is what the natural loaders return (:func:`ampfl.fl.data.femnist.load_femnist`,
:func:`ampfl.fl.data.writer_styles.load_fmnist_styles`); :meth:`NaturalData.task` turns it into a
:class:`NaturalTask`, a :class:`~ampfl.fl.task.Task` that also carries each client's own test indices. The
split algorithms (:mod:`ampfl.fl.split`) then score every evaluated client on its own test examples instead of
the shared test set reweighted by the client's label shares (the only choice when clients differ in their
features, not just their labels). numpy only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ampfl.fl.task import Task

if TYPE_CHECKING:
    from ampfl.fl.data.dataset import Dataset

__all__ = ["NaturalData", "NaturalTask", "client_test_indices"]


@dataclass
class NaturalTask(Task):
    """A task whose clients also own test examples: ``client_test_indices[i]`` indexes ``dataset.x_test``."""

    client_test_indices: Sequence[np.ndarray] = field(default_factory=list)


def client_test_indices(task: Task) -> Sequence[np.ndarray] | None:
    """The clients' own test indices if ``task`` is a :class:`NaturalTask`, else ``None``."""
    return task.client_test_indices if isinstance(task, NaturalTask) else None


@dataclass(frozen=True, eq=False)
class NaturalData:
    """A dataset with its natural partition: ``train[i]`` / ``test[i]`` index client i's examples in
    ``dataset.x_train`` / ``dataset.x_test``; ``clients[i]`` names the client (a writer id)."""

    dataset: Dataset
    train: list[np.ndarray]
    test: list[np.ndarray]
    clients: tuple[str, ...]
    note: str = ""

    def __post_init__(self) -> None:
        if not len(self.train) == len(self.test) == len(self.clients) > 0:
            raise ValueError(
                f"train, test and clients must have the same positive length. Found {len(self.train)}, "
                f"{len(self.test)}, {len(self.clients)}."
            )

    def task(self, model: str, model_options: dict[str, Any] | None = None) -> NaturalTask:
        """The :class:`NaturalTask` training ``model`` on this partition."""
        return NaturalTask(
            dataset=self.dataset,
            client_indices=list(self.train),
            model=model,
            model_options=dict(model_options or {}),
            client_test_indices=list(self.test),
        )


def group_indices(owner: np.ndarray, num_clients: int) -> list[np.ndarray]:
    """Indices of every client's examples, from an owner array (client index of each example)."""
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(num_clients + 1))
    return [order[bounds[i] : bounds[i + 1]].astype(np.int64) for i in range(num_clients)]
