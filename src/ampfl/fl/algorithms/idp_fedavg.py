"""IDP-FedAvg: individualized privacy by per-group sampling rates and one noise (paper 001 baseline [6]).

What is implemented (from the definition of the "Sample" method of individualized DP-SGD, Boenisch et al.,
NeurIPS 2023, lifted to client level as paper 001 uses it): every group shares one noise multiplier z and
one secure-aggregation sum over the whole cohort; group g is sampled at its own rate q_g, the largest rate
at which z meets ε_g after T rounds; z is the smallest multiplier for which the expected cohort
Σ_g q_g N_g reaches qN (the same participation as every other method). Groups with looser budgets are
therefore sampled more often instead of receiving less noise. The server step is the group methods' one,
w += η_s (Σ_i Δ̃_i + ξ) / Σ_g q_g N_g, ξ ~ N(0, z² C² I) (λ_g = q_g N_g / Σ q N, the paper's rule).

Privacy: each group's clients see a Poisson-subsampled Gaussian at rate q_g with multiplier z (sensitivity
C of the one sum), reported as ``GroupRoundEvent(q_g, z, group=g)`` and accounted per group by the run.
Search: z(q) per budget from the planner's interpolated calibration
(:func:`ampfl.accounting.groups.noise_curves.pchip_noise`), then every q_g is checked exactly with the
RDP accountant and lowered by 2% steps until ε_g holds; a realised Σ q_g N_g slightly below qN is possible.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel

from ampfl.fl.algorithms.gdpfed import GDPFed

_SEARCHES: dict[tuple[Any, ...], tuple[np.ndarray, float]] = {}


def idp_rates(
    budgets: np.ndarray, sizes: np.ndarray, *, participation: float, rounds: int, delta: float
) -> tuple[np.ndarray, float]:
    """(q_g per group, common z) of IDP-FedAvg's "Sample" rule (module docstring)."""
    from ampfl.accounting._numerics import find_root
    from ampfl.accounting.groups import group_epsilon
    from ampfl.accounting.groups.noise_curves import pchip_noise

    key = (tuple(budgets.tolist()), tuple(sizes.tolist()), participation, rounds, delta)
    if key in _SEARCHES:
        return _SEARCHES[key]
    q_grid = np.unique(np.concatenate([np.geomspace(participation / 50, 1.0, 14), [participation]]))
    fine = np.geomspace(participation / 50, 1.0, 4000)
    curves = np.array([pchip_noise(float(e), q_grid, rounds, delta)(fine) for e in budgets])  # [G, fine]
    target = participation * float(sizes.sum())

    def rates(z: float) -> np.ndarray:
        ok = curves <= z  # z_g(q) increases with q: the largest q whose noise is at most z
        return np.where(ok.any(1), fine[np.where(ok, np.arange(fine.size), -1).max(1)], 0.0)

    def shortfall(log_z: float) -> float:  # Σ q_g(z) N_g − qN, nondecreasing in z
        return float(rates(math.exp(log_z)) @ sizes) - target

    lo, hi = math.log(float(curves.min())), math.log(float(curves.max()))
    if shortfall(lo) >= 0.0:
        z = math.exp(lo)
    else:  # at the largest curve value every group's rate is 1, so Σ N_g ≥ qN: the bracket holds (checked)
        z = math.exp(find_root(shortfall, lo, hi, rtol=1e-12, end="upper", name="IDP-FedAvg's common z"))
    q = rates(z)
    for g, e in enumerate(budgets):  # exact check (the interpolation is within about 1%)
        while q[g] > 0 and group_epsilon(z, sampling_rate=float(q[g]), rounds=rounds, target_delta=delta) > e:
            q[g] *= 0.98
    if np.any(q <= 0):
        raise ValueError("participation: IDP-FedAvg found no sampling rate for some group at this setting.")
    _SEARCHES[key] = (q, z)
    return q, z


class IDPFedAvg(GDPFed):
    """IDP-FedAvg ("Sample"): per-group sampling rates, one noise multiplier and one secure sum."""

    name: ClassVar[str] = "idp_fedavg"
    variant: ClassVar[str] = "idp"

    @classmethod
    def declared_sum_sizes(cls, params: BaseModel) -> list[int]:
        """One secure sum over every group's clients."""
        sizes = super().declared_sum_sizes(params)
        return [sum(sizes)] if sizes else []

    def _plan(self) -> None:
        q, z = idp_rates(
            self.budgets,
            self.public_sizes,
            participation=self.p.participation,
            rounds=self.p.num_rounds,
            delta=float(self.privacy.delta),
        )
        self.rates = np.array(q, dtype=float)
        self.noise_multipliers = np.full(self.budgets.size, z)
        self.kappa = np.ones(self.budgets.size)
        self.sum_index = np.zeros(self.budgets.size, dtype=np.int64)  # one secure sum for the whole cohort
