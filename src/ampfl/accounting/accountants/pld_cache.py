"""Incremental composition for the PLD accountant (issue 17: a run reads ε after every round).

The history is kept run-length encoded, ``[(event, count), …]`` with consecutive equal events merged, and its
PLD is *defined* as the left-to-right composition of ``self_compose(PLD(event), count)`` over the runs. That
makes the composed PLD a function of the history alone — not of when ε was asked — so a resumed accountant
(which replays the history) answers bit for bit as one that never stopped, whatever the evaluation schedule.

:class:`GridState` holds one grid's share of the work: the PLD of all runs but the last (extended once per
finished run, never recomputed), the last run's power (one FFT power when its count grows: a run of T equal
rounds costs one self-composition at each evaluation, not T convolutions), and the answers already given.
The accountant keeps one per grid (the reporting grid and, for small ε, the finer ones of ``refine``).
"""

from __future__ import annotations

from collections.abc import Callable

from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution as PLD

from ampfl.accounting.accountants import pld_fast
from ampfl.accounting.events import PrivacyEvent

__all__ = ["GridState", "Runs", "add_run"]


Runs = list[tuple[PrivacyEvent, int]]


def add_run(runs: Runs, event: PrivacyEvent, count: int) -> None:
    """Append ``count`` × ``event`` to the run-length history (merged into the last run when equal)."""
    if count <= 0:
        return
    if runs and runs[-1][0] == event:
        runs[-1] = (event, runs[-1][1] + count)
    else:
        runs.append((event, count))


class GridState:
    """The composed PLD of a run-length history on one grid, kept incrementally (see the module docstring).

    Args:
        one: the PLD of one application of an event on this grid (cached by the caller).
    """

    def __init__(self, one: Callable[[PrivacyEvent], PLD]) -> None:
        self._one = one
        self._prefix: PLD | None = None  # runs[:_done] composed
        self._done = 0
        self._power: tuple[PrivacyEvent, int, PLD] | None = None  # the last run's self-composition
        self._full: tuple[int, PLD | None] | None = None  # (version, composed PLD)
        self._answers: dict[tuple[str, float], float] = {}
        self._version = -1

    def composed(self, runs: Runs, version: int) -> PLD | None:
        """The PLD of ``runs`` (``version`` changes whenever ``runs`` does; ``None`` for an empty history)."""
        if self._full is not None and self._full[0] == version:
            return self._full[1]
        if not runs:
            out = None
        else:
            while self._done < len(runs) - 1:  # runs before the last are final: compose each in once
                step = self._run(*runs[self._done])
                self._prefix = step if self._prefix is None else pld_fast.compose(self._prefix, step)
                self._done += 1
            last = self._run(*runs[-1])
            out = last if self._prefix is None else pld_fast.compose(self._prefix, last)
        self._full = (version, out)
        return out

    def _run(self, event: PrivacyEvent, count: int) -> PLD:
        if self._power is not None and self._power[0] == event and self._power[1] == count:
            return self._power[2]
        out = pld_fast.self_compose(self._one(event), count)
        self._power = (event, count, out)
        return out

    def answer(self, kind: str, arg: float, version: int, compute: Callable[[], float]) -> float:
        """``compute()`` once per (``kind``, ``arg``) and history ``version``."""
        if version != self._version:
            self._answers, self._version = {}, version
        key = (kind, arg)
        if key not in self._answers:
            self._answers[key] = compute()
        return self._answers[key]
