"""Split a training set across federated clients.

Four schemes, all deterministic given ``seed`` and all returning one sorted ``int64`` index array per client
(indices into the training set; every index is used by at most one client):

- ``"iid"``: a uniform random permutation cut into ``num_clients`` parts whose sizes differ by at most one.
- ``"dirichlet"``: for every class, client shares drawn from Dirichlet(α·1) (the usual non-IID benchmark
  split; small α gives very skewed clients). Redrawn (up to 1000 times) until no client is empty.
- ``"label_skew"``: each client holds samples of at most ``labels_per_client`` distinct labels, with
  (nearly) equal client sizes — the split of 000 Sec. VI-B ("the training samples are uniformly distributed
  across N = 100 clients, with each client holding only a subset of the labels").
- ``"fixed"``: ``num_clients`` clients with exactly ``samples_per_client`` samples each, drawn uniformly
  without replacement — the "N clients with d samples each" set-up of 004 Sec. 6 (6.1: d = 30 on 23264
  clients; 6.2: d = 1000 on 697 clients). Leftover samples are not used.

The result is a :class:`ClientPartition`: a sequence of the clients' arrays stored as one flat index
array plus offsets, so that a split into 10^6 clients costs two arrays, not 10^6. Indexing gives
client i's sorted array (a view); ``sizes`` gives every client's size without a loop.

Only numpy is imported here.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np

from ampfl.fl.data.slot_grid import assign_distinct

__all__ = ["SCHEMES", "ClientPartition", "max_fixed_clients", "partition_clients"]


class ClientPartition(Sequence[np.ndarray]):
    """Clients' index arrays as one flat ``int64`` array and ``offsets`` (client i: ``flat[o[i]:o[i+1]]``).

    A ``Sequence[np.ndarray]``: ``len``, indexing, iteration and slicing (a :class:`ClientPartition` of the
    selected clients) behave as for a list of arrays. Client i's array is a view of ``flat``; the views of
    different clients do not overlap, so writing into one changes that client only, as with a list.
    """

    __slots__ = ("flat", "offsets")

    def __init__(self, flat: np.ndarray, offsets: np.ndarray) -> None:
        self.flat = np.asarray(flat, dtype=np.int64)
        self.offsets = np.asarray(offsets, dtype=np.int64)
        if self.offsets.ndim != 1 or self.offsets.size < 1 or self.offsets[0] != 0:
            raise ValueError("offsets must be a 1-D array starting at 0.")
        if self.offsets[-1] != self.flat.size or np.any(np.diff(self.offsets) < 0):
            raise ValueError(f"offsets must be non-decreasing and end at len(flat) = {self.flat.size}.")

    @classmethod
    def from_arrays(cls, parts: Sequence[np.ndarray]) -> ClientPartition:
        """The partition holding ``parts`` (copied, in order, unsorted)."""
        if isinstance(parts, ClientPartition):
            return parts
        sizes = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts))
        arrays = [np.asarray(p, dtype=np.int64).reshape(-1) for p in parts]
        flat = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
        return cls(flat, np.concatenate([[0], np.cumsum(sizes)]))

    @property
    def sizes(self) -> np.ndarray:
        """Every client's number of examples, shape ``[N]`` (int64)."""
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return int(self.offsets.size - 1)

    @overload
    def __getitem__(self, i: int) -> np.ndarray: ...
    @overload
    def __getitem__(self, i: slice) -> ClientPartition: ...
    def __getitem__(self, i: int | slice) -> np.ndarray | ClientPartition:
        if isinstance(i, slice):
            return self.select(np.arange(len(self))[i])
        n = len(self)
        j = int(i)
        if not -n <= j < n:
            raise IndexError(f"client index must be in [{-n}, {n - 1}]. Found {i}.")
        j %= n
        return self.flat[self.offsets[j] : self.offsets[j + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        o = self.offsets.tolist()
        for j in range(len(self)):
            yield self.flat[o[j] : o[j + 1]]

    def gather(self, clients: np.ndarray, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(flat, sizes)``: the arrays of ``clients`` (each cut to its first ``limit``) concatenated."""
        ids = np.asarray(clients, dtype=np.int64).reshape(-1)
        starts = self.offsets[ids]
        sizes = self.offsets[ids + 1] - starts
        if limit is not None:
            sizes = np.minimum(sizes, int(limit))
        ends = np.cumsum(sizes)
        pos = np.arange(int(ends[-1]) if ids.size else 0, dtype=np.int64)
        pos += np.repeat(starts - (ends - sizes), sizes)
        return self.flat[pos], sizes

    def select(self, clients: np.ndarray) -> ClientPartition:
        """The partition of the given clients only (in the given order)."""
        flat, sizes = self.gather(clients)
        return ClientPartition(flat, np.concatenate([[0], np.cumsum(sizes)]))


#: The partition schemes understood by :func:`partition_clients`.
SCHEMES: tuple[str, ...] = ("iid", "dirichlet", "label_skew", "fixed")

_DIRICHLET_TRIES = 1000


def partition_clients(
    labels: np.ndarray,
    *,
    scheme: str,
    num_clients: int,
    seed: int,
    alpha: float = 0.5,
    labels_per_client: int = 2,
    samples_per_client: int | None = None,
) -> ClientPartition:
    """Split the training indices ``0 .. len(labels) - 1`` across ``num_clients`` clients.

    Args:
        labels: integer labels of the training set, shape ``[n]``.
        scheme: one of :data:`SCHEMES`.
        num_clients: number of clients N (>= 1).
        seed: seed of the split (the same seed gives the same split).
        alpha: Dirichlet concentration (> 0), ``"dirichlet"`` only.
        labels_per_client: distinct labels per client (>= 1), ``"label_skew"`` only.
        samples_per_client: d (>= 1), ``"fixed"`` only; N·d must not exceed n.

    Returns:
        ``num_clients`` sorted ``int64`` arrays of training-set indices, pairwise disjoint (a
        :class:`ClientPartition`).

    Raises:
        ValueError: for an unknown scheme or a parameter out of range (the message names it).
    """
    y = _check_labels(labels)
    n = int(y.shape[0])
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {', '.join(SCHEMES)}. Found {scheme!r}.")
    _check_int("num_clients", num_clients, 1)
    if not isinstance(seed, int | np.integer) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0. Found {seed!r}.")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x9A57]))
    if scheme == "fixed":
        if samples_per_client is None:
            raise ValueError("samples_per_client must be given for the 'fixed' scheme. Found None.")
        _check_int("samples_per_client", samples_per_client, 1)
        if num_clients * samples_per_client > n:
            raise ValueError(
                f"num_clients * samples_per_client must be <= the training-set size {n}. Found "
                f"{num_clients} * {samples_per_client} = {num_clients * samples_per_client} "
                f"(at most {n // samples_per_client} clients of {samples_per_client})."
            )
        chosen = rng.permutation(n)[: num_clients * samples_per_client]
        return _sorted_segments(chosen, np.arange(num_clients + 1, dtype=np.int64) * samples_per_client)
    if num_clients > n:
        raise ValueError(f"num_clients must be <= the training-set size {n}. Found {num_clients}.")
    if scheme == "iid":
        # np.array_split's sizes: the first n mod N clients get one more.
        sizes = np.full(num_clients, n // num_clients, dtype=np.int64)
        sizes[: n % num_clients] += 1
        return _sorted_segments(rng.permutation(n), np.concatenate([[0], np.cumsum(sizes)]))
    if scheme == "dirichlet":
        if not (isinstance(alpha, int | float) and np.isfinite(alpha) and alpha > 0):
            raise ValueError(f"alpha must be a finite number > 0. Found {alpha!r}.")
        return _dirichlet(y, num_clients, float(alpha), rng)
    _check_int("labels_per_client", labels_per_client, 1)
    return _label_skew(y, num_clients, labels_per_client, rng)


def max_fixed_clients(n: int, samples_per_client: int) -> int:
    """Largest N for the ``"fixed"`` scheme: ``n // d`` (004 Sec. 6.1: 697932 // 30 = 23264)."""
    _check_int("n", n, 0)
    _check_int("samples_per_client", samples_per_client, 1)
    return n // samples_per_client


def _dirichlet(y: np.ndarray, num_clients: int, alpha: float, rng: np.random.Generator) -> ClientPartition:
    classes = np.unique(y)
    by_class = [rng.permutation(np.flatnonzero(y == c)) for c in classes]
    flat = np.concatenate(by_class).astype(np.int64)
    positions = [np.arange(members.size) for members in by_class]
    for _ in range(_DIRICHLET_TRIES):
        # member j of a class goes to the client whose piece of np.split(members, cuts) holds it: the number
        # of cuts <= j (the same pieces as the per-client split, for all clients at once)
        owner = np.concatenate(
            [
                np.searchsorted(_dirichlet_cuts(rng, num_clients, alpha, members.size), j, side="right")
                for members, j in zip(by_class, positions, strict=True)
            ]
        )
        counts = np.bincount(owner, minlength=num_clients)
        if counts.min() > 0:
            order = np.argsort(owner, kind="stable")
            return _sorted_segments(flat[order], np.concatenate([[0], np.cumsum(counts)]))
    raise ValueError(
        f"alpha = {alpha} with num_clients = {num_clients} left a client empty in {_DIRICHLET_TRIES} draws; "
        "use a larger alpha or fewer clients."
    )


def _dirichlet_cuts(rng: np.random.Generator, num_clients: int, alpha: float, size: int) -> np.ndarray:
    shares = rng.dirichlet(np.full(num_clients, alpha))
    return np.floor(np.cumsum(shares)[:-1] * size).astype(np.int64)


def _label_skew(
    y: np.ndarray, num_clients: int, labels_per_client: int, rng: np.random.Generator
) -> ClientPartition:
    classes, counts = _label_counts(y)
    if labels_per_client > classes.size:
        raise ValueError(
            f"labels_per_client must be <= the number of labels present ({classes.size}). "
            f"Found {labels_per_client}."
        )
    slots_total = num_clients * labels_per_client
    slots = _allocate_slots(counts, slots_total, cap=num_clients)
    # One "slot" = one (client, label) pair; a label with more samples gets more slots so that client sizes
    # come out nearly equal. A label never has more than num_clients slots, so a valid assignment exists.
    # (Labels as the smallest integer type: the shuffle's draws do not depend on it, its memory traffic does.)
    slot_labels = np.repeat(np.arange(classes.size, dtype=np.min_scalar_type(classes.size)), slots)
    grid = assign_distinct(slot_labels, num_clients, labels_per_client, rng).reshape(-1)
    # Label k's shuffled members are cut into slots[k] pieces as np.array_split does (the first m mod s pieces
    # one longer); going through the grid row by row, the j-th slot of label k takes piece slots[k] - 1 - j
    # (the last piece first), and a slot at grid position c belongs to client c // labels_per_client.
    # Computed for every member at once, as one int64 key client << bits | index (n < 2^31) per member,
    # sorted once: client by client, indices in increasing order.
    n = int(y.shape[0])
    bits = max(1, (n - 1).bit_length())
    keys = np.empty(int(counts[slots > 0].sum()), dtype=np.int64)
    cells = _label_members(grid, np.arange(classes.size), slots)  # each label's slots in grid order
    piece = np.zeros(grid.size, dtype=np.int64)  # each slot's piece length (client sizes: sums of L slots)
    done = 0
    for k, members in enumerate(_label_members(y, classes, counts)):
        s = int(slots[k])
        if s == 0:
            continue
        shuffled = rng.permutation(members)
        base, extra = divmod(shuffled.size, s)
        lengths = np.full(s, base, dtype=np.int64)
        lengths[:extra] += 1
        at = cells[k][::-1]  # piece P's slot, P = 0 .. s - 1
        piece[at] = lengths
        owner = (at.astype(np.int64) // labels_per_client) << bits
        part = keys[done : done + shuffled.size]
        part[...] = np.repeat(owner, lengths)
        part |= shuffled
        done += shuffled.size
    keys.sort()
    sizes = piece.reshape(num_clients, labels_per_client).sum(axis=1)
    keys &= (1 << bits) - 1
    return ClientPartition(keys, np.concatenate([[0], np.cumsum(sizes)]))


def _label_counts(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(y, return_counts=True)``, by ``np.bincount`` for small non-negative integer labels."""
    low, high = int(y.min()), int(y.max())
    if low >= 0 and high <= max(1024, 4 * y.size) and np.can_cast(y.dtype, np.intp):
        counts = np.bincount(y.astype(np.intp, copy=False), minlength=high + 1)
        classes = np.flatnonzero(counts)
        return classes.astype(y.dtype), counts[classes]
    return np.unique(y, return_counts=True)


def _label_members(y: np.ndarray, classes: np.ndarray, counts: np.ndarray) -> list[np.ndarray]:
    """``np.flatnonzero(y == c)`` for every class c (with many classes: one stable sort, not a pass each)."""
    if classes.size <= 8:
        return [np.flatnonzero(y == c) for c in classes]
    kind = np.min_scalar_type(classes.size)
    low, high = int(classes[0]), int(classes[-1])
    if low >= 0 and high <= max(1024, 4 * y.size) and np.can_cast(y.dtype, np.intp):
        table = np.zeros(high + 1, dtype=kind)  # label -> its class number, read by index (no search)
        table[classes] = np.arange(classes.size)
        code = table[y]
    else:
        code = np.searchsorted(classes, y).astype(kind)
    order = np.argsort(code, kind="stable")
    if order.size < 2**31:  # (int32: the members' shuffles draw the same numbers and move half the bytes)
        order = order.astype(np.int32)
    return np.split(order, np.cumsum(counts)[:-1])


def _allocate_slots(counts: np.ndarray, total: int, *, cap: int) -> np.ndarray:
    """Integer slots per label, proportional to ``counts`` (largest remainder), each at most ``cap``."""
    slots = np.zeros(counts.size, dtype=np.int64)
    remaining = total
    open_ = np.ones(counts.size, dtype=bool)
    while remaining > 0 and open_.any():
        weights = np.where(open_, counts, 0).astype(np.float64)
        ideal = weights / weights.sum() * remaining
        add = np.minimum(np.floor(ideal).astype(np.int64), cap - slots)
        left = remaining - int(add.sum())
        order = np.argsort(-(ideal - np.floor(ideal)), kind="stable")
        for k in order:
            if left == 0:
                break
            if open_[k] and slots[k] + add[k] < cap:
                add[k] += 1
                left -= 1
        slots += add
        remaining -= int(add.sum())
        open_ &= slots < cap
        if int(add.sum()) == 0:
            break
    if remaining > 0:  # pragma: no cover - cannot happen: total <= cap * (labels present)
        raise ValueError(f"cannot give {total} label slots to {counts.size} labels with at most {cap} each.")
    # With enough slots, every label gets a holder: a label left without one takes a slot from the label
    # whose slots are smallest (samples per slot), so no sample is left out.
    while total >= counts.size and (slots == 0).any():
        empty = int(np.flatnonzero(slots == 0)[0])
        per_slot = np.where(slots > 1, counts / np.maximum(slots, 1), np.inf)
        donor = int(np.argmin(per_slot))
        slots[donor] -= 1
        slots[empty] += 1
    return slots


def _finish(parts: list[np.ndarray]) -> ClientPartition:
    flat = ClientPartition.from_arrays(parts)
    return _sorted_segments(np.asarray(flat.flat), np.asarray(flat.offsets))


def _sorted_segments(values: np.ndarray, offsets: np.ndarray) -> ClientPartition:
    """Each segment ``values[o[i]:o[i+1]]`` sorted, in one sort of key = segment·n + value (value < n)."""
    v = np.asarray(values, dtype=np.int64)
    if v.size == 0:
        return ClientPartition(v, offsets)
    span = int(v.max()) + 1
    segment = np.repeat(np.arange(offsets.size - 1, dtype=np.int64), np.diff(offsets))
    key = segment * span
    return ClientPartition(np.sort(key + v) - key, offsets)


def _check_labels(labels: np.ndarray) -> np.ndarray:
    y = np.asarray(labels)
    if y.ndim != 1 or y.size == 0:
        raise ValueError(f"labels must be a non-empty 1-D array. Found shape {y.shape}.")
    if not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"labels must be integers. Found dtype {y.dtype}.")
    return y


def _check_int(name: str, value: object, low: int) -> None:
    if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}. Found {value!r}.")
