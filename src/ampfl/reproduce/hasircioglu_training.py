"""Paper 004 (Hasırcıoğlu & Gündüz, arXiv:2205.01556v1), Figs. 6 and 7: accuracy of DP-DSGD with random
participation when the noise comes from each analysis, in the two scenarios of Sec. 6.

The paper trains on EMNIST ByClass (62 classes, 697,932 training images), which is not available offline;
these reproductions use **Fashion-MNIST** (10 classes, 60,000 training images) with the CNN of App. B (Fig. 8,
output layer sized to 10 classes), and say so on the plots. Fewer training images means fewer clients, so one
sampling rate per scenario is rescaled to keep the paper's average batch p·N·q·d = 70 (App. B.2); the noise
multiplier z = σ/C (C = 1, so z is 004's σ) is then calibrated by each analysis for the rescaled rates:

- Fig. 6 (Sec. 6.1, many clients, small datasets): d = 30, q = 0.1 as printed; N = 2000 (not 23,264), so
  p = 70 / (N·q·d) ≈ 0.0117 (not 0.001).
- Fig. 7 (Sec. 6.2, few clients, large datasets): d = 1000, p = 0.1 as printed; N = 60 (not 697), so
  q = 70 / (p·N·d) ≈ 0.0117 (not 0.001).

Learning rate: 004 App. B.2 uses η = 1e-4 for WCS/OLS in Fig. 6 and η = 2e-3 elsewhere
(``PAPER_LEARNING_RATES``). Here every method of a figure gets the same grid, which holds the paper's values
for that figure (``LEARNING_RATES``, ``MEDIUM_LEARNING_RATES``; SGD with server momentum 0.9), and is
plotted at its best final accuracy (the grid search itself is not accounted, as in the paper). The
``paper`` run uses the σ that 004 Sec. 6 prints for Thm 4.1 (labelled: not a proven bound), never σ = 0; WCS
and OLS are calibrated at the rescaled rates.

Per-iteration guarantee ε = 0.015, δ = 1e-6 (Sec. 6), C = 1; the non-private run has z = 0 and no clipping.
Analyses: ``paper`` (Thm 4.1 — see ``ampfl.accounting.random_checkin`` for why it is not a proven bound),
``wcs`` (Thm 5.2's closed-form per-iteration calibration, participation revealed, as in the paper) and
``ols`` (Thm 5.1). (A DP-DSGD-RP run left to calibrate itself uses the PLD accountant on its own event,
participation hidden: at Fig. 6's rescaled rates that needs z = 4.88 instead of Thm 5.2's 13.55.)
Whatever chose the noise, every run's ε (at δ = ``DELTA_TOTAL``) comes from the run's accountant over
``RandomCheckInEvent`` (sound); a run without noise reports ε = ∞. The returned dict also
lists the noise multiplier of each analysis at the paper's own (p, q, d), next to the values printed in
Sec. 6, as a cross-check.

The number of iterations is not given in the paper (``ITERATIONS`` here). Long-running (4 methods × the
grid, a CNN each); ``quick=True`` (``ampfl reproduce hasircioglu-fig6 --quick``) runs ``QUICK_ITERATIONS``
on ``QUICK_LEARNING_RATES``, a few minutes on 2 cores; ``medium=True`` (``--medium``, several seeds) runs
the same scenario (N, d, p, q, ε, δ, the CNN: the paper's protocol on Fashion-MNIST) for
``MEDIUM_ITERATIONS`` on the figure's ``MEDIUM_LEARNING_RATES`` (one grid for every method); the summary's
``paired`` lists the claims the seeds compare (:func:`paired_claims`). ``seed`` is the runs' seed (partition,
initialisation, participation, sampling, noise). Running a figure again into the same folder reuses
finished runs of the same configuration and resumes interrupted ones from their checkpoint.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

ITERATIONS = 1500
QUICK_ITERATIONS = 120
MEDIUM_ITERATIONS = 160
EVALUATIONS = 15
QUICK_EVALUATIONS = 4
MEDIUM_EVALUATIONS = 5
#: One learning-rate grid for every method (full runs): 004 App. B.2's own values (1e-4, WCS/OLS in Fig. 6;
#: 2e-3 elsewhere) and, by factors of about 4, past the values the medium runs pick on either side.
LEARNING_RATES = (2.5e-5, 1e-4, 5e-4, 2e-3, 8e-3, 3e-2, 0.12, 0.48)
#: The quick grid (smoke runs; the tests use it).
QUICK_LEARNING_RATES = (8e-3, 3e-2)
#: The medium grid per figure, one for every method: 004's own learning rates for the figure (App. B.2),
#: widened on each side some method picked in some seed until no method picks an edge (docs/reproductions.md).
MEDIUM_LEARNING_RATES = {
    "fig6": (2.5e-5, 1e-4, 2e-3, 8e-3, 3e-2, 0.12, 0.48),  # OLS chose 1e-4 in 2 of 5 seeds on 1e-4 …
    "fig7": (2e-3, 8e-3, 3e-2, 0.12, 0.48),
}
#: 004 App. B.2's learning rates, per figure and method.
PAPER_LEARNING_RATES = {
    "fig6": {"non-private": 2e-3, "paper": 2e-3, "wcs": 1e-4, "ols": 1e-4},
    "fig7": {"non-private": 2e-3, "paper": 2e-3, "wcs": 2e-3, "ols": 2e-3},
}
EPSILON = 0.015
DELTA = 1e-6
#: δ of each run's composed ε (the ``[privacy]`` table).
DELTA_TOTAL = 1e-5
BATCH = 70.0

#: Legend text of each run (``paper`` is 004's proposed analysis, which fails the numerical audit).
LEGEND = {
    "non-private": "non-private",
    "paper": "Thm 4.1 σ as printed in 004 Sec. 6 (not sound)",
    "wcs": "WCS, Thm 5.2",
    "ols": "OLS, Thm 5.1",
}
#: σ (in units of C) printed in 004 Sec. 6 for the paper's own (p, q, d), by analysis.
PRINTED_SIGMA = {
    "fig6": {"paper": 1.065, "wcs": 7.65, "ols": 22.4},
    "fig7": {"paper": 0.646, "wcs": 0.873, "ols": 1.103},
}
PAPER_RATES = {"fig6": {"p": 0.001, "q": 0.1, "d": 30}, "fig7": {"p": 0.1, "q": 0.001, "d": 1000}}
#: 004 Figs. 6-7 print curves on EMNIST ByClass, no numbers: what they show, per method.
PUBLISHED_SOURCE = {
    "fig6": "004 Fig. 6 (EMNIST, curves only): non-private > Thm 4.1 > WCS > OLS",
    "fig7": "004 Fig. 7 (EMNIST, curves only): non-private > Thm 4.1 > WCS > OLS, WCS close to OLS",
}

#: The rows of each figure, in the order 004 Figs. 6-7 rank them (best first).
LABELS = ("non-private", "paper", "wcs", "ols")


def paired_claims(figure: str) -> list[dict[str, str]]:
    """The claims compared by seed (``ampfl.reproduce._seeds.paired_interval`` of the final accuracies):
    each adjacent step of 004's ordering non-private > Thm 4.1 > WCS > OLS and, in Fig. 7, WCS close to OLS
    (the same difference, read as near 0)."""
    if figure not in PUBLISHED_SOURCE:
        raise ValueError(f"figure must be fig6 or fig7. Found {figure!r}.")
    short = {"non-private": "non-private", "paper": "Thm 4.1 (printed σ)", "wcs": "WCS", "ols": "OLS"}
    claims = [
        {"claim": f"{short[high]} above {short[low]}", "minuend": high, "subtrahend": low}
        for high, low in itertools.pairwise(LABELS)
    ]
    if figure == "fig7":
        claims.append(
            {"claim": "WCS close to OLS (difference near 0)", "minuend": "wcs", "subtrahend": "ols"}
        )
    return claims


def scale(*, quick: bool = False, medium: bool = False, figure: str = "fig6") -> dict[str, Any]:
    """Iterations, evaluations and learning-rate grid of the chosen scale (full, ``quick`` or ``medium``);
    the medium grid is ``figure``'s."""
    if quick:
        return {
            "iterations": QUICK_ITERATIONS,
            "evaluations": QUICK_EVALUATIONS,
            "grid": QUICK_LEARNING_RATES,
        }
    if medium:
        return {
            "iterations": MEDIUM_ITERATIONS,
            "evaluations": MEDIUM_EVALUATIONS,
            "grid": MEDIUM_LEARNING_RATES[figure],
        }
    return {"iterations": ITERATIONS, "evaluations": EVALUATIONS, "grid": LEARNING_RATES}


#: Each figure's clients N, records per client d, which rate it fixes ("p" or "q") and at what, and its title;
#: the other rate follows from the expected batch p·N·q·d = BATCH.
_SCENARIOS = {
    "fig6": (2000, 30, "q", 0.1, "many clients, small datasets"),
    "fig7": (60, 1000, "p", 0.1, "few clients, large datasets"),
}


def scenario(figure: str) -> dict[str, Any]:
    """Clients, records, rates and learning rates of one figure (Fashion-MNIST adaptation, see module doc)."""
    if figure not in _SCENARIOS:
        raise ValueError(f"figure must be fig6 or fig7. Found {figure!r}.")
    n, d, fixed, rate, title = _SCENARIOS[figure]
    other = BATCH / (n * rate * d)
    p, q = (other, rate) if fixed == "q" else (rate, other)
    return {"num_clients": n, "d": d, "p": p, "q": q, "title": title}


def _config(
    figure: str,
    label: str,
    iterations: int,
    learning_rate: float,
    evaluations: int = EVALUATIONS,
    seed: int = 0,
) -> Any:
    from ampfl.fl.config import parse_config
    from ampfl.reproduce import engine_section

    s = scenario(figure)
    algorithm: dict[str, Any] = {
        "name": "dp_dsgd_rp",
        "participation": s["p"],
        "sampling_rate": s["q"],
        "round_epsilon": EPSILON,
        "round_delta": DELTA,
        "learning_rate": learning_rate,
        "momentum": 0.9,
        "local_dataset_size": s["d"],  # 004's d, the public bound (every client holds exactly d records)
    }
    if label == "non-private":
        algorithm.update(noise_multiplier=0.0, clip=1e12, analysis="wcs")  # no noise and, in effect, no clip
    elif label == "paper":  # the σ printed for Thm 4.1, never its z = 0 at the rescaled rates
        algorithm.update(clip=1.0, analysis="paper", noise_multiplier=PRINTED_SIGMA[figure]["paper"])
    elif label == "wcs":  # Thm 5.2 as the paper calibrates it (the run's own accountant would need less)
        algorithm.update(clip=1.0, analysis="wcs", noise_multiplier=_round_noise("wcs", s))
    else:
        algorithm.update(clip=1.0, analysis=label)
    return parse_config(
        {
            "seed": seed,
            "rounds": iterations,
            "eval_every": max(1, iterations // evaluations),
            "checkpoint_every": max(1, iterations // 5),
            "dataset": {"name": "fmnist"},
            "partition": {"scheme": "fixed", "num_clients": s["num_clients"], "samples_per_client": s["d"]},
            "model": {"name": "cnn"},
            "algorithm": algorithm,
            "engine": engine_section(),  # reproduce --device
            "privacy": {"accountant": "pld", "delta": DELTA_TOTAL, "reproducible": True},  # an experiment
        }
    )


def _round_noise(analysis: str, rates: dict[str, Any]) -> float:
    """z of ``analysis``'s closed-form calibration for the per-iteration (ε, δ) of 004 Sec. 6 at ``rates``
    (keys p, q, d)."""
    from ampfl.accounting.random_checkin import calibrate_noise_multiplier

    return calibrate_noise_multiplier(
        analysis=analysis,
        participation=rates["p"],
        sampling_rate=rates["q"],
        local_dataset_size=int(rates["d"]),
        epsilon=EPSILON,
        delta=DELTA,
    )


def sigma_cross_check(figure: str) -> list[dict[str, Any]]:
    """z of each analysis at the paper's own (p, q, d) and at the rescaled rates, next to 004's printed σ."""
    rates = PAPER_RATES[figure]
    s = scenario(figure)
    rows = []
    for analysis, printed in PRINTED_SIGMA[figure].items():
        ours = _round_noise(analysis, rates)
        rescaled = _round_noise(analysis, s)
        rows.append(
            {
                "analysis": analysis,
                "noise_multiplier_printed": printed,
                "noise_multiplier_paper_rates": ours,
                "noise_multiplier_fmnist_rates": rescaled,
            }
        )
    return rows


def _figure(figure: str, out: Path, *, quick: bool, medium: bool = False, seed: int = 0) -> dict[str, Any]:
    from ampfl.fl.data import DataUnavailableError
    from ampfl.fl.run.experiment import build_task, run_or_reuse
    from ampfl.fl.run.folder import read_lines
    from ampfl.io import atomic_write_csv
    from ampfl.reproduce._plot import legend_below, new_figure, plot_accuracy, save, scale_fields, scale_note

    chosen = scale(quick=quick, medium=medium, figure=figure)
    iterations, evaluations, grid = chosen["iterations"], chosen["evaluations"], chosen["grid"]
    labels = LABELS
    try:
        task = build_task(_config(figure, labels[0], iterations, grid[0], evaluations, seed))
    except DataUnavailableError as exc:
        raise ValueError(
            f"hasircioglu-{figure} needs Fashion-MNIST: {exc} (try: ampfl data fetch fmnist)"
        ) from None
    rows = []
    runs = []
    results = []
    fig, ax = new_figure(width=6.5, height=4.2)
    for label in labels:
        best: tuple[float, dict[str, Any], list[dict[str, Any]]] | None = None
        for lr in grid:
            folder = out / label / f"lr{lr:g}"
            config = _config(figure, label, iterations, lr, evaluations, seed)
            summary = run_or_reuse(config, folder, task=task, label=f"{figure} {label} η={lr:g}")
            lines = read_lines(folder, diagnostics=True)
            z = float(summary["noise"]["noise_multiplier"])
            run = {
                "method": label,
                "learning_rate": lr,
                "noise_multiplier": z,
                "final_accuracy": summary["final_accuracy"],
                "epsilon": summary["epsilon"],
                "delta": summary["delta"],
                "published": None,
                "published_source": PUBLISHED_SOURCE[figure],
            }
            runs.append(run)
            for m in lines:
                rows.append([label, lr, z, m["round"], m["accuracy"], m["epsilon"], m["delta"]])
            if best is None or run["final_accuracy"] > best[0]:
                best = (run["final_accuracy"], run, lines)
        assert best is not None
        _, run, lines = best
        results.append(run)
        z = run["noise_multiplier"]
        legend = f"{LEGEND[label]} (z = {z:.3g}, best η = {run['learning_rate']:g})"
        plot_accuracy(ax, lines, marker="o", ms=3, label=legend)
    s = scenario(figure)
    ax.set_xlabel("iteration (communication round)")
    ax.set_ylabel("test accuracy (fraction correct)")
    ax.set_title(
        f"004 {'Fig. 6' if figure == 'fig6' else 'Fig. 7'} ({s['title']}): accuracy per analysis's σ, "
        "Fashion-MNIST",
        fontsize=9,
    )
    ax.grid(alpha=0.3)
    legend_below(ax, ncol=1, fontsize=8)
    note = (
        f"Fashion-MNIST instead of EMNIST (not available offline). N = {s['num_clients']}, d = {s['d']}, "
        f"p = {s['p']:.4g}, q = {s['q']:.4g} (p·N·q·d = 70 as in 004), "
        f"per-iteration ε = {EPSILON}, δ = {DELTA:g}, C = 1, z = σ/C, CNN of 004 Fig. 8, SGD momentum 0.9, "
        f"{iterations} iterations (not given in 004); each method at its best η of {list(grid)}."
        + scale_note(quick=quick, medium=medium, seed=seed)
    )
    png = save(fig, out / f"hasircioglu_{figure}.png", note=note)
    csv_path = atomic_write_csv(
        out / f"hasircioglu_{figure}.csv",
        ["analysis", "learning_rate", "noise_multiplier", "iteration", "accuracy", "epsilon", "delta"],
        rows,
    )
    check = sigma_cross_check(figure)
    check_path = atomic_write_csv(
        out / f"hasircioglu_{figure}_sigma.csv",
        ["analysis", *_CHECK_COLUMNS],
        [[c["analysis"], *(c[key] for key in _CHECK_COLUMNS)] for c in check],
    )
    return {
        "files": [str(png), str(csv_path), str(check_path)],
        "iterations": iterations,
        **scale_fields(quick=quick, medium=medium, seed=seed),
        "learning_rates": list(grid),
        "scenario": s,
        "results": results,
        "runs": runs,
        "sigma_check": check,
        "paired": paired_claims(figure),
    }


_CHECK_COLUMNS = ("noise_multiplier_printed", "noise_multiplier_paper_rates", "noise_multiplier_fmnist_rates")


def fig6(out: Path, *, quick: bool = False, medium: bool = False, seed: int = 0) -> dict[str, Any]:
    """004 Fig. 6 (Sec. 6.1, many clients with small datasets), on Fashion-MNIST."""
    return _figure("fig6", out, quick=quick, medium=medium, seed=seed)


def fig7(out: Path, *, quick: bool = False, medium: bool = False, seed: int = 0) -> dict[str, Any]:
    """004 Fig. 7 (Sec. 6.2, few clients with large datasets), on Fashion-MNIST."""
    return _figure("fig7", out, quick=quick, medium=medium, seed=seed)


FIGURES = {"hasircioglu-fig6": fig6, "hasircioglu-fig7": fig7}
