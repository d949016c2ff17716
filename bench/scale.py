"""Benchmark: the first round with 10^6 registered clients.

Builds a task of N = 10^6 clients on a generated training set of 2·N examples (10 features, 4 classes; the
``iid`` or ``fixed`` partition gives every client 2 examples), then times, each in a fresh step:

- partition building (:func:`ampfl.fl.data.partition_clients`);
- ``sampler.sample`` for round 0: random check-in (p = 0.01) and Poisson (q = 0.001) over all N clients;
- local batch indices of the round's participants (``local_batches`` / ``poisson_local_batches``);
- algorithm set-up and the first round of ``dp_fedavg`` (Poisson cohort) and ``dp_dsgd_rp`` (logreg), after
  a warm-up round on 10 clients that pays torch's one-off start-up (it is not per-client work);

and the peak resident memory of the process (``resource.getrusage``; the generated data are 80 MB of it).

Run: ``OMP_NUM_THREADS=1 .venv/bin/python bench/scale.py [--clients N] [--per-client E]
[--scheme iid|fixed|label_skew|dirichlet] [--classes C] [--labels-per-client L]`` (E examples per client,
default 2; C labels drawn uniformly, default 4; L for ``label_skew``, default 2; ``dirichlet`` needs more
examples, e.g. ``--clients 100000 --per-client 50``, or it refuses: a client stays empty). It uses only
the public API, so ``PYTHONPATH=<older checkout>/src`` times an older version the same way (before/after).
Target: the first round (partition + set-up + round 0) under 1 s, memory under 1 GB.

``--ks 100,1000,10000 [--models logreg,mlp] [--algorithm fedavg|dp_fedavg] [--round-examples E]`` times
instead the steady round against the cohort size K: N = max(10 000, K) clients with E examples each
(default 20), a fixed cohort of K, Q = 5 steps of b = 10 (the defaults), logistic regression and MLP(64)
on the generated data; per K the median CPU and wall time of a round (after a warm-up round; the K timed
interleaved, at least 3 repetitions), its ratio to the previous K, the time per client and the process's
peak resident memory after the warm-up rounds up to that K (K ascending, so about that of the largest K).
"""

from __future__ import annotations

import os

# as the ampfl command sets it (ampfl.cli._prefer_huge_pages), before torch is imported
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

import argparse
import resource
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ampfl.fl.algorithms.dp_dsgd_rp import DPDSGDRandomParticipation
from ampfl.fl.algorithms.dp_fedavg import DPFedAvg
from ampfl.fl.data import Dataset, partition_clients
from ampfl.fl.sampling import PoissonSampler, RandomCheckInSampler, local_batches, poisson_local_batches
from ampfl.fl.task import Task


def _timed(label: str, fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - start
    print(f"  {label:<44s} {seconds * 1e3:9.1f} ms")
    return out, seconds


def _peak_mb() -> float:
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024.0 if sys.platform != "darwin" else kb / 2**20


def _dataset(n: int, classes: int = 4) -> Dataset:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 10), dtype=np.float32)
    y = rng.integers(0, classes, size=n).astype(np.int64)
    return Dataset("scale", x, y, x[:1000].copy(), y[:1000].copy(), num_classes=classes, source="generated")


def rounds_against_k(
    ks: list[int], models: list[str], algorithm: str, examples: int, repeats: int, hidden: int = 64
) -> list[dict[str, float]]:
    """Median CPU / wall ms of a steady round for each model and cohort size K (module docstring).

    The cohort sizes are timed interleaved: each repetition runs one timed block per K (1 to 100 rounds,
    about 10⁴ client-updates, their mean), so that load bursts and the heap's state hit
    all K alike and the ratio between two K is not the drift between two stretches of time. Warm-up rounds
    run in ascending K first; the peak RSS after each is that of the largest K so far."""
    from ampfl.fl.algorithms.fedavg import FedAvg

    rows: list[dict[str, float]] = []
    n = max(10_000, *ks)
    ds = _dataset(examples * n)
    parts = partition_clients(ds.y_train, scheme="iid", num_clients=n, seed=0, samples_per_client=examples)
    for name in models:
        options = {"hidden": [hidden]} if name == "mlp" else {}
        task = Task(dataset=ds, client_indices=parts, model=name, model_options=options)
        algos: dict[int, Any] = {}
        peak: dict[int, float] = {}
        for k in sorted(ks):
            if algorithm == "fedavg":
                algos[k] = FedAvg(FedAvg.Params(cohort_size=k), task, seed=0)
            else:
                algos[k] = DPFedAvg(
                    DPFedAvg.Params(cohort_size=k, noise_multiplier=1.0, clip=0.1), task, seed=0
                )
            algos[k].run_round(0)
            peak[k] = _peak_mb()
        cpu: dict[int, list[float]] = {k: [] for k in algos}
        wall: dict[int, list[float]] = {k: [] for k in algos}
        next_round = dict.fromkeys(algos, 1)
        for _ in range(max(3, repeats)):
            for k, algo in algos.items():
                block = max(1, min(100, 100_000 // (10 * k)))
                c0, w0 = time.process_time(), time.perf_counter()
                for _ in range(block):
                    algo.run_round(next_round[k])
                    next_round[k] += 1
                cpu[k].append((time.process_time() - c0) / block)
                wall[k].append((time.perf_counter() - w0) / block)
        previous = None
        for k in algos:
            row = {
                "K": k,
                "cpu_ms": 1e3 * float(np.median(cpu[k])),
                "wall_ms": 1e3 * float(np.median(wall[k])),
            }
            row["ratio"] = row["cpu_ms"] / previous if previous else float("nan")
            previous = row["cpu_ms"]
            rows.append(row)
            print(
                f"  {name:6s} K={k:7d}  CPU {row['cpu_ms']:9.1f} ms (x{row['ratio']:5.2f})  wall "
                f"{row['wall_ms']:9.1f} ms  {1e3 * row['cpu_ms'] / k:7.1f} us/client CPU  "
                f"peak RSS {peak[k]:6.0f} MB",
                flush=True,
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1_000_000)
    parser.add_argument("--scheme", choices=("iid", "fixed", "label_skew", "dirichlet"), default="iid")
    parser.add_argument("--per-client", type=int, default=2, help="examples per client")
    parser.add_argument("--classes", type=int, default=4, help="labels, drawn uniformly")
    parser.add_argument("--labels-per-client", type=int, default=2, help="label_skew only")
    parser.add_argument("--ks", default=None, help="time steady rounds at these cohort sizes instead")
    parser.add_argument("--models", default="logreg,mlp", help="with --ks")
    parser.add_argument("--algorithm", choices=("fedavg", "dp_fedavg"), default="fedavg", help="with --ks")
    parser.add_argument("--round-examples", type=int, default=20, help="examples per client, with --ks")
    parser.add_argument(
        "--repeats", type=int, default=5, help="timed repetitions per K (at least 3), with --ks"
    )
    parser.add_argument("--hidden", type=int, default=64, help="the MLP's hidden width, with --ks")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.ks:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"{args.algorithm} rounds against K, 1 thread, 1-min load average {load:.1f}")
        ks = [int(k) for k in args.ks.split(",")]
        rounds_against_k(
            ks, args.models.split(","), args.algorithm, args.round_examples, args.repeats, args.hidden
        )
        return
    n_clients, per = args.clients, args.per_client
    ds = _dataset(per * n_clients, args.classes)
    print(
        f"N = {n_clients} clients, {per * n_clients} examples, {args.classes} classes, scheme {args.scheme}"
        + (f" ({args.labels_per_client} labels per client)" if args.scheme == "label_skew" else "")
        + "; times in ms"
    )
    print(f"  memory after generating the data: {_peak_mb():.0f} MB")
    parts, t_part = _timed(
        "partition_clients",
        lambda: partition_clients(
            ds.y_train,
            scheme=args.scheme,
            num_clients=n_clients,
            seed=0,
            samples_per_client=per,
            alpha=1.0,
            labels_per_client=args.labels_per_client,
        ),
    )
    task = Task(dataset=ds, client_indices=parts, model="logreg")
    _timed("task.client_sizes()", task.client_sizes)
    rng = np.random.default_rng(1)
    checkin, _ = _timed("RandomCheckInSampler(p=0.01).sample", lambda: RandomCheckInSampler(n_clients, 0.01)
                        .sample(0, rng))  # fmt: skip
    poisson, _ = _timed("PoissonSampler(q=0.001).sample", lambda: PoissonSampler(n_clients, 0.001)
                        .sample(0, rng))  # fmt: skip
    _timed(f"poisson_local_batches ({len(checkin)} clients)",
           lambda: poisson_local_batches(parts, checkin, sampling_rate=0.5, rng=rng))  # fmt: skip
    for scheme in ("wr", "wor"):
        _timed(
            f"local_batches {scheme} ({len(poisson)} clients)",
            lambda s=scheme: local_batches(parts, poisson, num_steps=1, batch_size=2, scheme=s, rng=rng),
        )
    # One-off torch start-up (the first autograd call imports torch._dynamo, about 1-2 s in any run of any
    # size): paid here on a 10-client task so that the rounds below time the per-client work.
    small = Task(dataset=ds, client_indices=[np.arange(2 * i, 2 * i + 2) for i in range(10)], model="logreg")

    def warm_up() -> None:
        DPFedAvg(DPFedAvg.Params(cohort_size=2, noise_multiplier=1.0), small, seed=0).run_round(0)
        rp = DPDSGDRandomParticipation.Params(
            participation=1.0, sampling_rate=1.0, noise_multiplier=1.0, local_dataset_size=per
        )  # public constants: the server divides only by declared sizes
        DPDSGDRandomParticipation(rp, small, seed=0).run_round(0)

    _timed("torch warm-up (10 clients, both algorithms)", warm_up)
    totals = {}
    for cls, options in (
        (DPFedAvg, {"client_sampling": "poisson", "sampling_rate": 0.001, "noise_multiplier": 1.0,
                    "num_local_steps": 1, "batch_size": 2, "expected_clients": max(0.001 * n_clients, 1.0)}),
        (DPDSGDRandomParticipation, {"participation": 0.01, "sampling_rate": 0.5, "noise_multiplier": 1.0,
                                     "local_dataset_size": per}),
    ):  # fmt: skip
        print(f"{cls.name}:")
        algo, t_init = _timed(
            "set-up", lambda cls=cls, options=options: cls(cls.Params(**options), task, seed=0)
        )
        _, t_round = _timed("round 0", lambda algo=algo: algo.run_round(0))
        totals[cls.name] = t_part + t_init + t_round
    print("first round (partition + set-up + round 0), target < 1000 ms:")
    for name, seconds in totals.items():
        print(f"  {name:<44s} {seconds * 1e3:9.1f} ms")
    print(f"peak resident memory {_peak_mb():.0f} MB (target < 1024 MB)")


if __name__ == "__main__":
    main()
