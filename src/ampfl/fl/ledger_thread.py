"""The run's privacy ledger on a thread of its own, so that reading ε costs the training (almost) nothing.

Issue 17 (target: a DP run evaluating every round ≤ 1.2× one evaluating once). A PLD reading is one inverse
FFT per adjacency of the composed PLD plus a walk over its upper tail (3–6 ms over the first 100 rounds of the
demo's event), as long as a whole round of a small model. The run loop (:mod:`ampfl.fl.run`) therefore hands
every operation on its :class:`~ampfl.fl.privacy.RunAccountant` — the one composition per round and the ε
reading of each evaluation — to :class:`LedgerThread`, which runs them on one worker thread in the order they
were submitted, and goes on training. An evaluation line waits for its ε before it is written, in round order.

Why the numbers cannot change: while the run trains, the worker is the only thread that touches the ledger,
and it makes the same calls in the same order on the same state as the sequential loop did, so every ε is
bit for bit the sequential one (tests/fl/test_ledger_thread.py compares whole runs). The run waits for the
worker (:meth:`LedgerThread.call`, :meth:`LedgerThread.drain`) before anything else reads the ledger: a
budget check (``max_epsilon``, per-group budgets), a checkpoint, the summary. After a failed operation the
worker runs nothing more, and the error is raised in the run's thread at the next wait, with its own type and
message.

Issue 32: with the PLD accountant the reading itself is amortised — between anchors a line carries a
certified upper bound (``epsilon_upper_bound``) that one coarse FFT serves for many rounds
(:meth:`ampfl.accounting.accountants.pld.PLDAccountant.epsilon_reading`) — so the worker mostly composes.

Why it is faster: NumPy's FFT and array loops release the GIL (and the ledger calls no threaded BLAS,
whose idle workers spin: see ``pld_fast.log_mgfs``), and the run's torch computes on ``[engine] threads``
threads (default 1), so on a machine with two or more cores the readings of round r run while round r + 1
trains. With one core the order of work is the same as before and nothing is gained or lost but a thread
switch per round (``threaded=False`` runs every operation at once, in the caller's thread).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["LedgerThread"]

T = TypeVar("T")


class LedgerThread:
    """Runs operations on a ledger one at a time, in submission order, on one worker thread.

    Args:
        threaded: use a worker thread (``False``: run each operation at once; the same results).
    """

    def __init__(self, *, threaded: bool = True) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="ampfl-ledger") if threaded else None
        self._last: Future[Any] | None = None
        self._failed: BaseException | None = None

    def _guarded(self, fn: Callable[..., T], *args: Any) -> T:
        if self._failed is not None:  # an earlier operation failed: the ledger's state is not to be trusted
            raise self._failed
        try:
            return fn(*args)
        except BaseException as exc:
            self._failed = exc
            raise

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Queue ``fn(*args)`` after every operation submitted before; its future holds result or error."""
        if self._pool is None:
            future: Future[T] = Future()
            try:
                future.set_result(self._guarded(fn, *args))
            except Exception as exc:
                future.set_exception(exc)
            self._last = future
            return future
        self._last = self._pool.submit(self._guarded, fn, *args)
        return self._last

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` after every operation submitted before, waited for (its error raised here)."""
        return self.submit(fn, *args).result()

    def drain(self) -> None:
        """Wait for every operation submitted so far; raise the first error any of them raised."""
        if self._last is not None:
            self._last.exception()  # waits; the failed operation's error is kept in ``_failed``
        if self._failed is not None:
            raise self._failed

    def close(self) -> None:
        """Stop the worker: operations not yet started are dropped, a running one is waited for."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
