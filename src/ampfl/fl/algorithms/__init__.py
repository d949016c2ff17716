"""Federated algorithms on the simulator, by name (the ``[algorithm] name`` of a run config).

``ALGORITHMS`` maps each ``[algorithm] name`` ("fedavg", "local_only", "dp_fedavg", "ms_pafl",
"dp_dsgd_rp", ...) to its class.
"""

from __future__ import annotations

from ampfl.fl.algorithms.base import Algorithm
from ampfl.fl.algorithms.dp_dsgd_rp import DPDSGDRandomParticipation
from ampfl.fl.algorithms.dp_fedavg import DPFedAvg
from ampfl.fl.algorithms.dp_sgd_partition import DPSGDPartition
from ampfl.fl.algorithms.fedavg import FedAvg
from ampfl.fl.algorithms.gdpfed import GDPFed, GDPFedMinus, GDPFedPlus
from ampfl.fl.algorithms.idp_fedavg import IDPFedAvg
from ampfl.fl.algorithms.local_only import LocalOnly
from ampfl.fl.algorithms.ms_pafl import MSPAFL
from ampfl.fl.algorithms.p_fedavg import PFedAvg
from ampfl.fl.algorithms.pfa import PFA
from ampfl.fl.split.algorithms import ALGORITHMS as SPLIT_ALGORITHMS

ALGORITHMS: dict[str, type[Algorithm]] = {
    FedAvg.name: FedAvg,
    LocalOnly.name: LocalOnly,
    DPFedAvg.name: DPFedAvg,
    MSPAFL.name: MSPAFL,
    DPDSGDRandomParticipation.name: DPDSGDRandomParticipation,
    DPSGDPartition.name: DPSGDPartition,
    PFedAvg.name: PFedAvg,
    GDPFed.name: GDPFed,
    GDPFedMinus.name: GDPFedMinus,
    GDPFedPlus.name: GDPFedPlus,
    IDPFedAvg.name: IDPFedAvg,
    PFA.name: PFA,
    **SPLIT_ALGORITHMS,
}

__all__ = [
    "ALGORITHMS",
    "MSPAFL",
    "PFA",
    "Algorithm",
    "DPDSGDRandomParticipation",
    "DPFedAvg",
    "DPSGDPartition",
    "FedAvg",
    "GDPFed",
    "GDPFedMinus",
    "GDPFedPlus",
    "IDPFedAvg",
    "LocalOnly",
    "PFedAvg",
]
