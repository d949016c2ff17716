"""Your ClientApp, unchanged but for its mods: SecAgg+ outside, ampfl's PrivacyMod inside.

PrivacyMod flips the node's own check-in coin, turns the weights ``fit`` returns into a clipped update, adds the
node's noise share and replies with weight 1 and no metrics, also when the coin says the node sits out.
"""

import numpy as np
from flwr.client import ClientApp, NumPyClient
from flwr.client.mod import secaggplus_mod

from ampfl.integrations.flower import PrivacyMod
from flower_app.mechanism import MECHANISM

DIM = 10


class LinearRegression(NumPyClient):
    def __init__(self, partition: int) -> None:
        rng = np.random.default_rng(partition)
        self.x = rng.normal(size=(50, DIM))
        self.y = self.x @ np.linspace(-1, 1, DIM) + 0.1 * rng.normal(size=50)

    def fit(self, parameters, config):  # type: ignore[no-untyped-def]
        w = parameters[0].copy()
        for _ in range(5):
            w -= 0.1 * self.x.T @ (self.x @ w - self.y) / len(self.y)
        return [w], len(self.y), {}


def client_fn(context):  # type: ignore[no-untyped-def]
    return LinearRegression(int(context.node_config["partition-id"])).to_client()


app = ClientApp(client_fn=client_fn, mods=[secaggplus_mod, PrivacyMod(MECHANISM)])
