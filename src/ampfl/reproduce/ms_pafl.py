"""Privacy-side figures of paper 000 (MS-PAFL, arXiv:2509.25906v1): Figs 3–6 as PNG + CSV.

Each figure draws, per curve: the paper's own formula (solid: Corollary 1, Theorem 4 on Corollary 1, or
Theorem 3 with the C.8 constant, labelled "as printed, not sound"); the ``amplified`` analysis (dashed:
amplification by local subsampling, valid only if the private submodel carried nothing from earlier rounds,
which Eq. 14 does not give); and ampfl's recommended ``public-participation`` analysis (dotted with markers:
sound with the persistent private submodel). All at the same δ. The CSV adds the sound ``first-use`` bound
(:mod:`ampfl.accounting.ms_pafl`). Parameters the paper does not state for a figure are chosen here and
written on the plot and into the CSV. Fixed throughout (paper, Sec. V-B): N = 100 clients, β = 0.25
(δ' = 2e^{−12.5} ≈ 7.5e-6), δ_ℓ = 1e-4, C = 1, Adult split evenly (|D_i| = ⌊32561/100⌋ = 325), Q = 5.
Training-accuracy Fig. 2 belongs to the simulator and is not registered here.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ampfl.accounting import ms_pafl as acc
from ampfl.io import atomic_write_csv
from ampfl.reproduce._plot import NOT_SOUND

NUM_CLIENTS = 100
BETA = 0.25
DELTA_LOCAL = 1e-4
DELTA_TILDE = 1e-4
CLIP = 1.0
DATASET_SIZE = 32561 // NUM_CLIENTS
LOCAL_STEPS = 5
ROUNDS = (1, 2, 5, 10, 20, 30, 50, 75, 100, 150, 200)
#: Round counts at which the (slower) accountant-based analyses are evaluated; tests shrink it.
TIGHT_ROUNDS: tuple[int, ...] = (1, 10, 50, 100, 200)
EPS_LOCAL_GRID = tuple(float(x) for x in np.round(np.linspace(0.05, 1.0, 20), 4))

_COMMON = (
    f"N={NUM_CLIENTS}, beta={BETA} (delta'={acc.hoeffding_delta(beta=BETA, num_clients=NUM_CLIENTS):.2e}), "
    f"delta_l={DELTA_LOCAL:g}, C={CLIP:g}, |D_i|={DATASET_SIZE}, Q={LOCAL_STEPS}"
)
_LEGEND = (
    "solid: paper's formula as printed (fails ampfl's check, docs/ms_pafl.md); dashed: amplified by local "
    "subsampling (not sound with Eq. 14's persistent private submodel); dotted+markers: ampfl's recommended "
    "public-participation analysis (sound); all at the same delta"
)
AMPLIFIED_LABEL = "amplified, not sound with Eq. 14"
RECOMMENDED_LABEL = "public-participation, sound"


def _two_panels() -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11.0, 4.8))
    return fig, axes


def _axes(ax: Any, xlabel: str, ylabel: str, title: str) -> None:
    """One panel's labels and title, ε on a log scale."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_yscale("log")
    ax.set_title(title)


def _finish(
    fig: Any, out: Path, name: str, text: tuple[str, str], table: tuple[list[str], list[Any]], shows: str
) -> dict[str, Any]:
    """Save the figure ``name``.png (``text``: note, title) and its ``table`` (header, rows) as .csv."""
    from ampfl.reproduce._plot import legend_below, save

    note, title = text
    for ax in fig.axes:
        legend_below(ax, ncol=1)
    fig.suptitle(title, fontsize=11)
    png = save(fig, out / f"{name}.png", note=note)
    header, rows = table
    csv = atomic_write_csv(out / f"{name}.csv", header, rows)
    return {"files": [str(png), str(csv)], "shows": shows, "rows": len(rows)}


def _nm(eps_local: float) -> float:
    return acc.ldp_noise_multiplier(eps_local=eps_local, delta_local=DELTA_LOCAL)


def _sound_and_amplified(p: float, q: float, eps_local: float, rounds: int, delta: float) -> list[float]:
    """[amplified, public-participation (recommended), first-use] ε at ``delta`` after ``rounds`` rounds."""
    z = _nm(eps_local)
    return [
        acc.amplified_epsilon(
            participation=p, sampling_rate=q, noise_multiplier=z, rounds=rounds, delta=delta
        ),
        acc.public_participation_epsilon(participation=p, noise_multiplier=z, rounds=rounds, delta=delta),
        acc.first_use_epsilon(
            noise_multiplier=z, participation=p, sampling_rate=q, rounds=rounds, delta=delta
        ),
    ]


def _plot_three(
    ax: Any, label: str, xs: Any, paper: list[float], xs_sound: Any, sound: list[list[float]]
) -> None:
    (line,) = ax.plot(xs, paper, label=f"{label} (paper, {NOT_SOUND})")
    color = line.get_color()
    ax.plot(xs_sound, [s[0] for s in sound], "--", color=color, label=f"{label} ({AMPLIFIED_LABEL})")
    ax.plot(
        xs_sound,
        [s[1] for s in sound],
        ":",
        marker="o",
        ms=3,
        color=color,
        label=f"{label} ({RECOMMENDED_LABEL})",
    )


_SOUND_COLUMNS = ["epsilon_amplified", "epsilon_recommended", "epsilon_first_use"]


# ----------------------------------------------------------------------------------------------------------
def _round_cdp(p: float, q: float, eps_local: float) -> tuple[float, float]:
    """The paper's single-round (ε_c^t, δ_c^t) of the global model (Cor. 1 via Thm 2), fixed N, β, δ_ℓ."""
    return acc.theorem2_round_cdp(
        participation=p,
        sampling_rate=q,
        eps_local=eps_local,
        delta_local=DELTA_LOCAL,
        num_clients=NUM_CLIENTS,
        beta=BETA,
    )


def fig3(out: Path) -> dict[str, Any]:
    """Fig. 3: single-round ε_c^t (Cor. 1) vs ε_ℓ ∈ (0, 1]; (a) p ∈ {0.1, 0.5, 1} at q = 0.2, (b) q ∈ {0.1,
    0.3, 0.5} at p = 0.5 (q and p of the other panel are not stated in the paper: chosen here)."""
    panels = {"a": [(p, 0.2) for p in (0.1, 0.5, 1.0)], "b": [(0.5, q) for q in (0.1, 0.3, 0.5)]}
    rows: list[list[Any]] = []
    fig, axes = _two_panels()
    for ax, (panel, combos) in zip(axes, panels.items(), strict=True):
        for p, q in combos:
            paper, sound = [], []
            for el in EPS_LOCAL_GRID:
                eps_c, delta_c = _round_cdp(p, q, el)
                others = _sound_and_amplified(p, q, el, 1, delta_c)
                paper.append(eps_c)
                sound.append(others)
                rows.append([panel, p, q, el, eps_c, delta_c, *others])
            label = f"p={p:g}" if panel == "a" else f"q={q:g}"
            _plot_three(ax, label, EPS_LOCAL_GRID, paper, EPS_LOCAL_GRID, sound)
        varies = "q = 0.2, p varies" if panel == "a" else "p = 0.5, q varies"
        _axes(ax, "local privacy level ε_ℓ (nats)", "single-round ε_c^t of the global model (nats)",
              f"({panel}) {varies}")  # fmt: skip
    note = (
        f"MS-PAFL Fig. 3 (privacy of the global model per round). {_LEGEND}. q = 0.2 in (a) and "
        f"p = 0.5 in (b) are ampfl's choices (not stated in 000). {_COMMON}."
    )
    title = "000 Fig. 3: single-round ε_c^t of the global model vs ε_ℓ"
    header = ["panel", "p", "q", "eps_local", "epsilon_round_paper", "delta_round_paper", *_SOUND_COLUMNS]
    shows = "eps_c^t vs eps_l: Cor. 1, amplified, sound"
    return _finish(fig, out, "ms-pafl-fig3", (note, title), (header, rows), shows)


# ----------------------------------------------------------------------------------------------------------
def _global_total(p: float, q: float, eps_local: float, rounds: int) -> tuple[float, float]:
    eps_c, delta_c = _round_cdp(p, q, eps_local)
    return acc.theorem4_strong_composition(
        epsilon_round=eps_c, delta_round=delta_c, rounds=rounds, delta_tilde=DELTA_TILDE
    )


def _total_panel(
    ax: Any, rows: list[list[Any]], panel: str, label: str, p: float, q: float, eps_local: float
) -> None:
    paper = [_global_total(p, q, eps_local, t) for t in ROUNDS]
    sound_t, sound = [], []
    for t, (eps_total, delta_total) in zip(ROUNDS, paper, strict=True):
        others = [math.nan] * 3
        if t in TIGHT_ROUNDS:
            others = _sound_and_amplified(p, q, eps_local, t, delta_total)
            sound_t.append(t)
            sound.append(others)
        rows.append([panel, label, p, q, eps_local, t, eps_total, delta_total, *others])
    _plot_three(ax, label, ROUNDS, [e for e, _ in paper], sound_t, sound)


_TOTAL_LABEL = "total ε_c^T of the global model (nats)"
_TOTAL_HEADER = [
    "panel",
    "curve",
    "p",
    "q",
    "eps_local",
    "rounds",
    "epsilon_total_paper",
    "delta_total",
    *_SOUND_COLUMNS,
]


def _finish_total(
    fig: Any, out: Path, text: tuple[int, str, str], rows: list[list[Any]], varies: tuple[str, str] = ("", "")
) -> dict[str, Any]:
    """:func:`_finish` for Figs. 4 and 6, the total ε_c^T of the global model over T: ``text`` is the figure's
    number, title and assumed settings; ``varies``, what else the figure varies, in its note and in its
    ``shows``."""
    number, title, settings = text
    note = (
        f"MS-PAFL Fig. {number} (total privacy of the global model{varies[0]}). {_LEGEND}; "
        f"delta = T*delta_c + delta~. {settings}, delta~={DELTA_TILDE:g} (assumed). {_COMMON}."
    )
    shows = f"eps_c^T vs T{varies[1]}: Thm 4, amplified, sound"
    return _finish(fig, out, f"ms-pafl-fig{number}", (note, title), (_TOTAL_HEADER, rows), shows)


def fig4(out: Path) -> dict[str, Any]:
    """Fig. 4: ε̄_c^T (Thm 4 on Cor. 1) vs T, WOR; (a) p ∈ {0.1, 0.5, 1} at q = 0.2, (b) q ∈ {0.1, 0.3, 0.5}
    at p = 0.5; ε_ℓ = 1 and δ̃ = 1e-4 chosen here (not stated in the paper)."""
    eps_local = 1.0
    rows: list[list[Any]] = []
    fig, axes = _two_panels()
    for p in (0.1, 0.5, 1.0):
        _total_panel(axes[0], rows, "a", f"p={p:g}", p, 0.2, eps_local)
    for q in (0.1, 0.3, 0.5):
        _total_panel(axes[1], rows, "b", f"q={q:g}", 0.5, q, eps_local)
    for ax, title in zip(axes, ("(a) q = 0.2, p varies", "(b) p = 0.5, q varies"), strict=True):
        _axes(ax, "rounds T", _TOTAL_LABEL, title)
    title = "000 Fig. 4: total ε_c^T of the global model vs rounds (WOR)"
    return _finish_total(fig, out, (4, title, f"eps_l={eps_local:g}"), rows)


# ----------------------------------------------------------------------------------------------------------
def fig5(out: Path) -> dict[str, Any]:
    """Fig. 5: client total ε̄_i^T vs T, WOR vs WR vs DP-FedAvg (no amplification); (a) ε_ℓ = 0.1, (b) ε_ℓ = 1.

    b = 5 and p = 0.5 chosen here. Paper curves: Thm 3 with the C.8 constant (δ = δ_ℓ); paper baseline: Thm 4
    form of T rounds of (ε_ℓ, δ_ℓ) with δ̃ = δ_ℓ (the paper does not print its baseline formula). ampfl: the
    amplified and the recommended analyses at δ = δ_ℓ; baseline: the T-fold Gaussian, i.e. the recommended
    analysis with p = 1 (every round participated and public).
    """
    p, batch = 0.5, 5
    rows: list[list[Any]] = []
    fig, axes = _two_panels()
    header = ["panel", "eps_local", "curve", "q", "rounds", "epsilon_paper", *_SOUND_COLUMNS]
    for ax, (panel, eps_local) in zip(axes, (("a", 0.1), ("b", 1.0)), strict=True):
        for scheme in acc.SAMPLING_SCHEMES:
            q = acc.sampling_rate(
                batch_size=batch, dataset_size=DATASET_SIZE, local_steps=LOCAL_STEPS, scheme=scheme
            )
            paper = [
                acc.theorem3_client_total(
                    participation=p,
                    sampling_rate=q,
                    eps_local=eps_local,
                    delta_local=DELTA_LOCAL,
                    rounds=t,
                    clip=CLIP,
                )
                for t in ROUNDS
            ]
            tt, sound = [], []
            for t, e in zip(ROUNDS, paper, strict=True):
                others = [math.nan] * 3
                if t in TIGHT_ROUNDS:
                    others = _sound_and_amplified(p, q, eps_local, t, DELTA_LOCAL)
                    tt.append(t)
                    sound.append(others)
                rows.append([panel, eps_local, scheme, q, t, e, *others])
            _plot_three(ax, f"{scheme.upper()} q={q:.4f}", ROUNDS, paper, tt, sound)
        base = [
            acc.theorem4_strong_composition(
                epsilon_round=eps_local, delta_round=DELTA_LOCAL, rounds=t, delta_tilde=DELTA_LOCAL
            )[0]
            for t in ROUNDS
        ]
        base_sound = [
            acc.public_participation_epsilon(
                participation=1.0, noise_multiplier=_nm(eps_local), rounds=t, delta=DELTA_LOCAL
            )
            for t in ROUNDS
        ]
        (line,) = ax.plot(ROUNDS, base, label="DP-FedAvg, no amplification (strong composition, Thm 4 form)")
        ax.plot(ROUNDS, base_sound, ":", color=line.get_color(), label="DP-FedAvg (T-fold Gaussian, sound)")
        for t, e, es in zip(ROUNDS, base, base_sound, strict=True):
            rows.append([panel, eps_local, "dp-fedavg", 1.0, t, e, math.nan, es, math.nan])
        _axes(ax, "rounds T", "client's total ε_i^T (nats)", f"({panel}) ε_ℓ = {eps_local:g}")
    note = (
        f"MS-PAFL Fig. 5 (client's total privacy loss). {_LEGEND}; all at delta = delta_l. "
        f"b={batch}, p={p:g} (assumed). Thm 3 uses the C.8 constant (paper's asymptotic form). {_COMMON}."
    )
    title = "000 Fig. 5: client's total ε_i^T vs rounds, WOR vs WR vs DP-FedAvg"
    return _finish(fig, out, "ms-pafl-fig5", (note, title), (header, rows), "eps_i^T vs T, WOR/WR/DP-FedAvg")


# ----------------------------------------------------------------------------------------------------------
def fig6(out: Path) -> dict[str, Any]:
    """Fig. 6: global total ε̄_c^T vs T for b ∈ {1, 5, 13}; (a) WOR, (b) WR. p = 0.5, ε_ℓ = 1 chosen here."""
    p, eps_local = 0.5, 1.0
    rows: list[list[Any]] = []
    fig, axes = _two_panels()
    for ax, scheme in zip(axes, acc.SAMPLING_SCHEMES, strict=True):
        for batch in (1, 5, 13):
            q = acc.sampling_rate(
                batch_size=batch, dataset_size=DATASET_SIZE, local_steps=LOCAL_STEPS, scheme=scheme
            )
            _total_panel(ax, rows, scheme, f"b={batch} (q={q:.4f})", p, q, eps_local)
        _axes(ax, "rounds T", _TOTAL_LABEL, f"({'a' if scheme == 'wor' else 'b'}) {scheme.upper()}")
    title = "000 Fig. 6: total ε_c^T of the global model vs rounds for b ∈ {1, 5, 13}"
    text = (6, title, f"p={p:g}, eps_l={eps_local:g}")
    return _finish_total(fig, out, text, rows, (" vs batch size", " for b in {1,5,13}, WOR/WR"))


FIGURES = {"ms-pafl-fig3": fig3, "ms-pafl-fig4": fig4, "ms-pafl-fig5": fig5, "ms-pafl-fig6": fig6}
