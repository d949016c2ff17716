"""Paper figures and tables, one module per paper, listed by name in a static table.

:data:`FIGURES` maps each figure name to ``(module, attribute, help)``; the module is imported only when
the figure runs (:func:`run_figure`), so building the ``ampfl`` parser, which lists the names and help
lines, imports none of the figure modules (and so neither scipy, dp-accounting, matplotlib nor torch).

Each figure module (names not starting with ``_``) also defines ``FIGURES: dict[str, Callable[[Path],
dict]]`` with the same names (``tests/cli/test_startup.py`` checks that the two agree). A figure function
writes its PNG and CSV files into the given folder and returns a JSON-able dict with at least ``files``
(the paths written). A training figure also accepts ``quick: bool`` (``ampfl reproduce NAME --quick``: a
reduced setting, minutes on 2 cores, meant to show the same ordering as the full run), ``medium: bool``
(``--medium``: the paper's protocol at reduced size, run for several seeds, :mod:`ampfl.reproduce._seeds`)
and ``seed: int`` (the runs' seed), and returns
``results``: one object per method with ``method``, ``final_accuracy``, ``epsilon``, ``delta`` and
``noise_multiplier``. Modules keep module-level imports light (stdlib, numpy, ampfl accounting);
matplotlib and torch are imported inside the functions (see :mod:`ampfl.reproduce._plot`).
"""

from __future__ import annotations

import contextvars
import importlib
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

FigureFunction = Callable[..., dict[str, Any]]


class FigureEntry(NamedTuple):
    """Where a figure function lives (``ampfl.reproduce.<module>.<attribute>``) and its one-line help."""

    module: str
    attribute: str
    help: str


#: Figure name -> (module, attribute, help). Paper numbers: 000 MS-PAFL, 001 GDP-Fed, 002 Dong et al.
#: (model splitting / BIS), 004 Hasircioglu & Gunduz (random check-in).
FIGURES: dict[str, FigureEntry] = {
    "accounting-demo": FigureEntry(
        "accounting_demo", "run_accounting_demo", "004 Sec. 6 table and Fig. 1 curves (no training)"
    ),
    "dong-fig1": FigureEntry(
        "dong", "fig1", "002 Fig. 1: epsilon over steps, model split (Thm 3.4) vs Gaussian"
    ),
    "dong-fig2": FigureEntry("dong", "fig2", "002 Fig. 2: RDP over alpha, BIS (both bounds) vs Poisson"),
    "dong-fig3": FigureEntry("dong", "fig3", "002 Fig. 3: epsilon over iterations per epoch, BIS vs Poisson"),
    "dong-table1": FigureEntry("dong", "table1", "002 Table 1: model-split sigma for d = 3, 8"),
    "dong-credit": FigureEntry(
        "dong_credit", "credit", "002: the model split's noise credit against sigma/C (sound analyses)"
    ),
    "dong-table1-training": FigureEntry(
        "dong_training", "table1_training", "002 Table 1 as training: split/BIS vs DP-SGD (train extra)"
    ),
    "dong-table1-regime": FigureEntry(
        "dong_training", "table1_regime", "002 Table 1 as training at 002's q = 0.25 (train extra)"
    ),
    "gdpfed-fig1": FigureEntry("gdpfed", "figure1", "001 Fig. 1: optimal group sampling rates vs epsilon_3"),
    "gdpfed-table2": FigureEntry(
        "gdpfed_training", "table2", "001 Table II/III, Fig. 2: GDPFed(+) vs DP-FedAvg training (train extra)"
    ),
    "gdpfed-shakespeare": FigureEntry(
        "gdpfed_training", "shakespeare", "001 Table II, Shakespeare column: char GRU per role (train extra)"
    ),
    "hasircioglu-fig1": FigureEntry("hasircioglu", "fig1", "004 Fig. 1: delta vs epsilon"),
    "hasircioglu-fig2": FigureEntry("hasircioglu", "fig2", "004 Fig. 2: epsilon vs sigma"),
    "hasircioglu-fig3": FigureEntry("hasircioglu", "fig3", "004 Fig. 3: delta vs sigma"),
    "hasircioglu-fig5": FigureEntry("hasircioglu", "fig5", "004 Fig. 5: epsilon vs q with p*q fixed"),
    "hasircioglu-fig6": FigureEntry(
        "hasircioglu_training", "fig6", "004 Fig. 6: training, many clients with small datasets (train extra)"
    ),
    "hasircioglu-fig7": FigureEntry(
        "hasircioglu_training", "fig7", "004 Fig. 7: training, few clients with large datasets (train extra)"
    ),
    "hasircioglu-sec6": FigureEntry("hasircioglu", "section6", "004 Sec. 6 table: sigma per analysis"),
    "ms-pafl-fig2": FigureEntry(
        "ms_pafl_training", "fig2", "000 Fig. 2: accuracy over rounds, WOR and WR (train extra)"
    ),
    "ms-pafl-fig3": FigureEntry(
        "ms_pafl", "fig3", "000 Fig. 3: single-round epsilon (Cor. 1) vs local epsilon"
    ),
    "ms-pafl-fig4": FigureEntry("ms_pafl", "fig4", "000 Fig. 4: total epsilon (Thm 4) vs rounds"),
    "ms-pafl-fig5": FigureEntry(
        "ms_pafl", "fig5", "000 Fig. 5: client total epsilon, WOR vs WR vs DP-FedAvg"
    ),
    "ms-pafl-fig6": FigureEntry("ms_pafl", "fig6", "000 Fig. 6: global total epsilon for b = 1, 5, 13"),
    "pm-sfl-attack": FigureEntry(
        "pm_sfl_attack", "attack", "003 Fig. 5: smashed-data attack, SplitFed vs PM-SFL (train extra)"
    ),
    "pm-sfl-hetero": FigureEntry(
        "pm_sfl_training", "hetero", "003 Table 1 hetero rows: adaptive split depth, Eq. 8 (train extra)"
    ),
    "pm-sfl-sweep": FigureEntry(
        "pm_sfl_sweep", "sweep", "003: why Standalone leads, clients x data per client x width (train extra)"
    ),
    "pm-sfl-table1": FigureEntry(
        "pm_sfl_training", "table1", "003 Table 1: split FL accuracy, Dirichlet FMNIST (train extra)"
    ),
}


#: ``ampfl reproduce --device``: the device of every run of the figure being produced (None: the default).
_DEVICE: contextvars.ContextVar[str | None] = contextvars.ContextVar("reproduce_device", default=None)


def engine_section() -> dict[str, Any]:
    """The ``[engine]`` table of a reproduction's runs: ``device`` when ``reproduce --device`` gave one."""
    device = _DEVICE.get()
    return {} if device is None else {"device": device}


def figure_device() -> str | None:
    """The device ``reproduce --device`` asked for (None: the engine's default), for figures that build
    their engine themselves."""
    return _DEVICE.get()


def figure_names() -> list[str]:
    """Names accepted by ``ampfl reproduce`` (no figure module is imported)."""
    return sorted(FIGURES)


def figure_help(name: str) -> str:
    """The one-line help of figure ``name`` (no figure module is imported)."""
    return FIGURES[name].help


def figure_function(name: str) -> FigureFunction:
    """Import the module of figure ``name`` and return its figure function."""
    if name not in FIGURES:
        raise ValueError(f"NAME must be one of {', '.join(figure_names())}. Found {name!r}.")
    entry = FIGURES[name]
    module = importlib.import_module(f"{__name__}.{entry.module}")
    function: FigureFunction = getattr(module, entry.attribute)
    return function


def has_quick(function: FigureFunction) -> bool:
    """Whether a figure function has a reduced setting (a ``quick`` keyword)."""
    return "quick" in inspect.signature(function).parameters


def has_medium(function: FigureFunction) -> bool:
    """Whether a figure function has a medium setting and takes a seed (``medium`` and ``seed`` keywords)."""
    parameters = inspect.signature(function).parameters
    return "medium" in parameters and "seed" in parameters


def run_figure(
    name: str,
    out: Path,
    *,
    quick: bool = False,
    medium: bool = False,
    seeds: int | None = None,
    device: str | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Produce figure ``name`` into folder ``out``; returns the figure's summary dict.

    ``quick`` runs a training figure's reduced setting; figures without one (the accounting figures take
    seconds) run as they are, and the result says ``"quick": false``. ``medium`` runs the medium setting
    for ``seeds`` seeds (default 3) into ``out/seed<s>`` and returns mean ± std per row
    (:func:`ampfl.reproduce._seeds.run_seeds`); ``seeds`` without ``medium`` runs the chosen setting (quick
    or full) for that many seeds. ``device`` (``--device``) is the ``[engine] device`` of every training
    run (default: the engine's, ``auto``). ``options`` (e.g. ``dataset``, ``data_path``; ``None`` values are
    dropped) go to figures whose function takes them.

    Raises:
        ValueError: an option the figure does not take; ``quick`` with ``medium``; ``medium`` or ``seeds``
            for a figure without seeds; ``seeds`` outside [1, 20].
    """
    if quick and medium:
        raise ValueError("--medium and --quick are mutually exclusive: give one of them.")
    function = figure_function(name)
    if (medium or seeds is not None) and not has_medium(function):
        flag = "--medium" if medium else "--seeds"
        raise ValueError(f"{flag} applies to the training figures only; {name} has no seeds.")
    if seeds is not None:
        from ampfl.reproduce._seeds import check_seeds

        check_seeds(seeds)
    if device is not None:
        if not has_quick(function):
            raise ValueError(f"--device applies to the training figures only; {name} trains nothing.")
        from ampfl.fl.engine.device import resolve_device

        resolve_device(device, setting="--device")
    token = _DEVICE.set(device)
    try:
        return _run(name, function, out, quick=quick, medium=medium, seeds=seeds, options=options)
    finally:
        _DEVICE.reset(token)


def _run(
    name: str,
    function: FigureFunction,
    out: Path,
    *,
    quick: bool,
    medium: bool,
    seeds: int | None,
    options: dict[str, Any],
) -> dict[str, Any]:
    given = {key: value for key, value in options.items() if value is not None}
    for key in given:
        if key not in inspect.signature(function).parameters:
            raise ValueError(f"--{key.replace('_', '-')} is not an option of figure {name}.")
    out.mkdir(parents=True, exist_ok=True)
    if quick and has_quick(function):
        given["quick"] = True
    if medium or seeds is not None:
        from ampfl.reproduce._seeds import run_seeds

        if medium:
            given["medium"] = True
        result = run_seeds(function, out, 3 if seeds is None else seeds, given)
    else:
        result = dict(function(out, **given))
    result.setdefault("figure", name)
    result.setdefault("quick", False)
    result["scale"] = "medium" if medium else "quick" if result["quick"] else "full"
    return result
