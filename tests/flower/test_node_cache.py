"""A SuperNode's cached shard of the task (issue 31, part 4): the ClientApp's replies from the cache equal a
full build's bit for bit, the cache is keyed by config and partition, a damaged file is rebuilt, and a train
message on a warm cache neither loads the dataset nor recalibrates the noise. No Flower process is started:
the handlers are called as ``flwr-clientapp`` calls them."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from ampfl.fl.config import config_to_dict, parse_config
from ampfl.fl.run.experiment import build_algorithm, build_task
from ampfl.flower import client_app, node_cache
from ampfl.flower.common import CONFIG_KEY, encode_config

BASE = """
seed = 4
rounds = 2

[dataset]
name = "digits"

[partition]
scheme = "dirichlet"
alpha = 0.5
num_clients = 3

[model]
name = "logreg"

[privacy]
reproducible = true

[algorithm]
name = "{name}"
learning_rate = 0.5
{extra}
"""

ALGORITHMS = {
    "fedavg": "cohort_size = 2",
    "dp_fedavg": "cohort_size = 2\nclip = 0.5\nnoise_multiplier = 1.1",
    "dp_dsgd_rp": "participation = 1.0\nsampling_rate = 0.2\nnoise_multiplier = 1.0\n"
    "local_dataset_size = 999",
    "ms_pafl": "participation = 1.0\nnoise_multiplier = 0.8\nprivate_fraction = 0.5",
}


def _run_config(name: str, extra: str | None = None) -> dict[str, Any]:
    text = BASE.format(name=name, extra=ALGORITHMS[name] if extra is None else extra)
    return {CONFIG_KEY: encode_config(config_to_dict(parse_config(tomllib.loads(text))))}


def _context(run_config: dict[str, Any], pid: int, **node: str) -> Context:
    node_config = {"partition-id": pid, "num-partitions": 3, **node}
    return Context(
        run_id=1, node_id=10 + pid, node_config=node_config, state=RecordDict(), run_config=run_config
    )


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``flwr-clientapp`` sets before a message is built (the server's ids here)."""
    for name in ("_run_id", "_node_id", "_task_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)


def _message(kind: str, params: np.ndarray | None = None, cohort: tuple[int, ...] = (0, 1)) -> Message:
    if params is None:
        return Message(RecordDict(), dst_node_id=11, message_type=kind)
    content = RecordDict(
        {
            "arrays": ArrayRecord({"params": Array(params)}),
            "config": ConfigRecord({"round": 1, "cohort": list(cohort)}),
        }
    )
    return Message(content, dst_node_id=11, message_type=kind)


def _train(context: Context, params: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """One train message; the client's own generator (OS entropy when deployed) seeded for the comparison."""
    real = np.random.default_rng
    monkeypatch.setattr(np.random, "default_rng", lambda *args: real(*args) if args else real(1234))
    reply = client_app.train(_message("train", params), context)
    monkeypatch.setattr(np.random, "default_rng", real)
    assert "arrays" in reply.content.array_records
    update = reply.content.array_records["arrays"]["update"].numpy()
    return {"update": update, **dict(reply.content.metric_records["metrics"])}


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_a_reply_from_the_cached_shard_equals_a_full_builds(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Arrange: the global model a server would send
    run_config = _run_config(name)
    config = node_cache.decode_config(run_config[CONFIG_KEY])
    full = build_algorithm(config, build_task(config))
    model = getattr(full, "public", None) if name == "ms_pafl" else full.global_params  # type: ignore[attr-defined]
    params = (model + 0.01).numpy()  # not the initial model: the update depends on it
    node_cache._MEMO.clear()
    # Execute: a node without cache (full build); the query that builds the cache; a train on the cache
    expected = _train(_context(run_config, 1), params, monkeypatch)
    node_cache._MEMO.clear()
    reply = client_app.query(_message("query"), _context(run_config, 1, **{"cache-dir": str(tmp_path)}))
    files = list(tmp_path.glob("task-1-*.npz"))
    node_cache._MEMO.clear()  # a fresh flwr-clientapp process: only the disk cache is left
    cached = _train(_context(run_config, 1, **{"cache-dir": str(tmp_path)}), params, monkeypatch)
    # Assert
    assert reply.content.metric_records["metrics"]["partition-id"] == 1 and len(files) == 1
    assert cached.keys() == expected.keys()
    np.testing.assert_array_equal(cached["update"], expected["update"])
    assert all(cached[k] == expected[k] for k in expected if k != "update")


def test_the_shard_holds_this_client_only_and_the_cache_is_keyed(tmp_path: Path) -> None:
    run_config = _run_config("fedavg")
    config = node_cache.decode_config(run_config[CONFIG_KEY])
    task = build_task(config)
    node = {"state-dir": str(tmp_path / "node-2")}
    node_cache._MEMO.clear()
    assert node_cache.prepare(run_config, node, 2, 3) is True
    assert node_cache.prepare(run_config, node, 2, 3) is False  # built once
    (path,) = (tmp_path / "node-2" / "cache").glob("task-2-*.npz")
    key = node_cache.cache_key(run_config[CONFIG_KEY], 2, 3)
    shard, z = node_cache.read_shard(path, key, 2, config)
    index = np.asarray(task.client_indices[2])
    np.testing.assert_array_equal(shard.dataset.x_train, task.dataset.x_train[index])
    np.testing.assert_array_equal(shard.client_sizes(), task.client_sizes())
    assert shard.dataset.x_test.shape[0] == 0 and z is None
    other = _run_config("fedavg", "cohort_size = 3")
    assert (
        node_cache.cache_key(other[CONFIG_KEY], 2, 3)
        != key
        != node_cache.cache_key(run_config[CONFIG_KEY], 1, 3)
    )
    with pytest.raises(ValueError, match="another configuration"):
        node_cache.read_shard(path, node_cache.cache_key(other[CONFIG_KEY], 2, 3), 2, config)
    # A damaged file is rebuilt on the next message
    path.write_bytes(b"not an npz")
    node_cache._MEMO.clear()
    _, algorithm = node_cache.node_algorithm(run_config, node, 2, 3)
    assert algorithm.task.dataset.x_test.shape[0] > 0  # a full build
    assert (
        node_cache.read_shard(path, key, 2, config)[0].client_sizes().tolist() == task.client_sizes().tolist()
    )


def test_a_calibrated_noise_multiplier_is_cached_not_recalibrated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = "cohort_size = 2\nclip = 0.5\ntarget_epsilon = 4.0\nnum_rounds = 5\nexpected_clients = 2.0"
    run_config = _run_config("dp_fedavg", extra)
    node = {"cache-dir": str(tmp_path)}
    node_cache._MEMO.clear()
    _, built = node_cache.node_algorithm(run_config, node, 0, 3)
    calibrated = built.noise_multiplier  # type: ignore[attr-defined]

    def refuse(*args: object, **kwargs: object) -> float:
        raise AssertionError("calibrated again")

    monkeypatch.setattr("ampfl.fl.privacy.run_accountant.calibrate_noise", refuse)
    node_cache._MEMO.clear()
    _, cached = node_cache.node_algorithm(run_config, node, 0, 3)
    assert cached.noise_multiplier == calibrated > 0  # type: ignore[attr-defined]
    assert cached.noise_std == built.noise_std  # type: ignore[attr-defined]


_WARM = """
import json, sys
import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity
from ampfl.flower import client_app
run_config, folder = json.loads(sys.argv[1]), sys.argv[2]
node = {"partition-id": 1, "num-partitions": 3, "cache-dir": folder}
context = Context(1, 11, node, RecordDict(), run_config)
TaskIdentity.run_id = TaskIdentity.node_id = TaskIdentity.task_id = 1
dim = int(sys.argv[3])
content = RecordDict({"arrays": ArrayRecord({"params": Array(np.zeros(dim, dtype=np.float32))}),
                      "config": ConfigRecord({"round": 0, "cohort": [0, 1]})})
reply = client_app.train(Message(content, dst_node_id=11, message_type="train"), context)
assert "arrays" in reply.content.array_records
print(json.dumps(sorted(m for m in ("sklearn", "ampfl.fl.privacy.run_accountant") if m in sys.modules)))
"""


def test_a_train_message_on_a_warm_cache_loads_no_dataset(tmp_path: Path) -> None:
    run_config = _run_config("dp_fedavg")
    node_cache._MEMO.clear()
    _, algorithm = node_cache.node_algorithm(run_config, {"cache-dir": str(tmp_path)}, 1, 3)
    dim = str(algorithm.global_params.numel())  # type: ignore[attr-defined]
    done = subprocess.run(
        [sys.executable, "-c", _WARM, json.dumps(run_config), str(tmp_path), dim],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout.splitlines()[-1]) == []


def test_a_cache_folder_keeps_the_most_recent_shards(tmp_path: Path) -> None:
    node = {"cache-dir": str(tmp_path)}
    written = []
    for cohort in range(1, node_cache.KEEP + 3):  # KEEP + 2 configurations, one shard each
        run_config = _run_config("fedavg", f"cohort_size = {min(cohort, 3)}\nnum_local_steps = {cohort}")
        node_cache._MEMO.clear()
        node_cache.node_algorithm(run_config, node, 0, 3)
        key = node_cache.cache_key(run_config[CONFIG_KEY], 0, 3)
        written.append(node_cache.cache_file(tmp_path, key, 0))
    assert sorted(tmp_path.glob("task-*.npz")) == sorted(written[-node_cache.KEEP :])


_DECLINE = """
import json, sys
import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity
from ampfl.flower import client_app
run_config, folder = json.loads(sys.argv[1]), sys.argv[2]
node = {"partition-id": 1, "num-partitions": 3, "cache-dir": folder}
context = Context(1, 11, node, RecordDict(), run_config)
TaskIdentity.run_id = TaskIdentity.node_id = TaskIdentity.task_id = 1
content = RecordDict({"arrays": ArrayRecord({"params": Array(np.zeros(3, dtype=np.float32))}),
                      "config": ConfigRecord({"round": 0, "cohort": [0, 2]})})
reply = client_app.train(Message(content, dst_node_id=11, message_type="train"), context)
print(json.dumps(["arrays" in reply.content.array_records, "torch" in sys.modules]))
"""


@pytest.mark.parametrize(
    ("name", "extra", "coin"),
    [
        ("fedavg", None, None),  # the server samples: client 1 is not in the cohort [0, 2]
        ("dp_dsgd_rp", "participation = 1e-12\nnoise_multiplier = 1.0\nlocal_dataset_size = 999", 1e-12),
    ],
)
def test_a_node_that_does_not_join_declines_without_torch(
    tmp_path: Path, name: str, extra: str | None, coin: float | None
) -> None:
    """The shard caches the round protocol's own coin: a node whose coin says no (or that the server did not
    sample) replies empty without importing torch or building the algorithm."""
    run_config = _run_config(name, extra)
    node_cache._MEMO.clear()
    _, algorithm = node_cache.node_algorithm(run_config, {"cache-dir": str(tmp_path)}, 1, 3)
    assert algorithm.round_protocol().own_coin(1, noise_shares=False) == coin
    assert node_cache.cached_coin(run_config, {"cache-dir": str(tmp_path)}, 1, 3) == (True, coin)
    assert node_cache.cached_coin(run_config, {"cache-dir": str(tmp_path / "empty")}, 1, 3) == (False, None)
    done = subprocess.run(
        [sys.executable, "-c", _DECLINE, json.dumps(run_config), str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout.splitlines()[-1]) == [False, False]
