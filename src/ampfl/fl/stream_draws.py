"""numpy's bounded integer draws, for many calls at once, bit for bit (issue 17).

A ``np.random.Generator`` on ``PCG64`` serves every bounded integer in [0, r] with r < 2³² −1 (``integers``,
``choice(..., replace=False)`` by Floyd's algorithm and its shuffle) from one stream of 32-bit words: each
64-bit output gives its low, then its high half (the high half waits in the bit generator's ``uinteger``
buffer between calls). Each value is Lemire's: m = u·(r+1), rejected while (m mod 2³²) < (2³² − r − 1) mod
(r+1) (rare: probability below (r+1)/2³²), else ⌊m/2³²⌋. A bound r = 0 draws no word.

:func:`lemire_values` reproduces a whole sequence of such calls from one block of words, and leaves the bit
generator exactly where the calls one by one would have left it; :func:`floyd_choice` and
:func:`shuffle_rows` rebuild ``choice(n, size, replace=False)`` for many clients from those values. Tested
against numpy's own calls (``tests/fl/test_sampling.py``): a numpy that changed its algorithms fails there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_LOW = np.uint64(0xFFFFFFFF)
_SHIFT = np.uint64(32)


def supports(rng: np.random.Generator) -> bool:
    """Whether :func:`lemire_values` can reproduce ``rng``'s draws (its bit generator is PCG64)."""
    return type(rng.bit_generator) is np.random.PCG64


def _words(bitgen: Any, buffered: int | None, count: int) -> np.ndarray:
    """The next ``count`` 32-bit words of the stream (uint64); advances ``bitgen`` (restored by callers)."""
    head = [] if buffered is None else [buffered]
    raw = bitgen.random_raw(max(0, -(-(count - len(head)) // 2)))
    pairs = np.empty((raw.size, 2), dtype=np.uint64)
    pairs[:, 0] = raw & _LOW
    pairs[:, 1] = raw >> _SHIFT
    return np.concatenate([np.asarray(head, dtype=np.uint64), pairs.reshape(-1)])


def lemire_values(rng: np.random.Generator, bounds: np.ndarray) -> np.ndarray:
    """The values in [0, bounds[t]] that ``len(bounds)`` successive bounded draws of ``rng`` give (int64).

    Equal to ``[rng.integers(0, r + 1) for r in bounds]`` (and to the bounded draws inside ``choice``), and
    ``rng`` is left in the same state. Requires :func:`supports` and every bound in [0, 2³² − 2].
    """
    bounds = np.asarray(bounds, dtype=np.uint64).reshape(-1)
    out = np.zeros(bounds.size, dtype=np.int64)
    live = np.flatnonzero(bounds)  # a bound of 0 draws nothing
    if live.size == 0:
        return out
    bitgen: Any = rng.bit_generator
    saved = bitgen.state
    buffered = int(saved["uinteger"]) if saved["has_uint32"] else None
    ex = bounds[live] + np.uint64(1)
    pos = np.arange(live.size, dtype=np.int64)  # the word each draw uses (shifted by earlier rejections)
    words = _words(bitgen, buffered, live.size + 64)
    start = 0
    while True:
        if int(pos[-1]) >= words.size:  # more rejections than words fetched: fetch again, more
            bitgen.state = saved
            words = _words(bitgen, buffered, 2 * words.size)
        left = (words[pos[start:]] * ex[start:]) & _LOW
        near = np.flatnonzero(left < ex[start:])  # only these can be rejected (threshold < r + 1)
        e = ex[start:][near]
        rejected = near[left[near] < (np.uint64(2**32) - e) % e]
        if rejected.size == 0:
            break
        start += int(rejected[0])
        pos[start:] += 1
    out[live] = ((words[pos] * ex) >> _SHIFT).astype(np.int64)
    _commit(bitgen, saved, buffered, int(pos[-1]) + 1)
    return out


def _commit(bitgen: Any, saved: Any, buffered: int | None, used: int) -> None:
    """Set ``bitgen`` to ``saved`` advanced by ``used`` 32-bit words (numpy's half-word buffer included)."""
    bitgen.state = saved
    fresh = used - (buffered is not None)
    if fresh < 0:
        return
    raw = bitgen.random_raw(-(-fresh // 2)) if fresh else np.zeros(0, dtype=np.uint64)
    state = bitgen.state
    state["has_uint32"] = fresh % 2
    state["uinteger"] = int(raw[-1] >> _SHIFT) if fresh % 2 else 0
    bitgen.state = state


def floyd_bounds(sizes: np.ndarray, size: int) -> np.ndarray:
    """``[k, 2·size − 1]`` bounds of ``choice(n_i, size, replace=False)`` per row (Floyd's ``size`` draws,
    j = n − size … n − 1, then its shuffle's ``size − 1``, i = size − 1 … 1). Needs size ≤ n_i and not
    (n_i > 10000 and size > n_i // 50) (numpy then shuffles a whole range instead)."""
    n = np.asarray(sizes, dtype=np.int64).reshape(-1, 1)
    floyd = n - size + np.arange(size, dtype=np.int64)
    shuffle = np.broadcast_to(np.arange(size - 1, 0, -1, dtype=np.int64), (n.shape[0], size - 1))
    return np.concatenate([floyd, shuffle], axis=1)


def floyd_choice(sizes: np.ndarray, size: int, values: np.ndarray) -> np.ndarray:
    """The rows of ``choice(n_i, size, replace=False)`` from the values of :func:`floyd_bounds`' draws.

    Floyd: at step t (j_t = n − size + t) the draw v_t is taken unless already taken, then j_t is. v_t is
    already taken iff it equals an earlier draw, or v_t = j_r (r < t) and step r took j_r: an OR along the
    chain t → r, resolved by pointer jumping (no loop over the steps)."""
    k = values.shape[0]
    n = np.asarray(sizes, dtype=np.int64).reshape(-1, 1)
    v = values[:, :size]
    j = n - size + np.arange(size, dtype=np.int64)
    # v_t equal to an earlier draw of the same row
    key = (np.arange(k, dtype=np.int64)[:, None] * (int(n.max()) + 1) + v).reshape(-1)
    order = np.argsort(key, kind="stable")
    dup = np.zeros(key.size, dtype=bool)
    dup[order[1:]] = key[order[1:]] == key[order[:-1]]
    r = (v - (n - size)).reshape(-1)  # v_t = j_r
    t = np.tile(np.arange(size, dtype=np.int64), k)
    base = np.repeat(np.arange(k, dtype=np.int64) * size, size)
    ptr = np.where((r >= 0) & (r < t), base + r, -1)
    taken = dup.copy()
    while True:
        has = ptr >= 0
        if not has.any():
            break
        taken[has] |= taken[ptr[has]]
        ptr[has] = ptr[ptr[has]]
    chosen = np.where(taken.reshape(k, size), j, v)
    return shuffle_rows(chosen, values[:, size:])


def shuffle_rows(rows: np.ndarray, swaps: np.ndarray) -> np.ndarray:
    """numpy's in-place shuffle of every row (i = m−1 … 1: swap positions i and ``swaps[:, m−1−i]``)."""
    out = np.array(rows, dtype=np.int64, copy=True)
    m = out.shape[1]
    idx = np.arange(out.shape[0])
    for step, i in enumerate(range(m - 1, 0, -1)):
        s = swaps[:, step]
        held = out[idx, s]
        out[idx, s] = out[:, i]
        out[:, i] = held
    return out
