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
canary (its own Bern(q) per sum, as every client's or record's) are drawn from operating-system entropy, as
its inclusion coin, independently of every other canary's and of the data's coins.

Two views of the same run (``view``):

- ``"hidden"`` (participation as accounted by amplification): the observer does not know in which sums a
  canary took part; the score is the one above, over every sum.
- ``"revealed"`` (DP-FedAvg with Poisson sampling, participation public): the observer also learns, every
  round, whether each canary client was sampled, its presence set S_k, drawn for every canary whether or not
  its secret coin included it (a public coin that exists in both neighbouring datasets, as the accounted pair
  has it). Given S_k the likelihood-ratio test reads only those sums: log LR = Σ_{t∈S_k} (C y_t − C²/2)/σ²,
  and the score is its increasing transform (Σ_{t∈S_k} y_t + (T − |S_k|)·C/2) / (σ√T), which equals the
  hidden score when every sum is in S_k; the cuts stay the same fixed thresholds. The run is then accounted
  with participation revealed (:func:`revealed_accounting`: each round the Gaussian behind a public
  Bern(q) coin, whose PLD composition Σ_m Bin(m; T, q) δ_m(ε) is exact), at the noise the hidden run was
  calibrated to.

Local (record) sampling: DP-DSGD-RP at participation p = 1 with any rate q, each canary record in each sum
with its own Poisson coin (a record's inclusion is its own Bernoulli at p = 1, so the canaries' trials stay
independent); p < 1 is refused, since the canary records at one client would share its check-in. At p = 1
the accounted pair does not depend on d (the client's other records), so the canaries beyond d at one client
do not leave the accounted relation (checked in the tests).
"""

from __future__ import annotations

import dataclasses
import math
import secrets
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.fl.config import RunConfig
    from ampfl.fl.task import Task

__all__ = [
    "CUTS",
    "VIEWS",
    "DiracPlan",
    "dirac_observer",
    "dirac_run",
    "dirac_scores",
    "dirac_task",
    "hidden_view_of",
    "presence_rate",
    "revealed_accounting",
    "revealed_setup",
]

#: Thresholds of the membership test "score ≥ t", in units of the claimed σ√T (fixed in advance).
CUTS = np.round(np.arange(0.25, 8.01, 0.25), 2)
#: What the observer knows of a canary's presence: nothing (``hidden``) or every round's coin (``revealed``).
VIEWS = ("hidden", "revealed")


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
        if params.participation != 1.0:
            raise ValueError(
                "canary: 'dirac' audits dp_dsgd_rp at full participation (participation = 1, any "
                "sampling_rate: the canary records at one client would share its check-in). "
                f"Found participation {params.participation}."
            )
        return float(params.sampling_rate)
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
            self.dirac_revealed_sum = np.zeros(included.size)  # Σ over the sums in S_k
            self.dirac_presences = np.zeros(included.size, dtype=np.int64)  # |S_k|
            self.dirac_coin = np.ones(included.size, dtype=bool)
            self.dirac_steps = 0

        def server_update(self, total: torch.Tensor, *rest: Any) -> Any:
            index = self.dirac_index
            if bool(torch.any(total[index] != 0)):  # the data must leave the canaries' coordinates at zero
                raise RuntimeError("dirac canaries: the data's clipped sum is not zero on their coordinates")
            coin = rng.random(included.size) < plan.rate  # public under the revealed view
            self.dirac_coin = coin
            present = included & coin
            total = total.clone()
            total[index[torch.from_numpy(present)]] += plan.norm
            return super().server_update(total, *rest)

        def apply_noised_sum(self, noised: torch.Tensor) -> Any:
            read = noised[self.dirac_index].double().numpy()
            self.dirac_sum += read
            self.dirac_revealed_sum += np.where(self.dirac_coin, read, 0.0)
            self.dirac_presences += self.dirac_coin
            self.dirac_steps += 1
            return super().apply_noised_sum(noised)

    Observed.__name__ = cls.__name__
    return Observed


def dirac_scores(algorithm: Algorithm, clip: float, view: str = "hidden") -> np.ndarray:
    """``"hidden"``: Σ_t (noised sum)_k / (σ √T), σ = z·C the claimed noise std (C when z = 0: no noise
    claimed); ``"revealed"``: (Σ_{t∈S_k} (noised sum)_k + (T − |S_k|)·C/2) / (σ √T) (module docstring)."""
    steps = int(algorithm.dirac_steps)  # type: ignore[attr-defined]
    if steps == 0:
        raise RuntimeError("dirac canaries: the run formed no noised sum")
    z = float(getattr(algorithm, "noise_multiplier", 0.0) or 0.0)
    sigma = z * clip if z > 0.0 and math.isfinite(z) else clip
    if view == "revealed":
        absent = steps - np.asarray(algorithm.dirac_presences, dtype=np.float64)  # type: ignore[attr-defined]
        total = np.asarray(algorithm.dirac_revealed_sum, dtype=np.float64) + absent * clip / 2.0  # type: ignore[attr-defined]
    else:
        total = np.asarray(algorithm.dirac_sum, dtype=np.float64)  # type: ignore[attr-defined]
    return total / (sigma * math.sqrt(steps))


def revealed_accounting(cls: type[Algorithm]) -> type[Algorithm]:
    """``cls`` (DP-FedAvg, Poisson rate q) accounted with participation revealed: each round the Gaussian at
    noise multiplier z behind a public Bern(q) coin, i.e. ``RandomCheckInEvent(participation=q,
    sampling_rate=1, z, participation_hidden=False)`` (one unit of norm ≤ C that takes part with a revealed
    probability q; the PLD accountant composes it exactly, Σ_m Bin(m; T, q) δ_m(ε)), and
    ``participation_hidden_from = []``. Calibrating a ``target_epsilon`` would use it too: fix the noise
    first."""
    from ampfl.accounting.events import RandomCheckInEvent
    from ampfl.fl.algorithms.dp_fedavg import DPFedAvg
    from ampfl.fl.run.release import threat_model

    if not issubclass(cls, DPFedAvg):
        raise ValueError(
            f"participation: 'revealed' with canary 'dirac' applies to dp_fedavg. Found {cls.name!r}."
        )

    class Revealed(cls):  # type: ignore[valid-type,misc]
        def event_at(self, noise_multiplier: float) -> Any:
            return RandomCheckInEvent(
                participation=float(self.p.sampling_rate),
                sampling_rate=1.0,
                noise_multiplier=noise_multiplier,
                participation_hidden=False,
            )

        def threat_model(self) -> dict[str, list[str]]:
            return threat_model(private=self.privacy_unit is not None, participation_hidden=False)

    Revealed.__name__ = cls.__name__
    return Revealed


def dirac_run(
    config: RunConfig,
    base: Task,
    folder: Path,
    included: np.ndarray,
    algorithms: Mapping[str, type[Algorithm]],
    progress: bool,
    label: str,
    probe: Algorithm,
    view: str = "hidden",
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """One run with Dirac canaries (:mod:`ampfl.fl.audit.dirac`; ``probe``: the algorithm built on ``base``):
    the scores of ``view``, coins, the run's summary (for the revealed view with ``hidden_scores``, the same
    run's hidden-view scores)."""
    from ampfl.fl.run.experiment import clear_run_folder, run_experiment

    cls = algorithms[config.algorithm.name]
    task, d, width = dirac_task(probe, base, int(included.size), seed=config.seed)
    clip = float(probe.p.clip)  # type: ignore[attr-defined]
    plan = DiracPlan(included, d, width, clip, presence_rate(probe))
    built: list[Any] = []

    class Audited(dirac_observer(cls, plan)):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            built.append(self)

    Audited.__name__ = cls.__name__
    clear_run_folder(folder)
    summary = run_experiment(
        config,
        folder,
        task=task,
        algorithms={**algorithms, config.algorithm.name: Audited},
        plots=False,
        progress=progress,
        label=label,
    )
    if view == "revealed":
        summary = {**summary, "hidden_scores": dirac_scores(built[-1], clip, "hidden")}
    return dirac_scores(built[-1], clip, view), included, summary


def revealed_setup(
    config: RunConfig, probe: Algorithm, algorithms: Mapping[str, type[Algorithm]]
) -> tuple[RunConfig, dict[str, type[Algorithm]]]:
    """``config`` at ``probe``'s calibrated noise (a ``target_epsilon`` would recalibrate it for the revealed
    accounting: a different run) and ``algorithms`` with its algorithm accounted with participation revealed
    (:func:`ampfl.fl.audit.dirac.revealed_accounting`)."""
    params = config.algorithm.params
    if getattr(params, "target_epsilon", None) is not None:
        z = float(probe.noise_multiplier)  # type: ignore[attr-defined]
        params = params.model_copy(update={"target_epsilon": None, "noise_multiplier": z})
        algorithm = config.algorithm.model_copy(update={"params": params})
        config = config.model_copy(update={"algorithm": algorithm})
    name = config.algorithm.name
    return config, {**algorithms, name: revealed_accounting(algorithms[name])}


def hidden_view_of(
    scores: np.ndarray, coins: np.ndarray, epsilon: float, delta: float, confidence: float, runs: int
) -> dict[str, Any]:
    """The hidden-participation view of a revealed Dirac audit's runs: the hidden scores against the
    amplified (hidden-participation) ε of the same noise, at the same fixed thresholds."""
    from ampfl.accounting.audit.likelihood_ratio import likelihood_ratio_audit
    from ampfl.accounting.audit.power import max_certifiable, verdict
    from ampfl.fl.audit.observers import OBSERVERS

    lr = likelihood_ratio_audit(
        scores[coins], scores_out=scores[~coins], delta=delta, confidence=confidence, cuts=CUTS
    )
    ceiling = max_certifiable(coins, runs=runs, delta=delta, confidence=confidence, cuts=CUTS)
    return {
        "epsilon_accounted": float(epsilon),
        "epsilon_lower": float(lr.epsilon_lower),
        "guesses_correct": int(lr.correct),
        "verdict": verdict(lr.epsilon_lower, epsilon, ceiling),
        "observer": OBSERVERS["noised-sums"],
    }
