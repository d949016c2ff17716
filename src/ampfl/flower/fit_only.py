"""A Flower legacy ``Strategy`` base whose rounds only fit: no node is asked to evaluate.

Client-side evaluation releases statistics of the nodes' data (their loss and accuracy) without noise, so the
server-side strategies that carry a guarantee never ask for it; centralised evaluation is the subclass's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flwr.server.strategy import Strategy

if TYPE_CHECKING:
    from flwr.common import EvaluateIns, EvaluateRes, Parameters, Scalar
    from flwr.server.client_manager import ClientManager
    from flwr.server.client_proxy import ClientProxy


class FitOnlyStrategy(Strategy):
    """A strategy that asks no node to evaluate and, unless overridden, evaluates nothing centrally."""

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
