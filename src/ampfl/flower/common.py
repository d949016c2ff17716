"""What the Flower apps share: the run configuration in the app's run config, the algorithm they wrap.

``ampfl deploy`` writes a Flower app folder whose ``pyproject.toml`` carries, in ``[tool.flwr.app.config]``,
the resolved run configuration (``ampfl-config``: the ``config.json`` of the run folder, base64-encoded JSON,
so that every node receives the very config ``ampfl run`` would use) and the run folder (``out-dir``, where
the ServerApp writes metrics, ledger and summary). Both apps rebuild the simulator's algorithm from it: the
server (:func:`algorithm_from_config`) for its aggregation, noise and privacy events, each client
(:mod:`ampfl.flower.node_cache`) for its local training on its own partition (``partition-id`` of the node
config), so the math is the simulator's.

Supported algorithms: :func:`deployable` (each algorithm's class says whether it deploys).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.fl.config import RunConfig

#: Keys of the app's run config.
CONFIG_KEY = "ampfl-config"
OUT_KEY = "out-dir"
RESUME_KEY = "resume"
#: ``none`` or ``secaggplus`` (:mod:`ampfl.flower.secagg`).
SECAGG_KEY = "secure-aggregation"
#: The run folder lock's token (:mod:`ampfl.fl.run.lock`): the ServerApp writes only while it owns it.
TOKEN_KEY = "run-token"
#: Message types beyond Flower's ``train``: the server asks each node which partition it holds.
QUERY = "query"


def encode_config(resolved: Mapping[str, Any]) -> str:
    """The resolved config (``config_to_dict``) as one base64 string (safe in TOML and on a command line)."""
    return base64.b64encode(json.dumps(resolved, sort_keys=True).encode("utf-8")).decode("ascii")


def decode_raw(text: str) -> dict[str, Any]:
    """The resolved config dict of :func:`encode_config`'s string (no validation: no torch import)."""
    data: dict[str, Any] = json.loads(base64.b64decode(text.encode("ascii")).decode("utf-8"))
    return data


def decode_config(text: str) -> RunConfig:
    """The :class:`~ampfl.fl.config.RunConfig` of :func:`encode_config`'s string."""
    from ampfl.fl.config import parse_config

    return parse_config(decode_raw(text))


def deployable() -> tuple[str, ...]:
    """The ``[algorithm] name`` values ``ampfl deploy`` runs: the algorithms whose class says it deploys
    (:attr:`~ampfl.fl.algorithms.base.Algorithm.deploys`; DP-FedAvg: central noise, or the clients' noise
    shares under ``--secure-aggregation secaggplus``)."""
    from ampfl.fl.algorithms import ALGORITHMS

    return tuple(name for name, cls in ALGORITHMS.items() if cls.deploys)


def check_deployable(config: RunConfig, secure_aggregation: str = "none") -> None:
    """ValueError (one line naming the key) for a configuration ``ampfl deploy`` cannot run: the algorithm's
    own :meth:`~ampfl.fl.algorithms.base.Algorithm.deploy_problem`, which for an algorithm that does not
    deploy says why (e.g. split learning's round trip per local step), else the list of those that do."""
    from ampfl.fl.algorithms import ALGORITHMS

    name = config.algorithm.name
    cls = ALGORITHMS.get(name)
    secure = secure_aggregation != "none"
    if cls is None or not cls.deploys:
        # An algorithm that does not deploy may say why in one line (local_only, split learning).
        reason = (
            None if cls is None else cls.deploy_problem(config.algorithm.params, secure_aggregation=secure)
        )
        runs = ", ".join(deployable())
        raise ValueError(
            reason
            or f"algorithm.name: ampfl deploy runs {runs} (the simulator runs the others). Found {name!r}."
        )
    problem = cls.deploy_problem(config.algorithm.params, secure_aggregation=secure)
    if problem is not None:
        raise ValueError(problem)


def algorithm_from_config(config: RunConfig, *, privacy_key: int | None = None) -> Algorithm:
    """The simulator's algorithm for ``config`` (same data, partition, model initialisation and seed);
    ``privacy_key``: a resumed run's key (None: a fresh one, or the seed under ``[privacy] reproducible``)."""
    from ampfl.fl.run.experiment import build_algorithm, build_task

    return build_algorithm(config, build_task(config), privacy_key=privacy_key)
