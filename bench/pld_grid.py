"""The PLD grid primitives (``accounting/pld_grid.py``) and the one ε-from-δ search against
the copies they replaced: the same numbers, and the time of each caller, before and after.

The two trees are two commits' ``src/`` (``git archive``), run in alternating fresh interpreters (one round
of every case per run, its time the fastest of three calls; ``--rounds`` runs each, interleaved
old/new/old/new…), so that the machine's load hits both alike; the table gives medians over the runs, the
new/old ratio of the medians and the 1-minute load average. Every case's outputs (PMF arrays, ε, δ, noise)
are compared bit for bit and the largest relative change printed.

    .venv/bin/python bench/pld_grid.py --old a80ad46~1 --new a80ad46 --rounds 7
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

WORKER = r"""
import math, pickle, sys, time
import numpy as np
from ampfl.accounting import gaussian
from ampfl.accounting.accountants import pld_fast
from ampfl.accounting.audit import one_run
from ampfl.accounting.audit import random_checkin_pld as arp
from ampfl.accounting.events import RandomCheckInEvent
from ampfl.accounting.partition import allocation_pld as apld
from ampfl.accounting.partition import pld as ppld
from ampfl.accounting.random_checkin import count_split, per_iteration, pld_pairs

H = 1e-4


def pmf(p):
    d = p.to_dense_pmf()
    return (int(d._lower_loss), np.asarray(d._probs).copy(), float(d._infinity_mass))


def pld(x):
    return (pmf(x._pmf_remove), pmf(x._pmf_add), float(x.get_epsilon_for_delta(1e-6)))


RC = dict(participation=0.4, sampling_rate=0.1, local_dataset_size=10, noise_multiplier=1.5)
G1, G2 = pld_fast.gaussian_pld(1.1, 0.05, H), pld_fast.gaussian_pld(2.0, 0.3, H)
CASES = {
    "refined_pld (mixture)": lambda: pld(pld_pairs.refined_pld(**RC, value_discretization_interval=H)),
    "random_checkin_pld revealed": lambda: pld(
        pld_pairs.random_checkin_pld(RandomCheckInEvent(**RC, participation_hidden=False), H)
    ),
    "count_split_pld (tail_cut, mixture)": lambda: pld(
        count_split.count_split_pld(
            participation=0.3, sampling_rate=0.02, local_dataset_size=30, noise_multiplier=3.0,
            reference_epsilon=0.05, value_discretization_interval=H,
        )
    ),
    "audit split_pld h=1e-3 (mixture of 24)": lambda: pld(
        arp.split_pld(participation=0.4, sampling_rate=0.2, local_dataset_size=5, noise_multiplier=1.0,
                      value_discretization_interval=1e-3)
    ),
    "audit explicit_pair_pld (round_down)": lambda: pld(
        arp.explicit_pair_pld(a=0.5, participation=0.4, sampling_rate=0.2, local_dataset_size=5,
                              noise_multiplier=1.0, value_discretization_interval=H)
    ),
    "symmetric_mixture_pld (cell_masses)": lambda: pld(
        ppld.symmetric_mixture_pld(shift=0.7, noise_multiplier=1.0, value_discretization_interval=H)
    ),
    "orthogonal_mixture_pld D=3 (round_up, tail_cut)": lambda: pld(
        apld.orthogonal_mixture_pld(num_components=3, shift=1.0, value_discretization_interval=H)
    ),
    "pld_fast.compose (tail_cut)": lambda: pld(pld_fast.compose(G1, G2)),
    "gaussian_epsilon x20 (eps search)": lambda: [
        gaussian.gaussian_epsilon(sigma=s, delta=1e-6) for s in np.linspace(0.3, 8.0, 20)
    ],
    "analytic_gaussian_sigma x20 (smallest_feasible)": lambda: [
        gaussian.analytic_gaussian_sigma(epsilon=e, delta=1e-6) for e in np.linspace(0.1, 8.0, 20)
    ],
    "epsilon_per_iteration wcs x20 (eps search)": lambda: [
        per_iteration.epsilon_per_iteration(analysis="wcs", **dict(RC, noise_multiplier=z), delta=1e-6)
        for z in np.linspace(0.5, 5.0, 20)
    ],
    "best_hidden_epsilon T=1 (eps search)": lambda: pld_pairs.best_hidden_epsilon(
        participation=0.3, sampling_rate=0.02, local_dataset_size=30, noise_multiplier=3.0, iterations=1,
        delta=1e-5,
    ),
    "one_run_epsilon_lower x4 (find_root)": lambda: [
        one_run.one_run_epsilon_lower(c, guesses=100, canaries=1000, delta=1e-5) for c in (30, 60, 90, 100)
    ],
}
times, values = {}, {}
for name, fn in CASES.items():
    values[name] = fn()  # warm (imports, caches)
    best = math.inf
    for _ in range(3):  # the fastest of three in this interpreter; the medians are over interpreters
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    times[name] = best
pickle.dump((times, values), sys.stdout.buffer)
"""


def _extract(commit: str, into: Path) -> Path:
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", commit, "src"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def _run(src: Path) -> tuple[dict[str, float], dict[str, object]]:
    env = dict(os.environ, PYTHONPATH=str(src), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", WORKER], check=True, capture_output=True, env=env).stdout
    return pickle.loads(out)


def _flat(x: object) -> list[object]:
    if isinstance(x, tuple | list):
        return [y for item in x for y in _flat(item)]
    return [x]


def _change(a: object, b: object) -> str:
    """'identical' or the largest relative change of the floats / arrays in b against a."""
    import numpy as np

    fa, fb = _flat(a), _flat(b)
    if len(fa) != len(fb):
        return "different shape"
    worst = 0.0
    for x, y in zip(fa, fb, strict=True):
        if isinstance(x, str) or isinstance(y, str):
            if x != y:
                return f"{x!r} -> {y!r}"
            continue
        xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        if xa.shape != ya.shape:
            return "different shape"
        if np.array_equal(xa, ya):
            continue
        scale = np.maximum(np.abs(xa), 1e-300)
        worst = max(worst, float(np.max(np.abs(ya - xa) / scale)))
    return "identical" if worst == 0.0 else f"rel {worst:.2g}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="commit before")
    parser.add_argument("--new", required=True, help="commit after")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"old": _extract(args.old, Path(tmp) / "old"), "new": _extract(args.new, Path(tmp) / "new")}
        times: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
        values: dict[str, dict[str, object]] = {}
        loads = []
        for _ in range(args.rounds):
            for side in ("old", "new"):
                t, v = _run(trees[side])
                values[side] = v
                for name, seconds in t.items():
                    times[side].setdefault(name, []).append(seconds)
            loads.append(os.getloadavg()[0])
    print(
        f"{args.rounds} interleaved runs each; 1-min load average {statistics.median(loads):.2f} (median)\n"
    )
    print("| case | old ms | new ms | new/old | numbers |")
    print("|---|---:|---:|---:|---|")
    for name in times["old"]:
        old, new = statistics.median(times["old"][name]), statistics.median(times["new"][name])
        change = _change(values["old"][name], values["new"][name])
        print(f"| {name} | {old * 1e3:.1f} | {new * 1e3:.1f} | {new / old:.2f} | {change} |")
    print("\n" + json.dumps({"old": args.old, "new": args.new, "rounds": args.rounds}))


if __name__ == "__main__":
    main()
