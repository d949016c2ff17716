"""Tables: the D-component mixture PLD (model split D ≥ 3, random allocation / BIS k = 1) vs RDP.

1. One application of the pair (one model-split step into D sub-models = one BIS epoch with T = D, k = 1):
   ε at δ = 1e-5 by 002 Thm 3.1's RDP and by the PLD, their ratio, the PLD's stated loss error bound and the
   PLD build time.
2. BIS (k = 1, T iterations, E epochs) against Poisson subsampling at rate 1/T over the same T·E steps (PLD).
3. Model splitting composed over steps (D = 3, 4).

Run: ``.venv/bin/python bench/allocation_pld.py`` (``--quick`` drops D = 1000; ``--smoke``: one small row per
table, a check that the script runs, not a result).
"""

from __future__ import annotations

import sys
import time

from ampfl.accounting.accountants import PLDAccountant, RDPAccountant
from ampfl.accounting.events import (
    BalancedIterationSubsamplingEvent,
    GaussianEvent,
    ModelSplitEvent,
    PoissonSampledEvent,
)
from ampfl.accounting.partition.allocation_pld import loss_error_bound

DELTA = 1e-5


def _eps(acc: str, event: object, count: int = 1) -> tuple[float, float]:
    """(ε at DELTA, wall seconds) of ``count`` × ``event`` in a fresh accountant."""
    start = time.perf_counter()
    make = PLDAccountant if acc == "pld" else RDPAccountant
    eps = float(make().compose(event, count).get_epsilon(DELTA))
    return eps, time.perf_counter() - start


def one_application(sizes: list[int], noises: list[float]) -> None:
    print(f"\n## One application (δ = {DELTA:g}): RDP (002 Thm 3.1) ÷ PLD\n")
    print("| D | z | ε RDP | ε PLD | RDP ÷ PLD | loss error bound | PLD s |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for d in sizes:
        for z in noises:
            event = ModelSplitEvent(num_submodels=d, noise_multiplier=z)
            rdp, _ = _eps("rdp", event)
            pld, secs = _eps("pld", event)
            bound = loss_error_bound(d, 1.0 / z)
            row = f"| {d} | {z:g} | {rdp:.4g} | {pld:.4g} | {rdp / pld:.2f} | {bound:.1e} | {secs:.1f} |"
            print(row, flush=True)


def bis_vs_poisson(settings: list[tuple[int, float, int]]) -> None:
    print(f"\n## BIS (k = 1) vs Poisson at rate 1/T over the same steps (δ = {DELTA:g})\n")
    print("| T | z | epochs | ε BIS PLD | ε BIS RDP | ε Poisson PLD | Poisson ÷ BIS | ε no amplification |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for t, z, epochs in settings:
        bis = BalancedIterationSubsamplingEvent(iterations=t, participations=1, noise_multiplier=z)
        pld, _ = _eps("pld", bis, epochs)
        rdp, _ = _eps("rdp", bis, epochs)
        poisson = PoissonSampledEvent(sampling_rate=1.0 / t, event=GaussianEvent(noise_multiplier=z))
        pois, _ = _eps("pld", poisson, t * epochs)
        plain, _ = _eps("pld", GaussianEvent(noise_multiplier=z), epochs)
        row = f"| {t} | {z:g} | {epochs} | {pld:.4g} | {rdp:.4g} | {pois:.4g} | {pois / pld:.2f}"
        row += f" | {plain:.4g} |"
        print(row, flush=True)


def composed(settings: list[tuple[int, float, int]]) -> None:
    print(f"\n## Model splitting composed over steps (δ = {DELTA:g})\n")
    print("| D | z | steps | ε RDP | ε PLD | RDP ÷ PLD | worst-case discretisation slack (steps × bound) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for d, z, steps in settings:
        event = ModelSplitEvent(num_submodels=d, noise_multiplier=z)
        rdp, _ = _eps("rdp", event, steps)
        pld, _ = _eps("pld", event, steps)
        slack = steps * loss_error_bound(d, 1.0 / z)
        row = f"| {d} | {z:g} | {steps} | {rdp:.4g} | {pld:.4g} | {rdp / pld:.2f} | {slack:.3g} |"
        print(row, flush=True)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if "--smoke" in argv:
        one_application([3], [2.0])
        bis_vs_poisson([(10, 1.0, 1)])
        composed([(3, 2.0, 10)])
        return
    quick = "--quick" in argv
    one_application([3, 4, 10, 100] if quick else [3, 4, 10, 100, 1000], [0.8, 1.0, 2.0, 5.0])
    bis_vs_poisson([(10, 1.0, 1), (100, 1.0, 1), (100, 0.8, 5)] + ([] if quick else [(1000, 1.0, 1)]))
    composed([(3, 1.0, 100), (3, 2.0, 100), (4, 5.0, 1000)])


if __name__ == "__main__":
    main()
