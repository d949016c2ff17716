"""Who takes part in a round, which local examples a client uses, and the privacy event of each choice.

Client samplers (``sample(round_index, rng) -> sorted client ids``):

* :class:`FixedSizeSampler` — m of N clients uniformly without replacement (server-side).
* :class:`PoissonSampler` — each client independently with probability q (server-side coins).
* :class:`RandomCheckInSampler` — each client flips its own coin ζ_i ~ Bern(p_i) (000 Eq. 10, 004 Algorithm
  1); p_i lives with the client and the server only sees who checked in.
* :class:`BalancedIterationSampler` — each client takes part in exactly k of the T rounds, the k rounds chosen
  uniformly at random and independently per client (Balanced Iteration Subsampling, paper 002).

Each sampler's ``event(...)`` describes its sampling as an :mod:`ampfl.accounting.events` event around the
per-round mechanism, and ``neighboring_relation`` names the relation the run's accountant must use (sampling
without replacement: replace one unit; everything else: add/remove one unit). Event noise multipliers are
relative to the sensitivity under that relation (docs/units.md): replace-one doubles it, so fixed-size
cohorts pass σ/(2C). Local data samplers (:func:`local_batches`, :func:`poisson_local_batches`) draw the
clients' mini-batches as index tensors for the engine.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ampfl.accounting.accountants.base import NeighboringRelation
from ampfl.accounting.events import (
    BalancedIterationSubsamplingEvent,
    PoissonSampledEvent,
    PrivacyEvent,
    RandomCheckInEvent,
    SampledWithoutReplacementEvent,
)
from ampfl.fl.data.partitions import ClientPartition
from ampfl.fl.stream_draws import floyd_bounds, floyd_choice, lemire_values, supports


def _check_rate(name: str, value: float, *, allow_zero: bool = False) -> float:
    v = float(value)
    if not ((0.0 <= v if allow_zero else 0.0 < v) and v <= 1.0):
        raise ValueError(f"{name} must be in {'[' if allow_zero else '('}0, 1]. Found {value}.")
    return v


class Sampler:
    """Base class of client samplers."""

    num_clients: int
    #: The neighbouring relation of :meth:`event` (the run's accountant is built with it).
    neighboring_relation: NeighboringRelation = NeighboringRelation.ADD_OR_REMOVE_ONE

    def sample(self, round_index: int, rng: np.random.Generator) -> np.ndarray:
        """Sorted ids (int64) of the clients taking part in round ``round_index``."""
        raise NotImplementedError

    def event(self, *args: Any, **kwargs: Any) -> PrivacyEvent:
        """The privacy event of one round: this sampling around the round's mechanism."""
        raise NotImplementedError

    def expected_cohort(self) -> float:
        """Expected number of participants per round."""
        raise NotImplementedError


class FixedSizeSampler(Sampler):
    """``cohort_size`` of ``num_clients`` clients, uniformly without replacement.

    Event: :class:`~ampfl.accounting.events.SampledWithoutReplacementEvent`; relation: replace one client, so
    the inner event's noise multiplier is σ/(2C) (Δ₂ = 2C).
    """

    neighboring_relation = NeighboringRelation.REPLACE_ONE

    def __init__(self, num_clients: int, cohort_size: int) -> None:
        if not 1 <= cohort_size <= num_clients:
            raise ValueError(f"cohort_size must be in [1, {num_clients}]. Found {cohort_size}.")
        self.num_clients = int(num_clients)
        self.cohort_size = int(cohort_size)

    def sample(self, round_index: int, rng: np.random.Generator) -> np.ndarray:
        return np.sort(rng.choice(self.num_clients, size=self.cohort_size, replace=False)).astype(np.int64)

    def event(self, inner: PrivacyEvent) -> PrivacyEvent:
        """``inner`` (noise multiplier relative to 2C) on a uniform ``cohort_size``-subset of the clients."""
        return SampledWithoutReplacementEvent(
            source_size=self.num_clients, sample_size=self.cohort_size, event=inner
        )

    def expected_cohort(self) -> float:
        return float(self.cohort_size)


class PoissonSampler(Sampler):
    """Each client independently with probability ``sampling_rate`` (coins drawn by the server).

    Event: :class:`~ampfl.accounting.events.PoissonSampledEvent` (add/remove one client).
    """

    def __init__(self, num_clients: int, sampling_rate: float) -> None:
        self.num_clients = int(num_clients)
        self.sampling_rate = _check_rate("sampling_rate", sampling_rate)

    def sample(self, round_index: int, rng: np.random.Generator) -> np.ndarray:
        return np.flatnonzero(rng.random(self.num_clients) < self.sampling_rate).astype(np.int64)

    def event(self, inner: PrivacyEvent) -> PrivacyEvent:
        """``inner`` (noise multiplier relative to C) on a Poisson(q) sample of the clients."""
        return PoissonSampledEvent(sampling_rate=self.sampling_rate, event=inner)

    def expected_cohort(self) -> float:
        return self.sampling_rate * self.num_clients


class RandomCheckInSampler(Sampler):
    """Random check-in: client i participates with its own probability p_i (000 Eq. 10; 004 Algorithm 1).

    The probabilities belong to the clients: the server-side code must not read ``_p`` (it only receives the
    returned ids). Client i's privacy depends only on its own p_i and grows with it, so the accounting uses
    :attr:`participation` = max_i p_i, which bounds every client (exact when all p_i are equal).

    Args:
        num_clients: N.
        probabilities: one p ∈ (0, 1] for everyone, or a length-N sequence of p_i.
    """

    def __init__(self, num_clients: int, probabilities: float | Sequence[float] | np.ndarray) -> None:
        self.num_clients = int(num_clients)
        p = np.asarray(probabilities, dtype=np.float64)
        if p.ndim == 0:
            p = np.full(self.num_clients, float(p))
        if p.shape != (self.num_clients,):
            raise ValueError(
                f"probabilities must be one number or {self.num_clients} numbers. Found {p.shape}."
            )
        for v in (p.min(), p.max()):
            _check_rate("probabilities", float(v))
        self._p = p

    @property
    def participation(self) -> float:
        """max_i p_i: the participation probability the accounting uses for every client."""
        return float(self._p.max())

    def sample(self, round_index: int, rng: np.random.Generator) -> np.ndarray:
        # One coin per client; in a deployment each client flips its own (004 Alg. 1 "Sample B ~ Bern(p)").
        return np.flatnonzero(rng.random(self.num_clients) < self._p).astype(np.int64)

    def event(
        self, *, sampling_rate: float, noise_multiplier: float, local_dataset_size: int | None = None
    ) -> PrivacyEvent:
        """One round of 004 Algorithm 1 at record level: :class:`~ampfl.accounting.events.RandomCheckInEvent`
        (participation hidden, local Poisson sampling at ``sampling_rate``, noise multiplier σ/C)."""
        return RandomCheckInEvent(
            participation=self.participation,
            sampling_rate=sampling_rate,
            noise_multiplier=noise_multiplier,
            local_dataset_size=local_dataset_size,
        )

    def expected_cohort(self) -> float:
        return float(self._p.sum())

    def probability_someone_checks_in(self) -> float:
        """ν = 1 − Π_i (1 − p_i) (the correction factor of 000 Eq. 13), computed in log space."""
        if np.any(self._p >= 1.0):
            return 1.0
        return float(-np.expm1(np.sum(np.log1p(-self._p))))


class BalancedIterationSampler(Sampler):
    """Balanced Iteration Subsampling: each client takes part in exactly k of the T rounds.

    Client i's k rounds are a uniformly random k-subset of {0, …, T−1}, independent across clients, drawn once
    from ``schedule_rng``. Rounds beyond T−1 raise ValueError. The schedule costs 4·N·k bytes. The privacy
    event covers the whole epoch of T rounds (002 Thm 3.8): :meth:`round_events` reports it once, in round 0.

    Args:
        num_clients: N.
        num_rounds: T (the number of slots).
        rounds_per_client: k (1 ≤ k ≤ T).
        schedule_rng: the generator that draws the schedule (use a dedicated, seeded one).
    """

    _CHUNK = 8192

    def __init__(
        self, num_clients: int, num_rounds: int, rounds_per_client: int, schedule_rng: np.random.Generator
    ) -> None:
        if not 1 <= rounds_per_client <= num_rounds:
            raise ValueError(f"rounds_per_client must be in [1, {num_rounds}]. Found {rounds_per_client}.")
        self.num_clients = int(num_clients)
        self.num_rounds = int(num_rounds)
        self.rounds_per_client = int(rounds_per_client)
        k, t = self.rounds_per_client, self.num_rounds
        sched = np.empty((self.num_clients, k), dtype=np.int32)
        for lo in range(0, self.num_clients, self._CHUNK):
            hi = min(lo + self._CHUNK, self.num_clients)
            keys = schedule_rng.random((hi - lo, t))
            sched[lo:hi] = np.argpartition(keys, k - 1, axis=1)[:, :k] if k < t else np.arange(t)
        flat_rounds = sched.reshape(-1)
        order = np.argsort(flat_rounds, kind="stable")
        self._clients_by_round = (order // k).astype(np.int64)
        self._starts = np.searchsorted(flat_rounds[order], np.arange(t + 1))

    def sample(self, round_index: int, rng: np.random.Generator | None = None) -> np.ndarray:
        if not 0 <= round_index < self.num_rounds:
            raise ValueError(f"round_index must be in [0, {self.num_rounds - 1}]. Found {round_index}.")
        lo, hi = self._starts[round_index], self._starts[round_index + 1]
        return np.sort(self._clients_by_round[lo:hi])

    def event(self, noise_multiplier: float) -> PrivacyEvent:
        """The whole epoch: :class:`~ampfl.accounting.events.BalancedIterationSubsamplingEvent`."""
        return BalancedIterationSubsamplingEvent(
            iterations=self.num_rounds,
            participations=self.rounds_per_client,
            noise_multiplier=noise_multiplier,
        )

    def round_events(self, round_index: int, noise_multiplier: float) -> list[tuple[PrivacyEvent, int]]:
        """The epoch's event in round 0 (charged up front, so ε is an upper bound after every round)."""
        if not 0 <= round_index < self.num_rounds:
            raise ValueError(f"round_index must be in [0, {self.num_rounds - 1}]. Found {round_index}.")
        return [(self.event(noise_multiplier), 1)] if round_index == 0 else []

    def expected_cohort(self) -> float:
        return self.num_clients * self.rounds_per_client / self.num_rounds


# -- local (record-level) sampling ------------------------------------------------------------------------
#: Fewer participants than this draw one by one (the block draw's fixed cost is ~0.5 ms; same numbers).
_BLOCK_FROM = 24


def local_batches(
    client_indices: Sequence[np.ndarray],
    clients: np.ndarray,
    *,
    num_steps: int,
    batch_size: int,
    scheme: str,
    rng: np.random.Generator,
) -> torch.Tensor:
    """Mini-batch indices of each client for ``num_steps`` local steps, shape ``[K, Q, b]`` (global indices).

    ``scheme="wor"``: the Q·b examples of the round are distinct (a uniform Q·b-subset of D_i split into Q
    batches, 000 Eq. 9 "WOR"); if Q·b > |D_i| the client cycles through fresh permutations.
    ``scheme="wr"``: Q·b independent uniform draws with replacement (000 Eq. 9 "WR").
    """
    if scheme not in ("wor", "wr"):
        raise ValueError(f"scheme must be 'wor' or 'wr'. Found {scheme!r}.")
    need = num_steps * batch_size
    ids = np.asarray(clients, dtype=np.int64).reshape(-1)
    k = ids.size
    part = client_indices if isinstance(client_indices, ClientPartition) else None
    if part is None:  # a list of arrays: the participants' arrays concatenated (a loop over them only)
        part = ClientPartition.from_arrays([np.asarray(client_indices[int(c)]) for c in ids])
        ids = np.arange(k, dtype=np.int64)
    sizes = part.sizes[ids]
    if k == 0:
        return torch.zeros((0, num_steps, batch_size), dtype=torch.int64)
    if int(sizes.min()) == 0:
        empty = np.asarray(clients).reshape(-1)[np.argmin(sizes)]
        raise ValueError(f"client {int(empty)} has no training examples.")
    local = _local_draws(sizes, need, scheme, rng)
    out = part.flat[part.offsets[ids][:, None] + local]
    return torch.from_numpy(out.reshape(k, num_steps, batch_size))


def _local_draws(sizes: np.ndarray, need: int, scheme: str, rng: np.random.Generator) -> np.ndarray:
    """``[k, need]`` positions into each client's array, drawn as numpy draws them client after client.

    Clients whose draws are reproduced in one block (:mod:`ampfl.fl.stream_draws`): uniform integers, or
    Floyd's choice (need <= n, and not numpy's whole-range shuffle of n > 10000); the others and cohorts
    under ``_BLOCK_FROM`` call numpy in the same order (:func:`_draws_in_order`: whole permutations for
    need > n, one ``rng.permuted`` call per run of clients of equal size).
    """
    k = sizes.size
    local = np.empty((k, need), dtype=np.int64)
    fast = np.full(k, supports(rng) and k >= _BLOCK_FROM)
    if scheme == "wor":
        fast &= (sizes >= need) & ~((sizes > 10000) & (need > sizes // 50))
    cuts = (np.flatnonzero(np.diff(fast.astype(np.int8))) + 1).tolist()
    for lo, hi in zip([0, *cuts], [*cuts, k], strict=True):
        n = sizes[lo:hi]
        if not fast[lo]:
            _draws_in_order(local, sizes, lo, hi, need, scheme, rng)
        elif scheme == "wr":
            local[lo:hi] = lemire_values(rng, np.repeat(n - 1, need)).reshape(hi - lo, need)
        else:
            values = lemire_values(rng, floyd_bounds(n, need).reshape(-1)).reshape(hi - lo, -1)
            local[lo:hi] = floyd_choice(n, need, values)
    return local


def _draws_in_order(
    local: np.ndarray, sizes: np.ndarray, lo: int, hi: int, need: int, scheme: str, rng: np.random.Generator
) -> None:
    """Rows ``lo .. hi − 1`` of ``local`` as numpy draws them client after client. Consecutive clients that
    cycle through permutations of the same size n < need (WOR) share one ``rng.permuted`` call on a
    ``[clients · ⌈need/n⌉, n]`` array: it shuffles row after row with the same draws as that many
    ``rng.permutation(n)`` calls one after the other (numpy's shuffle of each row; tested in
    ``tests/fl/test_sampling.py``), so one call per run of equal sizes instead of per client and cycle."""
    part = sizes[lo:hi]
    cycling = (part < need) if scheme == "wor" else np.zeros(hi - lo, dtype=bool)
    key = np.where(cycling, part, -1 - np.arange(hi - lo))  # the other clients: one run each
    starts = [lo, *(lo + np.flatnonzero(key[1:] != key[:-1]) + 1).tolist(), hi]
    for start, end in itertools.pairwise(starts):
        n = int(sizes[start])
        if not cycling[start - lo]:
            local[start] = _client_draws(n, need, scheme, rng)
            continue
        copies = -(-need // n)
        rows = np.tile(np.arange(n, dtype=np.int64), ((end - start) * copies, 1))
        local[start:end] = rng.permuted(rows, axis=1).reshape(end - start, copies * n)[:, :need]


def _client_draws(n: int, need: int, scheme: str, rng: np.random.Generator) -> np.ndarray:
    """One client's local indices as numpy draws them one call at a time (the reference of the fast path)."""
    if scheme == "wr":
        return rng.integers(0, n, size=need)
    if need <= n:
        return rng.choice(n, size=need, replace=False)
    return np.concatenate([rng.permutation(n) for _ in range(-(-need // n))])[:need]


def poisson_local_batches(
    client_indices: Sequence[np.ndarray],
    clients: np.ndarray,
    *,
    sampling_rate: float,
    rng: np.random.Generator,
    limit: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each of a client's examples independently with probability q (004 Algorithm 1, "Sample S_i from D_i").

    The coins of all participants are drawn in one call, client after client in the order of ``clients``:
    the same numbers as one ``rng.random(|D_i|)`` per client (a float64 uses one whole 64-bit draw), without
    a Python loop over the participants.

    Args:
        limit: use only the first ``limit`` examples of each client (a fixed local dataset of size d).

    Returns:
        ``(indices [K, 1, B], mask [K, 1, B])`` with B the largest sample size; padded slots have mask 0.
    """
    q = _check_rate("sampling_rate", sampling_rate)
    ids = np.asarray(clients, dtype=np.int64).reshape(-1)
    k = ids.size
    part = client_indices if isinstance(client_indices, ClientPartition) else None
    if part is None:  # a list of arrays: concatenated here (a loop over the participants only)
        arrays = [np.asarray(client_indices[int(c)], dtype=np.int64) for c in ids]
        part = ClientPartition.from_arrays(arrays)
        ids = np.arange(k, dtype=np.int64)
    flat, sizes = part.gather(ids, limit)
    keep = rng.random(flat.size) < q
    row = np.repeat(np.arange(k, dtype=np.int64), sizes)[keep]
    counts = np.bincount(row, minlength=k)
    width = max(1, int(counts.max()) if k else 0)
    col = np.arange(row.size, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    full = part.sizes[ids]
    first = np.zeros(k, dtype=np.int64)  # padding: the client's first index (any valid one; masked out)
    first[full > 0] = part.flat[part.offsets[ids[full > 0]]]
    ind = np.repeat(first[:, None], width, axis=1)
    mask = np.zeros((k, width), dtype=np.float32)
    ind[row, col] = flat[keep]
    mask[row, col] = 1.0
    return torch.from_numpy(ind[:, None, :]), torch.from_numpy(mask[:, None, :])
