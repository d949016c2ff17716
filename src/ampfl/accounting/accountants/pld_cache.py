"""Incremental composition for the PLD accountant (issue 17: a run composes every round, reads ε at some).

The history of calls ``[(event, count), …]`` is split into runs of equal consecutive events. A run's PLD is
its event's PLD self-composed ``Σ count`` times in the Fourier domain (:class:`_Spectrum`: the real FFT of
each adjacency's PMF on a power-of-two length holding the Chernoff window of the composition, multiplied in
once per call; one inverse FFT when ε is read); finished runs are composed into a prefix by one convolution
each. So a run of T equal rounds costs T spectrum products plus one inverse FFT per reading — proportional
to what is asked, not one convolution of the growing PLD per round (~10 s for 200 rounds of the demo's event
at load 4, now ~0.5 s read once) — and the composed PLD is a function of the history alone, not of when ε
was asked: a resumed accountant (which replays the history) answers bit for bit as one that never stopped.

:class:`GridState` holds one grid's share: the prefix, the last run and the answers already given for this
history. The accountant keeps one per grid: the reporting grid and, for small ε, the finer ones of
``refine``, extended the same way instead of replayed from the whole history at every reading. The
self-composition is dp-accounting's (Chernoff window, truncated tails to infinity), in the form of
:func:`~ampfl.accounting.accountants.pld_fast.self_compose` up to the FFT length (tests compare them).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution as PLD
from scipy import fft

from ampfl.accounting.accountants import pld_fast
from ampfl.accounting.events import PrivacyEvent

__all__ = ["Calls", "GridState"]

Calls = list[tuple[PrivacyEvent, int]]


class _Spectrum:
    """``times``-fold self-composition of one PMF kept as a spectrum: the real FFT of the PMF on a
    power-of-two length that holds the Chernoff window of the composition, raised to ``times`` by one
    product per call (``add``); the PMF is only rebuilt (one inverse FFT) when read. The length grows (and
    the power is recomputed) only when the window outgrows it, which depends on ``times`` alone."""

    def __init__(self, pmf: pld_pmf.PLDPmf) -> None:
        dense = pmf.to_dense_pmf()
        self._probs = np.asarray(dense._probs, dtype=np.float64)
        self._h, self._lower, self._inf = (
            dense._discretization,
            int(dense._lower_loss),
            float(dense._infinity_mass),
        )
        self._mgfs = pld_fast.log_mgfs(self._probs)
        self.times, self._length = 0, 0
        self._base = self._power = np.ones(1, dtype=np.complex128)
        self._read: tuple[int, pld_pmf.DensePLDPmf] | None = None

    def _window(self, times: int) -> tuple[int, int, int]:
        lower, upper = pld_fast.chernoff_window(self._mgfs, len(self._probs), times, pld_fast.TAIL_MASS)
        size = upper - lower + 1
        return lower, size, max(2, 1 << (max(size, len(self._probs)) - 1).bit_length())

    def add(self, count: int) -> None:
        times = self.times + count
        length = self._window(times)[2]
        if length == self._length:  # the usual round: one product of two spectra
            step = self._base if count == 1 else pld_fast.spectrum_power(self._base, count)
            np.multiply(self._power, step, out=self._power)
        else:
            self._length = length
            self._base = fft.rfft(self._probs, length)
            self._power = pld_fast.spectrum_power(self._base, times)
        self.times = times

    def read(self) -> pld_pmf.DensePLDPmf:
        if self._read is None or self._read[0] != self.times:
            lower, size, length = self._window(self.times)
            full = fft.irfft(self._power, length)
            # the window, wrapped around the FFT length as dp-accounting's np.roll (a slice when it fits)
            out = full[lower : lower + size] if 0 <= lower <= length - size else np.roll(full, -lower)[:size]
            inf = pld_fast.TAIL_MASS - math.expm1(self.times * math.log1p(-self._inf))
            pmf = pld_pmf.DensePLDPmf(self._h, self._lower * self.times + lower, np.array(out), inf, True)
            self._read = (self.times, pmf)
        return self._read[1]


class _Run:
    """A run of calls of one event (both adjacencies)."""

    def __init__(self, event: PrivacyEvent, pld: PLD) -> None:
        self.event = event
        self._symmetric = bool(pld._symmetric)
        self._remove = _Spectrum(pld._pmf_remove)
        self._add = None if self._symmetric else _Spectrum(pld._pmf_add)

    def add(self, count: int) -> None:
        self._remove.add(count)
        if self._add is not None:
            self._add.add(count)

    def pld(self) -> PLD:
        if self._add is None:
            return PLD(self._remove.read())
        return PLD(self._remove.read(), self._add.read())


class GridState:
    """The composed PLD of a history of calls on one grid, kept incrementally (see the module docstring).

    Args:
        one: the PLD of one application of an event on this grid (cached by the caller).
    """

    def __init__(self, one: Callable[[PrivacyEvent], PLD]) -> None:
        self._one = one
        self._prefix: PLD | None = None  # the finished runs, composed
        self._run: _Run | None = None  # the last run of equal events
        self._done = 0
        self._answers: dict[tuple[str, float], float] = {}
        self._version = -1

    def composed(self, calls: Calls) -> PLD | None:
        """The PLD of ``calls`` (which only ever grow at the end; ``None`` for an empty history)."""
        while self._done < len(calls):
            event, count = calls[self._done]
            if self._run is None or self._run.event != event:
                if self._run is not None:  # a finished run joins the prefix (one convolution)
                    done = self._run.pld()
                    self._prefix = done if self._prefix is None else pld_fast.compose(self._prefix, done)
                self._run = _Run(event, self._one(event))
            self._run.add(count)
            self._done += 1
        if self._run is None:
            return None
        last = self._run.pld()
        return last if self._prefix is None else pld_fast.compose(self._prefix, last)

    def answer(self, kind: str, arg: float, version: int, compute: Callable[[], float]) -> float:
        """``compute()`` once per (``kind``, ``arg``) and history ``version``."""
        if version != self._version:
            self._answers, self._version = {}, version
        key = (kind, arg)
        if key not in self._answers:
            self._answers[key] = compute()
        return self._answers[key]
