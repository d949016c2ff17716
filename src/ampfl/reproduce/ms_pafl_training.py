"""Paper 000 (MS-PAFL, arXiv:2509.25906v1), Fig. 2: test accuracy over rounds for p_i ∈ {0.1, 0.3, 0.7}.

Settings of Sec. V-B/C: UCI Adult (14 normalised features, binary label), N = 100 clients each holding a
subset of the labels (here: one of the two labels, ``label_skew`` with one label per client), logistic
regression of Eq. (20)–(21), half of the parameters private (d_α = d_p = 0.5), Q = 5 local steps of b = 5
examples sampled without (WOR, Fig. 2a) or with (WR, Fig. 2b) replacement, ε_ℓ = 1, δ_ℓ = 1e-4, C = 1.

Not stated in the paper, chosen here: the number of rounds (``ROUNDS``), the learning rate (``LEARNING_RATE``)
and γ (``GAMMA``). The composed ε of each curve (at δ = ``DELTA``) comes from the run's accountant over
MS-PAFL's round events (participation public to the server, persistent private state, so no amplification by
local sampling: :mod:`ampfl.accounting.audit.ms_pafl`) and is written to the CSV; it is larger than the
paper's amplified numbers, which do not hold with persistent private state (docs/ms_pafl.md). Both the public
model's accuracy (solid) and the mean accuracy of the clients' recombined models (dashed) are plotted: the
paper does not say which one its figure shows.

Controls (p = 0.3, WOR), so that the figure says why the curves sit where they sit: the majority-class rate
of the test set (dotted line); the same run with σ = 0 (no noise, same clipping); the variant that clips
the public *update* w_p − w̄_p instead of the model (Eq. 11 clips the weights themselves, capping
‖w_p‖ ≤ C) at the same ε_ℓ; and σ = 0 with no split and update clipping (plain FedAvg of the whole model).
Measured (100 rounds): every one of them, FedAvg without noise included, ends at the majority class (0.764)
on this one-label-per-client partition: the paper's Fig. 2 accuracies cannot be reached with the setup it
states, and the cause is not the noise (docs/ms_pafl.md).

Long-running (6 runs + 3 controls); ``quick=True`` (``--quick``) runs ``QUICK_ROUNDS`` rounds;
``medium=True`` (``--medium``, several seeds) runs ``MEDIUM_ROUNDS``: the paper's protocol (N = 100, Q = 5,
b = 5, ε_ℓ = 1, every p and scheme, the three controls) with fewer rounds than ``ROUNDS`` (the paper gives
no T). ``seed`` is the runs' seed (sampling, noise). Running the figure again into the same folder reuses
finished runs of the same configuration.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROUNDS = 100
QUICK_ROUNDS = 30
MEDIUM_ROUNDS = 60
EVAL_EVERY = 5
LEARNING_RATE = 0.05
GAMMA = 1e-4
DELTA = 1e-5
PROBABILITIES = (0.1, 0.3, 0.7)
SCHEMES = ("wor", "wr")


#: Control runs at p = 0.3, WOR: label -> algorithm overrides (module docstring).
CONTROLS: dict[str, dict[str, Any]] = {
    "sigma=0 (Eq. 11 clipping)": {"noise_multiplier": 0.0},
    "update clipping (variant)": {"clip_target": "update"},
    "sigma=0, no split, update clipping (FedAvg)": {
        "noise_multiplier": 0.0,
        "clip_target": "update",
        "private_fraction": 0.0,
    },
}


#: 000 prints no accuracy for Fig. 2, only its reading (Sec. V-C).
PUBLISHED_SOURCE = (
    "000 Fig. 2 prints curves, no numbers; Sec. V-C: accuracy rises with p_i, WR ends slightly above WOR"
)


def rounds_of(*, quick: bool = False, medium: bool = False) -> int:
    """The number of rounds of the chosen scale."""
    return QUICK_ROUNDS if quick else MEDIUM_ROUNDS if medium else ROUNDS


def _config(
    p: float, scheme: str, rounds: int, overrides: dict[str, Any] | None = None, seed: int = 0
) -> Any:
    from ampfl.fl.config import parse_config
    from ampfl.reproduce import engine_section

    return parse_config(
        {
            "seed": seed,
            "rounds": rounds,
            "eval_every": min(EVAL_EVERY, rounds),
            "checkpoint_every": 0,
            "dataset": {"name": "adult"},
            "partition": {"scheme": "label_skew", "num_clients": 100, "labels_per_client": 1},
            "model": {"name": "logreg", "options": {"gamma": GAMMA}},
            "algorithm": {
                "name": "ms_pafl",
                "participation": p,
                "num_local_steps": 5,
                "batch_size": 5,
                "local_sampling": scheme,
                "learning_rate": LEARNING_RATE,
                "clip": 1.0,
                "eps_local": 1.0,
                "delta_local": 1e-4,
                "private_fraction": 0.5,
                **(overrides or {}),
            },
            "engine": engine_section(),  # reproduce --device
            "privacy": {"accountant": "rdp", "delta": DELTA, "reproducible": True},  # an experiment
        }
    )


def fig2(out: Path, *, quick: bool = False, medium: bool = False, seed: int = 0) -> dict[str, Any]:
    """000 Fig. 2 (a) WOR and (b) WR: accuracy over rounds for p_i ∈ {0.1, 0.3, 0.7}."""
    from ampfl.fl.data import DataUnavailableError
    from ampfl.fl.run.experiment import build_task, run_or_reuse
    from ampfl.fl.run.folder import read_lines
    from ampfl.io import atomic_write_csv
    from ampfl.reproduce._plot import legend_below, new_figure, plot_accuracy, save, scale_fields, scale_note

    rounds = rounds_of(quick=quick, medium=medium)
    try:
        task = build_task(_config(PROBABILITIES[0], "wor", rounds, seed=seed))
    except DataUnavailableError as exc:
        raise ValueError(f"ms-pafl-fig2 needs UCI Adult: {exc} (try: ampfl data fetch adult)") from None
    curves: dict[tuple[str, float], list[dict[str, Any]]] = {}
    rows = []
    summaries = []
    results = []
    for scheme in SCHEMES:
        for p in PROBABILITIES:
            folder = out / f"{scheme}_p{p:g}"
            summary = run_or_reuse(
                _config(p, scheme, rounds, seed=seed), folder, task=task, label=f"ms_pafl {scheme} p={p:g}"
            )
            lines = read_lines(folder, diagnostics=True)
            curves[(scheme, p)] = lines
            summaries.append(
                {
                    "scheme": scheme,
                    "p": p,
                    "final_accuracy": summary["final_accuracy"],
                    "personal_accuracy_mean": lines[-1].get("personal_accuracy_mean"),
                    "epsilon": summary["epsilon"],
                    "delta": summary["delta"],
                }
            )
            results.append(_result(f"ms_pafl {scheme} p={p:g}", summary, lines[-1]))
            for m in lines:
                rows.append(
                    [
                        scheme,
                        p,
                        m["round"],
                        m["accuracy"],
                        m.get("personal_accuracy_mean", ""),
                        m.get("personal_accuracy_std", ""),
                        m.get("local_accuracy_mean", ""),
                        m["epsilon"],
                        m["delta"],
                    ]
                )
    controls: dict[str, list[dict[str, Any]]] = {}
    for index, (label, overrides) in enumerate(CONTROLS.items()):
        folder = out / f"control{index}"
        summary = run_or_reuse(
            _config(0.3, "wor", rounds, overrides, seed=seed), folder, task=task, label=label
        )
        controls[label] = read_lines(folder, diagnostics=True)
        results.append(_result(f"control: {label}", summary, controls[label][-1]))
    y = task.dataset.y_test
    majority = float(max((y == c).mean() for c in set(y.tolist())))
    csv_path = atomic_write_csv(
        out / "ms_pafl_fig2.csv",
        [
            "scheme",
            "p",
            "round",
            "accuracy",
            "personal_accuracy_mean",
            "personal_accuracy_std",
            "local_accuracy_mean",
            "epsilon",
            "delta",
        ],
        rows,
    )
    fig, _ = new_figure(width=11.0, height=4.2)
    fig.clf()
    axes = fig.subplots(1, 2, sharey=True)
    for ax, scheme, title in zip(
        axes, SCHEMES, ("(a) data subsampling WOR", "(b) data subsampling WR"), strict=True
    ):
        for p in PROBABILITIES:
            lines = curves[(scheme, p)]
            rounds_axis = [m["round"] for m in lines]
            eps_final = lines[-1]["epsilon"] if lines else float("nan")
            (handle,) = ax.plot(
                rounds_axis,
                [m["accuracy"] for m in lines],
                marker="o",
                ms=3,
                label=f"p = {p:g} (public model; ε = {eps_final:.3g} at round {rounds_axis[-1]})",
            )
            ax.plot(
                rounds_axis,
                [m["personal_accuracy_mean"] for m in lines],
                linestyle="--",
                marker="s",
                ms=3,
                color=handle.get_color(),
                label=f"p = {p:g} (personal models, mean)",
            )
        if scheme == "wor":
            for label, lines in controls.items():
                legend = f"control, p = 0.3: {label} (public model)"
                plot_accuracy(ax, lines, linestyle="-.", lw=1, label=legend)
        ax.axhline(majority, color="k", linestyle=":", lw=1, label=f"majority class ({majority:.3f})")
        ax.set_title(title)
        ax.set_xlabel("communication round")
        ax.grid(alpha=0.3)
        legend_below(ax, ncol=1)
    axes[0].set_ylabel("test accuracy (fraction correct)")
    fig.suptitle("000 Fig. 2: test accuracy over rounds for client participation p ∈ {0.1, 0.3, 0.7}")
    note = (
        f"Adult, N = 100 (one label per client), logistic regression, Q = 5, b = 5, ε_ℓ = 1, δ_ℓ = 1e-4, "
        f"C = 1, d_α = d_p = 0.5; η = {LEARNING_RATE:g}, γ = {GAMMA:g}, T = {rounds} "
        f"(η, γ, T not given in 000). ε: the run's composed ε at δ = {DELTA:g} (participation public to the "
        "server, persistent private state: no amplification by local sampling)."
        + scale_note(quick=quick, medium=medium, seed=seed)
    )
    png = save(fig, out / "ms_pafl_fig2.png", note=note)
    return {
        "files": [str(png), str(csv_path)],
        "rounds": rounds,
        **scale_fields(quick=quick, medium=medium, seed=seed),
        "majority_class_accuracy": majority,
        "results": results,
        "runs": summaries,
    }


def _result(method: str, summary: dict[str, Any], final: dict[str, Any]) -> dict[str, Any]:
    """A results row; ``final``: the last line with its diagnostics (personal accuracy: not covered by ε)."""
    return {
        "method": method,
        "final_accuracy": summary["final_accuracy"],
        "personal_accuracy_mean": final.get("personal_accuracy_mean"),
        "epsilon": summary["epsilon"],
        "delta": summary["delta"],
        "noise_multiplier": summary.get("noise", {}).get("noise_multiplier"),
        "published": None,
        "published_source": PUBLISHED_SOURCE,
    }


FIGURES = {"ms-pafl-fig2": fig2}
