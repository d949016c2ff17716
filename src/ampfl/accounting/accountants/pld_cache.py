"""Incremental composition for the PLD accountant (issue 17: a run reads ε after every round).

The composed PLD of a history of calls ``[(event, count), …]`` is *defined* as the left-to-right composition
``self_compose(PLD(event), count)`` over the calls, one convolution per call — as before this module, so every
documented number stands. It is a function of the history alone, not of when ε was asked: a resumed accountant
(which replays the history) answers bit for bit as one that never stopped, whatever the evaluation schedule.

:class:`GridState` holds one grid's share of the work: the PLD of the calls composed so far, extended by the
calls added since (each composed in once, never recomputed), and the answers already given for this history.
The accountant keeps one per grid: the reporting grid and, for small ε, the finer ones of ``refine``, which
therefore cost one convolution per round too instead of a replay of the whole history at every evaluation.
(A lazier form — merging equal consecutive calls into one FFT power — makes a run that reads ε once cheaper
but one that reads it every round dearer: the power is redone at each reading, with its Chernoff bounds.)
"""

from __future__ import annotations

from collections.abc import Callable

from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution as PLD

from ampfl.accounting.accountants import pld_fast
from ampfl.accounting.events import PrivacyEvent

__all__ = ["Calls", "GridState"]

Calls = list[tuple[PrivacyEvent, int]]


class GridState:
    """The composed PLD of a history of calls on one grid, kept incrementally (see the module docstring).

    Args:
        one: the PLD of one application of an event on this grid (cached by the caller).
    """

    def __init__(self, one: Callable[[PrivacyEvent], PLD]) -> None:
        self._one = one
        self._pld: PLD | None = None  # calls[:_done] composed
        self._done = 0
        self._answers: dict[tuple[str, float], float] = {}
        self._version = -1

    def composed(self, calls: Calls) -> PLD | None:
        """The PLD of ``calls`` (which only ever grow at the end; ``None`` for an empty history)."""
        while self._done < len(calls):
            event, count = calls[self._done]
            step = pld_fast.self_compose(self._one(event), count)
            self._pld = step if self._pld is None else pld_fast.compose(self._pld, step)
            self._done += 1
        return self._pld

    def answer(self, kind: str, arg: float, version: int, compute: Callable[[], float]) -> float:
        """``compute()`` once per (``kind``, ``arg``) and history ``version``."""
        if version != self._version:
            self._answers, self._version = {}, version
        key = (kind, arg)
        if key not in self._answers:
            self._answers[key] = compute()
        return self._answers[key]
