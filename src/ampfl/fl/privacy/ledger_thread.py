"""The run's privacy ledger on a thread of its own, so that reading ε costs the training (almost) nothing.

Target: a DP run evaluating every round costs ≤ 1.2× one evaluating once. A PLD reading is one inverse
FFT per adjacency of the composed PLD plus a walk over its upper tail (3–6 ms over the first 100 rounds of the
demo's event), as long as a whole round of a small model. The run loop (:mod:`ampfl.fl.run.experiment`)
therefore hands every operation on its :class:`~ampfl.fl.privacy.run_accountant.RunAccountant` — the one
composition per round and the ε reading of each evaluation — to :class:`LedgerThread`, which runs them on one
worker thread in the order they were submitted, and goes on training. An evaluation line waits for its ε
before it is written, in round order.

Why the numbers cannot change: while the run trains, the worker is the only thread that touches the ledger,
and it makes the same calls in the same order on the same state as the sequential loop did, so every ε is
bit for bit the sequential one (tests/fl/test_ledger_thread.py compares whole runs). The run waits for the
worker (:meth:`LedgerThread.call`, :meth:`LedgerThread.drain`) before anything else reads the ledger: a
budget check (``max_epsilon``, per-group budgets), a checkpoint, the summary. After a failed operation the
worker runs nothing more, and the error is raised in the run's thread at the next wait, with its own type and
message.

With the PLD accountant the reading itself is amortised — every line but the last carries a
certified upper bound (``epsilon_upper_bound``) that one coarse FFT serves for many rounds
(:meth:`ampfl.accounting.accountants.pld.PLDAccountant.epsilon_reading`) — so the worker mostly composes.

Batches: a hand-off to the worker is not free — a queue, a wake-up, and the GIL passed back and
forth between the worker's small NumPy calls and the training's small torch calls — and once the reading is
amortised it costs more than the reading itself (measured on the 200-round digits run: the worker cost as
much wall time as running every operation inline). So the loop defers the round's composition and the
evaluation's reading (:meth:`LedgerThread.defer`): they are queued in the caller's thread and handed over
together at most every ``batch_seconds`` (default 0.05 s) of wall time, or as soon as the run waits on the
ledger. A run of 2 ms rounds hands over once per ~25 rounds; a run of 1 s rounds every round, as before. A
line waits for its ε (in ``pending``) about that long more; the order of the operations, and so every
number, is unchanged.

Why it is faster: NumPy's FFT and array loops release the GIL (and the ledger calls no threaded BLAS,
whose idle workers spin: see ``pld_fast.log_mgfs``), and the run's torch computes on ``[engine] threads``
threads (default 1), so on a machine with two or more cores the readings of round r run while round r + 1
trains. With one core the order of work is the same as before and nothing is gained or lost but a thread
switch per hand-off (``threaded=False`` runs every operation at once, in the caller's thread).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["BATCH_SECONDS", "LedgerThread"]

T = TypeVar("T")

#: Deferred operations are handed to the worker at most this often (module docstring).
BATCH_SECONDS = 0.05

_Op = tuple[Callable[..., Any], tuple[Any, ...], "Future[Any]"]


class LedgerThread:
    """Runs operations on a ledger one at a time, in submission order, on one worker thread.

    Args:
        threaded: use a worker thread (``False``: run each operation at once; the same results).
        batch_seconds: hand deferred operations over at most this often (:meth:`defer`).
    """

    def __init__(self, *, threaded: bool = True, batch_seconds: float = BATCH_SECONDS) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="ampfl-ledger") if threaded else None
        self._last: Future[Any] | None = None
        self._failed: BaseException | None = None
        self._batch: list[_Op] = []
        self._jobs: list[tuple[Future[None], list[_Op]]] = []  # handed over, maybe not run yet
        self._batch_seconds = batch_seconds
        self._handed = time.monotonic()  # when deferred operations were last handed over

    def _guarded(self, fn: Callable[..., T], *args: Any) -> T:
        if self._failed is not None:  # an earlier operation failed: the ledger's state is not to be trusted
            raise self._failed
        try:
            return fn(*args)
        except BaseException as exc:
            self._failed = exc
            raise

    def _run_batch(self, batch: list[_Op]) -> None:
        """Run ``batch`` in order, each result or error into its future (after a failure, every later
        operation fails with it: :meth:`_guarded`). An interrupt (not an ``Exception``) is set on every
        operation left and raised: run inline, it reaches the caller at once."""
        for i, (fn, args, future) in enumerate(batch):
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(self._guarded(fn, *args))
            except Exception as exc:
                future.set_exception(exc)
            except BaseException as exc:
                future.set_exception(exc)
                for _, _, left in batch[i + 1 :]:
                    if left.set_running_or_notify_cancel():
                        left.set_exception(exc)
                raise

    def hand_over(self) -> None:
        """Give the deferred operations to the worker now (one job), or run them now without one."""
        batch, self._batch = self._batch, []
        self._handed = time.monotonic()
        if not batch:
            return
        if self._pool is None:
            self._run_batch(batch)
        else:
            self._jobs = [job for job in self._jobs if not job[0].done()]
            self._last = self._pool.submit(self._run_batch, batch)
            self._jobs.append((self._last, batch))

    def defer(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Queue ``fn(*args)`` after every operation submitted or deferred before; it is handed to the worker
        with the others deferred since the last hand-off, once ``batch_seconds`` have passed since then or
        when the run next waits (:meth:`submit`, :meth:`call`, :meth:`drain`). Its future holds result or
        error."""
        future: Future[T] = Future()
        self._batch.append((fn, args, future))
        if self._pool is None or time.monotonic() - self._handed >= self._batch_seconds:
            self.hand_over()
        return future

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Queue ``fn(*args)`` after every operation submitted or deferred before, and hand it over now; its
        future holds result or error."""
        future = self.defer(fn, *args)
        self.hand_over()
        return future

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` after every operation submitted before, waited for (its error raised here)."""
        return self.submit(fn, *args).result()

    def drain(self) -> None:
        """Wait for every operation submitted or deferred so far; raise the first error any of them raised."""
        self.hand_over()
        if self._last is not None:
            self._last.exception()  # waits; the failed operation's error is kept in ``_failed``
        if self._failed is not None:
            raise self._failed

    def close(self) -> None:
        """Stop the worker: operations not yet started (or not handed over) are cancelled, a running one is
        waited for."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        dropped = [op for job, batch in self._jobs if job.cancelled() for op in batch] + self._batch
        for _, _, future in dropped:
            future.cancel()
        self._batch, self._jobs = [], []
