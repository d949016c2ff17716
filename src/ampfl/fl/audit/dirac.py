"""White-box gradient (Dirac) canaries, scored from every noised sum the server forms.

The observer is the server under a trusted-server model, or anyone who sees every released iterate: the
released models w_0 (public), w_1, …, w_T determine every noised sum Σ_i g_i + ξ_t (the updates are public
functions of them: learning rate, momentum, the public normaliser), so reading the noised sums reads no more
than the iterates.

Canaries (Nasr et al. 2023, "Tight auditing of differentially private machine learning", gradient canaries):
the task gets ⌈K/out⌉ extra input features that no record has (zero columns), so the first layer's weights on
them are coordinates the data leave at zero (their gradient is (∂ℓ/∂h) ⊗ x = 0 for every record; checked at
every step). Canary k owns one of them, e_k, and an included canary contributes exactly C·e_k, a clipped
contribution of the largest norm the mechanism allows, to each sum it takes part in: one more client
(DP-FedAvg: a client whose clipped update is C·e_k, sampled as every client is, Poisson with rate q) or one
more record (DP-DSGD at full participation: a record whose clipped gradient is C·e_k at every step). DP bounds
the effect of any contribution of norm ≤ C, so these are valid neighbours whatever the loss.

Score of canary k: Σ_t ⟨Σ_i g_i + ξ_t, e_k⟩ / (σ √T), σ = z·C the claimed noise std (public) and T the number
of sums (for the Gaussian mechanism the sum of the per-step projections on the canary direction is the
likelihood-ratio test's statistic: N(0, 1) when excluded, N(√T/z · (fraction of steps present), 1) when
included at the claimed noise). The canaries' coordinates are disjoint, the noise is independent across
coordinates and the data leave them at zero, so given the coins the K scores of a run are independent trials:
the audit pools the (run, canary) trials in the likelihood-ratio test with Clopper–Pearson bounds
(:func:`ampfl.accounting.audit.likelihood_ratio.likelihood_ratio_audit`) at the fixed thresholds :data:`CUTS`
(in units of σ√T, chosen before any score is seen; Bonferroni over them). The presence coins of a sampled
canary client are drawn from operating-system entropy, as its inclusion coin.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.fl.task import Task

__all__ = ["CUTS", "DiracPlan", "dirac_observer", "dirac_scores", "dirac_task", "presence_rate"]

#: Thresholds of the membership test "score ≥ t", in units of the claimed σ√T (fixed in advance).
CUTS = np.round(np.arange(0.25, 8.01, 0.25), 2)


@dataclasses.dataclass(frozen=True)
class DiracPlan:
    """The canaries' coins ``included[k]``, the number of data features ``features`` (the zero columns follow
    them up to ``width``), the norm C of a canary's contribution and the probability ``rate`` that it takes
    part in a given sum (1: every sum)."""

    included: np.ndarray
    features: int
    width: int
    norm: float
    rate: float


def presence_rate(probe: Algorithm) -> float:
    """The probability that a canary takes part in one noised sum, for the algorithms audited with Dirac
    canaries; one-line errors for the others."""
    from ampfl.fl.algorithms.dp_dsgd_rp import DPDSGDRandomParticipation
    from ampfl.fl.algorithms.dp_fedavg import DPFedAvg

    params: Any = getattr(probe, "p", None)
    if isinstance(probe, DPFedAvg):
        if params.client_sampling != "poisson":
            raise ValueError(
                "canary: 'dirac' audits dp_fedavg with client_sampling = 'poisson' (add/remove one client). "
                f"Found {params.client_sampling!r}."
            )
        return float(params.sampling_rate)
    if isinstance(probe, DPDSGDRandomParticipation):
        if params.participation != 1.0 or params.sampling_rate != 1.0:
            raise ValueError(
                "canary: 'dirac' audits dp_dsgd_rp at full participation (participation = sampling_rate = "
                f"1). Found participation {params.participation}, sampling_rate {params.sampling_rate}."
            )
        return 1.0
    raise ValueError(f"canary: 'dirac' applies to dp_fedavg and dp_dsgd_rp. Found {probe.name!r}.")


def dirac_task(probe: Algorithm, task: Task, canaries: int, *, seed: int) -> tuple[Task, int, int]:
    """``task`` with the zero columns of ``canaries`` Dirac canaries: ⌈K/out⌉ of them, ``out`` the width of
    ``probe``'s first layer (built on ``task``); returns the padded task, the number of data features d and
    the padded width."""
    from ampfl.fl.audit.canaries import first_layer, insert_canaries

    if task.dataset.x_train.ndim != 2:
        raise ValueError(
            "canary: 'dirac' needs flat inputs (model logreg or mlp on tabular data). "
            f"Found input shape {task.dataset.input_shape}."
        )
    d = int(task.dataset.x_train.shape[1])
    _, (out, _) = first_layer(probe, d)
    columns = math.ceil(canaries / out)
    padded, _ = insert_canaries(
        task, included=np.zeros(columns, dtype=bool), unit="record", scale=1.0, seed=seed, kind="feature"
    )
    return padded, d, d + columns


def coordinates(algorithm: Algorithm, d: int, width: int, canaries: int) -> np.ndarray:
    """Flat indices of the canaries' weights: canary k at row k mod out, column d + k div out of the first
    layer (columns d, d + 1, … are the zero features)."""
    from ampfl.fl.audit.canaries import first_layer

    offset, (out, _) = first_layer(algorithm, width)
    k = np.arange(canaries)
    rows, cols = k % out, d + k // out
    if int(cols.max()) >= width:
        raise ValueError(f"{canaries} dirac canaries need more zero columns than the {width - d} added.")
    return np.asarray(offset + rows * width + cols, dtype=np.int64)


def dirac_observer(cls: type[Algorithm], plan: DiracPlan) -> type[Algorithm]:
    """``cls`` with the included canaries' contributions C·e_k added to every sum they take part in, before
    the noise (``server_update``), and the noised sums' canary coordinates recorded (``apply_noised_sum``)."""
    import torch

    included = np.asarray(plan.included, dtype=bool)
    rng = np.random.default_rng(secrets.randbits(128))

    class Observed(cls):  # type: ignore[valid-type,misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            flat = coordinates(self, plan.features, plan.width, included.size)
            self.dirac_index = torch.from_numpy(flat)
            self.dirac_sum = np.zeros(included.size)
            self.dirac_steps = 0

        def server_update(self, total: torch.Tensor, *rest: Any) -> Any:
            index = self.dirac_index
            if bool(torch.any(total[index] != 0)):  # the data must leave the canaries' coordinates at zero
                raise RuntimeError("dirac canaries: the data's clipped sum is not zero on their coordinates")
            present = included & (rng.random(included.size) < plan.rate)
            total = total.clone()
            total[index[torch.from_numpy(present)]] += plan.norm
            return super().server_update(total, *rest)

        def apply_noised_sum(self, noised: torch.Tensor) -> Any:
            self.dirac_sum += noised[self.dirac_index].double().numpy()
            self.dirac_steps += 1
            return super().apply_noised_sum(noised)

    Observed.__name__ = cls.__name__
    return Observed


def dirac_scores(algorithm: Algorithm, clip: float) -> np.ndarray:
    """Σ_t (noised sum)_k / (σ √T), σ = z·C the claimed noise std (C when z = 0: no noise claimed)."""
    steps = int(algorithm.dirac_steps)  # type: ignore[attr-defined]
    if steps == 0:
        raise RuntimeError("dirac canaries: the run formed no noised sum")
    z = float(getattr(algorithm, "noise_multiplier", 0.0) or 0.0)
    sigma = z * clip if z > 0.0 and math.isfinite(z) else clip
    return np.asarray(algorithm.dirac_sum, dtype=np.float64) / (sigma * math.sqrt(steps))  # type: ignore[attr-defined]
