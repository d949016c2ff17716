"""numpy's bounded integer draws, for many calls at once, bit for bit.

A ``np.random.Generator`` on ``PCG64`` serves every bounded integer in [0, r] with r < 2³² −1 (``integers``,
``choice(..., replace=False)`` by Floyd's algorithm and its shuffle) from one stream of 32-bit words: each
64-bit output gives its low, then its high half (the high half waits in the bit generator's ``uinteger``
buffer between calls). Each value is Lemire's: m = u·(r+1), rejected while (m mod 2³²) < (2³² − r − 1) mod
(r+1) (rare: probability below (r+1)/2³²), else ⌊m/2³²⌋. A bound r = 0 draws no word.

:func:`lemire_values` reproduces a whole sequence of such calls from one block of words, and leaves the bit
generator exactly where the calls one by one would have left it (:func:`lemire_block` also tells where each
prefix of the calls leaves it, for :func:`rewind`: draw ahead, keep only the calls used); :func:`floyd_choice`
and :func:`shuffle_rows` rebuild ``choice(n, size, replace=False)`` for many clients from those values. Tested
against numpy's own calls (``tests/fl/test_sampling.py``): a numpy that changed its algorithms fails there.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

_LOW = np.uint64(0xFFFFFFFF)
_SHIFT = np.uint64(32)
_CHUNK = 4096
_LITTLE = sys.byteorder == "little"


def supports(rng: np.random.Generator) -> bool:
    """Whether :func:`lemire_values` can reproduce ``rng``'s draws (its bit generator is PCG64)."""
    return type(rng.bit_generator) is np.random.PCG64


def _words(bitgen: Any, buffered: int | None, count: int) -> np.ndarray:
    """The next ``count`` 32-bit words of the stream (uint64); advances ``bitgen`` (restored by callers)."""
    head = [] if buffered is None else [buffered]
    raw = bitgen.random_raw(max(0, -(-(count - len(head)) // 2)))
    out = np.empty(len(head) + 2 * raw.size, dtype=np.uint64)
    out[: len(head)] = head
    if _LITTLE:  # the uint32 halves of each output in memory: low, then high
        out[len(head) :] = raw.view(np.uint32)
    else:  # pragma: no cover - big-endian machines
        out[len(head) :: 2] = raw & _LOW
        out[len(head) + 1 :: 2] = raw >> _SHIFT
    return out


def lemire_values(rng: np.random.Generator, bounds: np.ndarray) -> np.ndarray:
    """The values in [0, bounds[t]] that ``len(bounds)`` successive bounded draws of ``rng`` give (int64).

    Equal to ``[rng.integers(0, r + 1) for r in bounds]`` (and to the bounded draws inside ``choice``), and
    ``rng`` is left in the same state. Requires :func:`supports` and every bound in [0, 2³² − 2].
    """
    return lemire_block(rng, bounds)[0]


def lemire_block(rng: np.random.Generator, bounds: np.ndarray) -> tuple[np.ndarray, LemireMark]:
    """:func:`lemire_values` and a :class:`LemireMark`: where the generator stood before the draws, and how
    many 32-bit words each prefix of them used (for :func:`rewind`)."""
    bounds = np.asarray(bounds, dtype=np.uint64).reshape(-1)
    state = rng.bit_generator.state
    skips: list[int] = []
    if bounds.size and bounds.all():
        return _draws(rng, bounds, skips), LemireMark(state, None, np.asarray(skips, dtype=np.int64))
    out = np.zeros(bounds.size, dtype=np.int64)
    live = np.flatnonzero(bounds)  # a bound of 0 draws nothing
    if live.size:
        out[live] = _draws(rng, bounds[live], skips)
    return out, LemireMark(state, live, np.asarray(skips, dtype=np.int64))


class LemireMark:
    """The bit generator's ``state`` before a :func:`lemire_block`, the draws that used words (``live``; None:
    all) and the (live) draw indices whose word was rejected (``skips``, sorted, repeated per rejection)."""

    __slots__ = ("live", "skips", "state")

    def __init__(self, state: Any, live: np.ndarray | None, skips: np.ndarray) -> None:
        self.state, self.live, self.skips = state, live, skips

    def words(self, calls: int) -> int:
        """32-bit words used by the first ``calls`` draws of the block."""
        used = calls if self.live is None else int(np.searchsorted(self.live, calls))
        return used + int(np.searchsorted(self.skips, used))


def rewind(rng: np.random.Generator, mark: LemireMark, calls: int) -> None:
    """Leave ``rng`` where the first ``calls`` draws of the block that ``mark`` describes leave it (as if only
    those calls had been made since ``mark``)."""
    state = mark.state
    buffered = int(state["uinteger"]) if state["has_uint32"] else None
    _commit(rng.bit_generator, state, buffered, mark.words(calls))


def _draws(rng: np.random.Generator, bounds: np.ndarray, skips: list[int]) -> np.ndarray:
    """:func:`lemire_values` for bounds that are all > 0; appends the index of a draw whose word was rejected
    to ``skips``, once per rejection. A rejected word shifts every later draw by one word: handled chunk by
    chunk (``_CHUNK`` draws), so each rejection costs a pass over one chunk only."""
    bitgen: Any = rng.bit_generator
    saved = bitgen.state
    buffered = int(saved["uinteger"]) if saved["has_uint32"] else None
    t = bounds.size
    ex = bounds + np.uint64(1)
    words = _words(bitgen, buffered, t + 64 + t // 256)
    out = np.empty(t, dtype=np.uint64)
    shift = 0  # words rejected so far
    for lo in range(0, t, _CHUNK):
        hi = min(t, lo + _CHUNK)
        e = ex[lo:hi]
        if hi + shift > words.size:
            words = _refetch(bitgen, saved, buffered, 2 * (hi + shift) + 64)
        m = words[lo + shift : hi + shift] * e
        pos: np.ndarray | None = None  # the word each draw of the chunk uses, once a rejection shifted them
        start = 0
        while True:
            left = m[start:] & _LOW
            near = np.flatnonzero(left < e[start:])  # only these can be rejected (threshold < r + 1)
            en = e[start:][near]
            rejected = near[left[near] < (np.uint64(2**32) - en) % en]
            if rejected.size == 0:
                break
            start += int(rejected[0])
            skips.append(lo + start)
            if pos is None:
                pos = np.arange(lo + shift, hi + shift, dtype=np.int64)
            pos[start:] += 1
            if int(pos[-1]) >= words.size:  # more rejections than words fetched: fetch again, more
                words = _refetch(bitgen, saved, buffered, 2 * int(pos[-1]) + 64)
            m[start:] = words[pos[start:]] * e[start:]
        if pos is not None:
            shift = int(pos[-1]) + 1 - hi
        out[lo:hi] = m
    _commit(bitgen, saved, buffered, t + shift)
    out >>= _SHIFT
    return out.view(np.int64)


def _refetch(bitgen: Any, saved: Any, buffered: int | None, count: int) -> np.ndarray:
    bitgen.state = saved
    return _words(bitgen, buffered, count)


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
    chain t → r, resolved in a few vectorised passes (no loop over the steps or the rows)."""
    n = np.asarray(sizes, dtype=np.int64).reshape(-1, 1)
    v = values[:, :size]
    keys = np.sort(v * size + np.arange(size, dtype=np.int64), axis=1)  # by value, equal values by step
    ordered = keys // size
    again = ordered[:, 1:] == ordered[:, :-1]
    if not again.any():  # no draw repeats an earlier one: nothing was taken
        return shuffle_rows(v, values[:, size:])
    dup = np.zeros(v.shape, dtype=bool)  # v_t equal to the draw of an earlier step of the same row
    rows_again, cols_again = np.nonzero(again)
    dup[rows_again, keys[rows_again, cols_again + 1] % size] = True
    r = v - (n - size)  # v_t = j_r
    rows, cols = np.nonzero((r >= 0) & (r < np.arange(size)))
    src = r[rows, cols]
    taken = dup.copy()
    while rows.size:  # taken_t = dup_t or taken_r, along chains of decreasing steps (a few passes)
        now = dup[rows, cols] | taken[rows, src]
        if np.array_equal(now, taken[rows, cols]):
            break
        taken[rows, cols] = now
    chosen = np.where(taken, n - size + np.arange(size, dtype=np.int64), v)
    return shuffle_rows(chosen, values[:, size:])


def shuffle_rows(rows: np.ndarray, swaps: np.ndarray) -> np.ndarray:
    """numpy's in-place shuffle of every row (i = m−1 … 1: swap positions i and ``swaps[:, m−1−i]``); one
    vectorised swap per position, over all rows at once (columns kept contiguous)."""
    k, m = rows.shape
    out = np.array(rows.T, dtype=np.int64, order="C")  # [m, k]: position i of every row is out[i]
    flat = out.reshape(-1)
    partner = swaps.T * k + np.arange(k, dtype=np.int64)  # flat index of each step's swap partner
    for step, i in enumerate(range(m - 1, 0, -1)):
        p = partner[step]
        held = flat[p]
        flat[p] = out[i]
        out[i] = held
    return np.ascontiguousarray(out.T)
