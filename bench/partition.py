"""Benchmark: paper 002 Theorem 3.1, exact forward term (Lemma 3.12) for k = 1, d = 1e4, orders 2..256.

Target: under 100 ms. Compared with dp-accounting's RDP of the Poisson-subsampled Gaussian with the same
T = d steps (γ = 1/T), at the same orders, and with ampfl's own exact Poisson RDP.

Also times the spine's routes: the RDP accountant composing a Poisson-subsampled Gaussian on the one
order grid (116 orders up to 10 000), the acceptance calibration through the one ``calibrate``,
and the model-split calibration through ``ModelSplitEvent``.

Run: ``.venv/bin/python bench/partition.py``. Prints the median and worst wall time over repeats.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant

from ampfl.accounting.accountants import RDPAccountant
from ampfl.accounting.calibrate import calibrate
from ampfl.accounting.events import GaussianEvent, PoissonSampledEvent
from ampfl.accounting.mixture_rdp import forward_rdp_efficient, forward_rdp_exact, theorem_3_1_rdp
from ampfl.accounting.partition import calibrate_model_split
from ampfl.accounting.rdp import rdp_poisson_gaussian

ORDERS = list(range(2, 257))
REPEATS = 7


def _time(fn: Callable[[], object]) -> tuple[float, float]:
    fn()  # warm-up (imports, caches)
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        times.append(1e3 * (time.perf_counter() - start))
    return statistics.median(times), max(times)


def main() -> None:
    print(f"orders 2..256 ({len(ORDERS)} orders), {REPEATS} repeats; times in ms (median / max)")
    for d, sigma in ((10_000, 1.0), (10_000, 0.5), (100_000, 1.0), (3, 1.0), (8, 1.0)):
        med, worst = _time(
            lambda d=d, sigma=sigma: forward_rdp_exact(orders=ORDERS, d=d, k=1, noise_multiplier=sigma)
        )
        flag = "  (target < 100 ms)" if d == 10_000 else ""
        print(f"exact forward  k=1 d={d:<7d} sigma={sigma:<4g} {med:8.2f} / {worst:8.2f}{flag}")
    med, worst = _time(lambda: theorem_3_1_rdp(orders=ORDERS, d=10_000, k=1, noise_multiplier=1.0))
    print(f"Thm 3.1 bound (exact fwd + reverse) d=10000     {med:8.2f} / {worst:8.2f}")
    med, worst = _time(lambda: forward_rdp_efficient(orders=ORDERS, d=10_000, k=1, noise_multiplier=1.0))
    print(f"efficient Eq. 5 k=1 d=10000                      {med:8.2f} / {worst:8.2f}")
    med, worst = _time(lambda: forward_rdp_efficient(orders=ORDERS, d=10_000, k=100, noise_multiplier=1.0))
    print(f"efficient Eq. 5 k=100 d=10000                    {med:8.2f} / {worst:8.2f}")
    big = [*ORDERS, 512, 1024]
    med, worst = _time(lambda: forward_rdp_exact(orders=big, d=100_000, k=1, noise_multiplier=1.0))
    print(f"exact forward  k=1 d=100000 orders up to 1024    {med:8.2f} / {worst:8.2f}")

    steps = 10_000

    def dp_acc() -> object:
        acc = rdp_privacy_accountant.RdpAccountant(orders=[float(o) for o in ORDERS])
        acc.compose(dp_event.PoissonSampledDpEvent(1.0 / steps, dp_event.GaussianDpEvent(1.0)), steps)
        return acc.get_epsilon(1e-5)

    med, worst = _time(dp_acc)
    print(f"dp-accounting Poisson RDP, T={steps}, q=1/T       {med:8.2f} / {worst:8.2f}")
    med, worst = _time(
        lambda: rdp_poisson_gaussian(
            orders=ORDERS, sampling_rate=1.0 / steps, noise_multiplier=1.0, steps=steps
        )
    )
    print(f"ampfl exact Poisson RDP,  T={steps}, q=1/T       {med:8.2f} / {worst:8.2f}")

    def poisson(z: float) -> PoissonSampledEvent:
        return PoissonSampledEvent(sampling_rate=0.001, event=GaussianEvent(noise_multiplier=z))

    med, worst = _time(lambda: RDPAccountant().compose(poisson(2.7), 100).get_epsilon(1e-5))
    print(f"RDPAccountant Poisson, one grid (116 orders)     {med:8.2f} / {worst:8.2f}")
    med, worst = _time(lambda: calibrate(poisson, target_epsilon=0.01, target_delta=1e-5, count=100))
    print(f"calibrate poisson eps=0.01 q=0.001 T=100         {med:8.2f} / {worst:8.2f}")
    med, worst = _time(
        lambda: calibrate_model_split(target_epsilon=4.0, target_delta=1e-5, num_submodels=8, steps=1000)
    )
    print(f"calibrate model-split d=8 T=1000 (orders <= 256) {med:8.2f} / {worst:8.2f}")


if __name__ == "__main__":
    main()
