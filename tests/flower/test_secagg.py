"""``ampfl deploy --secure-aggregation secaggplus``: DP-DSGD-RP (004) and MS-PAFL (000) on real Flower.

One real run per algorithm (3 SuperNodes, 1 round: 4 SecAgg+ exchanges) checks the property the
papers assume: the server-side code never sees an individual contribution or a participation flag. The
ServerApp's strategy and every client record what they see/send (``AMPFL_SECAGG_SPY``); the test checks that

- every node completed the protocol, each with the same weight and no metrics (nothing per node differs);
- every result the strategy receives carries one and the same vector, equal to the **sum** of the clients'
  own contributions (within SecAgg+'s quantisation), whichever of them checked in;
- ε per round equals the simulator accountant's for the same schedule.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from ampfl.fl.config import parse_config
from ampfl.fl.privacy import RunAccountant
from ampfl.fl.run import build_algorithm, build_task
from ampfl.flower.deploy import deploy
from ampfl.flower.local import marked_processes
from ampfl.flower.secagg import SPY_ENV, check_secure_aggregation, contribution

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
participation = 0.5
clip = 1.0
noise_multiplier = 1.0
learning_rate = 0.5
{extra}
"""
EXTRA = {"dp_dsgd_rp": "sampling_rate = 0.2", "ms_pafl": ""}


def _read(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXTRA))
def test_secaggplus_server_sees_only_the_sum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    spy = tmp_path / "spy"
    monkeypatch.setenv(SPY_ENV, str(spy))
    config = parse_config(tomllib.loads(CONFIG.format(name=name, extra=EXTRA[name])))
    out = tmp_path / "flower"
    summary = deploy(config, out, secure_aggregation="secaggplus")

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
    contributions = np.stack([np.asarray(rows[0]["vector"]) for rows in own])
    joined = contributions[:, -1]  # each client's own B_i (1 = checked in), known to the client only
    assert set(joined.tolist()) <= {0.0, 1.0}
    assert np.all(contributions[joined == 0] == 0.0)  # a non-participant sends zeros ...
    # ... and the server's aggregate × N is their sum (SecAgg+ quantises on [-1, 1] with 2^22 levels).
    np.testing.assert_allclose(vectors[0] * 3, contributions.sum(0), atol=3 * 2 / 2**22 * 3)
    line = _read(out / "metrics.jsonl")[-1]
    assert line["participants"] == joined.sum() and line["asked"] == 3.0

    # ε equals the simulator accountant's on the algorithm's events for the same schedule.
    algorithm = build_algorithm(config, build_task(config))
    accountant = RunAccountant(config.privacy, algorithm)
    accountant.compose(algorithm.round_events(0))
    assert summary["epsilon"] == pytest.approx(accountant.epsilon(), rel=1e-12)
    assert line["epsilon"] == pytest.approx(accountant.epsilon(), rel=1e-12)
    assert summary["secure_aggregation"] == "secaggplus"
    assert marked_processes(str(out.resolve())) == []
    if name == "ms_pafl":  # w_α stays on the node: a state file for each client that checked in
        kept = sorted((out / "node-state").glob("node-*/ampfl-ms-pafl-private-*.npy"))
        assert len(kept) == joined.sum()
        return

    # The encoding the sum is decoded from: every entry in [-1, 1], zeros for a non-participant.
    import torch

    grads = torch.full((algorithm.global_params.numel(),), 2.0)  # |S_i| = 4 examples, C = 1
    v = contribution(algorithm, grads, loss=8.0, examples=4.0)  # type: ignore[arg-type]
    d = algorithm.d  # type: ignore[attr-defined]
    assert np.all(np.abs(v) <= 1.0) and v[-1] == 1.0 and v[-2] == pytest.approx(4.0 / d)
    assert not contribution(algorithm, None, 0.0, 0.0).any()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "algorithm", "clients", "key"),
    [
        ("paillier", "dp_dsgd_rp", 3, "--secure-aggregation"),
        ("secaggplus", "fedavg", 3, "algorithm.name"),
        ("secaggplus", "dp_dsgd_rp", 2, "partition.num_clients"),
    ],
)
def test_secure_aggregation_refusals(name: str, algorithm: str, clients: int, key: str) -> None:
    with pytest.raises(ValueError, match=key):
        check_secure_aggregation(name, algorithm, clients)
    check_secure_aggregation("none", algorithm, clients)


def test_cli_refuses_secure_aggregation_for_fedavg(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    text = CONFIG.format(name="fedavg", extra="").replace("participation = 0.5\n", "")
    text = text.replace("clip = 1.0\nnoise_multiplier = 1.0\n", "cohort_size = 3\n")
    (tmp_path / "cfg.toml").write_text(text)
    flags = ["--out", str(tmp_path / "o"), "--secure-aggregation", "secaggplus"]
    code, _, err = run_cli(["deploy", str(tmp_path / "cfg.toml"), *flags])
    assert code == 2 and "algorithm.name" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o" / "config.json").exists()
