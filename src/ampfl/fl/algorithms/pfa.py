"""PFA: projected federated averaging (Liu et al., VLDB 2022; a paper 001 baseline), adapted by ampfl.

PFA splits clients into *public* ones (the loosest privacy requirement) and *private* ones, and projects the
private clients' noisy updates onto the top-k subspace of the public clients' updates, which removes the
private noise outside that subspace. Paper 001 compares with PFA under its own client-level setting with
secure aggregation, where the server sees only group sums, so ampfl adapts it (its own design, documented):

* groups, sampling and noise are GDPFed's (q_g = q, z_g for each group's budget, one secure sum per group);
* the public group is the one with the largest budget; the server keeps its last ``pfa_rank`` noisy sums
  (DP releases, so post-processing) and forms an orthonormal basis B of their span (QR);
* every other group's sum U_g is replaced by B Bᵀ U_g before the group methods' λ_g-reweighted step.

Privacy is GDPFed's (projection is post-processing): one ``GroupRoundEvent(q, z_g)`` per group and round.
Until the history holds one public sum, private sums are used as they are.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch
from pydantic import Field

from ampfl.fl.algorithms.gdpfed import GDPFed, GDPFedParams
from ampfl.fl.privacy.secure_sum import GroupSums


class PFAParams(GDPFedParams):
    """GDPFed's parameters plus the projection rank k."""

    pfa_rank: int = Field(5, ge=1, description="k, the number of recent public sums spanning the subspace")


class PFA(GDPFed):
    """PFA under secure aggregation: private group sums projected onto the public sums' recent span (GDPFed's
    uniform variant otherwise: q_g = q, κ_g = 1)."""

    name: ClassVar[str] = "pfa"
    Params: ClassVar[type[Any]] = PFAParams

    def set_up(self) -> None:
        super().set_up()
        self.public = int(np.argmax(self.budgets))
        self.history: list[torch.Tensor] = []

    def server_update(self, sums: GroupSums) -> list[torch.Tensor | None]:
        if not isinstance(sums, GroupSums):
            raise TypeError(f"server_update takes GroupSums only. Found {type(sums).__name__}.")
        if sums.present[self.public]:
            self.history = [*self.history, sums.sums[self.public].clone()][-int(self.p.pfa_rank) :]  # type: ignore[attr-defined]
        if self.history:
            basis, _ = torch.linalg.qr(torch.stack(self.history, dim=1))  # [d, k] orthonormal
            rows = sums.sums.clone()
            for g in range(sums.num_groups):
                if g != self.public and sums.present[g]:
                    rows[g] = basis @ (basis.T @ rows[g])
            sums = GroupSums.project(sums, rows)
        return super().server_update(sums)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["history"] = [h.clone() for h in self.history]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.history = [h.clone() for h in state["history"]]
