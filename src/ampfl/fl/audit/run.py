"""Empirical privacy audit of a training run: canaries in, an ε lower bound out.

:func:`audit_run` trains the configured algorithm on the real code path
(:func:`ampfl.fl.run.experiment.run_experiment`, privacy randomness secret: ``[privacy] reproducible = false``
is forced) with ``canaries`` canaries inserted at the run's privacy unit, each included with probability 1/2
by a secret coin (operating-system entropy, never the config's seed). Canaries
(:mod:`ampfl.fl.audit.canaries`):

- ``"feature"`` (flat inputs, first layer linear: logreg, mlp): canary k owns one extra input feature
  (column ``d + k``) that no data record has, record ``x = scale · e_{d+k}`` with a public random label, so
  its gradient touches only the weights of column ``d + k``;
- ``"input"`` (any model, CNNs): a public random record in the data's input space;
- record-level runs: an included canary is one more record of a client chosen publicly; client-level runs:
  one more client holding copies of it;
- SplitFed-DP (replace-one of an example's features): *slot* canaries, always present, whose features are
  a public random image or blank (:mod:`ampfl.fl.audit.observers`).

Each canary is scored from what the observer named by ``protects_against`` sees, never more: the released
model (``score = "delta"``, white box: feature canaries project the change of column d + k on ``e_y − 1/C``
or take its norm; input canaries project every round's change on the canary's gradient direction; ``"loss"``,
black box: the drop of the canary's loss); with ``participation = "revealed"`` (DP-DSGD-RP accounted with
participation revealed) also who checked in at each round; for SplitFed-DP the noised smashed rows the
server receives. The scores and the coins go to :mod:`ampfl.accounting.audit.one_run` (one run,
Steinke–Nasr–Jagielski 2023) or :mod:`ampfl.accounting.audit.likelihood_ratio` (``runs > 1``: the R·K (run,
canary) trials pooled, Clopper–Pearson). The verdict is ``"VIOLATION"`` when the lower bound exceeds the
accounted ε, and for a run without a guarantee (ε = ∞) whose canaries are detected (lower bound > 0);
``"inconclusive"`` when it is not a violation but the accounted ε is above ``epsilon_max_certifiable``, the
largest bound the estimator could give with these canaries and runs (every guess right): the audit has no
power to tell there; ``"consistent"`` otherwise.

``canary = "dirac"``: white-box gradient canaries on coordinates the data leave at zero, scored from every
noised sum the server forms (:mod:`ampfl.fl.audit.dirac`), their independent trials pooled in the
likelihood-ratio test at fixed thresholds, in one run or many; with ``participation = "revealed"`` (DP-FedAvg,
Poisson sampling) the observer also knows in which rounds each canary client was sampled, the run is
accounted with participation revealed at the noise the hidden run was calibrated to, and the report's
``hidden_view`` gives the same run's hidden-participation bound against the amplified ε.
``canaries = "auto"``: the smallest count whose ceiling reaches the forecast accounted ε, if it fits
``max_canaries`` (:mod:`ampfl.fl.audit.plan`).
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ampfl.accounting.audit.power import max_certifiable, verdict
from ampfl.fl.audit.canaries import (
    KINDS,
    CanaryPlan,
    first_weight,
    input_scores,
    insert_canaries,
    model_scores,
    revealed_scores,
)
from ampfl.fl.audit.observers import OBSERVERS
from ampfl.fl.config import RunConfig
from ampfl.io import atomic_save_figure, atomic_write_json

if TYPE_CHECKING:
    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.fl.task import Task

__all__ = [
    "CANARIES",
    "PARTICIPATION",
    "CanaryPlan",
    "audit_run",
    "insert_canaries",
    "max_certifiable",
    "secret_coins",
]

SCORES = ("delta", "loss")
#: ``participation``: as the algorithm accounts it, or revealed (DP-DSGD-RP: :mod:`ampfl.fl.audit.observers`;
#: DP-FedAvg with Dirac canaries: :mod:`ampfl.fl.audit.dirac`).
PARTICIPATION = ("as-accounted", "revealed")
#: Nominal privacy unit of algorithms whose noise can be switched off (privacy_unit None at z = 0).
_CLIENT_LEVEL = ("dp_fedavg", "gdpfed", "gdpfed_plus", "gdpfed_minus", "idp_fedavg", "pfa")


def secret_coins(count: int) -> np.ndarray:
    """``count`` fair coins from the operating system's entropy (``secrets``), never from a seed."""
    rng = np.random.default_rng(secrets.randbits(128))
    return rng.random(count) < 0.5


#: Canary kinds: those of :mod:`ampfl.fl.audit.canaries` and the gradient canaries of the dirac module.
CANARIES = (*KINDS, "dirac")


def _observer(probe: Algorithm, participation: str, score: str, canary: str = "auto") -> str:
    """Which observer scores the canaries (module docstring); one-line errors for the pairs not offered."""
    from ampfl.fl.algorithms.dp_dsgd_rp import DPDSGDRandomParticipation
    from ampfl.fl.audit.dirac import presence_rate
    from ampfl.fl.split.splitfed_dp import SplitFedDP

    if canary == "dirac":
        from ampfl.fl.algorithms.dp_fedavg import DPFedAvg

        if score != "delta":
            raise ValueError("canary: 'dirac' is scored from the noised sums (score 'delta').")
        presence_rate(probe)  # one-line errors for the algorithms and samplings not offered
        if participation == "revealed":
            if not isinstance(probe, DPFedAvg):
                raise ValueError(
                    "participation: 'revealed' with canary 'dirac' applies to dp_fedavg (Poisson sampling): "
                    "dp_dsgd_rp's dirac audit runs at participation 1, nothing to reveal. "
                    f"Found {probe.name!r}."
                )
            return "noised-sums-revealed"
        return "noised-sums"

    if participation == "revealed":
        if not isinstance(probe, DPDSGDRandomParticipation):
            raise ValueError(f"participation: 'revealed' applies to dp_dsgd_rp only. Found {probe.name!r}.")
        if score != "delta":
            raise ValueError("score: participation 'revealed' is scored from the model deltas ('delta').")
        return "revealed"
    if isinstance(probe, SplitFedDP):
        if score != "delta":
            raise ValueError(
                "score: splitfed_dp is scored from the smashed rows the server receives ('delta')."
            )
        return "smashed"
    return "model"


def _first_layer_linear(probe: Algorithm, task: Task) -> bool:
    """Whether the model has a weight ``[out, d]`` on the d input features (logreg, mlp)."""
    try:
        first_weight(probe, probe.model.initial(), int(task.dataset.x_train.shape[1]))  # type: ignore[attr-defined]
    except ValueError:
        return False
    return True


def _with_canary_clients(config: RunConfig, added: int) -> RunConfig:
    """GDPFed-type configs list N_g per group (summing to the number of clients): the last N_g grows by the
    canary clients (the seeded assignment spreads all clients over the groups; the declared
    ``expected_group_sizes``, the public normaliser, stays as configured)."""
    params = config.algorithm.params
    sizes = list(params.group_sizes)  # type: ignore[attr-defined]
    sizes[-1] += added
    new_params = params.model_copy(update={"group_sizes": sizes})
    return config.model_copy(update={"algorithm": config.algorithm.model_copy(update={"params": new_params})})


def _one_run(
    config: RunConfig,
    base: Task,
    folder: Path,
    *,
    canaries: int,
    unit: str,
    scale: float,
    score: str,
    observer: str,
    canary: str,
    algorithms: Mapping[str, type[Algorithm]],
    progress: bool,
    label: str,
    probe: Algorithm,
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    from ampfl.fl.audit import observers
    from ampfl.fl.audit.dirac import dirac_run
    from ampfl.fl.run.experiment import clear_run_folder, run_experiment

    included = secret_coins(canaries)
    cls = algorithms[config.algorithm.name]
    if observer.startswith("noised-sums"):
        view = "revealed" if observer == "noised-sums-revealed" else "hidden"
        return dirac_run(config, base, folder, included, algorithms, progress, label, probe, view)
    if observer == "smashed":
        task, slots = observers.insert_slot_canaries(base, included=included, seed=config.seed)
        cls = observers.smashed_observer(cls, slots)
    else:
        task, plan = insert_canaries(
            base, included=included, unit=unit, scale=scale, seed=config.seed, kind=canary
        )
        if unit == "client" and getattr(config.algorithm.params, "group_sizes", None):
            config = _with_canary_clients(config, int(included.sum()))
        if observer == "revealed":
            cls = observers.revealed_participation(cls)
    built: list[Any] = []

    class Audited(cls):  # type: ignore[valid-type,misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            built.append(self)
            self.audit_models: list[Any] = []

        def run_round(self, round_index: int) -> dict[str, float]:
            metrics: dict[str, float] = super().run_round(round_index)
            if canary == "input" and observer == "model":  # every released model w_t (ε covers them all)
                self.audit_models.append(_released(self).detach().clone())
            return metrics

    Audited.__name__ = cls.__name__
    registry = {**algorithms, config.algorithm.name: Audited}
    clear_run_folder(folder)
    summary = run_experiment(
        config, folder, task=task, algorithms=registry, plots=False, progress=progress, label=label
    )
    algorithm = built[-1]
    if observer == "smashed":
        return observers.slot_scores(algorithm), included, summary
    if not hasattr(algorithm, "global_params"):
        raise ValueError(
            f"audit run needs an algorithm with one global model. Found {config.algorithm.name!r}."
        )
    initial = algorithm.model.initial()  # public: rooted at the seed (ROLE_INIT)
    if observer == "revealed":
        released_models, revealed = algorithm.released, algorithm.revealed
        return revealed_scores(algorithm, initial, released_models, revealed, plan, task), included, summary
    if canary == "input" and score == "delta":
        scores = input_scores(algorithm, [initial, *algorithm.audit_models], plan)
    else:
        scores = model_scores(algorithm, initial, _released(algorithm).detach().clone(), plan, task, score)
    return scores, plan.included, summary


def _released(algorithm: Any) -> Any:
    """The released model: MS-PAFL releases its public part only (``public_model``: the initial private
    part), the others their global model."""
    return algorithm.public_model() if hasattr(algorithm, "public_model") else algorithm.global_params


def audit_run(
    config: RunConfig,
    out: str | Path,
    *,
    canaries: int | str = 500,
    max_canaries: int = 5000,
    runs: int = 1,
    confidence: float = 0.95,
    score: str = "delta",
    scale: float | None = None,
    participation: str = "as-accounted",
    canary: str = "auto",
    task: Task | None = None,
    progress: bool = True,
    plot: bool = True,
    algorithms: Mapping[str, type[Algorithm]] | None = None,
    on_run: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Audit ``config``: train ``runs`` runs with ``canaries`` canaries each; return the report.

    ``canary``: ``"feature"`` (a dedicated input feature per canary: flat inputs, first layer linear),
    ``"input"`` (a public random record in the data's input space, any model: CNNs), ``"dirac"`` (gradient
    canaries scored from every noised sum: dp_fedavg with Poisson sampling, dp_dsgd_rp at full participation;
    :mod:`ampfl.fl.audit.dirac`) or ``"auto"`` (feature where it applies). ``canaries``: a count, or
    ``"auto"``: the smallest count that can certify the forecast accounted ε, refused in one line above
    ``max_canaries`` (:mod:`ampfl.fl.audit.plan`). ``task``: the task to train (default: from ``config``).
    ``participation = "revealed"`` (DP-DSGD-RP; DP-FedAvg with ``canary = "dirac"``) accounts the run with
    participation revealed and gives the observer who checked in at every round
    (:func:`ampfl.fl.audit.observers.revealed_participation`; for Dirac canaries each canary client's
    sampling coins, :func:`ampfl.fl.audit.dirac.revealed_accounting`, and the report's ``hidden_view`` is the
    same run's hidden-participation view).
    SplitFed-DP is audited with slot canaries scored from the noised smashed rows the server receives
    (:func:`ampfl.fl.audit.observers.smashed_observer`).

    Returns:
        ``epsilon_accounted``, ``delta``, ``epsilon_lower`` (at ``confidence``), ``estimator``, ``canaries``,
        ``runs``, ``guesses`` and ``guesses_correct`` (the best guess set or threshold), ``ratio`` (None when
        ε is infinite), ``verdict``, ``epsilon_max_certifiable``, ``confidence``, ``score``, ``privacy_unit``,
        ``canaries_requested`` (the count or ``"auto"``), ``epsilon_forecast`` (the ε the count was planned
        for; None unless ``"auto"``), ``wall_seconds``, ``files``.
        Writes ``audit.json``, ``scores.csv`` and (``plot``) ``audit.png`` in ``out``; the runs in
        ``out/run-<i>``.
    """
    from ampfl.accounting._checks import check_choice, check_int, check_positive, check_probability
    from ampfl.accounting.audit.likelihood_ratio import likelihood_ratio_audit
    from ampfl.accounting.audit.one_run import one_run_audit
    from ampfl.fl.audit.dirac import CUTS, hidden_view_of, revealed_setup
    from ampfl.fl.audit.plan import check_requested, forecast_epsilon, resolve_canaries
    from ampfl.fl.run.experiment import build_calibrated, build_task

    check_requested(canaries, max_canaries)
    check_int("runs", runs, minimum=1, maximum=10_000)
    check_probability("confidence", confidence, allow_one=False)
    check_choice("score", score, SCORES)
    check_choice("participation", participation, PARTICIPATION)
    check_choice("canary", canary, ("auto", *CANARIES))
    if algorithms is None:
        from ampfl.fl.algorithms import ALGORITHMS

        algorithms = ALGORITHMS
    started = time.perf_counter()
    config = config.model_copy(update={"privacy": config.privacy.model_copy(update={"reproducible": False})})
    base = build_task(config) if task is None else task
    probe, accountant = build_calibrated(config, base, algorithms=algorithms)
    unit = probe.privacy_unit or ("client" if config.algorithm.name in _CLIENT_LEVEL else "record")
    observer = _observer(probe, participation, score, canary)
    cuts = CUTS if observer.startswith("noised-sums") else None
    hidden_epsilon = None
    if observer == "noised-sums-revealed":  # the same noise, accounted with participation revealed
        if config.privacy.neighbouring != "add-remove":
            raise ValueError(
                "participation: 'revealed' with canary 'dirac' needs [privacy] neighbouring = 'add-remove'."
            )
        hidden_epsilon = forecast_epsilon(config, probe, accountant)
        config, algorithms = revealed_setup(config, probe, algorithms)
        probe, accountant = build_calibrated(config, base, algorithms=algorithms)
    requested, forecast = canaries, None
    if canaries == "auto":
        forecast = forecast_epsilon(config, probe, accountant)
        canaries = resolve_canaries(
            "auto",
            max_canaries=max_canaries,
            epsilon=forecast,
            runs=runs,
            delta=config.privacy.delta,
            confidence=confidence,
            cuts=cuts,
        )
    canaries = int(canaries)
    if canary == "auto":
        flat = base.dataset.x_train.ndim == 2 and hasattr(probe, "model")
        canary = "feature" if flat and _first_layer_linear(probe, base) else "input"
    clip = float(getattr(getattr(probe, "p", None), "clip", 1.0) or 1.0)
    scale = check_positive("scale", scale) if scale is not None else 2.0 * max(1.0, clip)
    folder = Path(out)
    all_scores, all_coins, summaries = [], [], []
    for i in range(runs):
        label = f"audit {i + 1}/{runs}" if runs > 1 else "audit"
        s, c, summary = _one_run(
            config,
            base,
            folder / f"run-{i}",
            canaries=canaries,
            unit=unit,
            scale=scale,
            score=score,
            observer=observer,
            canary=canary,
            algorithms=algorithms,
            progress=progress,
            label=label,
            probe=probe,
        )
        all_scores.append(s)
        all_coins.append(c)
        summaries.append(summary)
        if on_run is not None:
            on_run(i + 1)
    scores, coins = np.concatenate(all_scores), np.concatenate(all_coins)
    eps_acc = float(summaries[0]["epsilon"])
    delta = float(summaries[0]["delta"] or config.privacy.delta)
    hidden_view = None
    if hidden_epsilon is not None:
        hidden = np.concatenate([s["hidden_scores"] for s in summaries])
        hidden_view = hidden_view_of(hidden, coins, hidden_epsilon, delta, confidence, runs)
    if cuts is not None:  # independent trials (dirac): the likelihood-ratio test at fixed thresholds
        if coins.all() or not coins.any():
            raise ValueError("every coin came out the same: run the audit again.")
        lr = likelihood_ratio_audit(
            scores[coins], scores_out=scores[~coins], delta=delta, confidence=confidence, cuts=cuts
        )
        lower, guesses, correct = lr.epsilon_lower, int(scores.size), lr.correct
        estimator = "likelihood-ratio over dirac canaries (Clopper-Pearson, fixed thresholds)"
    elif runs == 1:
        one = one_run_audit(scores, included=coins, delta=delta, confidence=confidence)
        lower, guesses, correct = one.epsilon_lower, one.guesses, one.correct
        estimator = "one-run (Steinke-Nasr-Jagielski 2023)"
    elif coins.all() or not coins.any():
        raise ValueError("every coin came out the same: run the audit again.")  # probability 2^(1-RK)
    else:
        lr = likelihood_ratio_audit(
            scores[coins], scores_out=scores[~coins], delta=delta, confidence=confidence
        )
        lower, guesses, correct = lr.epsilon_lower, int(scores.size), lr.correct
        estimator = "likelihood-ratio (Clopper-Pearson)"
    ceiling = max_certifiable(coins, runs=runs, delta=delta, confidence=confidence, cuts=cuts)
    outcome = verdict(lower, eps_acc, ceiling)
    report: dict[str, Any] = {
        "epsilon_accounted": eps_acc,
        "delta": delta,
        "epsilon_lower": float(lower),
        "estimator": estimator,
        "canaries": int(canaries),
        "runs": int(runs),
        "guesses": int(guesses),
        "guesses_correct": int(correct),
        "ratio": float(lower / eps_acc) if math.isfinite(eps_acc) and eps_acc > 0 else None,
        "verdict": outcome,
        "epsilon_max_certifiable": float(ceiling),
        "canaries_requested": requested,
        "max_canaries": int(max_canaries),
        "epsilon_forecast": forecast,
        "confidence": float(confidence),
        "score": "noised-sums" if cuts is not None else "smashed" if observer == "smashed" else score,
        "canary": "slot" if observer == "smashed" else canary,
        "observer": OBSERVERS[observer],
        "participation": participation,
        "privacy_unit": unit,
        "algorithm": config.algorithm.name,
        "rounds": config.rounds,
        "noise": summaries[0].get("noise"),
        "wall_seconds": 0.0,
    }
    if hidden_view is not None:
        report["hidden_view"] = hidden_view
    if float(np.ptp(scores)) == 0.0:
        report["note"] = (
            "every canary got the same score: the released model never changed on the canary coordinates "
            "(they sit in a part that is not released, or nothing trained them); this audit has no power"
        )
    if outcome == "inconclusive":
        report["note"] = (
            f"no power: {canaries} canaries in {runs} run(s) certify at most epsilon {ceiling:.3g} at "
            f"{confidence:.0%} (every guess right), below the accounted {eps_acc:.3g}; more canaries or runs "
            "are needed to tell"
        )
    if math.isinf(eps_acc):
        report["note"] = (
            "the run has no guarantee (epsilon = inf): any detection (epsilon_lower > 0) fails it"
        )
    folder.mkdir(parents=True, exist_ok=True)
    _write_scores(folder / "scores.csv", scores, coins, runs)
    files = [str(folder / "audit.json"), str(folder / "scores.csv")]
    if plot:
        files.append(str(_plot(folder / "audit.png", scores, coins, report)))
    report["files"] = files
    report["wall_seconds"] = time.perf_counter() - started
    atomic_write_json(folder / "audit.json", report)
    return report


def _write_scores(path: Path, scores: np.ndarray, coins: np.ndarray, runs: int) -> None:
    from ampfl.io import atomic_write_csv

    per = scores.size // runs
    rows = [(i // per, i % per, int(c), float(s)) for i, (s, c) in enumerate(zip(scores, coins, strict=True))]
    atomic_write_csv(path, ("run", "canary", "included", "score"), rows)


def _plot(path: Path, scores: np.ndarray, coins: np.ndarray, report: Mapping[str, Any]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [2, 1]})
    bins = np.histogram_bin_edges(scores, bins=30)
    left.hist(scores[coins], bins=bins, alpha=0.6, label=f"included ({int(coins.sum())})")
    left.hist(scores[~coins], bins=bins, alpha=0.6, label=f"excluded ({int((~coins).sum())})")
    left.set_xlabel(f"canary score ({report['score']})")
    left.set_ylabel("canaries")
    left.legend()
    left.set_title(f"{report['algorithm']}: {report['estimator']}", fontsize=9)
    acc, low = report["epsilon_accounted"], report["epsilon_lower"]
    shown = acc if math.isfinite(acc) else max(low, 1.0) * 1.5
    right.bar(
        [0, 1],
        [low, shown],
        color=["tab:red" if report["verdict"] == "VIOLATION" else "tab:green", "tab:gray"],
    )
    right.set_xticks(
        [0, 1],
        [
            f"lower bound\n({report['confidence']:.0%})",
            "accounted" if math.isfinite(acc) else "accounted (inf)",
        ],
    )
    right.set_ylabel("epsilon")
    right.set_title(f"verdict: {report['verdict']}", fontsize=9)
    fig.tight_layout()
    atomic_save_figure(fig, path)
    plt.close(fig)
    return path
