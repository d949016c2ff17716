"""Your ServerApp: Flower's FedAvg wrapped in ampfl's PrivateStrategy, run by DefaultWorkflow with SecAgg+.

The wrapper asks every node, decodes only the noised sum, divides it by the public p·N, and commits each
round's privacy event to ``ledger.sqlite`` before the new model is released; ``summary.json`` says ε.
"""

from pathlib import Path

import numpy as np
from flwr.common import ndarrays_to_parameters
from flwr.server import LegacyContext, ServerApp, ServerConfig
from flwr.server.strategy import FedAvg
from flwr.server.workflow import DefaultWorkflow

from ampfl.integrations.flower import PrivateStrategy
from flower_app.client_app import DIM
from flower_app.mechanism import MECHANISM

app = ServerApp()


@app.main()
def main(grid, context):  # type: ignore[no-untyped-def]
    out = Path(str(context.run_config["out"]))
    out.mkdir(parents=True, exist_ok=True)
    inner = FedAvg(initial_parameters=ndarrays_to_parameters([np.zeros(DIM)]))
    strategy = PrivateStrategy(inner, MECHANISM, delta=1e-5, ledger=out / "ledger.sqlite", max_epsilon=10.0)
    rounds = int(context.run_config["num-rounds"])
    legacy = LegacyContext(context, config=ServerConfig(num_rounds=rounds), strategy=strategy)
    DefaultWorkflow(fit_workflow=MECHANISM.secaggplus_workflow(timeout=120))(grid, legacy)
    strategy.write_summary(out / "summary.json")
