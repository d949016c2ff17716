"""The ClientApp of ``ampfl deploy``: one client's local work, with the simulator's math.

Each SuperNode holds one client: ``partition-id`` of its node config is the client's index in the partition
``ampfl run`` builds from the same config (``[dataset]``, ``[partition]``, ``seed``), and ``num-partitions``
must equal ``[partition] num_clients``.

Messages:

- ``query``: replies ``partition-id`` and ``num-partitions`` (the server maps node ids to clients).
- ``train``: content ``arrays["params"]`` (the global flat parameter vector w) and ``config`` with ``round``
  (0-based) and ``cohort`` (the round's sorted client ids, so that the client draws exactly the mini-batches
  the simulator draws for it: :meth:`~ampfl.fl.algorithms._common.FederatedAlgorithm.batches`). The client
  runs the algorithm's local SGD (``engine.local_sgd``) and replies ``arrays["update"]``:

  - FedAvg: its local model w_i (000 Eq. 2);
  - DP-FedAvg: its clipped update Δ̃_i = clip_C(w_i − w) (:meth:`DPFedAvg.clip_updates`); the noise is added
    by the server.

  with ``metrics`` ``train_loss``, ``clipped`` (1 if the update was clipped) and ``num-examples``. A node
  that is not in ``cohort`` declines with an empty reply.
"""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from ampfl.flower.common import CONFIG_KEY, algorithm_from_run_config, decode_raw

app = ClientApp()


def _partition(context: Context, num_clients: int) -> int:
    pid = int(context.node_config["partition-id"])
    total = int(context.node_config.get("num-partitions", num_clients))
    if total != num_clients or not 0 <= pid < num_clients:
        raise ValueError(
            f"node config: partition-id must be in [0, {num_clients}) and num-partitions = {num_clients} "
            f"(partition.num_clients). Found partition-id={pid}, num-partitions={total}."
        )
    return pid


@app.query()
def query(msg: Message, context: Context) -> Message:
    """Which client this node holds (light: neither torch nor the dataset is loaded)."""
    num_clients = int(decode_raw(str(context.run_config[CONFIG_KEY]))["partition"]["num_clients"])
    pid = _partition(context, num_clients)
    metrics = MetricRecord({"partition-id": pid, "num-partitions": num_clients})
    return Message(RecordDict({"metrics": metrics}), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Local training of this node's client (module docstring)."""
    settings = msg.content.config_records["config"]
    round_index = int(settings["round"])  # type: ignore[arg-type]
    cohort = np.asarray(settings["cohort"], dtype=np.int64)
    raw = decode_raw(str(context.run_config[CONFIG_KEY]))
    pid = _partition(context, int(raw["partition"]["num_clients"]))
    own = np.random.default_rng()  # the client's own randomness (OS entropy): the server cannot replay it
    if raw["algorithm"]["name"] == "dp_dsgd_rp":
        if not own.random() < float(raw["algorithm"]["participation"]):  # 004: B ~ Bern(p), on the client
            return Message(RecordDict(), reply_to=msg)
    elif pid not in cohort:
        return Message(RecordDict(), reply_to=msg)  # declined: not asked this round
    import torch

    from ampfl.fl.algorithms.dp_dsgd_rp import DPDSGDRandomParticipation
    from ampfl.fl.algorithms.dp_fedavg import DPFedAvg

    torch.set_num_threads(1)
    _, algorithm = algorithm_from_run_config(context.run_config)
    start = torch.from_numpy(msg.content.array_records["arrays"]["params"].numpy().copy())
    if isinstance(algorithm, DPDSGDRandomParticipation):
        sums, losses, examples = algorithm.client_gradients(start, np.array([pid]), own)
        metrics = MetricRecord(
            {"train_loss": float(losses[0]), "examples": float(examples[0]), "clipped": 0.0}
        )
        arrays = ArrayRecord({"update": Array(sums[0].numpy())})
        return Message(RecordDict({"arrays": arrays, "metrics": metrics}), reply_to=msg)
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
    clipped = 0.0
    if isinstance(algorithm, DPFedAvg):
        update, norms = algorithm.clip_updates(result.params - start)
        clipped = float(norms[0] > algorithm.p.clip)
    else:
        update = result.params
    size = len(algorithm.client_indices[pid])  # type: ignore[attr-defined]
    metrics = MetricRecord(
        {"train_loss": float(result.loss.mean()), "clipped": clipped, "num-examples": size}
    )
    arrays = ArrayRecord({"update": Array(update[0].numpy())})
    return Message(RecordDict({"arrays": arrays, "metrics": metrics}), reply_to=msg)
