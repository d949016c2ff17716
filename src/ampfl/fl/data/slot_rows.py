"""The repair walk of :mod:`ampfl.fl.data.slot_grid` for 3+ labels per client, in chunks.

The walk visits the rows holding a label twice in order; a repeat (row r, position a, label v: v also sits
earlier in r) takes tries (s, b) until one qualifies — v not in row s, and s[b] not among r's labels as they
are at that moment — and swaps ``r[a], s[b] = s[b], v``. Each try's outcome depends on the swaps before it,
so this module walks it exactly, but on precomputed words instead of rows:

- a chunk of consecutive bad rows is taken with a window of tries, and every try j gets one integer
  ``W[j] = set(s_j) | bit(s_j[b_j]) << off`` from the grid as the chunk found it; a repeat is the integer
  ``q = bit(v) | set(r) << off``, and try j qualifies iff ``W[j] & q == 0``;
- a try whose row may have changed earlier in the chunk — a row of the chunk, or a row tried twice in the
  window (a row changes only as a chunk row or as the partner of an earlier try) — is a *suspect*: its word
  is 0, so the scan stops there, and it is decided on the row as it is then (kept in ``cur`` for such rows);
- a chunk row changed (as a partner) before its turn is walked from its labels then (its repeats may
  differ); a row whose tries run past the window ends the chunk at the row's start (the first row of a
  chunk: the window is doubled). A window is shorter than a repeat's budget of tries, so no repeat fails
  here: where it would not be (a short budget, rare partners), the rest of the pass is the one-swap-at-a-time
  loop of :mod:`~ampfl.fl.data.slot_grid`.

Only Python integer operations per try; the swaps are written to the grid at the chunk's end (the last write
of a cell wins). The result, and the pairs taken, are the one-swap-at-a-time walk's, bit for bit (tests in
``tests/fl/test_partitions_identity.py``). Only numpy is imported here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable

    from ampfl.fl.data.slot_grid import PairDraws

    _Walk = Callable[[np.ndarray, np.ndarray, int, int, PairDraws], tuple[int, bool]]

__all__ = ["fits", "walk_many"]

#: bad rows per chunk at N = 10^6 (scaled by sqrt(N / 10^6): the suspects grow as chunk² / N)
_ROWS_AT_1M = 4096
_ONE = np.uint64(1)


def fits(grid: np.ndarray) -> bool:
    """Whether :func:`walk_many` handles ``grid``: integer labels in [0, 63]."""
    return bool(
        grid.size and np.issubdtype(grid.dtype, np.integer) and int(grid.min()) >= 0 and int(grid.max()) < 64
    )


def walk_many(
    grid: np.ndarray, bad: np.ndarray, t: int, tries: int, draws: PairDraws, *, one_at_a_time: _Walk
) -> tuple[int, bool]:
    """One pass of the walk over rows ``bad`` (in order), any number of labels per row, labels in [0, 63]
    (:func:`fits`); ``grid`` changes in place. Returns (pairs taken, whether some repeat found no swap).
    ``one_at_a_time`` is the one-swap-at-a-time walk (same signature) that takes over the rest of the pass
    when a repeat could spend its whole try budget inside one chunk's window."""
    n, p = grid.shape
    cells = grid.reshape(-1)
    width = int(cells.max()) + 1
    off = width if width <= 31 else 64  # a word set | bit(c) << off is one int64 when 2·width <= 62
    kind: Any = next(d for d in (np.uint8, np.uint16, np.uint32, np.uint64) if np.iinfo(d).bits >= width)
    bit = np.left_shift(np.ones(1, dtype=kind), np.arange(width, dtype=kind))  # label -> its bit
    high = np.left_shift(bit.astype(np.int64), off) if off == width else None  # label -> its bit << off
    sets = _sets(grid, bit)
    flag = np.zeros(n, dtype=bool)
    m = max(8, int(_ROWS_AT_1M * np.sqrt(n / 1e6)))
    per_rep = 2.0
    span_min, first = 0, True
    i = 0
    while i < bad.size:
        rows = bad[i : i + m]
        g = _gather(grid, rows)
        rep = np.zeros(g.shape, dtype=bool)
        for a in range(1, p):
            for c in range(a):
                rep[:, a] |= g[:, a] == g[:, c]
        ri, ai = np.nonzero(rep)  # the chunk's repeats, row by row, positions ascending
        if ri.size == 0:
            i += rows.size
            continue
        span = max(span_min, int(per_rep * ri.size * 1.08) + 64)
        if span >= tries:  # a repeat could spend its budget in the window: the rest one swap at a time
            t, missed = one_at_a_time(grid, bad[i:], t, tries, draws)
            return t, missed
        s_all, b_all = draws.upto(t + span)
        s_try, b_try = s_all[t : t + span], b_all[t : t + span]
        c_try = cells[s_try * p + b_try]
        # suspects: tries on a chunk row or on a row tried twice in the window; watched: rows tried that way
        ordered = np.sort(s_try)
        twice = ordered[1:][ordered[1:] == ordered[:-1]]
        flag[rows] = True
        flag[twice] = True
        sus = flag[s_try]
        flag[rows] = False
        flag[twice] = False
        flag[s_try] = True
        watched = flag[rows][ri]
        flag[s_try] = False
        v = g[ri, ai]
        if high is not None:  # (a try's word is never 0, its label's bit is set: 0 marks a suspect)
            word = sets[s_try] | high[c_try]
            word[sus] = 0
            w_list: list[int] = word.tolist()
            q = (bit[v] | np.left_shift(sets[rows].astype(np.int64), off)[ri]).tolist()
        else:
            w_list = [
                0 if z else a | (1 << (c + 64))
                for a, c, z in zip(sets[s_try].tolist(), c_try.tolist(), sus.tolist(), strict=True)
            ]
            q = [(1 << x) | (y << 64) for x, y in zip(v.tolist(), sets[rows[ri]].tolist(), strict=True)]
        w_list.append(0)  # the window's end: a suspect
        ctx = _Chunk(grid, s_try, b_try, off, width, span)
        done, used, short = ctx.chain(w_list, rows[ri].tolist(), q, np.where(watched, ai + 1, 0).tolist())
        span_min = 2 * span if short and done == 0 else 0
        if done:
            h = np.asarray(ctx.hits, dtype=np.int64)
            k = np.flatnonzero(h >= 0)  # the swaps (the repeats of rows walked again: ~ their end)
            j = h[k]
            c = c_try[j]
            if ctx.over:  # labels of swaps decided on a suspect (the row had changed)
                c = c.copy()
                c[np.searchsorted(k, list(ctx.over))] = list(ctx.over.values())
            targets = np.stack([rows[ri[k]] * p + ai[k], s_try[j] * p + b_try[j]], axis=1).reshape(-1)
            values = np.stack([c, v[k]], axis=1).reshape(-1)
            if ctx.extra:  # swaps of rows walked from their labels then, at their place in the order
                x = np.array(ctx.extra, dtype=np.int64)  # (repeat, cell, label, cell, label)
                at = np.searchsorted(k, x[:, 0])
                targets = np.insert(targets.reshape(-1, 2), at, x[:, 1::2], axis=0).reshape(-1)
                values = np.insert(values.reshape(-1, 2), at, x[:, 2::2], axis=0).reshape(-1)
            _write(grid, sets, bit, targets, values)
            t += used
            per_rep = 0.5 * per_rep + 0.5 * max(used, 1) / done
        step = int(ri[done]) if done < ri.size else rows.size
        if first and done:  # draw about as many pairs as the pass will take, in one block
            first = False
            draws.upto(t + int(1.1 * used / step * (bad.size - i - step)) + span)
        i += step
    return t, False


def _sets(grid: np.ndarray, bit: np.ndarray) -> np.ndarray:
    """Each row's labels as a bit set."""
    out: np.ndarray = bit[grid[:, 0]]
    for a in range(1, grid.shape[1]):
        out |= bit[grid[:, a]]
    return out


def _write(
    grid: np.ndarray, sets: np.ndarray, bit: np.ndarray, targets: np.ndarray, values: np.ndarray
) -> None:
    """Write ``values`` into the cells ``targets`` of ``grid`` in order (the last write of a cell wins) and
    update the rows' bit sets."""
    if targets.size == 0:
        return
    p = grid.shape[1]
    cells = grid.reshape(-1)
    cells[targets] = values
    ordered = np.sort(targets)
    twice = ordered[1:][ordered[1:] == ordered[:-1]]
    if twice.size:  # cells written more than once: their writes again, one by one, in order
        at = np.flatnonzero(np.isin(targets, twice))
        for x, y in zip(targets[at].tolist(), values[at].tolist(), strict=True):
            cells[x] = y
    changed = targets // p  # (a row twice: the same set written twice)
    sets[changed] = _sets(_gather(grid, changed), bit)


def _gather(grid: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``grid[rows]``, each row gathered as one item of ``p`` bytes (faster than a 2-D gather)."""
    if not grid.flags.c_contiguous:  # pragma: no cover - the walk's grid is a fresh C array
        return np.asarray(grid[rows])
    items = grid.view(np.dtype((np.void, grid.shape[1] * grid.itemsize))).reshape(-1)
    return np.asarray(items[rows].view(grid.dtype)).reshape(-1, grid.shape[1])


class _Chunk:
    """One chunk's scalar walk (:meth:`chain`) and its exact decisions on suspect tries."""

    def __init__(
        self, grid: np.ndarray, s_try: np.ndarray, b_try: np.ndarray, off: int, width: int, span: int
    ) -> None:
        self.grid, self.s_try, self.b_try = grid, s_try, b_try
        self.off, self.high, self.span = off, ((1 << width) - 1) << off, span
        self.cur: dict[int, list[int]] = {}  # current labels of the watched rows the chunk changed
        self.hits: list[int] = []  # each repeat's try (the repeats of a row walked again: ~ its end)
        self.over: dict[int, int] = {}  # {repeat: label} of swaps decided on a suspect
        self.extra: list[tuple[int, int, int, int, int]] = []  # (repeat, cell, label, cell, label)

    def row(self, s: int) -> list[int]:
        """Row s's labels now (a copy of the grid's row until the chunk changes it)."""
        got = self.cur.get(s)
        return self.grid[s].tolist() if got is None else got

    def write(self, s: int, b: int, label: int) -> None:
        held = self.row(s)
        held[b] = label
        self.cur[s] = held

    def chain(self, w: list[int], rr: list[int], qs: list[int], wa: list[int]) -> tuple[int, int, bool]:
        """Walk the repeats in order (row ``rr[k]``, word ``qs[k]`` = bit(v) | set(r) << off as the chunk
        found it, ``wa[k]`` = position + 1 where the row is watched, else 0), filling ``hits``, ``over`` and
        ``extra``. Returns (repeats done, tries they used, whether it ended at the window's end)."""
        off, high, cur, hits, over = self.off, self.high, self.cur, self.hits, self.over
        add = hits.append
        pos = gained = 0
        last = skip = -1
        for r, q, watched in zip(rr, qs, wa, strict=False):
            if r != last:
                last = r
                if watched and r in cur:  # changed (as a partner) before its turn
                    pos = self.redo(w, rr, qs, wa, pos)
                    if pos < 0:  # past the window: the next chunk starts here
                        return (*self.cut(r, rr), True)
                    skip = r
                    continue
                gained = 0
            elif r == skip:
                continue
            else:  # the labels its earlier swaps brought
                h = hits[-1]
                gained |= w[h] & high or 1 << (over[len(hits) - 1] + off)
                q |= gained
            while w[pos] & q:
                pos += 1
            if w[pos]:
                add(pos)
                if watched:
                    self.write(r, watched - 1, ((w[pos] & high) >> off).bit_length() - 1)
                pos += 1
                continue
            pos, c = self.settle(w, q, pos)
            if c < 0:  # past the window: the row starts the next chunk
                return (*self.cut(r, rr), True)
            over[len(hits)] = c
            add(pos)
            if watched:
                self.write(r, watched - 1, c)
            pos += 1
        return len(hits), pos, False

    def cut(self, r: int, rr: list[int]) -> tuple[int, int]:
        """Forget row r's repeats (the chunk ends before it): (repeats done, tries they used)."""
        hits = self.hits
        k = len(hits)
        while k and rr[k - 1] == r:
            k -= 1
        del hits[k:]
        for j in [j for j in self.over if j >= k]:
            del self.over[j]
        self.extra = [x for x in self.extra if x[0] < k]
        return k, 0 if k == 0 else hits[k - 1] + 1 if hits[k - 1] >= 0 else ~hits[k - 1]

    def redo(self, w: list[int], rr: list[int], qs: list[int], wa: list[int], pos: int) -> int:
        """The repeats of a row changed before its turn, walked from its labels now (they may differ from
        those the chunk found: its swaps go to ``extra``, and its repeats in ``hits`` read ~(its end)).
        Returns the position after them, or -1 past the window (nothing recorded)."""
        k0 = len(self.hits)
        r = rr[k0]
        held = list(self.cur[r])
        rset = sum(1 << x for x in set(held))
        p = self.grid.shape[1]
        swaps = []
        for a, x in [(a, x) for a, x in enumerate(held) if x in held[:a]]:
            q = (1 << x) | (rset << self.off)
            while w[pos] & q:
                pos += 1
            pos, c = self.settle(w, q, pos)
            if c < 0:
                return -1
            swaps.append((k0, r * p + a, c, int(self.s_try[pos]) * p + int(self.b_try[pos]), x))
            rset |= 1 << c
            self.write(r, a, c)
            pos += 1
        k1 = k0
        while k1 < len(rr) and rr[k1] == r:
            k1 += 1
        self.hits.extend([~pos] * (k1 - k0))
        self.extra.extend(swaps)
        return pos

    def settle(self, w: list[int], q: int, pos: int) -> tuple[int, int]:
        """The scan of one repeat from a suspect on: (position, label c of the swap), or (pos, -1) at the
        window's end."""
        v = (q & ((1 << self.off) - 1)).bit_length() - 1
        rset = q >> self.off
        while True:
            if w[pos]:
                return pos, ((w[pos] & self.high) >> self.off).bit_length() - 1
            if pos >= self.span:
                return pos, -1
            s = int(self.s_try[pos])
            b = int(self.b_try[pos])
            held = self.row(s)
            c = held[b]
            if v not in held and not (rset >> c) & 1:
                self.write(s, b, v)
                return pos, c
            pos += 1
            while w[pos] & q:
                pos += 1
