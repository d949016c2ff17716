"""ampfl's Mod and strategy wrapper in a plain Flower app written here (NumPyClient, FedAvg, DefaultWorkflow
with SecAgg+), on a real local SuperLink and SuperNodes: the server decodes only a noised sum, every node
replies alike, and the ledger's ε is ``ampfl account poisson``'s for the same rounds."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("flwr")
from flwr.app import Context, Message, RecordDict
from flwr.common import ConfigRecord, FitIns, MessageType, ndarrays_to_parameters
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS
from flwr.compat.common import recorddict_compat as compat

from ampfl.integrations.flower import ASKED_KEY, CheckInMechanism, PrivacyMod

DIM = 20
ROUNDS = 2
MECHANISM = "CheckInMechanism(clip=1.0, noise_multiplier=1.0, participation=0.5, num_clients=3)"

PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "userapp"
version = "1.0.0"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "someone"

[tool.flwr.app.components]
serverapp = "userapp.server:app"
clientapp = "userapp.client:app"

[tool.flwr.app.config]
out = "{out}"
"""

CLIENT = f"""\
import json
import os
from pathlib import Path

import numpy as np
from flwr.client import ClientApp, NumPyClient
from flwr.client.mod import secaggplus_mod

from ampfl.integrations.flower import CheckInMechanism, PrivacyMod

OUT = Path(os.environ["USERAPP_SPY"])


class Linear(NumPyClient):
    def __init__(self, pid):
        rng = np.random.default_rng(pid)
        self.pid, self.x = pid, rng.normal(size=(30, {DIM}))
        self.y = self.x @ np.linspace(-1, 1, {DIM})

    def fit(self, parameters, config):
        w = parameters[0].copy()
        for _ in range(5):
            w -= 0.1 * self.x.T @ (self.x @ w - self.y) / len(self.y)
        with open(OUT / f"client-{{self.pid}}.jsonl", "a") as f:  # what this node's app returned
            f.write(json.dumps({{"round": config["server_round"], "start": parameters[0].tolist(),
                                "trained": w.tolist()}}) + "\\n")
        return [w], len(self.y), {{"loss": float(np.mean((self.x @ w - self.y) ** 2))}}


def client_fn(context):
    return Linear(int(context.node_config["partition-id"])).to_client()


app = ClientApp(client_fn=client_fn, mods=[secaggplus_mod, PrivacyMod({MECHANISM})])
"""

SERVER = f"""\
import json
from pathlib import Path

import numpy as np
from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server import LegacyContext, ServerApp, ServerConfig
from flwr.server.strategy import FedAvg
from flwr.server.workflow import DefaultWorkflow

from ampfl.integrations.flower import CheckInMechanism, PrivateStrategy

MECH = {MECHANISM}
app = ServerApp()


class Spy(PrivateStrategy):
    def aggregate_fit(self, server_round, results, failures):
        with open(self.out / "server.jsonl", "a") as f:  # everything the server holds of the replies
            f.write(json.dumps({{"round": server_round, "failures": len(failures), "results": [
                {{"node": p.node_id, "num_examples": r.num_examples, "metrics": dict(r.metrics),
                  "same": r.parameters is results[0][1].parameters,
                  "parameters": parameters_to_ndarrays(r.parameters)[0].tolist()}}
                for p, r in results]}}) + "\\n")
        return super().aggregate_fit(server_round, results, failures)


@app.main()
def main(grid, context):
    out = Path(context.run_config["out"])
    inner = FedAvg(initial_parameters=ndarrays_to_parameters([np.zeros({DIM})]))
    strategy = Spy(inner, MECH, delta=1e-5, ledger=out / "ledger.sqlite")
    strategy.out = out
    legacy = LegacyContext(context, config=ServerConfig(num_rounds={ROUNDS}), strategy=strategy)
    DefaultWorkflow(fit_workflow=MECH.secaggplus_workflow(timeout=120))(grid, legacy)
    strategy.write_summary(out / "summary.json")
"""


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
def test_a_plain_flower_app_with_ampfl_mods_deploys(
    tmp_path: Path, cli_json: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ampfl.flower.local import LocalFederation, flwr_run, marked_processes

    out, app_dir = tmp_path / "out", tmp_path / "app"
    out.mkdir()
    (app_dir / "userapp").mkdir(parents=True)
    (app_dir / "pyproject.toml").write_text(PYPROJECT.format(out=out))
    (app_dir / "userapp" / "__init__.py").write_text("")
    (app_dir / "userapp" / "client.py").write_text(CLIENT)
    (app_dir / "userapp" / "server.py").write_text(SERVER)
    marker = str(out.resolve())
    federation = LocalFederation(3, tmp_path, tmp_path / "flwr-home", marker=marker)
    federation.env["USERAPP_SPY"] = str(out)
    try:
        federation.start()
        code = flwr_run(app_dir, federation.env, tmp_path / "flwr-run.log", timeout=400)
    finally:
        federation.stop()
    log = (tmp_path / "flwr-run.log").read_text(errors="replace")
    assert code == 0 and (out / "summary.json").is_file(), log[-3000:]
    assert marked_processes(marker) == []

    server = _lines(out / "server.jsonl")
    assert [entry["round"] for entry in server] == list(range(1, ROUNDS + 1))
    for entry in server:
        results = entry["results"]
        assert entry["failures"] == 0 and len({r["node"] for r in results}) == 3  # every node replied
        assert all(r["same"] for r in results)  # the server holds one decoded aggregate, not the replies
        assert {r["num_examples"] for r in results} == {1} and all(r["metrics"] == {} for r in results)
        decoded = (
            np.asarray(results[0]["parameters"]) * 3 * (1.0 + 10.0 / np.sqrt(3))
        )  # the sum, mean × c × R
        joined = [
            line
            for pid in range(3)
            for line in _lines(out / f"client-{pid}.jsonl")
            if line["round"] == entry["round"]
        ]
        clipped = np.zeros(DIM)
        for line in joined:
            update = np.asarray(line["trained"]) - np.asarray(line["start"])
            clipped += update * min(1.0, 1.0 / np.linalg.norm(update))
        # the decoded sum is the clipped updates' plus N(0, I): never the un-noised sum
        assert np.linalg.norm(decoded - clipped) > 0.3 * np.sqrt(DIM)
        assert abs(np.linalg.norm(decoded - clipped) / np.sqrt(DIM) - 1.0) < 0.6

    summary = json.loads((out / "summary.json").read_text())
    flags = ["--noise-multiplier", "1.0", "--rate", "0.5", "--steps", str(ROUNDS), "--delta", "1e-5"]
    report = cli_json(["account", "poisson", *flags])
    assert summary["rounds_accounted"] == ROUNDS and summary["privacy_unit"] == "client"
    assert summary["epsilon"] == pytest.approx(report["epsilon"], rel=1e-9)
    with sqlite3.connect(out / "ledger.sqlite") as db:
        spent = db.execute("SELECT epsilon FROM privacy_spent").fetchall()
        rows = db.execute("SELECT COUNT(*) FROM privacy_events").fetchone()[0]
    assert len(spent) == 3 and rows == 3 * ROUNDS
    assert all(eps == pytest.approx(report["epsilon"], rel=1e-9) for (eps,) in spent)


# -- the Mod alone, on real Flower messages ---------------------------------------------------------------
@pytest.fixture
def _task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``flwr-clientapp`` sets before a message is built."""
    from flwr.supercore.task_identity import TaskIdentity

    for name in ("_run_id", "_node_id", "_task_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)


MECH = CheckInMechanism(clip=1.0, noise_multiplier=2.0, participation=0.5, num_clients=5)


def _train_message(asked: int = 4, secagg: bool = True) -> Message:
    fitins = FitIns(ndarrays_to_parameters([np.zeros(3), np.ones((2, 2))]), {ASKED_KEY: asked})
    content = compat.fitins_to_recorddict(fitins, keep_input=True)
    if secagg:
        content.config_records[RECORD_KEY_CONFIGS] = ConfigRecord({})
    return Message(content, dst_node_id=1, message_type=MessageType.TRAIN)


def _context() -> Context:
    return Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})


def _app(msg: Message, context: Context) -> Message:
    fitins = compat.recorddict_to_fitins(msg.content, keep_input=True)
    from flwr.common import Code, FitRes, Status, parameters_to_ndarrays

    trained = [a + 10.0 for a in parameters_to_ndarrays(fitins.parameters)]  # an update of norm 10 * sqrt(7)
    fitres = FitRes(
        Status(Code.OK, ""), ndarrays_to_parameters(trained), num_examples=123, metrics={"loss": 1.0}
    )
    return Message(compat.fitres_to_recorddict(fitres, keep_input=True), reply_to=msg)


def _reply_vector(reply: Message) -> np.ndarray:
    from flwr.common import parameters_to_ndarrays

    fitres = compat.recorddict_to_fitres(reply.content, keep_input=True)
    assert fitres.num_examples == 1 and dict(fitres.metrics) == {}
    return np.concatenate([a.ravel() for a in parameters_to_ndarrays(fitres.parameters)])


@pytest.mark.usefixtures("_task_identity")
def test_mod_clips_adds_the_share_and_hides_its_coin() -> None:
    """Under SecAgg+ the app's fit runs whatever the coin (the server sees reply times); a node that did not
    check in discards it: zeros plus its share sent, the state the app wrote restored."""
    calls: list[int] = []

    def app(msg: Message, context: Context) -> Message:
        calls.append(1)
        context.state["trained"] = ConfigRecord({"rounds": 1})
        return _app(msg, context)

    r = 1.0 + 10.0 * 2.0 / np.sqrt(4)  # C + TAIL * zC / sqrt(n)
    sums = []
    mod = PrivacyMod(MECH, rng=np.random.default_rng(0))
    for _ in range(400):
        context = _context()
        sent = _reply_vector(mod(_train_message(), context, app)) * r
        sums.append(("trained" in context.state.config_records, sent))
    assert len(calls) == 400  # the same work for every node
    joined = [v for j, v in sums if j]
    assert 150 < len(joined) < 250  # the coin is Bern(1/2)
    # a joined node's mean is the clipped update (norm C along (1, ..., 1)); the share's std is zC/sqrt(n) = 1
    assert np.allclose(np.mean(joined, axis=0), np.full(7, 1 / np.sqrt(7)), atol=0.25)
    skipped = np.array([v for j, v in sums if not j])
    assert np.allclose(skipped.mean(axis=0), 0, atol=0.25) and abs(skipped.std() - 1.0) < 0.1


@pytest.mark.usefixtures("_task_identity")
def test_mod_refusals() -> None:
    mod = PrivacyMod(MECH)
    with pytest.raises(ValueError, match="secaggplus_mod"):
        mod(_train_message(secagg=False), _context(), _app)
    with pytest.raises(ValueError, match=rf"{ASKED_KEY} must be in \[1, 5\]"):
        mod(_train_message(asked=9), _context(), _app)
    evaluate = Message(RecordDict(), dst_node_id=1, message_type=MessageType.EVALUATE)
    with pytest.raises(ValueError, match="client-side evaluation"):
        mod(evaluate, _context(), _app)
    central = PrivacyMod(CheckInMechanism(clip=1.0, noise_multiplier=1.0, participation=1.0, num_clients=5,
                                          secure_aggregation=False))  # fmt: skip
    sent = _reply_vector(central(_train_message(secagg=False), _context(), _app))
    assert np.allclose(sent, 1 / np.sqrt(7))  # clipped to C, no noise: the server adds it


def test_trusted_server_variant_adds_the_noise_and_divides_by_p_times_n() -> None:
    """Without secure aggregation the server sums the clipped updates, adds N(0, (zC)²) itself and divides by
    the public p·N; the round is accounted at the declared z."""
    from flwr.common import Code, FitRes, Status
    from flwr.server.strategy import FedAvg

    from ampfl.integrations.flower import PrivateStrategy

    class Drawn:  # the server's noise draw, recorded (and zero here, to read the division)
        def normal(self, loc: float, scale: float, size: int) -> np.ndarray:
            self.scale = scale
            return np.zeros(size)

    mech = CheckInMechanism(clip=2.0, noise_multiplier=1.5, participation=0.5, num_clients=4,
                            secure_aggregation=False)  # fmt: skip
    strategy = PrivateStrategy(FedAvg(), mech, delta=1e-5)
    strategy._rng = drawn = Drawn()  # type: ignore[assignment]
    strategy._open([1, 2, 3, 4])
    strategy.parameters, strategy.asked = [np.zeros(3)], [1, 2, 3, 4]
    sent = [np.array([0.5, 0.0, 0.0]), np.array([0.0, 0.5, 0.0])]  # clipped updates over C
    results = [(None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters([v]), 1, {})) for v in sent]
    params, metrics = strategy.aggregate_fit(1, results, [])  # type: ignore[arg-type]
    from flwr.common import parameters_to_ndarrays

    model = parameters_to_ndarrays(params)[0]
    np.testing.assert_allclose(model, [0.5, 0.5, 0.0], atol=1e-6)  # (1, 1, 0) / (0.5 * 4)
    assert drawn.scale == 3.0  # z * C, added by the server
    assert metrics["epsilon"] == strategy.epsilon() > 0 and strategy.rounds == 1
