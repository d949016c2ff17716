"""Per-client persistent state: a compact store of lazily created per-client vectors.

MS-PAFL keeps each client's private submodel w_{i,α} on the client (000 Eq. 14); PM-SFL keeps personal masks.
With 10^6 registered clients most are never touched in a simulation, so :class:`ClientStore` keeps rows only
for clients that were written: one growable ``[capacity, dim]`` tensor plus an ``int32`` id → row map (4 bytes
per registered client). Reading an untouched client returns the default vector without storing anything.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


class ClientStore:
    """Lazily created per-client vectors keyed by client id.

    Args:
        num_clients: number of registered clients N (ids are 0..N−1).
        default: the value of a client that was never written, shape ``[dim]``.
        initial_capacity: rows allocated at first write (the storage doubles when full).
    """

    def __init__(self, num_clients: int, default: torch.Tensor, *, initial_capacity: int = 16) -> None:
        if num_clients < 1:
            raise ValueError(f"num_clients must be >= 1. Found {num_clients}.")
        if default.dim() != 1:
            raise ValueError(f"default must be a vector. Found shape {tuple(default.shape)}.")
        self.num_clients = int(num_clients)
        self.default = default.detach().clone()
        self._row = np.full(self.num_clients, -1, dtype=np.int32)
        self._data = default.new_empty((max(1, int(initial_capacity)), default.numel()))
        self._used = 0

    @property
    def dim(self) -> int:
        """Length of each client's vector."""
        return int(self.default.numel())

    def __len__(self) -> int:
        """Number of clients with a stored row."""
        return self._used

    def __contains__(self, client: object) -> bool:
        return (
            isinstance(client, int | np.integer)
            and 0 <= int(client) < self.num_clients
            and self._row[client] >= 0
        )

    def touched(self) -> np.ndarray:
        """Ids of the clients with a stored row (sorted, int64)."""
        return np.flatnonzero(self._row >= 0).astype(np.int64)

    def nbytes(self) -> int:
        """Memory held by the store (rows allocated + id map)."""
        return int(self._data.numel() * self._data.element_size() + self._row.nbytes)

    def get(self, clients: np.ndarray | list[int]) -> torch.Tensor:
        """Values of ``clients``, shape ``[len(clients), dim]`` (a copy; untouched clients: the default)."""
        ids = self._ids(clients)
        rows = self._row[ids]
        out = self.default.expand(len(ids), -1).clone()
        have = rows >= 0
        if have.any():
            out[torch.from_numpy(np.flatnonzero(have))] = self._data[
                torch.from_numpy(rows[have].astype(np.int64))
            ]
        return out

    def set(self, clients: np.ndarray | list[int], values: torch.Tensor) -> None:
        """Store ``values`` (shape ``[len(clients), dim]``) for ``clients`` (ids must not repeat)."""
        ids = self._ids(clients)
        if values.shape != (len(ids), self.dim):
            raise ValueError(f"values must have shape {(len(ids), self.dim)}. Found {tuple(values.shape)}.")
        if len(np.unique(ids)) != len(ids):
            raise ValueError("clients must not repeat in one write.")
        new = ids[self._row[ids] < 0]
        if len(new):
            self._grow(self._used + len(new))
            self._row[new] = np.arange(self._used, self._used + len(new), dtype=np.int32)
            self._used += len(new)
        rows = torch.from_numpy(self._row[ids].astype(np.int64))
        self._data[rows] = values.detach().to(self._data.dtype)

    def state_dict(self) -> dict[str, Any]:
        """Compact state: touched ids, their rows, and the default."""
        ids = self.touched()
        return {
            "num_clients": self.num_clients,
            "default": self.default.clone(),
            "ids": torch.from_numpy(ids),
            "values": self.get(ids),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state written by :meth:`state_dict` (replaces everything)."""
        self.__init__(int(state["num_clients"]), state["default"])  # type: ignore[misc]
        ids = state["ids"].numpy()
        if len(ids):
            self.set(ids, state["values"])

    # -- internals ------------------------------------------------------------------------------------
    def _ids(self, clients: np.ndarray | list[int]) -> np.ndarray:
        ids = np.asarray(clients, dtype=np.int64).reshape(-1)
        if len(ids) and (ids.min() < 0 or ids.max() >= self.num_clients):
            raise ValueError(f"client ids must lie in [0, {self.num_clients - 1}].")
        return ids

    def _grow(self, needed: int) -> None:
        cap = self._data.shape[0]
        if needed <= cap:
            return
        while cap < needed:
            cap *= 2
        data = self._data.new_empty((cap, self.dim))
        data[: self._used] = self._data[: self._used]
        self._data = data
