"""Incremental composition for the PLD accountant (a run composes every round, reads ε at some).

The history of calls ``[(event, count), …]`` is split into runs of equal consecutive events. A run's PLD is
its event's PLD self-composed ``Σ count`` times in the Fourier domain (:class:`_Spectrum`: the real FFT of
each adjacency's PMF on a length m·2^j, m ∈ {4, 5, 6, 7}, holding the Chernoff window of the composition,
multiplied in once per call; one inverse FFT when ε is read); finished runs are composed into a prefix by one
convolution each. So a run of T equal rounds costs T spectrum products plus one inverse FFT per reading —
proportional to what is asked, not one convolution of the growing PLD per round (~10 s for 200 rounds of the
demo's event at load 4, now ~0.5 s read once) — and the composed PLD is a function of the history alone, not
of when ε was asked: a resumed accountant (which replays the history) answers bit for bit as one that never
stopped.

:class:`GridState` holds one grid's share: the prefix, the last run and the answers already given for this
history. The accountant keeps one per grid: the reporting grid and, for small ε, the finer ones of
``refine``, extended the same way instead of replayed from the whole history at every reading. The
self-composition is dp-accounting's (Chernoff window, truncated tails to infinity), in the form of
:func:`~ampfl.accounting.accountants.pld_fast.self_compose` up to the FFT length (tests compare them).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np
from numpy import fft

from ampfl.accounting.accountants import pld_fast
from ampfl.accounting.accountants.pld_dense import DensePmf, Pld
from ampfl.accounting.accountants.pld_fast import fft_length
from ampfl.accounting.events import PrivacyEvent

__all__ = ["Bounds", "Calls", "GridState", "fft_length"]

Calls = list[tuple[PrivacyEvent, int]]

#: Bin width (grid points) of the coarse bound that decides whether an adjacency's PMF must be rebuilt.
COARSE = 16
#: Draws ahead at which that bound is taken, so that one bound serves the readings up to there.
AHEAD = 8


@lru_cache(maxsize=8)
def _box(length: int, d: int) -> np.ndarray:
    """Σ_{r<d} e^{2πi rk/N}, k = 0..N/2 (the spectrum of a forward box sum of d points, real FFT half): the
    conjugate real FFT of d ones, one transform instead of d complex exponentials per point (a new length
    used to cost 15–50 ms)."""
    ones = np.zeros(length)
    ones[:d] = 1.0
    spectrum: np.ndarray = np.conj(fft.rfft(ones))
    return spectrum


class _Spectrum:
    """``times``-fold self-composition of one PMF kept as a spectrum: the real FFT of the PMF on a length
    m·2^j (m ∈ {4, 5, 6, 7}, :func:`fft_length`) that holds the Chernoff window of the composition, raised to
    ``times`` by one product per call (``add``); the PMF is only rebuilt (one inverse FFT) when read. The
    length grows (and the power is recomputed) only when the window outgrows it, which depends on ``times``
    alone."""

    def __init__(self, pmf: Any) -> None:
        dense = pmf.to_dense_pmf()
        self._probs = np.asarray(dense._probs, dtype=np.float64)
        self._h, self._lower, self._inf = (
            dense._discretization,
            int(dense._lower_loss),
            float(dense._infinity_mass),
        )
        self._mgfs = pld_fast.log_mgfs(self._probs)
        self._windows: dict[int, tuple[int, int, int]] = {}
        self.times, self._length, self._start = 0, 0, 0
        self._base = self._power = np.ones(1, dtype=np.complex128)
        self._pending: list[int] | None = None  # calls since the last length change, not yet multiplied in
        self._read: tuple[int, DensePmf] | None = None
        self._first_block = 4096  # the walk's first block: where the last reading stopped, and a margin
        self._powers: tuple[tuple[int, int], np.ndarray] = ((0, 0), self._base)  # (length, count): spectrum
        self._at_length: tuple[int, np.ndarray] = (0, self._base)  # (length, the PMF's real FFT there)

    @property
    def interval(self) -> float:
        """The grid's discretization interval."""
        return float(self._h)

    def _window(self, times: int) -> tuple[int, int, int]:
        """(first index, size, FFT length) of the ``times``-fold composition's window; the last few are kept
        (a round asks for its own several times, and the look-ahead for later ones)."""
        if times not in self._windows:
            if len(self._windows) > 2 * AHEAD:
                self._windows.clear()
            lower, upper = pld_fast.chernoff_window(self._mgfs, len(self._probs), times, pld_fast.TAIL_MASS)
            size = upper - lower + 1
            self._windows[times] = (lower, size, fft_length(max(size, len(self._probs))))
        return self._windows[times]

    def _infinity(self, times: int | None = None) -> float:
        """The composed infinity mass: ``times`` (default: all) draws' infinite losses plus the truncated
        tails."""
        n = self.times if times is None else times
        return pld_fast.TAIL_MASS - math.expm1(n * math.log1p(-self._inf))

    def add(self, count: int) -> None:
        """Compose ``count`` more draws. When the window outgrows the length, the spectrum at the new length
        is only built when read (:meth:`_materialize`), from the same operations in the same order, so a
        history read once at the end skips the lengths it passed through and answers the same floats."""
        times = self.times + count
        length = self._window(times)[2]
        if length != self._length:
            self._length, self._start, self._pending = length, times, []
        elif self._pending is not None:
            self._pending.append(count)
        else:  # the usual round: one product of two spectra
            step = self._base if count == 1 else pld_fast.spectrum_power(self._base, count)
            np.multiply(self._power, step, out=self._power)
        self.times = times

    def _materialize(self) -> None:
        """The spectrum at the current length: power of the start's draws, then one product per later call."""
        if self._pending is None:
            return
        self._base = self._spectrum_at(self._length)
        self._power = pld_fast.spectrum_power(self._base, self._start)
        for count in self._pending:
            step = self._base if count == 1 else pld_fast.spectrum_power(self._base, count)
            np.multiply(self._power, step, out=self._power)
        self._pending = None

    def read(self) -> DensePmf:
        if self._read is None or self._read[0] != self.times:
            self._materialize()
            lower, size, length = self._window(self.times)
            full = fft.irfft(self._power, length)
            # the window, wrapped around the FFT length as dp-accounting's np.roll (a slice when it fits)
            out = full[lower : lower + size] if 0 <= lower <= length - size else np.roll(full, -lower)[:size]
            pmf = DensePmf(self._h, self._lower * self.times + lower, np.array(out), self._infinity())
            self._read = (self.times, pmf)
        return self._read[1]

    def epsilon(self, delta: float) -> float:
        """``pld_fast.pmf_epsilon(self.read(), delta)``; the walk's first block covers about as many points
        as the last reading walked (the answer does not depend on the blocks, only the time does)."""
        eps, walked = pld_fast.walk_epsilon(self.read(), delta, self._first_block)
        self._first_block = max(4096, walked + walked // 16 + 512)
        return eps

    def coarse_epsilon(self, delta: float, factor: int, ahead: int = 0) -> float | None:
        """An upper bound on the ε(δ) of :meth:`read`'s PMF from a ``factor``-times coarser one, without the
        full inverse FFT (``None`` where the window leaves no room for the bins' alignment). With ``ahead``,
        the bound is that of the composition ``ahead`` draws later, on the current length (``None`` unless its
        window fits there: then the wrap-around is the one a reading at this length makes), which bounds every
        composition up to then as well: composing one more draw of a PLD whose finite part has Σ p·e^{−loss} ≤
        1 (every pessimistic PLD) never lowers δ(ε) (Jensen), so ε(δ) never falls as draws are added.

        The circular PMF x (length N) is summed over aligned bins of ``factor`` points, c_J = Σ_{r<D}
        x_{JD+r}: in the Fourier domain the box sum is a product (X_k · Σ_r e^{2πi rk/N}) and taking every
        D-th point folds the spectrum (C_m = (1/D) Σ_r Y_{m + rN/D}); one inverse FFT of length N/D then gives
        c. Each bin's mass sits at its largest loss, rounded up to the coarse grid, so every window point's
        mass moves up by less than 2D grid steps: ε can only grow (pessimistic rounding; mass at lower losses
        never raises δ). Points outside the window (≤ the tail mass, already counted at infinity, plus FFT
        rounding ~1e-18) join a bin below the window's first point or above its last one."""
        self._materialize()
        times, length, d = self.times + ahead, self._length, factor
        if not self._fits(length, times, d) or self._power.size != length // 2 + 1:
            return None
        power = self._power if ahead == 0 else self._power * self._base_power(ahead)
        return self._coarse(power, length, times, delta, d)

    def _fits(self, length: int, times: int, d: int) -> bool:
        """Whether the ``times``-fold window leaves room on ``length`` for bins of ``d`` points."""
        return d >= 2 and length % (2 * d) == 0 and length - self._window(times)[1] >= d - 1

    def _coarse(self, power: np.ndarray, length: int, times: int, delta: float, d: int) -> float:
        """ε(δ) of the ``d``-times coarser PMF of the ``times``-fold composition whose spectrum on ``length``
        is ``power`` (:meth:`coarse_epsilon`; the caller checked :meth:`_fits`)."""
        lower = self._window(times)[0]
        m, h = length // d, length // d // 2
        half = power * _box(length, d)  # Y_k, k ≤ N/2; Y_{N−k} = conj(Y_k)
        folded = half[: h + 1].copy()
        for r in range(1, d // 2):  # C_m = (1/D) Σ_r Y_{m + rM}, m ≤ M/2: the indices ≤ N/2 ...
            folded += half[r * m : r * m + h + 1]
        for r in range(1, d // 2 + 1):  # ... and those above, as conj(Y_{rM − m})
            folded += np.conj(half[r * m - h : r * m + 1][::-1])
        folded /= d
        coarse = fft.irfft(folded, m)
        first = lower // d  # the bin holding the window's first point: the coarse PMF starts there
        top_of_first = self._lower * times + first * d + d - 1  # its largest fine loss index
        probs = np.roll(coarse, -first)
        pmf = DensePmf(self._h * d, -(-top_of_first // d), probs, self._infinity(times))
        return pld_fast.pmf_epsilon(pmf, delta)

    def bound_at(self, times: int, delta: float, factor: int) -> float | None:
        """An upper bound on the ε(δ) that :meth:`read` gives once ``times`` ≥ :attr:`times` draws are
        composed — hence on the ε(δ) of every composition of fewer draws (:meth:`coarse_epsilon`: ε never
        falls as draws are added) — plus one grid step (the rounding of the folded FFT and of the tails'
        wrap-around move ε by orders of magnitude less). A function of the PMF, ``times``, ``delta`` and
        ``factor`` alone, whatever this spectrum's state: the ``times``-fold spectrum is built afresh on its
        own length (the window plus ``factor`` spare points). ``None`` when that length does not split into
        bins (a PMF of a few hundred points: the exact reading is cheap then)."""
        if times < self.times:
            raise ValueError(f"times must be at least the draws composed ({self.times}). Found {times}.")
        length = fft_length(max(self._window(times)[1] + factor, len(self._probs)))
        if not self._fits(length, times, factor):
            return None
        power = pld_fast.spectrum_power(self._spectrum_at(length), times)
        return float(self._coarse(power, length, times, delta, factor) + self._h)

    def _spectrum_at(self, length: int) -> np.ndarray:
        """The PMF's real FFT on ``length`` (read-only; the last length's is kept: the bounds of successive
        anchors mostly share one). The same floats as computing it afresh."""
        if self._at_length[0] != length:
            spectrum = fft.rfft(self._probs, length)
            spectrum.flags.writeable = False
            self._at_length = (length, spectrum)
        return self._at_length[1]

    def room_ahead(self, factor: int) -> int:
        """The most draws, at most AHEAD, whose composition's window still fits the current length with
        ``factor`` − 1 points to spare (what :meth:`coarse_epsilon` needs); 0 if not even one."""
        for ahead in (AHEAD, AHEAD // 2, AHEAD // 4):
            if self._length - self._window(self.times + ahead)[1] >= factor - 1:
                return ahead
        return 0

    def _base_power(self, count: int) -> np.ndarray:
        """The spectrum of ``count`` draws at the current length (kept per length and count)."""
        if self._powers[0] != (self._length, count):
            self._powers = ((self._length, count), pld_fast.spectrum_power(self._base, count))
        return self._powers[1]


class _Run:
    """A run of calls of one event (both adjacencies)."""

    def __init__(self, event: PrivacyEvent, pld: Any) -> None:
        self.event = event
        self._symmetric = bool(pld._symmetric)
        self._remove = _Spectrum(pld._pmf_remove)
        self._add = None if self._symmetric else _Spectrum(pld._pmf_add)
        self._ahead: dict[float, tuple[int, float]] = {}  # δ -> (draws up to which the bound holds, bound)
        self._retry_ahead = 0  # draws from which a look-ahead bound is tried again

    def add(self, count: int) -> None:
        self._remove.add(count)
        if self._add is not None:
            self._add.add(count)

    def pld(self) -> Pld:
        if self._add is None:
            return Pld(self._remove.read())
        return Pld(self._remove.read(), self._add.read())

    def epsilon(self, delta: float) -> float:
        """``pld_fast.epsilon_for_delta(self.pld(), delta)`` = the larger ε of the two adjacencies. The add
        adjacency's PMF is rebuilt only when its coarse bound (:meth:`_Spectrum.coarse_epsilon`, one inverse
        FFT of 1/COARSE the length) comes within COARSE grid steps of the remove adjacency's ε: otherwise the
        larger ε is the remove adjacency's, and the answer is the same float. The bound is taken up to AHEAD
        draws ahead where the length has room (:meth:`_Spectrum.room_ahead`): it then holds for the readings
        up to there, since the add adjacency's ε only grows with the draws (one coarse bound per AHEAD rounds
        read, each checked against the remove adjacency's ε of its own reading)."""
        eps = self._remove.epsilon(delta)
        if self._add is None:
            return eps
        margin = COARSE * self._add.interval
        times = self._add.times
        until, bound = self._ahead.get(delta, (-1, math.inf))
        if times <= until and bound + margin <= eps:
            return eps
        # δ far above the truncated tail mass, whose wrap-around differs between FFT lengths: its effect on ε
        # stays far inside the margin
        looks = times >= self._retry_ahead and delta >= 1e4 * pld_fast.TAIL_MASS
        ahead = self._add.room_ahead(COARSE) if looks else 0
        if ahead:
            bound_ahead = self._add.coarse_epsilon(delta, COARSE, ahead)
            if bound_ahead is not None and bound_ahead + margin <= eps:
                self._ahead[delta] = (times + ahead, bound_ahead)
                return eps
            self._retry_ahead = times + AHEAD  # the adjacencies' ε are close: not again for a while
        bound_now = self._add.coarse_epsilon(delta, COARSE)
        if bound_now is not None and bound_now + margin <= eps:
            return eps
        return max(eps, self._add.epsilon(delta))


class Bounds:
    """Certified upper bounds on the ε(δ) of up to ``times`` draws of one event, each built afresh from the
    event's PLD ``pld`` alone (:meth:`_Spectrum.bound_at` with bins of ``factor`` points, both adjacencies:
    the larger), cached per (``times``, δ): the PLD accountant's amortised readings. Nothing here
    touches the composition's own state."""

    def __init__(self, event: PrivacyEvent, pld: Any, factor: int = COARSE) -> None:
        self.event = event
        self._run = _Run(event, pld)
        self._factor = factor
        self._cache: dict[tuple[int, float], float | None] = {}

    def at(self, times: int, delta: float) -> float | None:
        """The bound for every count of draws up to ``times`` at ``delta`` (None: the PMF is too small to
        bin; read exactly)."""
        key = (times, delta)
        if key not in self._cache:
            if len(self._cache) > 64:
                self._cache.clear()
            spectra = [sp for sp in (self._run._remove, self._run._add) if sp is not None]
            bounds = [sp.bound_at(times, delta, self._factor) for sp in spectra]
            self._cache[key] = (
                None if any(b is None for b in bounds) else max(b for b in bounds if b is not None)
            )
        return self._cache[key]


class GridState:
    """The composed PLD of a history of calls on one grid, kept incrementally (see the module docstring).

    Args:
        one: the PLD of one application of an event on this grid (cached by the caller).
    """

    def __init__(self, one: Callable[[PrivacyEvent], Any]) -> None:
        self._one = one
        self._prefix: Any = None  # the finished runs, composed
        self._run: _Run | None = None  # the last run of equal events
        self._done = 0
        self._answers: dict[tuple[str, float], float] = {}
        self._version = -1

    def advance(self, calls: Calls) -> bool:
        """Take in the calls not seen yet (``calls`` only grow at the end); False for an empty history."""
        while self._done < len(calls):
            event, count = calls[self._done]
            if self._run is None or self._run.event != event:
                if self._run is not None:  # a finished run joins the prefix (one convolution)
                    done = self._run.pld()
                    self._prefix = done if self._prefix is None else pld_fast.compose(self._prefix, done)
                self._run = _Run(event, self._one(event))
            self._run.add(count)
            self._done += 1
        return self._run is not None

    def composed(self) -> Any:
        """The PLD of the history taken in by :meth:`advance` (not empty)."""
        assert self._run is not None
        last = self._run.pld()
        return last if self._prefix is None else pld_fast.compose(self._prefix, last)

    def epsilon(self, delta: float) -> float:
        """``pld_fast.epsilon_for_delta(self.composed(), delta)``, bit for bit; a single run of equal events
        skips rebuilding one adjacency's PMF when a coarse bound shows it cannot have the larger ε."""
        assert self._run is not None
        if self._prefix is None:
            return self._run.epsilon(delta)
        return float(pld_fast.epsilon_for_delta(self.composed(), delta))

    def answer(self, kind: str, arg: float, version: int, compute: Callable[[], float]) -> float:
        """``compute()`` once per (``kind``, ``arg``) and history ``version``."""
        if version != self._version:
            self._answers, self._version = {}, version
        key = (kind, arg)
        if key not in self._answers:
            self._answers[key] = compute()
        return self._answers[key]
