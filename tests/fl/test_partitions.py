"""Client partitions: disjointness, sizes, the label-skew property, reproducibility, 004's N x d set-ups."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ampfl.fl.data import SCHEMES, ClientPartition, max_fixed_clients, partition_clients
from ampfl.fl.data.partitions import _allocate_slots, _finish
from ampfl.fl.data.slot_grid import PairDraws
from ampfl.fl.data.slot_grid import assign_distinct as _assign_distinct

BALANCED = np.repeat(np.arange(10, dtype=np.int64), 600)  # 6000 samples, 10 balanced classes
# Adult's training labels: 24720 x "<=50K", 7841 x ">50K" (counted from adult.data; 32561 rows in total).
ADULT_LIKE = np.random.default_rng(0).permutation(np.repeat(np.array([0, 1], dtype=np.int64), [24720, 7841]))


def _check_disjoint(parts: list[np.ndarray], n: int) -> np.ndarray:
    assert all(p.dtype == np.int64 for p in parts)
    assert all(np.all(np.diff(p) > 0) for p in parts)  # sorted, no repeats inside a client
    joined = np.concatenate(parts)
    assert joined.size == np.unique(joined).size, "an index is used by two clients"
    assert joined.size == 0 or (joined.min() >= 0 and joined.max() < n)
    return joined


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_scheme_gives_disjoint_clients(scheme):
    parts = partition_clients(BALANCED, scheme=scheme, num_clients=50, seed=1, samples_per_client=100)
    assert len(parts) == 50
    _check_disjoint(parts, BALANCED.size)
    assert min(p.size for p in parts) > 0


def test_iid_sizes_differ_by_at_most_one_and_cover_everything():
    labels = np.arange(6007, dtype=np.int64) % 10
    parts = partition_clients(labels, scheme="iid", num_clients=100, seed=0)
    sizes = [p.size for p in parts]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 6007
    assert _check_disjoint(parts, 6007).size == 6007


def test_dirichlet_is_reproducible_and_skew_follows_alpha():
    first = partition_clients(BALANCED, scheme="dirichlet", num_clients=20, seed=5, alpha=0.5)
    second = partition_clients(BALANCED, scheme="dirichlet", num_clients=20, seed=5, alpha=0.5)
    other = partition_clients(BALANCED, scheme="dirichlet", num_clients=20, seed=6, alpha=0.5)
    assert all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=True))
    assert _check_disjoint(first, BALANCED.size).size == BALANCED.size

    def top_class_share(alpha: float) -> float:
        parts = partition_clients(BALANCED, scheme="dirichlet", num_clients=20, seed=5, alpha=alpha)
        return float(np.mean([np.bincount(BALANCED[p]).max() / p.size for p in parts]))

    # Balanced data gives a top share near 1/10 for large alpha and near 1 for small alpha.
    assert top_class_share(0.05) > 0.6 > 0.2 > top_class_share(100.0)


@pytest.mark.parametrize("labels_per_client", [1, 2, 3, 9, 10])
def test_label_skew_on_balanced_labels(labels_per_client):
    parts = partition_clients(
        BALANCED, scheme="label_skew", num_clients=100, seed=2, labels_per_client=labels_per_client
    )
    assert _check_disjoint(parts, BALANCED.size).size == BALANCED.size
    assert {np.unique(BALANCED[p]).size for p in parts} == {labels_per_client}
    # 6000 samples "uniformly distributed" over 100 clients (000): every (client, label) slot holds
    # floor or ceil of 6000 / (100 k) samples, so exactly 60 per client when 100 k divides 6000.
    per_slot = 6000 / (100 * labels_per_client)
    sizes = {p.size for p in parts}
    assert min(sizes) >= labels_per_client * np.floor(per_slot)
    assert max(sizes) <= labels_per_client * np.ceil(per_slot)
    if per_slot.is_integer():
        assert sizes == {60}


def test_label_skew_on_adult_like_labels_keeps_client_sizes_equal():
    # 000 Sec. VI-B: Adult over N = 100 clients, each holding a subset of the labels.
    parts = partition_clients(ADULT_LIKE, scheme="label_skew", num_clients=100, seed=0, labels_per_client=1)
    _check_disjoint(parts, ADULT_LIKE.size)
    assert all(np.unique(ADULT_LIKE[p]).size == 1 for p in parts)
    sizes = np.array([p.size for p in parts])
    assert sizes.sum() == ADULT_LIKE.size and sizes.max() - sizes.min() <= 3  # 32561 / 100 = 325.6
    holders_of_positive = sum(int(ADULT_LIKE[p][0]) for p in parts)
    assert holders_of_positive == 24  # 100 * 7841 / 32561 = 24.08 clients' worth of ">50K"


def test_label_skew_with_fewer_slots_than_labels_uses_whole_labels():
    parts = partition_clients(BALANCED, scheme="label_skew", num_clients=7, seed=1, labels_per_client=1)
    _check_disjoint(parts, BALANCED.size)
    assert sorted(p.size for p in parts) == [600] * 7
    assert len({int(BALANCED[p][0]) for p in parts}) == 7


def test_label_skew_is_reproducible():
    kwargs = {"scheme": "label_skew", "num_clients": 30, "labels_per_client": 2}
    first = partition_clients(BALANCED, seed=9, **kwargs)
    again = partition_clients(BALANCED, seed=9, **kwargs)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))


def test_fixed_n_by_d():
    parts = partition_clients(BALANCED, scheme="fixed", num_clients=200, seed=3, samples_per_client=30)
    assert [p.size for p in parts] == [30] * 200
    assert _check_disjoint(parts, BALANCED.size).size == 6000
    # 004 Sec. 6: EMNIST ByClass has 697932 training samples; d = 30 gives 23264 clients (6.1) and
    # d = 1000 gives 697 clients (6.2).
    assert max_fixed_clients(697932, 30) == 23264
    assert max_fixed_clients(697932, 1000) == 697


def test_fixed_errors():
    with pytest.raises(ValueError, match="at most 200 clients of 30"):
        partition_clients(BALANCED, scheme="fixed", num_clients=201, seed=0, samples_per_client=30)
    with pytest.raises(ValueError, match="samples_per_client must be given"):
        partition_clients(BALANCED, scheme="fixed", num_clients=2, seed=0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scheme": "shards"}, "scheme must be one of"),
        ({"num_clients": 0}, "num_clients must be an integer >= 1"),
        ({"num_clients": 6001}, "num_clients must be <="),
        ({"scheme": "dirichlet", "alpha": 0.0}, "alpha must be"),
        ({"scheme": "label_skew", "labels_per_client": 11}, "labels_per_client must be <="),
        ({"scheme": "label_skew", "labels_per_client": 0}, "labels_per_client must be an integer >= 1"),
        ({"seed": -1}, "seed must be"),
    ],
)
def test_bad_arguments(kwargs, message):
    arguments = {"scheme": "iid", "num_clients": 10, "seed": 0, **kwargs}
    with pytest.raises(ValueError, match=message):
        partition_clients(BALANCED, **arguments)


def test_bad_labels():
    with pytest.raises(ValueError, match="integers"):
        partition_clients(np.zeros(5), scheme="iid", num_clients=2, seed=0)
    with pytest.raises(ValueError, match="1-D"):
        partition_clients(np.zeros((2, 2), dtype=np.int64), scheme="iid", num_clients=2, seed=0)


def test_dirichlet_refuses_when_clients_stay_empty():
    with pytest.raises(ValueError, match="larger alpha or fewer clients"):
        partition_clients(
            np.zeros(30, dtype=np.int64), scheme="dirichlet", num_clients=30, seed=0, alpha=1e-3
        )


@settings(max_examples=40, deadline=None)
@given(
    classes=st.integers(1, 6),
    n=st.integers(20, 400),
    num_clients=st.integers(1, 20),
    k=st.integers(1, 6),
    seed=st.integers(0, 2**16),
)
def test_label_skew_property(classes, n, num_clients, k, seed):
    labels = np.random.default_rng(seed).integers(0, classes, size=n)
    present = np.unique(labels).size
    k = min(k, present)
    parts = partition_clients(
        labels, scheme="label_skew", num_clients=num_clients, seed=seed, labels_per_client=k
    )
    assert len(parts) == num_clients
    _check_disjoint(parts, n)
    assert all(np.unique(labels[p]).size <= k for p in parts)
    if num_clients * k >= present:  # every label has a holder: nothing is left out
        assert sum(p.size for p in parts) == n


# -- issue 17: one flat array + offsets, bit-identical to the list-of-arrays split it replaced ------------
def _reference_partition(labels: np.ndarray, scheme: str, num_clients: int, seed: int, d: int) -> list:
    """The pre-issue-17 iid / fixed split (array_split / split of the permutation, sorted per client)."""
    n = labels.size
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x9A57]))
    if scheme == "fixed":
        parts = np.split(rng.permutation(n)[: num_clients * d], num_clients)
    else:
        parts = np.array_split(rng.permutation(n), num_clients)
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 400),
    clients=st.integers(1, 400),
    seed=st.integers(0, 2**31),
    scheme=st.sampled_from(["iid", "fixed"]),
    d=st.integers(1, 7),
)
def test_flat_partition_is_bit_identical_to_the_reference(n, clients, seed, scheme, d):
    clients = min(clients, n if scheme == "iid" else max(n // d, 1))
    if scheme == "fixed" and clients * d > n:
        return
    labels = np.zeros(n, dtype=np.int64)
    got = partition_clients(labels, scheme=scheme, num_clients=clients, seed=seed, samples_per_client=d)
    want = _reference_partition(labels, scheme, clients, seed, d)
    assert isinstance(got, ClientPartition) and len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == np.int64 and np.array_equal(a, b)
    np.testing.assert_array_equal(got.sizes, [len(p) for p in want])


@pytest.mark.parametrize("scheme", ["dirichlet", "label_skew"])
def test_flat_partition_keeps_the_other_schemes(scheme):
    # _finish's one-sort path against sorting each client (the pre-issue-17 _finish) on the same parts.
    rng = np.random.default_rng(3)
    parts = [rng.permutation(50)[: rng.integers(0, 9)] for _ in range(30)]
    flat = _finish(parts)
    for a, b in zip(flat, parts, strict=True):
        np.testing.assert_array_equal(a, np.sort(b))
    got = partition_clients(BALANCED, scheme=scheme, num_clients=40, seed=2)
    _check_disjoint(list(got), BALANCED.size)


def test_client_partition_sequence_behaviour():
    parts = [np.array([3, 5]), np.array([], dtype=np.int64), np.array([0, 1, 2])]
    p = ClientPartition.from_arrays(parts)
    assert len(p) == 3 and [a.tolist() for a in p] == [[3, 5], [], [0, 1, 2]]
    assert p[-1].tolist() == [0, 1, 2] and p[1].size == 0
    assert [a.tolist() for a in p[::2]] == [[3, 5], [0, 1, 2]]
    flat, sizes = p.gather(np.array([2, 0]), limit=2)
    assert flat.tolist() == [0, 1, 3, 5] and sizes.tolist() == [2, 2]
    with pytest.raises(IndexError, match="client index"):
        p[3]
    with pytest.raises(ValueError, match="offsets"):
        ClientPartition(np.arange(3), np.array([0, 2]))
    p[0][0] = 4  # writing into a client's view changes that client only, as in a list
    assert [a.tolist() for a in p] == [[4, 5], [], [0, 1, 2]]
    assert pickle.loads(pickle.dumps(p))[2].tolist() == [0, 1, 2]


def _reference_label_skew_cut(y, grid, slots, classes, rng):
    """The pre-issue-17 end of ``_label_skew``: array_split per label, pieces popped row by row."""
    pieces = {}
    for k in range(classes.size):
        if slots[k] == 0:
            continue
        pieces[k] = list(np.array_split(rng.permutation(np.flatnonzero(y == classes[k])), int(slots[k])))
    return [np.sort(np.concatenate([pieces[int(k)].pop() for k in row])) for row in grid]


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(20, 300),
    classes=st.integers(2, 6),
    per_client=st.integers(1, 3),
    clients=st.integers(1, 40),
    seed=st.integers(0, 2**31),
)
def test_label_skew_is_bit_identical_to_the_reference(n, classes, per_client, clients, seed):
    y = np.random.default_rng(seed).integers(0, classes, n).astype(np.int64)
    present, counts = np.unique(y, return_counts=True)
    per_client = min(per_client, present.size)
    clients = min(clients, n)
    got = partition_clients(
        y, scheme="label_skew", num_clients=clients, seed=seed, labels_per_client=per_client
    )
    # replay the scheme's draws up to the cut, then cut the old way
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x9A57]))
    slots = _allocate_slots(counts, clients * per_client, cap=clients)
    grid = _assign_distinct(np.repeat(np.arange(present.size), slots), clients, per_client, rng)
    want = _reference_label_skew_cut(y, grid, slots, present, rng)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


# -- issue 17: label_skew's repair and dirichlet's gathering, bit-identical to the loops they replaced -------
# The default-budget comparison with the swap loop lives in tests/fl/test_partitions_identity.py (one copy of
# the old loop).


@pytest.mark.parametrize("taken", [0, 1, 1023, 1024, 2048, 2900, 4096])
@pytest.mark.parametrize("bit_generator", [np.random.PCG64, np.random.MT19937])
def test_pair_draws_across_blocks_leave_the_stream_as_one_by_one_calls(taken, bit_generator):
    ref, rng = np.random.Generator(bit_generator(11)), np.random.Generator(bit_generator(11))
    ref.integers(0, 3), rng.integers(0, 3)  # half a 64-bit word waits in numpy's buffer
    draws = PairDraws(rng, 1000003, 3)
    for count in (1, 1025, 2049, 3073):  # four blocks of 1024 pairs
        rows, cols = draws.upto(count)
    assert len(rows) == len(cols) == 4096
    got = list(zip(rows[:taken].tolist(), cols[:taken].tolist(), strict=True))
    draws.close(taken)
    assert got == [(int(ref.integers(1000003)), int(ref.integers(3))) for _ in range(taken)]
    assert rng.integers(0, 2**31) == ref.integers(0, 2**31) and rng.random() == ref.random()


def _reference_dirichlet(y, num_clients, alpha, rng):
    """The pre-issue-17 ``_dirichlet``: np.split per label, the pieces gathered client by client."""
    by_class = [rng.permutation(np.flatnonzero(y == c)) for c in np.unique(y)]
    for _ in range(1000):
        parts = [[] for _ in range(num_clients)]
        for members in by_class:
            shares = rng.dirichlet(np.full(num_clients, alpha))
            cuts = np.floor(np.cumsum(shares)[:-1] * members.size).astype(np.int64)
            for client, chunk in enumerate(np.split(members, cuts)):
                parts[client].append(chunk)
        clients = [np.sort(np.concatenate(p)) for p in parts]
        if min(c.size for c in clients) > 0:
            return clients
    return None


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(20, 400),
    classes=st.integers(1, 6),
    clients=st.integers(1, 12),
    alpha=st.sampled_from([0.3, 1.0, 10.0]),
    seed=st.integers(0, 2**31),
)
def test_dirichlet_is_bit_identical_to_the_per_client_gathering(n, classes, clients, alpha, seed):
    y = np.random.default_rng(seed).integers(0, classes, n).astype(np.int64)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x9A57]))  # partition_clients' generator
    want = _reference_dirichlet(y, clients, alpha, rng)
    if want is None:
        with pytest.raises(ValueError, match="alpha"):
            partition_clients(y, scheme="dirichlet", num_clients=clients, seed=seed, alpha=alpha)
        return
    got = partition_clients(y, scheme="dirichlet", num_clients=clients, seed=seed, alpha=alpha)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
