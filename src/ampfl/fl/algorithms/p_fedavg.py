"""P-FedAvg: the non-private reference of paper 001 (Sec. VI-A2, "Pure FedAvg"), on the group machinery.

The same round as :mod:`ampfl.fl.algorithms.gdpfed` without clipping or noise: every client is sampled
independently at rate ``participation`` (or per group at q_g = q when budgets are given, which changes
nothing: budgets are ignored), runs Q local SGD steps, and the server applies
w^{t+1} = w^t + η_s Σ_g λ_g U_g / (q_g N_g) = w^t + η_s Σ_i Δ_i / (qN), the group methods' reweighted
step, so that P-FedAvg differs from GDPFed only by the privacy mechanism (plain ``fedavg`` averages models
over the realised cohort instead). No privacy: no events, ``privacy_unit`` None, ε = ∞.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel

from ampfl.fl.algorithms.gdpfed_groups import GroupFederatedAlgorithm, GroupParams


class PFedAvgParams(GroupParams):
    """Hyper-parameters of P-FedAvg (:class:`GroupParams`; budgets optional and unused)."""


class PFedAvg(GroupFederatedAlgorithm):
    """Non-private FedAvg with Poisson sampling at q and the group methods' server step."""

    name: ClassVar[str] = "p_fedavg"
    Params: ClassVar[type[BaseModel]] = PFedAvgParams
    private: ClassVar[bool] = False
    #: No noise, so no shares: ``ampfl deploy`` runs it with a trusted server only (no SecAgg+).
    noise_shares: ClassVar[bool] = False
