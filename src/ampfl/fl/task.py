"""What a federated run trains on: a dataset, its partition into clients, and a model name."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ampfl.fl.data.dataset import Dataset


@dataclass
class Task:
    """A dataset split over clients, and the model every client trains.

    Attributes:
        dataset: the loaded dataset (features already normalised).
        client_indices: one int64 array per client with indices into ``dataset.x_train`` (a list, or a
            :class:`~ampfl.fl.data.partitions.ClientPartition` as ``partition_clients`` returns).
        model: a name accepted by :func:`ampfl.fl.models.build_model` ("logreg", "mlp", "cnn").
        model_options: keyword options passed to ``build_model`` (e.g. ``{"gamma": 1e-3}``).
    """

    dataset: Dataset
    client_indices: Sequence[np.ndarray]
    model: str = "logreg"
    model_options: dict[str, Any] = field(default_factory=dict)

    @property
    def num_clients(self) -> int:
        """Number of registered clients N."""
        return len(self.client_indices)

    def client_sizes(self) -> np.ndarray:
        """Local dataset size D_i of every client, shape ``[num_clients]`` (int64)."""
        sizes = getattr(self.client_indices, "sizes", None)  # a ClientPartition: no loop over 10^6 clients
        if isinstance(sizes, np.ndarray):
            return sizes.astype(np.int64, copy=True)
        return np.array([len(ix) for ix in self.client_indices], dtype=np.int64)
