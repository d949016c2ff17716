"""SecAgg+ for ``ampfl deploy --secure-aggregation secaggplus``: the server decodes only a noised sum.

Flower 1.41's compat layer: the ClientApp :data:`app` runs ``secaggplus_mod`` and replies in the legacy fit
layout (``FitRes``); the ServerApp runs one ``SecAggPlusWorkflow`` per round (:func:`secure_sum`) on a
``LegacyContext`` whose strategy (:class:`SumStrategy`) asks every eligible node and keeps the unmasked
aggregate. The ServerApp's round loop (ledger commit before release, checkpoint, metrics) is unchanged.

DP-DSGD-RP (004), DP-FedAvg (Poisson sampling) and MS-PAFL (000). Every asked node runs the protocol in every
round, whatever its own coin (check-in B ~ Bern(p_i); DP-FedAvg: sampled with probability q, the coin drawn by
the node, not the server). Every node reports the **same weight** (``num_examples = 1``) and no metrics: in
flwr 1.41 the weight and the metrics of each ``FitRes`` travel in the clear (only the arrays are masked), so
a weight 0 for a non-participant would reveal it. The server learns the mean over the c nodes that completed
the protocol and multiplies by c.

DP-DSGD-RP and DP-FedAvg (:mod:`ampfl.flower.noise_shares`): node i sends v_i = (u_i + ξ_i)/R, u_i its
clipped gradient sum g_i (DP-FedAvg: clipped update Δ̃_i), zeros if its coin said no, ξ_i ~ N(0, σ²/n · I) its
noise share (always sent), R the encoding range; the server decodes Σ_i u_i + N(0, σ² I) and nothing else
(no count, sample total or loss), then the algorithm's ``apply_noised_sum``. A node that drops out takes its
share with it: the round is accounted at the realised noise multiplier (``noise_shares`` docstring).

MS-PAFL's contribution is v_i = B_i · [w̃_{i,p} / R, 1] with w̃_{i,p} its clipped, noised public part (client
side, its round protocol's ``client_update``: w_{i,α} stays on the node) and R = C + 10σ (its
``message_bound``); the server decodes Σ_i w̃_{i,p} and K for Eq. (13) (``sum_reveals_count``: MS-PAFL's
analysis holds with participation public to the server).

The group methods of paper 001 (GDPFed, GDPFed−, GDPFed+, PFA: one secure sum per privacy group; IDP-FedAvg:
one for the whole cohort): one SecAgg+ round per sum (``part`` in the round's config; the rounds of one
Flower round run side by side), over that sum's nodes only; each node checks that ``part`` is its own
group's, draws its own coin Bern(q_g) and adds its share of its group's noise N(0, z_g² C²/n_g) (zero
outside GDPFed+'s public mask at the broadcast model); the server decodes each group's noised sum and
nothing else.

What is summed, its bound and whether a count is appended are the algorithm's round protocol's
(:mod:`ampfl.fl.algorithms.round_protocol`: ``client_update``, ``message_bound``, ``gaussian_shares``,
``sum_reveals_count``); this module only encodes, masks and decodes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from flwr.app import Context, Message
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.common import (
    Code,
    FitIns,
    FitRes,
    Parameters,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.compat.common import recorddict_compat as compat

from ampfl.flower.client_app import client_algorithm, client_message, node_partition, query
from ampfl.flower.common import CONFIG_KEY, decode_raw
from ampfl.flower.fit_only import FitOnlyStrategy
from ampfl.flower.noise_shares import RECONSTRUCTION_THRESHOLD, encoding_range, noise_share

if TYPE_CHECKING:
    import torch
    from flwr.common import Scalar
    from flwr.server.client_manager import ClientManager
    from flwr.server.client_proxy import ClientProxy
    from flwr.serverapp import Grid

    from ampfl.fl.algorithms.base import Algorithm

#: ``ampfl deploy --secure-aggregation`` values.
SECURE_AGGREGATION = ("none", "secaggplus")
#: Fewest clients SecAgg+ runs with (with two, the sum and one's own vector reveal the other's).
MIN_CLIENTS = 3
#: Most clients: N · 2^22 quantisation levels must stay below the 2^32 modulus.
MAX_CLIENTS = 1023
#: Environment variable naming a folder where, for tests, the ServerApp records what its strategy receives
#: and each client records its own contribution (never set in a real deployment).
SPY_ENV = "AMPFL_SECAGG_SPY"

app = ClientApp(mods=[secaggplus_mod])
app.query()(query)


def secure_algorithms() -> tuple[str, ...]:
    """The algorithms deployable with SecAgg+: those whose clients add noise shares or noise their own
    messages (:attr:`~ampfl.fl.algorithms.base.Algorithm.noise_shares`, ``noised_on_client``)."""
    from ampfl.fl.algorithms import ALGORITHMS

    return tuple(
        name for name, cls in ALGORITHMS.items() if cls.deploys and (cls.noise_shares or cls.noised_on_client)
    )


def check_secure_aggregation(name: str, algorithm: str, num_clients: int) -> None:
    """ValueError (one line naming the setting) for a secure aggregation deploy cannot run (the algorithm's
    own settings: :func:`ampfl.flower.common.check_deployable`)."""
    if name not in SECURE_AGGREGATION:
        raise ValueError(f"--secure-aggregation must be one of {list(SECURE_AGGREGATION)}. Found {name!r}.")
    if name == "none":
        return
    supported = secure_algorithms()
    if algorithm not in supported:
        raise ValueError(
            f"algorithm.name: --secure-aggregation {name} supports {', '.join(supported)}. "
            f"Found {algorithm!r}."
        )
    if not MIN_CLIENTS <= num_clients <= MAX_CLIENTS:
        raise ValueError(
            f"partition.num_clients: --secure-aggregation {name} needs [{MIN_CLIENTS}, {MAX_CLIENTS}] "
            f"clients. Found {num_clients}."
        )


def _spy(name: str, record: dict[str, Any]) -> None:
    folder = os.environ.get(SPY_ENV)
    if folder:
        path = Path(folder) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")


# -- client ----------------------------------------------------------------------------------------------
def encode(
    algorithm: Algorithm,
    unnoised: np.ndarray,
    asked: int,
    rng: np.random.Generator,
    *,
    part: int = 0,
    broadcast: torch.Tensor | None = None,
) -> np.ndarray:
    """v_i = (u_i + ξ_i) / R (module docstring): ``unnoised`` u_i (zeros for a node whose coin said no) plus
    its noise share of sum ``part`` (at the model ``broadcast``: a public mask may depend on it) from
    ``rng``, on SecAgg+'s [-1, 1]."""
    share = noise_share(algorithm, asked, unnoised.size, rng, part=part, broadcast=broadcast)
    vector: np.ndarray = (unnoised.astype(np.float64) + share) / encoding_range(algorithm, asked, part=part)
    return vector


def _asked(fitins: FitIns, num_clients: int) -> int:
    asked = int(fitins.config["asked"])
    if not 1 <= asked <= num_clients:
        raise ValueError(f"asked must be in [1, {num_clients}] (partition.num_clients). Found {asked}.")
    return asked


def _part(fitins: FitIns) -> int:
    """The sum this SecAgg+ round is (one per group for an algorithm that sums by group; else 0)."""
    return int(fitins.config.get("part", 0))


def _has_shares(algorithm: Algorithm, part: int, broadcast: torch.Tensor | None = None) -> bool:
    from ampfl.fl.algorithms.round_protocol import grouped

    protocol = algorithm.round_protocol()
    model = protocol.broadcast() if broadcast is None else broadcast
    parts = grouped(protocol).sum_shares(model)
    return 0 <= part < len(parts) and parts[part] is not None


def _range(algorithm: Algorithm, asked: int, part: int = 0) -> float:
    """R of the encoding of sum ``part``: B + TAIL·σ/√n with noise shares (:func:`encoding_range`), else the
    message bound (a message noised on the client, MS-PAFL)."""
    if _has_shares(algorithm, part):
        return encoding_range(algorithm, asked, part=part)
    return algorithm.round_protocol().message_bound()


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One client's SecAgg+ contribution (module docstring), in the legacy fit layout."""
    import torch

    from ampfl.fl.algorithms.round_protocol import ClientInstructions, check_noised, grouped

    fitins = compat.recorddict_to_fitins(msg.content, keep_input=True)
    raw = decode_raw(str(context.run_config[CONFIG_KEY]))
    num_clients = int(raw["partition"]["num_clients"])
    pid = node_partition(context, num_clients)
    asked = _asked(fitins, num_clients)
    own = np.random.default_rng()  # the client's own randomness (OS entropy): the server cannot replay it
    torch.set_num_threads(1)
    # Every node builds the algorithm (torch, its cached shard), whether it joins or not: less of a timing
    # signal.
    algorithm = client_algorithm(context, num_clients)
    protocol = algorithm.round_protocol()
    check_noised(protocol, private=algorithm.privacy_unit is not None)  # nothing leaves un-noised
    coin = protocol.own_coin(pid, noise_shares=True)
    if coin is None:
        raise ValueError(f"algorithm.name: {algorithm.name} has no client coin for --secure-aggregation.")
    part = _part(fitins)
    if grouped(protocol).sum_of(pid) != part:  # its share would noise another group's sum
        raise ValueError(f"part: client {pid} belongs to sum {grouped(protocol).sum_of(pid)}. Found {part}.")
    joined = bool(own.random() < coin)  # check-in B ~ Bern(p_i) (004, 000), DP-FedAvg's Bern(q), GDPFed's q_g
    round_index = int(fitins.config["round"])
    record: dict[str, Any] = {"round": round_index, "joined": joined, "part": part}
    start = torch.from_numpy(parameters_to_ndarrays(fitins.parameters)[0].copy())
    # A node whose coin said no runs the same local update on its own data and discards it (its state
    # unchanged, zeros sent): the server sees when each reply arrives, and a node that skipped the work would
    # reply measurably sooner (bench/secagg_reply_time.py).
    instructions = ClientInstructions(round_index, np.array([pid]), pid, own_coin=True)
    vector = client_message(context, algorithm, start, instructions, own, keep_state=joined).vector
    message = np.asarray(vector.double().numpy())
    if not joined:
        message = np.zeros_like(message)
    if _has_shares(algorithm, part, start):
        record["unnoised"] = message.tolist()
        # the noise share goes out whatever the coin said
        sent = encode(algorithm, message, asked, own, part=part, broadcast=start)
    else:
        sent = message / _range(algorithm, asked, part)
    if protocol.sum_reveals_count:
        sent = np.concatenate([sent, [1.0 if joined else 0.0]])
    record["vector"] = sent.tolist()
    _spy(f"client-{pid}.jsonl", record)
    fitres = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([sent]), num_examples=1, metrics={})
    return Message(compat.fitres_to_recorddict(fitres, keep_input=True), reply_to=msg)


# -- server ----------------------------------------------------------------------------------------------
class SumStrategy(FitOnlyStrategy):
    """Asks the given nodes; keeps the unmasked aggregate the SecAgg+ workflow hands to ``aggregate_fit``."""

    def __init__(
        self, proxies: list[ClientProxy], params: np.ndarray, round_index: int, part: int = 0
    ) -> None:
        self.proxies, self.params, self.round_index, self.part = proxies, params, round_index, part
        self.total: np.ndarray | None = None
        self.completed = 0

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        return None

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        config: dict[str, Scalar] = {"round": self.round_index, "asked": len(self.proxies), "part": self.part}
        fitins = FitIns(ndarrays_to_parameters([self.params]), config)
        return [(proxy, fitins) for proxy in self.proxies]

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        """Every result carries the same aggregate (the workflow's weighted mean); × c is the sum."""
        _spy(
            "server.jsonl",
            {
                "round": self.round_index,
                "part": self.part,
                "results": [
                    {
                        "node": proxy.node_id,
                        "num_examples": res.num_examples,
                        "metrics": dict(res.metrics),
                        "parameters": [a.tolist() for a in parameters_to_ndarrays(res.parameters)],
                    }
                    for proxy, res in results
                ],
                "failures": len(failures),
            },
        )
        if results:
            mean = parameters_to_ndarrays(results[0][1].parameters)[0]
            self.completed = len(results)
            self.total = mean.astype(np.float64) * len(results)
        return None, {}


@dataclass
class SecureSum:
    """What the server-side code holds after one SecAgg+ round.

    Attributes:
        total: DP-DSGD-RP, DP-FedAvg and the group methods (one sum per group): the noised sum
            Σ_i u_i + Σ_i ξ_i; MS-PAFL: Σ_i w̃_{i,p} (noised by each client); None when the protocol halted
            (nothing decoded).
        asked: n, the nodes asked.
        completed: c, the nodes whose vectors are in the sum (their noise shares included).
        joined: K, the number of clients that checked in, for an algorithm whose sum reveals it (MS-PAFL:
            Eq. 13; public to the server in its analysis). None otherwise: nothing but the noised sum is
            decoded.
    """

    total: torch.Tensor | None
    asked: int
    completed: int
    joined: int | None = None
    part: int = 0


def decode(
    algorithm: Algorithm, aggregate: np.ndarray | None, asked: int, completed: int, part: int = 0
) -> SecureSum:
    """The :class:`SecureSum` of the workflow's unmasked aggregate of sum ``part`` (Σ_i v_i, or None if it
    halted)."""
    import torch

    protocol = algorithm.round_protocol()
    dtype = protocol.broadcast().dtype
    if aggregate is None:
        return SecureSum(None, asked, completed, part=part)
    joined = None
    if protocol.sum_reveals_count:
        joined = round(float(aggregate[-1]))
        aggregate = aggregate[:-1]
    total = torch.from_numpy(aggregate * _range(algorithm, asked, part))
    return SecureSum(total.to(dtype), asked, completed, joined, part)


def secure_sum(
    grid: Grid,
    context: Context,
    algorithm: Algorithm,
    node_ids: list[int],
    round_index: int,
    timeout: float,
    *,
    part: int = 0,
) -> SecureSum:
    """One SecAgg+ round over ``node_ids``, the asked nodes of sum ``part`` (module docstring)."""
    from flwr.common import ConfigRecord
    from flwr.server import LegacyContext
    from flwr.server.compat.grid_client_proxy import GridClientProxy
    from flwr.server.workflow import SecAggPlusWorkflow
    from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD, Key

    params = algorithm.round_protocol().broadcast().numpy()
    proxies: list[ClientProxy] = [GridClientProxy(n, grid, context.run_id) for n in node_ids]
    strategy = SumStrategy(proxies, params, round_index, part)
    legacy = LegacyContext(context, strategy=strategy)
    legacy.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({Key.CURRENT_ROUND: round_index + 1})
    legacy.state.array_records[MAIN_PARAMS_RECORD] = compat.parameters_to_arrayrecord(
        ndarrays_to_parameters([params]), keep_input=True
    )
    workflow = SecAggPlusWorkflow(
        num_shares=1.0,  # every node shares with every other (SecAgg among the asked nodes)
        reconstruction_threshold=RECONSTRUCTION_THRESHOLD,
        max_weight=1.0,
        clipping_range=1.0,
        timeout=timeout,
    )
    workflow(grid, legacy)
    return decode(algorithm, strategy.total, len(node_ids), strategy.completed, part)
