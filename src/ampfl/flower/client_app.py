"""The ClientApp of ``ampfl deploy``: one client's local work, with the simulator's math.

Each SuperNode holds one client: ``partition-id`` of its node config is the client's index in the partition
``ampfl run`` builds from the same config (``[dataset]``, ``[partition]``, ``seed``), and ``num-partitions``
must equal ``[partition] num_clients``.

Messages:

- ``query``: replies ``partition-id`` and ``num-partitions`` (the server maps node ids to clients). A node
  with a cache folder (``cache-dir`` or ``state-dir`` in its node config) builds its own shard of the task
  here, once per run configuration (:mod:`ampfl.flower.node_cache`), so that no ``train`` message loads the
  dataset, partitions it or calibrates the noise.
- ``train``: content ``arrays["params"]`` (the global flat parameter vector w) and ``config`` with ``round``
  (0-based) and ``cohort`` (the round's sorted client ids, so that the client draws exactly the mini-batches
  the simulator draws for it: :meth:`~ampfl.fl.algorithms._common.FederatedAlgorithm.batches`). The client
  runs the algorithm's local SGD (``engine.local_sgd``) and replies ``arrays["update"]``:

  - FedAvg: its local model w_i (000 Eq. 2);
  - DP-FedAvg: its clipped update Δ̃_i = clip_C(w_i − w) (:meth:`DPFedAvg.clip_updates`); the noise is added
    by the server.

  with ``metrics`` ``train_loss``, ``clipped`` (1 if the update was clipped) and ``num-examples``. A node
  that is not in ``cohort`` declines with an empty reply.

  DP-DSGD-RP and MS-PAFL (:data:`CLIENT_CHECK_IN`): every node is asked and flips its own check-in coin
  B ~ Bern(p_i) from the operating system's entropy (never the run seed, which the server knows); a node that
  does not check in replies empty. DP-DSGD-RP replies g_i, the sum of its per-example clipped gradients on a
  local Poisson sample (:meth:`DPDSGDRandomParticipation.client_gradients`). MS-PAFL receives w̄_p only,
  trains (w_{i,α}, w̄_p), keeps w_{i,α} in ``context.state`` and, with a ``state-dir`` node config, in a
  node-local file (a resumed run continues it), and replies its clipped, noised public part
  (:meth:`MSPAFL.privatize_public`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from ampfl.flower.common import CONFIG_KEY, decode_raw
from ampfl.flower.node_cache import STATE_DIR_KEY, node_algorithm, prepare

if TYPE_CHECKING:
    import torch

    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.fl.algorithms.ms_pafl import MSPAFL

app = ClientApp()

#: Algorithms whose clients check in with their own coin (every eligible node is asked).
CLIENT_CHECK_IN = ("dp_dsgd_rp", "ms_pafl")
#: The ``context.state`` key of MS-PAFL's private submodel.
PRIVATE = "ms-pafl-private"


def _partition(context: Context, num_clients: int) -> int:
    pid = int(context.node_config["partition-id"])
    total = int(context.node_config.get("num-partitions", num_clients))
    if total != num_clients or not 0 <= pid < num_clients:
        raise ValueError(
            f"node config: partition-id must be in [0, {num_clients}) and num-partitions = {num_clients} "
            f"(partition.num_clients). Found partition-id={pid}, num-partitions={total}."
        )
    return pid


def client_algorithm(context: Context, num_clients: int) -> Algorithm:
    """The algorithm this node's client trains with (:func:`ampfl.flower.node_cache.node_algorithm`: from
    the node's cached shard of the task when it has one)."""
    pid = _partition(context, num_clients)
    return node_algorithm(context.run_config, context.node_config, pid, num_clients)[1]


@app.query()
def query(msg: Message, context: Context) -> Message:
    """Which client this node holds; builds the node's cached shard if it has none yet (module docstring)."""
    num_clients = int(decode_raw(str(context.run_config[CONFIG_KEY]))["partition"]["num_clients"])
    pid = _partition(context, num_clients)
    prepare(context.run_config, context.node_config, pid, num_clients)
    metrics = MetricRecord({"partition-id": pid, "num-partitions": num_clients})
    return Message(RecordDict({"metrics": metrics}), reply_to=msg)


def _checks_in(raw: dict[str, Any], pid: int, own: np.random.Generator) -> bool:
    """The client's own check-in coin B ~ Bern(p_i) (004 Algorithm 1; 000 Eq. 10)."""
    p = raw["algorithm"]["participation"]
    return bool(own.random() < float(p[pid] if isinstance(p, list) else p))


def _reply(msg: Message, update: torch.Tensor, metrics: dict[str, float]) -> Message:
    arrays = ArrayRecord({"update": Array(update.numpy())})
    values: dict[str, int | float | list[int] | list[float]] = dict(metrics)
    return Message(RecordDict({"arrays": arrays, "metrics": MetricRecord(values)}), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Local training of this node's client (module docstring)."""
    settings = msg.content.config_records["config"]
    round_index = int(settings["round"])  # type: ignore[arg-type]
    cohort = np.asarray(settings["cohort"], dtype=np.int64)
    raw = decode_raw(str(context.run_config[CONFIG_KEY]))
    pid = _partition(context, int(raw["partition"]["num_clients"]))
    own = np.random.default_rng()  # the client's own randomness (OS entropy): the server cannot replay it
    if raw["algorithm"]["name"] in CLIENT_CHECK_IN:
        if not _checks_in(raw, pid, own):
            return Message(RecordDict(), reply_to=msg)  # did not check in
    elif pid not in cohort:
        return Message(RecordDict(), reply_to=msg)  # declined: not asked this round
    import torch

    from ampfl.fl.algorithms.dp_dsgd_rp import DPDSGDRandomParticipation
    from ampfl.fl.algorithms.dp_fedavg import DPFedAvg
    from ampfl.fl.algorithms.ms_pafl import MSPAFL

    torch.set_num_threads(1)
    algorithm = client_algorithm(context, int(raw["partition"]["num_clients"]))
    start = torch.from_numpy(msg.content.array_records["arrays"]["params"].numpy().copy())
    if isinstance(algorithm, DPDSGDRandomParticipation):
        sums, losses, examples = algorithm.client_gradients(start, np.array([pid]), own)
        return _reply(msg, sums[0], {"train_loss": float(losses[0]), "examples": float(examples[0])})
    if isinstance(algorithm, MSPAFL):
        return _ms_pafl(msg, context, algorithm, pid, start, own)
    p = algorithm.p  # type: ignore[attr-defined]
    row = int(np.searchsorted(cohort, pid))
    batches = algorithm.batches(cohort, round_index, p)[row : row + 1]  # type: ignore[attr-defined]
    result = algorithm.engine.local_sgd(
        algorithm.model,  # type: ignore[attr-defined]
        start,
        algorithm.x_train,  # type: ignore[attr-defined]
        algorithm.y_train,  # type: ignore[attr-defined]
        batches,
        learning_rate=p.learning_rate,
        client_ids=cohort[row : row + 1],
    )
    metrics = {"train_loss": float(result.loss.mean())}
    if isinstance(algorithm, DPFedAvg):
        update, norms = algorithm.clip_updates(result.params - start)
        metrics["clipped"] = float(norms[0] > algorithm.p.clip)
    else:
        update = result.params
    metrics["num-examples"] = float(len(algorithm.client_indices[pid]))  # type: ignore[attr-defined]
    return _reply(msg, update[0], metrics)


def _state_file(context: Context, pid: int) -> Path | None:
    folder = context.node_config.get(STATE_DIR_KEY)
    return None if folder is None else Path(str(folder)) / f"ampfl-ms-pafl-private-{pid}.npy"


def _ms_pafl(
    msg: Message,
    context: Context,
    algorithm: MSPAFL,
    pid: int,
    public: torch.Tensor,
    own: np.random.Generator,
) -> Message:
    """000 Algorithm 1 on the client: w_{i,α} never leaves the node (``context.state`` and ``state-dir``)."""
    import torch

    from ampfl.fl.sampling import local_batches

    path = _state_file(context, pid)
    if PRIVATE in context.state.array_records:
        private = torch.from_numpy(context.state.array_records[PRIVATE]["private"].numpy().copy())
    elif path is not None and path.is_file():
        private = torch.from_numpy(np.load(path))
    else:
        private = algorithm.partition.split(algorithm.global_params)["private"]  # Eq. (14) at t = 0
    start = algorithm.partition.merge({"private": private[None], "public": public[None]})
    p = algorithm.p
    batches = local_batches(
        algorithm.client_indices,
        np.array([pid]),
        num_steps=p.num_local_steps,
        batch_size=p.batch_size,
        scheme=p.local_sampling,
        rng=own,
    )
    result = algorithm.engine.local_sgd(
        algorithm.model, start, algorithm.x_train, algorithm.y_train, batches, learning_rate=p.learning_rate
    )
    parts = algorithm.partition.split(result.params)
    kept = parts["private"][0].contiguous()
    context.state[PRIVATE] = ArrayRecord({"private": Array(kept.numpy())})
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, kept.numpy())
    algorithm.public = public  # the w̄_p the clip of the "update" variant is relative to
    noise = torch.Generator().manual_seed(int(own.integers(2**63)))
    noisy, norms, ratio = algorithm.privatize_public(parts["public"], noise)
    metrics = {
        "train_loss": float(result.loss.mean()),
        "clipped": float(norms[0] > p.clip),
        "noise_to_signal": float(ratio[0]),
    }
    return _reply(msg, noisy[0], metrics)
