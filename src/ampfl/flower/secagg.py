"""SecAgg+ for ``ampfl deploy --secure-aggregation secaggplus``: the server sees the sum, not who took part.

Flower 1.41's compat layer: the ClientApp :data:`app` runs ``secaggplus_mod`` and replies in the legacy fit
layout (``FitRes``); the ServerApp runs one ``SecAggPlusWorkflow`` per round (:func:`secure_sum`) on a
``LegacyContext`` whose strategy (:class:`SumStrategy`) asks every eligible node and keeps the unmasked
aggregate. The ServerApp's round loop (ledger commit before release, checkpoint, metrics) is unchanged.

DP-DSGD-RP (004) and MS-PAFL (000). Every asked node runs the protocol in every round; a node whose check-in
coin B ~ Bern(p_i) says no contributes a vector of zeros. Every node reports the **same weight**
(``num_examples = 1``) and no metrics: in flwr 1.41 the weight and the metrics of each ``FitRes`` travel in
the clear (only the arrays are masked), so a weight 0 for a non-participant would reveal it. The server
learns the mean over the N nodes that completed the protocol and multiplies by N.

The contribution of client i is the flat vector (:func:`contribution`)

    v_i = B_i · [g_i / (C d), loss_i / (L d), |S_i| / d, 1]

(g_i: sum of its per-example clipped gradients, ‖·‖ ≤ |S_i| C, so every entry is in [-1, 1]; loss_i: its loss
sum on S_i, capped at L = :data:`LOSS_CAP` per example; |S_i|: its local sample size; d: the local dataset
size), quantised by SecAgg+ on ``clipping_range = 1`` with 2^22 levels (an error of at most C d / 2^22 per
gradient coordinate per client). The server decodes Σ_i g_i, the loss sum, Σ|S_i| and the number of clients
that checked in K (an aggregate that does not depend on any record).

MS-PAFL's contribution is v_i = B_i · [w̃_{i,p} / R, 1] with w̃_{i,p} its clipped, noised public part (client
side, :func:`ampfl.flower.client_app._ms_pafl`: w_{i,α} stays on the node) and R = C + 10σ
(:func:`public_range`); the server decodes Σ_i w̃_{i,p} and K for Eq. (13).
"""

from __future__ import annotations

import json
import os
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
from flwr.server.strategy import Strategy

from ampfl.flower.client_app import _checks_in, _ms_pafl, _partition, query
from ampfl.flower.common import CONFIG_KEY, algorithm_from_run_config, decode_raw

if TYPE_CHECKING:
    import torch
    from flwr.common import EvaluateIns, EvaluateRes, Scalar
    from flwr.server.client_manager import ClientManager
    from flwr.server.client_proxy import ClientProxy
    from flwr.serverapp import Grid

    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.fl.algorithms.dp_dsgd_rp import DPDSGDRandomParticipation
    from ampfl.fl.algorithms.ms_pafl import MSPAFL

#: ``ampfl deploy --secure-aggregation`` values.
SECURE_AGGREGATION = ("none", "secaggplus")
#: Algorithms deployable with SecAgg+.
SECAGG_ALGORITHMS = ("dp_dsgd_rp", "ms_pafl")
#: Per-example loss cap of the securely summed loss (a metric only).
LOSS_CAP = 100.0
#: Fewest clients SecAgg+ runs with (with two, the sum and one's own vector reveal the other's).
MIN_CLIENTS = 3
#: Most clients: N · 2^22 quantisation levels must stay below the 2^32 modulus.
MAX_CLIENTS = 1023
#: Environment variable naming a folder where, for tests, the ServerApp records what its strategy receives
#: and each client records its own contribution (never set in a real deployment).
SPY_ENV = "AMPFL_SECAGG_SPY"

app = ClientApp(mods=[secaggplus_mod])
app.query()(query)


def check_secure_aggregation(name: str, algorithm: str, num_clients: int) -> None:
    """ValueError (one line naming the setting) for a secure aggregation deploy cannot run."""
    if name not in SECURE_AGGREGATION:
        raise ValueError(f"--secure-aggregation must be one of {list(SECURE_AGGREGATION)}. Found {name!r}.")
    if name == "none":
        return
    if algorithm not in SECAGG_ALGORITHMS:
        raise ValueError(
            f"algorithm.name: --secure-aggregation {name} supports {', '.join(SECAGG_ALGORITHMS)}. "
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
def contribution(
    algorithm: DPDSGDRandomParticipation, grads: torch.Tensor | None, loss: float, examples: float
) -> np.ndarray:
    """v_i of the module docstring; ``grads`` None for a client that did not check in (zeros)."""
    size = algorithm.global_params.numel() + 3
    if grads is None:
        return np.zeros(size, dtype=np.float64)
    d, clip = float(algorithm.d), float(algorithm.p.clip)
    head = grads.double().numpy() / (clip * d)
    tail = [min(loss, LOSS_CAP * examples) / (LOSS_CAP * d), examples / d, 1.0]
    return np.concatenate([head, np.asarray(tail)])


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One client's SecAgg+ contribution (module docstring), in the legacy fit layout."""
    fitins = compat.recorddict_to_fitins(msg.content, keep_input=True)
    raw = decode_raw(str(context.run_config[CONFIG_KEY]))
    pid = _partition(context, int(raw["partition"]["num_clients"]))
    own = np.random.default_rng()  # the client's own randomness (OS entropy): the server cannot replay it
    joined = _checks_in(raw, pid, own)
    # Every node builds the algorithm (torch, data), whether it joined or not: less of a timing signal.
    _, algorithm = algorithm_from_run_config(context.run_config)
    if not joined:
        vector = np.zeros(vector_size(algorithm))
    elif algorithm.name == "ms_pafl":
        vector = _ms_pafl_contribution(msg, context, algorithm, pid, fitins, own)  # type: ignore[arg-type]
    else:
        vector = contribution_for(context, pid, fitins, own)
    _spy(f"client-{pid}.jsonl", {"round": int(fitins.config["round"]), "vector": vector.tolist()})
    fitres = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([vector]), num_examples=1, metrics={})
    return Message(compat.fitres_to_recorddict(fitres, keep_input=True), reply_to=msg)


def vector_size(algorithm: Algorithm) -> int:
    """Length of every node's contribution: d + 3 (DP-DSGD-RP) or d_p + 1 (MS-PAFL)."""
    if algorithm.name == "ms_pafl":
        return int(algorithm.public.numel()) + 1  # type: ignore[attr-defined]
    return int(algorithm.global_params.numel()) + 3  # type: ignore[attr-defined]


def public_range(algorithm: MSPAFL) -> float:
    """R of MS-PAFL's encoding: a noised public part's entries lie in [-(C + 10σ), C + 10σ] but with
    probability below 1e-22 per entry (the clipped part has norm ≤ C, the noise is N(0, σ²))."""
    return float(algorithm.p.clip + 10.0 * algorithm.noise_std)


def _ms_pafl_contribution(
    msg: Message, context: Context, algorithm: MSPAFL, pid: int, fitins: FitIns, own: np.random.Generator
) -> np.ndarray:
    """[w̃_{i,p} / R, 1]: client_app's MS-PAFL step (w_{i,α} stays on the node), then the encoding."""
    import torch

    torch.set_num_threads(1)
    public = torch.from_numpy(parameters_to_ndarrays(fitins.parameters)[0].copy())
    reply = _ms_pafl(msg, context, algorithm, pid, public, own)
    noisy = reply.content.array_records["arrays"]["update"].numpy().astype(np.float64)
    return np.concatenate([noisy / public_range(algorithm), [1.0]])


def contribution_for(context: Context, pid: int, fitins: FitIns, own: np.random.Generator) -> np.ndarray:
    """A checked-in DP-DSGD-RP client's v_i: 004's local Poisson sample and clipped gradient sum."""
    import torch

    torch.set_num_threads(1)
    _, algorithm = algorithm_from_run_config(context.run_config)
    start = torch.from_numpy(parameters_to_ndarrays(fitins.parameters)[0].copy())
    sums, losses, examples = algorithm.client_gradients(start, np.array([pid]), own)  # type: ignore[attr-defined]
    return contribution(algorithm, sums[0], float(losses[0]), float(examples[0]))  # type: ignore[arg-type]


# -- server ----------------------------------------------------------------------------------------------
class SumStrategy(Strategy):
    """Asks the given nodes; keeps the unmasked aggregate the SecAgg+ workflow hands to ``aggregate_fit``."""

    def __init__(self, proxies: list[ClientProxy], params: np.ndarray, round_index: int) -> None:
        self.proxies, self.params, self.round_index = proxies, params, round_index
        self.total: np.ndarray | None = None
        self.completed = 0

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        return None

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        fitins = FitIns(ndarrays_to_parameters([self.params]), {"round": self.round_index})
        return [(proxy, fitins) for proxy in self.proxies]

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        """Every result carries the same aggregate (the workflow's weighted mean); × N is the sum."""
        _spy(
            "server.jsonl",
            {
                "round": self.round_index,
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

    def configure_evaluate(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, EvaluateIns]]:
        return []

    def aggregate_evaluate(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, EvaluateRes]],
        failures: list[tuple[ClientProxy, EvaluateRes] | BaseException],
    ) -> tuple[float | None, dict[str, Scalar]]:
        return None, {}

    def evaluate(self, server_round: int, parameters: Parameters) -> tuple[float, dict[str, Scalar]] | None:
        return None


def secure_sum(
    grid: Grid,
    context: Context,
    algorithm: DPDSGDRandomParticipation | MSPAFL,
    node_ids: list[int],
    round_index: int,
    timeout: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """One SecAgg+ round over ``node_ids``: Σ_i g_i (zeros if the protocol halted) and the metrics."""
    import torch
    from flwr.common import ConfigRecord
    from flwr.server import LegacyContext
    from flwr.server.compat.grid_client_proxy import GridClientProxy
    from flwr.server.workflow import SecAggPlusWorkflow
    from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD, Key

    ms_pafl = algorithm.name == "ms_pafl"
    params = (algorithm.public if ms_pafl else algorithm.global_params).numpy()  # type: ignore[union-attr]
    proxies: list[ClientProxy] = [GridClientProxy(n, grid, context.run_id) for n in node_ids]
    strategy = SumStrategy(proxies, params, round_index)
    legacy = LegacyContext(context, strategy=strategy)
    legacy.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({Key.CURRENT_ROUND: round_index + 1})
    legacy.state.array_records[MAIN_PARAMS_RECORD] = compat.parameters_to_arrayrecord(
        ndarrays_to_parameters([params]), keep_input=True
    )
    workflow = SecAggPlusWorkflow(
        num_shares=1.0,  # every node shares with every other (SecAgg among the asked nodes)
        reconstruction_threshold=2.0 / 3.0,
        max_weight=1.0,
        clipping_range=1.0,
        timeout=timeout,
    )
    workflow(grid, legacy)
    metrics = {"asked": float(len(node_ids)), "completed": float(strategy.completed)}
    if strategy.total is None:  # the protocol halted (too many dropouts): nothing is released but noise
        return torch.zeros(params.shape, dtype=algorithm.global_params.dtype), metrics
    total = strategy.total
    if ms_pafl:
        metrics["participants"] = float(round(total[-1]))
        public = torch.from_numpy(total[:-1] * public_range(algorithm))  # type: ignore[arg-type]
        return public.to(algorithm.global_params.dtype), metrics
    d, clip, m = float(algorithm.d), float(algorithm.p.clip), algorithm.global_params.numel()  # type: ignore[union-attr]
    metrics["participants"] = float(round(total[m + 2]))
    metrics["examples"] = float(round(total[m + 1] * d))
    if metrics["examples"] > 0:
        metrics["train_loss"] = float(total[m] * LOSS_CAP * d) / metrics["examples"]
    grads = torch.from_numpy(total[:m] * clip * d).to(algorithm.global_params.dtype)
    return grads, metrics
