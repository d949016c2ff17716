"""The round loop of a run, one for both engines.

``ampfl run`` (the simulator, :mod:`ampfl.fl.run.experiment`) and ``ampfl deploy`` (Flower,
:mod:`ampfl.flower.server_app`) set a run up differently (a run folder and a task here, SuperNodes there) and
then both call :func:`run_rounds`, which owns everything between rounds. Round r:

1. the algorithm's events of round r (:meth:`~ampfl.fl.algorithms.base.Algorithm.round_events`), as the
   backend budgets them (:meth:`RoundBackend.budgeted`: under SecAgg+ noise shares the worst case of
   dropouts); per-group budgets (paper 001): the groups the round would take over their budget are retired
   first (:meth:`~ampfl.fl.algorithms.base.Algorithm.retire_groups`); then ``stopped = "budget"`` if the run's
   accountant would exceed ``[privacy] max_epsilon``;
2. :meth:`RoundBackend.collect`: the round's client work (the simulator: ``Algorithm.run_round``, vectorised
   over the cohort; Flower: the round protocol's client updates on the SuperNodes), returning the round's
   events as they happened (at the realised noise multiplier when noise shares dropped out) and its
   training metrics; a numerical failure stops the run in one line (:mod:`ampfl.fl.divergence`);
3. :meth:`RoundBackend.commit` (Flower: the per-client privacy ledger), then the run's accountant composes
   the events once, then :meth:`RoundBackend.release` (Flower: the server step; the simulator's round has
   applied it in-process, where nothing is shown yet);
4. every ``eval_every`` rounds (and at the last) one evaluation line: the backend's evaluation of what the
   server holds, ε and δ read from the accountant on its thread (:mod:`ampfl.fl.privacy.ledger_thread`), split
   by :func:`ampfl.fl.run.release.split_line` into ``metrics.jsonl`` (released) and ``diagnostics.jsonl``;
5. checkpoints: a backend whose rounds replay bit for bit from a checkpoint (:attr:`RoundBackend.replayable`:
   the simulator, every draw derived from the run's key) checkpoints every ``checkpoint_every`` rounds and a
   resumed run drops and recomputes the lines after it; one whose rounds do not (Flower: the server's noise
   comes from the operating system) checkpoints every round **before** its line is written, so nothing
   derived from a model the checkpoint does not hold is ever shown.

Files are appended all or nothing (:class:`ampfl.io.AppendLog`); a failed write rolls both files back to the
last checkpoint's lines. :func:`finish_run` ends both engines' runs: the plots and the one summary writer
(:mod:`ampfl.fl.run.summary`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ampfl.fl.divergence import TrainingDiverged, diverged_message, numerical_failure
from ampfl.fl.privacy.ledger_thread import LedgerThread
from ampfl.fl.run.folder import METRICS, save_checkpoint
from ampfl.fl.run.lines import privacy_fields, with_privacy
from ampfl.fl.run.release import DIAGNOSTICS, DIAGNOSTICS_HEADER, TIMING, released_timing, split_line
from ampfl.io import AppendLog, atomic_write_json, dumps_json, write_text_if_changed

if TYPE_CHECKING:
    from ampfl.accounting.events import PrivacyEvent
    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.fl.config import RunConfig
    from ampfl.fl.privacy.run_accountant import RunAccountant

Events = Sequence[tuple["PrivacyEvent", int]]


@dataclass
class RoundOutcome:
    """What :meth:`RoundBackend.collect` returns: the round's ``events`` as they happened (composed by the
    loop), its training ``metrics`` (diagnostics unless the algorithm releases them) and the backend's
    ``payload`` for :meth:`RoundBackend.commit` and :meth:`RoundBackend.release`."""

    events: list[tuple[PrivacyEvent, int]]
    metrics: dict[str, Any] = field(default_factory=dict)
    payload: Any = None


class RoundBackend(Protocol):
    """How an engine runs the client work of a round (module docstring)."""

    #: A round re-run from a checkpoint releases the same model (every random draw derived from the key).
    replayable: bool

    def budgeted(self, events: Events) -> list[tuple[PrivacyEvent, int]]:
        """The events the budget checks use (the worst case of what the round may realise)."""
        ...

    def collect(self, round_index: int, events: Events) -> RoundOutcome:
        """Run round ``round_index``'s client work; ``events``: the round's planned events."""
        ...

    def commit(self, round_index: int, outcome: RoundOutcome) -> None:
        """Record the round before its release (Flower: the per-client ledger)."""
        ...

    def release(self, outcome: RoundOutcome) -> None:
        """The server step that makes the round's model (Flower: after the commit)."""
        ...

    def evaluation_line(self, done: int, round_metrics: Mapping[str, Any]) -> dict[str, Any]:
        """The evaluation line (without privacy fields) of what the server holds after ``done`` rounds."""
        ...

    def guard(self) -> None:
        """Raise before a write if this run no longer owns its folder."""
        ...


@dataclass
class RunState:
    """Where a run starts (a fresh run: all empty) and where it stopped."""

    rounds_done: int = 0
    metrics: list[dict[str, Any]] = field(default_factory=list)
    diagnostics: list[dict[str, Any]] = field(default_factory=list)
    wall_before: float = 0.0
    resumed: bool = False
    stopped: str = "rounds"
    round_seconds: list[float] = field(default_factory=list)


def restore(checkpoint: Mapping[str, Any], algorithm: Algorithm, ledger: RunAccountant) -> RunState:
    """Load a checkpoint (:func:`ampfl.fl.run.folder.save_checkpoint`) into ``algorithm`` and ``ledger``."""
    import torch

    algorithm.load_state_dict(checkpoint["algorithm"])
    ledger.load_state_dict(checkpoint["privacy"])
    torch.set_rng_state(checkpoint["torch_rng_state"])
    return RunState(
        rounds_done=int(checkpoint["rounds_done"]),
        metrics=list(checkpoint["metrics"]),
        diagnostics=list(checkpoint.get("diagnostics", [])),
        wall_before=float(checkpoint.get("wall_seconds", 0.0)),
        resumed=True,
    )


def run_rounds(
    config: RunConfig,
    algorithm: Algorithm,
    ledger: RunAccountant,
    backend: RoundBackend,
    out: Path,
    state: RunState,
    *,
    resolved: dict[str, Any],
    last: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> RunState:
    """Run rounds ``state.rounds_done .. last - 1`` (default: ``config.rounds``) in ``out``; returns the state
    at the stop (``stopped``: ``"rounds"`` or ``"budget"``). ``resolved``: the config written in the folder
    and the checkpoints; ``progress``: called once per round with a status text."""
    started = time.perf_counter()
    last = config.rounds if last is None else last
    released = tuple(algorithm.released_metrics)
    metrics, diagnostics = state.metrics, state.diagnostics

    def wall() -> float:
        return state.wall_before + time.perf_counter() - started

    # Lines written after the last checkpoint by an interrupted run are dropped here.
    backend.guard()
    write_text_if_changed(out / METRICS, "".join(dumps_json(line) + "\n" for line in metrics))
    header = [DIAGNOSTICS_HEADER, *diagnostics]
    write_text_if_changed(out / DIAGNOSTICS, "".join(dumps_json(line) + "\n" for line in header))

    # Every operation on the ledger runs on its own thread, in order: an evaluation line waits in ``pending``
    # for its ε and joins ``metrics`` in round order; ``written`` lines of it are in the files.
    books = LedgerThread(threaded=ledger.private)
    pending: list[tuple[dict[str, Any], float, Future[dict[str, Any]]]] = []
    written = [len(metrics)]
    latest: list[dict[str, Any] | None] = [None]  # the last full line (for the progress bar)

    def evaluate(done: int, round_metrics: Mapping[str, Any], exact: bool = False) -> None:
        line = backend.evaluation_line(done, round_metrics)
        exact = exact or done == config.rounds  # the last line's ε is exact; others may be a labelled bound
        fields = books.defer(privacy_fields, ledger, algorithm.group_budgets(), exact)
        pending.append((line, wall(), fields))

    def resolve(*, wait: bool, quiet: bool = False) -> dict[str, Any] | None:
        """Move the lines whose ε is known (all when ``wait``) to ``metrics``/``diagnostics``; returns the
        last one moved. ``quiet``: stop, without raising, at a line whose reading failed (the run is failing
        already)."""
        moved = None
        if wait:
            books.hand_over()
        while pending and (wait or pending[0][2].done()):
            line, seconds, fields = pending[0]
            if quiet and fields.exception() is not None:
                break
            pending.pop(0)
            full = with_privacy(line, seconds, fields.result())
            latest[0] = moved = full
            release, diagnostic = split_line(full, released)
            metrics.append(release)
            diagnostics.append(diagnostic)
        return moved

    def write_lines() -> None:
        backend.guard()
        for index in range(written[0], len(metrics)):
            handle.append(dumps_json(metrics[index]) + "\n")
            diagnostics_handle.append(dumps_json(diagnostics[index]) + "\n")
        written[0] = len(metrics)

    def checkpoint_now(done: int) -> None:
        books.drain()
        backend.guard()
        save_checkpoint(
            out,
            algorithm,
            rounds_done=done,
            metrics=metrics,
            diagnostics=diagnostics,
            config=resolved,
            wall=wall(),
            privacy=ledger,
        )
        # A non-replayable backend shows its lines only now, after the checkpoint that holds them (a
        # replayable one wrote them already). A failed write from here on rolls back to this checkpoint.
        write_lines()
        handle.mark()
        diagnostics_handle.mark()

    saved_at = state.rounds_done if state.resumed else -1
    done = state.rounds_done
    with (
        AppendLog(out / METRICS) as handle,
        AppendLog(out / DIAGNOSTICS) as diagnostics_handle,
        _rolled_back_on_write_failure(handle, diagnostics_handle),
        _ledger_thread(books, lambda: failing(resolve, write_lines, backend.replayable)),
    ):
        for round_index in range(state.rounds_done, last):
            round_started = time.perf_counter()
            events = algorithm.round_events(round_index)
            budgets = algorithm.group_budgets()
            if budgets or config.privacy.max_epsilon is not None:  # without a budget both are no-ops
                over = books.call(ledger.groups_over_budget, backend.budgeted(events), budgets)
                if over:  # per-group budgets (paper 001): those groups stop being sampled
                    algorithm.retire_groups(over)
                    events = algorithm.round_events(round_index)
                    if not events:
                        state.stopped = "budget"
                        break
                if books.call(ledger.would_exceed, backend.budgeted(events)):
                    state.stopped = "budget"
                    break
            try:
                outcome = backend.collect(round_index, events)
            except (RuntimeError, ArithmeticError) as exc:
                if not numerical_failure(exc):
                    raise
                message = diverged_message(config, round_index + 1, saved_at, out, exc)
                raise TrainingDiverged(message) from None
            backend.commit(round_index, outcome)  # recorded before the release below
            books.defer(ledger.compose, outcome.events)  # once per round, never the history again
            backend.release(outcome)
            if not algorithm.parameters_finite():
                raise TrainingDiverged(diverged_message(config, round_index + 1, saved_at, out, None))
            state.round_seconds.append(time.perf_counter() - round_started)
            done = round_index + 1
            if done % config.eval_every == 0 or done == config.rounds:
                evaluate(done, outcome.metrics)
            if not backend.replayable:  # the new model is checkpointed before anything shows it
                shown = resolve(wait=True)
                checkpoint_now(done)
                saved_at = done
            elif config.checkpoint_every and done % config.checkpoint_every == 0:
                shown = resolve(wait=True)
                write_lines()
                checkpoint_now(done)
                saved_at = done
            else:
                shown = resolve(wait=done == last)
                write_lines()
            # the last round shows its own line, even when a checkpoint just wrote it
            shown = shown or (latest[0] if done == last else None)
            if progress is not None:
                progress(f"acc {shown['accuracy']:.3f}  ε {shown['epsilon']:.3g}" if shown else "")
        resolve(wait=True)
        write_lines()
        if state.stopped == "budget" and (not metrics or metrics[-1]["round"] != done):
            evaluate(done, {}, exact=True)  # the last line states the ε the run stopped at
            resolve(wait=True)
            if backend.replayable:
                write_lines()
                saved_at = -1
            else:
                checkpoint_now(done)
                saved_at = done
        if saved_at != done:
            checkpoint_now(done)
    state.rounds_done = done
    state.wall_before = wall()
    return state


def final_line(
    algorithm: Algorithm, ledger: RunAccountant, backend: RoundBackend, state: RunState
) -> dict[str, Any]:
    """The released part of the run's last line (an evaluation now when the run evaluated nothing)."""
    if state.metrics:
        return state.metrics[-1]
    fields = privacy_fields(ledger, algorithm.group_budgets())
    line = with_privacy(backend.evaluation_line(state.rounds_done, {}), state.wall_before, fields)
    return split_line(line, tuple(algorithm.released_metrics))[0]


def failing(resolve: Callable[..., Any], write_lines: Callable[[], None], replayable: bool) -> None:
    """On a failing run: write the lines whose ε was read (a replayable run; a resume recomputes them the
    same), or only those a checkpoint already holds (a non-replayable one)."""
    if replayable:
        resolve(wait=True, quiet=True)
    write_lines()


def finish_run(
    config: RunConfig,
    algorithm: Algorithm,
    ledger: RunAccountant,
    backend: RoundBackend,
    state: RunState,
    out: Path,
    *,
    engine: Literal["simulator", "flower"],
    threats: Mapping[str, list[str]],
    num_clients: int,
    files: Sequence[str],
    plots: bool = True,
    secure_aggregation: str | None = None,
    discovery_seconds: float | None = None,
) -> dict[str, Any]:
    """The plots (from the released lines) and ``summary.json`` of a finished run, for either engine;
    ``files``: the run folder's files besides the plots. Returns the summary."""
    from ampfl.fl.run.plots import write_plots
    from ampfl.fl.run.summary import build_summary, write_summary

    released = tuple(algorithm.released_metrics)
    headline = released[0] if released else "accuracy"
    title = f"{config.algorithm.name} on {config.dataset.name}" + (" (Flower)" if engine == "flower" else "")
    backend.guard()
    written = write_plots(out, state.metrics, title=title, metric=headline) if plots else []
    summary = build_summary(
        engine=engine,
        config=config,
        algorithm=algorithm,
        ledger=ledger,
        metrics=state.metrics,
        final=final_line(algorithm, ledger, backend, state),
        rounds_completed=state.rounds_done,
        stopped=state.stopped,
        wall_seconds=state.wall_before,
        round_seconds=state.round_seconds,
        threats=threats,
        num_clients=num_clients,
        out=out,
        files=(*files, *written),
        secure_aggregation=secure_aggregation,
        discovery_seconds=discovery_seconds,
    )
    backend.guard()
    summary, timing = released_timing(summary, ledger.private)
    atomic_write_json(out / TIMING, timing)
    write_summary(out, summary)
    return summary


@contextmanager
def _rolled_back_on_write_failure(*logs: AppendLog) -> Iterator[None]:
    """On a failed write (OSError: a full disk), truncate ``logs`` back to the last checkpoint's lines, so the
    folder never holds a line past its checkpoint that a resume would contradict."""
    try:
        yield
    except OSError:
        for log in logs:
            log.rollback()
        raise


@contextmanager
def _ledger_thread(books: LedgerThread, write_read_lines: Callable[[], Any]) -> Iterator[LedgerThread]:
    """Wait for every ledger operation at the end of the rounds. If the run fails (an error, an interrupt),
    the evaluation lines whose ε was read are still written, as the sequential loop wrote them; then the
    worker stops."""
    try:
        yield books
        books.drain()
    except BaseException:
        books.hand_over()  # the readings deferred so far run, as they would have without batching
        write_read_lines()
        raise
    finally:
        books.close()
