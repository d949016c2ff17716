"""Record-level DP-SGD: ampfl's ``dp_sgd_split`` against Opacus, CPU time per step, in one process.

One DP-SGD step = Poisson sampling of the training set at rate q = B/N (expected batch B = 256), per-example
gradients clipped to C, their sum plus N(0, z²C²) noise, divided by the public constant B, times the learning
rate η. The same step runs through

* ``ampfl``: :class:`ampfl.fl.algorithms.dp_sgd_partition.DPSGDPartition` with one example per client, d = 1,
  Q = 1, b = 1, local rate 1, ``server_learning_rate`` η, ``expected_clients`` B: its fast path
  (:mod:`ampfl.fl.engine.per_example`); ``ampfl-before``: the same object with ``fast_path = False`` (each
  sampled example a client with its own copy of the weights, masks and ``clip_parts``: the path before the
  fast path);
* ``opacus``: Opacus's ``PrivacyEngine.make_private`` (hooks mode, Poisson sampling in its ``DPDataLoader``,
  ``torch.optim.SGD`` at η) on the same network with the same initial weights and the same data.

The contenders' steps alternate (one step of each per repetition, after one warm-up step each) so that load
bursts from other jobs hit them alike; ``time.process_time`` is read around each step (CPU seconds: what a
loaded machine inflates least) and the medians are reported with their ratio, the 1-minute load average and
``torch.set_num_threads(1)`` for both. Then each runs ``--steps`` steps from the same start for each of
``--seeds`` seeds and reports test accuracy (mean ± sd over the seeds). Results: docs/performance.md
("DP-SGD against Opacus").

Workloads: ``cnn`` (004's Fig. 8 CNN on Fashion-MNIST, 60 000 examples), ``logreg`` (logistic regression on
UCI Adult, 32 561 examples); a dataset that cannot be loaded falls back to scikit-learn's digits (logreg) or
is skipped (cnn), and the output says so.

Usage: ``.venv/bin/python bench/opacus.py [--models cnn,logreg] [--repeats 30] [--before-repeats 3]
[--steps 200] [--seeds 3] [--clip 1.0] [--noise 1.0]``. Needs ``opacus`` (``pip install 'ampfl[bench]'``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# This file is named like the package it compares against: keep its folder off the import path.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402
import torch  # noqa: E402

from ampfl.fl.algorithms.dp_sgd_partition import DPSGDPartition  # noqa: E402
from ampfl.fl.config import PrivacyConfig  # noqa: E402
from ampfl.fl.data import Dataset, load_dataset  # noqa: E402
from ampfl.fl.data.partitions import ClientPartition  # noqa: E402
from ampfl.fl.task import Task  # noqa: E402

BATCH = 256
DATASET = {"cnn": "fmnist", "logreg": "adult"}
LEARNING_RATE = {"cnn": 1.0, "logreg": 4.0}


def _dataset(model: str) -> Dataset | None:
    try:
        return load_dataset(DATASET[model])
    except Exception as exc:  # a missing download: say so and fall back
        print(f"{model}: {DATASET[model]} unavailable ({exc}); ", end="")
        if model == "cnn":
            print("skipped")
            return None
        print("using digits")
        return load_dataset("digits")


def _ampfl(ds: Dataset, model: str, seed: int, clip: float, noise: float) -> DPSGDPartition:
    n = ds.x_train.shape[0]
    task = Task(
        ds, ClientPartition(np.arange(n, dtype=np.int64), np.arange(n + 1, dtype=np.int64)), model=model
    )
    params = DPSGDPartition.Params(
        num_local_steps=1,
        batch_size=1,
        learning_rate=1.0,
        server_learning_rate=LEARNING_RATE[model],
        sampling="poisson",
        sampling_rate=BATCH / n,
        expected_clients=float(BATCH),
        clip=clip,
        noise_multiplier=noise,
    )
    privacy = PrivacyConfig.model_validate({"reproducible": True})
    return DPSGDPartition(params, task, seed=seed, privacy=privacy)


class _Opacus:
    """Opacus DP-SGD on a copy of the ampfl algorithm's network and initial weights."""

    def __init__(self, algo: DPSGDPartition, ds: Dataset, seed: int, clip: float, noise: float, lr: float):
        import copy
        import warnings

        from opacus import PrivacyEngine

        torch.manual_seed(seed)
        self.fl_module = algo.model.module
        module = copy.deepcopy(algo.model.module)
        with torch.no_grad():
            for (_, p), v in zip(
                module.named_parameters(), algo.model.spec.unflatten(algo.global_params).values(), strict=True
            ):
                p.copy_(v)
        data = torch.utils.data.TensorDataset(algo.x_train, algo.y_train)
        loader = torch.utils.data.DataLoader(data, batch_size=BATCH)
        optimizer = torch.optim.SGD(module.parameters(), lr=lr)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.module, self.optimizer, self.loader = PrivacyEngine().make_private(
                module=module,
                optimizer=optimizer,
                data_loader=loader,
                noise_multiplier=noise,
                max_grad_norm=clip,
                poisson_sampling=True,
            )
        self.batches = iter(self.loader)

    def step(self) -> None:
        try:
            x, y = next(self.batches)
        except StopIteration:
            self.batches = iter(self.loader)
            x, y = next(self.batches)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.fl_module.per_sample_loss(self.module(x), y).mean()
        loss.backward()
        self.optimizer.step()

    def accuracy(self, x: torch.Tensor, y: torch.Tensor) -> float:
        with torch.no_grad():
            predicted = self.fl_module.predict(self.module._module(x))
        return float((predicted == y).to(torch.float64).mean())


def _timed(fns: dict[str, Callable[[], Any]], repeats: dict[str, int]) -> dict[str, float]:
    """Median CPU seconds per call of each function, the calls alternating (one warm-up call each)."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    for rep in range(max(repeats.values())):
        for name, fn in fns.items():
            if rep < repeats[name]:
                t0 = time.process_time()
                fn()
                times[name].append(time.process_time() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def _stepper(algo: DPSGDPartition) -> Callable[[], object]:
    """One call = the algorithm's next round (one DP-SGD step)."""
    count = iter(range(10**9))
    return lambda: algo.run_round(next(count))


def _accuracy(ds: Dataset, model: str, args: argparse.Namespace) -> dict[str, list[float]]:
    scores: dict[str, list[float]] = {"ampfl": [], "opacus": []}
    for seed in range(args.seeds):
        algo = _ampfl(ds, model, seed, args.clip, args.noise)
        other = _Opacus(algo, ds, seed, args.clip, args.noise, LEARNING_RATE[model])
        for r in range(args.steps):
            algo.run_round(r)
            other.step()
        scores["ampfl"].append(algo.global_accuracy())
        scores["opacus"].append(other.accuracy(algo.x_test, algo.y_test))
    return scores


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="cnn,logreg")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument(
        "--before-repeats", type=int, default=3, help="steps of the path without the fast path (0: skip)"
    )
    parser.add_argument("--steps", type=int, default=200, help="steps of each accuracy run (0: skip)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--noise", type=float, default=1.0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    import warnings

    import opacus

    # Opacus's hooks warn on every backward pass when the input does not require gradients
    warnings.filterwarnings("ignore", message="Full backward hook is firing")

    print(
        f"torch {torch.__version__}, opacus {opacus.__version__}, threads 1, expected batch {BATCH}, "
        f"C {args.clip}, z {args.noise}, load average {os.getloadavg()[0]:.2f}"
    )
    for model in args.models.split(","):
        ds = _dataset(model)
        if ds is None:
            continue
        algo = _ampfl(ds, model, 0, args.clip, args.noise)
        assert algo.fast_path
        before = _ampfl(ds, model, 0, args.clip, args.noise)
        before.fast_path = False
        other = _Opacus(algo, ds, 0, args.clip, args.noise, LEARNING_RATE[model])
        fns: dict[str, Callable[[], Any]] = {"ampfl": _stepper(algo), "opacus": other.step}
        repeats = {"ampfl": args.repeats, "opacus": args.repeats}
        if args.before_repeats > 0:
            fns["ampfl-before"] = _stepper(before)
            repeats["ampfl-before"] = args.before_repeats
        t = _timed(fns, repeats)
        print(
            f"\n{model} on {ds.name} (N = {ds.x_train.shape[0]}, d = {algo.model.dim}), load average "
            f"{os.getloadavg()[0]:.2f}"
        )
        print("| path | CPU-ms per step (median) | ÷ Opacus |")
        print("|---|---:|---:|")
        for name, seconds in t.items():
            print(f"| {name} | {1e3 * seconds:.1f} | {seconds / t['opacus']:.2f} |")
        if args.steps > 0:
            acc = _accuracy(ds, model, args)
            for name, values in acc.items():
                sd = statistics.stdev(values) if len(values) > 1 else 0.0
                print(
                    f"accuracy after {args.steps} steps, {name}: {np.mean(values):.4f} ± {sd:.4f} "
                    f"({', '.join(f'{v:.4f}' for v in values)})"
                )
        print(f"load average {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
