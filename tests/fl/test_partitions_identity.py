"""``label_skew`` is bit-identical to the code it replaced (issue 17, 17-e: the chunked repair walk).

Two kinds of check: sha256 digests of whole splits computed by the previous implementation (the code of
main at e59ac4f, before the chunked walk), and the slot grid's repair against the one-``rng.integers``-at-a-
time swap loop, with the generator's state afterwards, including short try budgets that make repeats fail,
passes repeat and the deterministic fallback run.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ampfl.fl.data import partition_clients, slot_grid, slot_rows
from ampfl.fl.data.partitions import _allocate_slots
from ampfl.fl.data.slot_grid import assign_distinct
from ampfl.fl.stream_draws import lemire_block, rewind

# (labels kind, n, classes, labels_per_client, num_clients, seed, sha256 of flat + offsets as int64 bytes).
# Produced with main's code before the change (/work/main at 7336aaa; partitions.py as of e59ac4f):
#   PYTHONPATH=/work/main/src python <script printing these rows> (labels from _labels below, digest as in
#   test_label_skew_matches_the_stored_digests).
DIGESTS = [
    ("uniform", 30, 3, 2, 12, 0, "f2dd9bbbabcd95c42cd61f267f35c58c72ea00d01a57255cc2fbbdd7aea95a8f"),
    ("uniform", 200, 5, 3, 60, 1, "ce1185275cedcc021ba96b36ed22d2fe87acd3fb50abdf0ce1c10a275f746b40"),
    ("skewed", 400, 6, 2, 150, 2, "78582e15630c85db5154b19233bb8e25a1cc4115009fa4213c056eb38d8cf0d3"),
    ("sparse", 1000, 7, 3, 400, 3, "5da53d7c4519b82f6a4532dace27167352373ed89cc8c1cc6282b9209005a5dc"),
    ("neg", 777, 4, 2, 300, 4, "a13422defbc2f7d721b4909086157d68145f80e532a0753cbfe0d173ffa9f2bb"),
    ("uniform", 5000, 10, 2, 2500, 5, "10da398d9638a7b78c6742fbe03342a7cdcd77d59b664f7700136ed2b7b04655"),
    ("skewed", 6000, 3, 2, 3000, 6, "6b1f6e476873420db506a3b3d653a3d024aff45d06aef4f62444e801636cfa97"),
    ("uniform", 20000, 4, 2, 10000, 7, "d5a8459a852600b75429e3abfea6358974dc816b0336cbb1115acfe3c5b33c5a"),
    ("skewed", 30000, 12, 4, 7000, 8, "33900320cf553f838224c00b7a71be02af4e99b67d37ec33474fe60f0ffa2f6e"),
    ("uniform", 100000, 4, 2, 50000, 9, "8ada655797b763eec336a5cf41730d1614822c1b07080cb37d1b94a061130bac"),
    ("neg", 60000, 2, 1, 60000, 10, "99a8ace0c7e87d9342230d0bd92cc553e28a6c5bc398fb4162365df6e6991903"),
    ("sparse", 50000, 9, 2, 25000, 11, "2c1e68fd1d7fc5323d0409e847b6d4b1c55de389b370262784c0c750bc011e4e"),
    # 3-5 labels per client (17-f: the chunked walk of slot_rows; 40 labels: two-word tries; 70: the old
    # loop; the first row: client << bits beyond int32), made with main at 8ce51e2, before that change
    ("uniform", 200000, 10, 3, 60000, 12, "6a11a63782b66c6f574f610821f9b6c69f61fbb858b693c30e472156d5adec9f"),
    ("skewed", 50000, 9, 4, 12000, 13, "ecbf46b053a7fb0d752497afcd942ec04bf306ab22049a04aaa66972be704dc9"),
    ("sparse", 30000, 11, 5, 6000, 14, "f9a97164bb2037d614a39ee643eb0957d278ac132323ccde0ab660c94fa8aa04"),
    ("neg", 9000, 6, 3, 3000, 15, "88fe97bfd25076edcea7723a471665c8047f8055ad6959bf48d05e6d6f9d6789"),
    ("uniform", 4000, 12, 5, 800, 16, "56ed898d52a743a4c85e5126e6ee206311d0ffe55b2e479b39d1a630ad3ef698"),
    ("uniform", 20000, 40, 3, 6000, 17, "47ead9928c1aa7de2711b13b102161a423ed43f194729f665e24bc2644b3a63c"),
    ("skewed", 5000, 70, 3, 1500, 18, "a9a87ee1133bb1f60e9594ba69e364c1f617e03e065051bc5b4c4f48b5228abd"),
    ("uniform", 3000, 3, 3, 1000, 19, "48644efec7b7dd57307c93f55ea2f7a9e03747231782eb5089932e70761d39b5"),
]


def _labels(kind: str, n: int, classes: int, seed: int) -> np.ndarray:
    r = np.random.default_rng(seed + 12345)
    if kind == "uniform":
        return r.integers(0, classes, n).astype(np.int64)
    if kind == "skewed":
        return r.choice(classes, n, p=r.dirichlet(np.full(classes, 0.7))).astype(np.int64)
    if kind == "sparse":  # label ids far apart, int32
        ids = np.sort(r.choice(1000, classes, replace=False)).astype(np.int32) * 7
        return ids[r.integers(0, classes, n)]
    return (r.integers(0, classes, n) - 3).astype(np.int16)  # negative labels, int16


@pytest.mark.parametrize(("kind", "n", "classes", "per_client", "clients", "seed", "digest"), DIGESTS)
def test_label_skew_matches_the_stored_digests(kind, n, classes, per_client, clients, seed, digest):
    parts = partition_clients(
        _labels(kind, n, classes, seed),
        scheme="label_skew",
        num_clients=clients,
        seed=seed,
        labels_per_client=per_client,
    )
    flat = np.asarray(parts.flat, dtype=np.int64).tobytes()
    assert hashlib.sha256(flat + np.asarray(parts.offsets, dtype=np.int64).tobytes()).hexdigest() == digest


def _reference(slot_labels, num_clients, per_client, rng, tries):
    """The pre-issue-17 repair (one ``rng.integers`` call per coin), with the try budget as a parameter."""
    grid = rng.permutation(slot_labels).reshape(num_clients, per_client)
    if np.unique(slot_labels).size == per_client:
        return np.sort(slot_labels).reshape(per_client, num_clients).T.copy()
    failed = True
    for _ in range(50):
        ordered = np.sort(grid, axis=1)
        bad = np.flatnonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=1))
        if bad.size == 0:
            return grid
        failed = False
        for r in bad:
            _, first = np.unique(grid[r], return_index=True)
            for a in np.setdiff1d(np.arange(per_client), first):
                value = grid[r, a]
                for _ in range(tries):
                    s, b = int(rng.integers(num_clients)), int(rng.integers(per_client))
                    if s != r and value not in grid[s] and grid[s, b] not in grid[r]:
                        grid[r, a], grid[s, b] = grid[s, b], value
                        break
                else:
                    failed = True
    if not failed:  # (since 17-e: a 50th pass in which every repeat found its swap keeps the grid; the
        return grid  # pre-issue-17 loop dealt the fallback then, one more pass would have found no repeat)
    grid = np.sort(slot_labels).reshape(per_client, num_clients).T.copy()
    return grid[rng.permutation(num_clients)]


def _check(slot_labels, clients, per_client, seed, tries):
    ref, rng = np.random.default_rng(seed), np.random.default_rng(seed)
    want = _reference(slot_labels, clients, per_client, ref, tries)
    np.testing.assert_array_equal(assign_distinct(slot_labels, clients, per_client, rng), want)
    assert rng.random() == ref.random()  # the generator is left where the reference leaves it


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(1, 400), min_size=2, max_size=12),
    clients=st.integers(1, 300),
    per_client=st.integers(1, 5),
    seed=st.integers(0, 2**31),
)
def test_assign_distinct_is_bit_identical_to_the_swap_loop(counts, clients, per_client, seed):
    counts = np.array(counts)
    per_client = min(per_client, counts.size)
    slots = _allocate_slots(counts, clients * per_client, cap=clients)
    slot_labels = np.repeat(np.arange(counts.size), slots)
    _check(slot_labels, clients, per_client, seed, 4 * clients + 100)  # the default budget, generator too


@settings(max_examples=40, deadline=None)
@given(
    counts=st.lists(st.integers(1, 60), min_size=2, max_size=6),
    clients=st.integers(2, 80),
    tries=st.integers(1, 12),
    seed=st.integers(0, 2**31),
)
def test_short_try_budgets_fail_repeat_and_fall_back_as_the_swap_loop(counts, clients, tries, seed):
    # Few tries per repeat: repeats give up, passes repeat, the fallback deals the slots (both walks)
    per_client = 2 if seed % 3 else 3
    counts = np.minimum(np.array(counts), clients)
    total = clients * per_client
    slots = np.repeat(np.arange(counts.size), counts)[:total]
    if slots.size < total or np.bincount(slots).max() > clients or np.unique(slots).size < per_client:
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(slot_grid, "_tries", lambda n: tries)
        _check(slots.astype(np.uint8), clients, per_client, seed, tries)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rare_partners_walk_far_past_the_window_as_the_swap_loop(seed):
    # Label 1 fills all but 3 rows: a row [1, 1] finds a partner once in ~170 tries, so steps of the chain
    # escape (>= 255 tries) and windows run out; many chunks of 16 rows with cuts at N = 500
    slots = np.repeat(np.arange(3, dtype=np.uint8), [500, 497, 3])
    _check(slots, 500, 2, seed, 4 * 500 + 100)


@pytest.mark.parametrize("labels", [4, 10, 70])  # bit sets of 8 and 16 bits, and label compares (> 64)
def test_many_chunks_with_cuts_as_the_swap_loop(labels):
    counts = np.random.default_rng(labels).integers(1, 5, labels) * 2000 // labels
    clients = int(counts.sum()) // 2
    slots = np.repeat(np.arange(labels), counts)[: 2 * clients]
    _check(slots, clients, 2, labels, 4 * clients + 100)


@pytest.mark.parametrize("calls", [0, 1, 5, 6, 7, 2999, 3000])
def test_lemire_block_rewinds_to_any_prefix_of_the_calls(calls):
    bounds = np.tile(np.array([0, 6, 2**31, 0, 1], dtype=np.uint64), 600)  # zero bounds draw no word
    ref, rng = np.random.default_rng(3), np.random.default_rng(3)
    ref.integers(0, 5), rng.integers(0, 5)  # half a word waits in numpy's buffer
    values, mark = lemire_block(rng, bounds)
    want = [int(ref.integers(0, int(b) + 1)) for b in bounds[:calls]]
    assert values[:calls].tolist() == want
    rewind(rng, mark, calls)
    assert rng.integers(0, 2**31) == ref.integers(0, 2**31) and rng.random() == ref.random()


# 3+ labels per client (slot_rows.walk_many, 17-f): short budgets, chunks of any size (suspect tries, rows
# changed before their turn, windows running out), rare partners, two-word tries (32-63 labels), the old loop
# beyond 64 labels


def _slots(counts: np.ndarray, clients: int, per_client: int, dtype: type = np.uint8) -> np.ndarray:
    return np.repeat(
        np.arange(counts.size), _allocate_slots(counts, clients * per_client, cap=clients)
    ).astype(dtype)


@settings(max_examples=40, deadline=None)
@given(
    counts=st.lists(st.integers(1, 60), min_size=3, max_size=8),
    clients=st.integers(2, 120),
    per_client=st.integers(3, 5),
    tries=st.integers(1, 12),
    seed=st.integers(0, 2**31),
)
def test_short_try_budgets_with_three_to_five_labels(counts, clients, per_client, tries, seed):
    counts = np.array(counts)
    per_client = min(per_client, counts.size)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(slot_grid, "_tries", lambda n: tries)
        _check(_slots(counts, clients, per_client), clients, per_client, seed, tries)


@settings(max_examples=25, deadline=None)
@given(
    counts=st.lists(st.integers(1, 400), min_size=3, max_size=12),
    clients=st.integers(50, 700),
    per_client=st.integers(3, 5),
    rows=st.sampled_from([50, 400, 4096, 10**6]),
    seed=st.integers(0, 2**31),
)
def test_chunks_of_any_size_walk_as_the_swap_loop(counts, clients, per_client, rows, seed):
    # _ROWS_AT_1M = 10^6: a chunk holds every bad row (many suspects, rows changed before their turn);
    # 50: chunks of 8 rows (many chunk ends)
    counts = np.array(counts)
    per_client = min(per_client, counts.size)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(slot_rows, "_ROWS_AT_1M", rows)
        _check(_slots(counts, clients, per_client), clients, per_client, seed, 4 * clients + 100)


@pytest.mark.parametrize("per_client", [3, 4, 5])
def test_thousands_of_rows_as_the_swap_loop(per_client):
    counts = np.random.default_rng(per_client).integers(1, 9, 10)
    clients = 4000
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(slot_rows, "_ROWS_AT_1M", 20000)  # chunks of ~1260 rows at N = 4000
        _check(_slots(counts, clients, per_client), clients, per_client, per_client, 4 * clients + 100)


@pytest.mark.parametrize("seed", [0, 1])
def test_rare_partners_run_past_the_window_as_the_swap_loop(seed):
    # Labels 0 and 1 sit in every row, 2 in all but 3: a row [0, 1, 2]-less repeat of 2 finds one of 3
    # partners in ~100 tries, past the window's estimate (the window doubles)
    clients = 300
    slots = np.repeat(np.arange(4, dtype=np.uint8), [clients, clients, clients - 3, 3])
    _check(slots, clients, 3, seed, 4 * clients + 100)


@pytest.mark.parametrize(("labels", "dtype"), [(40, np.int16), (63, np.int64), (70, np.int32)])
def test_wide_labels_as_the_swap_loop(labels, dtype):
    # 32-63 labels: a try is two words (Python integers); 70: the old one-swap-at-a-time loop
    counts = np.random.default_rng(labels).integers(1, 5, labels) * 40
    clients = 600
    assert slot_rows.fits(_slots(counts, clients, 3, dtype).reshape(-1, 3)) == (labels <= 64)
    _check(_slots(counts, clients, 3, dtype), clients, 3, labels, 4 * clients + 100)


def test_fits_only_small_non_negative_integer_labels():
    assert slot_rows.fits(np.array([[0, 63, 5]]))
    assert not slot_rows.fits(np.array([[0, 64, 5]]))
    assert not slot_rows.fits(np.array([[-1, 3, 5]], dtype=np.int8))
    assert not slot_rows.fits(np.zeros((0, 3), dtype=np.int64))
