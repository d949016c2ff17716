"""The run's ledger on its own thread (ampfl.fl.privacy.ledger_thread): operations in order, errors kept and
raised, and whole runs whose metrics and summary are bit for bit those of the sequential loop."""

from __future__ import annotations

import functools
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ampfl.fl.algorithms import ALGORITHMS
from ampfl.fl.config import parse_config
from ampfl.fl.privacy.ledger_thread import LedgerThread
from ampfl.fl.privacy.run_accountant import RunAccountant
from ampfl.fl.run import loop as loop_module
from ampfl.fl.run.experiment import load_checkpoint, run_experiment


@pytest.mark.parametrize("threaded", [True, False])
def test_operations_run_in_order_and_errors_stop_the_rest(threaded: bool) -> None:
    books = LedgerThread(threaded=threaded)
    seen: list[int] = []
    threads: set[int] = set()

    def op(k: int) -> int:
        seen.append(k)
        threads.add(threading.get_ident())
        return k * k

    futures = [books.submit(op, k) for k in range(50)]
    assert books.call(op, 50) == 2500  # waits for the 50 before it
    assert seen == list(range(51)) and [f.result() for f in futures] == [k * k for k in range(50)]
    assert (threading.get_ident() in threads) is not threaded  # threaded: never the caller's thread

    def fail() -> None:
        raise ArithmeticError("round 3 broke")

    books.submit(fail)
    after = books.submit(op, 99)
    with pytest.raises(ArithmeticError, match="round 3 broke"):
        after.result()  # nothing runs on a ledger after a failed operation
    with pytest.raises(ArithmeticError, match="round 3 broke"):
        books.drain()
    assert 99 not in seen
    books.close()


def test_close_drops_operations_not_started() -> None:
    books = LedgerThread()
    gate = threading.Event()
    ran: list[int] = []
    books.submit(gate.wait)
    queued = books.submit(ran.append, 1)
    closer = threading.Thread(target=books.close)
    closer.start()
    gate.set()
    closer.join(timeout=10)
    assert not closer.is_alive() and queued.cancelled() and ran == []


def test_deferred_operations_wait_for_a_hand_over_and_keep_their_order() -> None:
    books = LedgerThread(batch_seconds=3600.0)  # nothing is handed over by the clock here
    seen: list[str] = []
    deferred = [books.defer(seen.append, f"d{k}") for k in range(3)]
    time.sleep(0.05)
    assert seen == [] and not any(f.done() for f in deferred)  # queued in the caller's thread only
    assert books.call(len, seen) == 3  # a wait hands them over first, in order
    later = books.defer(seen.append, "late")
    books.drain()
    assert seen == ["d0", "d1", "d2", "late"] and later.done() and all(f.done() for f in deferred)
    books.close()


def test_deferred_operations_are_handed_over_by_the_clock() -> None:
    books = LedgerThread(batch_seconds=0.0)  # every deferred operation goes at once
    done = threading.Event()
    books.defer(done.set)
    assert done.wait(timeout=10)
    books.close()


def test_a_failing_deferred_operation_fails_the_ones_after_it() -> None:
    books = LedgerThread(batch_seconds=3600.0)

    def fail() -> None:
        raise ArithmeticError("composition broke")

    before, broken, after = books.defer(int, "1"), books.defer(fail), books.defer(int, "2")
    with pytest.raises(ArithmeticError, match="composition broke"):
        books.drain()
    assert before.result() == 1
    for future in (broken, after):
        with pytest.raises(ArithmeticError, match="composition broke"):
            future.result()
    books.close()


@pytest.mark.parametrize("threaded", [True, False])
def test_an_interrupt_reaches_every_operation_after_it(threaded: bool) -> None:
    books = LedgerThread(threaded=threaded, batch_seconds=3600.0)

    def interrupted() -> None:
        raise KeyboardInterrupt

    if not threaded:  # run inline: raised in the caller at once
        with pytest.raises(KeyboardInterrupt):
            books.defer(interrupted)
        return
    hit, after = books.defer(interrupted), books.defer(int, "1")
    books.hand_over()
    for future in (hit, after):  # resolved, never left pending (a failing run waits on them)
        assert isinstance(future.exception(timeout=10), KeyboardInterrupt)
    books.close()


def test_close_cancels_deferred_operations() -> None:
    books = LedgerThread(batch_seconds=3600.0)
    gate = threading.Event()
    books.submit(gate.wait)
    handed = books.submit(int, "1")  # handed over, not started
    kept = books.defer(int, "2")  # never handed over
    closer = threading.Thread(target=books.close)
    closer.start()
    gate.set()
    closer.join(timeout=10)
    assert not closer.is_alive() and handed.cancelled() and kept.cancelled()


def _digits_config(accountant: str, **privacy: Any) -> Any:
    return parse_config(
        {
            "seed": 1,
            "rounds": 6,
            "eval_every": 1,
            "checkpoint_every": 4,
            "dataset": {"name": "digits"},
            "partition": {"scheme": "iid", "num_clients": 10},
            "model": {"name": "logreg"},
            "algorithm": {
                "name": "dp_dsgd_rp",
                "noise_multiplier": 3.0,
                "participation": 0.5,
                "local_dataset_size": 144,  # the largest client's records here (public bound)
            },
            "privacy": {"accountant": accountant, "reproducible": True, **privacy},
        },
        algorithms=ALGORITHMS,
    )


def _lines(out: Path) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for line in lines:
        line.pop("wall_seconds", None)
    return lines


@pytest.mark.parametrize(("accountant", "budget"), [("pld", False), ("rdp", True)])
def test_threaded_run_equals_the_sequential_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, accountant: str, budget: bool
) -> None:
    # Prepare: who composes (the ledger's thread, not the run's) and the same run with threaded=False.
    composers: set[int] = set()
    compose = RunAccountant.compose

    def recording(self: RunAccountant, events: Any) -> None:
        composers.add(threading.get_ident())
        compose(self, events)

    monkeypatch.setattr(RunAccountant, "compose", recording)
    privacy: dict[str, Any] = {}
    if budget:  # a max_epsilon between ε after rounds 3 and 4: the budget checks must wait for the ledger
        run_experiment(_digits_config(accountant), tmp_path / "free", progress=False, plots=False)
        eps = [line["epsilon"] for line in _lines(tmp_path / "free")]
        privacy["max_epsilon"] = (eps[2] + eps[3]) / 2
    config = _digits_config(accountant, **privacy)
    # Execute
    threaded = run_experiment(config, tmp_path / "threaded", progress=False, plots=False)
    assert composers and threading.get_ident() not in composers
    monkeypatch.setattr(loop_module, "LedgerThread", functools.partial(LedgerThread, threaded=False))
    sequential = run_experiment(config, tmp_path / "sequential", progress=False, plots=False)
    # Assert: the same lines (ε included, bit for bit), summary and checkpointed ledger.
    assert _lines(tmp_path / "threaded") == _lines(tmp_path / "sequential")
    for key in ("epsilon", "rounds_completed", "stopped", "final_metrics"):
        if key == "final_metrics":
            threaded[key].pop("wall_seconds", None), sequential[key].pop("wall_seconds", None)
        assert threaded[key] == sequential[key]
    states = [load_checkpoint(tmp_path / name)["privacy"] for name in ("threaded", "sequential")]
    assert states[0] == states[1]
    if budget:
        assert threaded["stopped"] == "budget" and threaded["rounds_completed"] == 3


def test_a_failing_composition_is_raised_and_earlier_lines_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compose = RunAccountant.compose

    def breaks_at_round_3(self: RunAccountant, events: Any) -> None:
        if self.rounds_composed == 2:
            raise ArithmeticError("PLD composition overflowed")
        compose(self, events)

    monkeypatch.setattr(RunAccountant, "compose", breaks_at_round_3)
    with pytest.raises(ArithmeticError, match="PLD composition overflowed"):
        run_experiment(_digits_config("rdp"), tmp_path / "run", progress=False, plots=False)
    assert [line["round"] for line in _lines(tmp_path / "run")] == [1, 2]
