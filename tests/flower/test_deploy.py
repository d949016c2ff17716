"""``ampfl deploy`` on real ``flower-superlink`` / ``flower-supernode`` processes, and the privacy ledger.

The two real runs cost ~25 s each on an idle core (Flower's SuperNode and Grid poll every 3 s), so each one
checks several things: equality with ``ampfl run``, the run folder, the ledger, the budget stop and that no
process outlives the deployment.
"""

from __future__ import annotations

import json
import math
import sqlite3
import tomllib
from pathlib import Path

import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from ampfl.fl.config import parse_config
from ampfl.fl.run.experiment import build_algorithm, build_task, run_experiment
from ampfl.fl.run.folder import read_lines
from ampfl.fl.run.release import DIAGNOSTICS_HEADER, MODEL_CONSUMERS
from ampfl.flower.deploy import deploy
from ampfl.flower.ledger import LEDGER, PrivacyLedger
from ampfl.flower.local import marked_processes

BASE = """
seed = 3
rounds = {rounds}
eval_every = 1

[dataset]
name = "digits"

[partition]
scheme = "iid"
num_clients = 4

[model]
name = "logreg"

[algorithm]
name = "{name}"
cohort_size = {cohort}
num_local_steps = 5
batch_size = 10
learning_rate = 0.5
{extra}
"""


RP_BASE = """
seed = 5
rounds = 3
eval_every = 1

[dataset]
name = "digits"

[partition]
scheme = "iid"
num_clients = 3

[model]
name = "logreg"

[algorithm]
name = "{name}"
learning_rate = 0.5
{extra}
"""


def _toml(name: str, *, rounds: int = 2, cohort: int = 4, extra: str = "") -> str:
    return BASE.format(name=name, rounds=rounds, cohort=cohort, extra=extra)


def _lines(folder: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


#: The keys of a released line of these runs (everything else is in diagnostics.jsonl).
RELEASED = {"round", "accuracy", "epsilon", "delta"}  # no wall-clock time: it depends on who took part


def _check_release(folder: Path, summary: dict) -> None:  # type: ignore[type-arg]
    """metrics.jsonl and final_metrics hold released keys only; diagnostics.jsonl is headed as such."""
    assert all(set(line) == RELEASED for line in _lines(folder))
    assert set(summary["final_metrics"]) == RELEASED
    first = (folder / "diagnostics.jsonl").read_text().splitlines()[0]
    assert json.loads(first) == DIAGNOSTICS_HEADER


@pytest.mark.slow
def test_fedavg_on_flower_equals_ampfl_run(tmp_path: Path, cli_json) -> None:  # type: ignore[no-untyped-def]
    text = _toml("fedavg") + "\n[privacy]\nreproducible = true\n"  # same mini-batches on both engines
    (tmp_path / "fedavg.toml").write_text(text)
    out = tmp_path / "flower"
    summary = cli_json(["deploy", str(tmp_path / "fedavg.toml"), "--out", str(out)])
    simulated = run_experiment(
        parse_config(tomllib.loads(text)), tmp_path / "sim", progress=False, plots=False
    )

    assert summary["engine"] == "flower" and summary["rounds_completed"] == 2
    # One summary writer (issue 28): the same keys whichever engine ran the config.
    assert list(summary) == list(simulated) and simulated["engine"] == "simulator"
    assert min(summary[key] for key in ("bring_up_seconds", "teardown_seconds", "deploy_seconds")) > 0
    assert summary["discovery_seconds"] > 0 and simulated["discovery_seconds"] is None
    assert summary["best_accuracy"] >= summary["final_accuracy"] and summary["accountant_requested"] is None
    assert abs(summary["final_accuracy"] - simulated["final_accuracy"]) <= 0.005
    for ours, theirs in zip(read_lines(out, diagnostics=True), _lines(tmp_path / "sim"), strict=True):
        assert ours["round"] == theirs["round"]
        assert abs(ours["accuracy"] - theirs["accuracy"]) <= 0.005
        assert ours["participants"] == 4.0 and math.isinf(ours["epsilon"])  # participants: a diagnostic
    _check_release(out, summary)
    assert summary["protects_against"] == summary["participation_hidden_from"] == []  # no guarantee
    for name in ("config.json", "config.toml", "metrics.jsonl", "diagnostics.jsonl", "summary.json", LEDGER):
        assert (out / name).is_file(), name
    assert json.loads((out / "config.json").read_text()) == json.loads(
        (tmp_path / "sim" / "config.json").read_text()
    )
    assert marked_processes(str(out.resolve())) == []  # nothing outlives the deployment


PRIVATE = {
    "dp_fedavg": "cohort_size = 2\nclip = 1.0\nnoise_multiplier = 1.0",
}


@pytest.mark.slow
# MS-PAFL's deployment (client coin, node-local private submodel, ε per round) runs end to end in
# tests/flower/test_secagg.py; one real federation per algorithm keeps the suite inside its time budget.
@pytest.mark.parametrize("name", sorted(PRIVATE))
def test_private_run_epsilon_ledger_and_budget(tmp_path: Path, name: str) -> None:
    """ε per round equals ``ampfl run``'s; the ledger holds every client's events; max_epsilon stops it."""
    from ampfl.fl.privacy.run_accountant import RunAccountant

    def text(budget: str = "") -> str:
        body = RP_BASE.format(name=name, extra=PRIVATE[name])
        return body + (f"\n[privacy]\nmax_epsilon = {budget}\n" if budget else "")

    probe = parse_config(tomllib.loads(text()))
    # The simulator's accountant on the algorithm's own events: ε after 2 and 3 rounds; a budget in between.
    algorithm = build_algorithm(probe, build_task(probe))
    accountant = RunAccountant(probe.privacy, algorithm)
    spent = []
    for r in range(3):
        accountant.compose(algorithm.round_events(r))
        spent.append(accountant.epsilon())
    config = parse_config(tomllib.loads(text(repr(0.5 * (spent[1] + spent[2])))))
    out = tmp_path / "flower"
    summary = deploy(config, out)
    simulated = run_experiment(config, tmp_path / "sim", progress=False, plots=False)

    assert summary["stopped"] == simulated["stopped"] == "budget"
    assert summary["rounds_completed"] == simulated["rounds_completed"] == 2
    assert summary["epsilon"] == pytest.approx(spent[1], rel=1e-12)
    assert [line["epsilon"] for line in _lines(out)] == pytest.approx(
        [line["epsilon"] for line in _lines(tmp_path / "sim")], rel=1e-12
    )
    for line in read_lines(out, diagnostics=True):
        assert line["participants"] == line["asked"] == 2.0  # the server's cohort (diagnostics)
    _check_release(out, summary)
    # No SecAgg+: the server sees every update, so ε covers the model consumers only (ledger too).
    assert summary["protects_against"] == summary["participation_hidden_from"] == [MODEL_CONSUMERS]
    assert summary["privacy_randomness"].startswith("secret") and summary["neighbouring"] == "add-remove"
    with sqlite3.connect(out / LEDGER) as db:
        threats = {row[0] for row in db.execute("SELECT DISTINCT protects_against FROM privacy_events")}
        assert threats == {json.dumps([MODEL_CONSUMERS])}
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        rows = db.execute("SELECT client, round, event FROM privacy_events ORDER BY round, client").fetchall()
        spent_rows = dict(db.execute("SELECT client, epsilon FROM privacy_spent").fetchall())
    expected = [
        (str(c), r, json.dumps(event.to_dict(), sort_keys=True))
        for r in range(2)
        for c in range(3)
        for event, _ in algorithm.round_events(r)
    ]
    assert rows == expected
    assert spent_rows == pytest.approx({str(c): spent[1] for c in range(3)}, rel=1e-12)
    assert marked_processes(str(out.resolve())) == []


def test_interrupted_deploy_leaves_no_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ampfl.flower.deploy as module

    out = tmp_path / "run"
    seen: list[int] = []

    def interrupted(*args: object, **kwargs: object) -> int:
        seen.extend(marked_processes(str(out.resolve())))
        raise KeyboardInterrupt

    monkeypatch.setattr(module, "flwr_run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        deploy(parse_config(tomllib.loads(_toml("fedavg"))), out)
    assert len(seen) >= 5  # the SuperLink and four SuperNodes were running
    assert marked_processes(str(out.resolve())) == []


def test_ledger_commits_events_and_budget(tmp_path: Path) -> None:
    """Without processes: rows, per-client ε (the run accountant's), eligibility under max_epsilon."""
    from ampfl.fl.privacy.run_accountant import RunAccountant

    extra = "clip = 1.0\nnoise_multiplier = 2.0"
    config = parse_config(tomllib.loads(_toml("dp_fedavg", cohort=2, extra=extra)))
    algorithm = build_algorithm(config, build_task(config))
    events = algorithm.round_events(0)
    reference = RunAccountant(config.privacy, algorithm)
    reference.compose(events)
    one_round = reference.epsilon()
    # A budget between one and two rounds: a client that spent one round is no longer asked.
    budget = config.privacy.model_copy(update={"max_epsilon": one_round * 1.01})
    ledger = PrivacyLedger(tmp_path / LEDGER, budget, algorithm, range(4))
    assert ledger.eligible(events) == [0, 1, 2, 3]
    ledger.record(0, [0, 2], events)
    with sqlite3.connect(tmp_path / LEDGER) as db:  # a second connection sees the committed round
        assert db.execute("SELECT client, round FROM privacy_events").fetchall() == [("0", 0), ("2", 0)]
        spent = dict(db.execute("SELECT client, epsilon FROM privacy_spent").fetchall())
    assert spent == pytest.approx({"0": one_round, "2": one_round}, rel=1e-12)
    assert ledger.eligible(events) == [1, 3]
    ledger.close()


def test_deploy_refuses_an_algorithm_it_cannot_run(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "cfg.toml").write_text(_toml("local_only").replace("cohort_size = 4\n", ""))
    code, _, err = run_cli(["deploy", str(tmp_path / "cfg.toml"), "--out", str(tmp_path / "out")])
    assert code == 2 and "algorithm.name" in err and len(err.strip().splitlines()) == 1
    # under SecAgg+ too the algorithm's own reason comes first, not the list of SecAgg+ algorithms
    flags = ["--out", str(tmp_path / "out"), "--secure-aggregation", "secaggplus"]
    code, _, again = run_cli(["deploy", str(tmp_path / "cfg.toml"), *flags])
    assert code == 2 and again == err, again
    code, _, err = run_cli(["deploy", str(tmp_path / "cfg.toml"), *flags[:2], "--secure-aggregation", "x"])
    assert code == 2 and "--secure-aggregation" in err and len(err.strip().splitlines()) == 1, err
    (tmp_path / "ok.toml").write_text(_toml("fedavg"))
    for flags, needle in (
        (["--resume"], "--resume: no checkpoint"),
        (["--superlink", "localhost"], "--superlink must be HOST:PORT"),
        (["--timeout", "0"], "--timeout must be > 0"),
    ):
        code, _, err = run_cli(["deploy", str(tmp_path / "ok.toml"), "--out", str(tmp_path / "o2"), *flags])
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err


def test_ledger_resume_keeps_released_rounds(tmp_path: Path) -> None:
    """After a crash: rows of released rounds stay, an unreleased round's rows go, per-client ε is rebuilt."""
    extra = "clip = 1.0\nnoise_multiplier = 2.0"
    config = parse_config(tomllib.loads(_toml("dp_fedavg", cohort=2, extra=extra)))
    algorithm = build_algorithm(config, build_task(config))
    ledger = PrivacyLedger(tmp_path / LEDGER, config.privacy, algorithm, range(4))
    for r in range(3):  # rounds 0 and 1 released; round 2 committed, then the server was killed
        ledger.record(r, [0, 1, 2, 3] if r < 2 else [0, 1], algorithm.round_events(r))
    two_rounds = ledger.accountants[3].epsilon()  # client 3 was covered by rounds 0 and 1 only
    ledger.close()
    again = PrivacyLedger(tmp_path / LEDGER, config.privacy, algorithm, range(4))
    again.resume(2)
    rounds = again.connection.execute("SELECT DISTINCT round FROM privacy_events ORDER BY round").fetchall()
    assert rounds == [(0,), (1,)]
    assert [again.accountants[c].epsilon() for c in range(4)] == pytest.approx([two_rounds] * 4, rel=1e-12)
    assert again.accountants[0].rounds_composed == 2
    again.close()
