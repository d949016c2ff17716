"""A SuperNode's own shard of the task, built once and cached on disk across messages.

Flower 1.41 starts a fresh ``flwr-clientapp`` process for every message, so a client that rebuilt the whole
task per message (load the dataset, partition it, build and calibrate the algorithm) paid for it every
round. Instead the node keeps, in its cache folder, one file per (run configuration, partition id):

- ``x``, ``y``: its client's training examples, in the order of its index array;
- ``sizes``: every client's local dataset size (the mini-batch draws of a cohort depend on them);
- ``meta``: JSON with the cache key, the dataset name and class count, the noise the run calibrated for
  each of the algorithm's noise targets (``noise``: key → noise multiplier, accountant, choice; empty when
  the config states the noise; :mod:`ampfl.fl.privacy.calibration`), so a message never recalibrates, and the
  probability of the client's own participation coin (``own_coin``, ``None`` when the server samples the
  cohort: the round protocol's ``own_coin``), so that a node whose coin says no declines without importing
  torch (:func:`cached_coin`).

:func:`node_algorithm` rebuilds the simulator's algorithm on a :class:`~ampfl.fl.task.Task` whose partition
has the real sizes, this client's examples at positions ``0 … D_i − 1`` and zeros for the other clients
(whose examples a node never holds). The draws of :func:`ampfl.fl.sampling.local_batches` and
:func:`~ampfl.fl.sampling.poisson_local_batches` depend on the cohort's sizes only, so the client trains on
exactly the examples of a full build (``tests/flower/test_node_cache.py`` checks the replies bit for bit).
The privacy key is never cached: every message draws a fresh one (or uses the seed under ``[privacy]
reproducible``), as a full build does. MS-PAFL's private submodel stays in ``context.state`` and
``state-dir`` (:mod:`ampfl.flower.client_app`).

The cache folder is the node config's ``cache-dir``, else ``<state-dir>/cache`` (a local federation gives
node i ``state-dir = <run>/node-state/node-i``); a node with neither builds in memory on every message. The
file is written atomically (:func:`ampfl.io.atomic_write_bytes`) and read without pickle; an unreadable or
foreign file is rebuilt; the folder keeps the :data:`KEEP` most recent shards. The key hashes the encoded
config, the partition id, the number of partitions and the ampfl version (a config that names a user dataset
path is keyed by the path, not the file's contents).
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ampfl.flower.common import CONFIG_KEY, decode_config

if TYPE_CHECKING:
    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.fl.config import RunConfig
    from ampfl.fl.privacy.calibration import CalibratedNoise
    from ampfl.fl.task import Task

#: Node config keys: the cache folder, and the folder of node-local state (MS-PAFL's private submodel).
CACHE_DIR_KEY = "cache-dir"
STATE_DIR_KEY = "state-dir"
#: Bumped when the file's layout changes (old files are then rebuilt).
FORMAT = 2
#: Shards a cache folder keeps (the most recently written; a long-lived node serves many runs).
KEEP = 4


def cache_key(config_text: str, pid: int, num_partitions: int) -> str:
    """The hex SHA-256 naming a node's shard of one run configuration (module docstring)."""
    from ampfl import __version__

    material = json.dumps([FORMAT, __version__, config_text, int(pid), int(num_partitions)])
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


def cache_folder(node_config: Mapping[str, Any]) -> Path | None:
    """The node's cache folder: ``cache-dir``, else ``<state-dir>/cache``, else None (no disk cache)."""
    if CACHE_DIR_KEY in node_config:
        return Path(str(node_config[CACHE_DIR_KEY]))
    if STATE_DIR_KEY in node_config:
        return Path(str(node_config[STATE_DIR_KEY])) / "cache"
    return None


def cache_file(folder: Path, key: str, pid: int) -> Path:
    """The file of one shard in ``folder``."""
    return folder / f"task-{pid}-{key[:24]}.npz"


def write_shard(
    path: Path, key: str, pid: int, algorithm: Algorithm, noise: Mapping[str, CalibratedNoise] | None = None
) -> Path:
    """Cache client ``pid``'s shard of ``algorithm``'s task at ``path`` (atomically), with ``noise``, the
    calibrated noise of its targets (by key)."""
    from ampfl.io import atomic_write_bytes

    task = algorithm.task
    dataset = task.dataset
    index = np.asarray(task.client_indices[pid], dtype=np.int64)
    meta = {
        "format": FORMAT,
        "key": key,
        "pid": int(pid),
        "name": dataset.name,
        "num_classes": int(dataset.num_classes),
        "noise": {k: [v.noise_multiplier, v.accountant, v.choice] for k, v in (noise or {}).items()},
        "own_coin": algorithm.round_protocol().own_coin(pid, noise_shares=False),
    }
    buffer = io.BytesIO()
    np.savez(
        buffer,
        x=np.ascontiguousarray(dataset.x_train[index]),
        y=np.ascontiguousarray(dataset.y_train[index]),
        sizes=task.client_sizes(),
        meta=np.array(json.dumps(meta)),
    )
    return atomic_write_bytes(path, buffer.getvalue())


def read_shard(
    path: Path, key: str, pid: int, config: RunConfig
) -> tuple[Task, dict[str, CalibratedNoise] | None]:
    """The task a node rebuilds from its cached shard (module docstring) and the cached calibrated noise by
    target key (None: the config states the noise, nothing was calibrated).

    Raises:
        OSError, ValueError, KeyError: a missing, damaged or foreign file.
    """
    from ampfl.fl.data.dataset import Dataset
    from ampfl.fl.data.partitions import ClientPartition
    from ampfl.fl.task import Task

    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(str(data["meta"]))
        if meta["format"] != FORMAT or meta["key"] != key or meta["pid"] != pid:
            raise ValueError(f"{path}: the cache of another configuration")
        x, y, sizes = data["x"], data["y"], data["sizes"].astype(np.int64)
    if not 0 <= pid < sizes.size or int(sizes[pid]) != len(y):
        raise ValueError(f"{path}: inconsistent sizes")
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    flat = np.zeros(int(offsets[-1]), dtype=np.int64)  # the other clients' examples are not on this node
    flat[offsets[pid] : offsets[pid + 1]] = np.arange(len(y), dtype=np.int64)
    dataset = Dataset(
        name=str(meta["name"]),
        x_train=x,
        y_train=y,
        x_test=np.zeros((0, *x.shape[1:]), dtype=x.dtype),
        y_test=np.zeros(0, dtype=np.int64),
        num_classes=int(meta["num_classes"]),
    )
    task = Task(
        dataset=dataset,
        client_indices=ClientPartition(flat, offsets),
        model=config.model.reference,
        model_options=dict(config.model.options),
    )
    from ampfl.fl.privacy.calibration import CalibratedNoise

    noise = {
        str(k): CalibratedNoise(float(z), str(accountant), None if choice is None else str(choice))
        for k, (z, accountant, choice) in dict(meta["noise"]).items()
    }
    return task, noise or None


def cached_coin(
    run_config: Mapping[str, Any], node_config: Mapping[str, Any], pid: int, num_partitions: int
) -> tuple[bool, float | None]:
    """``(known, p)``: the probability of client ``pid``'s own participation coin from the node's cached shard
    (None: the server samples the cohort), without torch; ``known`` False when the node has no readable shard
    of this run (the caller then builds the algorithm)."""
    folder = cache_folder(node_config)
    if folder is None:
        return False, None
    key = cache_key(str(run_config[CONFIG_KEY]), pid, num_partitions)
    try:
        with np.load(cache_file(folder, key, pid), allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
    except (OSError, ValueError, KeyError):
        return False, None
    if meta.get("format") != FORMAT or meta.get("key") != key or "own_coin" not in meta:
        return False, None
    coin = meta["own_coin"]
    return True, None if coin is None else float(coin)


def _calibrated_build(config: RunConfig) -> tuple[Algorithm, dict[str, CalibratedNoise]]:
    """A full build as the run does it (:func:`ampfl.fl.run.experiment.build_calibrated`), and the noise it
    calibrated for the algorithm's targets (what :meth:`~ampfl.fl.algorithms.base.Algorithm.set_noise`
    received last)."""
    from ampfl.fl.privacy.calibration import calibrate_algorithm
    from ampfl.fl.run.experiment import build_task, construct_algorithm

    algorithm = construct_algorithm(config, build_task(config))
    resolved: dict[str, CalibratedNoise] = {}
    receive = algorithm.set_noise

    def keep(values: Mapping[str, CalibratedNoise]) -> None:
        resolved.clear()
        resolved.update(values)
        receive(values)

    algorithm.set_noise = keep  # type: ignore[method-assign,assignment]
    try:
        calibrate_algorithm(algorithm, config.privacy)
    finally:
        del algorithm.set_noise
    return algorithm, resolved


def _prune(folder: Path) -> None:
    """Delete all but the :data:`KEEP` most recently written shards of ``folder``."""
    shards = []
    for path in folder.glob("task-*.npz"):
        try:
            shards.append((path.stat().st_mtime_ns, path))
        except OSError:  # deleted meanwhile by another message of this node
            continue
    for _, old in sorted(shards, reverse=True)[KEEP:]:
        old.unlink(missing_ok=True)


_MEMO: dict[tuple[str, int], tuple[RunConfig, Algorithm]] = {}


def node_algorithm(
    run_config: Mapping[str, Any], node_config: Mapping[str, Any], pid: int, num_partitions: int
) -> tuple[RunConfig, Algorithm]:
    """The run's config and the algorithm client ``pid`` trains with: from the node's cached shard when
    there is one, else from a full build (then cached). Memoised per process."""
    text = str(run_config[CONFIG_KEY])
    if (text, pid) in _MEMO:
        return _MEMO[(text, pid)]
    config = decode_config(text)
    folder = cache_folder(node_config)
    key = cache_key(text, pid, num_partitions)
    path = None if folder is None else cache_file(folder, key, pid)
    algorithm = None
    if path is not None and path.is_file():
        try:
            task, noise = read_shard(path, key, pid, config)
        except (OSError, ValueError, KeyError, TypeError):
            pass  # damaged or foreign: rebuilt below
        else:
            from ampfl.fl.run.experiment import construct_algorithm

            algorithm = construct_algorithm(config, task)
            if noise:  # the full build's calibrated noise: never calibrated again
                algorithm.set_noise(noise)
    if algorithm is None:
        algorithm, noise = _calibrated_build(config)
        if path is not None:
            write_shard(path, key, pid, algorithm, noise)
            _prune(path.parent)
    _MEMO.clear()
    _MEMO[(text, pid)] = (config, algorithm)
    return config, algorithm


def prepare(
    run_config: Mapping[str, Any], node_config: Mapping[str, Any], pid: int, num_partitions: int
) -> bool:
    """Build and cache the node's shard unless its cache folder holds it; True when it was built."""
    folder = cache_folder(node_config)
    if folder is None:
        return False
    key = cache_key(str(run_config[CONFIG_KEY]), pid, num_partitions)
    if cache_file(folder, key, pid).is_file():
        return False
    node_algorithm(run_config, node_config, pid, num_partitions)
    return True
