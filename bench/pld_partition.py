"""Benchmark and table: PLD vs RDP for model splitting (d = 2) and dropout (paper 002).

For each setting prints ε (RDP bound of Thm 3.1, exact PLD, no-split PLD) at δ, their ratio, the noise
multiplier each accountant calibrates to a target ε, and the calibration wall time next to dp-accounting's
own PLD calibration of a plain Gaussian over the same steps (bracket [z/2, 2z] around the answer). Writes
docs/figures/pld_split.png: ε(δ) of T steps of the d = 2 split by RDP, PLD and with the split ignored.

Run: ``.venv/bin/python bench/pld_partition.py [--figure PATH] [--smoke]`` (``--smoke``: one small row per
table, a check that the script runs, not a result).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from dp_accounting import dp_event, mechanism_calibration
from dp_accounting.pld import pld_privacy_accountant

from ampfl.accounting.accountants import PLDAccountant, RDPAccountant
from ampfl.accounting.calibrate import calibrate
from ampfl.accounting.events import DropoutEvent, GaussianEvent, ModelSplitEvent
from ampfl.accounting.partition import unsplit_noise_multiplier

SETTINGS = [  # (noise multiplier, steps, delta)
    (1.0, 10, 1e-5),
    (1.0, 100, 1e-5),
    (2.0, 100, 1e-5),
    (5.0, 1000, 1e-6),
    (10.0, 1000, 1e-9),
]
TARGETS = [(1.0, 1e-5, 100), (2.0, 1e-5, 1000), (8.0, 1e-6, 1000)]


def _eps(acc: str, event: object, steps: int, delta: float) -> float:
    make = PLDAccountant if acc == "pld" else RDPAccountant
    return float(make().compose(event, steps).get_epsilon(delta))


def table(settings: list[tuple[float, int, float]] = SETTINGS) -> None:
    print("| mechanism | z | T | δ | ε RDP | ε PLD | RDP ÷ PLD | ε no split (PLD) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, make in (
        ("split d=2", lambda z: ModelSplitEvent(num_submodels=2, noise_multiplier=z)),
        (
            "dropout + non-split (z_ns = 2z)",
            lambda z: DropoutEvent(noise_multiplier=z, nonsplit_noise_multiplier=2 * z),
        ),
    ):
        for z, steps, delta in settings:
            rdp, pld = _eps("rdp", make(z), steps, delta), _eps("pld", make(z), steps, delta)
            twin = unsplit_noise_multiplier(z, 2 * z if name.startswith("dropout") else None)
            plain = _eps("pld", GaussianEvent(noise_multiplier=twin), steps, delta)
            print(
                f"| {name} | {z:g} | {steps} | {delta:g} | {rdp:.3f} | {pld:.3f} | "
                f"{rdp / pld:.2f} | {plain:.3f} |"
            )


def calibration(targets: list[tuple[float, float, int]] = TARGETS) -> None:
    print(
        "\n| target ε | δ | T | z PLD | z RDP | RDP ÷ PLD | z no split | PLD s | dp-accounting Gaussian s |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for target, delta, steps in targets:

        def split(z: float) -> ModelSplitEvent:
            return ModelSplitEvent(num_submodels=2, noise_multiplier=z)

        start = time.perf_counter()
        z_pld = calibrate(split, target_epsilon=target, target_delta=delta, count=steps, accountant="pld")
        t_pld = time.perf_counter() - start
        z_rdp = calibrate(split, target_epsilon=target, target_delta=delta, count=steps, accountant="rdp")
        z_plain = calibrate(
            lambda z: GaussianEvent(noise_multiplier=z),
            target_epsilon=target,
            target_delta=delta,
            count=steps,
            accountant="pld",
        )
        start = time.perf_counter()
        mechanism_calibration.calibrate_dp_mechanism(
            pld_privacy_accountant.PLDAccountant,
            lambda z, n=steps: dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(z), n),
            target,
            delta,
            mechanism_calibration.ExplicitBracketInterval(0.5 * z_plain, 2.0 * z_plain),
        )
        t_ref = time.perf_counter() - start
        print(
            f"| {target:g} | {delta:g} | {steps} | {z_pld:.3f} | {z_rdp:.3f} | {z_rdp / z_pld:.3f} | "
            f"{z_plain:.3f} | {t_pld:.2f} | {t_ref:.2f} |"
        )


def figure(path: Path, steps: int = 100) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    z = 2.0
    deltas = np.logspace(-12, -3, 10)
    split = ModelSplitEvent(num_submodels=2, noise_multiplier=z)
    pld = PLDAccountant().compose(split, steps)
    rdp = RDPAccountant().compose(split, steps)
    plain = PLDAccountant().compose(GaussianEvent(noise_multiplier=z), steps)
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for acc, label in (
        (rdp, "RDP bound (002 Thm 3.1)"),
        (pld, "PLD (exact, pessimistic)"),
        (plain, "no split (PLD)"),
    ):
        ax.plot(deltas, [acc.get_epsilon(d) for d in deltas], marker="o", ms=3, label=label)
    ax.set_xscale("log")
    ax.set_xlabel("δ")
    ax.set_ylabel("ε")
    ax.set_title(f"model split d = 2, z = {z:g}, T = {steps}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = Path(__file__).resolve().parents[1] / "docs" / "figures" / "pld_split.png"
    parser.add_argument("--figure", type=Path, default=default, help="where to write the figure")
    parser.add_argument("--smoke", action="store_true", help="one small row per table (not a result)")
    args = parser.parse_args(argv)
    table([(5.0, 1, 1e-5)] if args.smoke else SETTINGS)
    calibration([(0.5, 1e-5, 1)] if args.smoke else TARGETS)
    figure(args.figure, steps=5 if args.smoke else 100)


if __name__ == "__main__":
    main()
