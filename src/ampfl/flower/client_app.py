"""The ClientApp of ``ampfl deploy``: one client's local work, with the simulator's math.

Each SuperNode holds one client: ``partition-id`` of its node config is the client's index in the partition
``ampfl run`` builds from the same config (``[dataset]``, ``[partition]``, ``seed``), and ``num-partitions``
must equal ``[partition] num_clients``.

Messages:

- ``query``: replies ``partition-id`` and ``num-partitions`` (the server maps node ids to clients). A node
  with a cache folder (``cache-dir`` or ``state-dir`` in its node config) builds its own shard of the task
  here, once per run configuration (:mod:`ampfl.flower.node_cache`), so that no ``train`` message loads the
  dataset, partitions it or calibrates the noise.
- ``train``: content ``arrays["params"]`` (the model the server broadcasts: the algorithm's
  :meth:`~ampfl.fl.algorithms.round_protocol.RoundProtocol.broadcast`) and ``config`` with ``round``
  (0-based) and ``cohort`` (the round's sorted client ids). The node asks the algorithm's round protocol
  (:mod:`ampfl.fl.algorithms.round_protocol`) whether its client joins by its own coin
  (:meth:`~ampfl.fl.algorithms.round_protocol.RoundProtocol.own_coin`: DP-DSGD-RP and MS-PAFL; the coin is
  drawn from the operating system's entropy, never the run seed, which the server knows) or is in
  ``cohort`` (sampled by the server: it then draws exactly the mini-batches the simulator draws for it); a
  node that does not join declines with an empty reply. Otherwise it runs the protocol's ``client_update``
  and replies ``arrays["update"]`` (the message vector: FedAvg its local model w_i, 000 Eq. 2; DP-FedAvg its
  clipped update; DP-DSGD-RP g_i, the sum of its per-example clipped gradients; MS-PAFL its clipped,
  noised public part; the group methods of paper 001 their clipped update, on the group's public mask for
  GDPFed+ ``mask = "public"``, which the server sums per group) and ``metrics`` (the message's
  diagnostics). A client's private state (MS-PAFL's w_{i,α}) stays on the node: in ``context.state`` and,
  with a ``state-dir`` node config, in a node-local file ``ampfl-<algorithm>-private-<partition-id>.npy``
  (a resumed run continues it).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from ampfl.flower.common import CONFIG_KEY, decode_raw
from ampfl.flower.node_cache import STATE_DIR_KEY, cached_coin, node_algorithm, prepare

if TYPE_CHECKING:
    import torch

    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.fl.algorithms.round_protocol import ClientInstructions, ClientMessage

app = ClientApp()


def node_partition(context: Context, num_clients: int) -> int:
    """This node's client id, its node config's ``partition-id``, checked against ``num_clients``
    (``num-partitions`` must equal it)."""
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
    pid = node_partition(context, num_clients)
    return node_algorithm(context.run_config, context.node_config, pid, num_clients)[1]


@app.query()
def query(msg: Message, context: Context) -> Message:
    """Which client this node holds; builds the node's cached shard if it has none yet (module docstring)."""
    num_clients = int(decode_raw(str(context.run_config[CONFIG_KEY]))["partition"]["num_clients"])
    pid = node_partition(context, num_clients)
    prepare(context.run_config, context.node_config, pid, num_clients)
    metrics = MetricRecord({"partition-id": pid, "num-partitions": num_clients})
    return Message(RecordDict({"metrics": metrics}), reply_to=msg)


def _state_name(algorithm: Algorithm) -> str:
    return f"{algorithm.name.replace('_', '-')}-private"


def _state_file(context: Context, algorithm: Algorithm, pid: int) -> Path | None:
    folder = context.node_config.get(STATE_DIR_KEY)
    return None if folder is None else Path(str(folder)) / f"ampfl-{_state_name(algorithm)}-{pid}.npy"


def load_client_state(context: Context, algorithm: Algorithm, pid: int) -> torch.Tensor | None:
    """The client's private state on this node (``context.state``, else its ``state-dir`` file), or None."""
    import torch

    name = _state_name(algorithm)
    if name in context.state.array_records:
        return torch.from_numpy(context.state.array_records[name]["private"].numpy().copy())
    path = _state_file(context, algorithm, pid)
    if path is not None and path.is_file():
        return torch.from_numpy(np.load(path))
    return None


def save_client_state(context: Context, algorithm: Algorithm, pid: int, state: torch.Tensor | None) -> None:
    """Keep the client's new private state on this node (never sent)."""
    if state is None:
        return
    kept = state.contiguous().numpy()
    context.state[_state_name(algorithm)] = ArrayRecord({"private": Array(kept)})
    path = _state_file(context, algorithm, pid)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, kept)


def client_message(
    context: Context,
    algorithm: Algorithm,
    broadcast: torch.Tensor,
    instructions: ClientInstructions,
    own: np.random.Generator,
    *,
    keep_state: bool = True,
) -> ClientMessage:
    """The protocol's ``client_update`` with the node's private state loaded before and, with
    ``keep_state``, kept after (without it the update is work done and discarded: the state is unchanged)."""
    pid = instructions.client
    state = load_client_state(context, algorithm, pid)
    message, state = algorithm.round_protocol().client_update(broadcast, instructions, state, own)
    if keep_state:
        save_client_state(context, algorithm, pid, state)
    return message


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Local training of this node's client (module docstring)."""
    settings = msg.content.config_records["config"]
    round_index = int(settings["round"])  # type: ignore[arg-type]
    cohort = np.asarray(settings["cohort"], dtype=np.int64)
    num_clients = int(decode_raw(str(context.run_config[CONFIG_KEY]))["partition"]["num_clients"])
    pid = node_partition(context, num_clients)
    own = np.random.default_rng()  # the client's own randomness (OS entropy): the server cannot replay it
    # The node's own coin, from its cached shard when it has one (a node that does not join declines
    # without importing torch), else from the algorithm it builds.
    known, coin = cached_coin(context.run_config, context.node_config, pid, num_clients)
    algorithm = None
    if not known:
        import torch

        torch.set_num_threads(1)
        algorithm = client_algorithm(context, num_clients)
        coin = algorithm.round_protocol().own_coin(pid, noise_shares=False)
    if coin is not None:
        if not own.random() < coin:  # its own check-in coin B ~ Bern(p_i) (004 Algorithm 1; 000 Eq. 10)
            return Message(RecordDict(), reply_to=msg)  # did not check in
    elif pid not in cohort:
        return Message(RecordDict(), reply_to=msg)  # declined: not asked this round
    import torch

    from ampfl.fl.algorithms.round_protocol import ClientInstructions

    torch.set_num_threads(1)
    if algorithm is None:
        algorithm = client_algorithm(context, num_clients)
    start = torch.from_numpy(msg.content.array_records["arrays"]["params"].numpy().copy())
    instructions = ClientInstructions(round_index, cohort, pid, own_coin=coin is not None)
    message = client_message(context, algorithm, start, instructions, own)
    arrays = ArrayRecord({"update": Array(message.vector.numpy())})
    values: dict[str, int | float | list[int] | list[float]] = dict(message.metrics)
    return Message(RecordDict({"arrays": arrays, "metrics": MetricRecord(values)}), reply_to=msg)
