"""``label_skew``'s grid of (client, label) slots: a random arrangement with distinct labels per client.

:func:`assign_distinct` shuffles the slots' labels into a ``[N, L]`` grid, then repairs the rows (clients)
that hold a label twice by random swaps: each repeat tries slots (s, b) drawn by ``rng.integers(N)``,
``rng.integers(L)`` until one qualifies. The swaps are sequential — whether a try qualifies depends on the
swaps before it, and so does which try the next repeat starts from — and both the grid and the generator's
state afterwards are part of the split (the label members' shuffles are drawn next).

For two labels per client (the common case, and the one that reaches 10^6 clients) the walk runs in chunks
of consecutive repeats (:func:`_walk_pairs`): every repeat of a chunk is resolved against the grid as it
stood at the chunk's start, vectorised except for a short scalar chain (the next qualifying try of each
repeat, from lookup tables), then the first repeat whose outcome could depend on a swap made earlier in the
chunk (a try, or the repeat's own row, on a row that swap changed) is found, and the chunk is cut there. The
cut repeat starts the next chunk, on the updated grid, so the result is the one-swap-at-a-time walk's, bit
for bit (tests in ``tests/fl/test_partitions*.py`` against the one-``rng.integers``-at-a-time loop
and against digests of splits made by the code before). Three or more labels per client (labels in [0, 63]):
:func:`~ampfl.fl.data.slot_rows.walk_many`, chunks walked on precomputed words per try; other labels, and
passes whose try budget is shorter than a chunk's window, keep the one-swap-at-a-time :func:`_walk_rows`.
Only numpy is imported here.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from ampfl.fl.data.slot_rows import fits, walk_many
from ampfl.fl.stream_draws import LemireMark, lemire_block, rewind, supports

__all__ = ["assign_distinct"]

_REPAIR_PASSES = 50
#: repeats per chunk of :func:`_walk_pairs` at N = 10^6 (scaled by sqrt(N / 10^6): a chunk's chance of a cut
#: grows as chunk² / N)
_CHUNK_AT_1M = 640


def assign_distinct(
    slot_labels: np.ndarray, num_clients: int, per_client: int, rng: np.random.Generator
) -> np.ndarray:
    """A random ``[num_clients, per_client]`` arrangement of ``slot_labels`` with distinct labels per row."""
    grid = rng.permutation(slot_labels).reshape(num_clients, per_client)
    if _distinct(slot_labels) == per_client:  # every client needs every label: nothing to randomise
        return np.sort(slot_labels).reshape(per_client, num_clients).T.copy()
    repaired = _repair(grid, num_clients, per_client, rng)
    if repaired is not None:
        return repaired
    # Deterministic fallback: sorted slots dealt column by column. Each label occupies a run of at most
    # num_clients consecutive slots, so positions i and i + num_clients never share a label.
    ordered = np.sort(slot_labels)
    grid = ordered.reshape(per_client, num_clients).T.copy()
    return grid[rng.permutation(num_clients)]


def _tries(num_clients: int) -> int:
    """Tries per repeated label before it gives up for the pass."""
    return 4 * num_clients + 100


def _distinct(values: np.ndarray) -> int:
    """``np.unique(values).size``, by ``np.bincount`` for small non-negative integers."""
    small = values.size and np.can_cast(values.dtype, np.intp)
    if small and 0 <= int(values.min()) <= int(values.max()) < 2**16:
        return int(np.count_nonzero(np.bincount(values.astype(np.intp, copy=False))))
    return int(np.unique(values).size)


def _repair(
    grid: np.ndarray, num_clients: int, per_client: int, rng: np.random.Generator
) -> np.ndarray | None:
    """Up to ``_REPAIR_PASSES`` passes over the rows holding a label twice; each repeated label swaps with a
    random slot (s, b) of another row holding neither label (the first of ``4N + 100`` tries that qualifies).
    The tries' coins ``rng.integers(N)``, ``rng.integers(per_client)`` are drawn ahead in blocks
    (:class:`PairDraws`), with the same values and the generator left where the one-by-one calls leave it.
    A swap never creates a repeat (both values are new to their rows), so a pass in which every repeat found
    its swap leaves no bad row: the next pass would find none and draw nothing, and is skipped. None when
    rows still repeat a label after the passes."""
    tries = _tries(num_clients)
    draws = PairDraws(rng, num_clients, per_client)
    grid = np.array(grid, copy=True)
    t = 0  # pairs taken
    walk = (
        _walk_pairs
        if per_client == 2
        else partial(walk_many, one_at_a_time=_walk_rows)
        if fits(grid)
        else _walk_rows
    )
    try:
        for _ in range(_REPAIR_PASSES):
            bad = np.flatnonzero(_repeats(grid))
            if bad.size == 0:
                return grid
            t, failed = walk(grid, bad, t, tries, draws)
            if not failed:
                return grid
        return None
    finally:
        draws.close(t)


def _walk_rows(grid: np.ndarray, bad: np.ndarray, t: int, tries: int, draws: PairDraws) -> tuple[int, bool]:
    """One pass of the walk, any number of labels per row, on Python lists, one swap at a time (labels
    outside [0, 63], or what is left of a pass with a short try budget); changes ``grid`` in place and
    returns (pairs taken, whether some repeat found no swap)."""
    n, p = grid.shape
    cells: list[int] = grid.reshape(-1).tolist()  # row r: cells[r * p : (r + 1) * p]
    rows_s: list[int] = []
    cols_b: list[int] = []
    failed = False
    for r in bad.tolist():
        lo = r * p
        row = cells[lo : lo + p]
        for a in range(1, p):
            value = row[a]
            if value not in row[:a]:  # a first occurrence
                continue
            for _ in range(tries):
                if t >= len(rows_s):
                    s_all, b_all = draws.upto(max(t + 1, 2 * t))
                    rows_s, cols_b = s_all.tolist(), b_all.tolist()
                s, b = rows_s[t], cols_b[t]
                t += 1
                if s != r:
                    other = cells[s * p : s * p + p]
                    if value not in other and other[b] not in cells[lo : lo + p]:
                        cells[lo + a], cells[s * p + b] = other[b], value
                        break
            else:
                failed = True
    grid[...] = np.asarray(cells, dtype=grid.dtype).reshape(n, p)
    return t, failed


def _walk_pairs(grid: np.ndarray, bad: np.ndarray, t: int, tries: int, draws: PairDraws) -> tuple[int, bool]:
    """One pass of the walk with two labels per row, in chunks (module docstring); ``grid`` (C-contiguous)
    changes in place.

    Row r = [v, v] (still repeating when its turn comes; else skipped without a try): try (s, b) qualifies iff
    v is not in row s (so s != r), and the swap is ``r[1], s[b] = s[b], v``. Returns (pairs taken, whether
    some repeat found no swap in ``tries`` tries)."""
    n = grid.shape[0]
    cells = grid.reshape(-1)  # a view: row r is cells[2r], cells[2r + 1] (1-D gathers are the fast ones)
    never = np.iinfo(np.int64).max
    changed_at = np.full(n, never, dtype=np.int64)  # try (in the chunk's window) at which a row first changed
    chunk = max(16, int(_CHUNK_AT_1M * np.sqrt(n / 1e6)))
    esc = min(255, tries)  # a step of the chain that long (or off the window) is walked alone
    width = int(cells.max()) + 1
    sets = int(cells.min()) >= 0 and width <= 64 and np.can_cast(cells.dtype, np.intp)
    held = _LabelSets(cells, width) if sets else None
    per_row = 2.0  # tries per repeat so far (sizes the window of tries)
    if held is not None:  # draw about as many pairs as the pass will take, in one block
        first_col, repeated = cells[0::2], cells[2 * bad]
        within = np.bincount(first_col, minlength=width) + np.bincount(cells[1::2], minlength=width)
        within -= np.bincount(repeated, minlength=width)  # rows holding each label
        lacking = np.maximum(n - within, 1)
        draws.upto(t + int(1.02 * np.sum(np.bincount(repeated, minlength=width) * n / lacking)) + 1024)
    failed = False
    i = 0
    while i < bad.size:
        rows = bad[i : i + chunk]
        v = cells[2 * rows]
        live = np.flatnonzero(cells[2 * rows + 1] == v)  # repeats at the chunk's start (a swap makes none)
        if live.size == 0:
            i += rows.size
            continue
        span = min(int(per_row * live.size * 1.25) + 32, tries - 1)
        s_all, b_all = draws.upto(t + span)
        s_try = s_all[t : t + span]
        if held is not None:
            code = v[live].tolist()
            ok = held.lacks(s_try)  # [width, span]: whether tried row s lacks label u
        else:
            labels, inverse = np.unique(v[live], return_inverse=True)
            code = inverse.tolist()
            a0, a1 = cells[2 * s_try], cells[2 * s_try + 1]
            ok = (a0 != labels[:, None]) & (a1 != labels[:, None])
        # step[u][j]: 1 + (first try >= j qualifying for label u) - j, or 0 (escape) from esc on or past the
        # window; the chain jumps far past it on an escape, so the next lookup raises IndexError. Computed
        # on the tries in reverse order (m = span - 1 - j): the last qualifying m' <= m, by a running max.
        shifted = np.arange(span) + 256  # m + 256 (256 > esc: "none" lands at a step >= esc)
        last = ok[:, ::-1] * shifted
        np.maximum.accumulate(last, axis=1, out=last)  # m' + 256, or 0 when no m' <= m qualifies
        step = shifted + 1 - last
        step[step >= esc] = 0
        tables = [row.tobytes() + b"\0" for row in step.astype(np.uint8)[:, ::-1]]
        far = 1 << 62
        ends: list[int] = []  # tries used in the chunk after each live repeat
        add = ends.append
        pos = 0
        try:
            for table in [tables[u] for u in code]:
                pos += table[pos] or far
                add(pos)
        except IndexError:  # only after an escape step: cut there (below)
            pass
        walked = len(ends) - (1 if ends and ends[-1] >= far else 0)
        end, k_live = np.asarray(ends[:walked], dtype=np.int64), live[:walked]
        hit = end - 1  # each walked repeat's qualifying try
        r_live = rows[k_live]
        touched = np.concatenate([r_live, s_try[hit]])
        np.minimum.at(changed_at, touched, np.concatenate([hit, hit]))
        # cut at the first repeat whose outcome may differ from the walk one swap at a time: a try on a row
        # changed at an earlier try, its own row changed before its first try, or an escape
        cut = rows.size if walked == live.size else int(live[walked])
        if walked:
            late = np.flatnonzero(changed_at[s_try[: int(end[-1])]] < np.arange(int(end[-1])))
            if late.size:
                cut = min(cut, int(k_live[np.searchsorted(end, late[0], side="right")]))
            own = np.flatnonzero(changed_at[r_live[1:]] < end[:-1]) + 1  # (the first one starts at try 0)
            if own.size:
                cut = min(cut, int(k_live[own[0]]))
        changed_at[touched] = never
        done = int(np.searchsorted(k_live, cut))  # live repeats before the cut
        if done:
            r, j = r_live[:done], t + hit[:done]
            target = 2 * s_all[j] + b_all[j]
            moved = cells[target]
            cells[target] = cells[2 * r]
            cells[2 * r + 1] = moved
            if held is not None:
                held.update(cells, np.concatenate([r, s_all[j]]))
            used = int(end[done - 1])
            t += used
            per_row = 0.5 * per_row + 0.5 * used / done
        i += cut
        if cut == 0:  # the first repeat's answer lies far or beyond the window: walk it alone
            t, miss = _walk_one(grid, int(rows[0]), t, tries, draws)
            if held is not None and not miss:
                held.update(cells, np.array([rows[0], draws.rows[t - 1]]))
            failed |= miss
            i += 1
    return t, failed


class _LabelSets:
    """Each row's labels as a bit set (labels 0 .. 63): :func:`_walk_pairs` tests many tries at once."""

    def __init__(self, cells: np.ndarray, width: int) -> None:
        kinds = (np.uint8, np.uint16, np.uint32, np.uint64)
        self.dtype: Any = next(d for d in kinds if np.iinfo(d).bits >= width)
        self.bits = self._bit(np.arange(width))[:, None]
        self.sets = self._of(cells[0::2], cells[1::2])

    def _bit(self, labels: np.ndarray) -> np.ndarray:
        return np.asarray(np.left_shift(np.ones(1, dtype=self.dtype), labels.astype(self.dtype)))

    def _of(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.asarray(np.bitwise_or(self._bit(a), self._bit(b)))

    def lacks(self, rows: np.ndarray) -> np.ndarray:
        """``[width, len(rows)]``: whether row ``rows[j]`` lacks label u."""
        return np.asarray((self.sets[rows] & self.bits) == 0)

    def update(self, cells: np.ndarray, rows: np.ndarray) -> None:
        self.sets[rows] = self._of(cells[2 * rows], cells[2 * rows + 1])


def _walk_one(grid: np.ndarray, r: int, t: int, tries: int, draws: PairDraws) -> tuple[int, bool]:
    """Repeat r = [v, v] of :func:`_walk_pairs` alone, on the current grid: windows of tries until one
    qualifies or ``tries`` are spent. Returns (pairs taken, whether none qualified)."""
    v = grid[r, 0]
    pos, width = 0, 1024
    while pos < tries:
        width = min(tries - pos, 2 * width)
        s_all, b_all = draws.upto(t + pos + width)
        held = grid[s_all[t + pos : t + pos + width]]
        found = np.flatnonzero((held[:, 0] != v) & (held[:, 1] != v))
        if found.size:
            j = t + pos + int(found[0])
            s, b = int(s_all[j]), int(b_all[j])
            grid[r, 1], grid[s, b] = grid[s, b], v
            return j + 1, False
        pos += width
    return t + tries, True


def _repeats(grid: np.ndarray) -> np.ndarray:
    """Whether each row of ``grid`` holds some value twice (pairwise comparisons of the columns)."""
    p = grid.shape[1]
    if p > 8:
        ordered = np.sort(grid, axis=1)
        return np.asarray((ordered[:, 1:] == ordered[:, :-1]).any(axis=1))
    out = np.zeros(grid.shape[0], dtype=bool)
    for a in range(1, p):
        for c in range(a):
            out |= grid[:, a] == grid[:, c]
    return out


class PairDraws:
    """The tries' coins ``(rng.integers(n), rng.integers(p))``, pair after pair, drawn ahead in blocks
    (:meth:`upto`); :meth:`close` leaves ``rng`` where as many one-by-one calls as pairs taken would have
    left it. PCG64: blocks reproduced by :func:`~ampfl.fl.stream_draws.lemire_block`; any other bit
    generator: the one-by-one calls themselves, replayed up to the pairs taken at :meth:`close`."""

    def __init__(self, rng: np.random.Generator, n: int, p: int) -> None:
        self.rng, self.n, self.p = rng, n, p
        self.block = supports(rng)
        self.start: Any = rng.bit_generator.state
        self.marks: list[tuple[int, LemireMark]] = []  # (first pair, mark) of each block
        self.rows = np.zeros(0, dtype=np.int64)
        self.cols = np.zeros(0, dtype=np.int64)

    def upto(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Row and column coins of (at least) the first ``count`` pairs."""
        drawn = self.rows.size
        if count <= drawn:
            return self.rows, self.cols
        size = max(1024, drawn // 4, count - drawn)
        if self.block:
            bounds = np.tile(np.array([self.n - 1, self.p - 1], dtype=np.uint64), size)
            values, mark = lemire_block(self.rng, bounds)
            self.marks.append((drawn, mark))
            pairs = values.reshape(size, 2)
            rows, cols = pairs[:, 0], pairs[:, 1]
        else:
            calls = [(int(self.rng.integers(self.n)), int(self.rng.integers(self.p))) for _ in range(size)]
            rows, cols = (np.array(c, dtype=np.int64) for c in zip(*calls, strict=True))
        self.rows = np.concatenate([self.rows, rows])
        self.cols = np.concatenate([self.cols, cols])
        return self.rows, self.cols

    def close(self, taken: int) -> None:
        """Leave the generator after the first ``taken`` pairs."""
        if taken == self.rows.size:
            return
        if not self.block:
            self.rng.bit_generator.state = self.start
            for _ in range(taken):
                self.rng.integers(self.n), self.rng.integers(self.p)
            return
        first, mark = next((f, m) for f, m in reversed(self.marks) if f <= taken)
        rewind(self.rng, mark, 2 * (taken - first))
