"""The ``flower`` path of ``bench/compare.py``: the same FedAvg workload in Flower's simulation (ray backend).

What a Flower user writes for this workload with Flower's Message API (flwr 1.41): a ``ClientApp`` whose
``train`` loads the global arrays into an ``nn.Module``, runs Q steps of ``torch.optim.SGD`` on its partition
(``context.node_config["partition-id"]``) and returns the arrays with ``num-examples``; a ``ServerApp`` that
runs Flower's ``FedAvg`` strategy (every node every round, no federated evaluation) and evaluates the final
arrays centrally. Non-DP only: the comparison is FedAvg. Needs ``flwr[simulation]`` (ray).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import torch

STEPS, BATCH, LR = 5, 10, 0.05


def flower_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("flwr") is not None and importlib.util.find_spec("ray") is not None


def flower_run(
    make_module: Callable[[], torch.nn.Module],
    x: torch.Tensor,
    y: torch.Tensor,
    indices: list[torch.Tensor],
    rounds: int,
    evaluate: Callable[[torch.nn.Module], float],
    cohort: int | None = None,
) -> Callable[[], None]:
    """A callable that runs ``rounds`` rounds of FedAvg over ``len(indices)`` simulated SuperNodes, each
    round on ``cohort`` of them drawn by Flower's strategy (default: every node)."""
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation

    k = len(indices)
    cohort = k if cohort is None else cohort
    client_app = ClientApp()

    @client_app.train()
    def train(msg: Message, context: Context) -> Message:
        torch.set_num_threads(1)
        module = make_module()
        module.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        ix = indices[int(context.node_config["partition-id"])]
        opt = torch.optim.SGD(module.parameters(), lr=LR)
        for _ in range(STEPS):
            batch = ix[torch.randint(len(ix), (BATCH,))]
            opt.zero_grad()
            module.per_sample_loss(module(x[batch]), y[batch]).mean().backward()  # type: ignore[operator]
            opt.step()
        content = RecordDict(
            {
                "arrays": ArrayRecord(module.state_dict()),
                "metrics": MetricRecord({"num-examples": len(ix)}),
            }
        )
        return Message(content=content, reply_to=msg)

    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = FedAvg(
            fraction_train=cohort / k, fraction_evaluate=0.0, min_train_nodes=cohort, min_available_nodes=k
        )
        result = strategy.start(
            grid=grid, initial_arrays=ArrayRecord(make_module().state_dict()), num_rounds=rounds
        )
        module = make_module()
        module.load_state_dict(result.arrays.to_torch_state_dict())
        evaluate(module)

    def run() -> None:
        logging.getLogger("flwr").setLevel(logging.ERROR)
        run_simulation(
            server_app=server_app,
            client_app=client_app,
            num_supernodes=k,
            backend_config={"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 2}},
        )

    return run
