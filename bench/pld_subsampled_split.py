"""Table: PLD vs RDP for Poisson-subsampled model splitting (d ≤ 2) and dropout (paper 002).

For each setting prints ε at δ of T Poisson-subsampled split steps by the RDP accountant (Zhu–Wang's general
subsampling of the Thm 3.1 bound), the best sound RDP analysis (``--accountant rdp``'s recommendation: the
smaller of Zhu–Wang and the subsampled Gaussian with the split ignored), the PLD
(:mod:`ampfl.accounting.partition.subsampled_pld`), the PLD with the split credit ignored and the one-step PLD
build time; then the noise multiplier each calibrates to a target ε and the PLD calibration's wall time.

Run: ``.venv/bin/python bench/pld_subsampled_split.py`` (``--quick``: the first rows only).
"""

from __future__ import annotations

import sys
import time

from ampfl.accounting.accountants import PLDAccountant, RDPAccountant
from ampfl.accounting.calibrate import calibrate
from ampfl.accounting.events import GaussianEvent, ModelSplitEvent, PoissonSampledEvent
from ampfl.accounting.partition.pld import PLD_MAX_SUBMODELS
from ampfl.accounting.partition.subsampled_pld import subsampled_split_pld

SETTINGS = [  # (d, q, z, T, δ)
    (2, 0.01, 1.0, 1000, 1e-5),
    (2, 0.05, 1.0, 100, 1e-5),
    (2, 0.1, 2.0, 1000, 1e-6),
    (2, 0.25, 3.0, 400, 1e-5),
    (2, 0.5, 1.0, 100, 1e-5),
    (1, 0.05, 1.0, 100, 1e-5),
]
TARGETS = [  # (d, target ε, δ, q, T)
    (2, 1.0, 1e-5, 0.01, 1000),
    (2, 2.0, 1e-5, 0.05, 100),
    (2, 8.0, 1e-5, 0.25, 400),
]
assert all(s[0] <= PLD_MAX_SUBMODELS for s in SETTINGS)


def _event(d: int, q: float, z: float) -> PoissonSampledEvent:
    return PoissonSampledEvent(sampling_rate=q, event=ModelSplitEvent(num_submodels=d, noise_multiplier=z))


def _plain(q: float, z: float) -> PoissonSampledEvent:
    return PoissonSampledEvent(sampling_rate=q, event=GaussianEvent(noise_multiplier=z))


def table(settings: list[tuple[int, float, float, int, float]]) -> None:
    print(
        "| d | q | z | T | δ | ε Zhu–Wang | ε best RDP | ε PLD | best RDP ÷ PLD | ε no split PLD | build s |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for d, q, z, steps, delta in settings:
        start = time.perf_counter()
        subsampled_split_pld(num_submodels=d, noise_multiplier=z, sampling_rate=q)
        build = time.perf_counter() - start
        event = _event(d, q, z)
        pld = float(PLDAccountant().compose(event, steps).get_epsilon(delta))
        rdp = float(RDPAccountant().compose(event, steps).get_epsilon(delta))
        none = float(PLDAccountant().compose(_plain(q, z), steps).get_epsilon(delta))
        best = min(rdp, float(RDPAccountant().compose(_plain(q, z), steps).get_epsilon(delta)))
        print(
            f"| {d} | {q:g} | {z:g} | {steps} | {delta:g} | {rdp:.3f} | {best:.3f} | {pld:.3f} | "
            f"{best / pld:.2f} | {none:.3f} | {build:.2f} |"
        )


def calibration(targets: list[tuple[int, float, float, float, int]]) -> None:
    print("\n| d | target ε | δ | q | T | z PLD | z Zhu–Wang | z best RDP | best RDP ÷ PLD | PLD s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for d, target, delta, q, steps in targets:

        def make(z: float, d: int = d, q: float = q) -> PoissonSampledEvent:
            return _event(d, q, z)

        kw = {"target_epsilon": target, "target_delta": delta, "count": steps}
        start = time.perf_counter()
        z_pld = calibrate(make, accountant="pld", **kw)
        t_pld = time.perf_counter() - start
        z_rdp = calibrate(make, accountant="rdp", **kw)
        best = min(z_rdp, calibrate(lambda z, q=q: _plain(q, z), accountant="rdp", **kw))
        print(
            f"| {d} | {target:g} | {delta:g} | {q:g} | {steps} | {z_pld:.3f} | {z_rdp:.3f} | {best:.3f} | "
            f"{best / z_pld:.3f} | {t_pld:.1f} |"
        )


def main(argv: list[str] | None = None) -> None:
    quick = "--quick" in (sys.argv[1:] if argv is None else argv)
    table(SETTINGS[:2] if quick else SETTINGS)
    calibration(TARGETS[:1] if quick else TARGETS)


if __name__ == "__main__":
    main()
