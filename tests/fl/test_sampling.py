"""Client and local samplers: frequencies with fixed seeds, exact counts, and their privacy events."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ampfl.accounting.accountants import NeighboringRelation
from ampfl.accounting.events import (
    BalancedIterationSubsamplingEvent,
    GaussianEvent,
    PoissonSampledEvent,
    RandomCheckInEvent,
    SampledWithoutReplacementEvent,
)
from ampfl.fl import sampling
from ampfl.fl.data.partitions import ClientPartition
from ampfl.fl.sampling import (
    BalancedIterationSampler,
    FixedSizeSampler,
    PoissonSampler,
    RandomCheckInSampler,
    local_batches,
    poisson_local_batches,
)


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_fixed_size_exact_and_uniform() -> None:
    s = FixedSizeSampler(50, 10)
    counts = np.zeros(50)
    for r in range(2000):
        ids = s.sample(r, _rng(r))
        assert len(ids) == 10 and len(np.unique(ids)) == 10 and np.all(np.diff(ids) > 0)
        counts[ids] += 1
    # each client is in a round w.p. 10/50: mean 400, binomial std 17.9; allow 5 std
    assert np.all(np.abs(counts - 400) < 5 * np.sqrt(2000 * 0.2 * 0.8))
    inner = GaussianEvent(noise_multiplier=1.0)
    assert s.event(inner) == SampledWithoutReplacementEvent(source_size=50, sample_size=10, event=inner)
    assert s.neighboring_relation == NeighboringRelation.REPLACE_ONE  # the inner multiplier is σ/(2C)
    with pytest.raises(ValueError, match="cohort_size"):
        FixedSizeSampler(5, 6)


def test_poisson_rate() -> None:
    s = PoissonSampler(1000, 0.05)
    sizes = np.array([len(s.sample(r, _rng(r))) for r in range(400)])
    # mean of 400 Binomial(1000, 0.05) cohort sizes: 50 +- 5 * sqrt(47.5/400)
    assert abs(sizes.mean() - 50) < 5 * np.sqrt(1000 * 0.05 * 0.95 / 400)
    assert s.expected_cohort() == pytest.approx(50.0)
    inner = GaussianEvent(noise_multiplier=2.0)
    assert s.event(inner) == PoissonSampledEvent(sampling_rate=0.05, event=inner)
    assert s.neighboring_relation == NeighboringRelation.ADD_OR_REMOVE_ONE


def test_random_checkin_per_client_rates() -> None:
    p = np.array([0.1] * 20 + [0.8] * 20)
    s = RandomCheckInSampler(40, p)
    counts = np.zeros(40)
    rounds = 3000
    for r in range(rounds):
        counts[s.sample(r, _rng(r))] += 1
    freq = counts / rounds
    tol = 5 * np.sqrt(p * (1 - p) / rounds)
    assert np.all(np.abs(freq - p) < tol)
    # the record-level event (004 Algorithm 1) bounds every client by the largest p_i
    assert s.participation == 0.8
    assert s.event(sampling_rate=0.1, noise_multiplier=2.0, local_dataset_size=30) == RandomCheckInEvent(
        participation=0.8, sampling_rate=0.1, noise_multiplier=2.0, local_dataset_size=30
    )
    # ν of 000 Eq. 13: 1 - 0.9^20 0.2^20
    assert s.probability_someone_checks_in() == pytest.approx(1 - 0.9**20 * 0.2**20)
    assert RandomCheckInSampler(3, 0.5).probability_someone_checks_in() == pytest.approx(0.875)


def test_balanced_iteration_exactly_k_of_t() -> None:
    s = BalancedIterationSampler(500, 20, 3, _rng(1))
    counts = np.zeros(500, dtype=int)
    sizes = []
    for r in range(20):
        ids = s.sample(r)
        assert len(np.unique(ids)) == len(ids)
        counts[ids] += 1
        sizes.append(len(ids))
    assert np.all(counts == 3)  # each client in exactly k of T rounds
    assert sum(sizes) == 1500 and s.expected_cohort() == 75.0
    # cohort sizes are near N k / T = 75 (each Binomial(500, 0.15), std 8)
    assert max(abs(np.array(sizes) - 75)) < 5 * 8
    epoch = BalancedIterationSubsamplingEvent(iterations=20, participations=3, noise_multiplier=1.5)
    assert s.event(1.5) == epoch
    # the whole epoch is charged once, in its first round
    assert s.round_events(0, 1.5) == [(epoch, 1)] and all(s.round_events(r, 1.5) == [] for r in range(1, 20))
    full = BalancedIterationSampler(4, 3, 3, _rng(0))
    assert all(full.sample(r).tolist() == [0, 1, 2, 3] for r in range(3))
    with pytest.raises(ValueError, match="round_index"):
        s.sample(20)


def test_local_batches_wor_and_wr() -> None:
    clients = [np.arange(0, 30), np.arange(100, 110)]
    b = local_batches(clients, np.array([0, 1]), num_steps=5, batch_size=2, scheme="wor", rng=_rng(0))
    assert b.shape == (2, 5, 2)
    assert len(torch.unique(b[0])) == 10 and bool(((b[0] >= 0) & (b[0] < 30)).all())
    assert len(torch.unique(b[1])) == 10 and bool(((b[1] >= 100) & (b[1] < 110)).all())  # Q b = |D_i|
    many = local_batches(clients, np.array([1]), num_steps=3, batch_size=5, scheme="wor", rng=_rng(0))
    assert sorted(many[0].reshape(-1)[:10].tolist()) == list(range(100, 110))  # cycles permutations
    draws = local_batches(clients, np.array([0] * 1), num_steps=100, batch_size=30, scheme="wr", rng=_rng(0))
    counts = np.bincount(draws.reshape(-1).numpy(), minlength=30)
    assert abs(counts.mean() - 100) < 1e-9 and counts.min() > 50  # 3000 uniform draws over 30 records
    with pytest.raises(ValueError, match="scheme"):
        local_batches(clients, np.array([0]), num_steps=1, batch_size=1, scheme="poisson", rng=_rng(0))


def test_poisson_local_batches_rate_and_mask() -> None:
    clients = [np.arange(0, 1000), np.arange(1000, 1010)]
    idx, mask = poisson_local_batches(clients, np.array([0, 1]), sampling_rate=0.2, rng=_rng(3))
    assert idx.shape == mask.shape and idx.shape[:2] == (2, 1)
    n0 = int(mask[0].sum())
    assert abs(n0 - 200) < 5 * np.sqrt(1000 * 0.2 * 0.8)
    chosen = idx[0, 0][mask[0, 0] > 0]
    assert len(torch.unique(chosen)) == n0 and bool((chosen < 1000).all())
    limited, m2 = poisson_local_batches(clients, np.array([0]), sampling_rate=1.0, rng=_rng(0), limit=7)
    assert limited[0, 0, : int(m2.sum())].tolist() == list(range(7))


# -- issue 17: vectorised over the participants, bit-identical to the per-client loops they replaced -------
def _reference_poisson_local_batches(client_indices, clients, *, sampling_rate, rng, limit=None):
    """The pre-issue-17 implementation: one ``rng.random(|D_i|)`` per participant."""
    chosen = []
    for c in clients:
        idx = client_indices[int(c)]
        if limit is not None:
            idx = idx[:limit]
        chosen.append(idx[rng.random(len(idx)) < sampling_rate])
    width = max([1, *(len(s) for s in chosen)])
    ind = np.zeros((len(clients), width), dtype=np.int64)
    mask = np.zeros((len(clients), width), dtype=np.float32)
    for row, s in enumerate(chosen):
        ind[row, : len(s)] = s
        mask[row, : len(s)] = 1.0
        if len(s) < width and len(client_indices[int(clients[row])]):
            ind[row, len(s) :] = client_indices[int(clients[row])][0]
    return torch.from_numpy(ind[:, None, :]), torch.from_numpy(mask[:, None, :])


_SIZES = st.lists(st.integers(0, 12), min_size=1, max_size=25)


@settings(max_examples=60, deadline=None)
@given(sizes=_SIZES, seed=st.integers(0, 2**32 - 1), q=st.floats(0.01, 1.0), data=st.data())
def test_poisson_local_batches_matches_the_per_client_loop(sizes, seed, q, data):
    gen = np.random.default_rng(seed)
    parts = [np.sort(gen.choice(1000, s, replace=False)).astype(np.int64) for s in sizes]
    clients = np.array(data.draw(st.lists(st.integers(0, len(sizes) - 1), max_size=12)), dtype=np.int64)
    limit = data.draw(st.none() | st.integers(1, 12))
    want = _reference_poisson_local_batches(parts, clients, sampling_rate=q, rng=_rng(seed), limit=limit)
    for store in (parts, ClientPartition.from_arrays(parts)):
        rng = _rng(seed)
        got = poisson_local_batches(store, clients, sampling_rate=q, rng=rng, limit=limit)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert got[0].dtype == torch.int64 and got[1].dtype == torch.float32
        # the stream is left where the loop left it (the next round's draws are unchanged)
        ref = _rng(seed)
        _reference_poisson_local_batches(parts, clients, sampling_rate=q, rng=ref, limit=limit)
        assert rng.random() == ref.random()


def _reference_local_batches(client_indices, clients, *, num_steps, batch_size, scheme, rng):
    """The pre-issue-17 implementation: numpy's draws one participant at a time."""
    need = num_steps * batch_size
    out = np.empty((len(clients), need), dtype=np.int64)
    for row, c in enumerate(clients):
        idx = client_indices[int(c)]
        n = len(idx)
        if scheme == "wr":
            local = rng.integers(0, n, size=need)
        elif need <= n:
            local = rng.choice(n, size=need, replace=False)
        else:
            local = np.concatenate([rng.permutation(n) for _ in range(-(-need // n))])[:need]
        out[row] = idx[local]
    return torch.from_numpy(out.reshape(len(clients), num_steps, batch_size))


@settings(max_examples=80, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40) | st.sampled_from([1, 2, 12001, 30000]), min_size=1, max_size=12),
    seed=st.integers(0, 2**32 - 1),
    steps=st.integers(1, 6),
    batch=st.integers(1, 12),
    scheme=st.sampled_from(["wor", "wr"]),
    buffered=st.booleans(),
    data=st.data(),
)
def test_local_batches_matches_the_per_client_loop(sizes, seed, steps, batch, scheme, buffered, data):
    """Bit-identical to numpy's per-client draws (Floyd's choice, its shuffle, integers, and the permutation
    fallback), with the stream left where the loop left it, whatever half-word numpy had buffered."""
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    parts = [np.arange(offsets[i], offsets[i + 1], dtype=np.int64) * 3 for i in range(len(sizes))]
    clients = np.array(data.draw(st.lists(st.integers(0, len(sizes) - 1), max_size=40)), dtype=np.int64)
    for store, block_from in ((parts, 1), (ClientPartition.from_arrays(parts), 1), (parts, 24)):
        ref, rng = _rng(seed), _rng(seed)
        if buffered:  # a 32-bit draw leaves half a 64-bit word in numpy's buffer
            ref.integers(0, 5), rng.integers(0, 5)
        kw = {"num_steps": steps, "batch_size": batch, "scheme": scheme}
        want = _reference_local_batches(parts, clients, rng=ref, **kw)
        with mock.patch.object(sampling, "_BLOCK_FROM", block_from):  # 1: the block draw for any cohort
            got = local_batches(store, clients, rng=rng, **kw)
        assert got.dtype == torch.int64 and torch.equal(got, want)
        assert rng.integers(0, 2**31, size=3).tolist() == ref.integers(0, 2**31, size=3).tolist()
        assert rng.random() == ref.random()


@pytest.mark.parametrize("buffered", [False, True])
def test_local_batches_runs_of_short_clients_match_the_per_client_loop(buffered: bool) -> None:
    """Clients holding fewer than Q·b examples cycle through permutations: runs of equal sizes share one
    ``rng.permuted`` call, between clients drawn in a block (Floyd) and a lone short client."""
    sizes = [5] * 30 + [4] * 20 + [60] * 30 + [7] + [80] * 25 + [1] * 5 + [3] * 40
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    parts = [np.arange(offsets[i], offsets[i + 1], dtype=np.int64) for i in range(len(sizes))]
    clients = np.arange(len(sizes), dtype=np.int64)
    for scheme in ("wor", "wr"):
        ref, rng = _rng(21), _rng(21)
        if buffered:
            ref.integers(0, 5), rng.integers(0, 5)
        kw = {"num_steps": 4, "batch_size": 6, "scheme": scheme}
        want = _reference_local_batches(parts, clients, rng=ref, **kw)
        assert torch.equal(local_batches(ClientPartition.from_arrays(parts), clients, rng=rng, **kw), want)
        assert rng.integers(0, 2**31) == ref.integers(0, 2**31) and rng.random() == ref.random()


def test_local_batches_rejection_and_empty_client() -> None:
    """Bounds near 2³² make numpy reject many words: still the same draws; an empty client is named."""
    from ampfl.fl.stream_draws import lemire_values

    bounds = np.array([2**32 - 2, 0, 3, 2**31 + 5, 2**32 - 3] * 2000, dtype=np.uint64)  # several chunks
    ref, rng = _rng(7), _rng(7)
    want = [int(ref.integers(0, int(b) + 1)) for b in bounds]
    assert lemire_values(rng, bounds).tolist() == want and rng.random() == ref.random()
    parts = [np.arange(12001), np.arange(12001, 12401)]  # 300 > 12001 // 50: numpy shuffles the whole range
    for scheme in ("wor", "wr"):
        kw = {"num_steps": 6, "batch_size": 50, "scheme": scheme}
        want_b = _reference_local_batches(parts, [0, 1, 0] * 10, rng=_rng(3), **kw)
        assert torch.equal(local_batches(parts, np.array([0, 1, 0] * 10), rng=_rng(3), **kw), want_b)
    with pytest.raises(ValueError, match="client 1 has no training examples"):
        local_batches([np.arange(3), np.arange(0)], np.array([0, 1]), num_steps=1, batch_size=2, scheme="wor",
                      rng=_rng(0))  # fmt: skip
