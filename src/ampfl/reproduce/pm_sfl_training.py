"""Paper 003 (PM-SFL, arXiv:2509.14603): Table 1 (first row's setting) and its heterogeneous rows, trained.

Setting (FMNIST stand-in for 003's CIFAR-100/FEMNIST, which are not available offline): Fashion-MNIST split
over clients with Dirichlet(α = 0.3) label shares (003 Sec. 6.1), the GroupNorm split CNN of
:mod:`ampfl.fl.models.split_cnn` (3 blocks, split after block 2, as 003 splits ResNet-18 after its second of
four blocks), Adam (003 Sec. 6.3), batch 32, a share C of clients per round. Methods (``METHODS``):
Standalone, SplitFed, SplitFed-PM, PM-SFL with layer-level personalisation (the "LG-FedAvg" column's
mechanism applied to masks: the first bottom layer personal), PM-SFL (data-aware fine-grained selection),
LG-FedAvg (:mod:`ampfl.fl.split.lg_fedavg`: trained weights, first bottom block personal, the rest FedAvg)
and SplitFed-DP (:mod:`ampfl.fl.split.splitfed_dp`: noisy clipped smashed data + DP-SGD, record-level ε).
Every method gets the same client learning-rate grid and is reported at its best final accuracy (the grid
search itself is not accounted, as in 003). The accuracy is 003's: the mean over clients of each client's
accuracy on its own label distribution (``accuracy`` of the split algorithms).

``pm-sfl-hetero``: the system-heterogeneous rows' question (003 Sec. 6.6): clients split after block 1, 2
or 3 in equal shares (:mod:`ampfl.fl.split.hetero`), PM-SFL with and without the knowledge compensation of
Eq. 8 (and with personalisation), DepthFL (:mod:`ampfl.fl.split.depthfl`, the same depths; also on masks
and with DepthFL's bottleneck heads), on the same data and grid. Not reproduced here: HAR; FEMNIST and
CIFAR-100 only with a user path (``pm-sfl-table1 --dataset``, below).

``pm-sfl-attack`` (:mod:`ampfl.reproduce.pm_sfl_attack`) attacks the models of this setting.

``quick=True``: ``QUICK`` instead of ``FULL`` (fewer clients, rounds and local steps; a smaller grid).
``medium=True`` (``--medium``, several seeds): ``MEDIUM``, the quick model and clients with 60 rounds and the
grid {1e-4, 3e-4, 0.001, 0.01, 0.1, 0.3, 1, 3} for every method (003's Adam rate 1e-3 included; widened at
each edge a method chose: on {0.001 … 0.3} DepthFL chose 0.001 and the mask methods 0.3, on {3e-4 … 1}
PM-SFL chose 1 and SplitFed, whose accuracy is flat over the grid, 3e-4), 1000 test examples per client.
``seed``: the runs' seed (partition, initialisation, sampling, masks).

``pm-sfl-table1 --dataset NAME [--data-path P]`` (``DATASETS``): ``fmnist`` (default, above); ``femnist``,
003's natural writer partition (LEAF json at P, :mod:`ampfl.fl.data.femnist`; ``num_clients`` writers, 003
samples 190 in the full setting; each writer scored on its own test examples); ``fmnist_styles``, a STAND-IN
for FEMNIST when no path is given (:mod:`ampfl.fl.data.writer_styles`: Fashion-MNIST, IID labels, one fixed
rotation/shift/stroke style per client, scored on test images in its own style); ``cifar100``, 003's first
setting (pickle at P, Dirichlet α = 0.3, like ``fmnist``). Runs of another dataset go to ``OUT/<dataset>/``;
``pm-sfl-hetero`` and ``pm-sfl-attack`` take the same options.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Table 1 columns reproduced: label -> (algorithm, extra algorithm parameters).
METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "Standalone": ("standalone", {}),
    "SplitFed": ("splitfed", {}),
    "SplitFed-PM": ("splitfed_pm", {}),
    "PM-SFL (layer-level)": ("pm_sfl", {"personalization": "layer", "personal_layers": 1}),
    "PM-SFL": ("pm_sfl", {"personalization": "fine"}),
    "LG-FedAvg": ("lg_fedavg", {"personal_layers": 1}),
    "SplitFed-DP": ("splitfed_dp", {}),
}
#: The system-heterogeneous comparison (client i splits after block 1 + i mod 3).
HETERO_METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "PM-SFL adaptive depth, no compensation": ("pm_sfl_hetero", {"compensation": False}),
    "PM-SFL adaptive depth + compensation (Eq. 8)": ("pm_sfl_hetero", {"compensation": True}),
    "PM-SFL adaptive depth + compensation + personalisation": (
        "pm_sfl_hetero",
        {"compensation": True, "personalization": "fine"},
    ),
    "DepthFL": ("depthfl", {}),
    "DepthFL (probabilistic masks)": ("depthfl", {"masks": True}),
    "DepthFL (bottleneck heads)": ("depthfl", {"bottleneck": True}),
}
FULL: dict[str, Any] = {
    "num_clients": 100,
    "client_fraction": 0.1,
    "rounds": 300,
    "local_steps": 50,
    "evaluations": 10,
    "learning_rates": (1e-3, 1e-2, 1e-1),
    "eval_examples": 0,
    "eval_clients": 20,
    "channels": [16, 32, 32],
}
QUICK: dict[str, Any] = {
    "num_clients": 20,
    "client_fraction": 0.25,
    "rounds": 40,
    "local_steps": 10,
    "evaluations": 2,
    "learning_rates": (1e-1,),
    "eval_examples": 500,
    "eval_clients": 20,
    "channels": [8, 16, 16],
}
MEDIUM: dict[str, Any] = {
    **QUICK,
    "rounds": 60,
    "evaluations": 3,
    "learning_rates": (1e-4, 3e-4, 1e-3, 1e-2, 1e-1, 3e-1, 1.0, 3.0),
    "eval_examples": 1000,
}
#: 003 Table 1, FEMNIST row without system heterogeneity (the only image row whose six numbers map to the
#: six columns unambiguously in the recovered text; the CIFAR-100 row lists five). FMNIST is not in 003.
PUBLISHED = {
    "Standalone": 0.7431,
    "SplitFed": 0.7853,
    "SplitFed-DP": 0.7545,
    "SplitFed-PM": 0.6841,
    "LG-FedAvg": 0.7132,
    "PM-SFL": 0.8189,
}
PUBLISHED_SOURCE = "003 Table 1, FEMNIST row, no system heterogeneity (ResNet-18; not FMNIST: orderings)"
HETERO_PUBLISHED_SOURCE = (
    "003 Table 1, system-heterogeneous rows (ResNet-18 on CIFAR-100/FEMNIST; no FMNIST number: orderings)"
)
#: Claims compared by seed (``ampfl.reproduce._seeds.paired_interval``): (claim, minuend, subtrahend).
PAIRED: tuple[tuple[str, str, str], ...] = (
    ("003: PM-SFL beats SplitFed", "PM-SFL", "SplitFed"),
    ("003: PM-SFL beats SplitFed-PM (fine-grained personalisation)", "PM-SFL", "SplitFed-PM"),
    ("003: PM-SFL beats SplitFed-DP", "PM-SFL", "SplitFed-DP"),
    ("003: fine-grained beats layer-level personalisation", "PM-SFL", "PM-SFL (layer-level)"),
    ("003: PM-SFL beats LG-FedAvg", "PM-SFL", "LG-FedAvg"),
    ("ours: Standalone beats PM-SFL at this operating point", "Standalone", "PM-SFL"),
)
HETERO_PAIRED: tuple[tuple[str, str, str], ...] = (
    (
        "003 Eq. 8: knowledge compensation helps",
        "PM-SFL adaptive depth + compensation (Eq. 8)",
        "PM-SFL adaptive depth, no compensation",
    ),
    ("003: PM-SFL beats DepthFL", "PM-SFL adaptive depth + compensation (Eq. 8)", "DepthFL"),
    (
        "003: PM-SFL (personalised) beats DepthFL",
        "PM-SFL adaptive depth + compensation + personalisation",
        "DepthFL",
    ),
    (
        "PM-SFL beats DepthFL on masks (both train probabilistic masks)",
        "PM-SFL adaptive depth + compensation (Eq. 8)",
        "DepthFL (probabilistic masks)",
    ),
)
ALPHA = 0.3
BATCH = 32
C = 0.01
#: Split CNN options besides the setting's ``channels`` (003 splits after the 2nd of 4 ResNet blocks).
MODEL = {"groups": 4, "split_layer": 2}
#: ``pm-sfl-table1 --dataset`` choices -> (what it is, needs ``--data-path``).
DATASETS: dict[str, tuple[str, bool]] = {
    "fmnist": ("Fashion-MNIST, Dirichlet(0.3) labels", False),
    "fmnist_styles": ("STAND-IN for FEMNIST: Fashion-MNIST, one fixed writer style per client", False),
    "femnist": ("FEMNIST (LEAF), one client per writer", True),
    "cifar100": ("CIFAR-100, Dirichlet(0.3) labels", True),
}
#: Writers of the full FEMNIST setting (003 Sec. 6.1 samples 190); the quick one uses ``num_clients``.
FEMNIST_WRITERS = 190


def setting_of(*, quick: bool = False, medium: bool = False) -> dict[str, Any]:
    """``QUICK``, ``MEDIUM`` or ``FULL``."""
    return QUICK if quick else MEDIUM if medium else FULL


def pm_sfl_config(
    algorithm: str,
    extra: dict[str, Any],
    lr: float,
    s: dict[str, Any],
    dataset: str = "fmnist",
    data_path: str | None = None,
    clients: int | None = None,
    seed: int = 0,
) -> Any:
    """The run's config; for a natural partition (``fmnist_styles``, ``femnist``) the ``[partition]`` section
    only records the number of clients (the task is built by :func:`pm_sfl_task`)."""
    from ampfl.fl.config import parse_config
    from ampfl.reproduce import engine_section

    rounds = int(s["rounds"])
    params: dict[str, Any] = {
        "name": algorithm,
        "client_fraction": s["client_fraction"],
        "num_local_steps": s["local_steps"],
        "batch_size": BATCH,
        "learning_rate": lr,
        "eval_examples": s["eval_examples"],
        "eval_clients": s["eval_clients"],
        **extra,
    }
    if algorithm in ("pm_sfl", "splitfed_pm", "pm_sfl_hetero"):
        params["c"] = C
    if algorithm == "pm_sfl" or extra.get("personalization") == "fine":
        params["agreement_rounds"] = max(1, rounds // 10)  # 003 Sec. 6.5.1: 10% of the rounds
    return parse_config(
        {
            "seed": seed,
            "rounds": rounds,
            "eval_every": max(1, rounds // int(s["evaluations"])),
            "checkpoint_every": 0,
            "dataset": {"name": dataset, **({"path": str(data_path)} if data_path is not None else {})},
            "partition": {
                "num_clients": clients if clients is not None else s["num_clients"],
                # Dirichlet(α) label shares on the image sets, IID elsewhere (α applies to Dirichlet only)
                **(
                    {"scheme": "dirichlet", "alpha": ALPHA}
                    if dataset in ("fmnist", "cifar100")
                    else {"scheme": "iid"}
                ),
            },
            "model": {"name": "split_cnn", "options": {"channels": s["channels"], **MODEL}},
            "algorithm": params,
            "engine": engine_section(),  # reproduce --device
            "privacy": {"accountant": "rdp", "delta": 1e-5, "reproducible": True},  # an experiment
        }
    )


def _variant(extra: dict[str, Any]) -> str:
    """Sub-folder of a method variant (layer-level personalisation, compensation off)."""
    if extra.get("personalization") == "layer":
        return "layer"
    if extra.get("compensation") is False:
        return "no_compensation"
    if extra.get("masks"):
        return "masks"
    if extra.get("bottleneck"):
        return "bottleneck"
    if "compensation" in extra and extra.get("personalization") == "fine":  # adaptive depth, personalised
        return "personal"
    return ""


def pm_sfl_task(config: Any, figure: str, quick: bool = True) -> Any:
    """The task of ``config``'s dataset: a Dirichlet partition, or the natural one of ``fmnist_styles`` /
    ``femnist`` (one client per writer style / writer, each with its own test examples)."""
    from ampfl.fl.data import DataUnavailableError
    from ampfl.fl.run.experiment import build_task

    name, path = config.dataset.name, config.dataset.path
    if name not in DATASETS:
        raise ValueError(f"dataset must be one of {', '.join(DATASETS)}. Found {name!r}.")
    if DATASETS[name][1] and path is None:
        hint = " (without FEMNIST: --dataset fmnist_styles, a stated stand-in)" if name == "femnist" else ""
        raise ValueError(f"--dataset {name} needs --data-path, the folder of its files{hint}.")
    options = dict(config.model.options)
    try:
        if name == "fmnist_styles":
            from ampfl.fl.data.writer_styles import load_fmnist_styles

            natural = load_fmnist_styles(config.partition.num_clients, seed=config.seed)
        elif name == "femnist":
            from ampfl.fl.data.femnist import load_femnist

            writers = config.partition.num_clients if quick else FEMNIST_WRITERS
            natural = load_femnist(path, writers=writers, seed=config.seed)
        else:
            return build_task(config)
    except DataUnavailableError as exc:
        hint = " (try: ampfl data fetch fmnist)" if name.startswith("fmnist") else ""
        raise ValueError(f"{figure} needs {name}: {exc}{hint}") from None
    return natural.task(config.model.name, options)


def pm_sfl_figure(body: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """A figure function of this module over ``body``: the options every pm-sfl figure takes (module
    docstring), ``dataset`` checked against :data:`DATASETS` before ``body(out, quick, dataset, data_path,
    medium, seed)`` runs."""

    def figure(
        out: Path,
        *,
        quick: bool = False,
        dataset: str = "fmnist",
        data_path: str | None = None,
        medium: bool = False,
        seed: int = 0,
    ) -> dict[str, Any]:
        if dataset not in DATASETS:
            raise ValueError(f"dataset must be one of {', '.join(DATASETS)}. Found {dataset!r}.")
        return body(out, quick, dataset, data_path, medium, seed)

    figure.__name__ = figure.__qualname__ = body.__name__
    figure.__doc__ = body.__doc__
    return figure


def paired_claims(pairs: tuple[tuple[str, str, str], ...], methods: dict[str, Any]) -> list[dict[str, str]]:
    """The claims of ``pairs`` (:data:`PAIRED`, :data:`HETERO_PAIRED`) whose two rows are in ``methods``."""
    return [
        {"claim": claim, "minuend": a, "subtrahend": b}
        for claim, a, b in pairs
        if a in methods and b in methods
    ]


def _comparison(
    methods: Callable[[], dict[str, tuple[str, dict[str, Any]]]],
    stem: str,
    title: str,
    doc: str,
    published: tuple[dict[str, float], str, tuple[tuple[str, str, str], ...]],
) -> Callable[..., dict[str, Any]]:
    """The figure function of one comparison (``pm-sfl-table1``, ``pm-sfl-hetero``): the table ``methods()``
    (read when the figure runs) trained on the ``dataset``, ``title`` with ``{data}`` for what it is;
    ``published``: the paper's numbers by label, their source, and the claims compared by seed."""

    def body(
        out: Path, quick: bool, dataset: str, data_path: str | None, medium: bool, seed: int
    ) -> dict[str, Any]:
        heading = title.format(data=DATASETS[dataset][0])
        table = methods()
        summary = _compare(
            out,
            quick,
            table,
            stem,
            heading,
            published[:2],
            dataset=dataset,
            data_path=data_path,
            medium=medium,
            seed=seed,
        )
        return {**summary, "paired": paired_claims(published[2], table)}

    body.__name__ = stem.removeprefix("pm_sfl_")
    body.__doc__ = doc
    return pm_sfl_figure(body)


table1 = _comparison(
    lambda: METHODS,
    "pm_sfl_table1",
    "003 Table 1 (homogeneous split) on {data}",
    """003 Table 1, no system heterogeneity: Dirichlet α = 0.3 on Fashion-MNIST (default) or CIFAR-100, or
    the natural writer partition (FEMNIST, or its stand-in ``fmnist_styles``); see the module docstring.""",
    (PUBLISHED, PUBLISHED_SOURCE, PAIRED),
)
hetero = _comparison(
    lambda: HETERO_METHODS,
    "pm_sfl_hetero",
    "003 Sec. 6.6: adaptive split depth, knowledge compensation (Eq. 8), {data}",
    """003 Table 1, system-heterogeneous setting (split after block 1, 2 or 3, equal shares): PM-SFL with and
    without the layer-wise knowledge compensation of Eq. 8, and DepthFL; ``dataset`` as :func:`table1`.""",
    ({}, HETERO_PUBLISHED_SOURCE, HETERO_PAIRED),
)


def _compare(
    out: Path,
    quick: bool,
    methods: dict[str, tuple[str, dict[str, Any]]],
    stem: str,
    title: str,
    published: tuple[dict[str, float], str],
    *,
    dataset: str = "fmnist",
    data_path: str | None = None,
    medium: bool = False,
    seed: int = 0,
) -> dict[str, Any]:
    from ampfl.fl.run.experiment import run_or_reuse
    from ampfl.fl.run.folder import read_lines
    from ampfl.io import atomic_write_csv
    from ampfl.reproduce._plot import legend_below, new_figure, plot_accuracy, save, scale_fields, scale_note

    s = setting_of(quick=quick, medium=medium)
    grid = tuple(s["learning_rates"])
    task = pm_sfl_task(
        pm_sfl_config("splitfed", {}, grid[0], s, dataset, data_path, seed=seed),
        stem.replace("_", "-"),
        quick or medium,
    )
    n = task.num_clients
    if dataset != "fmnist":
        out = out / dataset
    rows: list[list[Any]] = []
    runs: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    fig, ax = new_figure(width=6.5, height=4.2)
    for label, (algorithm, extra) in methods.items():
        best: tuple[float, dict[str, Any], list[dict[str, Any]]] | None = None
        for lr in grid:
            folder = out / algorithm / _variant(extra) / f"lr{lr:g}"
            summary = run_or_reuse(
                pm_sfl_config(algorithm, extra, lr, s, dataset, data_path, n, seed=seed),
                folder,
                task=task,
                label=f"{label} η={lr:g}",
            )
            lines = read_lines(folder, diagnostics=True)
            run = {
                "method": label,
                "algorithm": algorithm,
                "learning_rate": lr,
                # 003's metric: clients' accuracy on their own distributions (a diagnostic, diagnostics.jsonl)
                "final_accuracy": lines[-1]["accuracy"],
                "global_accuracy": lines[-1].get("global_accuracy"),
                "epsilon": summary["epsilon"],
                "delta": summary["delta"],
                # SplitFed-DP's DP-SGD z (its smashed-data z is the same setting); 0 for the noiseless methods
                "noise_multiplier": float(summary["params"].get("noise_multiplier") or 0.0),
                "wall_seconds": summary.get("wall_seconds"),
                "published": published[0].get(label),
                "published_source": published[1],
            }
            runs.append(run)
            rows.extend([label, lr, m["round"], m["accuracy"], m["epsilon"]] for m in lines)
            if best is None or run["final_accuracy"] > best[0]:
                best = (run["final_accuracy"], run, lines)
        assert best is not None
        _, run, lines = best
        results.append(run)
        plot_accuracy(ax, lines, marker="o", ms=3, label=f"{label} (best η = {run['learning_rate']:g})")
    ax.set_xlabel("communication round")
    ax.set_ylabel("mean accuracy on the clients' own distributions")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    legend_below(ax, ncol=2, fontsize=8)
    data_note = {
        "fmnist": "Fashion-MNIST instead of CIFAR-100",
        "fmnist_styles": "Fashion-MNIST with per-client styles: a STAND-IN for FEMNIST",
        "femnist": "FEMNIST, one client per writer",
        "cifar100": "CIFAR-100",
    }[dataset]
    note = (
        f"{data_note}. N = {n}, C = {s['client_fraction']}, "
        f"{s['rounds']} rounds × {s['local_steps']} local steps of batch {BATCH}, Adam, c = {C}, "
        f"split CNN {s['channels']} split after block {MODEL['split_layer']}; each method at its best "
        f"client η of {list(grid)}." + scale_note(quick=quick, medium=medium, seed=seed)
    )
    png = save(fig, out / f"{stem}.png", note=note)
    csv_path = atomic_write_csv(
        out / f"{stem}.csv", ["method", "learning_rate", "round", "accuracy", "epsilon"], rows
    )
    return {
        "files": [str(png), str(csv_path)],
        **scale_fields(quick=quick, medium=medium, seed=seed),
        "dataset": dataset,
        "dataset_source": task.dataset.source,
        "setting": {k: (list(v) if isinstance(v, tuple) else v) for k, v in s.items()} | {"num_clients": n},
        "results": results,
        "runs": runs,
    }


FIGURES = {"pm-sfl-table1": table1, "pm-sfl-hetero": hetero}
