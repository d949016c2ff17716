"""Figures: for each mechanism, ε(δ) and the noise for a target ε, RDP vs PLD vs the exact (or
explicit-dataset) value, one PNG per mechanism in docs/figures/ and a ratio table on stdout.

Extend it with one :class:`Mechanism` entry in :data:`MECHANISMS` (an event factory z ↦ event, the setting,
and optionally a :class:`Reference` curve). The accountants are ampfl's own (``make_accountant``), composed
``steps`` times; the noise panel uses the one :func:`ampfl.accounting.calibrate.calibrate`.

    PYTHONPATH=src MPLBACKEND=Agg python bench/accounting_figures.py [--only SLUG ...] [--out docs/figures]
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import stats

from ampfl.accounting.accountants import make_accountant
from ampfl.accounting.accountants.pld import PLD_DISCRETIZATION
from ampfl.accounting.audit.random_checkin_pld import explicit_epsilon, explicit_pair_pld, refined_pld
from ampfl.accounting.calibrate import calibrate, calibrate_decreasing
from ampfl.accounting.events import (
    BalancedIterationSubsamplingEvent,
    DropoutEvent,
    GaussianEvent,
    GroupRoundEvent,
    ModelSplitEvent,
    MSPAFLRoundEvent,
    PoissonSampledEvent,
    PrivacyEvent,
    RandomCheckInEvent,
)
from ampfl.accounting.gaussian import gaussian_delta

DELTAS = np.logspace(-12, -3, 19)
FINE = PLD_DISCRETIZATION / 10  # the "exact" PLD reference grid


@dataclass(frozen=True)
class Reference:
    """An exact (or lower-bound) curve ``epsilon(z, steps, deltas)``, optionally ``noise(ε, δ, steps, guess)``
    (``guess``: the PLD accountant's noise for the same target, a starting point). The noise is computed for
    the middle target only (one marker on the right panel; the fine grids are slow)."""

    label: str
    epsilon: Callable[[float, int, Sequence[float]], list[float]]
    noise: Callable[[float, float, int, float], float] | None = None


@dataclass(frozen=True)
class Curve:
    """An extra sound bound drawn next to the accountants (e.g. a tighter analysis not yet an accountant)."""

    label: str
    epsilon: Callable[[float, int, Sequence[float]], list[float]]


@dataclass(frozen=True)
class Mechanism:
    """One figure: ``make_event(z)`` composed ``steps`` times at noise ``z`` (left panel), and the noise each
    accountant needs for the target ε values ``targets`` at ``delta`` (right panel)."""

    slug: str
    title: str
    make_event: Callable[[float], PrivacyEvent]
    z: float
    steps: int
    targets: tuple[float, ...]
    delta: float = 1e-5
    accountants: tuple[str, ...] = ("rdp", "pld")
    reference: Reference | None = None
    curves: tuple[Curve, ...] = field(default_factory=tuple)


def _pld_curve(one: Callable[[float], pld_lib.PrivacyLossDistribution]) -> Callable[..., list[float]]:
    def curve(z: float, steps: int, deltas: Sequence[float]) -> list[float]:
        pld = one(z).self_compose(steps)
        return [max(0.0, float(pld.get_epsilon_for_delta(d))) for d in deltas]

    return curve


def _fine_noise(make_event: Callable[[float], PrivacyEvent]) -> Callable[[float, float, int, float], float]:
    def noise(eps: float, delta: float, steps: int, guess: float) -> float:
        return calibrate(
            make_event,
            target_epsilon=eps,
            target_delta=delta,
            accountant="pld",
            count=steps,
            accountant_kwargs={"value_discretization_interval": FINE},
            initial=guess,
            step=1.02,
        )

    return noise


def _fine_reference(make_event: Callable[[float], PrivacyEvent], label: str = "") -> Reference:
    """The PLD accountant's own construction at a 10× finer grid (exact where the construction is exact)."""
    from ampfl.accounting.accountants.pld import event_pld

    return Reference(
        label or f"exact (PLD at {FINE:g})",
        _pld_curve(lambda z: event_pld(make_event(z), FINE)),
        _fine_noise(make_event),
    )


def _public_gaussian_exact(p: float) -> Callable[[float, int, Sequence[float]], list[float]]:
    """Exact ε(δ) of T rounds of PublicParticipation(p, Gaussian(z)): δ(ε) = Σ_m Bin(m; T, p) δ_G(ε; z/√m)."""

    def curve(z: float, steps: int, deltas: Sequence[float]) -> list[float]:
        m = np.arange(1, steps + 1)
        w = stats.binom.pmf(m, steps, p)
        keep = w > 1e-300

        def delta_of(eps: float) -> float:
            return float(
                sum(
                    wk * gaussian_delta(sigma=z / math.sqrt(mk), epsilon=eps)
                    for wk, mk in zip(w[keep], m[keep], strict=True)
                )
            )

        out = []
        for d in deltas:
            out.append(
                0.0
                if delta_of(0.0) <= d
                else calibrate_decreasing(
                    lambda e, d=d: delta_of(e) - d,
                    0.0,
                    name="epsilon",
                    initial=1.0,
                    lower_limit=1e-9,
                    upper_limit=1e4,
                    rtol=1e-6,
                )
            )
        return out

    return curve


def _checkin_explicit(p: float, q: float, d: int) -> Reference:
    """Explicit datasets (lower bounds): the worst dataset found at the middle δ, then its whole curve."""
    best: dict[tuple[float, int], tuple[float, float]] = {}

    def dataset(z: float, steps: int) -> tuple[float, float]:
        if (z, steps) not in best:
            f = explicit_epsilon(
                participation=p,
                sampling_rate=q,
                local_dataset_size=d,
                noise_multiplier=z,
                delta=1e-6,
                iterations=steps,
                a_values=(0.0, 0.25, 0.5, 0.75, 1.0),
                refine=3,
            )
            best[(z, steps)] = (f.a, f.b)
        return best[(z, steps)]

    def pld(z: float, steps: int) -> pld_lib.PrivacyLossDistribution:
        a, b = dataset(z, steps)
        one = explicit_pair_pld(
            a=a, b=b, participation=p, sampling_rate=q, local_dataset_size=d, noise_multiplier=z
        )
        return one.self_compose(steps)

    def curve(z: float, steps: int, deltas: Sequence[float]) -> list[float]:
        composed = pld(z, steps)
        return [max(0.0, float(composed.get_epsilon_for_delta(x))) for x in deltas]

    def noise(eps: float, delta: float, steps: int, guess: float) -> float:  # dataset found at z = 1, fixed
        a, b = dataset(1.0, steps)

        def loss(z: float) -> float:
            one = explicit_pair_pld(
                a=a,
                b=b,
                participation=p,
                sampling_rate=q,
                local_dataset_size=d,
                noise_multiplier=z,
                value_discretization_interval=1e-3,
            )
            return float(one.self_compose(steps).get_epsilon_for_delta(delta))

        return calibrate_decreasing(
            loss, eps, initial=guess, lower_limit=1e-2, upper_limit=1e3, rtol=0.01, step=1.1
        )

    return Reference("explicit dataset (lower bound)", curve, noise)


def _checkin_refined(p: float, q: float, d: int) -> Curve:
    return Curve(
        "empty-sample refinement (sound)",
        _pld_curve(
            lambda z: refined_pld(participation=p, sampling_rate=q, local_dataset_size=d, noise_multiplier=z)
        ),
    )


def _poisson(rate: float) -> Callable[[float], PrivacyEvent]:
    return lambda z: PoissonSampledEvent(sampling_rate=rate, event=GaussianEvent(noise_multiplier=z))


def _split(z: float) -> PrivacyEvent:
    return ModelSplitEvent(num_submodels=2, noise_multiplier=z)


def _dropout(z: float) -> PrivacyEvent:
    return DropoutEvent(noise_multiplier=z, nonsplit_noise_multiplier=2 * z)


def _group(z: float) -> PrivacyEvent:
    return GroupRoundEvent(sampling_rate=0.1, noise_multiplier=z)


def _split3(z: float) -> PrivacyEvent:
    return ModelSplitEvent(num_submodels=3, noise_multiplier=z)


def _bis(z: float) -> PrivacyEvent:
    return BalancedIterationSubsamplingEvent(iterations=100, participations=1, noise_multiplier=z)


def _sampled_split(z: float) -> PrivacyEvent:
    return PoissonSampledEvent(sampling_rate=0.05, event=ModelSplitEvent(num_submodels=2, noise_multiplier=z))


MECHANISMS: tuple[Mechanism, ...] = (
    Mechanism(
        "poisson",
        "Poisson-subsampled Gaussian (q = 0.01, T = 1000)",
        _poisson(0.01),
        1.0,
        1000,
        (0.5, 1.0, 2.0, 4.0),
        reference=_fine_reference(_poisson(0.01)),
    ),
    Mechanism(
        "random_checkin",
        "Random check-in wcs (p = 0.1, q = 0.1, d = 10, T = 30)",
        lambda z: RandomCheckInEvent(
            participation=0.1, sampling_rate=0.1, noise_multiplier=z, local_dataset_size=10
        ),
        1.0,
        30,
        (0.5, 1.0, 2.0),
        reference=_checkin_explicit(0.1, 0.1, 10),
        curves=(_checkin_refined(0.1, 0.1, 10),),
    ),
    Mechanism(
        "model_split_d2",
        "Model split D = 2 (T = 100)",
        _split,
        2.0,
        100,
        (2.0, 5.0, 10.0),
        reference=_fine_reference(_split),
    ),
    Mechanism(
        "dropout",
        "Dropout 1/2 + non-split part (z_ns = 2z, T = 100)",
        _dropout,
        2.0,
        100,
        (2.0, 5.0, 10.0),
        reference=_fine_reference(_dropout),
    ),
    Mechanism(
        "ms_pafl",
        "MS-PAFL sound analysis (p = 0.5, T = 40)",
        lambda z: MSPAFLRoundEvent(participation=0.5, noise_multiplier=z),
        3.0,
        40,
        (1.0, 2.0, 4.0),
        reference=Reference("exact (binomial sum of Gaussians)", _public_gaussian_exact(0.5)),
    ),
    Mechanism(
        "gdpfed_group",
        "GDPFed group round (q_g = 0.1, T = 100)",
        _group,
        1.5,
        100,
        (1.0, 2.0, 4.0),
        reference=_fine_reference(_group),
    ),
    # The log-sum PLD (D >= 3, BIS k = 1) and the subsampled split: no exact value to compare with
    # (docs/partition.md and docs/accounting.md check them against quadrature and Monte Carlo).
    Mechanism("model_split_d3", "Model split D = 3 (T = 100)", _split3, 2.0, 100, (2.0, 5.0, 10.0)),
    Mechanism("bis_k1", "BIS k = 1, T = 100 steps per epoch (5 epochs)", _bis, 1.0, 5, (0.5, 1.0, 2.0)),
    Mechanism(
        "subsampled_split_d2",
        "Poisson-subsampled split D = 2 (q = 0.05, T = 200)",
        _sampled_split,
        1.0,
        200,
        (1.0, 2.0, 4.0),
    ),
)


def _accountant_curve(m: Mechanism, kind: str) -> list[float]:
    acc = make_accountant(kind).compose(m.make_event(m.z), m.steps)
    return [float(acc.get_epsilon(d)) for d in DELTAS]


def _accountant_noise(m: Mechanism, kind: str) -> list[float]:
    return [
        calibrate(m.make_event, target_epsilon=e, target_delta=m.delta, accountant=kind, count=m.steps)
        for e in m.targets
    ]


def figure(m: Mechanism, out: Path) -> dict[str, float]:
    """Draw ``m``'s two panels into ``out/<slug>.png``; return the values at δ = m.delta, middle target."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    eps: dict[str, list[float]] = {k: _accountant_curve(m, k) for k in m.accountants}
    noise: dict[str, list[float]] = {k: _accountant_noise(m, k) for k in m.accountants}
    for c in m.curves:
        eps[c.label] = c.epsilon(m.z, m.steps, DELTAS)
    mid = len(m.targets) // 2
    ref_noise: float | None = None
    if m.reference is not None:
        eps[m.reference.label] = m.reference.epsilon(m.z, m.steps, DELTAS)
        if m.reference.noise is not None:
            ref_noise = m.reference.noise(m.targets[mid], m.delta, m.steps, noise["pld"][mid])
    for label, ys in eps.items():
        style = "k--" if m.reference is not None and label == m.reference.label else "-"
        left.plot(DELTAS, ys, style, marker=".", label=label.upper() if label in m.accountants else label)
    for label, ys in noise.items():
        right.plot(m.targets, ys, "-", marker="o", label=label.upper() if label in m.accountants else label)
    if m.reference is not None and ref_noise is not None:
        right.plot([m.targets[mid]], [ref_noise], "k*", markersize=12, label=m.reference.label)
    left.set(xscale="log", xlabel="δ", ylabel="ε", title=f"ε(δ) at z = {m.z:g}")
    right.set(
        xscale="log", xlabel="target ε", ylabel="noise multiplier z", title=f"noise for (ε, δ = {m.delta:g})"
    )
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(m.title)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / f"{m.slug}.png", dpi=110)
    plt.close(fig)
    k = int(np.argmin(np.abs(np.log(DELTAS) - math.log(m.delta))))
    ratios = {
        "eps_rdp": eps["rdp"][k],
        "eps_pld": eps["pld"][k],
        "z_rdp": noise["rdp"][mid],
        "z_pld": noise["pld"][mid],
    }
    if m.reference is not None:
        ratios["eps_ref"] = eps[m.reference.label][k]
        if ref_noise is not None:
            ratios["z_ref"] = ref_noise
    return ratios


def _fmt(x: float | None) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.3f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="slugs to draw (default: all)")
    parser.add_argument("--out", default="docs/figures", help="output folder")
    args = parser.parse_args(argv)
    chosen = [m for m in MECHANISMS if not args.only or m.slug in args.only]
    print(f"load average {os.getloadavg()[0]:.1f}")
    print(
        "| mechanism | δ | ε RDP | ε PLD | ε exact/explicit | RDP ÷ PLD (ε) | PLD ÷ exact (ε) | target ε | "
        "z RDP | z PLD | z exact/explicit | RDP ÷ PLD (z) | PLD ÷ exact (z) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for m in chosen:
        start = time.perf_counter()
        r = figure(m, Path(args.out))
        ref, zref = r.get("eps_ref"), r.get("z_ref")
        print(
            f"| {m.title} | {m.delta:g} | {r['eps_rdp']:.4g} | {r['eps_pld']:.4g} | {_fmt(ref)} | "
            f"{_fmt(r['eps_rdp'] / r['eps_pld'])} | {_fmt(r['eps_pld'] / ref if ref else None)} | "
            f"{m.targets[len(m.targets) // 2]:g} | {r['z_rdp']:.4g} | {r['z_pld']:.4g} | {_fmt(zref)} | "
            f"{_fmt(r['z_rdp'] / r['z_pld'])} | {_fmt(r['z_pld'] / zref if zref else None)} |  "
            f"<!-- {time.perf_counter() - start:.0f} s -->",
            flush=True,
        )


if __name__ == "__main__":
    main()
