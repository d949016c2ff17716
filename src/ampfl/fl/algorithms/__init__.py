"""Federated algorithms on the simulator, by name (the ``[algorithm] name`` of a run config).

``ALGORITHMS`` maps each ``[algorithm] name`` ("fedavg", "local_only", "dp_fedavg", "ms_pafl",
"dp_dsgd_rp", ...) to its class.
"""

from __future__ import annotations

from ampfl.fl.algorithms.base import Algorithm
from ampfl.fl.algorithms.dp_dsgd_rp import DPDSGDRandomParticipation
from ampfl.fl.algorithms.dp_fedavg import DPFedAvg
from ampfl.fl.algorithms.fedavg import FedAvg
from ampfl.fl.algorithms.local_only import LocalOnly
from ampfl.fl.algorithms.ms_pafl import MSPAFL
from ampfl.fl.split.algorithms import ALGORITHMS as SPLIT_ALGORITHMS

ALGORITHMS: dict[str, type[Algorithm]] = {
    FedAvg.name: FedAvg,
    LocalOnly.name: LocalOnly,
    DPFedAvg.name: DPFedAvg,
    MSPAFL.name: MSPAFL,
    DPDSGDRandomParticipation.name: DPDSGDRandomParticipation,
    **SPLIT_ALGORITHMS,
}

__all__ = [
    "ALGORITHMS",
    "MSPAFL",
    "Algorithm",
    "DPDSGDRandomParticipation",
    "DPFedAvg",
    "FedAvg",
    "LocalOnly",
]
