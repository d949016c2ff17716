"""Federated algorithms on the simulator, by name (the ``[algorithm] name`` of a run config).

``ALGORITHMS`` is the :class:`~ampfl.registry.Registry` that maps each ``[algorithm] name`` ("fedavg",
"local_only", "dp_fedavg", "ms_pafl", "dp_dsgd_rp", ...) to its class. Entries are references, imported on
first use, so this package imports no algorithm: an algorithm's module imports ``ampfl.fl.algorithms.base``
and the config without forming an import cycle through the table. The classes are also attributes of this
package (``from ampfl.fl.algorithms import FedAvg``), imported on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ampfl.registry import Registry

if TYPE_CHECKING:
    from ampfl.fl.algorithms.base import Algorithm

#: Class name -> module, for the classes this package exports.
_CLASSES = {
    "Algorithm": "ampfl.fl.algorithms.base",
    "FedAvg": "ampfl.fl.algorithms.fedavg",
    "LocalOnly": "ampfl.fl.algorithms.local_only",
    "DPFedAvg": "ampfl.fl.algorithms.dp_fedavg",
    "MSPAFL": "ampfl.fl.algorithms.ms_pafl",
    "DPDSGDRandomParticipation": "ampfl.fl.algorithms.dp_dsgd_rp",
    "DPSGDPartition": "ampfl.fl.algorithms.dp_sgd_partition",
    "PFedAvg": "ampfl.fl.algorithms.p_fedavg",
    "GDPFed": "ampfl.fl.algorithms.gdpfed",
    "GDPFedMinus": "ampfl.fl.algorithms.gdpfed",
    "GDPFedPlus": "ampfl.fl.algorithms.gdpfed",
    "IDPFedAvg": "ampfl.fl.algorithms.idp_fedavg",
    "PFA": "ampfl.fl.algorithms.pfa",
}

ALGORITHMS: Registry[type[Algorithm]] = Registry(
    "algorithm.name",
    {
        "fedavg": "ampfl.fl.algorithms.fedavg:FedAvg",
        "local_only": "ampfl.fl.algorithms.local_only:LocalOnly",
        "dp_fedavg": "ampfl.fl.algorithms.dp_fedavg:DPFedAvg",
        "ms_pafl": "ampfl.fl.algorithms.ms_pafl:MSPAFL",
        "dp_dsgd_rp": "ampfl.fl.algorithms.dp_dsgd_rp:DPDSGDRandomParticipation",
        "dp_sgd_split": "ampfl.fl.algorithms.dp_sgd_partition:DPSGDPartition",
        "p_fedavg": "ampfl.fl.algorithms.p_fedavg:PFedAvg",
        "gdpfed": "ampfl.fl.algorithms.gdpfed:GDPFed",
        "gdpfed_minus": "ampfl.fl.algorithms.gdpfed:GDPFedMinus",
        "gdpfed_plus": "ampfl.fl.algorithms.gdpfed:GDPFedPlus",
        "idp_fedavg": "ampfl.fl.algorithms.idp_fedavg:IDPFedAvg",
        "pfa": "ampfl.fl.algorithms.pfa:PFA",
        # Split learning and personalised masks (paper 003), with their baselines.
        "splitfed": "ampfl.fl.split.algorithms:SplitFed",
        "standalone": "ampfl.fl.split.algorithms:Standalone",
        "pm_sfl": "ampfl.fl.split.algorithms:PMSFL",
        "splitfed_pm": "ampfl.fl.split.algorithms:SplitFedPM",
        "pm_sfl_hetero": "ampfl.fl.split.hetero:PMSFLHetero",
        "depthfl": "ampfl.fl.split.depthfl:DepthFL",
        "lg_fedavg": "ampfl.fl.split.lg_fedavg:LGFedAvg",
        "splitfed_dp": "ampfl.fl.split.splitfed_dp:SplitFedDP",
    },
)


def __getattr__(name: str) -> Any:
    if name in _CLASSES:
        import importlib

        return getattr(importlib.import_module(_CLASSES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ALGORITHMS", *_CLASSES]
