"""``ampfl deploy --secure-aggregation secaggplus``: DP-DSGD-RP (004), DP-FedAvg and MS-PAFL on real Flower.

One real run per algorithm (3 SuperNodes, 1 round: 4 SecAgg+ exchanges) checks the property the threat
model claims: the server-side code never sees an individual contribution, a participation flag or, for the
noise-share algorithms, an un-noised sum. The ServerApp's strategy and every client record what they
see/send (``AMPFL_SECAGG_SPY``); the test checks that

- every node completed the protocol, each with the same weight and no metrics (nothing per node differs);
- every result the strategy receives carries one and the same vector, equal to the **sum** of the clients'
  own vectors (within SecAgg+'s quantisation), whichever of them checked in;
- DP-DSGD-RP and DP-FedAvg: what the server decodes minus the sum of the clients' un-noised contributions
  is Gaussian noise with the calibrated std σ over the model's coordinates (every node, joined or not,
  sent its share N(0, σ²/3)); the summary lists the server in ``protects_against``;
- ``metrics.jsonl`` holds only released keys, ``diagnostics.jsonl`` the rest (and no count of participants
  for the noise-share algorithms: nothing but the noised sum was decoded);
- ε per round equals the simulator accountant's for the same schedule.
"""

from __future__ import annotations

import json
import math
import sqlite3
import tomllib
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from ampfl.fl.config import parse_config
from ampfl.fl.privacy.run_accountant import RunAccountant
from ampfl.fl.run.experiment import build_algorithm, build_task
from ampfl.fl.run.release import DIAGNOSTICS_HEADER, MODEL_CONSUMERS, SERVER
from ampfl.flower.deploy import deploy
from ampfl.flower.ledger import LEDGER
from ampfl.flower.local import marked_processes
from ampfl.flower.noise_shares import encoding_range
from ampfl.flower.secagg import SPY_ENV, check_secure_aggregation, encode

CONFIG = """
seed = 7
rounds = 1
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
clip = 1.0
noise_multiplier = 1.0
learning_rate = 0.5
{extra}
"""
EXTRA = {
    "dp_dsgd_rp": "participation = 0.5\nsampling_rate = 0.2\nlocal_dataset_size = 500",
    "dp_fedavg": 'client_sampling = "poisson"\nsampling_rate = 0.5\nexpected_clients = 1.5',
    "ms_pafl": "participation = 0.5",
}
RELEASED = {"round", "accuracy", "epsilon", "delta"}  # no wall-clock time: it depends on who took part


def _read(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in path.read_text().splitlines()]


def _config(name: str) -> object:
    return parse_config(tomllib.loads(CONFIG.format(name=name, extra=EXTRA[name])))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXTRA))
def test_secaggplus_server_sees_only_the_noised_sum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    spy = tmp_path / "spy"
    monkeypatch.setenv(SPY_ENV, str(spy))
    config = _config(name)
    out = tmp_path / "flower"
    summary = deploy(config, out, secure_aggregation="secaggplus")  # type: ignore[arg-type]

    server = _read(spy / "server.jsonl")
    assert [entry["round"] for entry in server] == [0]
    results = server[0]["results"]
    assert server[0]["failures"] == 0
    assert len({r["node"] for r in results}) == 3  # every node replied, whether or not it checked in
    assert {r["num_examples"] for r in results} == {1}  # no per-node weight differs
    assert all(r["metrics"] == {} for r in results)  # no per-node metric (a loss or count would be a flag)
    vectors = [np.asarray(r["parameters"][0]) for r in results]
    assert all(np.array_equal(v, vectors[0]) for v in vectors)  # one aggregate, no individual vector
    own = [_read(spy / f"client-{c}.jsonl") for c in range(3)]
    assert all(len(rows) == 1 and rows[0]["round"] == 0 for rows in own)
    sent = np.stack([np.asarray(rows[0]["vector"]) for rows in own])
    joined = np.asarray([rows[0]["joined"] for rows in own])  # each client's own coin, known to it only
    # The server's aggregate × 3 is the sum of what the clients sent (SecAgg+ quantises [-1, 1], 2^22 levels).
    np.testing.assert_allclose(vectors[0] * 3, sent.sum(0), atol=3 * 2 / 2**22 * 3)
    release = _read(out / "metrics.jsonl")
    diagnostics = _read(out / "diagnostics.jsonl")
    assert diagnostics[0] == DIAGNOSTICS_HEADER
    assert [set(line) for line in release] == [RELEASED]  # nothing computed on private data without noise
    assert diagnostics[1]["round"] == 1 and diagnostics[1]["asked"] == diagnostics[1]["completed"] == 3.0
    assert set(summary["final_metrics"]) == RELEASED
    timing = json.loads((out / "timing.json").read_text())  # kept apart: a reply's time reveals its work
    assert summary["deploy_seconds"] is None and summary["wall_seconds"] is None
    assert timing["deploy_seconds"] > 0
    assert summary["privacy_randomness"].startswith("secret") and summary["neighbouring"] == "add-remove"
    with sqlite3.connect(out / LEDGER) as db:
        threats = {
            json.loads(row[0]) == summary["protects_against"]
            for row in db.execute("SELECT protects_against FROM privacy_events")
        }
    assert threats == {True}

    # ε equals the simulator accountant's on the algorithm's events for the same schedule.
    algorithm = build_algorithm(config, build_task(config))  # type: ignore[arg-type]
    accountant = RunAccountant(config.privacy, algorithm)  # type: ignore[attr-defined]
    accountant.compose(algorithm.round_events(0))
    assert summary["epsilon"] == pytest.approx(accountant.epsilon(), rel=1e-12)
    assert release[-1]["epsilon"] == pytest.approx(accountant.epsilon(), rel=1e-12)
    assert summary["secure_aggregation"] == "secaggplus"
    assert marked_processes(str(out.resolve())) == []
    if name == "ms_pafl":  # w_α stays on the node: a state file for each client that checked in
        assert summary["protects_against"] == [MODEL_CONSUMERS, SERVER]
        assert summary["participation_hidden_from"] == []  # its analysis holds with participation public
        assert np.array_equal(sent[:, -1], joined.astype(float))  # B_i · [w̃ / R, 1]
        assert np.all(sent[~joined] == 0.0)
        assert diagnostics[1]["participants"] == joined.sum()
        kept = sorted((out / "node-state").glob("node-*/ampfl-ms-pafl-private-*.npy"))
        assert len(kept) == joined.sum()
        return

    # Noise shares: ε protects against the server, which decoded Σ u_i + N(0, σ²) and nothing else.
    assert summary["protects_against"] == summary["participation_hidden_from"] == [MODEL_CONSUMERS, SERVER]
    assert not {"participants", "examples", "train_loss"} & set(diagnostics[1])
    sigma = float(algorithm.noise_std)  # type: ignore[attr-defined]
    scale = encoding_range(algorithm, 3)
    unnoised = np.stack([np.asarray(rows[0]["unnoised"]) for rows in own])
    assert np.all(unnoised[~joined] == 0.0)  # a node whose coin said no contributes no update ...
    shares = sent * scale - unnoised  # ... but still its noise share N(0, σ²/3)
    for share in shares:
        assert np.std(share) == pytest.approx(sigma / math.sqrt(3), rel=0.2)
    noise = vectors[0] * 3 * scale - unnoised.sum(0)  # what the server holds minus the un-noised sum
    m = noise.size
    assert np.std(noise) == pytest.approx(sigma, rel=0.15)  # the calibrated σ (std error ~ σ/√(2m))
    assert abs(np.mean(noise)) < 5 * sigma / math.sqrt(m)
    assert np.abs(sent).max() < 1.0  # the encoding range covers every entry (SecAgg+ clipped nothing)


def test_encoding_and_noise_shares() -> None:
    """v_i = (u_i + ξ_i)/R: R covers the bound and 10 share stds; a non-participant's vector is its share."""
    config = _config("dp_dsgd_rp")
    algorithm = build_algorithm(config, build_task(config))  # type: ignore[arg-type]
    d, sigma = algorithm.d, algorithm.noise_std  # type: ignore[attr-defined]
    assert encoding_range(algorithm, 3) == pytest.approx(d * 1.0 + 10 * sigma / math.sqrt(3))
    rng = np.random.default_rng(0)
    zeros = np.zeros(100_000)
    share = encode(algorithm, zeros, 3, rng) * encoding_range(algorithm, 3)
    assert np.std(share) == pytest.approx(sigma / math.sqrt(3), rel=0.02)
    full = np.full(100_000, float(d))  # |g_ij| ≤ |S_i| C ≤ d C
    assert np.abs(encode(algorithm, full, 3, rng)).max() < 1.0


def test_dropout_is_accounted_at_the_realised_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node that drops out takes its noise share with it: with 2 of 3 shares in the sum the round is
    composed at z·√(2/3), and a halted protocol decodes nothing, keeps the model, composes the plan."""
    import torch

    import ampfl.flower.secagg as secagg
    from ampfl.flower.noise_shares import min_completed, worst_case_events
    from ampfl.flower.transport import collect_round, release_round

    config = _config("dp_dsgd_rp")
    algorithm = build_algorithm(config, build_task(config))  # type: ignore[arg-type]
    planned = algorithm.round_events(0)
    z = algorithm.noise_multiplier  # type: ignore[attr-defined]
    noised = torch.ones_like(algorithm.global_params)  # type: ignore[attr-defined]
    nodes = {1: 1, 2: 2, 3: 3}
    for completed, expected in ((3, planned), (2, [(algorithm.event_at(z * math.sqrt(2 / 3)), 1)])):  # type: ignore[attr-defined]
        decoded = secagg.SecureSum(noised, 3, completed)
        monkeypatch.setattr(secagg, "secure_sum", lambda *args, d=decoded, **kw: d)
        collected = collect_round(None, None, algorithm, nodes, [1, 2, 3], 0, 1.0, planned, secure=True)  # type: ignore[arg-type]
        events, metrics = collected.events, collected.metrics
        assert events == expected and metrics["completed"] == completed
        assert metrics["noise_multiplier_realised"] == pytest.approx(z * math.sqrt(completed / 3))
        assert "participants" not in metrics
    later = RunAccountant(config.privacy, algorithm)  # type: ignore[attr-defined]
    later.compose(events)
    full = RunAccountant(config.privacy, algorithm)  # type: ignore[attr-defined]
    full.compose(planned)
    assert later.epsilon() > full.epsilon()  # less noise, more ε: never the calibrated ε
    assert min_completed(3) == 2 and worst_case_events(algorithm, planned, 3) == expected

    monkeypatch.setattr(secagg, "secure_sum", lambda *args, **kw: secagg.SecureSum(None, 3, 1))
    before = algorithm.global_params.clone()  # type: ignore[attr-defined]
    collected = collect_round(None, None, algorithm, nodes, [1, 2, 3], 0, 1.0, planned, secure=True)  # type: ignore[arg-type]
    release_round(algorithm, collected)
    assert collected.events == planned and torch.equal(algorithm.global_params, before)  # type: ignore[attr-defined]


def test_a_sum_the_clients_did_not_noise_is_never_released(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server adds nothing to a decoded sum, so a private algorithm whose clients neither add noise
    shares nor noise their own messages is refused there (and on the node), not released un-noised."""
    import torch

    from ampfl.fl.algorithms.round_protocol import RoundSum
    from ampfl.flower.transport import CollectedRound, release_round

    config = _config("dp_dsgd_rp")
    algorithm = build_algorithm(config, build_task(config))  # type: ignore[arg-type]
    before = algorithm.round_protocol().broadcast().clone()
    decoded = CollectedRound([], asked=3, sums=[RoundSum(torch.ones_like(before), None, 3)], secure=True)
    monkeypatch.setattr(algorithm, "gaussian_shares", lambda: None)
    with pytest.raises(ValueError, match="un-noised"):
        release_round(algorithm, decoded)
    assert torch.equal(algorithm.round_protocol().broadcast(), before)
    monkeypatch.setattr(algorithm, "noised_on_client", True)  # MS-PAFL's case: noised by each client
    release_round(algorithm, decoded)
    assert not torch.equal(algorithm.round_protocol().broadcast(), before)


@pytest.mark.parametrize(
    ("name", "algorithm", "clients", "key"),
    [
        ("paillier", "dp_dsgd_rp", 3, "--secure-aggregation"),
        ("secaggplus", "fedavg", 3, "algorithm.name"),
        ("secaggplus", "local_only", 3, "algorithm.name"),
        ("secaggplus", "dp_dsgd_rp", 2, "partition.num_clients"),
    ],
)
def test_secure_aggregation_refusals(name: str, algorithm: str, clients: int, key: str) -> None:
    with pytest.raises(ValueError, match=key):
        check_secure_aggregation(name, algorithm, clients)
    check_secure_aggregation("none", algorithm, clients)


def test_which_algorithms_deploy_is_said_by_their_classes() -> None:
    """The lists come from the algorithms (``deploys``, ``noise_shares``, ``noised_on_client``), and each
    algorithm refuses its own settings (DP-FedAvg: Poisson sampling under SecAgg+, central noise)."""
    from ampfl.flower.common import check_deployable, deployable
    from ampfl.flower.secagg import secure_algorithms

    groups = {"gdpfed", "gdpfed_minus", "gdpfed_plus", "idp_fedavg", "pfa"}  # paper 001: one sum per group
    # (other algorithms join these lists as they deploy: only these are checked here)
    assert {"fedavg", "dp_fedavg", "dp_dsgd_rp", "ms_pafl", "p_fedavg", *groups} <= set(deployable())
    assert {"dp_fedavg", "dp_dsgd_rp", "ms_pafl", *groups} <= set(secure_algorithms())
    assert not {"fedavg", "p_fedavg", "local_only"} & set(secure_algorithms())  # nothing to noise
    text = CONFIG.format(name="dp_fedavg", extra="cohort_size = 3")
    fixed = parse_config(tomllib.loads(text))
    check_deployable(fixed)  # fixed-size cohort, central noise: fine without SecAgg+
    with pytest.raises(ValueError, match=r"algorithm\.client_sampling"):
        check_deployable(fixed, "secaggplus")
    check_deployable(_config("dp_fedavg"), "secaggplus")  # type: ignore[arg-type]  # Poisson: own coins
    distributed = text.replace("cohort_size = 3", 'cohort_size = 3\nnoise_placement = "distributed"')
    shares = parse_config(tomllib.loads(distributed))
    with pytest.raises(ValueError, match=r"algorithm\.noise_placement"):
        check_deployable(shares)


def test_cli_says_the_server_is_not_covered_without_secaggplus(
    tmp_path: Path,
    run_cli,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    """Without SecAgg+, ``ampfl deploy`` says in one line at start that ε does not cover the server."""
    import ampfl.flower.deploy as module

    class Refused(module.LocalFederation):
        def start(self, timeout: float = 60.0) -> None:
            raise RuntimeError("no federation in this test")

    monkeypatch.setattr(module, "LocalFederation", Refused)
    (tmp_path / "cfg.toml").write_text(CONFIG.format(name="dp_dsgd_rp", extra=EXTRA["dp_dsgd_rp"]))
    argv = ["deploy", str(tmp_path / "cfg.toml"), "--out", str(tmp_path / "o"), "--no-progress"]
    code, _, err = run_cli(argv)
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 2, err
    assert "server sees every client update" in lines[0] and "not protect against the server" in lines[0]
    config = _config("dp_dsgd_rp")
    assert module.server_notice(config, "secaggplus") is None  # type: ignore[arg-type]


def test_cli_refuses_secure_aggregation_for_fedavg(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    text = CONFIG.format(name="fedavg", extra="").replace("participation = 0.5\n", "")
    text = text.replace("clip = 1.0\nnoise_multiplier = 1.0\n", "cohort_size = 3\n")
    (tmp_path / "cfg.toml").write_text(text)
    flags = ["--out", str(tmp_path / "o"), "--secure-aggregation", "secaggplus"]
    code, _, err = run_cli(["deploy", str(tmp_path / "cfg.toml"), *flags])
    assert code == 2 and "algorithm.name" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o" / "config.json").exists()


@pytest.mark.parametrize("name", ["dp_dsgd_rp", "ms_pafl"])
def test_a_node_that_did_not_check_in_does_the_same_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The server sees when each SecAgg+ reply arrives: whatever its coin, a node runs its local update (the
    one ``client_update`` call); one whose coin said no discards it (zeros sent, its private state kept as it
    was) and sends a message of the same shape. Reply times: bench/secagg_reply_time.py."""
    from flwr.app import Context, Message, RecordDict
    from flwr.common import FitIns, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.compat.common import recorddict_compat as compat
    from flwr.supercore.task_identity import TaskIdentity

    import ampfl.flower.secagg as secagg
    from ampfl.fl.config import config_to_dict
    from ampfl.flower.common import CONFIG_KEY, encode_config

    for key in ("_run_id", "_node_id", "_task_id"):  # what flwr-clientapp sets before a message is built
        monkeypatch.setattr(TaskIdentity, key, 1)
    monkeypatch.setenv(SPY_ENV, str(tmp_path))
    config = _config(name)
    algorithm = build_algorithm(config, build_task(config))  # type: ignore[arg-type]
    params = algorithm.round_protocol().broadcast().numpy()
    updates: list[int] = []
    real = secagg.client_message

    def counted(*args: object, **kwargs: object) -> object:
        updates.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(secagg, "client_message", counted)
    context = Context(0, 1, {"partition-id": 0, "num-partitions": 3}, RecordDict(),
                      {CONFIG_KEY: encode_config(config_to_dict(config))})  # type: ignore[arg-type]  # fmt: skip
    protocol_class = type(secagg.client_algorithm(context, 3).round_protocol())
    sent = {}
    for round_index, coin in enumerate((0.0, 1.0)):  # said no, then yes
        monkeypatch.setattr(protocol_class, "own_coin", lambda self, client, *, noise_shares, c=coin: c)
        fitins = FitIns(ndarrays_to_parameters([params]), {"round": round_index, "asked": 3, "part": 0})
        content = compat.fitins_to_recorddict(fitins, keep_input=True)
        msg = Message(content, dst_node_id=1, message_type="train")
        reply = secagg.train(msg, context)
        fitres = compat.recorddict_to_fitres(reply.content, keep_input=True)
        sent[coin] = parameters_to_ndarrays(fitres.parameters)
        assert len(updates) == round_index + 1  # the local update ran, coin or not
        state_kept = bool(context.state.array_records)
        assert state_kept == (coin == 1.0 and name == "ms_pafl")  # w_α stays as it was for a declined node
    assert [a.shape for a in sent[0.0]] == [a.shape for a in sent[1.0]]
    record = _read(tmp_path / "client-0.jsonl")
    assert [row["joined"] for row in record] == [False, True]
    unnoised = record[0].get("unnoised", record[0]["vector"])
    assert np.all(np.asarray(unnoised) == 0.0)  # ... and contributes nothing
